"""The GPU runner's CPU side: tests/gpu stays out of the normal suite, device detection and the
gates without a GPU (faked by CUDA_VISIBLE_DEVICES=""), and the results file `tests/gpu/run.py`
writes: outcomes, reasons, figures, collection errors, a hung check, a spent budget, the tree."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from helpers import HANG_GUARD_S

REPO = Path(__file__).resolve().parents[2]
GPU = REPO / "tests" / "gpu"
sys.path.insert(0, str(GPU))

import gpu_support  # noqa: E402

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # what a machine without a GPU looks like to torch


def _env(**extra: str) -> dict[str, str]:
    # no tree and no deployment but those a test gives: the deployment checks are not run
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PATCHTOOL_GPU_TREE",
            "PATCHTOOL_GPU_TREE_ERROR",
            "PATCHTOOL_GPU_DEPLOYMENT",
            "PATCHTOOL_GPU_PD_SERVERS",
            "PATCHTOOL_GPU_BASELINE",
        )
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "tool"), env.get("PYTHONPATH")]))
    return {**env, **NO_GPU, **extra}


def run_gpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The runner as a process. Its limit guards against a runner that never returns (a check it
    failed to kill); it is far above any load and no test asserts on it. The runner's own budget and
    per-check limit are a day and two hours unless a test names its own (the last one named counts),
    so a busy machine never spends them: the tests of those limits move the clock themselves."""
    return subprocess.run(
        [sys.executable, str(GPU / "run.py"), "--budget", "86400", "--check-timeout", "7200", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env or _env(),
        timeout=HANG_GUARD_S,
        check=False,
    )


def results(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    assert not list(path.parent.glob("*.partial")), "a results file is written whole"
    return data


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["check"].rsplit("::", 1)[-1]: row for row in data["checks"]}


GPU_FIXTURES = f"""\
import importlib.util

_spec = importlib.util.spec_from_file_location("gpu_checks_conftest", {str(GPU / "conftest.py")!r})
_gpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gpu)
patched_tree_gpu, record = _gpu.patched_tree_gpu, _gpu.record
"""


def checks_file(tmp_path: Path, name: str, body: str) -> Path:
    """Checks of our own outside the repository, with tests/gpu's fixtures (its conftest, loaded by path)."""
    path = tmp_path / "checks" / name
    path.parent.mkdir(exist_ok=True)
    (path.parent / "conftest.py").write_text(GPU_FIXTURES)
    path.write_text(textwrap.dedent(body))
    return path


# -- collection -------------------------------------------------------------------------------


def test_the_normal_suite_never_collects_tests_gpu() -> None:
    """`pytest` over tests/ (what `nox -s tests` runs) leaves tests/gpu alone; naming it collects it."""
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"]
    others = [
        "--ignore-glob=tests/test_*.py",
        "--ignore=tests/patches",
        "--ignore=tests/hostile",
        "--ignore=tests/corpus",
        "--ignore=tests/sglang_fork",
    ]
    suite = subprocess.run([*base, "tests", *others], cwd=REPO, capture_output=True, text=True, env=_env())
    assert "tests/gpu" not in suite.stdout, suite.stdout
    assert suite.returncode == 5, suite.stdout + suite.stderr  # 5: nothing collected
    named = subprocess.run([*base, "tests/gpu"], cwd=REPO, capture_output=True, text=True, env=_env())
    assert "tests/gpu/test_0000_smoke.py::test_cuda_matmul_matches_cpu" in named.stdout, named.stdout + named.stderr


# -- the device and the gates -----------------------------------------------------------------


def test_device_detection_without_a_gpu() -> None:
    code = "import json, gpu_support; print(json.dumps(gpu_support.device_info()))"
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=GPU, capture_output=True, text=True, check=True, env=_env(PYTHONPATH=str(GPU))
    )
    info = json.loads(res.stdout)
    import torch
    import triton

    assert info["name"] is None and info["capability"] is None and info["count"] == 0
    assert info["no_gpu"]
    assert info["torch"] == torch.__version__ and info["triton"] == triton.__version__


@pytest.mark.parametrize(
    ("capability", "name", "reason"),
    [
        ((12, 0), "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", None),
        ((9, 0), "NVIDIA H200", "needs sm_120, not run: this GPU is NVIDIA H200 (sm_90)"),
        ((12, 1), "NVIDIA GB10", "needs sm_120, not run: this GPU is NVIDIA GB10 (sm_121)"),
        ((10, 0), "NVIDIA B200", "needs sm_120, not run: this GPU is NVIDIA B200 (sm_100)"),
    ],
)
def test_sm120_gate_runs_on_sm120_alone(capability: tuple[int, int], name: str, reason: str | None) -> None:
    assert gpu_support.sm120_skip_reason(capability, name) == reason


