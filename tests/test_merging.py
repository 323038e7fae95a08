"""The in-memory 3-way merge of one patch, on a real repository: every case a file can be in."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import git, write_tree
from patchtool import git as gitmod
from patchtool.git.treemerge import ConflictKind, File, Renames, Workspace, merge_patch


def body(name: str) -> str:
    """A file of twelve functions, its own (identical files would make renames ambiguous)."""
    return f'"""{name}"""\n\n\n' + "".join(f"def {name}_{i}():\n    return {i}\n\n\n" for i in range(12))


LABELS = ("upstream 1.1 + series", "upstream 1.0 + series", "patch p")


def commit(work: Path, files: dict[str, str], message: str, *, remove: tuple[str, ...] = ()) -> str:
    write_tree(work, files)
    for path in remove:
        git(work, "rm", "-q", path)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", message)
    return git(work, "rev-parse", "HEAD").strip()


def test_merge_patch_takes_each_file_the_way_merge_ort_would(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    old_base = commit(
        work,
        {
            "same.py": body("same"),
            "moved.py": body("moved"),
            "clash.py": body("clash"),
            "gone.py": body("gone"),
            "src/old_name.py": body("named"),
            "dropme.py": body("drop"),
            "tool.sh": "echo hi\n",
        },
        "1.0",
    )
    (work / "tool.sh").chmod(0o755)
    patch = commit(
        work,
        {
            "same.py": body("same").replace("return 3", "return 33"),
            "moved.py": body("moved").replace("return 5", "return 55"),
            "clash.py": body("clash").replace("return 7", "return 77"),
            "gone.py": body("gone").replace("return 1\n", "return 11\n"),
            "src/old_name.py": body("named").replace("return 9", "return 99"),
            "added.py": "x = 1\n",
            "both.py": "ours = False\n",
        },
        "the patch",
        remove=("dropme.py",),
    )
    git(work, "checkout", "-q", old_base)
    new_base = commit(
        work,
        {
            "moved.py": "import os\n\n\n" + body("moved"),
            "clash.py": body("clash").replace("return 7", "return -7"),
            "src/new_name.py": body("named").replace("return 0", "return 0  # upstream"),
            "dropme.py": body("drop") + "# upstream\n",
            "both.py": "ours = True\n",
        },
        "1.1",
        remove=("gone.py", "src/old_name.py"),
    )
    repo = gitmod.Repo(work / ".git")
    ((_, changes),) = repo.changes(old_base, patch)

    with repo.reader() as reader:
        ws = Workspace(
            repo,
            reader,
            new_base,
            [p for c in changes for p in (c.old_path, c.new_path) if p],
            Renames(repo, repo.tree_of(old_base), repo.tree_of(new_base)),
        )
        merged = merge_patch(ws, changes, LABELS)
        files = merged.files

        def text(path: str) -> str:
            f = files[path]
            assert f is not None
            return ws.data(f).decode()

        # upstream left it alone: the patch's own blob, nothing to write
        same = files["same.py"]
        assert same is not None and same.data is None and same.blob == repo.out("rev-parse", args=[f"{patch}:same.py"])
        # upstream added an import above: merged, both changes kept
        assert text("moved.py").startswith("import os\n") and "return 55" in text("moved.py")
        # the patch adds a file, and makes tool.sh executable
        assert text("added.py") == "x = 1\n"
        tool = files["tool.sh"]
        assert tool is not None and tool.mode == "100755"
        # upstream renamed src/old_name.py (and touched it): followed, both changes in the new file
        assert "src/old_name.py" not in files
        assert "return 99" in text("src/new_name.py") and "# upstream" in text("src/new_name.py")
        assert merged.renamed == ("src/old_name.py -> src/new_name.py (renamed upstream)",)

        kinds = {c.path: c.kind for c in merged.conflicts}
        assert kinds == {
            "clash.py": "content",
            "gone.py": "modify/delete",
            "dropme.py": "delete/modify",
            "both.py": "add/add",
        }
        # each conflict's sides, as git's index records them: base (1), ours (2), theirs (3)
        blob = {
            (rev, path): repo.out("rev-parse", args=[f"{rev}:{path}"])
            for rev in (old_base, new_base, patch)
            for path in ("clash.py", "gone.py", "dropme.py", "both.py")
            if repo.cat_files(rev, [path]).get(path) is not None
        }
        sides = {c.path: tuple(s.blob if s else None for s in (c.base, c.ours, c.theirs)) for c in merged.conflicts}
        assert sides == {
            "clash.py": (blob[old_base, "clash.py"], blob[new_base, "clash.py"], blob[patch, "clash.py"]),
            "gone.py": (blob[old_base, "gone.py"], None, blob[patch, "gone.py"]),
            "dropme.py": (blob[old_base, "dropme.py"], blob[new_base, "dropme.py"], None),
            "both.py": (None, blob[new_base, "both.py"], blob[patch, "both.py"]),
        }
        assert merged.gone == ("gone.py",) and not merged.clean
        clash = next(c for c in merged.conflicts if c.path == "clash.py")
        assert clash.message == "CONFLICT (content): Merge conflict in clash.py"
        assert clash.data is not None
        marked = clash.data.decode()
        assert "<<<<<<< upstream 1.1 + series" in marked and ">>>>>>> patch p" in marked
        assert "return -7" in marked and "return 77" in marked

        # nothing is written: the repository has no blob for the merged moved.py
        moved = files["moved.py"]
        assert moved is not None and moved.blob is None
        assert not repo.has_object(git(work, "hash-object", "--stdin", input=ws.data(moved).decode()).strip())


def test_workspace_same_and_update(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    base = commit(work, {"a.py": "a = 1\n"}, "base")
    repo = gitmod.Repo(work / ".git")
    with repo.reader() as reader:
        ws = Workspace(repo, reader, base, ["a.py"], lambda path: None)
        assert ws.same({"a.py": File("100644", None, b"a = 1\n")})
        assert not ws.same({"a.py": File("100755", None, b"a = 1\n")})
        assert not ws.same({"b.py": File("100644", None, b"")}) and ws.same({"b.py": None})
        ws.update({"a.py": None, "b.py": File("100644", None, b"b = 2\n")})
        assert ws.get("a.py") is None and ws.text("b.py") == "b = 2\n"
        assert ws.text("c.py") is None  # looked up on demand


def test_write_commits_is_one_deterministic_chain(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    base = commit(work, {"a.py": "a = 1\n", "dir/b.py": "b = 1\n", 'odd name "q".py': "q\n"}, "base")
    repo = gitmod.Repo(work / ".git")
    blob = repo.out("rev-parse", args=[f"{base}:a.py"])
    ident = gitmod.Ident("A U Thor", "author@example.org", 0)
    chain = [
        gitmod.NewCommit(
            message="one\n\nbody\n",
            author=ident,
            committer=ident,
            files=(
                gitmod.FileWrite("dir/b.py", "100644", data=b"b = 2\n"),
                gitmod.FileWrite("new.py", "100755", blob=blob),
            ),
        ),
        gitmod.NewCommit(
            message="two\n",
            author=ident,
            committer=ident,
            files=(gitmod.FileWrite("a.py", None), gitmod.FileWrite('odd name "q".py', "100644", data=b"q2\n")),
        ),
    ]
    first, second = repo.write_commits(base, chain, ref="refs/patchtool/test/replay")
    assert repo.out("rev-parse", args=[f"{second}^"]) == first and repo.out("rev-parse", args=[f"{first}^"]) == base
    assert repo.cat_files(first, ["dir/b.py", "new.py", "a.py"]) == {
        "dir/b.py": b"b = 2\n",
        "new.py": b"a = 1\n",
        "a.py": b"a = 1\n",
    }
    assert repo.entries(first, ["new.py"])["new.py"][0] == "100755"
    assert repo.cat_files(second, ["a.py", 'odd name "q".py']) == {"a.py": None, 'odd name "q".py': b"q2\n"}
    assert repo.commit_message(first) == "one\n\nbody"
    # the same chain again: the same commits
    assert repo.write_commits(base, chain, ref="refs/patchtool/test/replay") == [first, second]


def test_format_patch_each_is_each_commits_own_export(tmp_path: Path) -> None:
    """One git process for a chain gives what exporting each commit alone gives, byte for byte:
    a message without a final newline, a file without one, a binary file, a message that holds
    the line git starts each exported message with (its own, --zero-commit's, an earlier commit's),
    and an empty commit (git exports nothing for it: then each is exported alone)."""
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    base = commit(work, {"a.py": "a = 1\n"}, "base")
    repo = gitmod.Repo(work / ".git")
    ident = gitmod.Ident("A U Thor", "author@example.org", 0)
    zero = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"
    steps = [
        ({"a.py": "a = 2"}, "no final newline in the file"),
        ({"b.bin": "\0\1\2 binary\n"}, "binary\n\nno final newline in the message"),
        ({"a.py": "a = 3\n"}, f"fake envelopes\n\n{zero}\nFrom: Someone <x@example.org>\n\nmore\n"),
        ({"c.py": "c\n"}, f"an earlier commit's envelope\n\nFrom {base} Mon Sep 17 00:00:00 2001\n"),
    ]
    chain: list[str] = []
    for files, message in steps:
        write_tree(work, files)
        git(work, "add", "-A")
        tree = git(work, "write-tree").strip()
        parent = chain[-1] if chain else base
        chain.append(repo.commit_tree(tree, [parent], message, author=ident, committer=ident))
    assert repo.format_patch_each(base, chain) == [repo.format_patch(c) for c in chain]
    assert repo.format_patch_each(chain[0], chain[1:]) == [repo.format_patch(c) for c in chain[1:]]
    assert repo.format_patch_each(base, []) == []
    empty = repo.commit_tree(repo.tree_of(chain[-1]), [chain[-1]], "empty\n", author=ident, committer=ident)
    after = repo.commit_tree(repo.tree_of(base), [empty], "back to base\n", author=ident, committer=ident)
    both = [*chain, empty, after]
    assert repo.format_patch(empty) == ""
    assert repo.format_patch_each(base, both) == [repo.format_patch(c) for c in both]


def test_renames_are_found_once_and_remembered(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    old = commit(work, {"a/old.py": body("named"), "keep.py": body("keep")}, "1.0")
    new = commit(
        work, {"b/new.py": body("named").replace("return 0", "return 0  # moved")}, "1.1", remove=("a/old.py",)
    )
    repo = gitmod.Repo(work / ".git")
    old_tree, new_tree = repo.tree_of(old), repo.tree_of(new)
    first = Renames(repo, old_tree, new_tree)
    assert first("a/old.py") == "b/new.py" and first("keep.py") is None
    assert (repo.git_dir / "patchtool" / "renames" / f"{old_tree}-{new_tree}.json").is_file()
    # a later command reads the answers; git is not asked again
    asked: list[str] = []
    later = Renames(repo, old_tree, new_tree)
    later.repo = type(
        "NoGit",
        (),
        {
            "git_dir": repo.git_dir,  # type: ignore[assignment]
            "renames": lambda *a: asked.append("asked") or {},
        },
    )()
    assert later("a/old.py") == "b/new.py" and later("keep.py") is None and asked == []


def test_cat_blobs_reads_past_a_spec_that_is_not_a_blob(tmp_path: Path) -> None:
    """A tree among the specs is None, and the blob after it is still read right."""
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    base = commit(work, {"dir/b.py": "b = 1\n", "a.py": "a = 1\n"}, "base")
    repo = gitmod.Repo(work / ".git")
    assert repo.cat_blobs([f"{base}:dir", f"{base}:a.py", f"{base}:nope"]) == {
        f"{base}:dir": None,
        f"{base}:a.py": b"a = 1\n",
        f"{base}:nope": None,
    }


def test_reader_reads_past_missing_paths_with_spaces(tmp_path: Path) -> None:
    """A missing ``rev:path`` whose path has spaces (git answers ``<spec> missing``, more than three
    words) is None, and the reader goes on reading the right objects after it."""
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    base = commit(work, {"a b.py": "ab\n", "c.py": "c\n", "dir/x y": "xy\n"}, "base")
    repo = gitmod.Repo(work / ".git")
    specs = [
        f"{base}:no such file.py",
        f"{base}:a b.py",
        f"{base}:blob 12",
        f"{base}:c.py",
        f"{base}:dir/x y z",
        f"{base}:dir/x y",
        "0" * 40,
        f"{base}:two\nlines",
    ]
    assert repo.cat_blobs(specs) == {
        specs[0]: None,
        specs[1]: b"ab\n",
        specs[2]: None,
        specs[3]: b"c\n",
        specs[4]: None,
        specs[5]: b"xy\n",
        specs[6]: None,
        specs[7]: None,
    }
    assert repo.cat_files(base, ["gone 1 2.py", "c.py"]) == {"gone 1 2.py": None, "c.py": b"c\n"}


def test_listed_paths_are_git_s_own_spelling_not_its_quoted_one(tmp_path: Path) -> None:
    """A path git would print quoted (a tab, a non-ASCII name) comes back as it is in the tree, the
    same from the listing under a prefix as from the whole tree's."""
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    names = ["args/tab\there.py", "args/caf\u00e9.py", "args/plain.py", "other.py"]
    base = commit(work, dict.fromkeys(names, "x\n"), "base")
    repo = gitmod.Repo(work / ".git")
    tree = repo.tree_of(base)
    assert sorted(repo.ls_files(tree, "args")) == sorted(names[:3])
    assert sorted(repo.tree_paths(tree)) == sorted(names)


