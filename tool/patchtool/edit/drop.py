"""``patchtool drop``: a patch taken out of the series with the reason, and with ``--rejected``
into the registry too, in the same transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from patchtool import paths
from patchtool.errors import UsageError
from patchtool.project import tomlio
from patchtool.project.repository import Project, manifest_document, manifest_text, record_dropped
from patchtool.registry import workflows as retread
from patchtool.series.standalone import dependants
from patchtool.series.writes import write_series


def drop(
    project: Project,
    *,
    ident: str,
    reason: str,
    rejected: bool,
    knobs: Sequence[dict[str, Any]] = (),
    unguarded: str | None = None,
) -> list[str]:
    """Take a patch out of the series with the reason; with ``rejected``, into the registry too, guarded
    by the knobs it added and ``knobs`` (or, with none, ``unguarded``: why no knob can see it)."""
    root = project.root
    try:
        entry = project.manifest.get(ident)
    except KeyError:
        known = ", ".join(e.id for e in project.manifest.patches)
        raise UsageError(f"no patch {ident!r} in the series", hint=f"known: {known}") from None
    if needed_by := dependants(project.manifest, ident):
        raise UsageError(
            f"patch {ident!r} is required by {', '.join(needed_by)} (their requires in patchset.toml)",
            hint="drop those first, or take it out of their requires if they no longer need it",
        )
    doc = manifest_document(root)
    table = tomlio.take_table(doc, "patch", next(i for i, t in enumerate(doc["patch"]) if str(t["id"]) == ident))
    moved = record_dropped(root, doc, table, reason=reason, dropped_at=str(doc["pin"]))
    extra: dict[str, str] = {}
    if rejected:
        if not entry.evidence:
            raise UsageError(
                f"patch {ident!r} has no evidence rows to carry into the registry",
                hint="add [[patch.evidence]] first, or drop it without --rejected",
            )
        rejection = rejection_from(project, ident, reason, knobs=knobs, unguarded=unguarded)
        if not rejection["knobs"] and not unguarded:
            raise UsageError(
                f"patch {ident!r} adds no knob, so its registry entry would be invisible: neither "
                "`check` nor `retread scan` could ever see the idea come back",
                hint="name what would re-introduce it (--flag, --env, --config, --pattern), or say "
                'why nothing can with --unguarded "..."',
            )
        _, name, registry_text = retread.added(project, rejection)
        extra[name] = registry_text  # the registry entry and the drop: one transaction
    text = paths.read_inside(root, entry.file).decode("utf-8")
    return write_series(root, {**extra, moved: text}, manifest_text(doc), remove=[entry.file], moves={})


def rejection_from(
    project: Project, ident: str, reason: str, *, knobs: Sequence[dict[str, Any]] = (), unguarded: str | None = None
) -> dict[str, Any]:
    """A registry entry for a dropped patch, with its evidence, the knobs it added and ``knobs``."""
    e = project.manifest.get(ident)
    hardware = ", ".join(e.scope.hardware) if e.scope else None
    model = ", ".join(e.scope.model) if e.scope else None
    evidence = [
        {"metric": m.metric}
        | {key: value for key in ("before", "after", "change") if (value := getattr(m, key)) is not None}
        | ({"hardware": m.conditions.get("hardware", hardware)} if hardware else {})
        | ({"model": m.conditions.get("model", model)} if model else {})
        | {"upstream": str(project.pin().version)}
        | ({"conditions": dict(m.conditions)} if m.conditions else {})
        | {"source": m.source}
        for m in e.evidence
    ]
    return {
        "id": ident,
        "title": f"patch {ident}",
        "tried": e.why.strip(),
        "verdict": "rejected",
        "reason": reason,
        "revisit": e.drop_when,
        "evidence": evidence,
        "knobs": [{"type": k.type.value, "name": k.name} for k in e.knobs if k.relation.value == "adds"] + list(knobs),
    } | ({"unguarded": unguarded} if unguarded else {})
