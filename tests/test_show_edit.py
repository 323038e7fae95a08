"""`patchtool show ID` (one patch, all of it) and `patchtool edit ID` (its metadata, validated,
comments kept), and the shell completion of ids, pins and rebase targets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import in_process
from conftest import Demo
from helpers import snapshot

HEAD = 'schema = 1\npin = "demo-1.0"\n'
ENTRY = """
# the greeting patch: keep this comment
[[patch]]
id = "greet"
file = "patches/0001-greet.patch"
kind = "performance"  # measured on H200
owner = "team"
why = "Shorter greeting."
applies_to = ">=1.0"
drop_when = "upstream fixes it"
upstream = { status = "pending" }

[[patch.evidence]]
metric = "throughput"
change = "+12%"
conditions = { hardware = "H200" }
source = "bench/greet.md"

[[patch.knobs]]
name = "DEMO_GREET"
type = "env"
relation = "adds"
recommended = { all = "1" }

[[patch.assumptions]]
id = "greet-there"
file = "python/demo/core.py"
regex = 'def greet'
count = 1
why = "the patch edits greet()"

[[patch.assumptions]]
id = "wave-there"
file = "python/demo/wave.py"
why = "wave() needs the same change"

[[patch.gpu_verification]]
run = "python -m pytest tests/gpu/test_greet.py"
expect = "the greeting is short"
"""


@pytest.fixture
def greet(one_patch: Demo) -> Demo:
    """The one patch with every kind of metadata: evidence, a knob, an assumption that holds and
    one that does not, a GPU check with no results yet, and comments."""
    (one_patch.root / "patchset.toml").write_text(HEAD + ENTRY)
    return one_patch


def envelope(res: subprocess.CompletedProcess[str]) -> dict[str, object]:
    data = json.loads(res.stdout)
    assert isinstance(data, dict)
    return data


SHOWN = """\
patch greet (patches/0001-greet.patch), 1 of 1 in the series
subject:    core: say hi
author:     Test Author <author@example.org>
kind:       performance
owner:      team
upstream:   pending
applies_to: >=1.0
drop_when:  upstream fixes it
why:
  Shorter greeting.
at pin demo-1.0: applied, +1/-1 in 1 file(s)
  python/demo/core.py
evidence: 1
  throughput: +12%, hardware H200 (bench/greet.md)
knobs: 1
  adds env DEMO_GREET: recommended all 1
assumptions at demo-1.0: 2
  holds greet-there: python/demo/core.py has exactly 1 match(es) of /def greet/ (found 1 match(es)); \
the patch edits greet()
  fails wave-there: python/demo/wave.py exists (found file absent); wave() needs the same change
GPU verification: 1
  python -m pytest tests/gpu/test_greet.py
    expect: the greeting is short
    no evidence: no results file in gpu-results/ has a check this runs
"""
DIFF = """\
diff --git a/python/demo/core.py b/python/demo/core.py
index f0576b739dc69c0115b1d49e829cd5b886896633..cbf9188413b4b975f90760f77a0977e7231532c6 100644
--- a/python/demo/core.py
+++ b/python/demo/core.py
@@ -2,7 +2,7 @@
 
 
 def greet(name):
-    greeting = "hello"
+    greeting = "hi"
     return f"{greeting} {name}"
 
 
