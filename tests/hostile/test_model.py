"""A model of the editing commands: random sequences of real `patchtool` commands on two clones of
one patch repository that share one cache, with kill -9 at random points, and the invariants
checked after every step.

Everything is real: `python -m patchtool` subprocesses, git, an HTTP index on localhost serving
demo 1.0 and 1.1. The model is the user: it runs commands, commits in checkouts, resolves
conflicts, edits the manifest's TODOs, and recovers after a kill; a command may refuse (exit 1, 2,
3 or 75 with the envelope), never crash. The CI run is derandomized and bounded; `nox -s fuzz`
runs it with random seeds and a larger budget (PATCHTOOL_FUZZ_EXAMPLES, PATCHTOOL_FUZZ_STEPS).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from cli_run import in_process
from conftest import demo_pin, edit
from helpers import HANG_GUARD_S, Index, format_patch, git, make_wheel, snapshot, write_tree
from test_rebase import V10, release_11

CLONES = ("a", "b")
BRANCHES = ("series", "topic")  # "series" is every checkout's default: two clones may both take it
OUTSIDE = ("origin", "incoming", "sentinel", "home")  # beside the clones; no command may change them
REFUSALS = {0, 1, 2, 3, 75}  # documented exit codes; 70 (internal error) is always a failure
STATUS_WORD = {0: "ok", 1: "problems", 2: "usage-error", 3: "conflict", 4: "upstream-error", 70: "error", 75: "busy"}
JOURNAL = ".patchtool/journal.json"
REBASE_STATE = ".patchtool/rebase/state.json"
CONFLICT_TREE = ".patchtool/rebase/worktree"
EDITABLE = (
    "python/demo/core.py",
    "python/demo/extra.py",
    "python/demo/util.py",
    "python/demo/siblings.py",
    "python/demo/fresh.py",
)  # the last one is new

# The initial series, written against demo 1.0: at 1.1 `bye` conflicts and `cap` is already upstream.
SERIES = {
    "extra": (edit("python/demo/extra.py", "return 3", "return 4"), "extra: four"),
    "bye": (edit("python/demo/core.py", 'word = "bye"', 'word = "ciao"'), "core: ciao"),
    "cap": (edit("python/demo/core.py", "len(queue) > cap", "len(queue) >= cap"), "core: inclusive cap"),
}
# Patches to import, also against 1.0: some apply, some never do, adios only once bye is dropped.
INCOMING = {
    "greet.patch": (edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi"),
    "util.patch": (edit("python/demo/util.py", "return 1", "return 2"), "util: two"),
    "sibling.patch": (edit("python/demo/siblings.py", 'name = "b"', 'name = "bee"'), "siblings: bee"),
    "adios.patch": (edit("python/demo/core.py", 'word = "bye"', 'word = "adios"'), "core: adios"),
    "init.patch": (edit("python/demo/__init__.py", '"1.0"', '"1.0+fork"'), "init: fork version"),
    "changes.patch": (lambda root: write_tree(root, {"python/demo/CHANGES": "fork changes\n"}), "add a changelog"),
    "nope.patch": (
        edit("python/demo/util.py", "def helper():\n    return 1", "def helper():\n    return 42"),
        "util: nowhere",
    ),  # made on top of a change nobody has: never applies
}
NEW_IDS = ("feat-a", "feat-b", "extra", "cap")  # the last two are taken (active or dropped)
DROPPABLE = ("extra", "bye", "cap", "core-say-hi", "feat-a", "tweak-1", "nope")  # ids the series may hold
KILLABLE = (
    ("import", "../incoming/greet.patch"),
    ("import", "../incoming/util.patch"),
    ("drop", "extra", "--reason", "killed drop"),
    ("drop", "bye", "--reason", "killed drop"),
    ("export",),
    ("export", "--allow-drop"),
    ("checkout",),
    ("checkout", "--branch", "topic"),
    ("new", "feat-k"),
    ("rebase", "--to", "1.1"),
    ("rebase", "--to", "1.0"),
    ("rebase", "--continue"),
    ("rebase", "--skip", "--reason", "killed skip"),
    ("rebase", "--abort"),
)
RESUME = ("ours", "theirs", "skip", "abort", "leave")  # after a conflict stop: take a side and --continue, ...
TIMEOUT = HANG_GUARD_S
FUZZ_DATABASE = Path(__file__).resolve().parents[2] / ".cache" / "hypothesis-model"  # failures replay first


def _budget() -> settings:
    """CI: one fixed sequence of examples, sized to about three minutes on two cores.
    `nox -s fuzz`: random seeds and the budget from the environment."""
    fuzz = os.environ.get("PATCHTOOL_FUZZ_EXAMPLES")
    common: dict[str, Any] = {"deadline": None, "print_blob": True, "suppress_health_check": [HealthCheck.too_slow]}
    if fuzz:
        return settings(
            max_examples=int(fuzz),
            stateful_step_count=int(os.environ.get("PATCHTOOL_FUZZ_STEPS", "30")),
            derandomize=False,
            database=DirectoryBasedExampleDatabase(FUZZ_DATABASE),
            **common,
        )
    return settings(max_examples=10, stateful_step_count=30, derandomize=True, database=None, **common)


# -- the world: origin, two clones, one cache, and what lies beside them ---------------------------


@dataclasses.dataclass(frozen=True)
class Template:
    """A world built once: every example copies it (the cache already holds 1.0 and 1.1)."""

    root: Path


MANIFEST = textwrap.dedent("""\
    schema = 1
    pin = "demo-1.0"
    registry = "retread.toml"

    [[patch]]
    id = "extra"
    file = "patches/0001-extra.patch"
    kind = "performance"
    owner = "team"
    why = "four is more"
    applies_to = ">=1.0"
    drop_when = "upstream returns four"
    upstream = { status = "pending" }

    [[patch.evidence]]
    metric = "extras"
    before = 3
    after = 4
    source = "bench 1"

    [[patch]]
    id = "bye"
    file = "patches/0002-bye.patch"
    kind = "correctness"
    owner = "team"
    why = "ciao is friendlier"
    applies_to = ">=1.0"
    drop_when = "never"
    upstream = { status = "submitted", url = "https://example.org/pr/1" }

    [[patch]]
    id = "cap"
    file = "patches/0003-cap.patch"
    kind = "reliability"
    owner = "team"
    why = "an inclusive cap"
    applies_to = ">=1.0"
    drop_when = "upstream takes it"
    upstream = { status = "pending" }
    """)


REGISTRY = textwrap.dedent("""\
    schema = 1

    [[rejected]]
    id = "turbo"
    title = "Turbo mode"
    tried = "DEMO_TURBO=1"
    verdict = "rejected"
    reason = "slower"
    revisit = "never"

    [[rejected.evidence]]
    metric = "speed"
    change = "-5%"
    source = "bench 2"

    [[rejected.knobs]]
    type = "env"
    name = "DEMO_TURBO"
    """)


def _commit_change(work: Path, name: str, change: Any, subject: str, *, on: str = "upstream") -> str:
    git(work, "checkout", "-q", "-B", f"p-{name}", on)
    change(work)
    git(work, "add", "-A")
    git(work, "commit", "-qm", subject)
    return format_patch(work)


def _env(world: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PATCHTOOL_"))}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        LC_ALL="C",
        HOME=str(world / "home"),
        XDG_CACHE_HOME=str(world / "xdg"),
        PATCHTOOL_CACHE_DIR=str(world / "cache"),
        PATCHTOOL_LOCK_TIMEOUT="5",
        PATCHTOOL_ALLOW_LOCAL_URLS="1",
    )  # the user allows the local index
    return env


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:
    base = tmp_path_factory.mktemp("model")
    index = Index(base)
    for version, files in (("1.0", V10), ("1.1", release_11())):
        index.add(make_wheel(base / f"demo-{version}-py3-none-any.whl", "demo", version, files))
    work = base / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "upstream")
    write_tree(work, {f"python/{k}": v for k, v in V10.items()})
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "upstream 1.0")
    with index.serve():
        tpl = base / "template"
        origin = tpl / "origin"
        write_tree(
            origin,
            {
                "patchset.toml": MANIFEST,
                "retread.toml": REGISTRY,
                "upstream-pins/demo-1.0.toml": demo_pin(index, index.files["demo-1.0-py3-none-any.whl"]),
            },
        )
        for n, (name, (change, subject)) in enumerate(SERIES.items(), 1):
            write_tree(origin, {f"patches/{n:04d}-{name}.patch": _commit_change(work, name, change, subject)})
        git(origin, "init", "-q", "-b", "main")
        git(origin, "add", "-A")
        git(origin, "commit", "-q", "-m", "the series")
        for name, (change, subject) in INCOMING.items():
            on = "upstream"
            if name == "nope.patch":
                _commit_change(work, "nope-base", edit("python/demo/util.py", "return 1", "return 7"), "base")
                change, on = edit("python/demo/util.py", "return 7", "return 42"), "p-nope-base"  # noqa: PLW2901
            write_tree(tpl / "incoming", {name: _commit_change(work, name, change, subject, on=on)})
        write_tree(tpl / "sentinel", {"keep.txt": "precious\n", "dir/deeper.txt": "also precious\n"})
        (tpl / "home").mkdir()
        env = _env(tpl)
        # the cache learns 1.0 and 1.1 (the dry run predicts bye's conflict: exit 5)
        for args, code in ((("check",), 0), (("rebase", "--to", "1.1", "--dry-run"), 5)):
            res = subprocess.run(
                [sys.executable, "-m", "patchtool", *args],
                cwd=origin,
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=TIMEOUT,
            )
            assert res.returncode == code, res.stdout + res.stderr
        assert git(origin, "status", "--porcelain") == ""
        yield Template(root=tpl)


@dataclasses.dataclass
class Result:
    args: tuple[str, ...]
    code: int | None  # None: killed
    doc: dict[str, Any] | None

    @property
    def data(self) -> Any:
        return (self.doc or {}).get("data")


def envelope(args: tuple[str, ...], proc: subprocess.CompletedProcess[str] | tuple[int, str, str]) -> Result:
    """The --json contract of a command that ran to its end: a documented exit code and exactly
    one envelope on stdout that agrees with it; never a traceback."""
    code, out, err = (
        (proc.returncode, proc.stdout, proc.stderr) if isinstance(proc, subprocess.CompletedProcess) else proc
    )
    shown = f"`patchtool {' '.join(args)} --json` exited {code}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    assert "Traceback" not in err + out, shown
    assert code in REFUSALS, shown
    try:
        doc = json.loads(out)
    except ValueError:
        raise AssertionError(f"not one JSON envelope on stdout: {shown}") from None
    assert isinstance(doc, dict) and set(doc) == {
        "schema",
        "tool",
        "version",
        "command",
        "status",
        "exit_code",
        "data",
        "errors",
    }, shown
    assert (doc["schema"], doc["tool"], doc["exit_code"], doc["status"]) == (1, "patchtool", code, STATUS_WORD[code]), (
        shown
    )
    assert doc["command"] == args[0], shown
    assert isinstance(doc["errors"], list) and all(
        isinstance(e, dict) and e.get("message") and e.get("code") for e in doc["errors"]
    ), shown
    assert code == 0 or doc["errors"], shown
    return Result(args=args, code=code, doc=doc)


class World:
    """One example's files: origin/, the clones a/ and b/, cache/, and what lies beside them."""

    def __init__(self, template: Template) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="world-", dir=template.root.parent))
        for name in ("cache", *OUTSIDE):
            shutil.copytree(template.root / name, self.dir / name, symlinks=True)
        for clone in CLONES:
            git(self.dir, "clone", "-q", "origin", clone)
        self.env = _env(self.dir)
        self.listing = sorted(p.name for p in self.dir.iterdir())
        self.outside = snapshot(*(self.dir / n for n in OUTSIDE))
        self.log: list[str] = []  # the steps and the commands they ran, for a failure's note

    def story(self) -> str:
        """What ran, in order (the last lines): Hypothesis cannot replay a failure whose kill landed
        elsewhere the next time, so the note says what happened in the run that failed."""
        return "steps and commands, in order:\n" + "\n".join(self.log[-150:])

    def root(self, clone: str) -> Path:
        return self.dir / clone

    def patchtool(self, clone: str, *args: str) -> Result:
        """Run one command in ``clone``; it may change that clone and the cache, nothing else (a
        reading one not even its own clone)."""
        other = self.root(_other(clone))
        reader = args[0] in ("status", "check")
        before = snapshot(other, *([self.root(clone)] if reader else []))
        proc = in_process([*args, "--json"], cwd=self.root(clone), env=self.env)
        self.log.append(f"    {clone}$ patchtool {' '.join(args)} -> {proc.returncode}")
        result = envelope(args, proc)
        after = snapshot(other, *([self.root(clone)] if reader else []))
        assert after == before, f"`patchtool {' '.join(args)}` in clone {clone} changed {_changed(before, after)}"
        return result

    def killed(self, clone: str, args: tuple[str, ...], delay: float) -> Result:
        """``args`` started in ``clone`` and killed -9 (with its git children) after ``delay`` seconds."""
        other = self.root(_other(clone))
        before = snapshot(other)
        proc = subprocess.Popen(
            [sys.executable, "-m", "patchtool", *args, "--json"],
            cwd=self.root(clone),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        time.sleep(delay)
        kill_with_children(proc.pid)
        out, err = proc.communicate(timeout=TIMEOUT)
        self.log.append(
            f"    {clone}$ patchtool {' '.join(args)} (kill -9 after {delay}s) -> "
            + ("killed" if proc.returncode == -signal.SIGKILL else f"finished first, {proc.returncode}")
        )
        assert snapshot(other) == before, f"killed `patchtool {' '.join(args)}` in {clone} changed the other clone"
        if proc.returncode == -signal.SIGKILL:
            return Result(args=args, code=None, doc=None)
        return envelope(args, (proc.returncode, out, err))


def kill_with_children(pid: int) -> None:
    """kill -9 of ``pid`` and of every process it started. Each git child runs in a session of its
    own (no terminal), which ``pid``'s process group does not reach: ``pid`` is stopped first, so it
    starts no other while its children are found, then each child's group is killed, then ``pid``."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return
    # stopped or exited; WNOWAIT leaves the exit for Popen to collect
    if os.waitid(os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT).si_code != os.CLD_STOPPED:
        return
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:  # the field after the state: the parent
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError):
                    kill(int(entry.name), signal.SIGKILL)
    os.killpg(pid, signal.SIGKILL)


def _other(clone: str) -> str:
    return "b" if clone == "a" else "a"


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))[:10]


def series_digest(root: Path) -> str:
    """What the commands read of a clone: manifest, registry, patches, pins, patchtool's state."""
    h = hashlib.sha256()
    files = [root / "patchset.toml", root / "retread.toml"]
    for sub in ("patches", "upstream-pins", ".patchtool"):
        files += (
            sorted(p for p in (root / sub).rglob("*") if p.is_file() and ".git" not in p.parts)
            if (root / sub).is_dir()
            else []
        )
    for path in files:
        h.update(str(path.relative_to(root)).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"-"))
    return h.hexdigest()


