"""GPU verification as commands and evidence: what a ``gpu_verification.run`` may say (pure), how a
results file is read and matched to it (pure), and what `check` and `status` make of both."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from conftest import Demo
from patchtool.errors import InvalidInput
from patchtool.project.verification import GpuCheck
from patchtool.sglang.gpuresults import ResultsFile, evidence_for, selects
from patchtool.sglang.gpuruns import gpu_run_selectors


def envelope(text: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text)
    return data


# -- run: a command, never prose ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "selectors"),
    [
        (
            "python -m pytest tests/gpu/test_0002_mma.py::test_split_vs_flashinfer",
            ("tests/gpu/test_0002_mma.py::test_split_vs_flashinfer",),
        ),
        (
            "python3 -m pytest -q tests/gpu/test_0002_mma.py::test_a tests/gpu/test_0002_mma.py::test_b",
            ("tests/gpu/test_0002_mma.py::test_a", "tests/gpu/test_0002_mma.py::test_b"),
        ),
        ("pytest tests/gpu/test_0003_mhc.py", ("tests/gpu/test_0003_mhc.py",)),
        ("python -m pytest 'tests/gpu/test_0003_mhc.py::test_t[8192]'", ("tests/gpu/test_0003_mhc.py::test_t[8192]",)),
        ("python tests/gpu/run.py tests/gpu/test_0001_store.py", ("tests/gpu/test_0001_store.py",)),
        ("python tests/gpu/run.py", ("tests/gpu",)),
        ("nox -s gpu", ("tests/gpu",)),
        ("nox -s gpu -- tests/gpu/test_0001_store.py::test_cuh", ("tests/gpu/test_0001_store.py::test_cuh",)),
    ],
)
def test_runnable_commands_and_the_checks_they_select(run: str, selectors: tuple[str, ...]) -> None:
    assert gpu_run_selectors(run) == selectors


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (
            "ncu on _mma_sparse_decode_split at batch 64 (64 padded heads, topk 512).",
            "not a command that runs checks under tests/gpu: 'ncu on _mma_sparse_decode_split at batch 64 (64 padded heads, topk 512).'; "
            "write one of 'python -m pytest tests/gpu/FILE.py::TEST', 'python tests/gpu/run.py [tests/gpu/...]', "
            "'nox -s gpu [-- tests/gpu/...]'",
        ),
        (
            "On sm_120: the upstream's kernel, T in {1, 8}",
            'not a command that runs checks under tests/gpu: "On sm_120: the upstream\'s kernel, T in {1, 8}"',
        ),
        (
            "python -m pytest tests/gpu/test_0002_mma.py -k split",
            "'python -m pytest tests/gpu/test_0002_mma.py -k split': option '-k' is not allowed; select checks by node id "
            "(tests/gpu/FILE.py::TEST) so results can be matched to them",
        ),
        (
            "python -m pytest tests/patches/test_0002_mma_sparse_decode.py",
            "'tests/patches/test_0002_mma_sparse_decode.py' is not a check under tests/gpu/",
        ),
        ("python -m pytest", "'python -m pytest' names no check"),
        ("pytest test/srt/test_mma_decode.py", "'test/srt/test_mma_decode.py' is not a check under tests/gpu/"),
    ],
)
def test_prose_and_other_commands_are_refused(run: str, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        gpu_run_selectors(run)
    assert message in str(exc.value)


# -- matching a results file to a run ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "check", "hit"),
    [
        ("tests/gpu/test_0002_mma.py::test_a", "tests/gpu/test_0002_mma.py::test_a", True),
        ("tests/gpu/test_0002_mma.py::test_a", "tests/gpu/test_0002_mma.py::test_a[64-512]", True),
        ("tests/gpu/test_0002_mma.py::test_a", "tests/gpu/test_0002_mma.py::test_ab", False),
        ("tests/gpu/test_0002_mma.py::TestSplit", "tests/gpu/test_0002_mma.py::TestSplit::test_a", True),
        ("tests/gpu/test_0002_mma.py", "tests/gpu/test_0002_mma.py::test_a", True),
        ("tests/gpu/test_0002_mma.py", "tests/gpu/test_0002_mma_more.py::test_a", False),
        ("tests/gpu", "tests/gpu/test_0002_mma.py::test_a", True),
        ("tests/gpu/", "tests/gpu/test_0002_mma.py::test_a", True),
        ("tests/gpu", "tests/gpu_other/test_0002_mma.py::test_a", False),
    ],
)
def test_a_selector_selects_as_pytest_does(selector: str, check: str, hit: bool) -> None:
    assert selects(selector, check) is hit


def results_file(
    *checks: dict[str, Any],
    device: str | None = "NVIDIA H200",
    capability: str | None = "sm_90",
    started: str = "2026-10-01T10:00:00Z",
) -> dict[str, Any]:
    return {
        "schema": 1,
        "kind": "patchtool-gpu-results",
        "started": started,
        "device": {"name": device, "capability": capability},
        "checks": list(checks),
    }


def check(
    name: str, outcome: str = "pass", *, reason: str | None = None, sha: str | None = "a" * 64, **figures: Any
) -> dict[str, Any]:
    return {
        "check": f"tests/gpu/test_0002_mma.py::{name}",
        "outcome": outcome,
        "reason": reason,
        "patch": "mma",
        "patch_sha256": sha,
        "figures": figures,
    }


def test_a_results_file_is_checked_before_it_is_believed() -> None:
    bad = results_file(check("test_a", "passed")) | {"kind": "something-else"}
    del bad["started"]
    with pytest.raises(InvalidInput) as exc:
        ResultsFile.from_dict(bad, file="gpu-results/x.json")
    assert [p.render() for p in exc.value.problems] == [
        "gpu-results/x.json: kind: 'something-else' is not 'patchtool-gpu-results': not a file tests/gpu/run.py wrote",
        "gpu-results/x.json: started: missing required key",
        "gpu-results/x.json: checks[0].outcome: unknown value 'passed'; expected one of pass, fail, not-run",
    ]


def test_evidence_is_the_newest_run_on_each_machine() -> None:
    gpu = GpuCheck(run="python -m pytest tests/gpu/test_0002_mma.py::test_a", expect="agrees")
    runs = [
        ResultsFile.from_dict(results_file(check("test_a", "fail", reason="off by 1")), file="gpu-results/1.json"),
        ResultsFile.from_dict(
            results_file(
                check("test_a[0]"), check("test_a[512]"), check("test_b", "fail"), started="2026-10-02T10:00:00Z"
            ),
            file="gpu-results/2.json",
        ),
        ResultsFile.from_dict(
            results_file(check("test_a", "not-run", reason="needs sm_120, not run"), device=None, capability=None),
            file="gpu-results/3.json",
        ),
    ]
    evidence = evidence_for(gpu, runs, "a" * 64)
    # run 2 replaces run 1 (same machine, later); test_b is not what this entry runs
    assert [(e.file, e.hardware, e.outcome, e.current) for e in evidence] == [
        ("gpu-results/2.json", "NVIDIA H200 (sm_90)", "pass", True),
        ("gpu-results/3.json", "no CUDA GPU", "not-run", True),
    ]
    assert [c.check.rsplit("::", 1)[1] for c in evidence[0].checks] == ["test_a[0]", "test_a[512]"]


def test_evidence_for_an_older_patch_says_so() -> None:
    gpu = GpuCheck(run="nox -s gpu", expect="agrees")
    runs = [
        ResultsFile.from_dict(
            results_file(check("test_a"), check("test_b", "not-run", reason="needs sm_120")), file="gpu-results/1.json"
        )
    ]
    (old,) = evidence_for(gpu, runs, "b" * 64)
    assert old.current is False and old.outcome == "partly run"
    (unknown,) = evidence_for(gpu, [ResultsFile.from_dict(results_file(check("test_a", sha=None)), file="x")], "b" * 64)
    assert unknown.current is None


# -- check and status on a repository ----------------------------------------------------------------

GPU_CHECK_FILE = """\
    import gpu_support

    def test_greets(record):
        gpu_support.require_cuda()

    def test_never_run():
        gpu_support.require_cuda()

    class TestCaps:
        def test_cap(self):
            gpu_support.require_sm120()
    """


def with_gpu_verification(demo: Demo, *runs: str) -> None:
    text = (demo.root / "patchset.toml").read_text()
    for run in runs:
        text += (
            f'\n[[patch.gpu_verification]]\nrun = "{run}"\nexpect = "agrees with the reference"\nhardware = "sm_120"\n'
        )
    (demo.root / "patchset.toml").write_text(text)
    (demo.root / "tests" / "gpu").mkdir(parents=True, exist_ok=True)
    (demo.root / "tests" / "gpu" / "test_0001_greet.py").write_text(textwrap.dedent(GPU_CHECK_FILE))


def test_check_names_the_line_of_a_run_that_is_prose_or_names_no_check(one_patch: Demo) -> None:
    with_gpu_verification(
        one_patch,
        "python -m pytest tests/gpu/test_0001_greet.py::test_greets",
        "python -m pytest tests/gpu/test_0001_greet.py::TestCaps::test_cap",
        "ncu on the greeting kernel at batch 64",
        "python -m pytest tests/gpu/test_0001_greet.py::test_missing",
        "python -m pytest tests/gpu/test_0001_greet.py::TestCaps::test_gone",
        "python -m pytest tests/gpu/test_0009_absent.py",
    )
    res = one_patch.run("check", "--json")
    assert res.returncode == 1, res.stdout
    problems = [p for p in envelope(res.stdout)["errors"] if p["code"] == "gpu-run"]
    text = (one_patch.root / "patchset.toml").read_text().splitlines()
    assert [(text[p["line"] - 1], p["key"], p["message"]) for p in problems] == [
        (
            'run = "ncu on the greeting kernel at batch 64"',
            "patch[0].gpu_verification[2].run",
            "not a command that runs checks under tests/gpu: 'ncu on the greeting kernel at batch 64'; write one of "
            "'python -m pytest tests/gpu/FILE.py::TEST', 'python tests/gpu/run.py [tests/gpu/...]', "
            "'nox -s gpu [-- tests/gpu/...]'",
        ),
        (
            'run = "python -m pytest tests/gpu/test_0001_greet.py::test_missing"',
            "patch[0].gpu_verification[3].run",
            "tests/gpu/test_0001_greet.py has no test_missing",
        ),
        (
            'run = "python -m pytest tests/gpu/test_0001_greet.py::TestCaps::test_gone"',
            "patch[0].gpu_verification[4].run",
            "tests/gpu/test_0001_greet.py has no test_gone",
        ),
        (
            'run = "python -m pytest tests/gpu/test_0009_absent.py"',
            "patch[0].gpu_verification[5].run",
            "tests/gpu/test_0009_absent.py does not exist",
        ),
    ]
    human = one_patch.run("check").stdout
    line = text.index('run = "ncu on the greeting kernel at batch 64"') + 1
    assert f"patchset.toml:{line}: patch greet: patch[0].gpu_verification[2].run: not a command" in human


def test_check_is_clean_when_every_run_is_a_command_for_a_check_that_exists(one_patch: Demo) -> None:
    with_gpu_verification(one_patch, "python -m pytest tests/gpu/test_0001_greet.py::test_greets", "nox -s gpu")
    res = one_patch.run("check")
    assert res.returncode == 0, res.stdout


def test_status_shows_the_evidence_of_each_check_by_hardware(one_patch: Demo) -> None:
    with_gpu_verification(
        one_patch,
        "python -m pytest tests/gpu/test_0001_greet.py::test_greets",
        "python -m pytest tests/gpu/test_0001_greet.py::TestCaps::test_cap",
        "nox -s gpu -- tests/gpu/test_0001_greet.py::test_never_run",
    )
    import hashlib

    sha = hashlib.sha256((one_patch.root / "patches" / "0001-greet.patch").read_bytes()).hexdigest()
    row = {"patch": "greet", "patch_sha256": sha, "figures": {}}
    h200 = results_file(
        {
            **row,
            "check": "tests/gpu/test_0001_greet.py::test_greets",
            "outcome": "pass",
            "reason": None,
            "figures": {"max_abs_err": 0.002},
        },
        {
            **row,
            "check": "tests/gpu/test_0001_greet.py::TestCaps::test_cap",
            "outcome": "not-run",
            "reason": "needs sm_120, not run: this GPU is NVIDIA H200 (sm_90)",
        },
    )
    blackwell = results_file(
        {
            **row,
            "check": "tests/gpu/test_0001_greet.py::TestCaps::test_cap",
            "outcome": "fail",
            "reason": "AssertionError: 0.5 > 0.02",
            "patch_sha256": "0" * 64,
        },
        device="NVIDIA RTX PRO 6000 Blackwell",
        capability="sm_120",
        started="2026-09-01T00:00:00Z",
    )
    (one_patch.root / "gpu-results").mkdir()
    (one_patch.root / "gpu-results" / "h200.json").write_text(json.dumps(h200))
    (one_patch.root / "gpu-results" / "rtx.json").write_text(json.dumps(blackwell))
    (one_patch.root / "gpu-results" / "broken.json").write_text("{")

    res = one_patch.run("status", "--json")
    assert res.returncode == 0, res.stderr
    data = envelope(res.stdout)["data"]
    greets, cap, never = data["patches"][0]["gpu_verification"]
    assert [(e["device"], e["capability"], e["outcome"], e["current"]) for e in greets["evidence"]] == [
        ("NVIDIA H200", "sm_90", "pass", True)
    ]
    assert greets["evidence"][0]["checks"][0]["figures"] == {"max_abs_err": 0.002}
    assert [(e["capability"], e["outcome"], e["current"]) for e in cap["evidence"]] == [
        ("sm_90", "not-run", True),
        ("sm_120", "fail", False),
    ]
    assert never["evidence"] == []
    assert data["gpu_results"]["files"] == ["gpu-results/rtx.json", "gpu-results/h200.json"]
    assert [p["file"] for p in data["gpu_results"]["problems"]] == ["gpu-results/broken.json"]

    text = one_patch.run("status", "--long").stdout
    assert "pass on NVIDIA H200 (sm_90), 1 check(s), 2026-10-01T10:00:00Z, gpu-results/h200.json" in text
    assert (
        "not-run: tests/gpu/test_0001_greet.py::TestCaps::test_cap: needs sm_120, not run: "
        "this GPU is NVIDIA H200 (sm_90)"
    ) in text
    assert (
        "fail on NVIDIA RTX PRO 6000 Blackwell (sm_120), 1 check(s), 2026-09-01T00:00:00Z, gpu-results/rtx.json "
        "(for an older version of the patch)"
    ) in text
    assert "no evidence: no results file in gpu-results/ has a check this runs" in text
    assert "error: gpu-results/broken.json: not JSON:" in text

    check = one_patch.run("check", "--json")
    assert [p["file"] for p in envelope(check.stdout)["errors"]] == ["gpu-results/broken.json"]


def test_status_says_a_prose_run_can_have_no_evidence(one_patch: Demo) -> None:
    with_gpu_verification(one_patch, "ncu on the greeting kernel at batch 64")
    res = one_patch.run("status", "--long")
    assert res.returncode == 0, res.stderr
    assert (
        "no evidence: 'run' is not a command that runs checks under tests/gpu (`patchtool check` says why)"
        in res.stdout
    )
