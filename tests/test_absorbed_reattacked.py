"""Absorption judged on inputs a second helper wrote to attack issue 31's claims, after the
fixes for the first attack (``test_absorbed_attacked.py``); each case failed on main at 2f81339.

- F1: a line the patch removes that upstream deleted but wrote again in another form (``opts =
  {"verify": False}``) merged to nothing and was dropped. F6: one upstream moved, where the file
  has the same line elsewhere, was dropped as applying in reverse. A removed line counts as gone
  only when the target has it no more often than the patched file, and no line upstream wrote
  holds all its words.
- F5: a file the patch adds empty was never judged: with a patch-id match in history the patch
  was dropped, losing the file. It is judged now as the whole file.
- F7: a binary change "applied in reverse with fuzz 0", nothing compared.
- F2: singledispatch's ``@f.register def _`` implementations were "defined twice". F4: a def of
  a name the target now imports was applied silently. F3: a file too deep for Python's parser
  was an internal error (exit 70).

Fixtures are real: an upstream git repository with tags v1.0 and v1.1, a project whose pin names
it by a ``[git]`` table, a series made of real commits on v1.0 exported with ``format-patch``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from cli_run import in_process

_ENV = {
    "GIT_AUTHOR_NAME": "U",
    "GIT_AUTHOR_EMAIL": "u@x",
    "GIT_COMMITTER_NAME": "U",
    "GIT_COMMITTER_EMAIL": "u@x",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


_FORMAT_PATCH = ("git", "format-patch", "-1", "HEAD", "--stdout", "--zero-commit", "--full-index")
_FORMAT_PATCH += ("--no-signature", "--no-stat")


def _git(cwd: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, env={**os.environ, **_ENV}, check=True)
    return r.stdout.decode().strip()


def _write(root: Path, files: dict[str, str | bytes | None]) -> None:
    for name, data in files.items():
        p = root / name
        if data is None:
            p.unlink()
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())


class Project:
    """An upstream with v1.0 and v1.1 and a project with a series on v1.0."""

    def __init__(self, tmp: Path, v10: dict, commits: list[tuple[str, dict]], series: list[tuple[str, str, dict]]):
        self.tmp = tmp
        up = tmp / "upstream"
        up.mkdir()
        _git(up, "init", "-q", "-b", "main")
        _write(up, {"demo/__init__.py": "", **v10})
        _git(up, "add", "-A")
        _git(up, "commit", "-q", "-m", "1.0")
        _git(up, "tag", "v1.0")
        self.shas = []
        for msg, files in commits:
            _write(up, files)
            _git(up, "add", "-A")
            _git(up, "commit", "-q", "-m", msg)
            self.shas.append(_git(up, "rev-parse", "HEAD"))
        _git(up, "tag", "v1.1")
        work = tmp / "work"
        _git(tmp, "clone", "-q", str(up), str(work))
        _git(work, "checkout", "-q", "-b", "series", "v1.0")
        self.root = tmp / "project"
        (self.root / "patches").mkdir(parents=True)
        (self.root / "upstream-pins").mkdir()
        entries = []
        for n, (pid, msg, files) in enumerate(series, 1):
            _write(work, files)
            _git(work, "add", "-A")
            _git(work, "commit", "-q", "-m", msg.format(*self.shas))
            raw = subprocess.run(
                [*_FORMAT_PATCH],
                cwd=work,
                capture_output=True,
                check=True,
                env={**os.environ, **_ENV},
            ).stdout
            raw = re.sub(rb"^Date: .*\n", b"", raw, count=1, flags=re.MULTILINE)
            name = f"{n:04d}-{pid}.patch"
            (self.root / "patches" / name).write_bytes(raw)
            entries.append(
                f'[[patch]]\nid = "{pid}"\nfile = "patches/{name}"\nkind = "correctness"\nowner = "team"\n'
                f'why = "because"\napplies_to = ">=1.0"\ndrop_when = "upstream fixes it"\n'
                f'upstream = {{ status = "pending" }}\n'
            )
        commit = _git(up, "rev-parse", "v1.0^{commit}")
        (self.root / "upstream-pins" / "demo-1.0.toml").write_text(
            f'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n[git]\nurl = "{up}"\n'
            f'tag = "v1.0"\ncommit = "{commit}"\n'
        )
        (self.root / "patchset.toml").write_text('schema = 1\npin = "demo-1.0"\n\n' + "\n".join(entries))
        _git(self.root, "init", "-q")
        _git(self.root, "add", "-A")
        _git(self.root, "commit", "-q", "-m", "project")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            **_ENV,
            "PATCHTOOL_ALLOW_LOCAL_URLS": "1",
            "PATCHTOOL_CACHE_DIR": str(self.tmp / "cache"),
        }
        return in_process([*args, "--root", str(self.root)], env=env)

    def dry(self, *extra: str) -> dict[str, dict]:
        r = self.run("rebase", "--to", "1.1", "--dry-run", "--json", *extra)
        data = json.loads(r.stdout)["data"] if r.stdout.startswith("{") else None
        assert data is not None, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
        return {p["id"]: p for p in data["patches"]}


# --- F1 and F6: a line the patch removes that upstream only moved or re-expressed -----------------

CONNECT = """def connect(host):
    opts = {}
    opts["timeout"] = 10
    opts["verify"] = False
    opts["retries"] = 3
    opts["pool"] = 4
    opts["block"] = True
    opts["proxy"] = None
    return open_conn(host, **opts)
