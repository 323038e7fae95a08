"""``patchtool retread ...``: the do-not-retread registry of rejected ideas."""

# No postponed annotations: typer reads every command's signature at each start (strings, it evaluates).

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from patchtool.cli.completion import PinOption
from patchtool.cli.context import cache, invocation, load_project
from patchtool.cli.editor import edit_until_valid, read_entry
from patchtool.cli.exits import Shown, command
from patchtool.cli.render import registry_list_text, registry_show_text, revisit_text, scan_text
from patchtool.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from patchtool.project.repository import Project
    from patchtool.registry.entries import Registry

# Each command imports the registry's workflows when it runs: every command would load them at its start.
HELP = "The do-not-retread registry of rejected ideas."
Specs = list[str] | None  # a repeatable option's values


def knobs(flag: Specs, env: Specs, config: Specs, pattern: Specs) -> list[dict[str, str]]:
    """Each ``--flag NAME=VALUES-REGEX`` (``--env``, ``--config`` alike), then each ``--pattern``: registry knobs."""
    return [
        {"type": kind, "name": name, **({"values": values} if values else {})}
        for kind, specs in (("flag", flag), ("env", env), ("config", config))
        for name, _, values in (spec.partition("=") for spec in specs or [])
    ] + [{"type": "pattern", "name": p, "regex": p} for p in pattern or []]


def _registry(ctx: typer.Context) -> "tuple[Project, Registry]":
    from patchtool.registry import workflows as retread

    project = load_project(ctx)
    return project, retread.load(project)


@command()
def retread_list(ctx: typer.Context) -> Shown:
    """Every rejected idea: id, verdict, title and the knobs that would bring it back."""
    from patchtool.registry.entries import Listing

    _, registry = _registry(ctx)
    return Shown(data=Listing(registry), text=lambda style: registry_list_text(registry, style))


@command()
def retread_show(
    ctx: typer.Context, ident: Annotated[str, typer.Argument(metavar="ID", help="The idea's id.")]
) -> Shown:
    """One rejected idea in full: what was tried, the verdict, the reason, evidence, knobs, revisit."""
    _, registry = _registry(ctx)
    try:
        entry = registry.get(ident)
    except KeyError as exc:
        raise UsageError(str(exc.args[0]), hint="see `patchtool retread list`") from None
    return Shown(data=entry, text=lambda style: registry_show_text(entry, style))


@command()
def retread_scan(
    ctx: typer.Context,
    paths: Annotated[list[Path], typer.Argument(metavar="PATH...", help="Serve scripts, env files, units, arg lists.")],
    model: Annotated[
        str | None, typer.Option(help="The model of launches that name none (--model-path), e.g. an env file's.")
    ] = None,
    hardware: Annotated[
        str | None, typer.Option(help="The CUDA architecture the launches run on, e.g. sm_120.")
    ] = None,
) -> Shown:
    """Find rejected knobs in deployment files kept outside the patches (exit 1 on a finding).

    An entry applies where a launch is in the scope of its evidence (model, hardware, PD mode
    and role); where a launch does not say enough to know, the use is a note, not a finding."""
    from patchtool.registry.evidencescope import hardware as arch
    from patchtool.sglang import deploy
    from patchtool.sglang.launch import LaunchFacts

    try:
        assumed = LaunchFacts(model=model, hardware=arch(hardware) if hardware is not None else None)
    except ValueError as exc:
        raise UsageError(f"--hardware: {exc}", hint="name the CUDA architecture, e.g. --hardware sm_120") from None
    _, registry = _registry(ctx)
    found = deploy.scan(registry, paths, assumed=assumed)
    return Shown(
        data={
            "assumed": {"model": model, "hardware": assumed.hardware},
            "findings": [f.to_dict() for f in found.findings],
            "notes": [n.to_dict() for n in found.notes],
        },
        text=lambda style: scan_text(found, style),
        code=ExitCode.PROBLEMS if found.findings else ExitCode.OK,
    )


@command()
def retread_revisit(ctx: typer.Context, pin: PinOption = None) -> Shown:
    """Evaluate every revisit condition against a pin: which rejections may no longer hold."""
    from patchtool.registry import workflows as retread

    project, registry = _registry(ctx)
    report = retread.revisit(project, registry, cache(ctx), pin)
    return Shown(data=report, text=lambda style: revisit_text(report, style))


_FIELDS = ("id", "title", "tried", "verdict", "reason", "revisit", "unguarded")
_EVIDENCE = ("metric", "before", "after", "change", "hardware", "model", "upstream", "date", "source")


