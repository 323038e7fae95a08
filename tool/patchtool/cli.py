"""The typer app: one thin function per command; one place maps errors to exit codes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import __version__
from .errors import ApplyConflict, ExitCode, PatchtoolError, Problem, UsageError
from .project import Project
from .report import Style, envelope, problems_text

if TYPE_CHECKING:
    from . import registry as reg
    from .upstream import Cache

# Each command imports its workflow when it runs: a command pays only for the modules it uses,
# and `patchtool rebase --continue` in a loop of conflicts starts in a fraction of the time.

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Carry a curated series of downstream patches on a pinned upstream.")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one versioned JSON envelope.")]
RootOpt = Annotated[Path | None, typer.Option(
    "--root", help="The patch repository (default: nearest parent with patchset.toml).")]
CacheOpt = Annotated[Path | None, typer.Option(
    "--cache-dir", envvar="PATCHTOOL_CACHE_DIR",
    help="Upstream cache (default: $XDG_CACHE_HOME/patchtool or ~/.cache/patchtool).")]
PinOpt = Annotated[str | None, typer.Option("--pin", help="A pin in upstream-pins/ (default: the active one).")]


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "patchtool"


def _root(root: Path | None) -> Path:
    return root.absolute() if root else Project.find(Path.cwd())


def _cache(cache_dir: Path | None) -> Cache:
    from .upstream import Cache

    return Cache((cache_dir or default_cache_dir()).absolute())


def _emit(command: str, as_json: bool, code: ExitCode, data: Any, text: str,
          errors: tuple[Problem, ...] = ()) -> None:
    if as_json:
        typer.echo(envelope(command, code, data, errors))
    else:
        stream_err = code not in (ExitCode.OK, ExitCode.PROBLEMS, ExitCode.CONFLICT)
        if text:
            typer.echo(text, err=stream_err)
    if code is not ExitCode.OK:
        raise typer.Exit(int(code))


def _run(command: str, as_json: bool, body: Callable[[Style], None]) -> None:
    """Run a command body; the one place where PatchtoolError becomes a message and an exit code."""
    style = Style(colour=not as_json and sys.stdout.isatty())
    try:
        body(style)
    except ApplyConflict as exc:
        from .rebasing import RebaseReport
        from .report import rebase_text, series_text

        result = exc.result
        shown = rebase_text(result, style) if isinstance(result, RebaseReport) else series_text(result, style)
        text = f"{shown}\n{style.bad('error')}: {exc.message}"
        if exc.hint:
            text += f"\n  hint: {exc.hint}"
        data = exc.data if exc.data is not None else getattr(result, "to_dict", lambda: None)()
        _emit(command, as_json, ExitCode.CONFLICT, data, text, exc.as_problems())
    except PatchtoolError as exc:
        problems = exc.as_problems()
        text = problems_text(problems, style)
        if as_json:
            typer.echo(envelope(command, exc.exit_code, None, problems))
        else:
            typer.echo(text, err=True)
        raise typer.Exit(int(exc.exit_code)) from None


@app.command()
def apply(pin: PinOpt = None,
          into: Annotated[Path | None, typer.Option(
              "--into", help="Where to put the patched tree (default: build/<pin>).")] = None,
          force: Annotated[bool, typer.Option(
              "--force", help="Replace a tree an earlier `patchtool apply` left at --into.")] = False,
          keep: Annotated[bool, typer.Option(
              "--keep-failed", help="On failure, keep a partial tree with .rej files for debugging.")] = False,
          root: RootOpt = None, cache_dir: CacheOpt = None, as_json: JsonOpt = False) -> None:
    """Materialise the pinned upstream and apply the series, one commit per patch."""
    def body(style: Style) -> None:
        from .materialise import keep_failed, materialise
        from .report import series_text
        from .series import apply_series

        project = Project.load(_root(root))
        the_pin = project.pin(pin)
        loaded = project.series()
        cache = _cache(cache_dir)
        base = cache.ensure(the_pin)
        result = apply_series(cache.repo, base.commit, loaded, commit=True)
        target = (into or project.root / "build" / the_pin.name).absolute()
        data: dict[str, Any] = {"pin": the_pin.name, "base": base.commit,
                                "patches": [r.to_dict() for r in result.results]}
        if not result.ok:
            failed = result.failed
            assert failed is not None
            data["target"] = str(target)
            data["target_changed"] = False
            hint = f"{target} was left untouched"
            if keep:
                debug = keep_failed(cache.repo, result.last_good, target, failed.id,
                                    project.root / failed.file)
                data["partial_tree"] = str(debug)
                hint += f"; a partial tree (patches before {failed.id} applied, .rej files for it) is at {debug}"
            else:
                hint += "; rerun with --keep-failed for a partial tree to debug in"
            raise ApplyConflict(f"patch {failed.id} ({failed.file}) does not apply at {the_pin.name}",
                                result=result, hint=hint, data=data)
        assert result.tip is not None
        where = materialise(cache.repo, result.tip, target, replace=force)
        data.update(tree=str(where), tip=result.tip)
        text = (f"{the_pin.upstream} {the_pin.version} ({base.source}, {base.commit[:12]})\n"
                f"{series_text(result, style)}\n"
                f"{style.ok('patched tree')}: {where} ({len(loaded)} patch(es), tip {result.tip[:12]})")
        _emit("apply", as_json, ExitCode.OK, data, text)
    _run("apply", as_json, body)


@app.command()
def check(pin: PinOpt = None, root: RootOpt = None, cache_dir: CacheOpt = None,
          as_json: JsonOpt = False) -> None:
    """Validate manifest, pins, patch files, application at the pin and assumption checks."""
    def body(style: Style) -> None:
        from .checks import run_check
        from .report import check_text

        report = run_check(_root(root), cache=_cache(cache_dir), pin_name=pin)
        code = ExitCode.OK if report.ok else ExitCode.PROBLEMS
        _emit("check", as_json, code, report.to_dict(), check_text(report, style), report.problems)
    _run("check", as_json, body)


@app.command()
def status(pin: PinOpt = None, root: RootOpt = None, cache_dir: CacheOpt = None,
           as_json: JsonOpt = False) -> None:
    """The pin and the series: kind, upstream status, files, lines, whether each applies."""
    def body(style: Style) -> None:
        from .report import status_text
        from .status import status as status_workflow

        project = Project.load(_root(root))
        report = status_workflow(project, _cache(cache_dir), pin)
        _emit("status", as_json, ExitCode.OK, report.to_dict(), status_text(report, style))
    _run("status", as_json, body)


@app.command()
def rebase(to: Annotated[str | None, typer.Option("--to", help="A tag (v0.5.24), version, commit, or latest.")] = None,
           dry_run: Annotated[bool, typer.Option("--dry-run", help="The full report; touch nothing.")] = False,
           cont: Annotated[bool, typer.Option("--continue", help="Go on after resolving a conflict.")] = False,
           abort: Annotated[bool, typer.Option("--abort", help="Put everything back as it was.")] = False,
           skip: Annotated[bool, typer.Option("--skip", help="Drop the conflicting patch (needs --reason).")] = False,
           reason: Annotated[str | None, typer.Option("--reason", help="Why the skipped patch is dropped.")] = None,
           report_file: Annotated[Path | None, typer.Option("--report", help="Also write it as Markdown.")] = None,
           root: RootOpt = None, cache_dir: CacheOpt = None, as_json: JsonOpt = False) -> None:
    """Move the series to a new upstream: every patch accounted for, as a transaction."""
    def body(style: Style) -> None:
        from . import rebasing
        from .report import rebase_markdown, rebase_text

        chosen = [name for name, on in (("--to", to is not None), ("--continue", cont), ("--abort", abort),
                                        ("--skip", skip)) if on]
        if len(chosen) != 1:
            raise UsageError("give exactly one of --to TARGET, --continue, --skip --reason R, --abort")
        if skip and not reason:
            raise UsageError("--skip needs --reason: a dropped patch is recorded with why")
        project = Project.load(_root(root))
        cache = _cache(cache_dir)
        if abort:
            rebasing.abort(project, cache)
            _emit("rebase", as_json, ExitCode.OK, {"status": "aborted"}, "rebase aborted; nothing changed")
            return
        try:
            if to is not None:
                report = rebasing.start(project, cache, to, dry_run=dry_run)
            else:
                report = rebasing.resume(project, cache, skip_reason=reason if skip else None)
        except ApplyConflict as exc:
            if report_file is not None and isinstance(exc.result, rebasing.RebaseReport):
                _write_report(report_file, rebase_markdown(exc.result))
            raise
        if report_file is not None:
            _write_report(report_file, rebase_markdown(report))
        _emit("rebase", as_json, ExitCode.OK, report.to_dict(), rebase_text(report, style))
    _run("rebase", as_json, body)


def _write_report(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


@app.command()
def scan(versions: Annotated[str | None, typer.Option("--versions", help="0.5.20..0.5.23 or 0.5.20,0.5.22.")] = None,
         newest: Annotated[int | None, typer.Option("--newest", help="The N newest releases on the index.")] = None,
         root: RootOpt = None, cache_dir: CacheOpt = None, as_json: JsonOpt = False) -> None:
    """Try the series against many upstream versions without a checkout: a patch x version matrix."""
    def body(style: Style) -> None:
        from . import scan as scan_mod
        from .report import scan_text

        if (versions is None) == (newest is None):
            raise UsageError("give --versions A..B (or a list) or --newest N")
        project = Project.load(_root(root))
        report = scan_mod.scan(project, _cache(cache_dir), versions, count=newest)
        _emit("scan", as_json, ExitCode.OK, report.to_dict(), scan_text(report, style))
    _run("scan", as_json, body)


retread_app = typer.Typer(no_args_is_help=True, help="The do-not-retread registry of rejected ideas.")
app.add_typer(retread_app, name="retread")


def _registry(root: Path | None) -> tuple[Project, reg.Registry]:
    from . import retread

    project = Project.load(_root(root))
    return project, retread.load(project)


@retread_app.command("list")
def retread_list(root: RootOpt = None, as_json: JsonOpt = False) -> None:
    """Every rejected idea: id, verdict, title and the knobs that would bring it back."""
    def body(style: Style) -> None:
        from .report import registry_list_text

        _, registry = _registry(root)
        data = {"entries": [{"id": e.id, "verdict": e.verdict.value, "title": e.title,
                             "knobs": [k.to_dict() for k in e.knobs]} for e in registry.entries]}
        _emit("retread list", as_json, ExitCode.OK, data, registry_list_text(registry, style))
    _run("retread list", as_json, body)


@retread_app.command("show")
def retread_show(ident: Annotated[str, typer.Argument(metavar="ID")], root: RootOpt = None,
                 as_json: JsonOpt = False) -> None:
    """One rejected idea in full: what was tried, the verdict, the reason, evidence, knobs, revisit."""
    def body(style: Style) -> None:
        from .report import registry_show_text

        _, registry = _registry(root)
        try:
            entry = registry.get(ident)
        except KeyError as exc:
            raise UsageError(str(exc.args[0]), hint="see `patchtool retread list`") from None
        _emit("retread show", as_json, ExitCode.OK, entry.to_dict(), registry_show_text(entry, style))
    _run("retread show", as_json, body)


@retread_app.command("scan")
def retread_scan(paths: Annotated[list[Path], typer.Argument(metavar="PATH...",
                                                            help="Serve scripts, env files, units, arg lists.")],
                 root: RootOpt = None, as_json: JsonOpt = False) -> None:
    """Find rejected knobs in deployment files kept outside the patches (exit 1 on a finding)."""
    def body(style: Style) -> None:
        from . import retread
        from .report import findings_text

        _, registry = _registry(root)
        findings = retread.scan(registry, paths)
        code = ExitCode.PROBLEMS if findings else ExitCode.OK
        _emit("retread scan", as_json, code, {"findings": [f.to_dict() for f in findings]},
              findings_text(findings, style))
    _run("retread scan", as_json, body)


@retread_app.command("revisit")
def retread_revisit(pin: PinOpt = None, root: RootOpt = None, cache_dir: CacheOpt = None,
                    as_json: JsonOpt = False) -> None:
    """Evaluate every revisit condition against a pin: which rejections may no longer hold."""
    def body(style: Style) -> None:
        from . import retread
        from .report import revisit_text

        project, registry = _registry(root)
        report = retread.revisit(project, registry, _cache(cache_dir), pin)
        _emit("retread revisit", as_json, ExitCode.OK, report.to_dict(), revisit_text(report, style))
    _run("retread revisit", as_json, body)


@retread_app.command("add")
def retread_add(
        ident: Annotated[str | None, typer.Option("--id", help="Stable id of the idea.")] = None,
        title: Annotated[str | None, typer.Option(help="Short title.")] = None,
        tried: Annotated[str | None, typer.Option(help="What was tried.")] = None,
        verdict: Annotated[str, typer.Option(help="rejected | superseded | deprioritized.")] = "rejected",
        reason: Annotated[str | None, typer.Option(help="Why it was rejected.")] = None,
        revisit: Annotated[str | None, typer.Option(help="When to look again.")] = None,
        metric: Annotated[str | None, typer.Option(help="Evidence: what was measured.")] = None,
        before: Annotated[str | None, typer.Option(help="Evidence: value before.")] = None,
        after: Annotated[str | None, typer.Option(help="Evidence: value after.")] = None,
        change: Annotated[str | None, typer.Option(help="Evidence: the change, e.g. '+5%'.")] = None,
        hardware: Annotated[str | None, typer.Option(help="Evidence: hardware.")] = None,
        model: Annotated[str | None, typer.Option(help="Evidence: model.")] = None,
        upstream: Annotated[str | None, typer.Option(help="Evidence: upstream version.")] = None,
        date: Annotated[str | None, typer.Option(help="Evidence: date, YYYY-MM-DD.")] = None,
        source: Annotated[str | None, typer.Option(help="Evidence: where the numbers come from.")] = None,
        flag: Annotated[list[str] | None, typer.Option(help="Knob: --flag or --flag=VALUES-REGEX (repeat).")] = None,
        env: Annotated[list[str] | None, typer.Option(help="Knob: NAME or NAME=VALUES-REGEX (repeat).")] = None,
        config: Annotated[list[str] | None, typer.Option(help="Knob: config key or KEY=VALUES-REGEX.")] = None,
        pattern: Annotated[list[str] | None, typer.Option(help="Knob: a code pattern (regex).")] = None,
        from_file: Annotated[Path | None, typer.Option("--from-file",
                                                       help="A TOML file with one [[rejected]] table.")] = None,
        edit: Annotated[bool, typer.Option("--edit", help="Fill a template in $EDITOR.")] = False,
        root: RootOpt = None, as_json: JsonOpt = False) -> None:
    """Append a validated entry to the registry, keeping the file's comments and order."""
    def body(style: Style) -> None:
        from . import retread

        project = Project.load(_root(root))
        if edit:
            entry = retread.entry_from_editor(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi")
        elif from_file is not None:
            entry = retread.entry_from_text(from_file.read_text(encoding="utf-8"), str(from_file))
        else:
            fields = {"id": ident, "title": title, "tried": tried, "verdict": verdict, "reason": reason,
                      "revisit": revisit}
            entry = {k: v for k, v in fields.items() if v is not None}
            evidence = {k: v for k, v in (("metric", metric), ("before", before), ("after", after),
                                          ("change", change), ("hardware", hardware), ("model", model),
                                          ("upstream", upstream), ("date", date), ("source", source))
                        if v is not None}
            if evidence:
                entry["evidence"] = [evidence]
            knobs = [_knob("flag", k) for k in flag or []] + [_knob("env", k) for k in env or []]
            knobs += [_knob("config", k) for k in config or []]
            knobs += [{"type": "pattern", "name": p, "regex": p} for p in pattern or []]
            entry["knobs"] = knobs
        added = retread.add(project, entry)
        _emit("retread add", as_json, ExitCode.OK, added.to_dict(),
              f"added {style.bold(added.id)} to {project.manifest.registry}")
    _run("retread add", as_json, body)


def _knob(kind: str, spec: str) -> dict[str, str]:
    name, _, values = spec.partition("=")
    return {"type": kind, "name": name, **({"values": values} if values else {})}


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"patchtool {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version_callback,
                                                 is_eager=True, help="Print the version.")] = False) -> None:
    """patchtool: carry downstream patches on a pinned upstream."""


def main() -> None:
    app()


from . import cli_edit, cli_wheel  # noqa: E402,F401  register their commands on app
