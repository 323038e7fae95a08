"""The user's side of git: a checked-out tree (a checkout branch's worktree, a rebase's conflict
worktree, the patch repository itself), and who the user is to git."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchtool import fsroot, paths
from patchtool.errors import GitError, InvalidInput, UsageError
from patchtool.git.command import Runner, discover
from patchtool.git.filemerge import CONFLICT_STYLES
from patchtool.git.stream import Ident


def in_work_tree(path: Path) -> bool:
    """Whether ``path`` lies in a work tree by patchtool's discovery rule (``command.discover``:
    its own repository, or one above it; never a directory shaped like a bare repository)."""
    return discover(path) is not None


def init_repository(path: Path) -> None:
    """``git init`` of ``path``."""
    Runner().run("init", "--quiet", args=[str(path)])


def _runner_for(path: Path, found: tuple[Path, Path] | None, *, user: bool = False) -> Runner:
    """A runner for the work tree ``path`` lies in, naming the git directory and top ``discover``
    found for it, run from ``path``; with no work tree there (None), one that names no repository
    (its commands fail)."""
    if found is None:
        return Runner(cwd=path, user=user)
    git_dir, top = found
    return Runner(git_dir=git_dir, work_tree=top, cwd=path, user=user)


class Worktree:
    """A checked-out tree (the patch repository, a checkout's or a rebase's worktree): its commands
    run there, naming the git directory patchtool's own rule finds for it (``discover``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._found = discover(path)
        self._runner = _runner_for(path, self._found)

    def status(self) -> str:
        """``git status --porcelain``: empty when nothing is uncommitted."""
        return self._runner.out("status", "--porcelain")

    def head(self) -> str:
        return self._runner.out("rev-parse", args=["HEAD"])

    def in_progress(self) -> tuple[str, str] | None:
        """The git command stopped part way here, as ``git status`` finds it: ("rebase", the ref of
        the branch it rebases), ("merge" | "cherry-pick" | "revert", ""), or None."""
        if self._found is None:
            return None  # no work tree here (a bare repository's own directory): nothing in progress
        git_dir = self._found[0]
        for state in ("rebase-merge", "rebase-apply"):
            if (git_dir / state).is_dir():
                try:
                    head = paths.read_inside(git_dir, f"{state}/head-name", limit=4096)
                except (FileNotFoundError, InvalidInput):
                    head = b""
                return "rebase", head.decode("utf-8", "replace").strip()
        for name, command in (("MERGE_HEAD", "merge"), ("CHERRY_PICK_HEAD", "cherry-pick"), ("REVERT_HEAD", "revert")):
            if os.path.lexists(git_dir / name):
                return command, ""
        return None

    def reset(self, mode: str, commit: str, *, reason: str, committer: tuple[str, str]) -> str | None:
        """``git reset --quiet <mode> <commit>``: None, or git's complaint when it refused."""
        env = {"GIT_REFLOG_ACTION": reason, "GIT_COMMITTER_NAME": committer[0], "GIT_COMMITTER_EMAIL": committer[1]}
        res = self._runner.run("reset", "--quiet", mode, args=[commit], env=env, check=False)
        return res.stderr.strip() if res.returncode else None

    def sparse_checkout(self, files: Sequence[str]) -> None:
        """Check out just ``files`` (a worktree added without a checkout)."""
        self._runner.run("sparse-checkout set", "--no-cone", args=[f"/{f}" for f in files])
        self._runner.run("checkout", "-q")

    def reuse_sparse(self, rev: str, files: Sequence[str]) -> bool:
        """Turn this sparse worktree (one :meth:`sparse_checkout` made) into a fresh one at ``rev``
        holding just ``files``, in two git processes instead of removing it and adding a new one:
        every work file goes (what a user left there included), a forced checkout of ``rev`` resets
        HEAD and the index, and the new patterns check out ``files``. False when this is not a
        worktree git can check out in any more (then remove it and add one)."""
        if not (self.path / ".git").is_file():
            return False
        disk = fsroot.Root(self.path)
        for child in self.path.iterdir():
            if child.name != ".git":
                disk.rmtree(child.name)  # a link is removed itself, never followed
        if self._runner.run("checkout", "-q", "-f", "--detach", args=[rev], check=False).returncode:
            return False
        self._runner.run("sparse-checkout set", "--no-cone", args=[f"/{f}" for f in files])
        return True

    def stage_all(self, leave_out: Sequence[str] = ()) -> None:
        """``git add -A`` but for the paths ``leave_out``; in a sparse worktree a file added outside
        its paths too (``--sparse``: git refuses it otherwise), while what it left out stays out."""
        excluded = [f":(exclude,literal){p}" for p in leave_out]
        self._runner.run("add", "-A", "--sparse", paths=[".", *excluded] if excluded else None)

    def write_tree(self) -> str:
        return self._runner.out("write-tree")

    def tree_now(self, *, staged_only: bool) -> str:
        """The tree a commit made here now would record: the index (``staged_only``), or every file
        as it is, as ``git commit`` after ``git add -A`` would, staged on a copy of the index in the
        worktree's git directory, so the user's own index is left as it is."""
        if staged_only:
            return self.write_tree()
        git_dir = Path(self._runner.out("rev-parse", "--absolute-git-dir"))
        fd, name = tempfile.mkstemp(prefix="index.patchtool.", dir=git_dir)
        os.close(fd)
        try:
            if (git_dir / "index").is_file():
                shutil.copyfile(git_dir / "index", name)
            else:
                os.unlink(name)
            env = {"GIT_INDEX_FILE": name}
            self._runner.run("add", "-A", env=env, paths=["."])
            return self._runner.out("write-tree", env=env)
        finally:
            if os.path.exists(name):
                os.unlink(name)

    def changed(self) -> dict[str, str]:
        """Every path whose work file or index entry differs from HEAD, unmerged and untracked
        ones included, with its ``git status --porcelain`` code ("UU", " M", "??" ...); nothing
        is staged."""
        out = self._runner.run("status", "--porcelain", "-z", "--no-renames", "--untracked-files=all").stdout
        return {entry[3:].decode("utf-8", "surrogateescape"): entry[:2].decode() for entry in out.split(b"\0") if entry}

    def write_blob(self, data: bytes) -> str:
        """``data`` as a blob in the repository's object store: its SHA."""
        return self._runner.run("hash-object", "-w", "--stdin", input=data).stdout.decode().strip()

    def record_unmerged(self, conflicts: Mapping[str, Sequence[tuple[int, str, str]]]) -> None:
        """Record each path of ``conflicts`` in the index as git's own merges leave a conflict:
        no stage 0, and one entry per side that has the file, ``(stage, mode, sha)`` with stage 1
        the base, 2 ours, 3 theirs, so ``git ls-files -u``, ``status``, ``mergetool`` and
        ``checkout --conflict`` see it. The work files are left as they are."""
        lines = []
        for path, sides in conflicts.items():
            zero = "0" * len(sides[0][2]) if sides else "0" * 40
            lines.append(f"0 {zero}\t{path}")  # a mode-0 entry removes the path's stage 0 first
            lines += [f"{mode} {sha} {stage}\t{path}" for stage, mode, sha in sorted(sides)]
        if lines:
            data = "".join(f"{line}\0" for line in lines).encode("utf-8", "surrogateescape")
            self._runner.run("update-index", "-z", "--index-info", input=data)

    def commit_empty(self, message: str, *, author: Ident, committer: Ident) -> None:
        """A commit on HEAD that changes nothing, by ``author`` and ``committer``."""
        self._runner.run(
            "commit",
            "--allow-empty",
            "-q",
            f"--message={message}",
            env={**author.env("AUTHOR"), **committer.env("COMMITTER")},
        )

    def apply_rejecting(self, patch: Path) -> None:
        """``git apply --reject``: what applies is applied, the rest left in ``.rej`` files."""
        self._runner.run("apply", "--reject", args=[str(patch.absolute())], check=False)

    def tracked(self, pathspec: str) -> list[str] | None:
        """The files git tracks under ``pathspec``; None when this is not in a git work tree."""
        res = self._runner.run("ls-files", "-z", paths=[pathspec], check=False)
        if res.returncode != 0:
            return None
        return [p.decode("utf-8", "replace") for p in res.stdout.split(b"\0") if p]


