"""The deployment-scale GPU checks on the CPU: the gate, not run by name without a deployment, and
against a fake deployment (an HTTP stub on 127.0.0.1 that stops by itself, driven by a stand-in for
sglang's serving benchmark, tests/data/fake-sglang) the figures recorded and the comparisons that fail
when they are off. Also the ncu check's reading of ncu's table, and that the real benchmark takes the
options the checks pass and writes the keys they read."""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import pytest

from test_gpu_runner import GPU, REPO, _env, by_name, results, run_gpu

sys.path.insert(0, str(GPU))

import gpu_deploy
import gpu_support

FAKE_SGLANG = REPO / "tests" / "data" / "fake-sglang"
DEPLOY_VARIABLES = ("PATCHTOOL_GPU_DEPLOYMENT", "PATCHTOOL_GPU_PD_SERVERS", "PATCHTOOL_GPU_BASELINE")
NOT_RUN = re.compile(r"needs [^:]+, not run: ")


# -- the gate -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "want"),
    [
        ({}, gpu_support.Deployment()),
        ({"PATCHTOOL_GPU_DEPLOYMENT": "http://router:8000/"}, gpu_support.Deployment(router="http://router:8000")),
        (
            {"PATCHTOOL_GPU_PD_SERVERS": " http://p:30000  https://d:30001/ "},
            gpu_support.Deployment(prefill="http://p:30000", decode="https://d:30001"),
        ),
    ],
)
def test_the_deployment_is_read_from_two_variables(environ: dict[str, str], want: gpu_support.Deployment) -> None:
    assert gpu_support.Deployment.from_env(environ) == want


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"PATCHTOOL_GPU_DEPLOYMENT": "router:8000"},
            "$PATCHTOOL_GPU_DEPLOYMENT: 'router:8000' is not an http:// or https:// URL",
        ),
        (
            {"PATCHTOOL_GPU_PD_SERVERS": "http://p:30000"},
            "$PATCHTOOL_GPU_PD_SERVERS is 'http://p:30000': write 'PREFILL_URL DECODE_URL'",
        ),
        (
            {"PATCHTOOL_GPU_PD_SERVERS": "http://p:30000 d:30001"},
            "$PATCHTOOL_GPU_PD_SERVERS: 'd:30001' is not an http:// or https:// URL",
        ),
    ],
)
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
    with pytest.raises(
        pytest.skip.Exception, match=r"^needs a running deployment, not run: set \$PATCHTOOL_GPU_DEPLOYMENT"
    ):
        gpu_support.require_deployment()
    assert passes_gate(pd_servers=True).decode == "http://d:30001"
    monkeypatch.setenv("PATCHTOOL_GPU_DEPLOYMENT", "http://router:8000")
    monkeypatch.delenv("PATCHTOOL_GPU_PD_SERVERS")
    assert passes_gate().router == "http://router:8000"
    with pytest.raises(
        pytest.skip.Exception, match=r"^needs a running deployment, not run: set \$PATCHTOOL_GPU_PD_SERVERS"
    ):
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
    with pytest.raises(
        ValueError, match=r"^the prefill server reports no max_queued_tokens: is it the patched wheel\?$"
    ):
        pd.admission_caps({"max_queued_requests": 8, "disaggregation_bootstrap_port": 8998})
    with pytest.raises(ValueError, match="^the prefill server has no max_queued_requests set: launch it with "):
        pd.admission_caps({**info, "max_queued_requests": None})


# -- ncu's table -----------------------------------------------------------------------------------

NCU_HEADER = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name",'
    '"Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"'
)


def ncu_table(launches: list[tuple[str, dict[tuple[str, str], tuple[str, str]]]]) -> str:
    """``ncu --import R --csv --page details --print-units base`` in the layout of a table ncu
    printed for a Blackwell GPU (as kept in public test data; no ncu has run here): ncu's own lines
    first, one row per metric with a trailing comma, and rule rows without a metric."""
    lines = ["==PROF== Connected to process 4242 (/usr/bin/python3)", NCU_HEADER]
    for i, (kernel, metrics) in enumerate(launches):
        head = f'"{i}","4242","python3","127.0.0.1","{kernel}","1","7","(128, 1, 1)","(64, 1, 8)","0","12.0"'
        lines += [
            f'{head},"{section}","{metric}","{unit}","{value}",' for (section, metric), (unit, value) in metrics.items()
        ]
        lines.append(
            f'{head},"LaunchStats","","","","LaunchConfiguration","OPT","A wave of thread blocks ...","global","50"'
        )
    return "\n".join(lines) + "\n"


