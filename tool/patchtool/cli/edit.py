"""Commands that edit the series through git: checkout, export, import, new, drop."""

from __future__ import annotations

import argparse
from pathlib import Path

from patchtool.cli.app import Commands, _cache, _emit, _knob, _root, _run
from patchtool.cli.render import Style
from patchtool.errors import ExitCode, UsageError
from patchtool.project.repository import Project


def register(commands: Commands) -> None:
    branch_help = "The checkout branch (default: series)."
    sp = commands.add("checkout", checkout, pin=True, cache=True, edits_series=True)
    sp.add_argument("--branch", default="series", help=branch_help)
    sp.add_argument("--path", type=Path, help="Worktree (default: work/BRANCH).")
    sp.add_argument("--refresh", action="store_true",
                    help="Move the branch's own commits onto the current series (after drop, import, rebase, edits).")
    sp = commands.add("export", export, cache=True, edits_series=True)
    sp.add_argument("--branch", default="series", help=branch_help)
    sp.add_argument("--allow-drop", action="store_true", help="Record gone commits as dropped.")
    sp.add_argument("--revive", metavar="ID", action="append", default=[],
                    help="Bring a dropped patch back from its commit on the branch (repeatable).")
    sp.add_argument("--quilt", type=Path, help="Write DIR/patches + series for quilt.")
    sp = commands.add("import", import_, cache=True, edits_series=True)
    sp.add_argument("files", metavar="FILE", type=Path, nargs="+", help="format-patch, PR .patch, quilt dir.")
    sp.add_argument("--url", help="Where it comes from (a PR or commit URL).")
    sp = commands.add("new", new, cache=True, edits_series=True)
    sp.add_argument("ident", metavar="ID")
    sp.add_argument("--branch", default="series", help=branch_help)
    sp = commands.add("drop", drop, edits_series=True)
    sp.add_argument("ident", metavar="ID")
    sp.add_argument("--reason", default="", help="Why it leaves the series (recorded).")
    sp.add_argument("--rejected", action="store_true", help="Also into the registry.")
    sp.add_argument("--flag", action="append", default=[], help="With --rejected: a knob that would re-introduce "
                                                                "it, --flag or --flag=VALUES-REGEX (repeat).")
    sp.add_argument("--env", action="append", default=[], help="With --rejected: NAME or NAME=VALUES-REGEX.")
    sp.add_argument("--config", action="append", default=[], help="With --rejected: KEY or KEY=VALUES-REGEX.")
    sp.add_argument("--pattern", action="append", default=[], help="With --rejected: a code pattern (regex).")
    sp.add_argument("--unguarded", help="With --rejected and no knob: why no knob can express it.")


def checkout(args: argparse.Namespace) -> None:
    """A branch in a worktree: the pinned upstream plus one commit per patch, each with its Patchtool-Id trailer."""
    def body(style: Style) -> None:
        from patchtool.series import editing

        project = Project.load(_root(args.root))
        if args.refresh:
            _refresh(args, project, style)
            return
        result = editing.checkout(project, _cache(args.cache_dir), pin_name=args.pin, branch=args.branch,
                                  path=args.path)
        text = (f"branch {style.bold(result.branch)} with {len(result.commits)} commit(s) on {result.base[:12]}\n"
                f"worktree: {result.worktree}\n"
                "edit with git (amend, fixup, rebase -i, new commits), then `patchtool export`")
        _emit("checkout", args.as_json, ExitCode.OK, result.to_dict(), text)
    _run("checkout", args.as_json, body)


def _refresh(args: argparse.Namespace, project: Project, style: Style) -> None:
    from patchtool.series.refresh import refresh
    from patchtool.upstream.cachespace import CheckoutBranch

    if args.pin is not None or args.path is not None:
        raise UsageError("checkout --refresh rebuilds the branch on the current pin, in its own worktree",
                         hint="drop --pin and --path")
    result = refresh(project, _cache(args.cache_dir), CheckoutBranch.of(project.root, args.branch))
    lines = [f"branch {style.bold(result.branch)} rebuilt on the current series ({result.base[:12]})"]
    lines += [f"  {c['how']:<7} {c['id']}" for c in result.commits]
    lines += [f"  left out {i} (dropped from the series)" for i in result.left_out]
    lines.append("then `patchtool export`")
    _emit("checkout", args.as_json, ExitCode.OK, result.to_dict(), "\n".join(lines))