"""


def test_removed_line_upstream_rewrote_in_another_form_is_not_dropped(tmp_path: Path) -> None:
    fixed = CONNECT.replace('    opts["verify"] = False\n', "")
    p = Project(
        tmp_path,
        {"demo/c.py": CONNECT},
        [("refactor", {"demo/c.py": fixed.replace("    opts = {}\n", '    opts = {"verify": False}\n')})],
        [("verify", "Security: verify certificates", {"demo/c.py": fixed})],
    )
    # the target still turns verification off: the fix is not upstream, so it must not drop silently
    assert p.dry()["verify"]["outcome"] != "already upstream"


DUP = """def f():
    setup()
    unsafe()
    a = 1
    b = 2
    c = 3
    d = 4
    return a + b + c + d


def g():
    setup()
    unsafe()
    return 2
"""


def test_removed_line_upstream_moved_is_not_dropped_when_the_file_has_it_twice(tmp_path: Path) -> None:
    p = Project(
        tmp_path,
        {"demo/d.py": DUP},
        [
            (
                "move",
                {
                    "demo/d.py": DUP.replace("    unsafe()\n    a = 1\n", "    a = 1\n").replace(
                        "    d = 4\n", "    d = 4\n    unsafe()\n"
                    )
                },
            )
        ],
        [("safe", "No unsafe() in f", {"demo/d.py": DUP.replace("    unsafe()\n    a = 1\n", "    a = 1\n")})],
    )
    # f() still calls unsafe() in the target (four lines lower): the patch is not upstream
    assert p.dry()["safe"]["outcome"] != "already upstream"


def test_control_removed_line_upstream_moved_once_stops(tmp_path: Path) -> None:
    """The previous attack's fix holds where the line is in the file once."""
    once = DUP.split("\n\n\ndef g", maxsplit=1)[0] + "\n"
    p = Project(
        tmp_path,
        {"demo/d.py": once},
        [
            (
                "move",
                {
                    "demo/d.py": once.replace("    unsafe()\n    a = 1\n", "    a = 1\n").replace(
                        "    d = 4\n", "    d = 4\n    unsafe()\n"
                    )
                },
            )
        ],
        [("safe", "No unsafe() in f", {"demo/d.py": once.replace("    unsafe()\n    a = 1\n", "    a = 1\n")})],
    )
    assert p.dry()["safe"]["outcome"] == "conflict"


# --- F5: a file the content check cannot see (an empty file) ---------------------------------------

PARSE = """def parse(s):
    s = s.strip()
    return int(s)


def render(x):
    return str(x)
"""
GUARDED = PARSE.replace("    s = s.strip()\n", "    s = s.strip()\n    if not s:\n        raise ValueError(s)\n")


def _empty_marker(tmp: Path, message: str) -> Project:
    return Project(
        tmp,
        {"demo/m.py": PARSE},
        [
            ("Reject empty input", {"demo/m.py": GUARDED}),
            ("render repr", {"demo/m.py": GUARDED.replace("str(x)", "repr(x)")}),
        ],
        [("typed", message, {"demo/py.typed": "", "demo/m.py": GUARDED})],
    )


