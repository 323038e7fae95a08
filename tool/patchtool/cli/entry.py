"""One patch of the series: ``show`` it whole, ``edit`` its metadata."""

# No postponed annotations: typer reads every command's signature at each start (strings, it evaluates).

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from patchtool.cli.completion import PinOption, patch_ids
from patchtool.cli.context import cache, invocation, load_project
from patchtool.cli.edit import AppliesOption, DropWhenOption, OwnerOption, WhyOption
from patchtool.cli.editor import edit_until_valid, read_entry
from patchtool.cli.exits import Shown, command
from patchtool.cli.render import Style, gpu_lines, printable
from patchtool.errors import UsageError

if TYPE_CHECKING:
    from patchtool.project.repository import Project
    from patchtool.series.amend import Edited
    from patchtool.series.show import PatchShown

IdArgument = Annotated[str, typer.Argument(metavar="ID", help="The patch's id.", autocompletion=patch_ids)]


@command()
def show(
    ctx: typer.Context,
    ident: IdArgument,
    pin: PinOption = None,
    diff: Annotated[bool, typer.Option("--diff", help="Also the patch's diff.")] = False,
) -> Shown:
    """One patch: its metadata, its files, whether it applies and its assumptions hold at the pin, GPU evidence."""
    from patchtool.series.show import show as workflow
    from patchtool.sglang import gpuresults

    shown = workflow(load_project(ctx), cache(ctx), ident, gpu_results=gpuresults.read, pin_name=pin, diff=diff)
    return Shown(data=shown, text=lambda style: show_text(shown, style))


def show_text(shown: "PatchShown", style: Style) -> str:
    """Every string of the entry, and the patch's subject and author, pass through ``printable``:
    they are a stranger's text, and a terminal must show them, not obey them."""
    from patchtool.cli.prose import fill, reflow  # rich: text output alone draws it, --json never loads it

    p = printable
    e, row = shown.entry, shown.row
    applies = style.ok(row.applies) if row.applies == "applied" else style.bad(row.applies)
    lines = [
        f"patch {style.bold(e.id)} ({e.file}), {shown.position} of {shown.of} in the series",
        f"subject:    {p(shown.subject)}",
        f"author:     {p(shown.author)}",
        f"kind:       {e.kind.value}",
        f"owner:      {p(e.owner)}",
        f"upstream:   {p(str(e.upstream))}",
        f"applies_to: {p(str(e.applies_to))}",
        f"drop_when:  {p(e.drop_when)}",
        "why:",
        *reflow(p(e.why).strip(), style, indent=2),
    ]
    if e.scope:
        lines.append(p(f"scope:      hardware {', '.join(e.scope.hardware)}; model {', '.join(e.scope.model)}"))
    lines.append(f"at pin {shown.pin}: {applies}, +{row.added}/-{row.removed} in {len(row.files)} file(s)")
    lines += [f"  {style.dim(path)}" for path in row.files]
    lines.append(f"evidence: {len(e.evidence) or 'none'}")
    for m in e.evidence:
        measured = m.change or f"{m.before} -> {m.after}"
        where = "".join(f", {k} {v}" for k, v in m.conditions.items())
        lines.append(fill(p(f"{m.metric}: {measured}{where} ({m.source})"), style, prefix="  ", indent=4))
    lines.append(f"knobs: {len(e.knobs) or 'none'}")
    for k in e.knobs:
        roles = ", ".join(f"{role} {value}" for role, value in k.recommended.items())
        lines.append(p(f"  {k.relation.value} {k.type.value} {k.name}: recommended {roles}"))
    lines.append(f"assumptions at {shown.pin}: {len(shown.assumptions) or 'none'}")
    for a in shown.assumptions:
        word = style.ok("holds") if a.ok else style.bad("fails")
        lines.append(f"  {word} {p(f'{a.id}: {a.expects} (found {a.found}); {a.why}')}")
    lines.append(f"GPU verification: {len(row.gpu_verification) or 'none'}")
    for g, evidence in zip(row.gpu_verification, row.gpu_evidence, strict=True):
        lines += gpu_lines(g, evidence, style, head="", indent=2)
    lines += [p(f"overrides {o.entry}: {o.justification}") for o in e.overrides]
    if shown.diff is not None:
        lines += ["", shown.diff.rstrip("\n")]
    return "\n".join(lines)


@command(edits_series=True, editor=True)
def edit(
    ctx: typer.Context,
    ident: IdArgument,
    why: WhyOption = None,
    owner: OwnerOption = None,
    kind: Annotated[
        str | None, typer.Option(metavar="KIND", help="correctness | performance | reliability | operations.")
    ] = None,
    applies_to: AppliesOption = None,
    drop_when: DropWhenOption = None,
    upstream_status: Annotated[
        str | None,
        typer.Option(
            "--upstream-status",
            metavar="STATUS",
            help="pending | submitted | backport | inappropriate | denied | merged (DEP-3's words).",
        ),
    ] = None,
    upstream_url: Annotated[
        str | None, typer.Option("--upstream-url", metavar="URL", help="Where it was submitted (an http(s) URL).")
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            metavar="FILE",
            help="The entry as TOML from FILE, as the editor would leave it (a kept edit).",
        ),
    ] = None,
) -> Shown:
    """Change a patch's metadata in patchset.toml: with options, or its entry in $EDITOR (comments kept, validated)."""
    from patchtool.series import amend

    project = load_project(ctx)
    given = dict(why=why, owner=owner, kind=kind, applies_to=applies_to, drop_when=drop_when)
    values = {k: v for k, v in given.items() if v is not None}
    upstream = {k: v for k, v in (("status", upstream_status), ("url", upstream_url)) if v is not None}
    if from_file is not None and (values or upstream):
        raise UsageError("--from-file gives the whole entry: it goes with no option that sets one value")
    if values or upstream:
        done = amend.set_fields(project, ident, values, upstream)
    elif from_file is not None:
        done = amend.replace_entry(project, ident, read_entry(from_file), source=str(from_file))
    else:
        done = _in_editor(ctx, project, ident)
    return Shown(
        data=done,
        text=lambda _style: (
            f"{ident}: changed {', '.join(done.changed)} in patchset.toml"
            if done.written
            else f"{ident}: nothing changed; patchset.toml was left as it was"
        ),
    )


HEADER = (
    "# patchtool edit {ident}: this patch's entry in patchset.toml. Change its metadata, save and\n"
    "# quit; it is checked before anything is written. Leave it unchanged to write nothing.\n"
)


def _in_editor(ctx: typer.Context, project: "Project", ident: str) -> "Edited":
    """The entry of ``ident`` changed in ``$VISUAL``/``$EDITOR`` (as git, else vi) and written, once
    it is valid (``cli/editor.py``: asked again at a terminal, else kept in a file)."""
    from patchtool.series import amend

    text = amend.entry_text(project, ident)

    def accept(edited: str) -> "Edited":
        if edited == text:
            return amend.Edited(id=ident, changed=(), written=())
        return amend.replace_entry(project, ident, edited, source="the edited entry")

    return edit_until_valid(
        invocation(ctx),
        text,
        stem=f"edit-{ident}",
        header=HEADER.format(ident=ident),
        accept=accept,
        nothing="nothing was written",
        again=lambda kept: f"patchtool edit {shlex.quote(ident)} --from-file {shlex.quote(str(kept))}",
    )
