"""What a patch needs besides the pin: the ``requires`` relation between the series' entries."""

from __future__ import annotations

from patchtool.project.manifest import Manifest


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