def split_metrics(
    registers: int, shared: str = "36928", occupancy: str = "16.67"
) -> dict[tuple[str, str], tuple[str, str]]:
    return {
        ("Launch Statistics", "Registers Per Thread"): ("register/thread", str(registers)),
        ("Launch Statistics", "Dynamic Shared Memory Per Block"): ("byte/block", shared),
        ("Launch Statistics", "Static Shared Memory Per Block"): ("byte/block", "0"),
        ("Occupancy", "Block Limit Registers"): ("block", "2"),
        ("Occupancy", "Block Limit Shared Mem"): ("block", "2"),
        ("Occupancy", "Theoretical Occupancy"): ("%", occupancy),
    }


COMBINE = {
    ("Launch Statistics", "Registers Per Thread"): ("register/thread", "40"),
    ("Launch Statistics", "Dynamic Shared Memory Per Block"): ("byte/block", "0"),
}


@pytest.fixture(scope="module")
def mma_checks() -> Any:
    return importlib.import_module("test_0002_mma")


def launches_of(*launches: tuple[str, dict[tuple[str, str], tuple[str, str]]]) -> list[gpu_support.NcuLaunch]:
    return gpu_support.ncu_launches(ncu_table(list(launches)))


def test_ncu_figures_are_read_from_its_table(mma_checks: Any) -> None:
    launches = launches_of(
        ("_mma_sparse_decode_split", split_metrics(252)),
        ("_mma_sparse_decode_split", split_metrics(251, shared="36,928")),
        ("_mma_sparse_decode_split", split_metrics(251)),
        ("_mma_sparse_decode_combine", COMBINE),
    )
    assert [launch.id for launch in launches] == [0, 1, 2, 3]
    seen = mma_checks.ncu_resources(launches)
    assert seen == {
        "direct_registers": 252,
        "partial_registers": 251,
        "split_dynamic_shared_b": 36928,
        "block_limit_registers": 2,
        "block_limit_shared_mem": 2,
        "theoretical_occupancy_pct": 16.7,
    }
    assert seen == mma_checks.NCU_WANT  # what the check compares with: patchset.toml's expect


def test_ncu_figures_that_are_off_do_not_match(mma_checks: Any) -> None:
    """The field kernel's 60 KB / 1 CTA per SM is not this kernel's: the check's comparison fails."""

    def field(registers: int) -> dict[tuple[str, str], tuple[str, str]]:
        return {**split_metrics(registers, shared="61440"), ("Occupancy", "Block Limit Shared Mem"): ("block", "1")}

    seen = mma_checks.ncu_resources(
        launches_of(
            ("_mma_sparse_decode_split", field(252)),
            ("_mma_sparse_decode_split", field(251)),
            ("_mma_sparse_decode_split", field(251)),
            ("_mma_sparse_decode_combine", COMBINE),
        )
    )
    off = {k: (v, mma_checks.NCU_WANT[k]) for k, v in seen.items() if v != mma_checks.NCU_WANT[k]}
    assert off == {"split_dynamic_shared_b": (61440, 36928), "block_limit_shared_mem": (1, 2)}


