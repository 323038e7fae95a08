"""Commands that build and inspect patched wheels: build, provenance."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from patchtool.cli.app import Commands, _cache, _emit, _root, _run
from patchtool.cli.render import Style
from patchtool.errors import ExitCode, UsageError
from patchtool.project.repository import Project


def register(commands: Commands) -> None:
    sp = commands.add("build", build, pin=True, cache=True, writes=True)
    sp.add_argument("--out", type=Path, help="Where to write the wheel (default: dist/ in the patch repository).")
    sp.add_argument("--isolation", action=argparse.BooleanOptionalAction, default=True,
                    help="git pins: build in a fresh environment (default), or in this one.")
    sp.add_argument("--source-date-epoch", type=int,
                    help="Timestamp for the members patchtool writes (default: $SOURCE_DATE_EPOCH, else from "
                         "the pin).")
    sp = commands.add("provenance", provenance, root=False)
    sp.add_argument("target", metavar="WHEEL_OR_DIST",
                    help="A wheel file, a .dist-info directory, or the name of an installed distribution.")
    sp.add_argument("--path", type=Path, action="append",
                    help="Find installed distributions here (a site-packages directory; repeatable; "
                         "default: this Python's sys.path).")


def _source_date_epoch(given: int | None) -> int | None:
    from patchtool.wheel.archive import LAST_EPOCH

    if given is not None:
        value, where = given, f"--source-date-epoch {given}"
    elif os.environ.get("SOURCE_DATE_EPOCH"):
        try:
            value = int(os.environ["SOURCE_DATE_EPOCH"])
        except ValueError:
            raise UsageError(f"SOURCE_DATE_EPOCH={os.environ['SOURCE_DATE_EPOCH']!r} is not a whole number of "
                             "seconds") from None
        where = f"SOURCE_DATE_EPOCH={value}"
    else:
        return None
    if value < 0:
        raise UsageError(f"{where} is before 1970", hint="give seconds since the epoch, >= 0")
    if value > LAST_EPOCH:
        raise UsageError(f"{where} is after 2107-12-31, the last date a wheel (a zip) can carry",
                         hint=f"give seconds since the epoch, at most {LAST_EPOCH}")
    return value


def build(args: argparse.Namespace) -> None:
    """Build the patched wheel: repack the pinned release wheel, or build the pinned git commit."""
    def body(style: Style) -> None:
        from patchtool.cli.render import build_text
        from patchtool.wheel.build import build_wheel

        project = Project.load(_root(args.root))
        result = build_wheel(project, _cache(args.cache_dir), out=(args.out or project.root / "dist").absolute(),
                             pin_name=args.pin, source_date_epoch=_source_date_epoch(args.source_date_epoch),
                             isolation=args.isolation)
        _emit("build", args.as_json, ExitCode.OK, result.to_dict(), build_text(result, style))
    _run("build", args.as_json, body)


def provenance(args: argparse.Namespace) -> None:
    """What a patched wheel or installation contains: upstream, patches, and whether its files are intact."""
    def body(style: Style) -> None:
        from patchtool.cli.render import provenance_text
        from patchtool.wheel.provenance import locate

        report = locate(args.target, [str(p) for p in args.path] if args.path else sys.path)
        code = ExitCode.OK if report.ok else ExitCode.PROBLEMS
        _emit("provenance", args.as_json, code, report.to_dict(), provenance_text(report, style), report.problems)
    _run("provenance", args.as_json, body)