"""
EVIDENCE = [{"metric": "throughput", "change": "+12%", "conditions": {"hardware": "H200"}, "source": "bench/greet.md"}]


def test_show_says_everything_about_one_patch(greet: Demo) -> None:
    res = greet.run("show", "greet")
    assert (res.returncode, res.stdout, res.stderr) == (0, SHOWN, "")
    res = greet.run("show", "greet", "--diff")
    assert (res.returncode, res.stdout, res.stderr) == (0, SHOWN + "\n" + DIFF, "")


def test_show_json_has_all_of_it(greet: Demo) -> None:
    data = envelope(greet.run("show", "greet", "--json", "--diff"))["data"]
    assert data == {
        "id": "greet",
        "file": "patches/0001-greet.patch",
        "kind": "performance",
        "owner": "team",
        "why": "Shorter greeting.",
        "upstream": {"status": "pending"},
        "applies_to": ">=1.0",
        "drop_when": "upstream fixes it",
        "evidence": EVIDENCE,
        "knobs": [
            {"name": "DEMO_GREET", "type": "env", "relation": "adds", "recommended": {"all": "1"}},
        ],
        "assumptions": [
            {
                "id": "greet-there",
                "file": "python/demo/core.py",
                "regex": "def greet",
                "count": 1,
                "why": "the patch edits greet()",
                "holds": True,
                "found": "1 match(es)",
            },
            {
                "id": "wave-there",
                "file": "python/demo/wave.py",
                "why": "wave() needs the same change",
                "holds": False,
                "found": "file absent",
            },
        ],
        "gpu_verification": [
            {"run": "python -m pytest tests/gpu/test_greet.py", "expect": "the greeting is short", "evidence": []}
        ],
        "overrides": [],
        "drop_if": [],
        "pin": "demo-1.0",
        "position": 1,
        "subject": "core: say hi",
        "author": "Test Author <author@example.org>",
        "applies": "applied",
        "files": ["python/demo/core.py"],
        "added": 1,
        "removed": 1,
        "diff": DIFF,
    }
    assert envelope(greet.run("show", "greet", "--json"))["data"]["diff"] is None  # type: ignore[index]


def test_show_names_what_is_not_there(greet: Demo) -> None:
    res = greet.run("show", "nope")
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == "error: no patch 'nope' in the series (hint: known: greet)\n"
    assert greet.run("drop", "greet", "--reason", "upstream has it").returncode == 0
    res = greet.run("show", "greet")
    assert res.returncode == 2
    assert res.stderr == (
        "error: patch 'greet' was dropped at demo-1.0: upstream has it (hint: its entry is under [[dropped]] "
        "in patchset.toml, its file patches/dropped/0001-greet.patch)\n"
    )


def test_status_json_has_why_owner_and_evidence(greet: Demo) -> None:
    row = envelope(greet.run("status", "--json"))["data"]["patches"][0]  # type: ignore[index]
    assert (row["why"], row["owner"], row["evidence"]) == ("Shorter greeting.", "team", EVIDENCE)


ESC = "\x1b[31mRED\x1b[0m\rOVER"  # recolours, then goes back to overwrite the start of the line
SHOWN_ESC = "\\x1b[31mRED\\x1b[0m\\rOVER"


def test_a_strangers_text_is_shown_not_obeyed(greet: Demo) -> None:
    """Found by an attack: show printed a manifest's ESC and CR raw, so a stranger's manifest could
    recolour and overwrite what the terminal shows. Every string is escaped as error messages
    escape a value (rich markup in it is text too); status and check print them the same way."""
    toml = ESC.replace("\x1b", "\\u001b").replace("\r", "\\r")
    (greet.root / "patchset.toml").write_text(
        HEAD
        + ENTRY.replace('"Shorter greeting."', f'"[red]Shorter[/red] greeting.{toml}"')
        .replace('{ status = "pending" }', f'{{ status = "inappropriate", reason = "local{toml}" }}')
        .replace('"bench/greet.md"', f'"bench/greet.md{toml}"')
        .replace('"wave() needs the same change"', f'"wave(){toml}"')
        .replace('"the greeting is short"', f'"short{toml}"')
    )
    res = greet.run("show", "greet")
    assert (res.returncode, res.stdout, res.stderr) == (
        0,
        SHOWN.replace("Shorter greeting.", f"[red]Shorter[/red] greeting.{SHOWN_ESC}")
        .replace("upstream:   pending", f"upstream:   inappropriate local{SHOWN_ESC}")
        .replace("(bench/greet.md)", f"(bench/greet.md{SHOWN_ESC})")
        .replace("; wave() needs the same change", f"; wave(){SHOWN_ESC}")
        .replace("expect: the greeting is short", f"expect: short{SHOWN_ESC}"),
        "",
    )
    res = greet.run("status", "--long")
    assert res.returncode == 0
    assert f"upstream: inappropriate local{SHOWN_ESC}  +1/-1" in res.stdout
    assert f"         expect: short{SHOWN_ESC}\n" in res.stdout
    res = greet.run("status")
    assert res.returncode == 0
    assert f"local{SHOWN_ESC}\n" in res.stdout  # the table wraps the upstream column at its space
    res = greet.run("check")
    assert res.returncode == 1
    assert f"(hint: the patch relies on it: wave(){SHOWN_ESC})\n" in res.stdout
    for out in (greet.run(*args) for args in (["show", "greet"], ["status"], ["status", "--long"], ["check"])):
        assert "\x1b" not in out.stdout + out.stderr and "\r" not in out.stdout + out.stderr


def test_a_one_line_field_with_a_control_character_is_refused_where_it_is_read(greet: Demo) -> None:
    toml = ESC.replace("\x1b", "\\u001b").replace("\r", "\\r")
    (greet.root / "patchset.toml").write_text(HEAD + ENTRY.replace('"team"', f'"team{toml}"'))
    res = greet.run("show", "greet")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == (
        f"error: patchset.toml:9: patch greet: patch[0].owner: 'team{SHOWN_ESC}' contains a control character "
        "('\\x1b') (hint: write it on one line, without control characters)\n"
    )


# -- edit ---------------------------------------------------------------------------------------


def test_edit_by_option_keeps_comments_and_layout(greet: Demo) -> None:
    res = greet.run(
        "edit",
        "greet",
        "--why",
        "A shorter greeting.",
        "--kind",
        "correctness",
        "--upstream-status",
        "submitted",
        "--upstream-url",
        "https://github.com/demo/demo/pull/7",
    )
    assert (res.returncode, res.stdout, res.stderr) == (
        0,
        "greet: changed kind, why, upstream.status, upstream.url in patchset.toml\n",
        "",
    )
    expected = (
        ENTRY.replace('"performance"', '"correctness"')
        .replace('"Shorter greeting."', '"A shorter greeting."')
        .replace('{ status = "pending" }', '{ status = "submitted", url = "https://github.com/demo/demo/pull/7" }')
    )
    assert (greet.root / "patchset.toml").read_text() == HEAD + expected
    shown = envelope(greet.run("show", "greet", "--json"))["data"]
    assert shown["upstream"] == {"status": "submitted", "url": "https://github.com/demo/demo/pull/7"}  # type: ignore[index]


UPSTREAM_FORMS = {
    "inline": (
        'upstream = { status = "pending" }  # trailing\n',
        'upstream = { status = "submitted", url = "https://github.com/demo/demo/pull/7" }  # trailing\n',
    ),
    "dotted": (
        'upstream.status = "pending"  # dotted\n',
        'upstream.status = "submitted"  # dotted\nupstream.url = "https://github.com/demo/demo/pull/7"\n',
    ),
}
SUB_TABLE = """
# where upstream stands
[patch.upstream]
# not sent yet
status = "pending"  # the status's
# trailing
"""


@pytest.mark.parametrize("form", [*UPSTREAM_FORMS, "sub-table"])
def test_edit_keeps_the_upstream_table_as_it_was_written(greet: Demo, form: str) -> None:
    """Found by an attack: an upstream written as a [patch.upstream] sub-table or with dotted keys
    was rewritten as an inline table, its comments lost. It is edited where and as it is written."""
    entry = ENTRY.replace('upstream = { status = "pending" }\n', "")
    if form == "sub-table":
        before = entry.replace("\n[[patch.evidence]]", SUB_TABLE + "\n[[patch.evidence]]", 1)
        after = before.replace("# trailing\n", '# trailing\nurl = "https://github.com/demo/demo/pull/7"\n').replace(
            'status = "pending"', 'status = "submitted"'
        )
    else:
        old, new = UPSTREAM_FORMS[form]
        before, after = (
            entry.replace('drop_when = "upstream fixes it"\n', f'drop_when = "upstream fixes it"\n{u}')
            for u in (old, new)
        )
    (greet.root / "patchset.toml").write_text(HEAD + before)
    res = greet.run(
        "edit", "greet", "--upstream-status", "submitted", "--upstream-url", "https://github.com/demo/demo/pull/7"
    )
    assert (res.returncode, res.stdout, res.stderr) == (
        0,
        "greet: changed upstream.status, upstream.url in patchset.toml\n",
        "",
    )
    assert (greet.root / "patchset.toml").read_text() == HEAD + after


def test_edit_that_changes_nothing_writes_nothing(greet: Demo) -> None:
    before = snapshot(greet.root)
    res = greet.run("edit", "greet", "--owner", "team", "--json")
    assert envelope(res)["data"] == {"id": "greet", "changed": [], "written": []}
    res = greet.run("edit", "greet", "--owner", "team")
    assert (res.returncode, res.stdout) == (0, "greet: nothing changed; patchset.toml was left as it was\n")
    assert snapshot(greet.root) == before


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ("--kind", "bogus"),
            "patchset.toml: patch greet: patch[0].kind: unknown value 'bogus'; expected one of correctness, "
            "performance, reliability, operations; nothing was written",
        ),
        (
            ("--applies-to", "1.0"),
            "patchset.toml: patch greet: patch[0].applies_to: '1.0' is not a PEP 440 version specifier "
            "(e.g. '>=0.5.23,<0.5.24'); nothing was written",
        ),
        (
            ("--upstream-status", "merged"),
            "patchset.toml: patch greet: patch[0].upstream.version: status 'merged' needs 'version'; "
            'nothing was written (hint: e.g. status = "merged", version = "...")',
        ),
        (
            ("--upstream-status", "upstreamed"),
            "--upstream-status upstreamed: not an upstream status (hint: one of pending, submitted, backport, "
            "inappropriate, denied, merged)",
        ),
        (
            ("--upstream-url", "file:///etc/passwd"),
            "--upstream-url file:///etc/passwd: an upstream url is a link people follow: only an https:// or "
            "http:// URL with a host is accepted",
        ),
        (
            ("--upstream-url", "/etc/passwd"),
            "--upstream-url /etc/passwd: an upstream url is a link people follow: only an https:// or "
            "http:// URL with a host is accepted",
        ),
        (
            ("--owner", "evil\x1b[31mRED\x1b[0m\rOVER"),
            "patchset.toml: patch greet: patch[0].owner: 'evil\\x1b[31mRED\\x1b[0m\\rOVER' contains a control "
            "character ('\\x1b'); nothing was written (hint: write it on one line, without control characters)",
        ),
        (
            ("--drop-when", "upstream fixes it\nand more"),
            "patchset.toml: patch greet: patch[0].drop_when: 'upstream fixes it\\nand more' contains a control "
            "character ('\\n'); nothing was written (hint: write it on one line, without control characters)",
        ),
        (
            ("--applies-to", "===1.0\x1b[2J"),
            "patchset.toml: patch greet: patch[0].applies_to: '===1.0\\x1b[2J' contains a control character "
            "('\\x1b'); nothing was written (hint: write it on one line, without control characters)",
        ),
        (
            ("--applies-to", "<1.0"),
            "patchset.toml: patch greet: patch[0].applies_to: pin demo-1.0 is version 1.0, outside '<1.0'; nothing "
            "was written (hint: applies_to must admit the pin's version: rebase to a version inside it first, or "
            "widen it)",
        ),
        (("--owner", "x"), None),
    ],
)
def test_an_invalid_edit_changes_nothing(greet: Demo, args: tuple[str, ...], error: str | None) -> None:
    before = snapshot(greet.root)
    res = greet.run("edit", "nope" if error is None else "greet", *args)
    error = error or "no patch 'nope' in the series (hint: known: greet)"
    assert (res.returncode, res.stdout, res.stderr) == (2, "", f"error: {error}\n")
    assert snapshot(greet.root) == before


def test_editing_a_skeleton_default_chooses_it(one_patch: Demo) -> None:
    """The skeleton's `# TODO: the skeleton's default` comment goes when edit sets the value: it was chosen."""
    text = one_patch.entry("greet", "0001-greet.patch").replace(
        'kind = "correctness"\n', 'kind = "correctness"  # TODO: the skeleton\'s default; choose\n'
    )
    one_patch.write_manifest(text)
    assert one_patch.run("edit", "greet", "--kind", "correctness").returncode == 0
    assert 'kind = "correctness"\n' in (one_patch.root / "patchset.toml").read_text()
    assert envelope(one_patch.run("check", "--json"))["data"]["warnings"] == []


def editor(tmp_path: Path, program: str) -> dict[str, str]:
    """$EDITOR as a small Python program that gets the file's path as sys.argv[1]."""
    script = tmp_path / "editor.py"
    script.write_text(
        "import sys\nfrom pathlib import Path\npath = Path(sys.argv[1])\ntext = path.read_text()\n" + program
    )
    return {"EDITOR": f"{sys.executable} {script}", "VISUAL": ""}


def test_edit_in_the_editor(greet: Demo, tmp_path: Path) -> None:
    seen = tmp_path / "seen.toml"
    env = editor(
        tmp_path,
        f"Path({str(seen)!r}).write_text(text)\n"
        "path.write_text(text.replace('owner = \"team\"', 'owner = \"infra\"  # since May'))\n",
    )
    res = greet.run("edit", "greet", env=env)
    assert (res.returncode, res.stdout, res.stderr) == (0, "greet: changed owner in patchset.toml\n", "")
    shown = seen.read_text()
    assert shown.startswith("# patchtool edit greet: this patch's entry in patchset.toml.")
    assert shown.endswith(ENTRY[ENTRY.index("[[patch]]") :])
    assert (greet.root / "patchset.toml").read_text() == HEAD + ENTRY.replace(
        'owner = "team"', 'owner = "infra"  # since May'
    )


@pytest.mark.parametrize(
    ("program", "code", "error"),
    [
        ("", 0, None),  # unchanged: nothing written
        (
            "path.write_text(text.replace('performance', 'speed'))\n",
            2,
            "patchset.toml: patch greet: patch[0].kind: unknown value 'speed'; expected one of correctness, "
            "performance, reliability, operations; nothing was written",
        ),
        (
            "path.write_text(text.replace('id = \"greet\"', 'id = \"hello\"'))\n",
            2,
            'patchset.toml: patch greet: edit changes metadata, not the patch\'s id; nothing was written (hint: keep id = "greet")',
        ),
        (
            "path.write_text(text.replace('[[patch]]', '[[patches]]'))\n",
            2,
            "the edited entry must hold one [[patch]] table, the entry of greet; nothing was written",
        ),
        (
            "path.write_text('x = [')\n",
            2,
            "the edited entry is not valid TOML: Unexpected end of file at line 1 col 0; nothing was written "
            "(hint: run `patchtool edit greet` again)",
        ),
        ("sys.exit(3)\n", 2, "the editor ({editor}) exited with 3; nothing was written"),
        (  # found by an attack: saved, then the editor failed (vim after an error); the text was deleted
            "path.write_text(text.replace('owner = \"team\"', 'owner = \"infra\"'))\nsys.exit(1)\n",
            2,
            "the editor ({editor}) exited with 1; nothing was written",
        ),
        (
            "path.write_text(text.replace('\">=1.0\"', '\"<1.0\"'))\n",
            2,
            "patchset.toml: patch greet: patch[0].applies_to: pin demo-1.0 is version 1.0, outside '<1.0'; nothing "
            "was written (hint: applies_to must admit the pin's version: rebase to a version inside it first, or "
            "widen it)",
        ),
    ],
)
def test_an_editor_edit_that_is_not_valid_changes_nothing(
    greet: Demo, tmp_path: Path, program: str, code: int, error: str | None
) -> None:
    """Without a terminal to ask at, what was typed stays in a file the error names (an editor that
    fails on a text left unchanged is the user giving up: nothing is kept)."""
    before = snapshot(greet.root)
    env = editor(tmp_path, program + "Path(sys.argv[1] + '.saved').write_text(path.read_text())\n")
    res = greet.run("edit", "greet", env=env)
    edits = greet.cache / "edits"
    if error is None:
        assert (res.returncode, res.stdout) == (0, "greet: nothing changed; patchset.toml was left as it was\n")
    elif program.startswith("sys.exit"):
        assert (res.returncode, res.stdout, res.stderr) == (code, "", f"error: {error.format(editor=env['EDITOR'])}\n")
    else:
        (kept,) = edits.glob("*.toml")
        note = f"what you typed is kept in {kept} (hint: fix it there, then `patchtool edit greet --from-file {kept}`)"
        error = error.format(editor=env["EDITOR"])
        assert (res.returncode, res.stdout, res.stderr) == (code, "", f"error: {error}\nerror: {note}\n")
        if "sys.exit" not in program:
            assert kept.read_text() == Path(f"{kept}.saved").read_text()  # as the editor left it
        else:
            assert 'owner = "infra"' in kept.read_text()
    assert snapshot(greet.root) == before
    if error is None or program.startswith("sys.exit"):
        assert not list(edits.glob("*.toml"))  # taken, or given up: nothing kept


def test_a_kept_edit_is_taken_with_from_file(greet: Demo, tmp_path: Path) -> None:
    env = editor(tmp_path, 'path.write_text(text.replace(\'owner = "team"\', \'owner = "infra"\\nkind = "speed"\'))\n')
    res = greet.run("edit", "greet", env=env)
    assert res.returncode == 2 and "what you typed is kept in " in res.stderr, res.stderr
    (kept,) = (greet.cache / "edits").iterdir()
    kept.write_text(kept.read_text().replace('kind = "speed"\n', ""))
    res = greet.run("edit", "greet", "--from-file", str(kept))
    assert (res.returncode, res.stdout, res.stderr) == (0, "greet: changed owner in patchset.toml\n", "")
    assert 'owner = "infra"' in (greet.root / "patchset.toml").read_text()
    res = greet.run("edit", "greet", "--from-file", str(kept), "--owner", "x")
    assert res.returncode == 2 and "--from-file gives the whole entry" in res.stderr


# -- completion -----------------------------------------------------------------------------


def complete(cwd: Path, words: str, env: dict[str, str]) -> list[str]:
    """What bash would be offered for ``words`` (the last one being completed): bash runs the
    command with no arguments and the words in the environment (in process here; `test_cli`'s
    `test_shell_completion` runs the console entry itself)."""
    env = {
        **env,
        "_PATCHTOOL_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    }
    res = in_process([], cwd=cwd, env=env)
    assert (res.returncode, res.stderr) == (0, ""), res.stderr
    return res.stdout.split()


def test_completion_of_ids_pins_and_targets(greet: Demo, tmp_path: Path) -> None:
    env = greet.environment()
    (greet.root / "upstream-pins" / "demo-2.0.toml").write_text(
        (greet.root / "upstream-pins" / "demo-1.0.toml")
        .read_text()
        .replace('"1.0"', '"2.0"')
        .replace("demo-1.0-", "demo-2.0-")
    )
    assert greet.run("status").returncode == 0  # the cache holds demo 1.0 now
    before = snapshot(greet.root, greet.cache)
    assert complete(greet.root, "patchtool show ", env) == ["greet"]
    assert complete(greet.root, "patchtool drop g", env) == ["greet"]
    assert complete(greet.root, "patchtool edit x", env) == []
    assert complete(greet.root, "patchtool status --pin ", env) == ["demo-1.0", "demo-2.0"]
    assert complete(greet.root, "patchtool pin remove demo-2", env) == ["demo-2.0"]
    assert complete(greet.root, "patchtool rebase --to ", env) == ["latest", "1.0", "2.0"]
    assert complete(tmp_path, f"patchtool --root {greet.root} show ", env) == ["greet"]
    assert complete(tmp_path, "patchtool show ", env) == []  # no repository here: nothing, quietly
    assert snapshot(greet.root, greet.cache) == before


def test_the_editor_runs_inside_the_confined_command(greet: Demo, tmp_path: Path) -> None:
    """`python -m patchtool` confines itself (Landlock) before the editor starts: the entry file lies
    in the command's own temporary directory, where the editor may write it."""
    env = editor(tmp_path, "path.write_text(text.replace('owner = \"team\"', 'owner = \"infra\"'))\n")
    res = greet.spawn("edit", "greet", env=env)
    assert (res.returncode, res.stdout, res.stderr) == (0, "greet: changed owner in patchset.toml\n", "")
    assert 'owner = "infra"\n' in (greet.root / "patchset.toml").read_text()
