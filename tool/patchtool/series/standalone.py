"""What a patch needs besides the pin: the ``requires`` relation between the series' entries, and
``check --standalone``: each patch applied alone at the pin onto what it requires, and where it
does not apply so, the earlier patches whose lines it silently needs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from patchtool import git
from patchtool.errors import Problem
from patchtool.project.manifest import MANIFEST_NAME, Manifest
from patchtool.project.repository import LoadedPatch
from patchtool.series.apply import HunkFailure, apply_series


def dependants(manifest: Manifest, ident: str) -> tuple[str, ...]:
    """The patches of the series whose ``requires`` names ``ident``, in series order."""
    return tuple(e.id for e in manifest.patches if ident in e.requires)


def required_closure(manifest: Manifest, ident: str) -> tuple[str, ...]:
    """What ``ident`` requires, transitively, in series order, then ``ident`` itself: the patches a
    pull request of ``ident`` carries."""
    needed: set[str] = set()
    todo = [ident]
    while todo:
        for dep in manifest.get(todo.pop()).requires:
            if dep not in needed:
                needed.add(dep)
                todo.append(dep)
    return (*(e.id for e in manifest.patches if e.id in needed), ident)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Standalone:
    """One patch applied at the pin onto only what it requires (``onto``, transitively)."""

    id: str
    onto: tuple[str, ...]
    ok: bool
    failed: str | None = None  # the patch of the attempt that did not apply: this one or one it requires
    failures: tuple[HunkFailure, ...] = ()
    needs: tuple[str, ...] = ()  # earlier patches, not required, without which it does not apply
    in_series: bool = True  # False: it does not apply after every earlier patch either

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id, "onto": list(self.onto), "ok": self.ok}
        if not self.ok:
            out |= {
                "failed": self.failed,
                "failures": [f.to_dict() for f in self.failures],
                "needs": list(self.needs),
                "in_series": self.in_series,
            }
        return out


def check_standalone(
    repo: git.Repo, base: str, manifest: Manifest, loaded: Sequence[LoadedPatch], idents: Sequence[str]
) -> tuple[Standalone, ...]:
    """Each patch of ``idents`` applied on ``base`` after only its ``requires``; where that fails,
    the fewest earlier patches (dropped one at a time, the latest first) it still applies after."""
    by_id = {lp.id: lp for lp in loaded}
    order = [lp.id for lp in loaded]

    def applies(ids: Sequence[str]) -> bool:
        return apply_series(repo, base, [by_id[i] for i in ids], commit=False).ok

    out = []
    for ident in idents:
        closure = required_closure(manifest, ident)
        onto = closure[:-1]
        if (alone := apply_series(repo, base, [by_id[i] for i in closure], commit=False)).ok:
            out.append(Standalone(id=ident, onto=onto, ok=True))
            continue
        failed = alone.failed
        assert failed is not None
        earlier = order[: order.index(ident)]
        kept = list(earlier)
        if not applies([*kept, ident]):
            out.append(
                Standalone(id=ident, onto=onto, ok=False, failed=failed.id, failures=failed.failures, in_series=False)
            )
            continue
        for candidate in reversed(earlier):
            trial = [i for i in kept if i != candidate]
            if candidate not in onto and applies([*trial, ident]):
                kept = trial
        needs = tuple(i for i in kept if i not in onto)
        out.append(Standalone(id=ident, onto=onto, ok=False, failed=failed.id, failures=failed.failures, needs=needs))
    return tuple(out)


def standalone_problems(results: Sequence[Standalone], manifest: Manifest, pin: str) -> list[Problem]:
    """A problem for each patch that does not apply alone, at its entry's ``requires``."""
    index = {e.id: i for i, e in enumerate(manifest.patches)}
    problems = []
    for r in results:
        if r.ok:
            continue
        onto = f"onto {', '.join(r.onto)}" if r.onto else "with nothing before it"
        where = "; ".join(f"{f.file}" + (f" hunk {f.hunk}" if f.hunk else "") + f": {f.reason}" for f in r.failures)
        of = "" if r.failed == r.id else f" (its required patch {r.failed} fails first)"
        if r.needs:
            said = f"it needs {', '.join(r.needs)}, which its entry does not require"
            listed = ", ".join(f'"{i}"' for i in (*r.onto, *r.needs))
            hint = f"add requires = [{listed}] to its entry, or rebase it onto the pin alone"
        else:
            said = "it does not apply after the earlier patches either"
            hint = "rebase the patch onto the pin"
        problems.append(
            Problem(
                file=MANIFEST_NAME,
                patch=r.id,
                key=f"patch[{index[r.id]}].requires",
                code="standalone",
                message=f"does not apply alone at {pin} {onto}{of}: {where}; {said}",
                hint=hint,
            )
        )
    return problems