def test_git_ignores_the_callers_git_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from a git hook, patchtool inherits GIT_DIR, GIT_INDEX_FILE, GIT_WORK_TREE ...: its git
    commands and its object reader still use the repository and index they name themselves."""
    work, other = tmp_path / "w", tmp_path / "other"
    for path in (work, other):
        path.mkdir()
        git(path, "init", "-q")
    base = commit(work, {"a.py": "a = 1\n"}, "base")
    commit(other, {"elsewhere.py": "no\n"}, "other")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "hook-index"))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(other / ".git" / "objects"))
    repo = gitmod.Repo(work / ".git")
    assert repo.resolve("HEAD") == base
    assert repo.cat_files(base, ["a.py"]) == {"a.py": b"a = 1\n"}
    with repo.temporary_index(base) as index:
        assert index.write_tree() == repo.tree_of(base)
    tree = gitmod.Worktree(work)
    assert tree.head() == base and tree.status() == ""
    (work / "b.py").write_text("b = 2\n")
    tree.stage_all()
    assert tree.status().splitlines() == ["A  b.py"]  # staged in work's own index, not the hook's
    assert not (tmp_path / "hook-index").exists()


def test_a_commit_reads_the_same_through_every_accessor(tmp_path: Path) -> None:
    """Every commit read goes through the one object reader, as git reads it: a commit git
    replaces (``git replace``) is its replacement for commit_info as for tree_of and
    commit_message, by SHA-1 and by full ref, never its raw object for one of them."""
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    old = commit(work, {"a.py": "a = 1\n"}, "old")
    new = commit(work, {"a.py": "a = 2\n"}, "new")
    git(work, "tag", "t", old)
    git(work, "replace", old, new)
    repo = gitmod.Repo(work / ".git")
    tree = git(work, "rev-parse", f"{new}^{{tree}}").strip()
    for rev in (old, "refs/tags/t"):
        assert repo.commit_info(rev) == (old, tree, "new\n")
        assert (repo.tree_of(rev), repo.commit_message(rev)) == (tree, "new")


def test_a_memo_that_cannot_be_written_is_only_not_remembered(tmp_path: Path) -> None:
    """A cache patchtool cannot write to (here its memo directory is a file) costs a recomputation
    next time; it never fails the command, reading commands such as status included."""
    from patchtool.git import memo

    git_dir = tmp_path / "repo.git"
    git_dir.mkdir()
    (git_dir / "patchtool").write_text("not a directory")
    memo.remember(git_dir, "applies", "k", ["x"])
    assert memo.recall(git_dir, "applies", "k") is None


def test_sides_of_different_file_types_are_never_merged_as_text(tmp_path: Path) -> None:
    """Where upstream and the patch made a path files of different types, or both changed a link's
    target, git's merge-ort conflicts; the merge does too, upstream's file kept at its path. The
    patch of a series cannot carry a link (the validator refuses one), so these sides come from
    commits made here, the mirror of the cases the rebase tests reach through the CLI."""
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")

    def link(path: str, target: str) -> None:
        (work / path).unlink(missing_ok=True)
        (work / path).symlink_to(target)

    write_tree(work, {"f": "t.txt\n", "t.txt": "t\n", "u.txt": "u\n", "v.txt": "v\n"})
    link("l", "t.txt")
    old_base = commit(work, {}, "1.0")
    link("f", "t.txt")  # the patch makes f a link, upstream edits the file
    link("l", "v.txt")  # both change l's target
    link("n", "t.txt")  # both add n, the patch a link
    patch = commit(work, {}, "the patch")
    git(work, "checkout", "-q", old_base)
    link("l", "u.txt")
    new_base = commit(work, {"f": "t.txt\nmore\n", "n": "a file\n"}, "1.1")
    merge_tree = subprocess.run(
        ["git", "merge-tree", "--write-tree", new_base, patch], cwd=work, capture_output=True, text=True, check=False
    ).stdout
    assert "CONFLICT (distinct types): f had different types" in merge_tree
    assert "CONFLICT (distinct types): n had different types" in merge_tree
    assert "CONFLICT (content): Merge conflict in l" in merge_tree
    repo = gitmod.Repo(work / ".git")
    ((_, changes),) = repo.changes(old_base, patch)
    with repo.reader() as reader:
        ws = Workspace(
            repo,
            reader,
            new_base,
            [p for c in changes for p in (c.old_path, c.new_path) if p],
            Renames(repo, repo.tree_of(old_base), repo.tree_of(new_base)),
        )
        merged = merge_patch(ws, changes, LABELS)
    assert merged.files == {}
    found = {
        c.path: (c.kind, c.in_the_way, c.data, tuple(s.mode if s else None for s in (c.base, c.ours, c.theirs)))
        for c in merged.conflicts
    }
    assert found == {
        "f~patch": ("distinct types", "f", b"t.txt", (None, None, "120000")),
        "n~patch": ("distinct types", "n", b"t.txt", (None, None, "120000")),
        "l": ("content", None, None, ("120000", "120000", "120000")),
    }  # no markers written into a link
    assert next(c.message for c in merged.conflicts if c.path == "f~patch") == (
        "CONFLICT (distinct types): f is a regular file upstream and a symlink in the patch; "
        "the patch's file is left at f~patch"
    )


def test_binary_sides_conflict_as_binary_with_no_markers_written(tmp_path: Path) -> None:
    """Upstream and the patch both change a binary file: merge-ort cannot merge it ("Cannot merge
    binary files"), and neither does the merge; the conflict is of its own kind, so nothing reads
    the sides as text (``in_other_form`` compares normal forms of source)."""
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")

    def blob(text: str) -> dict[str, str]:
        (work / "b.bin").write_bytes(b"\0" + text.encode())
        return {}

    old_base = commit(work, blob("base"), "1.0")
    patch = commit(work, blob("patch"), "the patch")
    git(work, "checkout", "-q", old_base)
    new_base = commit(work, blob("upstream"), "1.1")
    merge_tree = subprocess.run(
        ["git", "merge-tree", "--write-tree", new_base, patch], cwd=work, capture_output=True, text=True, check=False
    ).stdout
    assert "CONFLICT (content): Merge conflict in b.bin" in merge_tree
    repo = gitmod.Repo(work / ".git")
    ((_, changes),) = repo.changes(old_base, patch)
    with repo.reader() as reader:
        ws = Workspace(repo, reader, new_base, ["b.bin"], Renames(repo, repo.tree_of(old_base), repo.tree_of(new_base)))
        merged = merge_patch(ws, changes, LABELS)
    (conflict,) = merged.conflicts
    assert (conflict.path, conflict.kind, conflict.message, conflict.data) == (
        "b.bin",
        ConflictKind.BINARY,
        "CONFLICT (binary): Merge conflict in b.bin",
        None,
    )
    assert all(side is not None for side in (conflict.base, conflict.ours, conflict.theirs))


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_a_content_merge_is_one_git_process_and_leaves_the_cache_and_tmp_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two files where all three sides differ: each content merge is one git process (merge-tree
    where merge-file cannot diff with histogram, before git 2.42; else merge-file), never a
    fast-import and a cat-file beside it; the results are merge-ort's; the cache's objects are
    as they were and the throwaway store is gone when the workspace closes."""
    lines = "".join(f"line {i}\n" for i in range(40))
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    base = commit(work, {"a.txt": lines, "b.txt": lines.replace("line", "row")}, "1.0")
    patch = commit(
        work, {"a.txt": lines.replace("line 3\n", "LINE 3\n"), "b.txt": "top\n" + lines.replace("line", "row")}, "p"
    )
    git(work, "checkout", "-q", base)
    upstream = commit(
        work, {"a.txt": lines.replace("line 35\n", "LINE 35\n"), "b.txt": lines.replace("line", "row") + "end\n"}, "1.1"
    )
    tree = git(work, "merge-tree", "--write-tree", upstream, patch).split("\n", 1)[0]
    expected = {path: git(work, "show", f"{tree}:{path}") for path in ("a.txt", "b.txt")}
    repo = gitmod.Repo(work / ".git")
    changes = repo.diff_raw(base, patch)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    log = tmp_path / "git.log"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "git").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {shutil.which("git")} "$@"\n')
    (shim / "git").chmod(0o755)
    with repo.reader() as reader:
        with Workspace(repo, reader, upstream, ["a.txt", "b.txt"], lambda path: None) as ws:
            merge_patch(ws, changes, LABELS, commit=patch)  # the first: git is asked what merge-file knows
        before = _listing(work / ".git" / "objects")
        monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
        with Workspace(repo, reader, upstream, ["a.txt", "b.txt"], lambda path: None) as ws:
            merged = merge_patch(ws, changes, LABELS, commit=patch)
            assert merged.clean and sorted(merged.files) == ["a.txt", "b.txt"]
            assert {path: ws.data(f).decode() for path, f in merged.files.items() if f} == expected
        monkeypatch.setenv("PATH", os.environ["PATH"].split(":", 1)[1])
    ran = log.read_text().splitlines()
    assert len(ran) == 2 and all(" merge-tree " in f" {line} " or " merge-file " in f" {line} " for line in ran), ran
    assert _listing(work / ".git" / "objects") == before
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_a_conflict_in_a_crlf_file_conflicts_as_merge_ort_says(tmp_path: Path, eol: str) -> None:
    """The patch and upstream change the same line of a file: merge-ort conflicts, whatever the
    file's line ends; the result carries patchtool's labels on its markers, in the file's own
    line ends (found by an attack: a CRLF file's markers were not seen, and the conflict was taken
    for a clean merge with the markers in the patch)."""
    text = "".join(f"line {i}{eol}" for i in range(12))
    work = tmp_path / "w"
    work.mkdir()
    git(work, "init", "-q")
    git(work, "config", "core.autocrlf", "false")
    base = commit(work, {"a.txt": text}, "1.0")
    patch = commit(work, {"a.txt": text.replace("line 5", "PATCH 5")}, "p")
    git(work, "checkout", "-q", base)
    upstream = commit(work, {"a.txt": text.replace("line 5", "UPSTREAM 5")}, "1.1")
    res = subprocess.run(
        ["git", "merge-tree", "--write-tree", upstream, patch], cwd=work, capture_output=True, text=True
    )
    assert res.returncode == 1 and "CONFLICT (content): Merge conflict in a.txt" in res.stdout
    repo = gitmod.Repo(work / ".git")
    with repo.reader() as reader, Workspace(repo, reader, upstream, ["a.txt"], lambda path: None) as ws:
        merged = merge_patch(ws, repo.diff_raw(base, patch), LABELS, commit=patch)
        assert not merged.clean
        assert [(c.path, c.kind) for c in merged.conflicts] == [("a.txt", ConflictKind.CONTENT)]
        data = merged.conflicts[0].data
        assert data is not None
        lines = data.decode().split("\n")
    markers = [line for line in lines if line[:7] in ("<<<<<<<", "=======", ">>>>>>>")]
    assert markers == [
        f"<<<<<<< {LABELS[0]}{eol.rstrip(chr(10))}",
        f"======={eol.rstrip(chr(10))}",
        f">>>>>>> {LABELS[2]}{eol.rstrip(chr(10))}",
    ], markers


@pytest.mark.parametrize("style", ["merge", "diff3", "zdiff3"])
def test_a_content_line_that_looks_like_a_marker_is_kept(tmp_path: Path, style: str) -> None:
    """A line of the file that reads like merge-tree's base marker, outside the conflict, stays as
    it is, as git merge-file keeps it (found by an attack: the base commit's id was predictable and
    every such line was relabelled). The sides' commits carry a secret, and only a conflict's own
    markers are relabelled."""
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "r")], check=True)
    base = b"a\nb\nc\nd\ne\nf\ng\n"
    with gitmod.FileMerger(gitmod.Repo(tmp_path / "r")) as merger:
        _, base_commit, _ = merger._sides(base, base, base)  # the id merge-tree would print
        look = b"||||||| " + base_commit[:7].encode() + b"\n"
        ours, theirs = b"a\nB-up\nc\nd\ne\nf\n" + look + b"g\n", b"a\nB-patch\nc\nd\ne\nf\ng\n"
        merged, count = merger.merge(ours, base, theirs, ("ours", "base", "theirs"), style=style)
    assert count == 1 and look in merged, merged
    assert merged.count(b"<<<<<<< ours\n") == 1 and merged.count(b">>>>>>> theirs\n") == 1
