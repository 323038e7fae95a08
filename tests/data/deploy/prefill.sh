#!/usr/bin/env bash
# Production prefill worker: DeepSeek-V4-Flash NVFP4, TP4, PD with NIXL.
set -euo pipefail
export CUDA_VISIBLE_DEVICES=0,1,2,3
export SGLANG_SM120_FLASHMLA_BACKEND=flashinfer
exec python3 -m sglang.launch_server \
  --model-path nvidia/DeepSeek-V4-Flash-NVFP4 \
  --tp-size 4 \
  --enable-deepseek-v4-bf16-indexer \
  --disaggregation-mode prefill \
  --disaggregation-transfer-backend nixl \
  --max-queued-requests 32 \
  --disable-overlap-schedule \
  --enable-hierarchical-cache \
  --hicache-ratio 2.0 \
  --host 0.0.0.0 --port 30000
