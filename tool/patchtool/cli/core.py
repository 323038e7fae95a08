"""The everyday commands on the series: apply, check, recover, status, rebase, scan."""

# No postponed annotations: typer reads every command's signature at each start (strings, it evaluates).

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from patchtool import fsroot
from patchtool.cli.completion import PinOption, rebase_targets
from patchtool.cli.confinement import write_report
from patchtool.cli.context import cache, invocation, load_project, locked, repository
from patchtool.cli.exits import Shown, command
from patchtool.cli.render import (
    Style,
    check_text,
    rebase_markdown,
    series_text,
    status_text,
    unexported_lines,
)
from patchtool.errors import ApplyConflict, ExitCode, UsageError

if TYPE_CHECKING:
    from patchtool.project.repository import Project
    from patchtool.rebase.transaction import RebaseReport
    from patchtool.series.apply import SeriesAtPin
    from patchtool.upstream.cache import Cache

# Each command imports its workflow when it runs: every command's at the start would cost each command
# the others' (measured in bench/README.md), and rich and jinja2 only the text and the HTML page draw.


@command(writes=True, outputs=("into",))
def apply(
    ctx: typer.Context,
    pin: PinOption = None,
    into: Annotated[
        Path | None, typer.Option(metavar="DIR", help="Where to put the patched tree (default: build/<pin>).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace a tree an earlier `patchtool apply` left at --into.")] = False,
    keep: Annotated[
        bool, typer.Option("--keep-failed", help="On failure, keep a partial tree with .rej files for debugging.")
    ] = False,
    series: Annotated[
        str,
        typer.Option(
            metavar="all|none",
            help="`none`: the pristine upstream tree, no patch (what quilt users push their series onto).",
        ),
    ] = "all",
) -> Shown:
    """Materialise the pinned upstream and apply the series, one commit per patch."""
    from patchtool.git.materialise import materialise
    from patchtool.series.apply import SeriesAtPin, apply_series

    project = load_project(ctx)
    the_pin = project.pin(pin)
    if series not in ("all", "none"):
        raise UsageError(f"--series {series}: give all (the default) or none (the pristine upstream)")
    loaded = project.series() if series == "all" else []
    upstream = cache(ctx)
    base = upstream.ensure(the_pin)
    result = apply_series(upstream.repo, base.commit, loaded, commit=True)
    # the default lies in the repository, where `build` could be a committed link out of it
    target = (into or fsroot.Root(project.root).place(f"build/{the_pin.name}", create=False)).absolute()
    if not result.ok:
        _refuse_failed(project, upstream, SeriesAtPin(pin=the_pin.name, series=result), target, keep)
    assert result.tip is not None
    where = materialise(upstream.repo, result.tip, target, replace=force)
    tip = result.tip
    return Shown(
        data=SeriesAtPin(pin=the_pin.name, series=result, tree=str(where)),
        text=lambda style: (
            f"{the_pin.upstream} {the_pin.version} ({base.source}, {base.commit[:12]})\n"
            f"{series_text(result, style)}\n"
            f"{style.ok('patched tree')}: {where} ({len(loaded)} patch(es), tip {tip[:12]})"
        ),
    )


def _refuse_failed(project: "Project", upstream: "Cache", at: "SeriesAtPin", target: Path, keep: bool) -> NoReturn:
    """The series does not apply: say where, and with --keep-failed leave a partial tree to debug in."""
    from patchtool.git.materialise import check_replaceable, failed_tree_path, keep_failed

    failed = at.series.failed
    assert failed is not None
    at = dataclasses.replace(at, untouched=str(target), kept_failed=keep)
    hint = f"{target} was left untouched"
    if keep:
        try:  # a directory patchtool did not make is never deleted
            check_replaceable(upstream.repo, failed_tree_path(target, failed.id))
        except UsageError as exc:
            hint += f"; no partial tree was written: {exc.message}"
        else:
            debug = keep_failed(upstream.repo, at.series.last_good, target, failed.id, project.root / failed.file)
            at = dataclasses.replace(at, partial_tree=str(debug))
            hint += f"; a partial tree (patches before {failed.id} applied, .rej files for it) is at {debug}"
    else:
        hint += "; rerun with --keep-failed for a partial tree to debug in"
    raise ApplyConflict(
        f"patch {failed.id} ({failed.file}) does not apply at {at.pin}", result=at.series, hint=hint, data=at
    )


@command()
def check(
    ctx: typer.Context,
    pin: PinOption = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Metadata placeholders (TODOs a fresh import leaves) fail the check too (exit 1)."
        ),
    ] = False,
    standalone: Annotated[
        bool,
        typer.Option(
            "--standalone",
            help="Also apply each patch alone at the pin, onto only what it requires, naming what it silently needs.",
        ),
    ] = False,
) -> Shown:
    """Validate manifest, pins, patch files, application at the pin and assumption checks."""
    from patchtool.series.checks import run_check
    from patchtool.sglang.gpuresults import check_problems

    report = run_check(
        repository(ctx),
        cache=cache(ctx),
        gpu_problems=check_problems,
        pin_name=pin,
        strict=strict,
        standalone=standalone,
    )
    return Shown(
        data=report,
        text=lambda style: check_text(report, style),
        code=ExitCode.OK if report.ok else ExitCode.PROBLEMS,
        problems=report.errors,
    )