# -- the invariants, stated once -------------------------------------------------------------------


def manifest_parses(root: Path) -> dict[str, Any]:
    """1. No write is left half-done (a killed one was recovered) and patchset.toml parses."""
    assert not (root / JOURNAL).exists(), f"{root.name}: a journal is pending after the step finished"
    with open(root / "patchset.toml", "rb") as fh:
        return tomllib.load(fh)


Seen = dict[str, tuple[str, dict[str, Any]]]  # id -> ("patch" | "dropped", its table as last seen)

# what may change in a table between two looks, by where it was and where it is now
MAY_CHANGE = {
    ("patch", "patch"): {"file"},
    ("patch", "dropped"): {"file", "reason", "dropped_at", "upstream", "merged_evidence"},
    ("dropped", "dropped"): set(),
}


def ids_are_kept(manifest: dict[str, Any], seen: Seen) -> Seen:
    """2. Every id ever added is in [[patch]] or [[dropped]] exactly once, a dropped one stays
    dropped, and its metadata is what it was, but for what the move legitimately changes (the
    file; a drop's reason and when; a rebase marking it merged, with its evidence)."""
    tables = [("patch", t) for t in manifest.get("patch", [])] + [("dropped", t) for t in manifest.get("dropped", [])]
    ids = [str(t["id"]) for _, t in tables]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    assert not twice, f"listed more than once in [[patch]] and [[dropped]]: {twice}"
    now = {str(t["id"]): (where, t) for where, t in tables}
    for ident, (where, table) in seen.items():
        assert ident in now, f"patch {ident!r} (in [[{where}]]) is gone from the manifest"
        new_where, new_table = now[ident]
        assert (where, new_where) in MAY_CHANGE, f"dropped patch {ident!r} is back in [[patch]]: {new_table}"
        changed = {k for k in set(table) | set(new_table) if table.get(k) != new_table.get(k)}
        changed -= MAY_CHANGE[where, new_where]
        assert not changed, (
            f"patch {ident!r} lost its metadata: {sorted(changed)} was "
            f"{ {k: table.get(k) for k in changed} }, now { {k: new_table.get(k) for k in changed} }"
        )
        if (where, new_where) == ("patch", "dropped"):
            assert new_table.get("reason") and new_table.get("dropped_at"), f"{ident!r} dropped without why or when"
            assert new_table.get("upstream") in (
                table.get("upstream"),
                {"status": "merged", "version": new_table["dropped_at"]},
            ), f"{ident!r} dropped with upstream {new_table.get('upstream')}"
    return now


