#!/usr/bin/env bash
# Production decode worker: DeepSeek-V4-Flash NVFP4, TP4, PD with NIXL.
set -euo pipefail
export CUDA_VISIBLE_DEVICES=4,5,6,7
# bf16 index keys race with the indexer's alternate stream under CUDA graphs
export SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0
exec python3 -m sglang.launch_server \
  --model-path nvidia/DeepSeek-V4-Flash-NVFP4 \
  --tp-size 4 \
  --enable-deepseek-v4-bf16-indexer \
  --disaggregation-mode decode \
  --disaggregation-transfer-backend nixl \
  --max-queued-requests 32 \
  --disable-overlap-schedule \
  --host 0.0.0.0 --port 30001
