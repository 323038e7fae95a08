"""The command line: one typer app over the command modules, and ``main``, its one entry point.

Global options (``--json``, ``--root``, ``--cache-dir``) are taken before or after the command;
an option's value may start with a dash (``retread add --flag --ep-size=4``). A command line that
cannot be read is a usage error (exit 2), under ``--json`` an envelope like every other result.
Shell completion comes from typer: ``patchtool --install-completion`` / ``--show-completion``.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from patchtool import __version__
from patchtool.cli import runner, usage
from patchtool.cli.runner import (
    AllowLocalInOption,
    AllowLocalOption,
    CacheDirOption,
    CommandSet,
    JsonOption,
    RootOption,
)

HELP = "Carry a curated series of downstream patches on a pinned upstream."
_SETTINGS = {"help_option_names": usage.HELP_OPTIONS}


def _print_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"patchtool {__version__}\nconfinement: {_confinement()}\n")
        raise typer.Exit()


def _confinement() -> str:
    """Whether commands hold themselves to their writes with Landlock here, said once, here."""
    from patchtool import confine

    if not runner.landlock_wanted():
        return f"off ({confine.OPT_OUT}=0)"
    found = confine.support()
    return found.describe() if found.usable else f"none, Landlock {found.describe()}"


def _globals(
    global_json: JsonOption = False,
    global_root: RootOption = None,
    global_cache_dir: CacheDirOption = None,
    global_allow_local: AllowLocalOption = False,
    global_allow_local_in: AllowLocalInOption = None,
) -> None:
    runner.current().take(global_json, global_root, global_cache_dir, global_allow_local, global_allow_local_in)


def _top(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print patchtool's version and exit."),
    ] = False,
    global_json: JsonOption = False,
    global_root: RootOption = None,
    global_cache_dir: CacheDirOption = None,
    global_allow_local: AllowLocalOption = False,
    global_allow_local_in: AllowLocalInOption = None,
) -> None:
    _globals(global_json, global_root, global_cache_dir, global_allow_local, global_allow_local_in)


# Which module holds each command, so that a command line imports only the module of the command it
# names (and --version none); tests/test_cli.py checks this against the modules.
COMMANDS = {
    "apply": "core",
    "check": "core",
    "recover": "core",
    "status": "core",
    "rebase": "core",
    "scan": "core",
    "checkout": "edit",
    "export": "edit",
    "refresh": "edit",
    "import": "edit",
    "new": "edit",
    "drop": "edit",
    "show": "entry",
    "edit": "entry",
    "build": "wheel",
    "provenance": "wheel",
    "cache": "upkeep",
    "init": "init",
}
GROUPS = ("retread", "pin")  # command groups, each the module of its name


def _made(module: str, name: str) -> Callable[[], Any]:
    def make() -> Any:
        commands: CommandSet = importlib.import_module(f"patchtool.cli.{module}").commands
        return commands.build(name)

    return make


def build() -> usage.Group:
    """The click command typer makes of the app, ready to parse a command line; each command is
    made when the command line names it."""
    app = typer.Typer(
        name="patchtool", help=HELP, cls=usage.Group, context_settings=_SETTINGS, rich_markup_mode="markdown"
    )
    app.callback()(_top)
    command = typer.main.get_command(app)
    assert isinstance(command, usage.Group)
    command.lazy.update({name: _made(module, name) for name, module in COMMANDS.items()})
    command.lazy.update({name: functools.partial(_group, name) for name in GROUPS})
    return command


def _group(name: str) -> usage.Group:
    """The command group ``name`` (``patchtool.cli.<name>``), each of its commands made when named."""
    module = importlib.import_module(f"patchtool.cli.{name}")
    app = typer.Typer(
        name=name,
        help=module.HELP,
        cls=usage.Group,
        add_completion=False,
        context_settings=_SETTINGS,
        rich_markup_mode="markdown",
    )
    app.callback()(_globals)
    group = typer.main.get_command(app)
    assert isinstance(group, usage.Group)
    group.lazy.update({sub: _made(name, sub) for sub in module.commands.names()})
    return group


def main(argv: list[str] | None = None) -> int:
    """Run a command line: the process's own (``argv`` None), which confines the process to the
    command's writes, or ``argv`` in a caller's process, which is left as it is."""
    words = sys.argv[1:] if argv is None else list(argv)
    invocation = runner.begin(confine=argv is None)
    command = build()
    try:
        with invocation.held:
            code = command.main(args=words, prog_name="patchtool", standalone_mode=False)
    except typer.TyperException as exc:  # click's errors, typer's public base of them
        return usage.report(exc, as_json="--json" in words)
    except SystemExit as exc:  # shell completion ends the process this way
        return exc.code if isinstance(exc.code, int) else 0
    return code if isinstance(code, int) else 0