def files_are_consistent(root: Path, manifest: dict[str, Any]) -> None:
    """3. Every file the manifest names exists, no patch file is orphaned, and the series' file
    names sort in series order."""
    active = [str(t["file"]) for t in manifest.get("patch", [])]
    dropped = [str(t["file"]) for t in manifest.get("dropped", [])]
    named = [
        *active,
        *dropped,
        f"upstream-pins/{manifest['pin']}.toml",
        *([manifest["registry"]] if "registry" in manifest else []),
    ]
    missing = [f for f in named if not (root / f).is_file()]
    assert not missing, f"{root.name}: the manifest names missing files {missing}"
    on_disk = {f"patches/{p.name}" for p in (root / "patches").glob("*.patch")}
    on_disk |= {f"patches/dropped/{p.name}" for p in (root / "patches" / "dropped").glob("*.patch")}
    orphans = sorted(on_disk - set(active) - set(dropped))
    assert not orphans, f"{root.name}: orphaned patch files {orphans}"
    assert active == sorted(active), f"{root.name}: patch files do not sort in series order: {active}"


def nothing_outside_changed(world: World) -> None:
    """4. Nothing beside the clones and the cache changed: origin, the patches to import, a
    sentinel, $HOME, and the directory listing (no $XDG_CACHE_HOME appeared). (That a command in
    one clone changes nothing in the other is checked around every command: `World.patchtool`.)"""
    listing = sorted(p.name for p in world.dir.iterdir())
    assert listing == world.listing, f"beside the clones: {listing}, was {world.listing}"
    after = snapshot(*(world.dir / n for n in OUTSIDE))
    assert after == world.outside, f"changed outside the clones: {_changed(world.outside, after)}"


