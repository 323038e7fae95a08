"""Commands that build and inspect patched wheels: build, provenance."""

# No postponed annotations: typer reads every command's signature at each start (strings, it evaluates).

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from patchtool import fsroot
from patchtool.cli.completion import PinOption
from patchtool.cli.confinement import landlock_wanted
from patchtool.cli.context import cache, load_project
from patchtool.cli.exits import Shown, command
from patchtool.cli.render import build_text, provenance_text, provenances_text
from patchtool.errors import ExitCode, UsageError

# Each command imports its workflow when it runs: every command's at the start would cost each command the others'.


def _source_date_epoch(given: int | None) -> int | None:
    from patchtool.wheel.archive import LAST_EPOCH

    if given is not None:
        value, where = given, f"--source-date-epoch {given}"
    elif os.environ.get("SOURCE_DATE_EPOCH"):
        try:
            value = int(os.environ["SOURCE_DATE_EPOCH"])
        except ValueError:
            raise UsageError(
                f"SOURCE_DATE_EPOCH={os.environ['SOURCE_DATE_EPOCH']!r} is not a whole number of seconds"
            ) from None
        where = f"SOURCE_DATE_EPOCH={value}"
    else:
        return None
    if value < 0:
        raise UsageError(f"{where} is before 1970", hint="give seconds since the epoch, >= 0")
    if value > LAST_EPOCH:
        raise UsageError(
            f"{where} is after 2107-12-31, the last date a wheel (a zip) can carry",
            hint=f"give seconds since the epoch, at most {LAST_EPOCH}",
        )
    return value


@command(writes=True, outputs=("out",))
def build(
    ctx: typer.Context,
    pin: PinOption = None,
    out: Annotated[
        Path | None,
        typer.Option(metavar="DIR", help="Where to write the wheel (default: dist/ in the patch repository)."),
    ] = None,
    isolation: Annotated[
        bool,
        typer.Option(
            "--isolation/--no-isolation",
            help="git pins and --from-sdist: build in a fresh environment (default), or in this one.",
        ),
    ] = True,
    source_date_epoch: Annotated[
        int | None,
        typer.Option(
            metavar="SECONDS",
            help="Timestamp for the members patchtool writes (default: $SOURCE_DATE_EPOCH, else from the pin).",
        ),
    ] = None,
    from_sdist: Annotated[
        bool,
        typer.Option(
            "--from-sdist",
            help="sdist pins: build the patched sdist with upstream's own build backend (confined).",
        ),
    ] = False,
) -> Shown:
    """Build the patched wheel: repack the pinned release wheel, build the pinned git commit, or
    (--from-sdist) build the patched sdist."""
    from patchtool.wheel.build import build_wheel

    project = load_project(ctx)
    # the default lies in the repository, where `dist` could be a committed link out of it
    out = (out or fsroot.Root(project.root).place("dist", create=False)).absolute()
    result = build_wheel(
        project,
        cache(ctx),
        out=out,
        pin_name=pin,
        source_date_epoch=_source_date_epoch(source_date_epoch),
        isolation=isolation,
        confined=landlock_wanted(),
        from_sdist=from_sdist,
    )
    return Shown(data=result, text=lambda style: build_text(result, style))


@command()
def provenance(
    ctx: typer.Context,  # noqa: ARG001 -- every command takes ctx (exits.command)
    targets: Annotated[
        list[str],
        typer.Argument(
            metavar="WHEEL_OR_DIST...",
            help="Wheel files (dist/*.whl), .dist-info directories, or names of installed distributions.",
        ),
    ],
    path: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="DIR",
            help="Find installed distributions here (a site-packages directory; repeatable; "
            "default: this Python's sys.path).",
        ),
    ] = None,
) -> Shown:
    """What a patched wheel or installation contains: upstream, patches, and whether its files are intact."""
    from patchtool.wheel.provenance import locate, locate_all

    where = [str(p) for p in path] if path else sys.path
    if len(targets) > 1:
        found, code = locate_all(targets, where)
        return Shown(data=found, text=lambda style: provenances_text(found, style), code=code, problems=found.problems)
    report = locate(targets[0], where)
    return Shown(
        data=report,
        text=lambda style: provenance_text(report, style),
        code=ExitCode.OK if report.ok else ExitCode.PROBLEMS,
        problems=report.problems,
    )
