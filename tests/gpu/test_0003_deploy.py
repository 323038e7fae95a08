"""0003 against a running PD deployment: sglang's serving benchmark through the router, decode and
prefill, for the A/B of ``SGLANG_OPT_MHC_BF16_GEMM``.

The switch is read when the servers load their weights, so each setting is one run of the check, with
the PD pair and the router co-restarted between runs (restarting decode alone stalls NIXL transfers
silently). One test per check that patchset.toml's ``[[patch.gpu_verification]]`` rows of
``dsv4-mhc-bf16-gemm`` name:

- ``test_serving_ab``: decode, random 1024-token prompts and outputs, 10 prompts per concurrency
  slot, at C1, C64 and C96; then prefill, 64 prompts of 8,192-32,768 tokens (``--random-range-ratio
  0.25``) with one output token, one at a time. Every request served; with ``$PATCHTOOL_GPU_BASELINE``
  (the results file of the run with the other setting) output throughput not below it at any
  concurrency and mean TTFT on the long prompts not above it.

It needs the router at ``$PATCHTOOL_GPU_DEPLOYMENT`` and sglang's benchmark in this interpreter.
"""

from __future__ import annotations

from pathlib import Path

import gpu_deploy
import gpu_support
import pytest

CONCURRENCIES = (1, 64, 96)
RANDOM_1K = ("--dataset-name", "random", "--random-input-len", "1024", "--random-output-len", "1024")
PREFILL = (
    "--dataset-name",
    "random",
    "--random-input-len",
    "32768",
    "--random-range-ratio",
    "0.25",
    "--random-output-len",
    "1",
    "--num-prompts",
    "64",
    "--max-concurrency",
    "1",
)
# One run at the field's ~18 + 1.05 x batch ms decode step: 10 waves of 1024 tokens, ~20 min at C96.
TIMEOUT_S = 3600.0


def test_serving_ab(record, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    router = gpu_support.require_deployment().router
    gpu_deploy.require_benchmark()
    baseline = gpu_deploy.baseline_for(request.node.nodeid)
    figures: dict[str, int | float | str] = {"compared_with": baseline.path if baseline else ""}
    problems = []
    runs = [
        (f"c{c}", c * 10, [*RANDOM_1K, "--num-prompts", str(c * 10), "--max-concurrency", str(c)])
        for c in CONCURRENCIES
    ] + [("prefill", 64, list(PREFILL))]
    for name, prompts, args in runs:
        run = gpu_deploy.serving_benchmark(router, args, workdir=tmp_path, timeout_s=TIMEOUT_S)
        figures |= run.figures(name)
        if (problem := run.problem(prompts)) is not None:
            problems.append(f"{name}: {problem}")
        if run.hung:
            break
    throughput = [f"output_tok_s_c{c}" for c in CONCURRENCIES]
    if baseline is not None:
        figures |= baseline.ratios(figures, [*throughput, "mean_ttft_ms_prefill"])
    record(**figures)
    assert not problems, problems
    if baseline is not None:
        problems += baseline.worse(figures, higher=throughput, lower=["mean_ttft_ms_prefill"])
    assert not problems, problems