def series_applies(world: World, clone: str) -> None:
    """5. The series applies at the pin; a rebase in progress is one `status` shows."""
    res = world.patchtool(clone, "check")
    applies = res.data["applies"] if isinstance(res.data, dict) else None
    assert applies is not None and all(p["outcome"] == "applied" for p in applies), (
        f"{clone}: the series does not apply at its pin: {json.dumps(res.doc)[:3000]}"
    )
    if (world.root(clone) / REBASE_STATE).exists():
        status = world.patchtool(clone, "status")
        assert status.code == 0 and status.data["rebase"] is not None, f"{clone}: a rebase status does not show"


# -- the model -----------------------------------------------------------------------------------


@dataclasses.dataclass
class CloneModel:
    """What the user of one clone knows."""

    seen: Seen
    checkouts: dict[str, Path | None] = dataclasses.field(default_factory=dict)  # branch -> worktree
    exported: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # branch -> (tip, digest)
    checked: str | None = None  # series digest when the invariants last held


def _resolve(text: str, side: str) -> str:
    """A conflicted file with one side of every conflict taken."""
    out, state = [], None
    for line in text.splitlines(keepends=True):
        marker = line[:7]
        if marker == "<<<<<<<":
            state = "ours"
        elif marker == "|||||||" and state:
            state = "base"
        elif marker == "=======" and state:
            state = "theirs"
        elif marker == ">>>>>>>" and state:
            state = None
        elif state in (None, side):
            out.append(line)
    return "".join(out)


