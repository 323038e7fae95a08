"""The deployment-scale GPU checks on the CPU: the one gate, what it reads from the environment and
what it skips or fails, and what 0004 reads from the prefill server. Also the ncu check's reading of
ncu's table."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from test_gpu_runner import GPU

sys.path.insert(0, str(GPU))

import gpu_support

DEPLOY_VARIABLES = ("PATCHTOOL_GPU_DEPLOYMENT", "PATCHTOOL_GPU_PD_SERVERS")


# -- the gate -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("environ", "want"), [
    ({}, gpu_support.Deployment()),
    ({"PATCHTOOL_GPU_DEPLOYMENT": "http://router:8000/"}, gpu_support.Deployment(router="http://router:8000")),
    ({"PATCHTOOL_GPU_PD_SERVERS": " http://p:30000  https://d:30001/ "},
     gpu_support.Deployment(prefill="http://p:30000", decode="https://d:30001")),
])
def test_the_deployment_is_read_from_two_variables(environ: dict[str, str], want: gpu_support.Deployment) -> None:
    assert gpu_support.Deployment.from_env(environ) == want


@pytest.mark.parametrize(("environ", "message"), [
    ({"PATCHTOOL_GPU_DEPLOYMENT": "router:8000"},
     "$PATCHTOOL_GPU_DEPLOYMENT: 'router:8000' is not an http:// or https:// URL"),
    ({"PATCHTOOL_GPU_PD_SERVERS": "http://p:30000"},
     "$PATCHTOOL_GPU_PD_SERVERS is 'http://p:30000': write 'PREFILL_URL DECODE_URL'"),
    ({"PATCHTOOL_GPU_PD_SERVERS": "http://p:30000 d:30001"},
     "$PATCHTOOL_GPU_PD_SERVERS: 'd:30001' is not an http:// or https:// URL"),
])
def test_a_malformed_deployment_variable_is_an_error_naming_it(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        gpu_support.Deployment.from_env(environ)
    assert str(exc.value) == message


def passes_gate(**needs: bool) -> gpu_support.Deployment:
    """``require_deployment``, where a skip is this test's failure rather than its skip."""
    try:
        return gpu_support.require_deployment(**needs)
    except pytest.skip.Exception as exc:
        pytest.fail(f"the gate skipped: {exc}")


