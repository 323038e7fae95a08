"""What a patch assumes about upstream, and how it is verified on a GPU: the checks ``check``
runs against the pinned tree (``Assumption``) and the GPU checks a results file is matched to
(``GpuCheck``, ``gpu_run_selectors``). Pure: each reads itself from a ``fields.Fields`` view.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any

from patchtool.names import PatchId, RepoPath
from patchtool.paths import MAX_INPUT_BYTES
from patchtool.project.fields import Fields
from patchtool.project.patterns import RepoPattern, multiline_pattern


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Assumption:
    """What a patch assumes about upstream: a file exists, a regex matches N times."""

    id: str
    file: str
    why: str
    exists: bool = True
    pattern: RepoPattern | None = None
    count: int | None = None  # exactly
    min_count: int | None = None  # at least

    @classmethod
    def read(cls, f: Fields) -> Assumption | None:
        ident = f.parsed("id", PatchId)
        file = f.parsed("file", RepoPath)
        why = f.string("why")
        exists = f.boolean("exists", required=False)
        pattern = f.parsed("regex", multiline_pattern, required=False)
        count = f.integer("count", required=False, minimum=0, maximum=MAX_COUNT)
        min_count = f.integer("min_count", required=False, minimum=1, maximum=MAX_COUNT)
        f.done()
        if count is not None and min_count is not None:
            f.problem("count", "give either 'count' (exactly) or 'min_count' (at least), not both")
            return None
        if (count is not None or min_count is not None) and pattern is None:
            f.problem("regex", "a count needs a 'regex' to count")
            return None
        if exists is False and pattern is not None:
            f.problem("regex", "a file that must not exist has no content to match")
            return None
        if ident is None or file is None or why is None:
            return None
        if pattern is not None and count is None and min_count is None:
            min_count = 1
        return cls(
            id=ident,
            file=file,
            why=why,
            exists=exists if exists is not None else True,
            pattern=pattern,
            count=count,
            min_count=min_count,
        )

    def describe(self) -> str:
        if not self.exists:
            return f"{self.file} does not exist"
        if self.pattern is None:
            return f"{self.file} exists"
        if self.count is not None:
            n = "no" if self.count == 0 else f"exactly {self.count}"
            return f"{self.file} has {n} match(es) of /{self.pattern.pattern}/"
        return f"{self.file} has at least {self.min_count} match(es) of /{self.pattern.pattern}/"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "file": self.file}
        if not self.exists:
            out["exists"] = False
        if self.pattern is not None:
            out["regex"] = self.pattern.pattern
        if self.count is not None:
            out["count"] = self.count
        elif self.min_count is not None:
            out["min_count"] = self.min_count
        out["why"] = self.why
        return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GpuCheck:
    """A verification that needs a GPU: what to run and what to expect."""

    run: str
    expect: str
    hardware: str | None = None

    @classmethod
    def read(cls, f: Fields) -> GpuCheck | None:
        run = f.string("run")
        expect = f.string("expect")
        hardware = f.string("hardware", required=False)
        f.done()
        if run is None or expect is None:
            return None
        return cls(run=run, expect=expect, hardware=hardware)

    def to_dict(self) -> dict[str, Any]:
        out = {"run": self.run, "expect": self.expect}
        if self.hardware:
            out["hardware"] = self.hardware
        return out

    def selectors(self) -> tuple[str, ...]:
        """The GPU checks ``run`` selects (pytest node ids or paths under tests/gpu); ValueError with
        the message `check` shows when ``run`` is not such a command (prose, say)."""
        return gpu_run_selectors(self.run)


GPU_CHECKS_DIR = "tests/gpu"
MAX_COUNT = MAX_INPUT_BYTES + 1  # a regex's matches in a file patchtool reads: one a byte, one at its end
_PYTEST_FLAGS = frozenset({"-q", "-v", "-vv", "-x", "-s", "-ra", "-rA", "--no-header"})  # select nothing
_RUN_FORMS = (
    "python -m pytest tests/gpu/FILE.py::TEST",
    "python tests/gpu/run.py [tests/gpu/...]",
    "nox -s gpu [-- tests/gpu/...]",
)


def gpu_run_selectors(run: str) -> tuple[str, ...]:
    """Pure: the checks a ``gpu_verification.run`` command selects, by the forms it may take:
    ``python -m pytest SEL...`` (or ``pytest SEL...``), ``python tests/gpu/run.py [SEL...]`` and
    ``nox -s gpu [-- SEL...]``, every SEL a path or node id under tests/gpu. A command is what a
    results file can be matched to; anything else is refused."""
    try:
        argv = shlex.split(run)
    except ValueError:  # an unclosed quote: prose with an apostrophe, most likely
        argv = []
    rest: list[str] | None = None
    if argv[:1] in (["python"], ["python3"]) and argv[1:3] == ["-m", "pytest"]:
        rest = [a for a in argv[3:] if a not in _PYTEST_FLAGS]
    elif argv[:1] == ["pytest"]:
        rest = [a for a in argv[1:] if a not in _PYTEST_FLAGS]
    elif argv[:1] in (["python"], ["python3"]) and argv[1:2] == [f"{GPU_CHECKS_DIR}/run.py"]:
        rest = argv[2:] or [GPU_CHECKS_DIR]
    elif argv[:3] == ["nox", "-s", "gpu"]:
        rest = argv[4:] if argv[3:4] == ["--"] else argv[3:]
        rest = rest or [GPU_CHECKS_DIR]
    if rest is None:
        raise ValueError(
            f"not a command that runs checks under tests/gpu: {_clip(run)}; write one of "
            f"{', '.join(repr(f) for f in _RUN_FORMS)}"
        )
    if not rest:
        raise ValueError(f"{_clip(run)} names no check; name it, e.g. '{_RUN_FORMS[0]}'")
    for arg in rest:
        path = arg.split("::", 1)[0].rstrip("/")
        if arg.startswith("-"):
            raise ValueError(
                f"{_clip(run)}: option {arg!r} is not allowed; select checks by node id "
                f"({GPU_CHECKS_DIR}/FILE.py::TEST) so results can be matched to them"
            )
        if path != GPU_CHECKS_DIR and not (path.startswith(f"{GPU_CHECKS_DIR}/") and path.endswith(".py")):
            raise ValueError(
                f"{_clip(run)}: {arg!r} is not a check under {GPU_CHECKS_DIR}/ "
                f"(a path or node id such as {GPU_CHECKS_DIR}/test_0002_mma.py::test_name)"
            )
    return tuple(rest)


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")
