"""The command line: one thin function per command; one place maps errors to exit codes.

Built on argparse, as pip, build, nox and pipx are: a command starts in a few milliseconds, which
matters for a rebase that stops at four conflicts and is resumed four times.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from patchtool import __version__
from patchtool.cli.render import Style, envelope, problems_text
from patchtool.errors import AccessError, ApplyConflict, ExitCode, InternalError, PatchtoolError, Problem, UsageError
from patchtool.project.repository import Project

if TYPE_CHECKING:
    from patchtool.registry import entries as reg
    from patchtool.upstream.cache import Cache

# Each command imports its workflow when it runs: a command pays only for the modules it uses.


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "patchtool"


@dataclasses.dataclass(kw_only=True, slots=True)
class _Invocation:
    """The command this process runs: its name, whether it writes, and the lock it holds."""

    command: str = "patchtool"
    writes: bool = False
    edits_series: bool = False
    held: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)
    recovered: list[str] = dataclasses.field(default_factory=list)


_INVOCATION = _Invocation()


def _root(root: Path | None, *, writes: bool | None = None) -> Path:
    """The patch repository, locked for this command: exclusively for a writing command (which
    first finishes a write an earlier one committed but did not complete), shared for a reading
    one. The one place the lock is taken."""
    from patchtool.project import journal, lock
    from patchtool.project.manifest import MANIFEST_NAME

    if root is None:
        found = Project.find(Path.cwd())
    else:
        found = root.absolute()
        if not (found / MANIFEST_NAME).is_file():
            raise UsageError(f"--root {root}: no {MANIFEST_NAME} there", hint="pass the patch repository's directory")
    exclusive = _INVOCATION.writes if writes is None else writes
    _INVOCATION.held.enter_context(lock.held(found, exclusive=exclusive))
    if exclusive:
        _INVOCATION.recovered += journal.recover(found)
    if exclusive and _INVOCATION.edits_series:
        from patchtool.rebase.transaction import refuse_in_progress

        refuse_in_progress(found, _INVOCATION.command)
    return found


def _cache(cache_dir: Path | None) -> Cache:
    from patchtool.upstream.cache import Cache
    from patchtool.upstream.index import INDEX_URL_ENV

    env = os.environ.get("PATCHTOOL_CACHE_DIR")
    return Cache((cache_dir or (Path(env) if env else None) or default_cache_dir()).absolute(),
                 index_url=os.environ.get(INDEX_URL_ENV) or None)


def _echo(text: str, *, err: bool = False) -> None:
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def _emit(command: str, as_json: bool, code: ExitCode, data: Any, text: str,
          errors: tuple[Problem, ...] = ()) -> None:
    if as_json:
        _echo(envelope(command, code, data, errors))
    else:
        stream_err = code not in (ExitCode.OK, ExitCode.PROBLEMS, ExitCode.CONFLICT)
        if text:
            _echo(text, err=stream_err)
    if code is not ExitCode.OK:
        raise SystemExit(int(code))


def _run(command: str, as_json: bool, body: Callable[[Style], None]) -> None:
    """Run a command body; the one place where PatchtoolError becomes a message and an exit code."""
    style = Style(colour=not as_json and sys.stdout.isatty())
    try:
        body(style)
    except ApplyConflict as exc:
        from patchtool.cli.render import rebase_text, series_text
        from patchtool.rebase.transaction import RebaseReport

        result = exc.result
        shown = rebase_text(result, style) if isinstance(result, RebaseReport) else series_text(result, style)
        text = f"{shown}\n{style.bad('error')}: {exc.message}"
        if exc.hint:
            text += f"\n  hint: {exc.hint}"
        data = exc.data if exc.data is not None else getattr(result, "to_dict", lambda: None)()
        _emit(command, as_json, ExitCode.CONFLICT, data, text, exc.as_problems())
    except PatchtoolError as exc:
        _fail(command, as_json, exc, style)
    except (PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        _fail(command, as_json, AccessError(
            f"cannot use {exc.filename or 'a file'}: {exc.strerror}",
            hint="check its permissions, or point patchtool elsewhere (--root, --cache-dir, --out)"), style)
    except OSError as exc:
        _fail(command, as_json, AccessError(f"{exc.filename or 'a file'}: {exc.strerror or exc}",
                                            hint="check the disk and the path"), style)
    except Exception as exc:
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1]
        _fail(command, as_json, InternalError(
            f"internal error: {type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})",
            hint="this is a bug in patchtool; please report it with the command you ran"), style)


def _fail(command: str, as_json: bool, exc: PatchtoolError, style: Style) -> NoReturn:
    problems = exc.as_problems()
    if as_json:
        _echo(envelope(command, exc.exit_code, None, problems))
    else:
        _echo(problems_text(problems, style), err=True)
    raise SystemExit(int(exc.exit_code)) from None


# -- the parser ----------------------------------------------------------------------------------

class _BadArguments(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _BadArguments(self, message)


Handler = Callable[[argparse.Namespace], None]


class Commands:
    """The subcommands, each declared next to the function that runs it."""

    def __init__(self, parser: argparse.ArgumentParser, prefix: str = "") -> None:
        self._sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)
        self._prefix = prefix
        parser.set_defaults(handler=lambda args: _usage(parser), command=prefix.strip() or "patchtool",
                            writes=False, edits_series=False)

    def add(self, name: str, handler: Handler, *, pin: bool = False, cache: bool = False,
            root: bool = True, json: bool = True, writes: bool = False,
            edits_series: bool = False) -> argparse.ArgumentParser:
        """``writes``: the command changes the repository, so it holds the lock alone;
        ``edits_series``: it changes the series, so it waits until no rebase is in progress."""
        doc = (handler.__doc__ or "").strip()
        sp = self._sub.add_parser(name, help=doc.split("\n")[0], description=doc)
        sp.set_defaults(command=f"{self._prefix}{name}", writes=writes or edits_series, edits_series=edits_series)
        if pin:
            sp.add_argument("--pin", metavar="NAME", help="A pin in upstream-pins/ (default: the active one).")
        if root:
            sp.add_argument("--root", type=Path, metavar="DIR",
                            help="The patch repository (default: nearest parent with patchset.toml).")
        if cache:
            sp.add_argument("--cache-dir", type=Path, metavar="DIR",
                            help="Upstream cache (default: $PATCHTOOL_CACHE_DIR, else $XDG_CACHE_HOME/patchtool "
                                 "or ~/.cache/patchtool).")
        if json:
            sp.add_argument("--json", dest="as_json", action="store_true", help="Print one versioned JSON envelope.")
        sp.set_defaults(handler=handler)
        return sp

    def group(self, name: str, doc: str) -> Commands:
        """A command with commands of its own (``patchtool retread list``)."""
        return Commands(self._sub.add_parser(name, help=doc, description=doc), prefix=f"{self._prefix}{name} ")


def _usage(parser: argparse.ArgumentParser) -> None:
    parser.print_help(sys.stderr)
    raise SystemExit(int(ExitCode.USAGE))


def build_parser() -> argparse.ArgumentParser:
    from patchtool.cli import edit as cli_edit
    from patchtool.cli import wheel as cli_wheel

    parser = _Parser(prog="patchtool", description="Carry a curated series of downstream patches on a "
                                                   "pinned upstream.")
    parser.add_argument("--version", action="version", version=f"patchtool {__version__}")
    commands = Commands(parser)

    sp = commands.add("apply", apply, pin=True, cache=True, writes=True)
    sp.add_argument("--into", type=Path, metavar="DIR", help="Where to put the patched tree (default: build/<pin>).")
    sp.add_argument("--force", action="store_true", help="Replace a tree an earlier `patchtool apply` left at --into.")
    sp.add_argument("--keep-failed", dest="keep", action="store_true",
                    help="On failure, keep a partial tree with .rej files for debugging.")
    commands.add("check", check, pin=True, cache=True)
    commands.add("recover", recover, writes=True)
    commands.add("status", status, pin=True, cache=True)

    sp = commands.add("rebase", rebase, cache=True, writes=True)
    sp.add_argument("--to", metavar="TARGET", help="A tag (v0.5.24), version, commit, or latest.")
    sp.add_argument("--dry-run", action="store_true", help="The full report; touch nothing.")
    sp.add_argument("--continue", dest="cont", action="store_true", help="Go on after resolving a conflict.")
    sp.add_argument("--abort", action="store_true", help="Put everything back as it was.")
    sp.add_argument("--skip", action="store_true", help="Drop the conflicting patch (needs --reason).")
    sp.add_argument("--reason", metavar="TEXT", help="Why the skipped patch is dropped.")
    sp.add_argument("--report", dest="report_file", type=Path, metavar="FILE", help="Also write it as Markdown.")

    sp = commands.add("scan", scan, cache=True)
    sp.add_argument("--versions", metavar="SPEC", help="0.5.20..0.5.23 or 0.5.20,0.5.22.")
    sp.add_argument("--newest", type=int, metavar="N", help="The N newest releases on the index.")

    retread = commands.group("retread", "The do-not-retread registry of rejected ideas.")
    retread.add("list", retread_list)
    sp = retread.add("show", retread_show)
    sp.add_argument("ident", metavar="ID")
    sp = retread.add("scan", retread_scan)
    sp.add_argument("paths", metavar="PATH", type=Path, nargs="+",
                    help="Serve scripts, env files, units, arg lists.")
    retread.add("revisit", retread_revisit, pin=True, cache=True)
    sp = retread.add("add", retread_add, writes=True)
    sp.add_argument("--id", dest="ident", help="Stable id of the idea.")
    sp.add_argument("--title", help="Short title.")
    sp.add_argument("--tried", help="What was tried.")
    sp.add_argument("--verdict", default="rejected", help="rejected | superseded | deprioritized.")
    sp.add_argument("--reason", help="Why it was rejected.")
    sp.add_argument("--revisit", help="When to look again.")
    for name, text in (("metric", "what was measured"), ("before", "value before"), ("after", "value after"),
                       ("change", "the change, e.g. '+5%%'"), ("hardware", "hardware"), ("model", "model"),
                       ("upstream", "upstream version"), ("date", "date, YYYY-MM-DD"),
                       ("source", "where the numbers come from")):
        sp.add_argument(f"--{name}", help=f"Evidence: {text}.")
    sp.add_argument("--flag", action="append", help="Knob: --flag or --flag=VALUES-REGEX (repeat).")
    sp.add_argument("--env", action="append", help="Knob: NAME or NAME=VALUES-REGEX (repeat).")
    sp.add_argument("--config", action="append", help="Knob: config key or KEY=VALUES-REGEX.")
    sp.add_argument("--pattern", action="append", help="Knob: a code pattern (regex).")
    sp.add_argument("--unguarded", help="What no knob can express (needed when there is no knob).")
    sp.add_argument("--from-file", type=Path, help="A TOML file with one [[rejected]] table.")
    sp.add_argument("--edit", action="store_true", help="Fill a template in $EDITOR.")

    cli_edit.register(commands)
    cli_wheel.register(commands)
    return parser


def _glued(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``--flag --ep-size=4`` read as ``--flag=--ep-size=4``: an option that takes a value takes
    the next word, even one that starts with a dash (argparse alone would refuse it)."""
    chosen = parser
    for word in argv:
        if word.startswith("-"):
            break
        subs = [a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        chosen = subs[0].choices[word]
    takes_value = {opt for action in chosen._actions if action.nargs is None and action.option_strings
                   and not isinstance(action, argparse._StoreConstAction) for opt in action.option_strings}
    out: list[str] = []
    words = iter(argv)
    for word in words:
        if word in takes_value:
            value = next(words, None)
            out.append(word if value is None else f"{word}={value}")
        else:
            out.append(word)
    return out


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        args = parser.parse_args(_glued(parser, words))
    except _BadArguments as exc:
        return _bad_arguments(exc, as_json="--json" in words)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    _INVOCATION.command, _INVOCATION.writes, _INVOCATION.edits_series = args.command, args.writes, args.edits_series
    try:
        with _INVOCATION.held:
            args.handler(args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        _echo("interrupted", err=True)
        return 130
    return 0


def _bad_arguments(exc: _BadArguments, *, as_json: bool) -> int:
    """A command line argparse refused: the usage and the message, or under --json the envelope."""
    command = exc.parser.prog.removeprefix("patchtool").strip() or "patchtool"
    if as_json:
        _echo(envelope(command, ExitCode.USAGE, None,
                       (Problem(message=exc.message, code="UsageError", hint=f"see `{exc.parser.prog} --help`"),)))
    else:
        exc.parser.print_usage(sys.stderr)
        _echo(f"{exc.parser.prog}: error: {exc.message}", err=True)
    return int(ExitCode.USAGE)


# -- the commands ----------------------------------------------------------------------------------

def apply(args: argparse.Namespace) -> None:
    """Materialise the pinned upstream and apply the series, one commit per patch."""
    def body(style: Style) -> None:
        from patchtool.cli.render import series_text
        from patchtool.git.materialise import check_replaceable, failed_tree_path, keep_failed, materialise
        from patchtool.series.apply import apply_series

        project = Project.load(_root(args.root))
        the_pin = project.pin(args.pin)
        loaded = project.series()
        cache = _cache(args.cache_dir)
        base = cache.ensure(the_pin)
        result = apply_series(cache.repo, base.commit, loaded, commit=True)
        target = (args.into or project.root / "build" / the_pin.name).absolute()
        data: dict[str, Any] = {"pin": the_pin.name, "base": base.commit,
                                "patches": [r.to_dict() for r in result.results]}
        if not result.ok:
            failed = result.failed
            assert failed is not None
            data["target"] = str(target)
            data["target_changed"] = False
            hint = f"{target} was left untouched"
            if args.keep:
                try:  # a directory patchtool did not make is never deleted
                    check_replaceable(cache.repo, failed_tree_path(target, failed.id))
                except UsageError as exc:
                    data["partial_tree"] = None
                    hint += f"; no partial tree was written: {exc.message}"
                else:
                    debug = keep_failed(cache.repo, result.last_good, target, failed.id,
                                        project.root / failed.file)
                    data["partial_tree"] = str(debug)
                    hint += (f"; a partial tree (patches before {failed.id} applied, .rej files for it) "
                             f"is at {debug}")
            else:
                hint += "; rerun with --keep-failed for a partial tree to debug in"
            raise ApplyConflict(f"patch {failed.id} ({failed.file}) does not apply at {the_pin.name}",
                                result=result, hint=hint, data=data)
        assert result.tip is not None
        where = materialise(cache.repo, result.tip, target, replace=args.force)
        data.update(tree=str(where), tip=result.tip)
        text = (f"{the_pin.upstream} {the_pin.version} ({base.source}, {base.commit[:12]})\n"
                f"{series_text(result, style)}\n"
                f"{style.ok('patched tree')}: {where} ({len(loaded)} patch(es), tip {result.tip[:12]})")
        _emit("apply", args.as_json, ExitCode.OK, data, text)
    _run("apply", args.as_json, body)


def check(args: argparse.Namespace) -> None:
    """Validate manifest, pins, patch files, application at the pin and assumption checks."""
    def body(style: Style) -> None:
        from patchtool.cli.render import check_text
        from patchtool.series.checks import run_check

        report = run_check(_root(args.root), cache=_cache(args.cache_dir), pin_name=args.pin)
        code = ExitCode.OK if report.ok else ExitCode.PROBLEMS
        _emit("check", args.as_json, code, report.to_dict(), check_text(report, style), report.problems)
    _run("check", args.as_json, body)


def recover(args: argparse.Namespace) -> None:
    """Finish a write that an interrupted command committed (reading commands refuse until then)."""
    def body(style: Style) -> None:
        root = _root(args.root)  # a writing command finishes the journal as it takes the lock
        Project.load(root)
        done = _INVOCATION.recovered
        _emit("recover", args.as_json, ExitCode.OK, {"root": str(root), "written": done},
              f"finished an interrupted write: {', '.join(done)}" if done else "no interrupted write was pending")
    _run("recover", args.as_json, body)


def status(args: argparse.Namespace) -> None:
    """The pin and the series: kind, upstream status, files, lines, whether each applies."""
    def body(style: Style) -> None:
        from patchtool.cli.render import status_text
        from patchtool.series.status import status as status_workflow

        project = Project.load(_root(args.root))
        report = status_workflow(project, _cache(args.cache_dir), args.pin)
        _emit("status", args.as_json, ExitCode.OK, report.to_dict(), status_text(report, style))
    _run("status", args.as_json, body)


def rebase(args: argparse.Namespace) -> None:
    """Move the series to a new upstream: every patch accounted for, as a transaction."""
    def body(style: Style) -> None:
        from patchtool.cli.render import rebase_markdown, rebase_text
        from patchtool.rebase import transaction

        chosen = [name for name, on in (("--to", args.to is not None), ("--continue", args.cont),
                                        ("--abort", args.abort), ("--skip", args.skip)) if on]
        if len(chosen) != 1:
            raise UsageError("give exactly one of --to TARGET, --continue, --skip --reason R, --abort")
        if args.skip and not args.reason:
            raise UsageError("--skip needs --reason: a dropped patch is recorded with why")
        project = Project.load(_root(args.root, writes=not args.dry_run))
        cache = _cache(args.cache_dir)
        if args.abort:
            transaction.abort(project, cache)
            _emit("rebase", args.as_json, ExitCode.OK, {"status": "aborted"}, "rebase aborted; nothing changed")
            return
        try:
            if args.to is not None:
                report = transaction.start(project, cache, args.to, dry_run=args.dry_run)
            else:
                report = transaction.resume(project, cache, skip_reason=args.reason if args.skip else None)
        except ApplyConflict as exc:
            if args.report_file is not None and isinstance(exc.result, transaction.RebaseReport):
                _write_report(args.report_file, rebase_markdown(exc.result))
            raise
        if args.report_file is not None:
            _write_report(args.report_file, rebase_markdown(report))
        _emit("rebase", args.as_json, ExitCode.OK, report.to_dict(), rebase_text(report, style))
    _run("rebase", args.as_json, body)


def _write_report(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def scan(args: argparse.Namespace) -> None:
    """Try the series against many upstream versions without a checkout: a patch x version matrix."""
    def body(style: Style) -> None:
        from patchtool.cli.render import scan_text
        from patchtool.rebase import scan as scan_mod

        if (args.versions is None) == (args.newest is None):
            raise UsageError("give --versions A..B (or a list) or --newest N")
        if args.newest is not None and args.newest < 1:
            raise UsageError(f"--newest {args.newest}: give how many of the newest releases to scan, at least 1")
        project = Project.load(_root(args.root))
        report = scan_mod.scan(project, _cache(args.cache_dir), args.versions, count=args.newest)
        _emit("scan", args.as_json, ExitCode.OK, report.to_dict(), scan_text(report, style))
    _run("scan", args.as_json, body)


def _registry(root: Path | None) -> tuple[Project, reg.Registry]:
    from patchtool.registry import workflows as retread

    project = Project.load(_root(root))
    return project, retread.load(project)


def retread_list(args: argparse.Namespace) -> None:
    """Every rejected idea: id, verdict, title and the knobs that would bring it back."""
    def body(style: Style) -> None:
        from patchtool.cli.render import registry_list_text

        _, registry = _registry(args.root)
        data = {"entries": [{"id": e.id, "verdict": e.verdict.value, "title": e.title,
                             "knobs": [k.to_dict() for k in e.knobs]} for e in registry.entries]}
        _emit("retread list", args.as_json, ExitCode.OK, data, registry_list_text(registry, style))
    _run("retread list", args.as_json, body)


def retread_show(args: argparse.Namespace) -> None:
    """One rejected idea in full: what was tried, the verdict, the reason, evidence, knobs, revisit."""
    def body(style: Style) -> None:
        from patchtool.cli.render import registry_show_text

        _, registry = _registry(args.root)
        try:
            entry = registry.get(args.ident)
        except KeyError as exc:
            raise UsageError(str(exc.args[0]), hint="see `patchtool retread list`") from None
        _emit("retread show", args.as_json, ExitCode.OK, entry.to_dict(), registry_show_text(entry, style))
    _run("retread show", args.as_json, body)


def retread_scan(args: argparse.Namespace) -> None:
    """Find rejected knobs in deployment files kept outside the patches (exit 1 on a finding)."""
    def body(style: Style) -> None:
        from patchtool.cli.render import findings_text
        from patchtool.registry import workflows as retread

        _, registry = _registry(args.root)
        findings = retread.scan(registry, args.paths)
        code = ExitCode.PROBLEMS if findings else ExitCode.OK
        _emit("retread scan", args.as_json, code, {"findings": [f.to_dict() for f in findings]},
              findings_text(findings, style))
    _run("retread scan", args.as_json, body)


def retread_revisit(args: argparse.Namespace) -> None:
    """Evaluate every revisit condition against a pin: which rejections may no longer hold."""
    def body(style: Style) -> None:
        from patchtool.cli.render import revisit_text
        from patchtool.registry import workflows as retread

        project, registry = _registry(args.root)
        report = retread.revisit(project, registry, _cache(args.cache_dir), args.pin)
        _emit("retread revisit", args.as_json, ExitCode.OK, report.to_dict(), revisit_text(report, style))
    _run("retread revisit", args.as_json, body)


def retread_add(args: argparse.Namespace) -> None:
    """Append a validated entry to the registry, keeping the file's comments and order."""
    def body(style: Style) -> None:
        from patchtool.registry import workflows as retread

        project = Project.load(_root(args.root))
        if args.edit:
            entry = retread.entry_from_editor(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi")
        elif args.from_file is not None:
            entry = retread.entry_from_text(args.from_file.read_text(encoding="utf-8"), str(args.from_file))
        else:
            fields = {"id": args.ident, "title": args.title, "tried": args.tried, "verdict": args.verdict,
                      "reason": args.reason, "revisit": args.revisit, "unguarded": args.unguarded}
            entry = {k: v for k, v in fields.items() if v is not None}
            evidence = {k: getattr(args, k) for k in ("metric", "before", "after", "change", "hardware", "model",
                                                       "upstream", "date", "source") if getattr(args, k) is not None}
            if evidence:
                entry["evidence"] = [evidence]
            knobs = [_knob("flag", k) for k in args.flag or []] + [_knob("env", k) for k in args.env or []]
            knobs += [_knob("config", k) for k in args.config or []]
            knobs += [{"type": "pattern", "name": p, "regex": p} for p in args.pattern or []]
            entry["knobs"] = knobs
        added = retread.add(project, entry)
        _emit("retread add", args.as_json, ExitCode.OK, added.to_dict(),
              f"added {style.bold(added.id)} to {project.manifest.registry}")
    _run("retread add", args.as_json, body)


def _knob(kind: str, spec: str) -> dict[str, str]:
    name, _, values = spec.partition("=")
    return {"type": kind, "name": name, **({"values": values} if values else {})}
