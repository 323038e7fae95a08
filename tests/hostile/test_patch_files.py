"""Hostile patch files, and hostile files where patchtool reads the repository.

Every case is refused with a message that names the file, the line where there is one, and what
to do; nothing on disk changes, inside the repository or outside it; nothing hangs and nothing
ends in a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import Demo
from helpers import HANG_GUARD_S, snapshot
from patchtool.diff.patchfile import PatchFile
from patchtool.errors import InvalidInput
from patchtool.project.repository import Project

HEAD = (
    f"From {'0' * 40} Mon Sep 17 00:00:00 2001\nFrom: Mallory <mallory@example.org>\n"
    "Subject: [PATCH] innocent change\n\n---\n"
)  # the diff starts on line 6
BLOB = "d4ae1c6d11798d781b9847242a8be3edfa521aa0"
ZERO = "0" * 40
PATH_HINT = "a patch may only touch files inside the upstream tree"
MODE_HINT = (
    "a patch may only add or change regular files (mode 100644 or 100755): a symbolic "
    "link could point outside the tree, a gitlink at another repository"
)


def patch(diff: str) -> str:
    return HEAD + textwrap.dedent(diff)


def new_file(path: str, *, mode: str = "100644", quoted: bool = False) -> str:
    a, b = (f'"a/{path}"', f'"b/{path}"') if quoted else (f"a/{path}", f"b/{path}")
    return patch(f"""\
        diff --git {a} {b}
        new file mode {mode}
        index {ZERO}..{BLOB}
        --- /dev/null
        +++ {b}
        @@ -0,0 +1 @@
        +/etc/passwd
        \\ No newline at end of file
        """)


def renamed(old: str, new: str, verb: str = "rename") -> str:
    return patch(f"""\
        diff --git a/python/demo/util.py b/python/demo/util.py
        similarity index 100%
        {verb} {old}
        {verb} {new}
        """)


# (case, patch text, message, line, hint): what PatchFile.parse says, every problem at its line
REFUSED = [
    (
        "symlink",
        new_file("python/demo/passwd", mode="120000"),
        "unsafe diff: 'new file mode 120000' makes 'python/demo/passwd' a symbolic link",
        7,
        MODE_HINT,
    ),
    (
        "gitlink",
        new_file("python/demo/sub", mode="160000"),
        "unsafe diff: 'new file mode 160000' makes 'python/demo/sub' a gitlink (a submodule commit)",
        7,
        MODE_HINT,
    ),
    (
        "mode-change-to-symlink",
        patch("""\
        diff --git a/python/demo/util.py b/python/demo/util.py
        old mode 100644
        new mode 120000
        """),
        "unsafe diff: 'new mode 120000' makes 'python/demo/util.py' a symbolic link",
        8,
        MODE_HINT,
    ),
    (
        "mode-change-to-gitlink",
        patch("""\
        diff --git a/python/demo/util.py b/python/demo/util.py
        old mode 100644
        new mode 160000
        """),
        "unsafe diff: 'new mode 160000' makes 'python/demo/util.py' a gitlink (a submodule commit)",
        8,
        MODE_HINT,
    ),
    (
        "symlink-deleted",
        patch(f"""\
        diff --git a/python/demo/link b/python/demo/link
        deleted file mode 120000
        index {BLOB}..{ZERO}
        --- a/python/demo/link
        +++ /dev/null
        @@ -1 +0,0 @@
        -/etc/passwd
        """),
        "unsafe diff: 'deleted file mode 120000' makes 'python/demo/link' a symbolic link",
        7,
        MODE_HINT,
    ),
    (
        "symlink-on-index-line-only",
        patch(f"""\
        diff --git a/python/demo/util.py b/python/demo/util.py
        index {BLOB}..{BLOB} 120000
        --- a/python/demo/util.py
        +++ b/python/demo/util.py
        @@ -1 +1 @@
        -a
        +b
        """),
        "unsafe diff: 'mode 120000 on its index line' makes 'python/demo/util.py' a symbolic link",
        7,
        MODE_HINT,
    ),
    (
        "directory-mode",
        new_file("python/demo/d", mode="040000"),
        "unsafe diff: 'new file mode 040000' makes 'python/demo/d' a directory",
        7,
        MODE_HINT,
    ),
    (
        "odd-mode",
        new_file("python/demo/x", mode="100664"),
        "unsafe diff: 'new file mode 100664' makes 'python/demo/x' something other than a regular file",
        7,
        MODE_HINT,
    ),
    ("dotdot", new_file("../../etc/passwd"), "unsafe diff: path '../../etc/passwd' escapes the tree", 6, PATH_HINT),
    (
        "quoted-octal-dotdot",
        new_file("\\056\\056/etc/passwd", quoted=True),
        "unsafe diff: path '../etc/passwd' escapes the tree",
        6,
        PATH_HINT,
    ),
    (
        "quoted-tab",
        new_file("x\\tb", quoted=True),
        "unsafe diff: path 'x\\tb' contains a control character",
        6,
        PATH_HINT,
    ),
    (
        "quoted-newline",
        new_file("x\\nb", quoted=True),
        "unsafe diff: path 'x\\nb' contains a control character",
        6,
        PATH_HINT,
    ),
    (
        "quoted-escape-char",
        new_file("x\\033[31m", quoted=True),
        "unsafe diff: path 'x\\x1b[31m' contains a control character",
        6,
        PATH_HINT,
    ),
    (
        "quoted-unterminated",
        patch("""\
        diff --git "a/x b/x
        --- a/x
        +++ b/x
        """),
        "unsafe diff: unterminated quoted path '\"a/x b/x'",
        6,
        PATH_HINT,
    ),
    (
        "quoted-bad-escape",
        new_file("x\\qy", quoted=True),
        'unsafe diff: bad escape in quoted path \'"a/x\\\\qy" "b/x\\\\qy"\'',
        6,
        PATH_HINT,
    ),
    ("del-char", new_file("x\x7fy"), "unsafe diff: path 'x\\x7fy' contains a control character", 6, PATH_HINT),
    (
        "dotgit",
        new_file(".git/hooks/post-checkout"),
        "unsafe diff: path '.git/hooks/post-checkout' touches .git/",
        6,
        PATH_HINT,
    ),
    (
        "dotgit-upper",
        new_file("python/.GIT/config"),
        "unsafe diff: path 'python/.GIT/config' touches .git/",
        6,
        PATH_HINT,
    ),
    (  # found by an attack: 2,100 deep passed check, then apply's cleanup recursed past Python's limit
        "deep",
        new_file("d/" * 100 + "f"),
        f"unsafe diff: path {'d/' * 30!r}... is 101 names deep, more than the 100 a path may be",
        6,
        PATH_HINT,
    ),
    (
        "long",
        new_file(("n" * 200 + "/") * 5 + "n" * 100),
        f"unsafe diff: path {'n' * 60!r}... is 1105 bytes long, more than the 1024 a path may have",
        6,
        PATH_HINT,
    ),
    ("dotgit-ntfs-dot", new_file(".git./config"), "unsafe diff: path '.git./config' touches .git/", 6, PATH_HINT),
    ("dotgit-ntfs-short", new_file("GIT~1/config"), "unsafe diff: path 'GIT~1/config' touches .git/", 6, PATH_HINT),
    ("dotgit-hfs", new_file(".g\u200cit/config"), "unsafe diff: path '.g\\u200cit/config' touches .git/", 6, PATH_HINT),
    (
        "dot-component",
        new_file("python/./demo/x.py"),
        "unsafe diff: path 'python/./demo/x.py' has an empty, '.' or '..' component",
        6,
        PATH_HINT,
    ),
    (
        "empty-component",
        new_file("python//x.py"),
        "unsafe diff: path 'python//x.py' has an empty, '.' or '..' component",
        6,
        PATH_HINT,
    ),
    (
        "backslash",
        new_file("python\\..\\..\\x"),
        "unsafe diff: path 'python\\\\..\\\\..\\\\x' contains a backslash",
        6,
        PATH_HINT,
    ),
    (
        "absolute",
        patch(f"""\
        diff --git /etc/cron.d/evil /etc/cron.d/evil
        new file mode 100644
        index {ZERO}..{BLOB}
        --- /dev/null
        +++ /etc/cron.d/evil
        @@ -0,0 +1 @@
        +x
        """),
        "unsafe diff: absolute path '/etc/cron.d/evil'",
        6,
        PATH_HINT,
    ),
    ("drive-letter", new_file("C:/x"), "unsafe diff: absolute path 'C:/x'", 6, PATH_HINT),
    (
        "no-prefix",
        patch("""\
        diff --git python/x.py python/x.py
        --- python/x.py
        +++ python/x.py
        @@ -1 +1 @@
        -a
        +b
        """),
        "unsafe diff: path 'python/x.py' lacks the a/ or b/ prefix git format-patch writes (git apply "
        "would strip its first directory instead)",
        6,
        PATH_HINT,
    ),
    (
        "plus-header-only",
        patch(f"""\
        diff --git a/python/demo/util.py b/python/demo/util.py
        index {BLOB}..{BLOB} 100644
        --- a/python/demo/util.py
        +++ b/../../evil.py
        @@ -1 +1 @@
        -a
        +b
        """),
        "unsafe diff: path '../../evil.py' escapes the tree",
        9,
        PATH_HINT,
    ),
    (
        "rename-to-dotdot",
        renamed("from python/demo/util.py", "to ../outside.py"),
        "unsafe diff: path '../outside.py' escapes the tree",
        9,
        PATH_HINT,
    ),
    (
        "rename-from-absolute",
        renamed("from /etc/passwd", "to python/demo/p"),
        "unsafe diff: absolute path '/etc/passwd'",
        8,
        PATH_HINT,
    ),
    (
        "rename-to-dotgit",
        renamed("from python/demo/util.py", "to .git/hooks/pre-commit"),
        "unsafe diff: path '.git/hooks/pre-commit' touches .git/",
        9,
        PATH_HINT,
    ),
    (
        "rename-quoted",
        renamed('from "python/demo/util.py"', 'to "\\056git/config"'),
        "unsafe diff: path '.git/config' touches .git/",
        9,
        PATH_HINT,
    ),
    (
        "copy-from-outside",
        renamed("from ../../home/u/.ssh/id_rsa", "to python/demo/k", verb="copy"),
        "unsafe diff: path '../../home/u/.ssh/id_rsa' escapes the tree",
        8,
        PATH_HINT,
    ),
    (
        "copy-to-dotgit",
        renamed("from python/demo/util.py", "to .GiT/config", verb="copy"),
        "unsafe diff: path '.GiT/config' touches .git/",
        9,
        PATH_HINT,
    ),
    (
        "rename-old-new",
        patch("""\
        diff --git a/python/demo/util.py b/python/demo/util.py
        similarity index 100%
        rename old python/demo/util.py
        rename new ../x.py
        """),
        "unsafe diff: path '../x.py' escapes the tree",
        9,
        PATH_HINT,
    ),
    (
        "traditional-diff-after",
        new_file("python/demo/ok.py")
        + textwrap.dedent("""\
        --- a/../../etc/passwd
        +++ b/../../etc/passwd
        @@ -0,0 +1 @@
        +evil
        """),
        "a diff section without a 'diff --git' line (git apply would apply it too); patch files hold "
        "only git format-patch output",
        14,
        "export the commit with `git format-patch`",
    ),
    (
        "traditional-diff-in-message",
        HEAD.replace(
            "---\n",
            textwrap.dedent("""\
        Look:
        --- a/x
        +++ b/x
        @@ -1 +1 @@
        -a
        +b
        ---
        """),
        )
        + new_file("python/demo/ok.py")[len(HEAD) :],
        "a diff section without a 'diff --git' line (git apply would apply it too); patch files hold "
        "only git format-patch output",
        6,
        "export the commit with `git format-patch`",
    ),
    (
        "names-apart",
        patch("""\
        diff --git a/x y b/z w
        new file mode 100644
        """),
        "unsafe diff: the two paths of the 'diff --git' line cannot be told apart",
        6,
        "export the commit with `git format-patch`",
    ),
]


@pytest.mark.parametrize(("text", "message", "line", "hint"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_hostile_patch_is_refused_at_its_line(text: str, message: str, line: int, hint: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        PatchFile.parse(text, name="patches/0001-evil.patch")
    (problem,) = exc.value.problems
    assert (problem.file, problem.line, problem.message, problem.hint) == (
        "patches/0001-evil.patch",
        line,
        message,
        hint,
    )


def test_header_like_lines_inside_a_hunk_are_content() -> None:
    """A removed '-- ../x' line reads '--- ../x': git counts it into the hunk, and so do we."""
    text = patch(f"""\
        diff --git a/python/demo/q.sql b/python/demo/q.sql
        index {BLOB}..{BLOB} 100644
        --- a/python/demo/q.sql
        +++ b/python/demo/q.sql
        @@ -1,2 +1,2 @@
        --- ../../etc/passwd
        +++ ../../etc/passwd
         select 1;
        """)
    assert PatchFile.parse(text, name="p.patch").paths == ("python/demo/q.sql",)


def test_names_with_spaces_and_quotes_are_read_as_git_reads_them() -> None:
    text = patch(f"""\
        diff --git a/python/my notes.md b/python/my notes.md
        index {BLOB}..{BLOB} 100644
        --- a/python/my notes.md\t
        +++ b/python/my notes.md\t
        @@ -1 +1 @@
        -a
        +b
        diff --git "a/python/caf\\303\\251.py" "b/python/caf\\303\\251.py"
        new file mode 100755
        index {ZERO}..{BLOB}
        --- /dev/null
        +++ "b/python/caf\\303\\251.py"
        @@ -0,0 +1 @@
        +x
        """)
    parsed = PatchFile.parse(text, name="p.patch")
    assert parsed.paths == ("python/my notes.md", "python/café.py")
    assert [f.status for f in parsed.files] == ["modified", "added"]


# -- through the CLI ---------------------------------------------------------------------------


def holds_a_fifo(root: Path) -> bool:
    """Whether a named pipe lies in ``root`` or in a directory in it (``patches/``,
    ``upstream-pins/``: where these tests plant them), links not followed."""
    for entry in os.scandir(root):
        if _is_fifo(entry):
            return True
        if entry.is_dir(follow_symlinks=False) and any(_is_fifo(inner) for inner in os.scandir(entry.path)):
            return True
    return False


def _is_fifo(entry: os.DirEntry[str]) -> bool:
    return stat.S_ISFIFO(entry.stat(follow_symlinks=False).st_mode)


def run(demo: Demo, *args: str, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess[str]:
    """The CLI, in this process (``Demo.run``); where the repository holds a FIFO, in a process of
    its own under the hang guard: a command that blocked on the FIFO would hang the whole test run
    in process, and fails the test as a process."""
    if not holds_a_fifo(demo.root):
        return demo.run(*args)
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(demo.cache)}
    try:
        return subprocess.run(
            [sys.executable, "-m", "patchtool", *args],
            cwd=demo.root,
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"patchtool {' '.join(args)} still running after {timeout}s")


def outside(demo: Demo) -> Path:
    """A directory beside the repository holding a file an attack would read or write."""
    victim = demo.root.parent / "outside"
    victim.mkdir(exist_ok=True)
    (victim / "secret.txt").write_text("secret\n")
    return victim


def refused(demo: Demo, command: str, *args: str) -> tuple[int, list[dict[str, object]]]:
    """Run ``command --json``; assert nothing changed in the repository or beside it and that no
    traceback was printed; the exit code and the errors."""
    roots = (demo.root, outside(demo))
    before = snapshot(*roots)
    res = run(demo, command, *args, "--json")
    assert snapshot(*roots) == before
    assert "Traceback" not in res.stderr, res.stderr
    data = json.loads(res.stdout)
    assert data["exit_code"] == res.returncode
    return res.returncode, data["errors"]


def entry_errors(errors: list[dict[str, object]]) -> list[str]:
    return [" | ".join(str(e.get(k, "")) for k in ("file", "line", "patch", "message", "hint")) for e in errors]


@pytest.mark.parametrize(
    "case", ["symlink", "gitlink", "mode-change-to-symlink", "quoted-octal-dotdot", "rename-quoted", "deep"]
)
@pytest.mark.parametrize("command", ["check", "apply", "status"])
def test_hostile_patch_is_refused_by_every_command(demo: Demo, case: str, command: str) -> None:
    _, text, message, line, hint = next(c for c in REFUSED if c[0] == case)
    (demo.root / "patches" / "0001-evil.patch").write_text(text)
    demo.write_manifest(demo.entry("evil", "0001-evil.patch"))
    code, errors = refused(demo, command)
    assert code == 1
    assert entry_errors(errors)[0] == f"patches/0001-evil.patch | {line} | evil | {message} | {hint}"
    assert not (demo.root / "build").exists()


def test_a_stale_staging_tree_of_any_depth_is_removed_by_the_next_apply(one_patch: Demo) -> None:
    """Found by an attack: apply's staging tree 2,100 directories deep made shutil.rmtree recurse
    past Python's limit (exit 70), and every later apply failed the same way cleaning it up.
    Removal is a loop now: the next apply removes what a killed or failed one left, at any depth."""
    build = one_patch.root / "build"
    build.mkdir()
    fd = os.open(build, os.O_RDONLY | os.O_DIRECTORY)
    os.mkdir(".demo-1.0.patchtool-0badc0de", dir_fd=fd)
    here = os.open(".demo-1.0.patchtool-0badc0de", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    for _ in range(1500):  # deeper than Python's recursion limit; built by descriptor, past PATH_MAX
        os.mkdir("d", dir_fd=here)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
        os.close(here)
        here = below
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=here))
    os.close(here)
    try:
        res = run(one_patch, "apply")
        assert res.returncode == 0, res.stdout + res.stderr
        assert sorted(p.name for p in build.iterdir()) == ["demo-1.0"]
    finally:  # rm removes any depth; pytest's own clean-up of tmp_path recurses like shutil.rmtree
        subprocess.run(["rm", "-rf", str(build / ".demo-1.0.patchtool-0badc0de")], check=True)


def test_symlink_patch_made_by_git_is_refused_before_it_reaches_a_tree(demo: Demo) -> None:
    """The real thing: git format-patch of a commit that adds a link to /etc/passwd."""

    def change(root: Path) -> None:
        (root / "python/demo/passwd").symlink_to("/etc/passwd")

    demo.commit_patch("0001-link.patch", change, "demo: add a link")
    demo.write_manifest(demo.entry("link", "0001-link.patch"))
    for command in ("check", "apply"):
        code, errors = refused(demo, command)
        assert code == 1
        assert entry_errors(errors)[0] == (
            "patches/0001-link.patch | 7 | link | unsafe diff: 'new file mode 120000' makes "
            f"'python/demo/passwd' a symbolic link | {MODE_HINT}"
        )


def test_paths_in_the_manifest_go_through_the_one_validator(one_patch: Demo) -> None:
    """Assumption files and the registry name paths in a tree: the same rules as a diff's."""
    hostile = [
        "python/.GIT/config",
        "python/x\\ty",
        "python/./demo/core.py",
        "python/demo/core.py\\u0000",
        "/etc/passwd",
    ]
    manifest = one_patch.root / "patchset.toml"
    manifest.write_text(
        manifest.read_text().replace('pin = "demo-1.0"\n', 'pin = "demo-1.0"\nregistry = "../outside/secret.txt"\n')
        + "".join(f'[[patch.assumptions]]\nid = "a{i}"\nfile = "{path}"\nwhy = "w"\n' for i, path in enumerate(hostile))
    )
    code, errors = refused(one_patch, "check")
    assert code == 1
    assert [(e["line"], e["key"], e["message"]) for e in errors] == [
        (3, "registry", "path '../outside/secret.txt' escapes the tree; name a file inside the tree"),
        (16, "patch[0].assumptions[0].file", "path 'python/.GIT/config' touches .git/; name a file inside the tree"),
        (
            20,
            "patch[0].assumptions[1].file",
            "path 'python/x\\ty' contains a control character; name a file inside the tree",
        ),
        (
            24,
            "patch[0].assumptions[2].file",
            "path 'python/./demo/core.py' has an empty, '.' or '..' component; name a file inside the tree",
        ),
        (
            28,
            "patch[0].assumptions[3].file",
            "path 'python/demo/core.py\\x00' contains a control character; name a file inside the tree",
        ),
        (32, "patch[0].assumptions[4].file", "absolute path '/etc/passwd'; name a file inside the tree"),
    ]