@command(writes=True, editor=True)
def retread_add(
    ctx: typer.Context,
    ident: Annotated[str | None, typer.Option("--id", help="Stable id of the idea.")] = None,
    title: Annotated[str | None, typer.Option(help="Short title.")] = None,
    tried: Annotated[str | None, typer.Option(help="What was tried.")] = None,
    verdict: Annotated[str, typer.Option(help="rejected | superseded | deprioritized.")] = "rejected",
    reason: Annotated[str | None, typer.Option(help="Why it was rejected.")] = None,
    revisit: Annotated[str | None, typer.Option(help="When to look again.")] = None,
    metric: Annotated[str | None, typer.Option(help="Evidence: what was measured.", rich_help_panel="Evidence")] = None,
    before: Annotated[str | None, typer.Option(help="Evidence: value before.", rich_help_panel="Evidence")] = None,
    after: Annotated[str | None, typer.Option(help="Evidence: value after.", rich_help_panel="Evidence")] = None,
    change: Annotated[
        str | None, typer.Option(help="Evidence: the change, e.g. '+5%'.", rich_help_panel="Evidence")
    ] = None,
    hardware: Annotated[str | None, typer.Option(help="Evidence: hardware.", rich_help_panel="Evidence")] = None,
    model: Annotated[str | None, typer.Option(help="Evidence: model.", rich_help_panel="Evidence")] = None,
    upstream: Annotated[
        str | None, typer.Option(help="Evidence: upstream version.", rich_help_panel="Evidence")
    ] = None,
    date: Annotated[str | None, typer.Option(help="Evidence: date, YYYY-MM-DD.", rich_help_panel="Evidence")] = None,
    source: Annotated[
        str | None, typer.Option(help="Evidence: where the numbers come from.", rich_help_panel="Evidence")
    ] = None,
    flag: Annotated[
        list[str] | None, typer.Option(help="Knob: --flag or --flag=VALUES-REGEX (repeat).", rich_help_panel="Knobs")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option(help="Knob: NAME or NAME=VALUES-REGEX (repeat).", rich_help_panel="Knobs")
    ] = None,
    config: Annotated[
        list[str] | None, typer.Option(help="Knob: config key or KEY=VALUES-REGEX.", rich_help_panel="Knobs")
    ] = None,
    pattern: Annotated[
        list[str] | None, typer.Option(help="Knob: a code pattern (regex).", rich_help_panel="Knobs")
    ] = None,
    unguarded: Annotated[
        str | None,
        typer.Option(help="What no knob can express (needed when there is no knob).", rich_help_panel="Knobs"),
    ] = None,
    from_file: Annotated[Path | None, typer.Option(help="A TOML file with one [[rejected]] table.")] = None,
    edit: Annotated[bool, typer.Option("--edit", help="Fill a template in $EDITOR.")] = False,
) -> Shown:
    """Append a validated entry to the registry, keeping the file's comments and order."""
    from patchtool.registry import workflows as retread

    project = load_project(ctx)
    if edit:
        entry = _entry_in_editor(ctx, project)
    elif from_file is not None:
        entry = retread.entry_from_text(read_entry(from_file), str(from_file))
    else:
        given = (ident, title, tried, verdict, reason, revisit, unguarded)
        entry = {k: v for k, v in zip(_FIELDS, given, strict=True) if v is not None}
        values = (metric, before, after, change, hardware, model, upstream, date, source)
        if evidence := {k: v for k, v in zip(_EVIDENCE, values, strict=True) if v is not None}:
            entry["evidence"] = [evidence]
        entry["knobs"] = knobs(flag, env, config, pattern)
    added = retread.add(project, entry)
    return Shown(data=added, text=lambda style: f"added {style.bold(added.id)} to {project.manifest.registry}")


def _entry_in_editor(ctx: typer.Context, project: "Project") -> dict[str, Any]:
    """A new entry filled in ``$VISUAL``/``$EDITOR`` from the template, once it is valid
    (``cli/editor.py``: asked again at a terminal, else kept in a file)."""
    from patchtool.registry import workflows as retread

    def accept(text: str) -> dict[str, Any]:
        entry = retread.entry_from_text(text, "the editor template")
        retread.added(project, entry)  # checked as it will be written: a problem opens the editor again
        return entry

    return edit_until_valid(
        invocation(ctx),
        retread.TEMPLATE,
        stem="retread-add",
        header="",
        accept=accept,
        nothing="nothing was added",
        again=lambda kept: f"patchtool retread add --from-file {shlex.quote(str(kept))}",
        empty="the entry is empty; nothing was added",
    )