def step(func: Callable[..., None]) -> Callable[..., None]:
    """A rule or invariant that writes itself into the world's log; its failure carries the log."""

    @functools.wraps(func)
    def logged(self: PatchtoolModel, **kwargs: Any) -> None:
        self.world.log.append(f"{func.__name__}({', '.join(f'{k}={v!r}' for k, v in sorted(kwargs.items()))})")
        try:
            func(self, **kwargs)
        except Exception as exc:
            exc.add_note(self.world.story())
            raise

    return logged


class PatchtoolModel(RuleBasedStateMachine):
    def __init__(self, template: Template) -> None:
        super().__init__()
        self.world = World(template)
        self.models = {c: CloneModel(seen=ids_are_kept(manifest_parses(self.world.root(c)), {})) for c in CLONES}
        self.counter = 0

    def teardown(self) -> None:
        shutil.rmtree(self.world.dir, ignore_errors=True)

    def run(self, clone: str, *args: str) -> Result:
        return self.world.patchtool(clone, *args)

    def _tip(self, worktree: Path | None) -> str | None:
        if worktree is None or not (worktree / ".git").exists():
            return None
        return git(worktree, "rev-parse", "HEAD").strip()

    def _base(self, worktree: Path, branch: str) -> str | None:
        try:
            return git(worktree, "rev-parse", "-q", "--verify", f"refs/patchtool/base/{branch}").strip()
        except RuntimeError:
            return None

    def _inside(self, clone: str, path: str) -> Path:
        where = Path(path)
        assert where.is_relative_to(self.world.root(clone)), f"a command in {clone} works in {where}, another clone"
        return where

    # -- rules ------------------------------------------------------------------------------------
    # Every rule draws the same arguments whatever the state (no preconditions, no draws that depend
    # on what earlier steps did): a kill makes outcomes vary from run to run, and Hypothesis refuses a
    # strategy whose shape does. A rule with nothing to act on does nothing.

    @rule(
        clone=st.sampled_from(CLONES),
        patches=st.lists(st.sampled_from(sorted(INCOMING)), min_size=1, max_size=2, unique=True),
    )
    @step
    def import_patch(self, clone: str, patches: list[str]) -> None:
        res = self.run(clone, "import", *(f"../incoming/{p}" for p in patches))
        if res.code == 0:
            manifest = manifest_parses(self.world.root(clone))
            active = {str(t["id"]): str(t["file"]) for t in manifest.get("patch", [])}
            for row in res.data["added"]:
                assert active.get(row["id"]) == row["file"], f"import reported {row} but the manifest has {active}"

    @rule(clone=st.sampled_from(CLONES), branch=st.sampled_from(BRANCHES))
    @step
    def checkout(self, clone: str, branch: str) -> None:
        res = self.run(clone, "checkout", "--branch", branch)
        if res.code == 0:
            model = self.models[clone]
            model.checkouts[branch] = self._inside(clone, res.data["worktree"])
            model.exported.pop(branch, None)

    def _anyone_made(self, branch: str) -> bool:
        """Whether some clone checked ``branch`` out: else `new` and `export` can only refuse."""
        return any(branch in m.checkouts for m in self.models.values())

    @rule(
        clone=st.sampled_from(CLONES),
        branch=st.sampled_from(BRANCHES),
        ident=st.sampled_from(NEW_IDS),
        file=st.sampled_from((*EDITABLE, None)),
        then_export=st.booleans(),
    )
    @step
    def new_patch(self, clone: str, branch: str, ident: str, file: str | None, then_export: bool) -> None:
        """(`checkout` if need be,) `new ID`, a change in ``file`` amended into it (or none yet), and `export`."""
        if not self._anyone_made(branch):
            self.checkout(clone=clone, branch=branch)
        res = self.run(clone, "new", ident, "--branch", branch)
        if res.code != 0:
            return
        assert branch in self.models[clone].checkouts, f"`new` in {clone} used a checkout {clone} never made"
        worktree = self._inside(clone, res.data["worktree"])
        if file is not None:
            self._append(worktree, file, f"# {ident}")
            git(worktree, "commit", "-q", "--amend", "--no-edit")
        if then_export:
            self._export(clone, branch, allow_drop=False)

    def _append(self, worktree: Path, file: str, what: str) -> None:
        self.counter += 1
        path = worktree / file
        path.write_text((path.read_text() if path.exists() else "") + f"{what} {self.counter}\n")
        git(worktree, "add", "-A")

    @rule(
        clone=st.sampled_from(CLONES),
        branch=st.sampled_from(BRANCHES),
        kind=st.sampled_from(("plain", "amend", "remove-top", "swap-top")),
        file=st.sampled_from(EDITABLE),
        then=st.sampled_from(("export", "export --allow-drop", "nothing")),
    )
    @step
    def edit(self, clone: str, branch: str, kind: str, file: str, then: str) -> None:
        """The user's own git work in a checkout (checked out first if need be): a plain commit (no
        trailer), an amend, removing the top commit, or swapping the top two (when they do not
        conflict); then perhaps `export`."""
        worktree = self.models[clone].checkouts.get(branch)
        if worktree is None or not (worktree / ".git").exists():
            self.checkout(clone=clone, branch=branch)
            worktree = self.models[clone].checkouts.get(branch)
            if worktree is None:
                return
        base = self._base(worktree, branch)
        on_base = base is None or self._tip(worktree) == base
        if kind == "remove-top":
            if not on_base:
                git(worktree, "reset", "-q", "--hard", "HEAD~1")
        elif kind == "swap-top":
            top = git(worktree, "rev-parse", "HEAD").strip()
            if not on_base and git(worktree, "rev-parse", "HEAD~1").strip() != base:
                git(worktree, "reset", "-q", "--hard", "HEAD~2")
                try:
                    git(worktree, "cherry-pick", "--allow-empty", "--keep-redundant-commits", top, f"{top}~1")
                except RuntimeError:  # they touch the same lines: leave the branch as it was
                    git(worktree, "cherry-pick", "--abort")
                    git(worktree, "reset", "-q", "--hard", top)
        else:
            self._append(worktree, file, "# note")
            if kind == "amend" and not on_base:
                git(worktree, "commit", "-q", "--amend", "--no-edit")
            else:
                git(worktree, "commit", "-q", "-m", f"tweak {self.counter}")
        if then != "nothing":
            self._export(clone, branch, allow_drop=then.endswith("--allow-drop"))

    @rule(clone=st.sampled_from(CLONES), branch=st.sampled_from(BRANCHES), allow_drop=st.booleans())
    @step
    def export(self, clone: str, branch: str, allow_drop: bool) -> None:
        if self._anyone_made(branch):
            self._export(clone, branch, allow_drop=allow_drop)

    def _export(self, clone: str, branch: str, *, allow_drop: bool) -> None:
        model = self.models[clone]
        root = self.world.root(clone)
        worktree = model.checkouts.get(branch)
        before = (self._tip(worktree), series_digest(root))
        res = self.run(clone, "export", "--branch", branch, *(["--allow-drop"] if allow_drop else []))
        if res.code == 0:
            assert branch in model.checkouts, (
                f"export in {clone} wrote branch {branch!r}, a checkout {clone} never made"
            )
            active = {str(t["id"]): str(t["file"]) for t in manifest_parses(root).get("patch", [])}
            for row in res.data["patches"]:
                assert active.get(row["id"]) == row["file"], f"export reported {row} but the manifest has {active}"
        if before[0] is not None and model.exported.get(branch) == before:
            # exported before, and neither the branch nor the series changed since: nothing to do
            assert res.code == 0, f"exporting {branch!r} again, unchanged, was refused: {res.doc}"
            assert not res.data["dropped"] and all(r["change"] == "unchanged" for r in res.data["patches"]), (
                f"exporting {branch!r} again, unchanged, changed the series: {res.data}"
            )
            assert series_digest(root) == before[1], "exporting an unchanged branch again rewrote files"
        tip = self._tip(worktree)
        if res.code == 0 and tip is not None:
            model.exported[branch] = (tip, series_digest(root))
        else:
            model.exported.pop(branch, None)

    @rule(clone=st.sampled_from(CLONES), branch=st.sampled_from(BRANCHES))
    @step
    def discard_checkout(self, clone: str, branch: str) -> None:
        """The user throws a checkout away with git: its worktree and its branch (in the cache's
        upstream.git when a killed checkout left no worktree to ask)."""
        model = self.models[clone]
        if branch not in model.checkouts:
            return
        worktree = model.checkouts.pop(branch)
        model.exported.pop(branch, None)
        if worktree is not None and (worktree / ".git").exists():
            common = (worktree / git(worktree, "rev-parse", "--git-common-dir").strip()).resolve()
            name = git(worktree, "rev-parse", "--abbrev-ref", "HEAD").strip()
            git(common, "worktree", "remove", "--force", "--force", str(worktree))  # twice: also a locked one
        else:  # best effort, as a user would: a half-made worktree may still hold the branch
            common, name = self.world.dir / "cache" / "upstream.git", branch
            shutil.rmtree(self.world.root(clone) / "work" / branch, ignore_errors=True)
            git(common, "worktree", "prune")
            with contextlib.suppress(RuntimeError):
                git(common, "branch", "-D", name)
            return
        if name != "HEAD":
            git(common, "branch", "-D", name)

    @rule(clone=st.sampled_from(CLONES), ident=st.sampled_from(DROPPABLE), rejected=st.booleans())
    @step
    def drop(self, clone: str, ident: str, rejected: bool) -> None:
        self.run(clone, "drop", ident, "--reason", "not needed any more", *(["--rejected"] if rejected else []))

    @rule(clone=st.sampled_from(CLONES))
    @step
    def fill_metadata(self, clone: str) -> None:
        """The user fills in the TODOs a new entry was scaffolded with."""
        path = self.world.root(clone) / "patchset.toml"
        text = path.read_text()
        if "TODO:" in text:
            self.counter += 1
            path.write_text(re.sub(r'"TODO: ([^"]*)"', rf'"filled {self.counter}: \1"', text))
            self.models[clone].seen = ids_are_kept(manifest_parses(self.world.root(clone)), {})

    @rule(clone=st.sampled_from(CLONES), version=st.sampled_from(("1.1", "1.0")), then=st.sampled_from(RESUME))
    @step
    def rebase_to(self, clone: str, version: str, then: str) -> None:
        """`rebase --to`; at a conflict, what the user does next (or leave it stopped)."""
        res = self.run(clone, "rebase", "--to", version)
        for _ in range(3):  # the demo series stops at most at three patches
            if res.code != 3 or then == "leave":
                return
            res = self._resume(clone, then)

    @rule(clone=st.sampled_from(CLONES), how=st.sampled_from((*RESUME[:-1], "unresolved")))
    @step
    def rebase_resume(self, clone: str, how: str) -> None:
        """Finish a stopped rebase: take one side of each conflict and --continue, or --skip, --abort."""
        if (self.world.root(clone) / REBASE_STATE).exists():
            self._resume(clone, how)

    def _resume(self, clone: str, how: str) -> Result:
        tree = self.world.root(clone) / CONFLICT_TREE
        if how in ("ours", "theirs") and tree.is_dir():
            for path in tree.rglob("*"):
                if path.is_file() and ".git" not in path.relative_to(tree).parts:
                    text = path.read_text(errors="replace")
                    if "<<<<<<< " in text:
                        path.write_text(_resolve(text, how))
        args = {"skip": ("--skip", "--reason", "cannot carry it"), "abort": ("--abort",)}.get(how, ("--continue",))
        return self.run(clone, "rebase", *args)

    @rule(
        clone=st.sampled_from(CLONES),
        command=st.sampled_from(KILLABLE),
        delay_ms=st.integers(min_value=0, max_value=1500),
    )
    @step
    def kill(self, clone: str, command: tuple[str, ...], delay_ms: int) -> None:
        """kill -9 at a random point of a writing command, then what the user does: recover."""
        self.world.killed(clone, command, delay_ms / 1000)
        root = self.world.root(clone)
        if (root / JOURNAL).exists():
            res = self.run(clone, "recover")
            assert res.code == 0, f"recover after a kill failed: {res.doc}"
        model = self.models[clone]
        model.exported.clear()  # the branch or the series may have moved: nothing is known unchanged
        for branch in BRANCHES:  # a killed checkout may have made its branch, its worktree or both
            worktree = root / "work" / branch
            if (worktree / ".git").exists():
                model.checkouts[branch] = worktree
            elif (
                command[0] == "checkout"
                and branch == (command[2] if len(command) > 2 else BRANCHES[0])
                and not any(branch in self.models[c].checkouts for c in CLONES if c != clone)
            ):
                model.checkouts.setdefault(branch, None)  # perhaps its branch without a worktree

    @rule(clone=st.sampled_from(CLONES), command=st.sampled_from(("status", "check")))
    @step
    def read(self, clone: str, command: str) -> None:
        self.run(clone, command)

    # -- after every step ---------------------------------------------------------------------------

    @invariant()
    @step
    def invariants_hold(self) -> None:
        nothing_outside_changed(self.world)
        for clone in CLONES:
            model, root = self.models[clone], self.world.root(clone)
            digest = series_digest(root)
            if digest == model.checked:
                continue  # the same files held every invariant last time
            manifest = manifest_parses(root)
            model.seen = ids_are_kept(manifest, model.seen)
            files_are_consistent(root, manifest)
            series_applies(self.world, clone)
            model.checked = digest


@pytest.mark.slow
def test_model(template: Template) -> None:
    """The model, bounded and derandomized: part of every CI run (`nox -s fuzz` explores further)."""
    run_state_machine_as_test(lambda: PatchtoolModel(template), settings=_budget())