@command(writes=True)
def recover(ctx: typer.Context) -> Shown:
    """Finish a write that an interrupted command committed (reading commands refuse until then)."""
    from patchtool.project.repository import Project

    where, done = locked(ctx)  # a writing command finishes the journal as it takes the lock
    Project.load(where)
    return Shown(
        data={"root": str(where), "written": done},
        text=lambda _style: (
            f"finished an interrupted write: {', '.join(done)}" if done else "no interrupted write was pending"
        ),
    )


@command()
def status(
    ctx: typer.Context,
    pin: PinOption = None,
    long: Annotated[bool, typer.Option("--long", help="Every file and GPU verification of every patch.")] = False,
) -> Shown:
    """The pin and the series: kind, upstream status, files, lines, whether each applies, GPU evidence."""
    from patchtool.series import status as workflow
    from patchtool.sglang import gpuresults

    report = workflow.status(load_project(ctx), cache(ctx), pin, gpu_results=gpuresults.read)

    def text(style: Style) -> str:
        if long:
            return status_text(report, style)
        from patchtool.cli.tables import status_table

        return status_table(report, style)

    return Shown(data=report, text=text)


@command(writes=True, dry_run="dry_run", reports=("report_file",))
def rebase(
    ctx: typer.Context,
    to: Annotated[
        str | None,
        typer.Option(
            metavar="TARGET", help="A tag (v0.5.24), version, commit, or latest.", autocompletion=rebase_targets
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="The full report; touch nothing.")] = False,
    cont: Annotated[bool, typer.Option("--continue", help="Go on after resolving a conflict.")] = False,
    abort: Annotated[bool, typer.Option("--abort", help="Put everything back as it was.")] = False,
    skip: Annotated[
        bool, typer.Option("--skip", help="Drop the conflicting patch (needs --reason or --merged).")
    ] = False,
    reason: Annotated[str | None, typer.Option(metavar="TEXT", help="Why the skipped patch is dropped.")] = None,
    merged: Annotated[
        bool,
        typer.Option(
            "--merged", help="With --skip: upstream merged it in the target version (recorded with the evidence)."
        ),
    ] = False,
    all_evidenced: Annotated[
        bool,
        typer.Option(
            "--all-evidenced",
            help="With --skip --merged: also every later stop where the target already has the patch's lines.",
        ),
    ] = False,
    widen: Annotated[
        bool,
        typer.Option(
            "--widen",
            help="Widen applies_to of every patch verified at the target "
            "to admit it (minimally); the report lists them.",
        ),
    ] = False,
    report_file: Annotated[
        Path | None,
        typer.Option(
            "--report",
            metavar="FILE",
            help="Also write it to FILE: one self-contained HTML page for FILE.html, Markdown otherwise.",
        ),
    ] = None,
    sdist: Annotated[bool, typer.Option("--sdist", help="With --to: onto the release's sdist.")] = False,
    wheel: Annotated[
        bool, typer.Option("--wheel", help="With --to: onto the release's wheel (pure, else this interpreter's).")
    ] = False,
    filename: Annotated[
        str | None, typer.Option(metavar="FILE", help="With --to: onto this release file, as the index names it.")
    ] = None,
    history: Annotated[
        bool,
        typer.Option(
            "--history",
            help="With --to: ask upstream's history (the pin's [git] url, fetched once into the cache) "
            "which commits each patch carries and which changed the lines under its hunks.",
        ),
    ] = False,
) -> Shown:
    """Move the series to a new upstream: every patch accounted for, as a transaction."""
    from patchtool.rebase import transaction
    from patchtool.upstream.releasefiles import FileChoice

    if sum((to is not None, cont, abort, skip)) != 1:
        raise UsageError("give exactly one of --to TARGET, --continue, --skip --reason R (or --skip --merged), --abort")
    if widen and abort:
        raise UsageError("--widen goes with --to, --continue or --skip: --abort changes nothing")
    if merged and not skip:
        raise UsageError("--merged goes with --skip: it records why the stopped patch is dropped")
    if all_evidenced and not merged:
        raise UsageError("--all-evidenced goes with --skip --merged")
    if skip and not reason and not merged:
        raise UsageError("--skip needs --reason (or --merged): a dropped patch is recorded with why")
    choice = FileChoice.of(sdist=sdist, wheel=wheel, filename=filename)
    if history and to is None:
        raise UsageError("--history goes with --to: a stopped rebase asks history as it started")
    if choice.given and to is None:
        raise UsageError("--sdist, --wheel and --filename go with --to: they choose the release file")
    project = load_project(ctx)
    _check_report(report_file, project.root)
    upstream = cache(ctx)
    if abort:
        transaction.abort(project, upstream)
        return Shown(data=transaction.Aborted(), text=lambda _style: "rebase aborted; nothing changed")
    from patchtool.series.unexported import unexported
    from patchtool.upstream.namespaces import project_key

    # a checkout's commits no export wrote are not part of the series the rebase moves
    work = unexported(upstream.repo, project_key(project.root))
    try:
        if to is not None:
            report = transaction.start(
                project, upstream, to, dry_run=dry_run, widen=widen, choice=choice, history=history
            )
        else:
            skipped = transaction.Skip(reason=reason, merged=merged, all_evidenced=all_evidenced) if skip else None
            report = transaction.resume(project, upstream, skip=skipped, widen=widen)
    except ApplyConflict as exc:
        if report_file is not None and isinstance(exc.result, transaction.RebaseReport):
            write_report(invocation(ctx), report_file, _rebase_page(report_file, exc.result), repository=project.root)
        raise
    if report_file is not None:
        write_report(invocation(ctx), report_file, _rebase_page(report_file, report), repository=project.root)
    stuck = report.predicted_conflicts

    def text(style: Style) -> str:
        from patchtool.cli.prose import rebase_text  # rich: the text alone draws it, --json never loads it

        warning = "".join(line + "\n" for line in unexported_lines(work, style))
        head = f"{style.bad('warning')}: the rebase moves the series as last exported, not these commits:\n{warning}"
        note = f"{len(stuck)} patch(es) would stop the rebase: {', '.join(stuck)} (exit {int(ExitCode.PREDICTED)})"
        return (head if work else "") + rebase_text(report, style) + (f"\n{_predicted(note, style)}" if stuck else "")

    return Shown(
        data={**report.to_dict(), "unexported": [u.to_dict() for u in work]},
        code=ExitCode.PREDICTED if stuck else ExitCode.OK,
        text=text,
    )