@pytest.mark.parametrize(
    ("launches", "message"),
    [
        (
            [("_mma_sparse_decode_split", split_metrics(252))] * 3,
            "ncu profiled ['_mma_sparse_decode_split', '_mma_sparse_decode_split', '_mma_sparse_decode_split'], "
            "not 3 split launches and a combine",
        ),
        (
            [
                ("_mma_sparse_decode_split", split_metrics(252)),
                ("_mma_sparse_decode_split", split_metrics(251)),
                ("_mma_sparse_decode_split", split_metrics(240)),
                ("_mma_sparse_decode_combine", COMBINE),
            ],
            "the two c4 partial launches have 251 and 240 registers per thread",
        ),
        (
            [
                ("_mma_sparse_decode_split", split_metrics(252)),
                ("_mma_sparse_decode_split", split_metrics(251)),
                ("_mma_sparse_decode_split", split_metrics(251, occupancy="8.33")),
                ("_mma_sparse_decode_combine", COMBINE),
            ],
            "the split launches differ in shared memory, block limits or occupancy",
        ),
        (
            [
                (
                    "_mma_sparse_decode_split",
                    {
                        **split_metrics(252),
                        ("Launch Statistics", "Dynamic Shared Memory Per Block"): ("Kbyte/block", "36.93"),
                    },
                ),
                ("_mma_sparse_decode_split", split_metrics(251)),
                ("_mma_sparse_decode_split", split_metrics(251)),
                ("_mma_sparse_decode_combine", COMBINE),
            ],
            "ncu launch 0 (_mma_sparse_decode_split): Dynamic Shared Memory Per Block is in 'Kbyte/block', not byte/block or byte",
        ),
    ],
)
def test_ncu_tables_the_check_cannot_read_say_why(mma_checks: Any, launches: list[Any], message: str) -> None:
    with pytest.raises(ValueError) as exc:
        mma_checks.ncu_resources(launches_of(*launches))
    assert str(exc.value).startswith(message), str(exc.value)


# -- a fake deployment --------------------------------------------------------------------------


