"""Commands that edit the series through git: checkout, export, import, new, drop."""

# No postponed annotations: typer reads every command's signature at each start (strings, it evaluates).

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from patchtool.cli.completion import PinOption, patch_ids
from patchtool.cli.context import cache, load_project
from patchtool.cli.exits import Shown, command
from patchtool.cli.render import Style, printable
from patchtool.cli.retread import knobs
from patchtool.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from patchtool.project.repository import Project

# Each command imports its workflow when it runs: every command's at the start would cost each command the others'.

BranchOption = Annotated[str, typer.Option(help="The checkout branch.")]
WITH_REJECTED = "With --rejected (a registry entry)"


@command(edits_series=True, outputs=("path",))
def checkout(
    ctx: typer.Context,
    pin: PinOption = None,
    branch: BranchOption = "series",
    path: Annotated[Path | None, typer.Option(help="Worktree (default: work/BRANCH).")] = None,
    refresh: Annotated[
        bool,
        typer.Option(
            "--refresh",
            help="Move the branch's own commits onto the current series (after drop, import, rebase, edits).",
        ),
    ] = False,
) -> Shown:
    """A branch in a worktree: the pinned upstream plus one commit per patch, each with its Patchtool-Id trailer."""
    from patchtool.edit.checkout import checkout as make_checkout

    project = load_project(ctx)
    if refresh:
        if pin is not None or path is not None:
            raise UsageError(
                "checkout --refresh rebuilds the branch on the current pin, in its own worktree",
                hint="drop --pin and --path",
            )
        return _refresh(ctx, project, branch)
    from patchtool.edit.repair import next_steps

    result = make_checkout(project, cache(ctx), pin_name=pin, branch=branch, path=path)
    again = "" if branch == "series" else f" --branch {branch}"
    warning = (
        f"warning: the branch was made from another series than this repository's "
        f"({printable('; '.join(result.changed_since))}): `patchtool checkout --refresh{again}` brings it up "
        "to the series, or `patchtool checkout --branch NEW` starts a new one\n"
        if result.changed_since
        else ""
    )

    def head(style: Style) -> str:
        return (
            f"branch {style.bold(result.branch)} with {len(result.commits)} commit(s) on {result.base[:12]}\n"
            f"worktree: {result.worktree}\n{warning}"
        )

    if result.finish is not None:
        steps = f"a refresh of patch {result.finish} was interrupted: `patchtool refresh{again} {result.finish}` "
        steps += "finishes it"
    elif result.committed is not None:
        steps = f"stopped at patch {result.committed}, and the branch holds a commit on where it stopped: "
        steps += f"`patchtool refresh{again} {result.committed}` takes it (with the worktree's changes) as the "
        steps += f"repaired {result.committed}"
    elif result.stopped is not None:
        steps = "\n".join(next_steps(result.stopped, result.worktree, result.branch))
    else:
        steps = (
            "edit with git (amend, fixup, rebase -i, new commits), then `patchtool export`; "
            "or edit the files and `patchtool refresh ID`\n"
            "a pristine upstream tree beside it (for quilt or a diff): `patchtool apply --series none --into DIR`"
        )
    stopped = result.finish is not None or result.committed is not None or result.stopped is not None
    return Shown(
        data=result, text=lambda style: head(style) + steps, code=ExitCode.CONFLICT if stopped else ExitCode.OK
    )


def _refresh(ctx: typer.Context, project: "Project", branch: str) -> Shown:
    from patchtool.edit.checkout_refresh import refresh
    from patchtool.upstream.namespaces import CheckoutBranch

    result = refresh(project, cache(ctx), CheckoutBranch.of(project.root, branch))
    lines = [f"  {c['how']:<7} {c['id']}" for c in result.commits]
    lines += [f"  left out {i} (dropped from the series)" for i in result.left_out]
    lines += [
        f"  kept {i}: the series no longer has it and records no drop of it (did its entry go back "
        "with a `git stash` or `git checkout` of patchset.toml?)"
        for i in result.kept
    ]
    lines.append("then `patchtool export`")
    return Shown(
        data=result,
        text=lambda style: "\n".join(
            [f"branch {style.bold(result.branch)} rebuilt on the current series ({result.base[:12]})", *lines]
        ),
    )


