"""``patchtool cache``: what the shared upstream cache holds, and pruning what nothing uses."""

# No postponed annotations: typer reads every command's signature at each start (strings, it evaluates).

from typing import TYPE_CHECKING, Annotated

import typer

from patchtool.cli.context import cache, repository
from patchtool.cli.exits import Shown, command
from patchtool.cli.render import Style
from patchtool.errors import UsageError

if TYPE_CHECKING:
    from patchtool.upstream import pruning


@command()
def cache_command(
    ctx: typer.Context,
    action: Annotated[
        str, typer.Argument(metavar="[show|prune|clear]", help="show (the default), prune or clear.")
    ] = "show",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="prune: say what would go; remove nothing.")] = False,
    now: Annotated[
        bool,
        typer.Option(
            "--now", help="prune: drop unreachable objects at once, not only those past git's grace period (two weeks)."
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="clear: discard commits in the cache no patch file carries; prune: forget those only a "
            "removed worktree's HEAD holds.",
        ),
    ] = False,
) -> Shown:
    """What the cache holds (releases imported and who uses them, each project's refs, checkouts, loose
    objects) and its size; `cache prune` removes what no pin of this or another registered project uses,
    then lets `git gc` drop what no ref reaches, under the cache's lock."""
    from patchtool.upstream import pruning  # this command's alone: every command would load it at its start

    if action not in ("show", "prune", "clear"):
        raise UsageError(f"cache {action}: give show (the default), prune or clear")
    if action != "prune" and (dry_run or now):
        raise UsageError("--dry-run and --now go with `cache prune`")
    if action == "show" and force:
        raise UsageError("--force goes with `cache clear` and `cache prune`")
    upstream = cache(ctx)
    from patchtool.series.unexported import unexported

    if action == "clear":
        cleared = pruning.clear(upstream, force=force, unexported=unexported(upstream.repo))
        return Shown(data=cleared, text=lambda _style: _cleared_text(cleared))
    project_root = repository(ctx)
    if action == "show":
        report = pruning.survey(upstream, project_root)
    else:
        forgotten = [u for u in unexported(upstream.repo) if u.gone]
        report = pruning.prune(upstream, project_root, dry_run=dry_run, now=now, force=force, unexported=forgotten)
    return Shown(data=report, text=lambda style: _text(report, style, pruned=action == "prune"))


def _cleared_text(cleared: "pruning.Cleared") -> str:
    lines = [f"cleared {cleared.path}: removed " + (", ".join(cleared.removed) or "nothing")]
    lines += [f"discarded: {u}" for u in cleared.described]
    return "\n".join(lines)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def _text(report: "pruning.CacheReport", style: Style, *, pruned: bool) -> str:
    lines = [f"{style.bold('cache')}: {report.path} ({_size(report.size_bytes)})"]
    for r in report.releases:
        users = ", ".join(r.used_by) if r.used_by else style.dim("used by no pin")
        what = f"{r.filename} ({_size(r.download_bytes)} downloaded)" if r.filename else r.ref
        lines.append(f"  {r.kind} {r.version}: {what}; {users}")
    for n in report.namespaces:
        whose = "this project" if n.this_project else n.root or "a project with no checkout record"
        lines.append(f"  project {n.key} ({whose}{'' if n.exists else ', gone'}): {n.refs} ref(s)")
    lines += [f"  checkout: {c}" for c in report.checkouts]
    if o := report.objects:
        lines.append(
            f"  objects: {o.get('count', 0)} loose ({_size(o.get('size', 0) * 1024)}), "
            f"{o.get('in-pack', 0)} in {o.get('packs', 0)} pack(s) ({_size(o.get('size-pack', 0) * 1024)})"
        )
    if pruned:
        lines.append(f"{'would remove' if report.dry_run else 'removed'}: " + (", ".join(report.removed) or "nothing"))
        if not report.dry_run:
            lines.append(f"freed: {_size(report.freed_bytes)}")
    return "\n".join(lines)
