"""`patchtool build` and `patchtool provenance`: thin commands over wheel.py and provenance.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from .cli import CacheOpt, JsonOpt, PinOpt, RootOpt, _cache, _emit, _root, _run, app
from .errors import ExitCode
from .project import Project
from .report import Style


@app.command()
def build(pin: PinOpt = None,
          out: Annotated[Path | None, typer.Option(
              "--out", help="Where to write the wheel (default: dist/ in the patch repository).")] = None,
          isolation: Annotated[bool, typer.Option(
              "--isolation/--no-isolation",
              help="git pins: build in a fresh environment (default), or in this one.")] = True,
          source_date_epoch: Annotated[int | None, typer.Option(
              "--source-date-epoch", envvar="SOURCE_DATE_EPOCH", min=0,
              help="Timestamp for the members patchtool writes (default: from the pin).")] = None,
          root: RootOpt = None, cache_dir: CacheOpt = None, as_json: JsonOpt = False) -> None:
    """Build the patched wheel: repack the pinned release wheel, or build the pinned git commit."""
    def body(style: Style) -> None:
        from .report import build_text
        from .wheel import build_wheel

        project = Project.load(_root(root))
        result = build_wheel(project, _cache(cache_dir), out=(out or project.root / "dist").absolute(),
                             pin_name=pin, source_date_epoch=source_date_epoch, isolation=isolation)
        _emit("build", as_json, ExitCode.OK, result.to_dict(), build_text(result, style))
    _run("build", as_json, body)


@app.command("provenance")
def provenance_command(
        target: Annotated[str, typer.Argument(
            metavar="WHEEL_OR_DIST",
            help="A wheel file, a .dist-info directory, or the name of an installed distribution.")],
        path: Annotated[list[Path] | None, typer.Option(
            "--path", help="Find installed distributions here (a site-packages directory; repeatable; "
                           "default: this Python's sys.path).")] = None,
        as_json: JsonOpt = False) -> None:
    """What a patched wheel or installation contains: upstream, patches, and whether its files are intact."""
    def body(style: Style) -> None:
        from .provenance import locate
        from .report import provenance_text

        report = locate(target, [str(p) for p in path] if path else sys.path)
        code = ExitCode.OK if report.ok else ExitCode.PROBLEMS
        _emit("provenance", as_json, code, report.to_dict(), provenance_text(report, style), report.problems)
    _run("provenance", as_json, body)