@command(edits_series=True, outputs=("quilt", "directory"))
def export(
    ctx: typer.Context,
    directory: Annotated[
        Path | None, typer.Argument(metavar="[DIR]", help="With --pr: where the pull request's patch set goes.")
    ] = None,
    branch: BranchOption = "series",
    allow_drop: Annotated[bool, typer.Option("--allow-drop", help="Record gone commits as dropped.")] = False,
    revive: Annotated[
        list[str] | None,
        typer.Option(metavar="ID", help="Bring a dropped patch back from its commit on the branch (repeatable)."),
    ] = None,
    quilt: Annotated[Path | None, typer.Option(metavar="DIR", help="Write DIR/patches + series for quilt.")] = None,
    force: Annotated[
        bool, typer.Option("--force", help="With --quilt: refresh DIR/patches in place (as gbp pq export).")
    ] = False,
    pr: Annotated[
        str | None,
        typer.Option(
            "--pr", metavar="ID", help="Write patch ID and what it requires into DIR for one upstream pull request."
        ),
    ] = None,
) -> Shown:
    """Write the checkout branch back as the series (or the series as a quilt directory, or one
    patch as an upstream pull request)."""
    from patchtool.edit.export import export as export_branch
    from patchtool.edit.quilt import export_quilt
    from patchtool.series.metadata import placeholder_subject

    if force and quilt is None:
        raise UsageError("--force refreshes a quilt directory: it goes with --quilt DIR")
    if (pr is None) != (directory is None):
        raise UsageError("export --pr ID DIR: the pull request's patch and the directory go together")
    project = load_project(ctx)
    if pr is not None and directory is not None:
        if quilt is not None or allow_drop or revive:
            raise UsageError("export --pr writes one pull request's patches: no --quilt, --allow-drop or --revive")
        return _pull_request(ctx, project, pr, directory)
    if quilt is not None:
        from patchtool.edit.branch import worktrees

        files = export_quilt(project, quilt, force=force, checkouts=worktrees(cache(ctx).repo))
        return Shown(
            data={"quilt": str(quilt), "files": files},
            text=lambda _style: f"quilt series in {quilt}/patches ({len(files) - 1} patch(es))",
        )
    result = export_branch(project, cache(ctx), branch=branch, allow_drop=allow_drop, revive=revive or [])
    lines = [f"  {r['change']:<9} {r['id']} ({r['file']})" for r in result.patches]
    lines += [f"  dropped   {d}" for d in result.dropped]
    if result.trailers:
        lines.append(f"gave {', '.join(result.trailers)} its Patchtool-Id trailer on the branch")
    lines += [f"{i}: its metadata skeleton has TODOs to fill (`patchtool check` lists them)" for i in result.todos]
    lines += [
        f"{i}: its commit's subject is still the placeholder {placeholder_subject(i)!r}: reword it "
        "(`git commit --amend` in the checkout), then export again"
        for i in result.placeholder_subjects
    ]
    return Shown(data=result, text=lambda _style: "\n".join(lines) or "nothing to export")


def _pull_request(ctx: typer.Context, project: "Project", ident: str, directory: Path) -> Shown:
    from patchtool.edit.branch import worktrees
    from patchtool.edit.pullrequest import export_pull_request

    made = export_pull_request(project, ident, directory, checkouts=worktrees(cache(ctx).repo))
    return Shown(
        data=made,
        text=lambda style: "\n".join(
            [
                f"pull request {style.bold(made.id)} in {made.directory}: {len(made.patches)} patch(es), "
                f"for `git am` on {made.base}",
                *(f"  {w}" for w in made.written),
            ]
        ),
    )