class StubDeployment:
    """A router as the serving benchmark sees it: ``GET /v1/models`` and ``POST /generate``, each
    request answered at once with as many tokens as it asked for and, as its ``e2e_latency``, the time
    a deployment would have taken: ``service_s`` (``slow_factor`` times that where the benchmark runs
    more than ``slow_above`` at a time). The stand-in benchmark adds those up, so what the checks see
    is the same on a busy machine as on an idle one: no figure is a measurement of this machine.
    With ``stall`` a request is never answered. It stops itself after ``lifetime_s`` whatever the test
    does, and a stalled request is let go then."""

    def __init__(
        self,
        *,
        service_s: float = 0.05,
        slow_above: int | None = None,
        slow_factor: float = 3.0,
        stall: bool = False,
        lifetime_s: float = 1800.0,  # a guard against a stub left serving (a hang): far above any load
    ) -> None:
        self.service_s, self.slow_above, self.slow_factor, self.stall = service_s, slow_above, slow_factor, stall
        self.stopped = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/v1/models":
                    self.send_error(404)
                    return
                self._json({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/generate":
                    self.send_error(404)
                    return
                if stub.stall:
                    stub.stopped.wait()
                    return
                slow = stub.slow_above is not None and body["stand_in_concurrency"] > stub.slow_above
                latency = stub.service_s * (stub.slow_factor if slow else 1.0)
                tokens = body["sampling_params"]["max_new_tokens"]
                self._json({"text": "x" * tokens, "meta_info": {"completion_tokens": tokens, "e2e_latency": latency}})

            def _json(self, data: object) -> None:
                payload = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256  # a burst of 96 connections at once, as the checks send

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.timer = threading.Timer(lifetime_s, self.stop)
        self.timer.daemon = True

    def stop(self) -> None:
        self.stopped.set()
        self.server.shutdown()

    def __enter__(self) -> Self:
        self.thread.start()
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()
        if not self.stopped.is_set():
            self.stop()
        self.server.server_close()
        self.thread.join(timeout=600)  # shutdown() returned: the thread ends at once; the limit guards a hang


@contextlib.contextmanager
def stub(**options: Any) -> Iterator[StubDeployment]:
    with StubDeployment(**options) as deployment:
        yield deployment


def run_against(
    deployment: StubDeployment, tmp_path: Path, fake_tree: Path, *checks: str, name: str = "r.json", **env: str
) -> dict[str, Any]:
    """The runner over ``checks`` against the stub, with the stand-in benchmark; the results file's data."""
    out = tmp_path / name
    res = run_gpu(
        *checks,
        "--out",
        str(out),
        "--tree",
        str(fake_tree),
        env=_env(PATCHTOOL_GPU_DEPLOYMENT=deployment.url, PYTHONPATH=str(FAKE_SGLANG), **env),
    )
    data = results(out)
    assert data["errors"] == [], res.stdout + res.stderr
    return data


AB_0002 = "tests/gpu/test_0002_deploy.py::test_pd_throughput_ab"
HANG_0002 = "tests/gpu/test_0002_deploy.py::test_long_context_no_hang"
AB_0003 = "tests/gpu/test_0003_deploy.py::test_serving_ab"


# -- not run by name without what they need --------------------------------------------------------


def test_without_a_deployment_the_deployment_checks_are_not_run_by_name(tmp_path: Path, fake_tree: Path) -> None:
    out = tmp_path / "r.json"
    res = run_gpu(
        "tests/gpu/test_0002_deploy.py",
        "tests/gpu/test_0003_deploy.py",
        "tests/gpu/test_0003_mhc.py::test_needle_recall_deployment",
        "tests/gpu/test_0004_pd_admission.py",
        "tests/gpu/test_0002_mma.py::test_launch_resources_under_ncu",
        "--out",
        str(out),
        "--tree",
        str(fake_tree),
        env=_env(),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    rows = by_name(results(out))
    router = "needs a running deployment, not run: set $PATCHTOOL_GPU_DEPLOYMENT to the URL of its router"
    servers = "needs a running deployment, not run: set $PATCHTOOL_GPU_PD_SERVERS to its prefill and decode servers'"
    for name in (
        "test_pd_throughput_ab",
        "test_long_context_no_hang",
        "test_serving_ab",
        "test_needle_recall_deployment",
    ):
        assert rows[name]["outcome"] == "not-run" and rows[name]["reason"] == router, rows[name]
    for name in ("test_burst_is_refused_at_prefill_with_503", "test_refused_decode_half_is_freed_without_the_router"):
        assert rows[name]["outcome"] == "not-run" and rows[name]["reason"].startswith(servers), rows[name]
    ncu = rows["test_launch_resources_under_ncu"]
    assert ncu["outcome"] == "not-run" and ncu["reason"].startswith("needs sm_120, not run: "), ncu
    assert set(rows) == {
        "test_pd_throughput_ab",
        "test_long_context_no_hang",
        "test_serving_ab",
        "test_needle_recall_deployment",
        "test_burst_is_refused_at_prefill_with_503",
        "test_refused_decode_half_is_freed_without_the_router",
        "test_launch_resources_under_ncu",
    }


def test_without_sglang_the_benchmark_checks_are_not_run_by_name(tmp_path: Path, fake_tree: Path) -> None:
    out = tmp_path / "r.json"
    run_gpu(
        "tests/gpu/test_0002_deploy.py",
        "--out",
        str(out),
        "--tree",
        str(fake_tree),
        env=_env(PATCHTOOL_GPU_DEPLOYMENT="http://127.0.0.1:9"),
    )
    for row in results(out)["checks"]:
        assert row["outcome"] == "not-run", row
        assert row["reason"].startswith("needs sglang's serving benchmark, not run: sglang is not installed for ")
        assert NOT_RUN.match(row["reason"])


# -- against a fake deployment ----------------------------------------------------------------


def test_the_throughput_ab_records_what_the_benchmark_measured_and_compares_arms(
    tmp_path: Path, fake_tree: Path
) -> None:
    """Two arms of the A/B, one run each, the deployment restarted between them: the first records
    what it measured; the second names the first's results file and, slower, fails."""
    with stub(service_s=0.1) as deployment:
        first = run_against(deployment, tmp_path, fake_tree, AB_0002, name="first.json")
    row = by_name(first)["test_pd_throughput_ab"]
    assert row["outcome"] == "pass", row
    figures = row["figures"]
    assert figures["compared_with"] == ""
    for c in (64, 80, 96):
        assert figures[f"completed_c{c}"] == c * 10
        assert figures[f"output_tok_s_c{c}"] > 0 and figures[f"mean_ttft_ms_c{c}"] >= 100
    # 10 waves of 0.1 s at each concurrency: throughput grows with it
    assert figures["output_tok_s_c64"] < figures["output_tok_s_c80"] < figures["output_tok_s_c96"]

    with stub(service_s=0.2) as deployment:
        second = run_against(
            deployment,
            tmp_path,
            fake_tree,
            AB_0002,
            name="second.json",
            PATCHTOOL_GPU_BASELINE=str(tmp_path / "first.json"),
        )
    row = by_name(second)["test_pd_throughput_ab"]
    assert row["outcome"] == "fail"
    assert row["figures"]["compared_with"] == str(tmp_path / "first.json")
    assert 0 < row["figures"]["output_tok_s_c64_vs_baseline"] < 1
    assert "output_tok_s_c64 " in row["reason"] and "is below the baseline's" in row["reason"], row["reason"]
    # C80 and C96 run FlashInfer in every arm (mma serves at most 64 rows): recorded, compared with nothing
    for c in (80, 96):
        assert f"output_tok_s_c{c} " not in row["reason"] and f"output_tok_s_c{c}_vs_baseline" not in row["figures"]
        assert row["figures"][f"served_by_c{c}"] == "flashinfer"


def test_c96_slower_than_c80_is_recorded_not_failed(tmp_path: Path, fake_tree: Path) -> None:
    """The field's anomaly (C96 below C80) was its own kernel's; since issue 32 both run FlashInfer
    here, whichever backend the decode server selects, so it is no check of mma."""
    with stub(service_s=0.1, slow_above=80) as deployment:
        data = run_against(deployment, tmp_path, fake_tree, AB_0002)
    row = by_name(data)["test_pd_throughput_ab"]
    assert row["outcome"] == "pass", row
    assert row["figures"]["output_tok_s_c96"] < row["figures"]["output_tok_s_c80"]  # recorded all the same
    assert row["figures"]["served_by_c96"] == "flashinfer"


def baseline_file(path: Path, check: str, figures: dict[str, float]) -> Path:
    path.write_text(
        json.dumps({"schema": 1, "kind": "patchtool-gpu-results", "checks": [{"check": check, "figures": figures}]})
    )
    return path


def test_the_mhc_serving_ab_compares_throughput_and_prefill_ttft(tmp_path: Path, fake_tree: Path) -> None:
    """Throughput above the baseline's at every concurrency, prefill TTFT above the baseline's: the
    one comparison that does not hold fails the check, and says so."""
    baseline = {"output_tok_s_c1": 1.0, "output_tok_s_c64": 1.0, "output_tok_s_c96": 1.0, "mean_ttft_ms_prefill": 1.0}
    with stub(service_s=0.01) as deployment:
        data = run_against(
            deployment,
            tmp_path,
            fake_tree,
            AB_0003,
            PATCHTOOL_GPU_BASELINE=str(baseline_file(tmp_path / "base.json", AB_0003, baseline)),
        )
    row = by_name(data)["test_serving_ab"]
    assert row["outcome"] == "fail"
    assert {f"completed_{n}" for n in ("c1", "c64", "c96", "prefill")} <= set(row["figures"])
    assert row["figures"]["completed_prefill"] == 64 and row["figures"]["completed_c96"] == 960
    assert "mean_ttft_ms_prefill " in row["reason"] and "is above the baseline's 1" in row["reason"], row["reason"]
    assert "output_tok_s" not in row["reason"]


def test_a_baseline_compares_each_figure_its_way() -> None:
    base = gpu_deploy.Baseline(path="b.json", figures={"output_tok_s_c64": 100.0, "mean_ttft_ms_prefill": 50.0})
    assert (
        base.worse(
            {"output_tok_s_c64": 100.0, "mean_ttft_ms_prefill": 50.0},
            higher=["output_tok_s_c64"],
            lower=["mean_ttft_ms_prefill"],
        )
        == []
    )
    assert base.worse(
        {"output_tok_s_c64": 99.5, "mean_ttft_ms_prefill": 50.5},
        higher=["output_tok_s_c64"],
        lower=["mean_ttft_ms_prefill"],
    ) == ["output_tok_s_c64 99.5 is below the baseline's 100", "mean_ttft_ms_prefill 50.5 is above the baseline's 50"]
    assert base.worse({}, higher=["output_tok_s_c96"]) == ["output_tok_s_c96: None now, None in the baseline"]
    assert base.ratios({"output_tok_s_c64": 99.5}, ["output_tok_s_c64", "output_tok_s_c96"]) == {
        "output_tok_s_c64_vs_baseline": 0.995
    }


def test_a_baseline_without_this_check_fails_it(tmp_path: Path, fake_tree: Path) -> None:
    other = baseline_file(tmp_path / "other.json", "tests/gpu/test_0002_deploy.py::test_long_context_no_hang", {})
    with stub(service_s=0.01) as deployment:
        data = run_against(deployment, tmp_path, fake_tree, AB_0003, PATCHTOOL_GPU_BASELINE=str(other))
    row = by_name(data)["test_serving_ab"]
    assert row["outcome"] == "fail"
    assert (
        row["reason"]
        == f"Failed: $PATCHTOOL_GPU_BASELINE: {other} holds no figures of test_0003_deploy.py::test_serving_ab"
    )


def test_the_long_context_run_passes_when_every_request_is_served(tmp_path: Path, fake_tree: Path) -> None:
    with stub(service_s=0.02) as deployment:
        data = run_against(deployment, tmp_path, fake_tree, HANG_0002)
    row = by_name(data)["test_long_context_no_hang"]
    assert row["outcome"] == "pass", row
    assert row["figures"]["hung"] is False and row["figures"]["completed"] == 1024


def test_a_benchmark_still_running_at_its_limit_is_killed_and_called_hung(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(FAKE_SGLANG))
    with stub(stall=True) as deployment:  # it never answers: the benchmark hangs on any load
        run = gpu_deploy.serving_benchmark(
            deployment.url,
            [
                "--dataset-name",
                "random",
                "--random-input-len",
                "8",
                "--random-output-len",
                "8",
                "--num-prompts",
                "4",
                "--max-concurrency",
                "2",
            ],
            workdir=tmp_path,
            timeout_s=3,
        )
    assert run.hung and run.result is None
    assert run.problem(4) == f"still running after {run.elapsed_s:.0f} s, killed"
    assert run.figures() == {}
    assert processes_naming(str(tmp_path)) == [], "the benchmark outlived its limit"


def processes_naming(text: str) -> list[int]:
    """The processes whose command line holds ``text`` (Linux's /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:  # gone meanwhile
            continue
    return found


def test_a_run_that_serves_fewer_requests_says_how_many() -> None:
    run = gpu_deploy.BenchmarkRun(
        argv=(),
        returncode=0,
        elapsed_s=1.0,
        output_tail="",
        result={"completed": 630, "output_throughput": float("nan"), "duration": 9.5},
    )
    assert run.problem(640) == "630 of 640 requests completed"
    assert run.figures("c64") == {"completed_c64": 630, "duration_s_c64": 9.5}  # NaN is not a figure
    broken = gpu_deploy.BenchmarkRun(argv=(), returncode=1, elapsed_s=1.0, output_tail="Traceback ...", result=None)
    assert broken.problem(640) == "the benchmark exited 1 without a result: Traceback ..."


# -- the real benchmark takes what the checks pass ----------------------------------------------------


@pytest.mark.upstream
def test_sglangs_benchmark_takes_the_options_and_writes_the_keys_the_checks_use(patched_tree: Path) -> None:
    real = (patched_tree / "python" / "sglang" / "benchmark" / "serving.py").read_text()
    used = set()
    for check in ("test_0002_deploy.py", "test_0003_deploy.py", "gpu_deploy.py"):
        used |= set(re.findall(r'"(--[a-z][a-z-]+)"', (GPU / check).read_text()))
    assert {"--backend", "--base-url", "--output-file", "--num-prompts", "--random-range-ratio"} <= used
    assert [flag for flag in sorted(used) if f'"{flag}"' not in real] == []
    assert [key for key in gpu_deploy.RESULT_KEYS.values() if f'"{key}": ' not in real] == []
    fake = (FAKE_SGLANG / "sglang" / "benchmark" / "serving.py").read_text()
    assert [flag for flag in sorted(used) if f'"{flag}"' not in fake] == []