def test_a_deployment_check_without_a_deployment_is_skipped_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PATCHTOOL_GPU_DEPLOYMENT", raising=False)
    with pytest.raises(pytest.skip.Exception, match="^needs a running deployment, not run: set "):
        gpu_support.require_deployment()
    monkeypatch.setenv("PATCHTOOL_GPU_DEPLOYMENT", "http://router:8000")
    assert gpu_support.require_deployment().router == "http://router:8000"


def test_a_results_file_is_named_for_its_start_and_device() -> None:
    import run

    h200 = {"started": "2026-10-01T10:00:00Z", "device": {"name": "NVIDIA H200", "capability": "sm_90"}}
    assert run._file_name(h200) == "20261001T100000Z-nvidia-h200-sm-90.json"
    assert run._file_name({**h200, "device": {"name": None}}) == "20261001T100000Z-no-gpu.json"


def test_figures_are_numbers_strings_or_booleans() -> None:
    assert gpu_support.figures({"err": 1e-3, "n": 4, "shape": "8x8", "ok": True}) == {
        "err": 1e-3,
        "n": 4,
        "shape": "8x8",
        "ok": True,
    }
    with pytest.raises(ValueError, match="figure 'err' is nan"):
        gpu_support.figures({"err": float("nan")})
    with pytest.raises(TypeError, match="figure 'xs': list is not a number"):
        gpu_support.figures({"xs": [1, 2]})


# -- the runner and its results file ----------------------------------------------------------


@pytest.mark.upstream
def test_without_a_gpu_every_check_is_not_run_by_name(tmp_path: Path, patched_tree: Path) -> None:
    """The whole of tests/gpu on a machine without a GPU: nothing fails, every check that does not
    run says what it needs, and the file records the device, the versions and the tree."""
    out = tmp_path / "results.json"
    # TRITON_INTERPRET=1, as the CPU kernel tests leave it in this process: the runner drops it
    res = run_gpu("--out", str(out), "--tree", str(patched_tree), env=_env(TRITON_INTERPRET="1"))
    assert res.returncode == 0, res.stdout + res.stderr
    data = results(out)
    assert data["schema"] == 1 and data["kind"] == "patchtool-gpu-results"
    assert data["device"]["name"] is None and data["device"]["torch"]
    assert data["errors"] == [] and data["summary"]["fail"] == 0
    assert data["tree"]["source"] == "directory" and data["tree"]["path"] == str(patched_tree)
    rows = by_name(data)
    smoke = rows["test_cuda_matmul_matches_cpu"]
    assert smoke["outcome"] == "not-run" and smoke["reason"].startswith("needs a CUDA GPU, not run: ")
    assert smoke["patch"] is None and smoke["device"] is None and smoke["capability"] is None
    assert set(smoke["versions"]) == {"torch", "triton", "cuda", "nvcc"}
    for row in data["checks"]:  # each patch's checks too: every one that does not run says what it needs
        assert row["outcome"] in ("pass", "not-run"), row
        if row["outcome"] == "not-run":
            assert re.match(r"needs [^:]+, not run", row["reason"]), row
    assert "needs a CUDA GPU, not run" in res.stdout and str(out) in res.stdout


def test_outcomes_reasons_figures_and_the_patch_of_each_check(tmp_path: Path, fake_tree: Path) -> None:
    checks = checks_file(
        tmp_path,
        "test_0002_fake.py",
        """\
        import gpu_support

        def test_measures(record):
            record(max_abs_err=0.0125, ms=3)

        def test_wrong():
            assert 1 + 1 == 3, "the kernel disagrees"

        def test_sm120_only():
            gpu_support.require_sm120()
        """,
    )
    broken = checks_file(tmp_path, "test_0009_broken.py", "def test_x(:\n")
    out = tmp_path / "r.json"
    res = run_gpu(str(checks), str(broken), "--out", str(out), "--tree", str(fake_tree))
    assert res.returncode == 1, res.stdout + res.stderr  # a check failed
    data = results(out)
    rows = by_name(data)
    assert rows["test_measures"]["outcome"] == "pass"
    assert rows["test_measures"]["figures"] == {"max_abs_err": 0.0125, "ms": 3}
    assert rows["test_measures"]["patch"] == "fake-patch" and rows["test_measures"]["patch_sha256"] == "a" * 64
    assert rows["test_wrong"]["outcome"] == "fail"
    assert "the kernel disagrees" in rows["test_wrong"]["reason"]
    assert rows["test_sm120_only"]["outcome"] == "not-run"
    assert rows["test_sm120_only"]["reason"].startswith("needs sm_120, not run: ")
    broken_row = next(r for r in data["checks"] if r["file"].endswith("test_0009_broken.py"))
    assert broken_row["outcome"] == "fail" and broken_row["reason"].startswith("collection error: ")
    assert data["summary"] == {"pass": 1, "fail": 2, "not-run": 1}
    assert data["tree"]["tip"] == "f" * 40