def _predicted(text: str, style: Style) -> str:
    """``predicted: TEXT``, wrapped to the terminal as the tables are."""
    from patchtool.cli.prose import fill

    return fill(text, style, prefix=f"{style.bad('predicted')}: ", indent=2)


def _rebase_page(path: Path, report: "RebaseReport") -> str:
    """The rebase report as FILE's suffix asks: one self-contained HTML page, or Markdown."""
    if path.suffix.lower() in (".html", ".htm"):
        from patchtool.cli.htmlpage import rebase_page

        return rebase_page(report)
    return rebase_markdown(report)


def _check_report(path: Path | None, repository: Path) -> None:
    """Refuse a report file that would replace the series or a special file, before any work."""
    if path is not None:
        fsroot.check_output(path, repository=repository)


@command(reports=("html_file",))
def scan(
    ctx: typer.Context,
    versions: Annotated[str | None, typer.Option(metavar="SPEC", help="0.5.20..0.5.23 or 0.5.20,0.5.22.")] = None,
    newest: Annotated[int | None, typer.Option(metavar="N", help="The N newest releases on the index.")] = None,
    html_file: Annotated[
        Path | None,
        typer.Option(
            "--html", metavar="FILE", help="Also write the matrix as one self-contained HTML page (works offline)."
        ),
    ] = None,
    history: Annotated[
        bool,
        typer.Option(
            "--history",
            help="Ask upstream's history (the pin's [git] url, fetched once into the cache), as "
            "`rebase --history` does, between the pin and each version.",
        ),
    ] = False,
) -> Shown:
    """Try the series against many upstream versions without a checkout: a patch x version matrix."""
    from patchtool.rebase import scan as workflow

    if (versions is None) == (newest is None):
        raise UsageError("give --versions A..B (or a list) or --newest N")
    if newest is not None and newest < 1:
        raise UsageError(f"--newest {newest}: give how many of the newest releases to scan, at least 1")
    project = load_project(ctx)
    _check_report(html_file, project.root)
    report = workflow.scan(project, cache(ctx), versions, count=newest, history=history)
    # a scan that could have no release at all has no matrix worth a page: it failed
    if html_file is not None and set(report.unavailable) != set(report.versions):
        from patchtool.cli.htmlpage import scan_page

        write_report(invocation(ctx), html_file, scan_page(report), repository=project.root)

    stuck = report.predicted_conflicts

    def text(style: Style) -> str:
        from patchtool.cli.tables import scan_table

        # each stop in its own word: a target gone is not a conflict
        where = "; ".join(
            f"{pid} at {', '.join(f'{v} ({report.steps[pid][v].outcome})' for v in at)}" for pid, at in stuck.items()
        )
        note = f"a rebase would stop for {where} (exit {int(ExitCode.PREDICTED)})"
        from patchtool.cli.prose import fill

        missing = "".join(
            "\n" + fill(f"{v}: {why}", style, prefix=f"{style.bad('not scanned')}: ", indent=2)
            for v, why in report.unavailable.items()
        )
        asked = "".join(
            "\n" + fill(f"{v}: {line}", style, prefix="history: ", indent=2)
            for v, lines in report.history.items()
            for line in lines
        )
        return scan_table(report, style) + (f"\n{_predicted(note, style)}" if stuck else "") + missing + asked

    code = ExitCode.UPSTREAM if report.unavailable else ExitCode.PREDICTED if stuck else ExitCode.OK
    return Shown(data=report, text=text, code=code)
