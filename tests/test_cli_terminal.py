"""What a person at a terminal sees: progress of the long steps (and only there), colour unless
NO_COLOR, and tables that fit 100 columns."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest

from conftest import Demo
from helpers import HANG_GUARD_S, git, make_sdist, read_terminal
from patchtool import progress
from test_editing import three
from test_rebase import releases, series  # noqa: F401 - the fixture, used by name

# -- the core reports; a recorder listens ------------------------------------------------------------


@dataclasses.dataclass
class Recorder:
    """A reporter that keeps what it was told: (event, task, ...) tuples."""

    events: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def start(self, description: str, *, total: float | None, unit: str, completed: float) -> object:
        with self.lock:
            handle = sum(e[0] == "start" for e in self.events)
            self.events.append(("start", handle, description, total, unit, completed))
        return handle

    def advance(self, handle: object, amount: float, note: str | None) -> None:
        with self.lock:
            self.events.append(("advance", handle, amount, note))

    def stop(self, handle: object) -> None:
        with self.lock:
            self.events.append(("stop", handle))

    def tasks(self, prefix: str) -> list[dict[str, Any]]:
        """Each task whose description starts with ``prefix``: its start, its advances' sum and notes."""
        out = []
        for e in self.events:
            if e[0] == "start" and e[2].startswith(prefix):
                steps = [a for a in self.events if a[0] == "advance" and a[1] == e[1]]
                out.append(
                    {
                        "description": e[2],
                        "total": e[3],
                        "unit": e[4],
                        "completed": e[5],
                        "done": e[5] + sum(a[2] for a in steps),
                        "steps": [a[2] for a in steps if not a[3]],
                        "notes": [a[3] for a in steps if a[3]],
                        "stopped": ("stop", e[1]) in self.events,
                    }
                )
        return out


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    with progress.reporting(rec):
        yield rec


def test_nobody_listens_by_default() -> None:
    with progress.task("x", total=3) as t:
        t.advance(2, note="y")
    assert list(progress.track([1, 2], "z")) == [1, 2]


def test_a_download_reports_its_bytes(one_patch: Demo, recorder: Recorder) -> None:
    from patchtool.project.repository import Project
    from patchtool.upstream.cache import Cache

    Cache(one_patch.cache).ensure(Project.load(one_patch.root).pin())
    (download,) = recorder.tasks("download demo-1.0-py3-none-any.whl")
    assert download["unit"] == "bytes" and download["done"] == one_patch.wheel.stat().st_size and download["stopped"]
    (imported,) = recorder.tasks("import demo-1.0-py3-none-any.whl")
    assert imported["stopped"]


def test_an_import_reports_members_read_and_files_written(one_patch: Demo, recorder: Recorder) -> None:
    from patchtool.project.repository import Project
    from patchtool.upstream.cache import Cache

    base = Cache(one_patch.cache).ensure(Project.load(one_patch.root).pin())
    files = len(git(one_patch.cache / "upstream.git", "ls-tree", "-r", "--name-only", base.tree).split())
    (read,) = recorder.tasks("read demo-1.0-py3-none-any.whl")
    with zipfile.ZipFile(one_patch.wheel) as zf:
        members = len(zf.infolist())
    assert (read["unit"], read["total"], read["done"], read["stopped"]) == ("members", members, members, True)
    (written,) = recorder.tasks("import demo-1.0-py3-none-any.whl into the cache")
    assert (written["unit"], written["total"], written["done"], written["stopped"]) == ("files", files, files, True)
    assert written["steps"] == [1] * files  # one file at a time, not all at once at the end