@pytest.mark.parametrize("message", ["Reject empty input\n\n(cherry picked from commit {0})", "Reject empty input"])
def test_empty_file_the_patch_adds_keeps_it_from_dropping(tmp_path: Path, message: str) -> None:
    p = _empty_marker(tmp_path, message)
    step = p.dry("--history")["typed"]
    # upstream has the guard but not demo/py.typed: dropping the patch loses the marker file
    assert step["outcome"] != "already upstream", step


def test_empty_file_the_patch_adds_is_not_content_evidence(tmp_path: Path) -> None:
    p = _empty_marker(tmp_path, "Reject empty input")
    step = p.dry()["typed"]
    assert step["outcome"] == "merged by 3-way merge"  # the guard upstream has, the file it lacks
    # `--skip --merged --all-evidenced` accepts this evidence: it must not be given here
    assert not any(e.startswith("the target has every line it adds") for e in step.get("evidence", [])), step


# --- F7: a binary file: "applies in reverse with fuzz 0" with nothing compared ---------------------

BIN = b"\x00\x01HDR\nalpha\nSECRET=1\nbeta\n\x00\x02tail\n"


def test_binary_change_upstream_lacks_has_no_reverse_evidence(tmp_path: Path) -> None:
    p = Project(
        tmp_path,
        {"demo/data.bin": BIN},
        [("regenerate", {"demo/data.bin": b"\x00\x09NEW\nzzz\n\x00\x07\n"})],
        [("nosecret", "Drop the secret", {"demo/data.bin": BIN.replace(b"SECRET=1\n", b"")})],
    )
    step = p.dry()["nosecret"]
    assert not any("applies in reverse" in e for e in step.get("evidence", [])), step


# --- F2: upstream's own pattern, functools.singledispatch's `_` -----------------------------------

DISPATCH = """import functools


@functools.singledispatch
def fmt(x):
    return str(x)


@fmt.register
def _(x: int):
    return "int"


def other():
    return 1
"""


def test_singledispatch_register_underscore_is_not_a_duplicate(tmp_path: Path) -> None:
    p = Project(
        tmp_path,
        {"demo/f.py": DISPATCH},
        [("float", {"demo/f.py": DISPATCH + '\n\n@fmt.register\ndef _(x: float):\n    return "float"\n'})],
        [
            (
                "list",
                "Format lists",
                {
                    "demo/f.py": DISPATCH.replace(
                        '    return "int"\n',
                        '    return "int"\n\n\n@fmt.register\ndef _(x: list):\n    return "list"\n',
                    )
                },
            )
        ],
    )
    assert p.dry()["list"]["outcome"] in ("applied unchanged", "applied with shifted context", "merged by 3-way merge")


# --- F4: a name the target binds by import, the patch by def ---------------------------------------

MAIN = """import os


def main():
    return helper(1)


def other():
    return 2
"""


def test_def_of_a_name_the_target_imports_is_not_applied_silently(tmp_path: Path) -> None:
    p = Project(
        tmp_path,
        {"demo/m.py": MAIN},
        [
            (
                "helper moves to compat",
                {
                    "demo/compat.py": "def helper(x):\n    return x + 1\n",
                    "demo/m.py": MAIN.replace("import os\n", "import os\n\nfrom demo.compat import helper\n"),
                },
            )
        ],
        [
            (
                "helper",
                "Backport helper",
                {"demo/m.py": MAIN.replace("def other", "def helper(x):\n    return x + 1\n\n\ndef other")},
            )
        ],
    )
    # the result binds `helper` twice in the module (import, then def): the backport is upstream's
    assert p.dry()["helper"]["outcome"] == "conflict"


# --- F3: a file ast cannot parse without recursing too deep ---------------------------------------

BIG = (
    "TABLE = "
    + " + ".join(f"'{i}'" for i in range(6000))
    + "\n\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n"
)


def test_long_expression_file_does_not_crash_the_never_twice_rule(tmp_path: Path) -> None:
    p = Project(
        tmp_path,
        {"demo/t.py": BIG},
        [("b3", {"demo/t.py": BIG.replace("return 2", "return 3")})],
        [
            (
                "c",
                "Add c",
                {
                    "demo/t.py": BIG.replace(
                        "def a():\n    return 1\n", "def a():\n    return 1\n\n\ndef c():\n    return 4\n"
                    )
                },
            )
        ],
    )
    r = p.run("rebase", "--to", "1.1", "--dry-run", "--json")
    assert r.returncode != 70 and "internal error" not in r.stdout + r.stderr, (r.returncode, r.stdout[-500:])