KindOption = Annotated[
    str | None,
    typer.Option(
        metavar="KIND", help="correctness | performance | reliability | operations (default: a skeleton check flags)."
    ),
]
OwnerOption = Annotated[str | None, typer.Option(help="Who maintains it.")]
WhyOption = Annotated[str | None, typer.Option(help="Why the patch exists (prose).")]
AppliesOption = Annotated[
    str | None,
    typer.Option("--applies-to", metavar="SPEC", help="PEP 440 specifier of upstream versions it is verified on."),
]
DropWhenOption = Annotated[str | None, typer.Option("--drop-when", help="When to drop it.")]


@command(edits_series=True)
def import_(
    ctx: typer.Context,
    files: Annotated[
        list[Path] | None,
        typer.Argument(metavar="FILE...", help="format-patch, PR .patch, plain diff, quilt dir (in this order)."),
    ] = None,
    series: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="A quilt series file: its patches in its order (after any FILE)."),
    ] = None,
    fuzz: Annotated[
        int,
        typer.Option(
            metavar="N", help="Apply with at most N lines of fuzz (GNU patch's --fuzz); store the patch refreshed."
        ),
    ] = 0,
    strip: Annotated[
        int | None,
        typer.Option(
            "-p",
            "--strip",
            metavar="N",
            help="Leading directories to strip from a plain diff's names, as patch -pN (default: git apply's guess).",
        ),
    ] = None,
    url: Annotated[str | None, typer.Option(help="Where it comes from (a PR or commit URL).")] = None,
    ident: Annotated[str | None, typer.Option("--id", help="Id of the new patch (one patch only).")] = None,
    kind: KindOption = None,
    owner: OwnerOption = None,
    why: WhyOption = None,
    applies_to: AppliesOption = None,
    drop_when: DropWhenOption = None,
    author: Annotated[
        str | None, typer.Option(metavar="'NAME <EMAIL>'", help="Author of patches that name none (default: you).")
    ] = None,
    subject: Annotated[
        str | None, typer.Option(help="Subject of a plain diff whose header has none (default: from its file name).")
    ] = None,
) -> Shown:
    """Add patches with metadata skeletons; refuse any that does not apply at the pin."""
    from patchtool.edit import import_
    from patchtool.series.metadata import Metadata

    given = Metadata(id=ident, kind=kind, owner=owner, why=why, applies_to=applies_to, drop_when=drop_when)
    result = import_.import_patches(
        load_project(ctx),
        cache(ctx),
        files or [],
        url=url,
        given=given,
        author=author,
        subject=subject,
        fuzz=fuzz,
        series=series,
        strip=strip,
    )
    return Shown(data=result, text=lambda _style: "\n".join(_added_line(r) for r in result.added))


def _added_line(row: dict[str, Any]) -> str:
    line = f"  added {row['id']} ({row['file']}, upstream {row['upstream_status']})"
    if row["not_kept"]:  # a patch header's own text: escaped, so it cannot recolour or hide a line
        line += "\n    not kept (no place in the manifest): " + printable("; ".join(row["not_kept"]))
    if row["refreshed"]:
        line += "\n    refreshed: " + ", ".join(
            f"{r['file']} hunk {r['hunk']} fuzz {r['fuzz']} offset {r['offset']:+d}" for r in row["refreshed"]
        )
    return line


