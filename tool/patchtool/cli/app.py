"""The command line: one typer app over the command modules, and ``main``, its one entry point.

Global options (``--json``, ``--root``, ``--cache-dir``) are taken before or after the command;
an option's value may start with a dash (``retread add --flag --ep-size=4``). A command line that
cannot be read is a usage error (exit 2), under ``--json`` an envelope like every other result.
Shell completion comes from typer: ``patchtool --install-completion`` / ``--show-completion``.
"""

# No postponed annotations: typer reads the root's signature at each start (strings, it evaluates).

import functools
import sys
from pathlib import Path
from typing import Annotated

import typer

from patchtool import __version__, confine
from patchtool.cli import core, edit, entry, init, pin, retread, upkeep, usage, wheel
from patchtool.cli.confinement import landlock_wanted
from patchtool.cli.context import Invocation

HELP = "Carry a curated series of downstream patches on a pinned upstream."
GLOBAL = "Global options (before or after the command)"
COMMANDS = (
    ("apply", core.apply),
    ("check", core.check),
    ("recover", core.recover),
    ("status", core.status),
    ("rebase", core.rebase),
    ("scan", core.scan),
    ("checkout", edit.checkout),
    ("export", edit.export),
    ("refresh", edit.refresh),
    ("import", edit.import_),
    ("new", edit.new),
    ("drop", edit.drop),
    ("show", entry.show),
    ("edit", entry.edit),
    ("build", wheel.build),
    ("provenance", wheel.provenance),
    ("cache", upkeep.cache_command),
    ("init", init.init),
)
GROUPS = (
    (
        "retread",
        retread.HELP,
        (
            ("list", retread.retread_list),
            ("show", retread.retread_show),
            ("scan", retread.retread_scan),
            ("revisit", retread.retread_revisit),
            ("add", retread.retread_add),
        ),
    ),
    ("pin", pin.HELP, (("add", pin.pin_add), ("list", pin.pin_list), ("remove", pin.pin_remove))),
)


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"patchtool {__version__}\nconfinement: {_confinement()}\n")
        raise typer.Exit


def _confinement() -> str:
    """Whether commands hold themselves to their writes with Landlock here, said once, here."""
    if not landlock_wanted():
        return f"off ({confine.OPT_OUT}=0)"
    found = confine.support()
    return found.describe() if found.usable else f"none, Landlock {found.describe()}"


def _top(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print patchtool's version and exit."),
    ] = False,
    global_json: Annotated[
        bool,
        typer.Option("--json", help="Print one versioned JSON envelope and nothing else.", rich_help_panel=GLOBAL),
    ] = False,
    global_root: Annotated[
        Path | None,
        typer.Option(
            "--root",
            metavar="DIR",
            rich_help_panel=GLOBAL,
            help="The patch repository (default: nearest parent with patchset.toml).",
        ),
    ] = None,
    global_cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--cache-dir",
            metavar="DIR",
            rich_help_panel=GLOBAL,
            help="Upstream cache (default: $PATCHTOOL_CACHE_DIR, else $XDG_CACHE_HOME/patchtool or "
            "~/.cache/patchtool).",
        ),
    ] = None,
    global_allow_local: Annotated[
        bool,
        typer.Option(
            "--allow-local-urls",
            rich_help_panel=GLOBAL,
            help="Let the repository's urls be plain http or local git repositories, not only https "
            "(as $PATCHTOOL_ALLOW_LOCAL_URLS=1).",
        ),
    ] = False,
    global_allow_local_in: Annotated[
        Path | None,
        typer.Option(
            "--allow-local-urls-in",
            metavar="DIR",
            rich_help_panel=GLOBAL,
            help="As --allow-local-urls, and let local urls (file:, a git path) name what lies beneath DIR, "
            "and nothing else (as $PATCHTOOL_ALLOW_LOCAL_URLS=DIR).",
        ),
    ] = None,
) -> None:
    """The global options, declared once: every command and group takes them too (``usage``), and
    each puts those given to it on the invocation (``context.Invocation.taking``)."""


def app() -> typer.Typer:
    """The command line as typer holds it: the root and its global options, every command, the groups."""
    group_of = functools.partial(
        typer.Typer,
        cls=usage.Group,
        context_settings={"help_option_names": usage.HELP_OPTIONS},
        rich_markup_mode="markdown",
    )
    root = group_of(name="patchtool", help=HELP)
    root.callback()(_top)
    for name, fn in COMMANDS:
        root.command(name, cls=usage.Command)(fn)
    for group, help_text, commands in GROUPS:
        sub = group_of(name=group, help=help_text, add_completion=False)
        for name, fn in commands:
            sub.command(name, cls=usage.Command)(fn)
        root.add_typer(sub)
    return root


def main(argv: list[str] | None = None) -> int:
    """Run a command line: the process's own (``argv`` None), which confines the process to the
    command's writes, or ``argv`` in a caller's process, which is left as it is."""
    words = sys.argv[1:] if argv is None else list(argv)
    command = typer.main.get_command(app())
    try:
        code = command.main(
            args=words, prog_name="patchtool", standalone_mode=False, obj=Invocation(confine=argv is None)
        )
    except typer.TyperException as exc:  # click's errors, typer's public base of them
        return usage.report(exc, as_json="--json" in words)
    except SystemExit as exc:  # shell completion ends the process this way
        return exc.code if isinstance(exc.code, int) else 0
    return code if isinstance(code, int) else 0