def test_each_check_is_gated_on_what_it_drives(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in DEPLOY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATCHTOOL_GPU_PD_SERVERS", "http://p:30000 http://d:30001")
    with pytest.raises(pytest.skip.Exception, match=r"^needs a running deployment, not run: set \$PATCHTOOL_GPU_DEPLOYMENT"):
        gpu_support.require_deployment()
    assert passes_gate(pd_servers=True).decode == "http://d:30001"
    monkeypatch.setenv("PATCHTOOL_GPU_DEPLOYMENT", "http://router:8000")
    monkeypatch.delenv("PATCHTOOL_GPU_PD_SERVERS")
    assert passes_gate().router == "http://router:8000"
    with pytest.raises(pytest.skip.Exception, match=r"^needs a running deployment, not run: set \$PATCHTOOL_GPU_PD_SERVERS"):
        gpu_support.require_deployment(pd_servers=True)
    monkeypatch.setenv("PATCHTOOL_GPU_DEPLOYMENT", "router:8000")
    with pytest.raises(pytest.fail.Exception, match="is not an http"):  # set but wrong: a failure, not a skip
        gpu_support.require_deployment()


def test_a_tool_is_found_or_the_check_is_skipped_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if Path("/usr/local/cuda/bin/ncu").exists():
        pytest.skip("this machine has ncu under /usr/local/cuda, where the gate always looks")
    monkeypatch.setenv("PATH", str(tmp_path))
    for name in ("NCU", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^needs ncu, not run: not in \$NCU, on PATH"):
        gpu_support.require_tool("ncu")
    (tmp_path / "ncu").write_text("#!/bin/sh\n")
    (tmp_path / "ncu").chmod(0o755)
    assert gpu_support.require_tool("ncu") == str(tmp_path / "ncu")


# -- 0004's caps come from the prefill server ------------------------------------------------------

def test_the_admission_caps_are_what_the_prefill_server_reports() -> None:
    pd = importlib.import_module("test_0004_pd_admission")
    info = {"max_queued_requests": 8, "max_queued_tokens": 32768, "disaggregation_bootstrap_port": 8998}
    assert pd.admission_caps(info) == (8, 32768, 8998)
    with pytest.raises(ValueError, match=r"^the prefill server reports no max_queued_tokens: is it the patched wheel\?$"):
        pd.admission_caps({"max_queued_requests": 8, "disaggregation_bootstrap_port": 8998})
    with pytest.raises(ValueError, match="^the prefill server has no max_queued_requests set: launch it with "):
        pd.admission_caps({**info, "max_queued_requests": None})


# -- ncu's table -----------------------------------------------------------------------------------

NCU_HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
              '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name",'
              '"Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"')


def ncu_table(launches: list[tuple[str, dict[tuple[str, str], tuple[str, str]]]]) -> str:
    """``ncu --import R --csv --page details --print-units base`` as ncu 2025 writes it: its own
    lines first, one row per metric with a trailing comma, and rule rows without a metric."""
    lines = ["==PROF== Connected to process 4242 (/usr/bin/python3)", NCU_HEADER]
    for i, (kernel, metrics) in enumerate(launches):
        head = f'"{i}","4242","python3","127.0.0.1","{kernel}","1","7","(128, 1, 1)","(64, 1, 8)","0","12.0"'
        lines += [f'{head},"{section}","{metric}","{unit}","{value}",' for (section, metric), (unit, value) in metrics.items()]
        lines.append(f'{head},"LaunchStats","","","","LaunchConfiguration","OPT","A wave of thread blocks ...","global","50"')
    return "\n".join(lines) + "\n"


def split_metrics(registers: int, shared: str = "36928", occupancy: str = "16.67") -> dict[tuple[str, str], tuple[str, str]]:
    return {("Launch Statistics", "Registers Per Thread"): ("register/thread", str(registers)),
            ("Launch Statistics", "Dynamic Shared Memory Per Block"): ("byte/block", shared),
            ("Launch Statistics", "Static Shared Memory Per Block"): ("byte/block", "0"),
            ("Occupancy", "Block Limit Registers"): ("block", "2"),
            ("Occupancy", "Block Limit Shared Mem"): ("block", "2"),
            ("Occupancy", "Theoretical Occupancy"): ("%", occupancy)}


COMBINE = {("Launch Statistics", "Registers Per Thread"): ("register/thread", "40"),
           ("Launch Statistics", "Dynamic Shared Memory Per Block"): ("byte/block", "0")}


@pytest.fixture(scope="module")
def mma_checks() -> Any:
    return importlib.import_module("test_0002_mma")


def launches_of(*launches: tuple[str, dict[tuple[str, str], tuple[str, str]]]) -> list[gpu_support.NcuLaunch]:
    return gpu_support.ncu_launches(ncu_table(list(launches)))


def test_ncu_figures_are_read_from_its_table(mma_checks: Any) -> None:
    launches = launches_of(("_mma_sparse_decode_split", split_metrics(252)),
                           ("_mma_sparse_decode_split", split_metrics(248, shared="36,928")),
                           ("_mma_sparse_decode_split", split_metrics(248)),
                           ("_mma_sparse_decode_combine", COMBINE))
    assert [launch.id for launch in launches] == [0, 1, 2, 3]
    seen = mma_checks.ncu_resources(launches)
    assert seen == {"direct_registers": 252, "partial_registers": 248, "split_dynamic_shared_b": 36928,
                    "block_limit_registers": 2, "block_limit_shared_mem": 2, "theoretical_occupancy_pct": 16.7}
    assert seen == mma_checks.NCU_WANT  # what the check compares with: patchset.toml's expect


def test_ncu_figures_that_are_off_do_not_match(mma_checks: Any) -> None:
    """The field kernel's 60 KB / 1 CTA per SM is not this kernel's: the check's comparison fails."""
    def field(registers: int) -> dict[tuple[str, str], tuple[str, str]]:
        return {**split_metrics(registers, shared="61440"), ("Occupancy", "Block Limit Shared Mem"): ("block", "1")}

    seen = mma_checks.ncu_resources(launches_of(("_mma_sparse_decode_split", field(252)),
                                                ("_mma_sparse_decode_split", field(248)),
                                                ("_mma_sparse_decode_split", field(248)),
                                                ("_mma_sparse_decode_combine", COMBINE)))
    off = {k: (v, mma_checks.NCU_WANT[k]) for k, v in seen.items() if v != mma_checks.NCU_WANT[k]}
    assert off == {"split_dynamic_shared_b": (61440, 36928), "block_limit_shared_mem": (1, 2)}


@pytest.mark.parametrize(("launches", "message"), [
    ([("_mma_sparse_decode_split", split_metrics(252))] * 3,
     "ncu profiled ['_mma_sparse_decode_split', '_mma_sparse_decode_split', '_mma_sparse_decode_split'], "
     "not 3 split launches and a combine"),
    ([("_mma_sparse_decode_split", split_metrics(252)), ("_mma_sparse_decode_split", split_metrics(248)),
      ("_mma_sparse_decode_split", split_metrics(240)), ("_mma_sparse_decode_combine", COMBINE)],
     "the two c4 partial launches have 248 and 240 registers per thread"),
    ([("_mma_sparse_decode_split", split_metrics(252)), ("_mma_sparse_decode_split", split_metrics(248)),
      ("_mma_sparse_decode_split", split_metrics(248, occupancy="8.33")), ("_mma_sparse_decode_combine", COMBINE)],
     "the split launches differ in shared memory, block limits or occupancy"),
    ([("_mma_sparse_decode_split", {**split_metrics(252), ("Launch Statistics", "Dynamic Shared Memory Per Block"):
                                    ("Kbyte/block", "36.93")}),
      ("_mma_sparse_decode_split", split_metrics(248)), ("_mma_sparse_decode_split", split_metrics(248)),
      ("_mma_sparse_decode_combine", COMBINE)],
     "ncu launch 0 (_mma_sparse_decode_split): Dynamic Shared Memory Per Block is in 'Kbyte/block', not byte/block or byte"),
])
def test_ncu_tables_the_check_cannot_read_say_why(mma_checks: Any, launches: list[Any], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        mma_checks.ncu_resources(launches_of(*launches))
    assert str(exc.value).startswith(message), str(exc.value)