@command(edits_series=True)
def new(
    ctx: typer.Context,
    ident: Annotated[str, typer.Argument(metavar="ID", help="The new patch's id.")],
    branch: BranchOption = "series",
    kind: KindOption = None,
    owner: OwnerOption = None,
    why: WhyOption = None,
    applies_to: AppliesOption = None,
    drop_when: DropWhenOption = None,
    subject: Annotated[
        str | None, typer.Option(help="The commit's subject (default: a placeholder `check` flags).")
    ] = None,
) -> Shown:
    """Start a new patch: an empty commit with its id on the checkout branch; export adds the entry."""
    from patchtool.edit.new import new as new_patch
    from patchtool.series.metadata import Metadata

    given = Metadata(id=ident, kind=kind, owner=owner, why=why, applies_to=applies_to, drop_when=drop_when)
    where = new_patch(load_project(ctx), cache(ctx), ident=ident, branch=branch, given=given, subject=subject)
    return Shown(
        data={"id": ident, "worktree": where},
        text=lambda _style: (
            f"started {ident} in {where}: make the change, then `patchtool refresh {ident}` "
            "(or `git commit --amend` and `patchtool export`)"
        ),
    )


@command(edits_series=True)
def drop(
    ctx: typer.Context,
    ident: Annotated[str, typer.Argument(metavar="ID", help="The patch to drop.", autocompletion=patch_ids)],
    reason: Annotated[str, typer.Option(help="Why it leaves the series (recorded).")],
    rejected: Annotated[bool, typer.Option("--rejected", help="Also into the registry.")] = False,
    flag: Annotated[
        list[str] | None,
        typer.Option(
            help="A knob that would re-introduce it: --flag or --flag=VALUES-REGEX (repeat).",
            rich_help_panel=WITH_REJECTED,
        ),
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option(help="NAME or NAME=VALUES-REGEX.", rich_help_panel=WITH_REJECTED)
    ] = None,
    config: Annotated[
        list[str] | None, typer.Option(help="KEY or KEY=VALUES-REGEX.", rich_help_panel=WITH_REJECTED)
    ] = None,
    pattern: Annotated[
        list[str] | None, typer.Option(help="A code pattern (regex).", rich_help_panel=WITH_REJECTED)
    ] = None,
    unguarded: Annotated[
        str | None, typer.Option(help="With no knob: why no knob can express it.", rich_help_panel=WITH_REJECTED)
    ] = None,
) -> Shown:
    """Remove a patch from the series and record why (and, with --rejected, in the registry)."""
    from patchtool.edit.drop import drop as drop_patch

    if not reason.strip():
        raise UsageError("drop needs --reason: a dropped patch is recorded with why")
    given = knobs(flag, env, config, pattern)
    if (given or unguarded) and not rejected:
        raise UsageError(
            "--flag, --env, --config, --pattern and --unguarded describe a registry entry", hint="add --rejected"
        )
    written = drop_patch(
        load_project(ctx), ident=ident, reason=reason, rejected=rejected, knobs=given, unguarded=unguarded
    )
    return Shown(
        data={"id": ident, "written": written},
        text=lambda _style: f"dropped {ident}: {reason}" + (" (recorded in the registry)" if rejected else ""),
    )


@command(edits_series=True)
def refresh(
    ctx: typer.Context,
    ident: Annotated[str, typer.Argument(metavar="ID", help="The patch to put the changes in.")],
    branch: BranchOption = "series",
    index: Annotated[bool, typer.Option("--index", help="Only what is staged (git add); default: every file.")] = False,
) -> Shown:
    """Put the checkout's uncommitted changes into patch ID and write it back (stg refresh -p, quilt refresh)."""
    from patchtool.edit.refresh import fold
    from patchtool.edit.repair import next_steps

    result = fold(load_project(ctx), cache(ctx), ident=ident, branch=branch, staged_only=index)
    lines = [f"refreshed {result.id} ({result.file}) with {', '.join(result.changed)}"]
    lines += [f"  rewritten {w['id']} ({w['file']}): {w['why']}" for w in result.written if w["id"] != result.id]
    if result.applied:
        lines.append(f"applied after it: {', '.join(result.applied)}")
    if result.stopped is not None:
        lines += next_steps(result.stopped, result.worktree, result.branch)
    code = ExitCode.OK if result.stopped is None else ExitCode.CONFLICT
    return Shown(data=result, text=lambda _style: "\n".join(lines), code=code)
