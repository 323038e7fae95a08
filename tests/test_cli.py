"""The command line itself: usage errors exit 2, options take dash-led values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli_run import in_process, spawned
from conftest import Demo


def patchtool(*args: str) -> subprocess.CompletedProcess[str]:
    return in_process(args)


def test_no_command_prints_usage_and_exits_2() -> None:
    for args in ((), ("retread",)):
        res = patchtool(*args)
        assert res.returncode == 2 and "usage: patchtool" in res.stderr and "COMMAND" in res.stderr


def test_unknown_option_and_missing_value_are_usage_errors() -> None:
    res = patchtool("rebase", "--nope")
    assert res.returncode == 2 and "No such option: --nope" in res.stderr
    res = patchtool("rebase", "--to")
    assert res.returncode == 2 and "Option '--to' requires an argument." in res.stderr


def test_version() -> None:
    res = spawned(["--version"])  # end to end: the console entry, as a shell sees it
    assert res.returncode == 0 and res.stdout.startswith("patchtool ")


def test_an_option_value_may_start_with_a_dash(one_patch: Demo) -> None:
    """`--reason --because` is a reason, as click read it; the error is about the missing rebase."""
    res = one_patch.run("rebase", "--skip", "--reason", "--because-upstream-fixed-it")
    assert res.returncode == 2 and "no rebase in progress" in res.stderr
    assert "requires an argument" not in res.stderr


def envelope(res: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in res.stdout + res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def test_global_options_before_or_after_the_command(one_patch: Demo, tmp_path: Path) -> None:
    before, after = one_patch.run("--json", "status"), one_patch.run("status", "--json")
    assert before.returncode == after.returncode == 0, before.stdout + before.stderr
    assert envelope(before) == envelope(after) and envelope(before)["command"] == "status"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache = tmp_path / "another-cache"
    res = in_process(["--root", str(one_patch.root), "--cache-dir", str(cache), "--json", "status"], cwd=elsewhere)
    assert res.returncode == 0, res.stdout + res.stderr
    assert envelope(res)["data"]["patches"][0]["id"] == "greet" and (cache / "upstream.git").is_dir()
    shown = [
        envelope(one_patch.run(*args))
        for args in (("retread", "--json", "list"), ("retread", "list", "--json"), ("--json", "retread", "list"))
    ]
    assert (
        shown[0]["command"] == "retread list" and shown[0]["errors"][0]["message"] == "patchset.toml names no registry"
    )
    assert shown[0] == shown[1] == shown[2]


@pytest.mark.parametrize(
    ("args", "command", "message", "hint"),
    [
        (("--json",), "patchtool", "Missing command.", "see `patchtool --help`; its commands: apply, check, "),
        (
            ("retread", "--json"),
            "retread",
            "Missing command.",
            "see `patchtool retread --help`; its commands: list, show, scan, revisit, add",
        ),
        (("drop", "greet", "--json"), "drop", "Missing option '--reason'.", "see `patchtool drop --help`"),
        (
            ("retread", "show", "--json"),
            "retread show",
            "Missing argument 'ID'.",
            "see `patchtool retread show --help`",
        ),
        (
            ("status", "--json", "--pin"),
            "status",
            "Option '--pin' requires an argument.",
            "see `patchtool status --help`",
        ),
        (
            ("status", "--json", "extra"),
            "status",
            "Got unexpected extra argument(s) (extra)",
            "see `patchtool status --help`",
        ),
    ],
)
def test_every_usage_error_is_an_envelope_under_json(
    one_patch: Demo, args: tuple[str, ...], command: str, message: str, hint: str
) -> None:
    res = one_patch.run(*args)
    data = envelope(res)
    assert res.returncode == 2 and (data["command"], data["status"], data["exit_code"]) == (command, "usage-error", 2)
    assert data["errors"][0]["message"] == message and res.stderr == ""
    assert data["errors"][0]["hint"].startswith(hint)


def test_drop_help_shows_reason_as_required() -> None:
    res = patchtool("drop", "--help")
    assert res.returncode == 0
    options = res.stdout[res.stdout.index("Options") :]
    assert "required" in options[options.index("--reason") : options.index("--rejected")]


def test_shell_completion() -> None:
    """End to end: completion is the console entry reading its environment, and ending the process."""
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "patchtool", "--show-completion", "bash"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 0 and "_PATCHTOOL_COMPLETE=complete_bash" in res.stdout
    assert "complete -o default -F _patchtool_completion patchtool" in res.stdout
    for words, expected in (
        ("patchtool sta", "status"),
        ("patchtool rebase --dr", "--dry-run"),
        ("patchtool retread re", "revisit"),
    ):
        env = {
            **os.environ,
            "_PATCHTOOL_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - 1),
        }
        res = subprocess.run([sys.executable, "-m", "patchtool"], capture_output=True, text=True, env=env, check=False)
        assert res.returncode == 0 and res.stdout.split() == [expected], (words, res.stdout, res.stderr)


def test_what_a_command_imports(one_patch: Demo) -> None:
    """A command loads the workflow it runs and not the others' (each command's at the start would
    cost every command all of them), and rich only for text (the tables are drawn by rich)."""
    probe = (
        "import sys; from patchtool.cli import main; code = main(sys.argv[1:]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'rich', 'jinja2'}), "
        "sorted({'.'.join(m.split('.')[:2]) for m in sys.modules} & {'patchtool.' + p for p in "
        "('series', 'rebase', 'wheel', 'registry', 'sglang')}), file=sys.stderr)"
    )
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(one_patch.cache)}

    def loaded(*args: str) -> str:
        res = subprocess.run(
            [sys.executable, "-c", probe, *args],
            cwd=one_patch.root,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        return res.stderr.strip().splitlines()[-1]

    assert loaded("--version") == "[] []"
    # status reads this fork's GPU evidence through the sglang room, which the CLI wires in
    assert loaded("status", "--json", "--pin", "demo-1.0") == "[] ['patchtool.series', 'patchtool.sglang']"
    assert loaded("status") == "['rich'] ['patchtool.rebase', 'patchtool.series', 'patchtool.sglang']"  # outcome words
    assert loaded("retread", "list", "--json") == "[] ['patchtool.registry']"


def test_the_version_loads_no_library_a_command_needs() -> None:
    """``--version`` imports every command module, and none of them the libraries of the repository,
    the cache and the diffs: those load where a command reaches them (bench/README.md, start-up)."""
    heavy = {"git", "gitdb", "tomlkit", "unidiff", "packaging", "re2", "rich", "jinja2", "urllib.request"}
    probe = (
        "import sys; from patchtool.cli import main; main(['--version']); "
        f"print(sorted(m for m in sys.modules if m in {sorted(heavy)}), file=sys.stderr)"
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert res.returncode == 0 and res.stderr.strip().splitlines()[-1] == "[]", res.stderr


def test_every_declared_command_is_on_the_command_line_once() -> None:
    """Each function a command module declares a command (``exits.command``) is in the app's
    tables, and the tables name each command once."""
    import ast
    import importlib

    from patchtool.cli import app

    declared = set()
    for path in sorted((Path(app.__file__).parent).glob("*.py")):
        module = importlib.import_module(f"patchtool.cli.{path.stem}")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Call) and getattr(d.func, "id", None) == "command" for d in node.decorator_list
            ):
                declared.add(getattr(module, node.name))
    top = [fn for _, fn in app.COMMANDS]
    grouped = [fn for _, _, commands in app.GROUPS for _, fn in commands]
    assert set(top + grouped) == declared and len(top + grouped) == len(declared)
    names = [name for name, _ in app.COMMANDS] + [group for group, _, _ in app.GROUPS]
    assert len(set(names)) == len(names)


def test_every_exit_code_has_an_envelope_status() -> None:
    """A new exit code must not turn its own envelope into an internal error."""
    from patchtool.cli.render import envelope
    from patchtool.errors import ExitCode

    statuses = {json.loads(envelope("x", code, None))["status"] for code in ExitCode}
    assert len(statuses) == len(ExitCode)
