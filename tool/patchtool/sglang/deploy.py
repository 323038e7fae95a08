"""A deployment file as `retread scan` reads it: its sglang launches, the PD role each serves,
and the lines that belong to none.

Serve scripts, env files, systemd units, Kubernetes manifests, compose files and JSON argument
lists all nest what belongs to one launch under it, by indentation or by a shell line's
trailing backslash. So a file is read as a tree of logical lines, and each launch is the
largest block that holds it and no other launch: a compose file's ``decode:`` service, a
manifest's pod spec, a script's launch command with its continued lines. A file with one launch
is one block. Pure functions over text.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from patchtool.errors import UsageError
from patchtool.inputs import read_named
from patchtool.registry.entries import Finding, Registry, scan_lines
from patchtool.registry.evidencescope import Mode, Role
from patchtool.sglang.arguments import Value, last_value
from patchtool.sglang.launch import NOTHING_SAID, LaunchFacts, Unstated, Verdict, fit

_LAUNCH_RE = re.compile(
    r"sglang\.launch_server|\bsglang(?:[\"']?\s*,\s*[\"']?|\s+)serve\b"
    r"|sglang\.srt\.entrypoints|launch_server\.py"
)
# sglang's own server argument: where no launch command is written (the image's entrypoint runs it),
# an argument list that has it is the launch
_SERVER_ARGS_RE = re.compile(r"(?<![\w-])--model-path(?![\w-])")
_COMMENT_RE = re.compile(r"^\s*(?:#|//)")
# sglang's model argument (--model is its alias) and its PD role
_MODEL_FLAGS = ("--model-path", "--model")
_ROLE_FLAG = "--disaggregation-mode"


def roles_of(text: str, name: str = "") -> frozenset[str]:
    """The PD roles a deployment file serves, from --disaggregation-mode or its file name."""
    said = last_value(text, _ROLE_FLAG)
    roles = {said.text} if said and said.literal and said.text in tuple(Role) else set()
    return frozenset(roles | {role for role in ("prefill", "decode") if role in name.lower()})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Block:
    """Lines of a deployment file (1-based numbers) and the PD roles they serve (empty: unknown)."""

    lines: tuple[int, ...]
    roles: frozenset[str]
    launch: int | None = None  # the line that starts the launch, for a launch's block


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    launches: tuple[Block, ...]
    shared: Block  # lines outside every launch: settings several launches may share


@dataclasses.dataclass(kw_only=True, slots=True)
class _Node:
    lines: list[int]  # the logical line: a physical line and those its backslashes continue into
    indent: int
    launch: bool
    children: list[_Node] = dataclasses.field(default_factory=list)

    def launches(self) -> int:
        return int(self.launch) + sum(c.launches() for c in self.children)

    def all_lines(self) -> list[int]:
        return self.lines + [n for c in self.children for n in c.all_lines()]

    def first_launch(self) -> int:
        return self.lines[0] if self.launch else next(c.first_launch() for c in self.children if c.launches())


def layout(text: str, name: str = "") -> Layout:
    """Which lines of ``text`` belong to which launch, and the roles of each."""
    lines = text.splitlines()
    root = _tree(lines)
    file_roles = roles_of(text, name)
    every = tuple(root.all_lines())
    if root.launches() == 0:
        return Layout(launches=(), shared=Block(lines=every, roles=file_roles))
    if root.launches() == 1:
        return Layout(
            launches=(Block(lines=every, roles=file_roles, launch=root.first_launch()),),
            shared=Block(lines=(), roles=file_roles),
        )
    blocks: list[_Node] = []
    shared: list[int] = []
    _split(root, blocks, shared)
    found: list[Block] = []
    for node in blocks:
        numbers = node.all_lines()
        own = "\n".join(lines[n - 1] for n in numbers)
        found.append(
            Block(lines=tuple(numbers), roles=roles_of(own, lines[numbers[0] - 1]), launch=node.first_launch())
        )
    return Layout(launches=tuple(found), shared=Block(lines=tuple(sorted(shared)), roles=frozenset()))


def _split(node: _Node, blocks: list[_Node], shared: list[int]) -> None:
    """The largest blocks under ``node`` that hold exactly one launch; the rest is shared."""
    if (n := node.launches()) == 1:
        blocks.append(node)
        return
    shared += node.lines
    if n == 0:
        shared += [x for c in node.children for x in c.all_lines()]
        return
    for child in node.children:
        _split(child, blocks, shared)


def _tree(lines: list[str]) -> _Node:
    """A root with every logical line under it, nested by indentation."""
    launch = _LAUNCH_RE if any(_LAUNCH_RE.search(line) for line in lines) else _SERVER_ARGS_RE
    root = _Node(lines=[], indent=-1, launch=False)
    stack = [root]
    i = 0
    while i < len(lines):
        if not (line := lines[i]).strip() or _COMMENT_RE.match(line):
            i += 1
            continue
        numbers = [i + 1]
        while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            numbers.append(i + 1)
        text = " ".join(lines[n - 1] for n in numbers)
        indent = len(line) - len(line.lstrip())
        node = _Node(lines=numbers, indent=indent, launch=bool(launch.search(text)))
        while stack[-1].indent >= indent:
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
        i += 1
    return root


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Note:
    """A use of a rejected knob in a launch that does not say whether it is in the entry's scope."""

    finding: Finding
    unknown: tuple[str, ...]  # what the launch does not say

    def to_dict(self) -> dict[str, Any]:
        return {**self.finding.to_dict(), "unknown": list(self.unknown)}

    def render(self) -> str:
        f = self.finding
        scope = f.scope.describe() if f.scope else "everywhere"
        return (
            f"{f.file}:{f.line}: {f.text!r} would re-introduce rejected idea {f.entry!r} ({f.knob}) "
            f"where its evidence holds ({scope}); scope unknown: {'; '.join(self.unknown)}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Scanned:
    """What a scan found: uses in their entry's scope, and uses where the scope is unknown."""

    findings: tuple[Finding, ...] = ()
    notes: tuple[Note, ...] = ()

    def __add__(self, other: Scanned) -> Scanned:
        return Scanned(findings=self.findings + other.findings, notes=self.notes + other.notes)


def facts_of(
    own: Sequence[str],
    shared: Sequence[str] = (),
    *,
    roles: frozenset[str],
    launch: bool,
    assumed: LaunchFacts = NOTHING_SAID,
) -> LaunchFacts:
    """Where the launch in ``own`` runs (``shared``: the lines it shares with other launches), as
    far as it says; ``assumed`` fills what it does not (the model and hardware given on the
    command line)."""

    def said(*flags: str) -> Value | None:
        return last_value("\n".join(own), *flags) or last_value("\n".join(shared), *flags)

    path = said(*_MODEL_FLAGS)
    model: str | Unstated | None = assumed.model
    if path is not None and path.literal:
        model = path.text
    elif path is not None and model is None:
        model = Unstated(said=str(path))
    serving = said(_ROLE_FLAG)
    mode: Mode | Unstated | None = assumed.mode
    if roles:
        mode = Mode.PD
    elif serving is not None and not serving.literal:
        mode = Unstated(said=str(serving))
    elif launch:
        mode = Mode.SINGLE
    return LaunchFacts(
        model=model, hardware=assumed.hardware, mode=mode, roles=frozenset(Role(r) for r in roles) or assumed.roles
    )


def scan_text(
    registry: Registry, text: str, *, file: str, name: str = "", assumed: LaunchFacts = NOTHING_SAID
) -> Scanned:
    """A deployment file: every rejected knob it sets, and every required flag a launch lacks,
    each a finding where the launch is in the entry's scope and a note where that is unknown."""
    lines = text.splitlines()
    plan = layout(text, name or file)
    shared = [lines[n - 1] for n in plan.shared.lines]
    sites = [
        facts_of([lines[n - 1] for n in b.lines], shared, roles=b.roles, launch=True, assumed=assumed)
        for b in plan.launches
    ]
    # lines outside every launch are shared by all of them
    shared_sites = sites or [facts_of(shared, roles=plan.shared.roles, launch=False, assumed=assumed)]
    found: list[tuple[Finding, list[LaunchFacts]]] = []
    for block, where in (*zip(plan.launches, ([s] for s in sites), strict=True), (plan.shared, shared_sites)):
        numbered = [(n, lines[n - 1]) for n in sorted(block.lines)]
        found += [(f, where) for f in scan_lines(registry, numbered, file=file, roles=block.roles)]
    for launch, site in zip(plan.launches, sites, strict=True):
        assert launch.launch is not None
        seen = [lines[n - 1] for n in (*launch.lines, *plan.shared.lines)]
        for entry in registry.entries:
            for guard in entry.knobs:
                if not guard.missing or not guard.applies_to(file, launch.roles):
                    continue
                # a launch whose role is unknown is not asked for a flag only one role needs
                if (guard.roles and not launch.roles & set(guard.roles)) or any(guard.match(line) for line in seen):
                    continue
                missing = Finding(
                    file=file,
                    line=launch.launch,
                    entry=entry.id,
                    knob=guard.describe(),
                    text=lines[launch.launch - 1].strip(),
                    reason=entry.reason,
                )
                found.append((missing, [site]))
    findings: dict[tuple[int, str, str], Finding] = {}
    notes: dict[tuple[int, str, str], Note] = {}
    for finding, where in found:
        scope = registry.get(finding.entry).scope
        scoped = dataclasses.replace(finding, scope=None if scope.everywhere else scope)
        fits = [fit(scope, w) for w in where]
        key = (finding.line, finding.entry, finding.knob)
        if any(f.verdict is Verdict.IN for f in fits):
            findings[key] = scoped
        elif unknown := [f for f in fits if f.verdict is Verdict.UNKNOWN]:
            notes[key] = Note(finding=scoped, unknown=unknown[0].why)
    return Scanned(
        findings=tuple(sorted(findings.values(), key=lambda f: (f.line, f.entry))),
        notes=tuple(sorted(notes.values(), key=lambda n: (n.finding.line, n.finding.entry))),
    )


def scan(registry: Registry, paths: Sequence[Path], *, assumed: LaunchFacts = NOTHING_SAID) -> Scanned:
    """Every deployment file under ``paths``; ``assumed``: what the user says of launches that do
    not say it themselves (their model, the hardware)."""
    found = Scanned()
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            try:
                data = read_named(file, what="the file to scan")
            except FileNotFoundError:
                raise UsageError(f"{file} does not exist", file=str(file)) from None
            if path.is_dir() and b"\0" in data:
                continue  # a binary file met walking a directory: nothing a deployment sets lives there
            # a launch's flags are ASCII: a Latin-1 comment beside them must not hide the file
            text = data.decode("utf-8", "replace")
            found += scan_text(registry, text, file=str(file), name=file.name, assumed=assumed)
    return found
