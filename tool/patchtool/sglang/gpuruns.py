"""This fork's GPU checks are pytest checks under ``tests/gpu``: what a ``gpu_verification.run``
command selects there (pure), and what ``check`` says of a command that selects nothing there or a
check that is not there."""

from __future__ import annotations

import ast
import shlex
from collections.abc import Sequence
from pathlib import Path

from patchtool.errors import InvalidInput, Problem
from patchtool.paths import read_inside
from patchtool.project.fields import KeyLines
from patchtool.project.manifest import MANIFEST_NAME, PatchEntry

GPU_CHECKS_DIR = "tests/gpu"
_PYTEST_FLAGS = frozenset({"-q", "-v", "-vv", "-x", "-s", "-ra", "-rA", "--no-header"})  # select nothing
_NOT_A_COMMAND = (  # the hint for a run that is prose
    "what to compare against goes in 'expect'; a benchmark against a deployment is a check under "
    "tests/gpu that drives it (gpu_support.require_deployment())"
)
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
        rest = (argv[4:] if argv[3:4] == ["--"] else argv[3:]) or [GPU_CHECKS_DIR]
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


def gpu_run_problems(root: Path, entries: Sequence[PatchEntry]) -> list[Problem]:
    """Every ``gpu_verification.run`` must be a command that runs checks under tests/gpu, and every
    check it names must exist, so `status` can match a results file to it."""
    lines = KeyLines(read_inside(root, MANIFEST_NAME).decode("utf-8"))
    problems: list[Problem] = []
    for i, entry in enumerate(entries):
        for j, gpu in enumerate(entry.gpu_verification):
            key = f"patch[{i}].gpu_verification[{j}].run"
            try:
                selectors = gpu_run_selectors(gpu.run)
            except ValueError as exc:
                why, hint = str(exc), _NOT_A_COMMAND
            else:
                if not (missing := [m for s in selectors if (m := _missing_check(root, s))]):
                    continue
                why, hint = "; ".join(missing), "write the check under tests/gpu/ or fix the node id"
            line = lines.line(key)
            problems.append(
                Problem(file=MANIFEST_NAME, line=line, patch=entry.id, key=key, code="gpu-run", message=why, hint=hint)
            )
    return problems


def _missing_check(root: Path, selector: str) -> str | None:
    """What a selector names that is not there: its file, or the test function (or class) in it."""
    path, _, node = selector.partition("::")
    path = path.rstrip("/")
    if path == GPU_CHECKS_DIR:
        return None if (root / path).is_dir() else f"{path}/ does not exist"
    try:
        source = read_inside(root, path).decode("utf-8")
    except FileNotFoundError:
        return f"{path} does not exist"
    except (InvalidInput, UnicodeDecodeError) as exc:
        return f"{path} cannot be read: {exc}"
    if not node:
        return None
    try:
        body = ast.parse(source).body
    except SyntaxError as exc:
        return f"{path} does not parse: {exc}"
    for part in node.split("::"):
        name = part.split("[", 1)[0]  # a parametrised id names its function
        # the last definition of a name is the one pytest collects
        found = {n.name: n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
        if name not in found:
            return f"{path} has no {name}"
        body = found[name].body if isinstance(found[name], ast.ClassDef) else []
    return None