def test_an_sdist_import_reports_compressed_bytes_read(one_patch: Demo, recorder: Recorder) -> None:
    demo = one_patch
    from patchtool.names import ArtifactFilename, PrefixTemplate
    from patchtool.project.repository import Project
    from patchtool.upstream.artifacts import import_files

    many = {f"demo/m{n}.py": "".join(f"X{i} = {n * i}\n" for i in range(400)) for n in range(200)}
    sdist = make_sdist(demo.root.parent / "demo-1.0.tar.gz", "demo", "1.0", many)
    art = Project.load(demo.root).pin().artifact
    assert art is not None
    art = dataclasses.replace(
        art, filename=ArtifactFilename(sdist.name), prefix_from_template=PrefixTemplate("demo-1.0/demo/")
    )
    with import_files(sdist, art) as files:
        assert len(files) == 200
    (read,) = recorder.tasks("read demo-1.0.tar.gz")
    size = sdist.stat().st_size
    assert (read["unit"], read["total"], read["done"], read["stopped"]) == ("bytes", size, size, True)
    assert len([a for a in read["steps"] if a > 0]) > 1 and min(read["steps"]) >= 0  # as the archive is read


def test_a_rebase_reports_each_patch_k_of_n(
    releases: Demo,  # noqa: F811
    recorder: Recorder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from patchtool.cli import main

    series(releases, "0001-extra", "0002-greet", "0004-bye")
    monkeypatch.setenv("PATCHTOOL_CACHE_DIR", str(releases.cache))
    assert main(["rebase", "--to", "1.1", "--dry-run", "--json", "--root", str(releases.root)]) == 5  # bye conflicts
    assert json.loads(capsys.readouterr().out)["status"] == "conflicts-predicted"
    (replay,) = recorder.tasks("replay onto demo-1.1")
    assert (replay["total"], replay["unit"], replay["completed"], replay["done"]) == (3, "patches", 0, 3)
    assert replay["notes"] == ["extra", "greet", "bye"] and replay["stopped"]
    assert [t["unit"] for t in recorder.tasks("download demo-1.")] == ["bytes", "bytes"]


def test_a_scan_reports_versions_and_each_replay(releases: Demo, recorder: Recorder) -> None:  # noqa: F811
    from patchtool.project.repository import Project
    from patchtool.rebase.scan import scan
    from patchtool.upstream.cache import Cache

    series(releases, "0001-extra", "0004-bye")
    scan(Project.load(releases.root), Cache(releases.cache), "1.0,1.1")
    (whole,) = recorder.tasks("scan 2 patch(es) x 2 version(s)")
    assert (whole["total"], whole["done"], whole["unit"]) == (2, 2, "versions")
    assert sorted(t["description"] for t in recorder.tasks("replay onto")) == [
        "replay onto demo-1.0",
        "replay onto demo-1.1",
    ]


# -- the command line draws it on a terminal only --------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Ran:
    code: int
    terminal: str  # what the terminal showed
    stdout: str  # what was not on the terminal
    stderr: str


def on_terminal(demo: Demo, *args: str, stream: str, env: dict[str, str] | None = None, columns: int = 200) -> Ran:
    """Run patchtool with ``stream`` (stdout or stderr) on a pseudo-terminal, the other on a pipe."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    full_env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    full_env.update({"PATCHTOOL_CACHE_DIR": str(demo.cache), "TERM": "xterm-256color", **(env or {})})
    proc = subprocess.Popen(
        [sys.executable, "-m", "patchtool", *args],
        cwd=demo.root,
        env=full_env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=slave if stream == "stdout" else subprocess.PIPE,
        stderr=slave if stream == "stderr" else subprocess.PIPE,
    )
    os.close(slave)
    shown = read_terminal(master)
    os.close(master)
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    return Ran(code=proc.returncode, terminal=shown.decode("utf-8", "replace"), stdout=out or "", stderr=err or "")


def test_progress_on_a_terminal_only(one_patch: Demo) -> None:
    """A first `status` downloads and imports the pin: on a terminal that shows, in a pipe or
    under --json it does not."""
    ran = on_terminal(one_patch, "status", stream="stderr")
    assert ran.code == 0, ran.terminal
    assert "download demo-1.0-py3-none-any.whl" in ran.terminal and "import demo-1.0" in ran.terminal
    assert "download" not in ran.stdout and "greet" in ran.stdout

    fresh = dataclasses.replace(one_patch, cache=one_patch.cache.with_name("cache-json"))
    ran = on_terminal(fresh, "status", "--json", stream="stderr")
    assert ran.code == 0 and ran.terminal == "" and json.loads(ran.stdout)["status"] == "ok"

    piped = dataclasses.replace(one_patch, cache=one_patch.cache.with_name("cache-piped")).run("status")
    assert piped.returncode == 0 and piped.stderr == "" and "download" not in piped.stdout


def test_colour_on_a_terminal_unless_no_color(one_patch: Demo) -> None:
    assert one_patch.run("check").returncode == 0  # the pin is imported: nothing but the result on stdout
    ran = on_terminal(one_patch, "status", stream="stdout")
    assert ran.code == 0 and "\x1b[" in ran.terminal and "greet" in ran.terminal
    ran = on_terminal(one_patch, "status", stream="stdout", env={"NO_COLOR": "1"})
    assert ran.code == 0 and "\x1b[" not in ran.terminal and "greet" in ran.terminal
    assert "\x1b[" not in one_patch.run("status").stdout  # nor in a pipe


# -- tables --------------------------------------------------------------------------------------------

LONG = "a-patch-whose-id-alone-runs-on-for-quite-a-long-way-past-what-fits-in-one-column-of-any-table"


def many_gpu_checks(demo: Demo, ident: str) -> None:
    text = (demo.root / "patchset.toml").read_text().replace('id = "greet"', f'id = "{ident}"')
    for n in range(6):
        text += (
            '\n[[patch.gpu_verification]]\nrun = "python -m pytest tests/gpu/test_0001_greet.py::test_'
            f'{n}"\nexpect = "{"agrees with the float64 reference within a tight bound " * 4}"\n'
            'hardware = "sm_120 (8x RTX PRO 6000 Blackwell, PD TP4 + TP4, prefill and decode both patched)"\n'
        )
    (demo.root / "patchset.toml").write_text(text)


@pytest.mark.parametrize("stream", ["pipe", "terminal"])
def test_status_is_one_row_per_patch_within_100_columns(one_patch: Demo, stream: str) -> None:
    many_gpu_checks(one_patch, LONG)
    if stream == "pipe":
        res = one_patch.run("status")
        code, text = res.returncode, res.stdout
    else:
        ran = on_terminal(one_patch, "status", stream="stdout", env={"NO_COLOR": "1"}, columns=200)
        code, text = ran.code, ran.terminal.replace("\r\n", "\n")
    assert code == 0, text
    lines = text.rstrip("\n").split("\n")
    assert max(len(line) for line in lines) <= 100, text
    assert "0/6 pass" in text and "applied" in text and "correctness" in text and len(lines) <= 10, text
    assert "patchtool status --long" in lines[-1]
    detail = one_patch.run("status", "--long").stdout
    assert "GPU verification on sm_120 (8x RTX PRO 6000" in detail and max(map(len, detail.splitlines())) > 100


def test_status_never_wraps_an_id_or_a_word_at_80_columns(demo: Demo) -> None:
    three(demo)
    many_gpu_checks(demo, "greet")  # a GPU column too
    ids = {"greet": "dsv4-bf16-indexer-keys-in-sparse-attention", "util": "sm120-mma-sparse-decode"}
    ids["cap"] = "pd-honour-max-queued-requests"
    text = (demo.root / "patchset.toml").read_text()
    for old, new in ids.items():
        text = text.replace(f'id = "{old}"', f'id = "{new}"')
    (demo.root / "patchset.toml").write_text(text)
    ran = on_terminal(demo, "status", stream="stdout", env={"NO_COLOR": "1", "COLUMNS": "80"}, columns=80)
    assert ran.code == 0, ran.terminal
    lines = ran.terminal.replace("\r\n", "\n").rstrip("\n").split("\n")
    assert max(len(line) for line in lines) <= 80, ran.terminal
    words = " ".join(lines).split()
    assert all(i in words for i in ids.values()), ran.terminal
    assert words.count("correctness") == 3 and words.count("applied") == 3, ran.terminal


def test_scan_matrix_within_100_columns(releases: Demo) -> None:  # noqa: F811
    series(releases, "0001-extra", "0004-bye")
    text = (releases.root / "patchset.toml").read_text().replace('id = "bye"', f'id = "{LONG}"')
    (releases.root / "patchset.toml").write_text(text)
    res = releases.run("scan", "--versions", "1.0,1.1")
    assert res.returncode == 5, res.stderr  # bye conflicts at 1.1
    assert max(len(line) for line in res.stdout.splitlines()) <= 100, res.stdout
    lines = res.stdout.splitlines()
    # the long id does not fit beside the releases: a row per release, a numbered column per patch
    assert next(line for line in lines if line.startswith("1.0 ")).split() == ["1.0", "unchanged", "unchanged"]
    assert next(line for line in lines if line.startswith("1.1 ")).split() == ["1.1", "unchanged", "conflict"]
    assert "1: extra" in lines and f"2: {LONG}" in lines
    assert "series of demo-1.0 against 1.0, 1.1" in res.stdout


def test_gpu_summary() -> None:
    from patchtool.cli.tables import gpu_summary
    from patchtool.project.verification import GpuCheck, GpuEvidence
    from patchtool.series.status import PatchStatus

    def run(outcome: str, current: bool | None = True) -> GpuEvidence:
        return GpuEvidence(
            file="gpu-results/x.json",
            started="2026-10-01T00:00:00Z",
            device="NVIDIA H200",
            capability="sm_90",
            outcome=outcome,
            checks=(),
            current=current,
        )

    def patch(*evidence: tuple[GpuEvidence, ...]) -> PatchStatus:
        checks = tuple(GpuCheck(run=f"pytest tests/gpu/test_{i}.py", expect="x") for i in range(len(evidence)))
        return PatchStatus(
            id="p",
            kind="correctness",
            upstream="pending",
            files=(),
            added=1,
            removed=0,
            applies="applied",
            gpu_verification=checks,
            gpu_evidence=evidence,
        )

    assert gpu_summary(patch()) == ("-", "dim")
    assert gpu_summary(patch((run("pass"),), (run("pass"),))) == ("2/2 pass", "green")
    assert gpu_summary(patch((run("pass"),), (run("fail"), run("pass")), ())) == ("1/3 pass, 1 fail", "red")
    assert gpu_summary(patch((run("pass", current=False),), (run("not-run"),))) == ("0/2 pass, 1 stale", "yellow")


@pytest.mark.parametrize("args", [("status",), ("status", "--long"), ("--json", "status"), ("--version",)])
def test_a_reader_that_went_away_is_not_an_error(one_patch: Demo, args: tuple[str, ...]) -> None:
    """`patchtool status | head -0`: the pipe is closed before the first write. The rest of the
    output goes nowhere, quietly: no traceback, no "Exception ignored", no error message."""
    read, write = os.pipe()
    os.close(read)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "patchtool", *args],
            cwd=one_patch.root,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            env={**os.environ, "PATCHTOOL_CACHE_DIR": str(one_patch.cache)},
        )
    finally:
        os.close(write)
    assert res.returncode in (0, 1), res.stderr  # 1: click's own answer to a closed pipe under --version
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr
    assert "Broken pipe" not in res.stderr and "error" not in res.stderr


@pytest.mark.parametrize(
    ("redirect", "args", "code"),
    [
        (">&-", ("status",), 0),
        (">&-", ("rebase", "--continue"), 2),
        ("<&-", ("rebase", "--continue"), 2),
        ("2>&-", ("status",), 0),
    ],
)
def test_a_closed_standard_stream_is_not_a_traceback(
    one_patch: Demo, redirect: str, args: tuple[str, ...], code: int
) -> None:
    """`patchtool status >&-`: what goes to a stream the caller closed goes nowhere."""
    import shlex

    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "patchtool", *args))
    res = subprocess.run(
        ["bash", "-c", f"{command} {redirect}"],
        cwd=one_patch.root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATCHTOOL_CACHE_DIR": str(one_patch.cache)},
    )
    assert res.returncode == code, res.stderr
    assert "Traceback" not in res.stderr
    if code == 2 and redirect != "2>&-":
        assert "no rebase in progress" in res.stderr + res.stdout
