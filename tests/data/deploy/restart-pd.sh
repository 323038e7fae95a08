#!/usr/bin/env bash
# Runbook: restart the PD pair and the router together, in this order (never decode alone).
set -euo pipefail
systemctl restart sglang-prefill.service sglang-decode.service sglang-router.service
kubectl rollout restart deployment/sglang-prefill deployment/sglang-decode deployment/sglang-router