# -- what patchtool reads from the repository: regular files inside it, never waited on ---------

READ_HINT = "patchtool reads only regular files inside the repository; put the file itself there"


def fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def directory(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()
    (path / "inner.patch").write_text("x")


def link_outside(path: Path) -> None:
    """A link to a copy of the file kept outside: valid content, the wrong place."""
    copy = path.parent.parent.parent / "outside" / path.name
    copy.parent.mkdir(exist_ok=True)
    copy.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(copy)


def dangling(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/nonexistent/x")


def socket_file(path: Path) -> None:
    import socket

    path.unlink(missing_ok=True)
    here = Path.cwd()
    os.chdir(path.parent)  # a socket's path must be short: bind it relative to its directory
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path.name)
        sock.close()
    finally:
        os.chdir(here)


KINDS = {
    "fifo": (fifo, "is a named pipe (FIFO), not a regular file"),
    "directory": (directory, "is a directory, not a regular file"),
    "symlink": (link_outside, "is a symbolic link (it could lead outside the repository; patchtool follows none)"),
    "dangling-symlink": (dangling, "is a symbolic link (it could lead outside the repository; patchtool follows none)"),
    "socket": (socket_file, "is a socket, not a regular file"),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("command", ["status", "check", "apply"])
def test_patch_path_that_is_not_a_regular_file(one_patch: Demo, kind: str, command: str) -> None:
    make, what = KINDS[kind]
    make(one_patch.root / "patches" / "0001-greet.patch")
    code, errors = refused(one_patch, command)
    assert code == 1
    assert entry_errors(errors)[0] == f"patches/0001-greet.patch |  | greet | {what} | {READ_HINT}"


def test_patches_directory_that_is_a_link_is_not_followed(one_patch: Demo) -> None:
    patches = one_patch.root / "patches"
    elsewhere = outside(one_patch) / "patches"
    patches.rename(elsewhere)
    patches.symlink_to(elsewhere)
    for command in ("status", "check", "apply"):
        code, errors = refused(one_patch, command)
        assert code == 1
        assert entry_errors(errors)[0] == (
            "patches/0001-greet.patch |  | greet | patches is a symbolic link (it could lead outside the "
            f"repository; patchtool follows none); expected a directory inside the repository | {READ_HINT}"
        )


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
@pytest.mark.parametrize("command", ["status", "check", "apply"])
def test_manifest_that_is_not_a_regular_file(one_patch: Demo, kind: str, command: str) -> None:
    make, what = KINDS[kind]
    make(one_patch.root / "patchset.toml")
    code, errors = refused(one_patch, command)
    assert code == 1
    assert entry_errors(errors)[0] == f"patchset.toml |  |  | {what} | {READ_HINT}"


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
@pytest.mark.parametrize("command", ["status", "check", "apply"])
def test_pin_that_is_not_a_regular_file(one_patch: Demo, kind: str, command: str) -> None:
    make, what = KINDS[kind]
    make(one_patch.root / "upstream-pins" / "demo-1.0.toml")
    code, errors = refused(one_patch, command)
    assert code == 1
    assert entry_errors(errors)[0] == f"upstream-pins/demo-1.0.toml |  |  | {what} | {READ_HINT}"


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
def test_registry_that_is_not_a_regular_file(one_patch: Demo, kind: str) -> None:
    manifest = one_patch.root / "patchset.toml"
    manifest.write_text(
        manifest.read_text().replace('pin = "demo-1.0"\n', 'pin = "demo-1.0"\nregistry = "retread.toml"\n')
    )
    (one_patch.root / "retread.toml").write_text("schema = 1\n")
    make, what = KINDS[kind]
    make(one_patch.root / "retread.toml")
    for args in (["check"], ["retread", "list"]):
        code, errors = refused(one_patch, *args)
        assert code == 1
        assert entry_errors(errors)[0] == f"retread.toml |  |  | {what} | {READ_HINT}"


def test_a_fifo_among_the_patches_of_a_broken_manifest(one_patch: Demo) -> None:
    """check reads every patch file when the manifest does not parse: it must not wait on a FIFO."""
    os.mkfifo(one_patch.root / "patches" / "0002-pipe.patch")
    (one_patch.root / "patchset.toml").write_text("schema = [\n")
    code, errors = refused(one_patch, "check")
    assert code == 1
    assert entry_errors(errors)[1:] == [
        f"patches/0002-pipe.patch |  |  | is a named pipe (FIFO), not a regular file | {READ_HINT}"
    ]


# -- names git echoes back --------------------------------------------------------------------


def test_assumption_about_a_path_with_spaces(one_patch: Demo) -> None:
    """git cat-file answers '<spec> missing'; a spec with a space used to crash check."""
    manifest = one_patch.root / "patchset.toml"
    manifest.write_text(
        manifest.read_text()
        + textwrap.dedent("""\
        [[patch.assumptions]]
        id = "notes"
        file = "python/demo/my notes.md"
        why = "the patch documents it"

        [[patch.assumptions]]
        id = "no-notes"
        file = "python/demo/my other notes.md"
        exists = false
        why = "the patch adds it"
        """)
    )
    code, errors = refused(one_patch, "check")
    assert code == 1
    assert entry_errors(errors) == [
        "patchset.toml |  | greet | assumption failed at demo-1.0: expected python/demo/my notes.md exists, "
        "found file absent | the patch relies on it: the patch documents it"
    ]


# -- why a patch does not apply: git's own reason when no hunk is to blame ----------------------


def crlf_pin(demo: Demo) -> None:
    """Pin demo-2.0: demo 1.0 plus python/demo/dos.py, whose lines end in CRLF, and
    python/demo/tail.py, whose last line has no newline."""
    from conftest import UPSTREAM_FILES
    from helpers import make_wheel, sha256

    files = {**UPSTREAM_FILES, "demo/dos.py": "a = 1\r\nb = 2\r\nc = 3\r\n", "demo/tail.py": "a = 1\nb = 2"}
    wheel = make_wheel(demo.root.parent / "demo-2.0-py3-none-any.whl", "demo", "2.0", files)
    demo.index.add(wheel)
    pin = (demo.root / "upstream-pins" / "demo-1.0.toml").read_text()
    pin = pin.replace('version = "1.0"', 'version = "2.0"').replace(demo.wheel.name, wheel.name)
    (demo.root / "upstream-pins" / "demo-2.0.toml").write_text(pin.replace(sha256(demo.wheel), sha256(wheel)))


def apply_failure(demo: Demo, text: str, *, pin: str = "demo-1.0") -> tuple[list[str], list[dict[str, object]]]:
    (demo.root / "patches" / "0001-x.patch").write_text(text)
    demo.write_manifest(demo.entry("x", "0001-x.patch"), pin=pin)
    code, errors = refused(demo, "check")
    assert code == 1
    res = run(demo, "apply", "--json")
    assert res.returncode == 3 and "Traceback" not in res.stderr
    (failed,) = [p for p in json.loads(res.stdout)["data"]["patches"] if p["outcome"] == "failed"]
    return [str(e["message"]) for e in errors], failed["failures"]


def test_crlf_upstream_file_and_a_patch_written_with_lf(demo: Demo) -> None:
    crlf_pin(demo)
    messages, failures = apply_failure(
        demo,
        patch(f"""\
        diff --git a/python/demo/dos.py b/python/demo/dos.py
        index {BLOB}..{BLOB} 100644
        --- a/python/demo/dos.py
        +++ b/python/demo/dos.py
        @@ -1,3 +1,3 @@
         a = 1
        -b = 2
        +b = 20
         c = 3
        """),
        pin="demo-2.0",
    )
    detail = "line 1: expected 'a = 1', found 'a = 1\\r': upstream's lines end in CRLF, the patch's in LF"
    assert failures == [
        {
            "file": "python/demo/dos.py",
            "hunk": 1,
            "header": "@@ -1,3 +1,3 @@",
            "reason": "context does not match",
            "line": 1,
            "detail": detail,
        }
    ]
    assert messages == [
        f"does not apply at demo-2.0: python/demo/dos.py hunk 1 (@@ -1,3 +1,3 @@): context does not match: {detail}"
    ]


def test_a_hunk_whose_context_matches_but_git_refuses_says_gits_reason(demo: Demo) -> None:
    """Every line of the context is there, but upstream's last one has no newline: git's words."""
    crlf_pin(demo)
    messages, failures = apply_failure(
        demo,
        patch(f"""\
        diff --git a/python/demo/tail.py b/python/demo/tail.py
        index {BLOB}..{BLOB} 100644
        --- a/python/demo/tail.py
        +++ b/python/demo/tail.py
        @@ -1,2 +1,3 @@
         a = 1
         b = 2
        +c = 3
        """),
        pin="demo-2.0",
    )
    why = "patch failed: python/demo/tail.py:1; python/demo/tail.py: patch does not apply"
    assert failures == [
        {
            "file": "python/demo/tail.py",
            "hunk": 1,
            "header": "@@ -1,2 +1,3 @@",
            "reason": "git apply refused it",
            "line": 1,
            "detail": why,
        }
    ]
    assert messages == [
        f"does not apply at demo-2.0: python/demo/tail.py hunk 1 (@@ -1,2 +1,3 @@): git apply refused it: {why}"
    ]


def test_a_patch_git_refuses_for_another_reason_says_gits_reason(demo: Demo) -> None:
    """A rename onto a file upstream has: no hunk is to blame, and git says why; we repeat it."""
    messages, failures = apply_failure(
        demo,
        patch("""\
        diff --git a/python/demo/util.py b/python/demo/core.py
        similarity index 100%
        rename from python/demo/util.py
        rename to python/demo/core.py
        """),
    )
    why = "python/demo/core.py: already exists in index"
    assert failures == [{"file": "python/demo/core.py", "reason": "git apply refused it", "detail": why}]
    assert messages == [f"does not apply at demo-1.0: python/demo/core.py patch: git apply refused it: {why}"]


# -- the manifest -----------------------------------------------------------------------------


def test_one_id_in_the_series_and_dropped(one_patch: Demo) -> None:
    manifest = one_patch.root / "patchset.toml"
    dropped = one_patch.entry("greet", "dropped/0001-greet.patch").replace("[[patch]]", "[[dropped]]")
    manifest.write_text(
        manifest.read_text() + "\n" + dropped + 'reason = "upstream took it"\ndropped_at = "demo-1.0"\n'
    )
    for command in ("check", "apply", "status"):
        code, errors = refused(one_patch, command)
        assert code == 1
        assert [(e["file"], e["line"], e["key"], e["message"], e["hint"]) for e in errors] == [
            (
                "patchset.toml",
                15,
                "dropped[0].id",
                "id 'greet' is dropped here and also in the series (patch[0], line 5)",
                "an id is either in the series or dropped: give the new patch its own id, or delete this "
                "[[dropped]] entry if it is the same patch come back",
            )
        ]


BOM_HINT = "remove the bytes EF BB BF at its start (an editor's 'UTF-8', not 'UTF-8 with BOM')"


@pytest.mark.parametrize(
    ("rel", "commands"),
    [
        ("patchset.toml", ["check", "apply", "status"]),
        ("upstream-pins/demo-1.0.toml", ["check", "apply", "status"]),
        ("retread.toml", ["check", "retread list"]),
    ],
)
def test_byte_order_mark_is_named(one_patch: Demo, rel: str, commands: list[str]) -> None:
    manifest = one_patch.root / "patchset.toml"
    manifest.write_text(
        manifest.read_text().replace('pin = "demo-1.0"\n', 'pin = "demo-1.0"\nregistry = "retread.toml"\n')
    )
    (one_patch.root / "retread.toml").write_text("schema = 1\nrejected = []\n")
    path = one_patch.root / rel
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    for command in commands:
        code, errors = refused(one_patch, *command.split())
        assert code == 1
        assert entry_errors(errors)[0] == (
            f"{rel} | 1 |  | starts with a UTF-8 byte-order mark; save it without one | {BOM_HINT}"
        )


# -- our reading against git's, over many hostile names and modes ------------------------------

NAMES = [
    "x.py",
    "py/x.py",
    "my notes.md",
    "../x",
    "py/../../x",
    "..",
    ".",
    "py/./x",
    "py//x",
    ".git/config",
    ".GIT/x",
    "py/.Git/hooks/x",
    ".git./x",
    ".git /x",
    "git~1/x",
    ".g\u200cit/x",
    "/etc/passwd",
    "C:/x",
    "py\\..\\x",
    "x\ty",
    "x\ry",
    "x\x7fy",
    "x\x1b[0m",
    "-x",
    "x y z",
    'x"y',
    "caf\u00e9.py",
    "a/b/c",
    "b/x",
    "a/.git/x",
    "x\\ty",
]


def quote(name: str) -> str:
    """``name`` C-quoted as git writes it, bytes above ASCII as octal."""
    special = {
        "\t": "\\t",
        "\n": "\\n",
        "\r": "\\r",
        '"': '\\"',
        "\\": "\\\\",
        "\x07": "\\a",
        "\x08": "\\b",
        "\x0c": "\\f",
        "\x0b": "\\v",
    }
    out = []
    for ch in name:
        if ch in special:
            out.append(special[ch])
        elif ord(ch) < 0x20 or ord(ch) >= 0x7F:
            out.extend(f"\\{b:03o}" for b in ch.encode())
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def forms(name: str, prefix: str) -> list[str]:
    return [f"{prefix}{name}", quote(prefix + name)] if prefix else [name, quote(name)]


def hostile_texts() -> list[str]:
    texts = []
    for name in NAMES:
        for a, b in zip(forms(name, "a/"), forms(name, "b/"), strict=True):
            texts.append(
                patch(f"diff --git {a} {b}\nindex {BLOB}..{BLOB} 100644\n--- {a}\n+++ {b}\n@@ -1 +1 @@\n-a\n+b\n")
            )
            texts.append(
                patch(
                    f"diff --git a/ok.py {b}\nnew file mode 100644\nindex {ZERO}..{BLOB}\n"
                    f"--- /dev/null\n+++ {b}\n@@ -0,0 +1 @@\n+x\n"
                )
            )
            texts.append(
                patch(
                    f"diff --git {a} b/ok.py\ndeleted file mode 100644\nindex {BLOB}..{ZERO}\n"
                    f"--- {a}\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
                )
            )
        for plain in forms(name, ""):
            for verb in ("rename", "copy"):
                texts.append(
                    patch(f"diff --git a/ok.py b/ok2.py\nsimilarity index 100%\n{verb} from ok.py\n{verb} to {plain}\n")
                )
                texts.append(
                    patch(
                        f"diff --git a/ok.py b/ok2.py\nsimilarity index 100%\n{verb} from {plain}\n{verb} to ok2.py\n"
                    )
                )
        texts.append(patch(f"diff --git {name} {name}\n--- {name}\n+++ {name}\n@@ -1 +1 @@\n-a\n+b\n"))
    for mode in ("100644", "100755", "120000", "160000", "040000", "100664", "0120000", "12000", "100644 x"):
        texts.append(
            patch(
                f"diff --git a/x b/x\nnew file mode {mode}\nindex {ZERO}..{BLOB}\n--- /dev/null\n"
                "+++ b/x\n@@ -0,0 +1 @@\n+x\n"
            )
        )
        texts.append(patch(f"diff --git a/x b/x\nold mode 100644\nnew mode {mode}\n"))
        texts.append(
            patch(
                f"diff --git a/x b/x\ndeleted file mode {mode}\nindex {BLOB}..{ZERO}\n--- a/x\n"
                "+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
            )
        )
        texts.append(patch(f"diff --git a/x b/x\nindex {BLOB}..{BLOB} {mode}\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"))
    return texts


def git_reading(text: str, cwd: Path) -> tuple[set[str], str] | None:
    """The paths and the summary git apply reads from ``text``; None when git refuses it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_CEILING_DIRECTORIES=str(cwd.parent))
    numstat = subprocess.run(
        ["git", "apply", "--numstat", "-z"], input=text.encode(), cwd=cwd, env=env, capture_output=True, check=False
    )
    summary = subprocess.run(
        ["git", "apply", "--summary"], input=text.encode(), cwd=cwd, env=env, capture_output=True, check=False
    )
    if numstat.returncode or summary.returncode:
        return None
    paths = {p.split("\t")[-1] for p in numstat.stdout.decode("utf-8", "replace").split("\0")}
    return paths - {""}, summary.stdout.decode("utf-8", "replace")


def test_every_path_and_mode_git_would_use_is_one_we_checked(tmp_path: Path) -> None:
    """Whatever we accept, git reads the same paths from it, every one safe, and no odd mode."""
    import re

    from patchtool.paths import tree_path_problem

    texts = hostile_texts()
    accepted = 0
    for text in texts:
        try:
            parsed = PatchFile.parse(text, name="p.patch")
        except InvalidInput as exc:
            (problem,) = exc.problems
            assert problem.line is not None and problem.hint, text
            continue
        accepted += 1
        ours = {p for f in parsed.files for p in (f.path, f.source) if p}
        assert all(tree_path_problem(p) is None for p in ours), text
        reading = git_reading(text, tmp_path)
        if reading is None:
            continue
        theirs, summary = reading
        assert theirs <= ours, (text, theirs, ours)
        assert not re.search(r"mode (?!100644|100755)\d+", summary), (text, summary)
    assert len(texts) > 300 and 0 < accepted < len(texts)


def test_read_inside_refuses_without_reading(tmp_path: Path) -> None:
    from patchtool.paths import read_inside

    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "ok.patch").write_bytes(b"ok")
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "patches" / "pipe.patch")
    assert read_inside(tmp_path, "patches/ok.patch") == b"ok"
    with pytest.raises(FileNotFoundError):
        read_inside(tmp_path, "patches/absent.patch")
    cases = {
        "patches/pipe.patch": "is a named pipe (FIFO), not a regular file",
        "file/x.patch": "file is a file; expected a directory inside the repository",
        "../outside": "path '../outside' escapes the tree",
        ".git/config": "path '.git/config' touches .git/",
    }
    for rel, why in cases.items():
        with pytest.raises(InvalidInput) as exc:
            read_inside(tmp_path, rel)
        (problem,) = exc.value.problems
        assert (problem.file, problem.message) == (rel, why)
    with pytest.raises(InvalidInput, match="cannot be read: Not a directory"):
        read_inside(tmp_path / "file", "x")


def git_base85(data: bytes) -> list[str]:
    """``data`` as a binary hunk's lines, as git writes them: a length letter, then base85."""
    import base64

    lines = []
    for at in range(0, len(data), 52):
        chunk = data[at : at + 52]
        n = len(chunk)
        letter = chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27)
        lines.append(letter + base64.b85encode(chunk + b"\0" * (-n % 4)).decode())
    return lines


def binary_patch(demo: Demo, kind: str, declared: int, inflates_to: int) -> str:
    """A real git format-patch of a new binary file, its forward hunk replaced by one that
    declares ``declared`` bytes and inflates to ``inflates_to`` zeros."""
    import re
    import zlib

    def change(root: Path) -> None:
        (root / "python/demo/blob.bin").write_bytes(b"\0\1\2" * 100)

    text = demo.commit_patch("0001-blob.patch", change, "demo: add a blob")
    data = zlib.compress(b"\0" * inflates_to, 9)
    hunk = f"{kind} {declared}\n" + "".join(f"{line}\n" for line in git_base85(data)) + "\n"
    text, found = re.subn(r"(?<=GIT binary patch\n)literal \d+\n(?:.+\n)+\n", lambda m: hunk, text)
    assert found == 1
    (demo.root / "patches" / "0001-blob.patch").write_text(text)
    demo.write_manifest(demo.entry("blob", "0001-blob.patch"))
    return text


@pytest.mark.parametrize(
    ("kind", "declared", "inflates_to", "message"),
    [
        # found by an attack: git apply allocates what a hunk declares; a 1.5 MB patch made check peak at 530 MB
        (
            "literal",
            64 << 20,
            64 << 20,
            "its literal hunk declares 67108864 bytes from {packed} compressed, more than 200 times as many "
            "(a zip bomb?); refusing it",
        ),
        (
            "literal",
            2 << 30,
            1000,
            "its literal hunk declares 2147483648 bytes, more than the 1073741824 a member may have; refusing it",
        ),
        ("literal", 1000, 16 << 20, "its literal hunk inflates to more than the 1000 bytes it declares; refusing it"),
        ("literal", 1000, 999, "its literal hunk inflates to 999 bytes, not the 1000 bytes it declares; refusing it"),
        ("delta", 1000, 16 << 20, "its delta hunk inflates to more than the 1000 bytes it declares; refusing it"),
    ],
)
def test_a_binary_hunk_is_bounded_before_git_inflates_it(
    demo: Demo, kind: str, declared: int, inflates_to: int, message: str
) -> None:
    import zlib

    text = binary_patch(demo, kind, declared, inflates_to)
    line = text.split("\n").index(f"{kind} {declared}") + 1
    packed = len(zlib.compress(b"\0" * inflates_to, 9))
    for command in ("check", "apply"):
        code, errors = refused(demo, command)
        assert code == 1
        assert entry_errors(errors)[0] == (
            f"patches/0001-blob.patch | {line} | blob | binary patch at line {line}: "
            f"{message.format(packed=packed)} | export the commit again with `git format-patch`"
        )


def test_the_binary_hunks_of_one_patch_are_bounded_in_all(
    demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an attack: each hunk was bounded, their sum not; git apply holds every hunk of a
    patch inflated at once: 60 hunks of 16 MiB zeros (a 1.3 MB patch) took 2 GB, a 64 MiB patch
    could ask for 100 GB. The sum is refused at the hunk that passes it, before that hunk is
    inflated (the 1 GiB bound lowered here, so that the case stays small)."""
    from patchtool.diff import binary

    monkeypatch.setattr(binary, "MAX_PATCH_BINARY_BYTES", 3000)

    def change(root: Path) -> None:
        for n in range(4):
            (root / f"python/demo/z{n}.bin").write_bytes(bytes([n]) + b"\0" * 999)

    text = demo.commit_patch("0001-blobs.patch", change, "demo: four blobs")
    with pytest.raises(InvalidInput) as exc:
        PatchFile.parse(text, name="patches/0001-blobs.patch")
    (problem,) = exc.value.problems
    line = [n for n, ln in enumerate(text.split("\n"), 1) if ln == "literal 1000"][3]  # the fourth file's
    assert (problem.line, problem.message) == (
        line,
        f"binary patch at line {line}: its literal hunk brings the patch's binary hunks to 4000 bytes, more "
        "than the 3000 one patch may declare in all (git apply holds them at once); refusing it",
    )
    monkeypatch.setattr(binary, "MAX_PATCH_BINARY_BYTES", 4000)
    assert len(PatchFile.parse(text, name="patches/0001-blobs.patch").files) == 4


def long_patch(lines: int) -> str:
    """A patch file of ``lines`` lines adding one file."""
    n = lines - HEAD.count("\n") - 6
    return HEAD + (
        "diff --git a/python/demo/big.py b/python/demo/big.py\nnew file mode 100644\n"
        f"index {ZERO}..{BLOB}\n--- /dev/null\n+++ b/python/demo/big.py\n@@ -0,0 +1,{n} @@\n" + "+x\n" * n
    )


@pytest.mark.parametrize("command", ["check", "apply", "status"])
def test_a_patch_of_too_many_lines_is_refused_before_it_is_parsed(demo: Demo, command: str) -> None:
    """Found by an attack: a 9 MB patch adding a file of 3,000,000 lines made `check` take 1.3 GB
    and 22 s (some 450 bytes a line: a 64 MiB patch could take 9 GB). One line past the bound is
    refused, naming the file, the patch and what to do, and nothing changes."""
    from patchtool.diff.patchfile import MAX_PATCH_LINES

    text = long_patch(MAX_PATCH_LINES + 1)
    assert text.count("\n") == MAX_PATCH_LINES + 1
    (demo.root / "patches" / "0001-big.patch").write_text(text)
    demo.write_manifest(demo.entry("big", "0001-big.patch"))
    code, errors = refused(demo, command)
    assert code == 1
    assert entry_errors(errors) == [
        f"patches/0001-big.patch |  | big | is {MAX_PATCH_LINES + 1} lines, more than the {MAX_PATCH_LINES} "
        "patchtool reads in one patch file | keep generated and vendored files out of patches, or split the "
        "change into several patches"
    ]
    assert not (demo.root / "build").exists()


def test_a_patch_of_as_many_lines_as_the_bound_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound counts lines as git does, a last line without its newline too (lowered here, so
    that the case stays small)."""
    from patchtool.diff import patchfile

    text = long_patch(40)
    monkeypatch.setattr(patchfile, "MAX_PATCH_LINES", 40)
    assert PatchFile.parse(text, name="big.patch").added == 29
    for longer in (text + "+x\n", text + "+x"):
        with pytest.raises(InvalidInput) as exc:
            PatchFile.parse(longer, name="big.patch")
        assert exc.value.problems[0].message == "is 41 lines, more than the 40 patchtool reads in one patch file"


def with_git_wrapped(demo: Demo, tmp_path: Path, before: str, command: str) -> subprocess.CompletedProcess[str]:
    """``patchtool COMMAND --json`` in its own process, with a git on PATH that runs the shell line
    ``before`` (a memory limit, a log of each call) and then the real git."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\n{before}\nexec {shutil.which("git")} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(demo.cache), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "patchtool", command, "--json"],
        cwd=demo.root,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=HANG_GUARD_S,
    )


def test_git_apply_out_of_memory_is_not_does_not_apply(demo: Demo, tmp_path: Path) -> None:
    """Found by an attack: under a memory limit, git apply's "Out of memory, malloc failed" was
    reported as the patch not applying. It is git failing (exit 70), saying so. The limit is the
    test's own, for git apply alone: 30 MB, where two 16 MiB files cannot be held."""

    def change(root: Path) -> None:
        for n in range(2):
            (root / f"python/demo/z{n}.bin").write_bytes(bytes([n]) + b"\0" * ((16 << 20) - 1))

    demo.commit_patch("0001-blobs.patch", change, "demo: two blobs")
    demo.write_manifest(demo.entry("blobs", "0001-blobs.patch"))
    before = snapshot(demo.root)
    res = with_git_wrapped(demo, tmp_path, 'case " $* " in *" apply "*) ulimit -v 30000 ;; esac', "check")
    assert "Traceback" not in res.stderr, res.stderr
    out = json.loads(res.stdout)
    assert res.returncode == 70, out
    (error,) = out["errors"]
    assert error["message"].startswith("git apply ran out of memory on "), error
    assert "Out of memory, malloc failed" in error["message"]
    assert "does not apply" not in res.stdout
    assert snapshot(demo.root) == before


def test_a_binary_patch_git_made_applies(demo: Demo, tmp_path: Path) -> None:
    blob = bytes(range(256)) * 4 + b"\0" * (1 << 20)  # inflated 1 MiB from some 1 KiB: under the 16 MiB floor

    def change(root: Path) -> None:
        (root / "python/demo/blob.bin").write_bytes(blob)

    demo.commit_patch("0001-blob.patch", change, "demo: add a blob")
    demo.write_manifest(demo.entry("blob", "0001-blob.patch"))
    assert run(demo, "check").returncode == 0
    assert run(demo, "apply", "--into", str(tmp_path / "tree")).returncode == 0
    assert (tmp_path / "tree/python/demo/blob.bin").read_bytes() == blob


def three_long_patches(demo: Demo) -> None:
    """Three patches of 40 lines each, each adding its own file, as the series."""
    entries = []
    for n in range(1, 4):
        name = f"000{n}-big{n}.patch"
        (demo.root / "patches" / name).write_text(long_patch(40).replace("big.py", f"big{n}.py"))
        entries.append(demo.entry(f"big{n}", name))
    demo.write_manifest(*entries)


@pytest.mark.parametrize("command", ["check", "apply", "status"])
def test_patches_within_the_bound_each_but_too_long_together_are_refused(
    demo: Demo, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an attack: ten patches of 500,000 lines each, each within the bound of one patch,
    made `check` hold 1.1 GB (the whole series is read at once). The series is bounded too: the
    patch that passes the bound is named, the rest is not read, and nothing changes (the bound is
    lowered here, so that the case stays small)."""
    from patchtool.diff import patchfile

    three_long_patches(demo)
    monkeypatch.setattr(patchfile, "MAX_SERIES_LINES", 100)
    before = snapshot(demo.root)
    res = demo.run(command, "--json")
    assert snapshot(demo.root) == before
    data = json.loads(res.stdout)
    assert (res.returncode, data["exit_code"]) == (1, 1)
    assert entry_errors(data["errors"]) == [
        "patches/0003-big3.patch |  | big3 | brings the patches read at once to 120 lines, more than the 100 "
        "patchtool reads together | keep generated and vendored files out of patches, or carry fewer, smaller "
        "patches"
    ]
    assert not (demo.root / "build").exists()
    monkeypatch.setattr(patchfile, "MAX_SERIES_LINES", 120)  # as many lines as the bound: read
    assert Project.load(demo.root).series()[2].patch.added == 29


def test_import_of_a_series_too_long_together_is_refused(
    demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`import` of a quilt series holds every patch it brings at once: the same bound holds, and
    the series line that passes it is named before anything is applied or written."""
    from patchtool.diff import patchfile

    demo.write_manifest()
    quilt = tmp_path / "quilt"
    quilt.mkdir()
    for n in range(1, 4):
        (quilt / f"big{n}.diff").write_text(long_patch(40).replace("big.py", f"big{n}.py"))
    (quilt / "series").write_text("big1.diff\nbig2.diff\nbig3.diff\n")
    monkeypatch.setattr(patchfile, "MAX_SERIES_LINES", 100)
    before = snapshot(demo.root)
    res = demo.run("import", str(quilt))
    assert snapshot(demo.root) == before
    assert res.returncode == 1, res.stderr
    assert f"{quilt / 'series'}:3: big3.diff brings the patches read at once to 120 lines" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("shape", ["context", "unidiff-zero"])
def test_many_failing_hunks_start_no_git_process_each(demo: Demo, tmp_path: Path, shape: str) -> None:
    """Found by an attack: `apply` of a patch whose 4,000 hunks all fail started two git processes
    a hunk to say why (53 s). Each hunk is now looked for in memory as git places it: failing hunks
    are each reported with where upstream differs, and git apply runs a handful of times, not two a
    hunk (counted by a git on PATH that logs each call and runs the real one). The second attack
    found `-U0` hunks (no context after them: git holds them to the file's end) whose every line is
    there still asking git one a hunk: patchtool says why itself."""
    from conftest import UPSTREAM_FILES

    core = UPSTREAM_FILES["demo/core.py"].splitlines()
    if shape == "context":
        count = 300
        hunks = "".join(f"@@ -{n},1 +{n},1 @@\n-not upstream's line {n}\n+patched {n}\n" for n in range(1, 301))
    else:
        count = len(core) - 2
        hunks = "".join(f"@@ -{n} +{n} @@\n-{core[n - 1]}\n+patched {n}\n" for n in range(2, len(core)))
    text = HEAD + "diff --git a/python/demo/core.py b/python/demo/core.py\n--- a/python/demo/core.py\n"
    (demo.root / "patches" / "0001-many.patch").write_text(text + "+++ b/python/demo/core.py\n" + hunks)
    demo.write_manifest(demo.entry("many", "0001-many.patch"))
    log = demo.cache / "git-calls.log"
    res = with_git_wrapped(demo, tmp_path, f'echo "$*" >> {log}', "apply")
    assert res.returncode == 3, res.stderr
    failures = json.loads(res.stdout)["data"]["patches"][0]["failures"]
    assert len(failures) == count
    if shape == "context":
        assert [(f["hunk"], f["reason"], f["line"]) for f in failures] == [
            (n, "context does not match", n) for n in range(1, 301)
        ]
        assert (
            failures[0]["detail"]
            == 'line 1: expected "not upstream\'s line 1", found \'"""Core of the demo upstream."""\''
        )
        assert failures[-1]["detail"] == 'line 300: expected "not upstream\'s line 300", found end of file'
    else:
        assert {f["detail"] for f in failures} == {
            "its lines are there, but git applies a hunk with no context after it (as `diff -U0` writes it) "
            "only at the end of the file"
        }
    applies = [line for line in log.read_text().splitlines() if " apply " in f" {line} "]
    assert 0 < len(applies) < 10, applies


def test_patches_of_few_long_lines_are_bounded_by_their_bytes_together(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an attack: eight one-line patches of 60 MiB each (within the bounds of one patch
    and far within the series' lines) made `status` hold 1.6 GB. The series' bytes are bounded too
    (lowered here, so that the case stays small): the patch that passes is named, nothing changes."""
    from patchtool.diff import patchfile

    three_long_patches(demo)
    sizes = [len((demo.root / "patches" / f"000{n}-big{n}.patch").read_bytes()) for n in range(1, 4)]
    monkeypatch.setattr(patchfile, "MAX_SERIES_BYTES", sum(sizes) - 1)
    before = snapshot(demo.root)
    res = demo.run("status", "--json")
    assert snapshot(demo.root) == before
    assert res.returncode == 1
    assert [(e["patch"], e["message"]) for e in json.loads(res.stdout)["errors"]] == [
        (
            "big3",
            f"brings the patches read at once to {sum(sizes)} bytes, more than the {sum(sizes) - 1} bytes patchtool "
            "reads together",
        )
    ]
    monkeypatch.setattr(patchfile, "MAX_SERIES_BYTES", sum(sizes))
    assert demo.run("status").returncode == 0


def test_a_patchs_hunks_share_one_comparison_budget(demo: Demo, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the third attack: the lines a failing patch's hunks may be compared over were
    counted file by file, so 40 files of 100,000 lines took 180 s, and more files more. One budget
    holds for the whole patch (lowered here, so that the case stays small): a hunk past it is said
    not to have been looked for, never given a verdict."""
    from patchtool.diff import fuzz

    two_files = (
        "diff --git a/python/demo/core.py b/python/demo/core.py\n--- a/python/demo/core.py\n"
        "+++ b/python/demo/core.py\n@@ -5,2 +5,3 @@\n def greet(name):\n+    pass\n def farewell(name):\n"
        "diff --git a/python/demo/util.py b/python/demo/util.py\n--- a/python/demo/util.py\n"
        "+++ b/python/demo/util.py\n@@ -1,2 +1,3 @@\n     return 1\n+x\n def helper():\n"
    )
    (demo.root / "patches" / "0001-two.patch").write_text(HEAD + two_files)
    demo.write_manifest(demo.entry("two", "0001-two.patch"))
    from conftest import UPSTREAM_FILES

    # a file's lines count when it is indexed; the first file's hunk compares 2 more, the second's 2
    budget = UPSTREAM_FILES["demo/core.py"].count("\n") + 1 + 2 + UPSTREAM_FILES["demo/util.py"].count("\n") + 1
    monkeypatch.setattr(fuzz, "MAX_COMPARED", budget)
    res = demo.run("apply", "--json")
    assert res.returncode == 3, res.stdout + res.stderr
    failures = json.loads(res.stdout)["data"]["patches"][0]["failures"]
    assert [(f["file"], f["detail"]) for f in failures] == [
        ("python/demo/core.py", "line 5: expected 'def greet(name):', found '    greeting = \"hello\"'"),
        ("python/demo/util.py", f"not looked for: the patch's hunks were compared over {budget} lines already"),
    ]
    # found by the fourth attack: indexing a file of 20 million lines took 2.6 GB; past its bytes'
    # bound a file's hunks are not looked for at all (lowered here, so that the case stays small)
    from patchtool.series import apply

    monkeypatch.setattr(fuzz, "MAX_COMPARED", 10**9)
    monkeypatch.setattr(apply, "MAX_DIAGNOSED_BYTES", 100)
    failures = json.loads(demo.run("apply", "--json").stdout)["data"]["patches"][0]["failures"]
    size = len(UPSTREAM_FILES["demo/core.py"])
    assert (failures[0]["file"], failures[0]["detail"]) == (
        "python/demo/core.py",
        f"not looked for: upstream's file is {size} bytes, more than patchtool searches hunk by hunk",
    )