def export(args: argparse.Namespace) -> None:
    """Write the checkout branch back as the series (or the series as a quilt directory)."""
    def body(style: Style) -> None:
        from patchtool.series import editing

        project = Project.load(_root(args.root))
        if args.quilt is not None:
            files = editing.export_quilt(project, args.quilt)
            _emit("export", args.as_json, ExitCode.OK, {"quilt": str(args.quilt), "files": files},
                  f"quilt series in {args.quilt}/patches ({len(files) - 1} patch(es))")
            return
        result = editing.export(project, _cache(args.cache_dir), branch=args.branch, allow_drop=args.allow_drop,
                                revive=args.revive)
        lines = [f"  {r['change']:<9} {r['id']} ({r['file']})" for r in result.patches]
        lines += [f"  dropped   {d}" for d in result.dropped]
        if result.trailers:
            lines.append(f"gave {', '.join(result.trailers)} its Patchtool-Id trailer on the branch")
        if any(r["change"] == "new" for r in result.patches):
            lines.append("new patches have a metadata skeleton: fill its TODOs (`patchtool check` lists them)")
        _emit("export", args.as_json, ExitCode.OK, result.to_dict(), "\n".join(lines) or "nothing to export")
    _run("export", args.as_json, body)


def import_(args: argparse.Namespace) -> None:
    """Add patches with metadata skeletons; refuse any that does not apply at the pin."""
    def body(style: Style) -> None:
        from patchtool.series import importing

        project = Project.load(_root(args.root))
        result = importing.import_patches(project, _cache(args.cache_dir), args.files, url=args.url)
        text = "\n".join(f"  added {r['id']} ({r['file']}, upstream {r['upstream_status']})" for r in result.added)
        _emit("import", args.as_json, ExitCode.OK, result.to_dict(), text)
    _run("import", args.as_json, body)


def new(args: argparse.Namespace) -> None:
    """Start a new patch: an empty commit with its id on the checkout branch; export adds the entry."""
    def body(style: Style) -> None:
        from patchtool.series import editing

        project = Project.load(_root(args.root))
        where = editing.new(project, _cache(args.cache_dir), ident=args.ident, branch=args.branch)
        _emit("new", args.as_json, ExitCode.OK, {"id": args.ident, "worktree": where},
              f"started {args.ident} in {where}: make the change, `git commit --amend`, then `patchtool export`")
    _run("new", args.as_json, body)


def drop(args: argparse.Namespace) -> None:
    """Remove a patch from the series and record why (and, with --rejected, in the registry)."""
    def body(style: Style) -> None:
        from patchtool.series import editing

        if not args.reason.strip():
            raise UsageError("drop needs --reason: a dropped patch is recorded with why")
        knobs = [_knob(kind, k) for kind in ("flag", "env", "config") for k in getattr(args, kind)]
        knobs += [{"type": "pattern", "name": p, "regex": p} for p in args.pattern]
        if (knobs or args.unguarded) and not args.rejected:
            raise UsageError("--flag, --env, --config, --pattern and --unguarded describe a registry entry",
                             hint="add --rejected")
        project = Project.load(_root(args.root))
        written = editing.drop(project, ident=args.ident, reason=args.reason, rejected=args.rejected, knobs=knobs,
                               unguarded=args.unguarded)
        _emit("drop", args.as_json, ExitCode.OK, {"id": args.ident, "written": written},
              f"dropped {args.ident}: {args.reason}" + (" (recorded in the registry)" if args.rejected else ""))
    _run("drop", args.as_json, body)
