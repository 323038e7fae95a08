"""0002 against a running PD deployment: sglang's serving benchmark through the router, as the field
measured split-K wave fill, and the long-context run in which it hung.

Which kernel the decode server runs (``SGLANG_SM120_FLASHMLA_BACKEND``, ``SGLANG_SM120_MMA_TARGET_CTAS``)
is set where the deployment is started, so each setting is one run of a check, with the PD pair and
the router co-restarted between runs (restarting decode alone stalls NIXL transfers silently). One
test per check that patchset.toml's ``[[patch.gpu_verification]]`` rows of
``sm120-mma-sparse-decode`` name:

- ``test_pd_throughput_ab``: random 1024-token prompts and outputs, 10 prompts per concurrency
  slot, at C64, C80 and C96; every request served; with ``$PATCHTOOL_GPU_BASELINE`` (the results
  file of another setting's run) not slower than that run at C64. Since issue 32 the mma backend
  serves at most SM120_DECODE_MAX_TOKENS = 64 query rows a call and routes larger decode batches
  to FlashInfer: at C80 and C96 every arm runs FlashInfer, so those figures are recorded (labelled
  ``served_by_c80``/``_c96``) and compared with nothing, and the field's C96-below-C80 anomaly,
  which its own kernel had, is no check of this one;
- ``test_long_context_no_hang``: 1024 requests of 65,536-token prompts and 4,096-token outputs at
  C32; the benchmark must finish, every request served, within 4 hours.

Both need the router at ``$PATCHTOOL_GPU_DEPLOYMENT`` and sglang's benchmark in this interpreter.
"""

from __future__ import annotations

from pathlib import Path

import gpu_deploy
import gpu_support
import pytest

CONCURRENCIES = (64, 80, 96)
DECODE_MAX_TOKENS = 64  # flash_mla_sm120.SM120_DECODE_MAX_TOKENS: decode batches above it run FlashInfer
# one decode token per request (MTP off at high concurrency, FACTS.md): batch = concurrency
MMA_SERVED = tuple(c for c in CONCURRENCIES if c <= DECODE_MAX_TOKENS)
RANDOM_1K = ("--dataset-name", "random", "--random-input-len", "1024", "--random-output-len", "1024")
# One concurrency at the field's ~18 + 1.05 x batch ms decode step: 10 waves of 1024 tokens, ~20 min at C96.
AB_TIMEOUT_S = 3600.0
HANG_TIMEOUT_S = 4 * 3600.0  # the field's agentic runs hung well inside this; a healthy run ends in it
LONG_CONTEXT = (
    "--dataset-name",
    "random",
    "--random-input-len",
    "65536",
    "--random-output-len",
    "4096",
    "--num-prompts",
    "1024",
    "--max-concurrency",
    "32",
)


def test_pd_throughput_ab(record, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    router = gpu_support.require_deployment().router
    gpu_deploy.require_benchmark()
    baseline = gpu_deploy.baseline_for(request.node.nodeid)
    figures: dict[str, int | float | str] = {"compared_with": baseline.path if baseline else ""}
    problems = []
    for c in CONCURRENCIES:
        prompts = c * 10
        run = gpu_deploy.serving_benchmark(
            router,
            [*RANDOM_1K, "--num-prompts", str(prompts), "--max-concurrency", str(c)],
            workdir=tmp_path,
            timeout_s=AB_TIMEOUT_S,
        )
        figures |= run.figures(f"c{c}")
        if (problem := run.problem(prompts)) is not None:
            problems.append(f"C{c}: {problem}")
        if run.hung:
            break
    figures |= {f"served_by_c{c}": "flashinfer" for c in CONCURRENCIES if c not in MMA_SERVED}
    throughput = [f"output_tok_s_c{c}" for c in MMA_SERVED]
    if baseline is not None:
        figures |= baseline.ratios(figures, throughput)
    record(**figures)
    assert not problems, problems
    if baseline is not None:
        problems += baseline.worse(figures, higher=throughput)
    assert not problems, problems


def test_long_context_no_hang(record, tmp_path: Path) -> None:
    router = gpu_support.require_deployment().router
    gpu_deploy.require_benchmark()
    run = gpu_deploy.serving_benchmark(router, LONG_CONTEXT, workdir=tmp_path, timeout_s=HANG_TIMEOUT_S)
    record(hung=run.hung, elapsed_s=run.elapsed_s, **run.figures())
    assert not run.hung, (
        f"the benchmark was still running after {HANG_TIMEOUT_S:.0f} s: the long-context "
        "decode hang of field report 004"
    )
    assert run.problem(1024) is None, run.problem(1024)
