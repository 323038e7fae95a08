"""What the shell completes from the repository: patch ids, pin names, rebase targets.

Each is a typer ``autocompletion`` callback. It reads (the manifest, ``upstream-pins/``, the
cache's tags), never writes, takes no lock and never raises: whatever goes wrong, the shell gets
no candidates rather than a traceback in the middle of a command line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from patchtool.cli.context import Invocation


def _repository(ctx: typer.Context) -> Path:
    """The repository the command line is about: its ``--root`` (before or after the command),
    else the nearest parent of the current directory with patchset.toml."""
    from patchtool.project.repository import Project  # GitPython and tomlkit: only a completion loads them

    return _given(ctx, "global_root") or Project.find(Path.cwd())


def _given(ctx: typer.Context, param: str) -> Path | None:
    """The path a global option names, before or after the command, or None."""
    here: Any = ctx  # click's Context: its parent is one too
    while here is not None:
        if here.params.get(param):
            return Path(here.params[param])
        here = here.parent
    return None


def _candidates(collect: Callable[[typer.Context], Iterator[str]]) -> Callable[[typer.Context, str], list[str]]:
    """A completion of what ``collect`` yields that starts as the word typed so far."""

    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        found: list[str] = []
        with contextlib.suppress(Exception):  # what was found so far: never a traceback in a command line
            found.extend(collect(ctx))  # extend keeps what it appended before an error
        return [c for c in dict.fromkeys(found) if c.startswith(incomplete)]

    return complete


@_candidates
def patch_ids(ctx: typer.Context) -> Iterator[str]:
    """The ids of the series, in its order."""
    from patchtool.project.manifest import MANIFEST_NAME, load

    yield from (e.id for e in load(_repository(ctx) / MANIFEST_NAME).patches)


@_candidates
def pin_names(ctx: typer.Context) -> Iterator[str]:
    """The pins in upstream-pins/."""
    from patchtool.upstream.pinning import pin_names as names  # the pins' workflow: every command would load it

    yield from names(_repository(ctx))


@_candidates
def rebase_targets(ctx: typer.Context) -> Iterator[str]:
    """``latest``, the versions of the pins in upstream-pins/, and the versions of the active
    pin's distribution the cache has imported (no index is asked: a completion is instant)."""
    from patchtool.git.housekeeping import refs
    from patchtool.project.manifest import MANIFEST_NAME, load
    from patchtool.project.pins import load_pin
    from patchtool.upstream.pinning import pin_names as names  # the pins' workflow: every command would load it
    from patchtool.upstream.refnames import IMPORTS

    yield "latest"
    where = _repository(ctx)
    for name in names(where):
        with contextlib.suppress(Exception):
            yield str(load_pin(where, name).version)
    if (pin := load_pin(where, load(where / MANIFEST_NAME).pin)).artifact is None:
        return
    prefix = f"{IMPORTS}{pin.artifact.distribution.canonical}-"
    tags = refs(Invocation(root=where, cache_dir=_given(ctx, "global_cache_dir")).cache().repo, prefix)
    yield from (ref.removeprefix(prefix).rpartition("-")[0] for ref in sorted(tags))


PinOption = Annotated[
    str | None,
    typer.Option(
        "--pin", metavar="NAME", help="A pin in upstream-pins/ (default: the active one).", autocompletion=pin_names
    ),
]
