"""Commands that edit the series through git: checkout, export, import, new, drop."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .cli import CacheOpt, JsonOpt, PinOpt, RootOpt, _cache, _emit, _root, _run, app
from .errors import ExitCode, UsageError
from .project import Project
from .report import Style

BranchOpt = Annotated[str, typer.Option("--branch", help="The checkout branch.")]


@app.command()
def checkout(pin: PinOpt = None, branch: BranchOpt = "series",
             path: Annotated[Path | None, typer.Option("--path", help="Worktree (default: work/BRANCH).")] = None,
             root: RootOpt = None, cache_dir: CacheOpt = None, as_json: JsonOpt = False) -> None:
    """A branch in a worktree: the pinned upstream plus one commit per patch, each with its Patchtool-Id trailer."""
    def body(style: Style) -> None:
        from . import editing

        project = Project.load(_root(root))
        result = editing.checkout(project, _cache(cache_dir), pin_name=pin, branch=branch, path=path)
        text = (f"branch {style.bold(result.branch)} with {len(result.commits)} commit(s) on {result.base[:12]}\n"
                f"worktree: {result.worktree}\n"
                "edit with git (amend, fixup, rebase -i, new commits), then `patchtool export`")
        _emit("checkout", as_json, ExitCode.OK, result.to_dict(), text)
    _run("checkout", as_json, body)


@app.command()
def export(branch: BranchOpt = "series",
           allow_drop: Annotated[bool, typer.Option("--allow-drop", help="Record gone commits as dropped.")] = False,
           quilt: Annotated[Path | None, typer.Option("--quilt", help="Write DIR/patches + series for quilt.")] = None,
           root: RootOpt = None, cache_dir: CacheOpt = None, as_json: JsonOpt = False) -> None:
    """Write the checkout branch back as the series (or the series as a quilt directory)."""
    def body(style: Style) -> None:
        from . import editing

        project = Project.load(_root(root))
        if quilt is not None:
            files = editing.export_quilt(project, quilt)
            _emit("export", as_json, ExitCode.OK, {"quilt": str(quilt), "files": files},
                  f"quilt series in {quilt}/patches ({len(files) - 1} patch(es))")
            return
        result = editing.export(project, _cache(cache_dir), branch=branch, allow_drop=allow_drop)
        lines = [f"  {r['change']:<9} {r['id']} ({r['file']})" for r in result.patches]
        lines += [f"  dropped   {d}" for d in result.dropped]
        if any(r["change"] == "new" for r in result.patches):
            lines.append("new patches have a metadata skeleton: fill its TODOs (`patchtool check` lists them)")
        _emit("export", as_json, ExitCode.OK, result.to_dict(), "\n".join(lines) or "nothing to export")
    _run("export", as_json, body)


@app.command("import")
def import_(files: Annotated[list[Path], typer.Argument(metavar="FILE...", help="format-patch, PR .patch, quilt dir.")],
            url: Annotated[str | None, typer.Option("--url", help="Where it comes from (a PR or commit URL).")] = None,
            root: RootOpt = None, cache_dir: CacheOpt = None, as_json: JsonOpt = False) -> None:
    """Add patches with metadata skeletons; refuse any that does not apply at the pin."""
    def body(style: Style) -> None:
        from . import importing

        project = Project.load(_root(root))
        result = importing.import_patches(project, _cache(cache_dir), files, url=url)
        text = "\n".join(f"  added {r['id']} ({r['file']}, upstream {r['upstream_status']})" for r in result.added)
        _emit("import", as_json, ExitCode.OK, result.to_dict(), text)
    _run("import", as_json, body)


@app.command()
def new(ident: Annotated[str, typer.Argument(metavar="ID")], branch: BranchOpt = "series",
        root: RootOpt = None, cache_dir: CacheOpt = None, as_json: JsonOpt = False) -> None:
    """Start a new patch: an empty commit with its id on the checkout branch; export adds the entry."""
    def body(style: Style) -> None:
        from . import editing

        project = Project.load(_root(root))
        where = editing.new(project, _cache(cache_dir), ident=ident, branch=branch)
        _emit("new", as_json, ExitCode.OK, {"id": ident, "worktree": where},
              f"started {ident} in {where}: make the change, `git commit --amend`, then `patchtool export`")
    _run("new", as_json, body)


@app.command()
def drop(ident: Annotated[str, typer.Argument(metavar="ID")],
         reason: Annotated[str, typer.Option("--reason", help="Why it leaves the series (recorded).")] = "",
         rejected: Annotated[bool, typer.Option("--rejected", help="Also into the registry.")] = False,
         root: RootOpt = None, as_json: JsonOpt = False) -> None:
    """Remove a patch from the series and record why (and, with --rejected, in the registry)."""
    def body(style: Style) -> None:
        from . import editing

        if not reason.strip():
            raise UsageError("drop needs --reason: a dropped patch is recorded with why")
        project = Project.load(_root(root))
        written = editing.drop(project, ident=ident, reason=reason, rejected=rejected)
        _emit("drop", as_json, ExitCode.OK, {"id": ident, "written": written},
              f"dropped {ident}: {reason}" + (" (recorded in the registry)" if rejected else ""))
    _run("drop", as_json, body)