def ref_format_ok(ref: str) -> bool:
    """Whether git accepts ``ref`` as a ref name (``git check-ref-format``)."""
    try:
        return Runner().run("check-ref-format", args=[ref], check=False).returncode == 0
    except GitError:  # a name that starts with a dash, which check-ref-format would read as an option
        return False


_IDENT_RE = re.compile(r"^(.*) <(.*)> (\d+) ([+-]\d{4})$")


def conflict_style(cwd: Path) -> str:
    """The user's ``merge.conflictStyle`` as git in ``cwd`` reads it (the repository's
    configuration, then their own): "merge", "diff3" or "zdiff3"; "merge" when unset or unknown."""
    res = _runner_for(cwd, discover(cwd), user=True).run("config", "--get", args=["merge.conflictStyle"], check=False)
    style = res.stdout.decode("utf-8", "replace").strip().lower() if res.returncode == 0 else ""
    return style if style in CONFLICT_STYLES else "merge"


def user_idents(cwd: Path) -> tuple[Ident, Ident]:
    """(author, committer) as ``git commit`` in ``cwd`` would record them for the user: their
    GIT_AUTHOR_*/GIT_COMMITTER_* variables, then user.name/user.email from the repository's and
    their own configuration. The one git call that sees the user's configuration and identity
    variables (every other one is isolated from them); UsageError with git's own words when git
    does not know who the user is."""
    runner = _runner_for(cwd, discover(cwd), user=True)
    idents = []
    for var in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
        res = runner.run("var", args=[var], check=False)
        m = _IDENT_RE.match(res.stdout.decode("utf-8", "replace").strip())
        if res.returncode or m is None:
            said = res.stderr.strip() or f"git var {var} failed"
            raise UsageError(
                f"git does not know who you are, so it cannot make the commit: {said}",
                hint='git config --global user.name "Your Name" && git config --global user.email you@example.com',
            )
        idents.append(Ident(m.group(1), m.group(2), int(m.group(3)), m.group(4)))
    return idents[0], idents[1]
