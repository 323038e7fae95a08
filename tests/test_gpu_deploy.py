"""The deployment-scale GPU checks on the CPU: the one gate, what it reads from the environment and
what it skips or fails, and what 0004 reads from the prefill server."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

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