def test_checks_run_compiled_kernels_even_where_triton_interpret_is_set(tmp_path: Path, fake_tree: Path) -> None:
    """The CPU kernel tests set TRITON_INTERPRET=1 in their process; a runner started from there (or
    from a shell that kept it) must not hand it to the GPU checks."""
    checks = checks_file(
        tmp_path,
        "test_0000_env.py",
        """\
        import os

        def test_not_interpreted():
            assert "TRITON_INTERPRET" not in os.environ
        """,
    )
    out = tmp_path / "r.json"
    res = run_gpu(str(checks), "--out", str(out), "--tree", str(fake_tree), env=_env(TRITON_INTERPRET="1"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert by_name(results(out))["test_not_interpreted"]["outcome"] == "pass"


def test_a_hung_check_fails_and_the_rest_still_run(tmp_path: Path, fake_tree: Path) -> None:
    """The hang is made by the test's clock ($PATCHTOOL_GPU_CLOCK): the check moves it an hour on and
    waits, so the per-check limit is passed whatever the machine's load, and no other check comes near it."""
    clock = tmp_path / "clock"
    checks = checks_file(
        tmp_path,
        "test_0000_hang.py",
        """\
        import os, pathlib, time

        def test_hangs():
            pathlib.Path(os.environ["PATCHTOOL_GPU_CLOCK"]).write_text("3600")
            time.sleep(3600)

        def test_after():
            pass
        """,
    )
    out = tmp_path / "r.json"
    res = run_gpu(
        str(checks), "--out", str(out), "--tree", str(fake_tree), "--check-timeout", "600", "--budget", "86400",
        env=_env(PATCHTOOL_GPU_CLOCK=str(clock)),
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    rows = by_name(results(out))
    assert rows["test_hangs"]["outcome"] == "fail"
    assert "still running at the per-check limit of 600 s (a hang?)" in rows["test_hangs"]["reason"]
    assert rows["test_after"]["outcome"] == "pass"


def test_a_spent_budget_leaves_the_rest_not_run(tmp_path: Path, fake_tree: Path) -> None:
    """The budget is spent on the test's clock: the slow check moves it an hour on, past the budget
    of 20 minutes, and waits; the runner stops it there and starts nothing after it."""
    clock = tmp_path / "clock"
    checks = checks_file(
        tmp_path,
        "test_0000_slow.py",
        """\
        import os, pathlib, time

        def test_slow():
            pathlib.Path(os.environ["PATCHTOOL_GPU_CLOCK"]).write_text("3600")
            time.sleep(3600)

        def test_never():
            pass
        """,
    )
    out = tmp_path / "r.json"
    res = run_gpu(
        str(checks), "--out", str(out), "--tree", str(fake_tree), "--budget", "1200", "--check-timeout", "7200",
        env=_env(PATCHTOOL_GPU_CLOCK=str(clock)),
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr  # nothing failed; what did not run says so
    data = results(out)
    rows = by_name(data)
    assert rows["test_slow"]["outcome"] == "not-run"
    assert "the time budget of 1200 s ran out after" in rows["test_slow"]["reason"]
    assert rows["test_never"]["outcome"] == "not-run"
    assert rows["test_never"]["reason"] == "not run: the time budget of 1200 s ran out before it started"
    assert data["duration_s"] >= 3600  # the run's own figure is read on the same clock


def test_no_check_starts_after_the_deadline(tmp_path: Path) -> None:
    """The plugin alone: with the deadline passed (a relaunch late in the budget), checks are skipped."""
    checks = checks_file(tmp_path, "test_0000_late.py", "def test_late():\n    pass\n")
    state = tmp_path / "state.json"
    env = _env(PATCHTOOL_GPU_STATE=str(state), PATCHTOOL_GPU_DEADLINE="1", PYTHONPATH=str(GPU))
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "gpu_results_plugin", "-p", "no:cacheprovider", "-q", str(checks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    live = json.loads(state.read_text())
    (row,) = live["checks"].values()
    assert row["outcome"] == "not-run" and row["reason"] == "not run: the time budget ran out before it started"


def test_without_a_tree_the_run_says_so(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = run_gpu("tests/gpu/test_0000_smoke.py", "--out", str(out), "--tree", str(tmp_path / "absent"))
    assert res.returncode == 1
    data = results(out)
    assert data["errors"] == [f"no patched tree: {tmp_path / 'absent'} does not exist"]
    assert data["tree"] is None
    assert by_name(data)["test_cuda_matmul_matches_cpu"]["outcome"] == "not-run"


def test_a_tree_check_gets_the_tree_or_is_not_run_with_the_reason(tmp_path: Path, fake_tree: Path) -> None:
    """`patched_tree_gpu` under the runner: the tree given, or with none the check is not run, saying why."""
    checks = checks_file(
        tmp_path,
        "test_0000_tree.py",
        f"""\
        def test_probe(patched_tree_gpu):
            assert str(patched_tree_gpu) == {str(fake_tree)!r}
        """,
    )
    out = tmp_path / "r.json"
    run_gpu(str(checks), "--out", str(out), "--tree", str(fake_tree))
    assert by_name(results(out))["test_probe"]["outcome"] == "pass"
    run_gpu(str(checks), "--out", str(out), "--tree", str(tmp_path / "absent"))
    row = by_name(results(out))["test_probe"]
    assert row["outcome"] == "not-run"
    assert row["reason"] == f"no patched tree, not run: {tmp_path / 'absent'} does not exist"


@pytest.mark.upstream
@pytest.mark.slow
def test_a_packed_tree_carries_the_series_to_a_machine_that_cannot_build_it(tmp_path: Path, real_cache: Path) -> None:
    archive = tmp_path / "gpu-tree.tar.gz"
    packed = run_gpu("--pack-tree", str(archive), env=_env(PATCHTOOL_CACHE_DIR=str(real_cache)))
    assert packed.returncode == 0, packed.stdout + packed.stderr
    out = tmp_path / "r.json"
    # the GPU machine: no cache to build from, only the archive
    res = run_gpu(
        "tests/gpu/test_0000_smoke.py",
        "--out",
        str(out),
        "--tree",
        str(archive),
        env=_env(PATCHTOOL_CACHE_DIR=str(tmp_path / "empty-cache")),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    tree = results(out)["tree"]
    assert tree["source"] == f"archive {archive}"
    manifest_ids = [p["id"] for p in tree["patches"]]
    import tomllib

    assert manifest_ids == [p["id"] for p in tomllib.loads((REPO / "patchset.toml").read_text())["patch"]]
    assert len(tree["tip"]) == 40


def test_a_runner_that_is_stopped_stops_its_checks(tmp_path: Path, fake_tree: Path) -> None:
    """SIGTERM to the runner (a job's timeout, a hand on the GPU machine) leaves no check running."""
    import select
    import signal

    checks = checks_file(
        tmp_path,
        "test_0000_stuck.py",
        """\
        import os, pathlib, time

        def test_stuck():
            pathlib.Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
            time.sleep(600)
        """,
    )
    pid_file = tmp_path / "pid"
    os.mkfifo(pid_file)  # the check writes its pid into it once it runs: waited on, not polled
    reader = os.open(pid_file, os.O_RDONLY | os.O_NONBLOCK)
    proc = subprocess.Popen(
        [sys.executable, str(GPU / "run.py"), str(checks), "--out", str(tmp_path / "r.json"), "--tree", str(fake_tree)],
        cwd=REPO,
        env=_env(PID_FILE=str(pid_file)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runner = os.pidfd_open(proc.pid)
    try:  # the check's pid, or the runner's end, whichever comes first
        ready, _, _ = select.select([reader, runner], [], [], HANG_GUARD_S)
        assert reader in ready, "the runner ended before its check started (or hung)"
        check_pid = int(os.read(reader, 64))
    finally:
        os.close(reader)
        os.close(runner)
    proc.send_signal(signal.SIGTERM)
    try:
        # a guard against a runner that ignores SIGTERM (a hang): far above any load, never asserted on
        assert proc.wait(timeout=HANG_GUARD_S) == 128 + signal.SIGTERM
        # the runner waits for its checks' process to end before it exits: it is gone, or only
        # not yet reaped by init
        try:
            os.kill(check_pid, 0)
        except ProcessLookupError:
            return
        state = Path(f"/proc/{check_pid}/stat").read_text().split(")")[-1].split()[0]
        assert state in {"Z", "X"}, f"the check's process outlived the runner (state {state})"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(check_pid, signal.SIGKILL)
