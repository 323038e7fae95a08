"""The invocation a command line makes, frozen on typer's context (``ctx.obj``): its global options
and what its command declares it does; and what a command reaches through it, the patch repository
(locked for the command) and the upstream cache.

The root command puts a bare ``Invocation`` there; each command or group on the way takes the
global options given after it (after wins), and the command's declaration (``exits.command``) adds
what it may write. A command reads it from the ``ctx: typer.Context`` its signature takes.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from patchtool.errors import UsageError

if TYPE_CHECKING:
    from patchtool.confine import Unconfined
    from patchtool.project.repository import Project
    from patchtool.upstream.cache import Cache

# The repository and the cache are imported where a command reaches them: they load GitPython, tomlkit,
# unidiff and packaging, which every command module importing this one would cost --version and --help.

# the global options, as the root command's parameters name them (``app._top``)
GLOBALS = ("global_json", "global_root", "global_cache_dir", "global_allow_local", "global_allow_local_in")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Invocation:
    """The command this command line runs: its name, its global options, what it may write."""

    command: str = "patchtool"
    as_json: bool = False
    root: Path | None = None
    cache_dir: Path | None = None
    allow_local_urls: bool = False
    allow_local_in: Path | None = None  # --allow-local-urls-in DIR
    confine: bool = False  # this process runs patchtool's own command line: it confines itself
    writes: bool = False
    edits_series: bool = False
    creates: bool = False  # the command makes the repository (``init``): it is the directory named, not found
    outputs: tuple[Path, ...] = ()  # the paths the command line names for the command to write
    reports: tuple[Path, ...] = ()  # those of ``outputs`` that are files written whole (``write_report``)
    editor: bool = False  # the command may run the user's $EDITOR (``outside`` the confinement)
    confined_to: tuple[Path, ...] = ()  # where Landlock lets this process write, once it does
    unconfined: Unconfined | None = None  # the thread left unconfined, once the process is

    def taking(
        self,
        global_json: bool = False,
        global_root: Path | None = None,
        global_cache_dir: Path | None = None,
        global_allow_local: bool = False,
        global_allow_local_in: Path | None = None,
    ) -> Invocation:
        """With the global options given here, before the command or after it (after wins)."""
        return dataclasses.replace(
            self,
            as_json=self.as_json or global_json,
            allow_local_urls=self.allow_local_urls or global_allow_local,
            allow_local_in=global_allow_local_in if global_allow_local_in is not None else self.allow_local_in,
            root=global_root if global_root is not None else self.root,
            cache_dir=global_cache_dir if global_cache_dir is not None else self.cache_dir,
        )

    def located(self) -> Path:
        """The patch repository this command is about: ``--root``, else found from the current directory."""
        from patchtool.project.manifest import MANIFEST_NAME
        from patchtool.project.repository import Project

        if self.creates:
            if not (made := (self.root or Path.cwd()).absolute()).is_dir():
                raise UsageError(f"--root {self.root}: no such directory", hint="make the directory first")
            return made
        if self.root is None:
            return Project.find(Path.cwd())
        if not ((found := self.root.absolute()) / MANIFEST_NAME).is_file():
            raise UsageError(
                f"--root {self.root}: no {MANIFEST_NAME} there", hint="pass the patch repository's directory"
            )
        return found

    def cache_root(self) -> Path:
        """The cache's directory (``--cache-dir``, ``$PATCHTOOL_CACHE_DIR``, else the default)."""
        env = os.environ.get("PATCHTOOL_CACHE_DIR")  # read here, at the edge, and nowhere else
        return (self.cache_dir or (Path(env) if env else None) or default_cache_dir()).absolute()

    def cache(self) -> Cache:
        from patchtool.upstream.cache import Cache
        from patchtool.upstream.index import INDEX_URL_ENV
        from patchtool.urls import LocalUrls, allowed_by_environment

        local = allowed_by_environment()
        if self.allow_local_in is not None:
            local = LocalUrls(allowed=True, beneath=Path(os.path.abspath(self.allow_local_in)))
        elif self.allow_local_urls:
            local = LocalUrls(allowed=True, beneath=local.beneath)
        return Cache(self.cache_root(), index_url=os.environ.get(INDEX_URL_ENV) or None, allow_local=local)


def invocation(ctx: typer.Context) -> Invocation:
    found = ctx.obj
    assert isinstance(found, Invocation), f"no invocation on the context of {ctx.info_name}"
    return found


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "patchtool"


def locked(ctx: typer.Context) -> tuple[Path, list[str]]:
    """The patch repository, locked until the command's context closes: exclusively for a writing
    command (which first finishes a write an earlier one committed but did not complete, and names
    what it finished), shared for a reading one. The one place the lock is taken."""
    from patchtool.project import journal, lock
    from patchtool.project.stopped import refuse_in_progress

    inv = invocation(ctx)
    found = inv.located()
    ctx.with_resource(lock.held(found, exclusive=inv.writes))
    recovered = journal.recover(found) if inv.writes else []
    if inv.writes and inv.edits_series:
        refuse_in_progress(found, inv.command)
    return found, recovered


def repository(ctx: typer.Context) -> Path:
    return locked(ctx)[0]


def load_project(ctx: typer.Context) -> Project:
    """The patch repository, locked (``locked``) and loaded."""
    from patchtool.project.repository import Project

    return Project.load(repository(ctx))


def cache(ctx: typer.Context) -> Cache:
    return invocation(ctx).cache()
