"""What the cache's repository holds and git's own upkeep of it: refs by prefix, object counts, gc.

Small functions over ``Repo`` (kept apart from ``repo.py``): pruning goes only through git's
reachability, so an object any ref keeps alive (a rebase's replayed commits) is never removed.
"""

from __future__ import annotations

from patchtool.git.repo import OWN_REFS, Repo


def refs(repo: Repo, *prefixes: str) -> dict[str, str]:
    """ref -> the object it names, for every ref under ``prefixes``."""
    out = repo.out("for-each-ref", "--format=%(refname) %(objectname)", args=prefixes)
    return {name: sha for name, _, sha in (line.partition(" ") for line in out.splitlines()) if sha}


def count_objects(repo: Repo) -> dict[str, int]:
    """``git count-objects -v`` as numbers: count (loose), size (KiB loose), in-pack, packs, size-pack, garbage."""
    out: dict[str, int] = {}
    for line in repo.out("count-objects", "-v").splitlines():
        key, _, value = line.partition(": ")
        if value.strip().isdigit():
            out[key.strip()] = int(value)
    return out


def gc(repo: Repo, *, now: bool) -> None:
    """Pack the repository and prune unreachable objects: those older than git's grace period
    (``gc.pruneExpire``, two weeks by default), or every one with ``now``."""
    repo.out("gc", "--quiet", *(["--prune=now"] if now else []))


def clear_ref_locks(repo: Repo) -> list[str]:
    """Remove the ``.lock`` files under ``OWN_REFS`` (the refs patchtool alone writes): call it
    holding the lock those writes are made under, when any such file is one a killed git left.
    The refs they were beside, as repository paths."""
    top = repo.git_dir / OWN_REFS
    stale = sorted(p for p in top.rglob("*.lock") if p.is_file() and not p.is_symlink()) if top.is_dir() else []
    for path in stale:
        path.unlink(missing_ok=True)
    return [str(p.relative_to(repo.git_dir)).removesuffix(".lock") for p in stale]
