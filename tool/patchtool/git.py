"""The only module that runs git. No git object leaves it: callers get SHAs, paths and bytes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from .errors import GitError

FIXED_IDENT = ("patchtool", "patchtool@localhost")


def _environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """git isolated from the user's configuration and from inherited GIT_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               LC_ALL="C", LANGUAGE="C")
    if extra:
        env.update(extra)
    return env


@dataclasses.dataclass(frozen=True, slots=True)
class Ident:
    name: str
    email: str
    timestamp: int = 0
    tz: str = "+0000"

    def line(self) -> str:
        return f"{self.name} <{self.email}> {self.timestamp} {self.tz}"


@dataclasses.dataclass(frozen=True, slots=True)
class MergeResult:
    tree: str
    clean: bool
    conflicted: tuple[str, ...]
    messages: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ApplyResult:
    ok: bool
    stderr: str


class Repo:
    """A git repository addressed by its git directory (bare or not)."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir

    @classmethod
    def init_bare(cls, path: Path) -> Repo:
        path.mkdir(parents=True, exist_ok=True)
        if not (path / "HEAD").exists():
            run(["git", "init", "--quiet", "--bare", str(path)])
            repo = cls(path)
            repo.git("config", "core.logAllRefUpdates", "false")
            repo.git("config", "gc.auto", "0")
        return cls(path)

    def git(self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None,
            check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
        return run(["git", f"--git-dir={self.git_dir}", *args], input=input, env=env, check=check,
                   cwd=cwd)

    def out(self, *args: str, env: dict[str, str] | None = None) -> str:
        return self.git(*args, env=env).stdout.decode().strip()

    def resolve(self, rev: str) -> str | None:
        res = self.git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        return res.stdout.decode().strip() if res.returncode == 0 else None

    def tree_of(self, rev: str) -> str:
        return self.out("rev-parse", "--verify", f"{rev}^{{tree}}")

    def has_object(self, sha: str) -> bool:
        return self.git("cat-file", "-e", sha, check=False).returncode == 0

    def commit_message(self, rev: str) -> str:
        return self.out("log", "-1", "--format=%B", rev)

    def update_ref(self, ref: str, new: str, old: str | None = None) -> None:
        """Move ``ref`` to ``new``; ``old=""`` means it must not exist yet."""
        args = ["update-ref", ref, new] + ([old] if old is not None else [])
        self.git(*args)

    def delete_ref(self, ref: str) -> None:
        self.git("update-ref", "-d", ref, check=False)

    def fast_import(self, stream: Iterable[bytes]) -> None:
        """Feed a fast-import stream; refs move only when the whole stream is in."""
        cmd = ["git", f"--git-dir={self.git_dir}", "fast-import", "--quiet", "--date-format=raw",
               "--done"]
        with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=_environment()) as proc:
            assert proc.stdin is not None and proc.stderr is not None
            try:
                for chunk in stream:
                    proc.stdin.write(chunk)
                proc.stdin.close()
            except BaseException:
                proc.kill()
                raise
            err = proc.stderr.read()
            if proc.wait() != 0:
                raise GitError(f"git fast-import failed: {err.decode(errors='replace').strip()}")

    def cat_files(self, tree: str, paths: Sequence[str]) -> dict[str, bytes | None]:
        """Contents of ``paths`` in ``tree`` (None where absent), one git process for all."""
        found = self.cat_blobs([f"{tree}:{p}" for p in paths])
        return {p: found[f"{tree}:{p}"] for p in paths}

    def cat_blobs(self, specs: Sequence[str]) -> dict[str, bytes | None]:
        """Contents of ``rev:path`` specs from any trees (None where absent), one git process."""
        specs = list(dict.fromkeys(specs))
        if not specs:
            return {}
        query = "".join(f"{s}\n" for s in specs).encode()
        out = self.git("cat-file", "--batch", input=query).stdout
        result: dict[str, bytes | None] = {}
        pos = 0
        for path in specs:
            nl = out.index(b"\n", pos)
            header = out[pos:nl].split()
            pos = nl + 1
            if header[-1] == b"missing" or header[1] != b"blob":
                result[path] = None
                continue
            size = int(header[2])
            result[path] = out[pos:pos + size]
            pos += size + 1
        return result

    def merge_tree(self, ours: str, theirs: str) -> MergeResult:
        """merge-ort in memory (no worktree): the result tree, and the conflicted paths if any."""
        res = self.git("merge-tree", "--write-tree", "--name-only", "--messages", "-z", ours, theirs,
                       check=False)
        if res.returncode not in (0, 1):
            raise GitError(f"git merge-tree failed: {res.stderr.decode(errors='replace').strip()}")
        out = res.stdout.decode(errors="replace")
        head, _, rest = out.partition("\0")
        files, _, messages = rest.partition("\0\0")
        conflicted = tuple(f for f in files.split("\0") if f) if res.returncode == 1 else ()
        return MergeResult(tree=head.strip(), clean=res.returncode == 0, conflicted=conflicted,
                           messages=_merge_messages(messages))

    def diff(self, old: str, new: str, *, context: int = 3) -> str:
        res = self.git("diff", "--no-color", "--no-ext-diff", "-M", f"-U{context}", old, new)
        return res.stdout.decode("utf-8", errors="replace")

    def format_patch(self, commit: str) -> str:
        """The canonical export of one commit: git's own format, without the Date line."""
        text = self.git("format-patch", "-1", commit, "--stdout", "--zero-commit", "--full-index",
                        "--no-signature", "--no-stat", "--no-numbered").stdout.decode("utf-8")
        head, sep, rest = text.partition("\n\n")
        head = "\n".join(line for line in head.split("\n") if not line.startswith("Date: "))
        return head + sep + rest

    def format_patches(self, base: str, tip: str) -> list[str]:
        """The canonical export of every commit in base..tip, oldest first, in one git process."""
        text = self.git("format-patch", f"{base}..{tip}", "--stdout", "--zero-commit", "--full-index",
                        "--no-signature", "--no-stat", "--no-numbered").stdout.decode("utf-8")
        marker = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        out = []
        chunks = text.split(marker)[1:]
        for i, chunk in enumerate(chunks):
            if i + 1 < len(chunks) and chunk.endswith("\n\n"):
                chunk = chunk[:-1]  # the blank line git puts between messages in one mbox
            head, sep, rest = (marker + chunk).partition("\n\n")
            head = "\n".join(line for line in head.split("\n") if not line.startswith("Date: "))
            out.append(head + sep + rest)
        return out

    def range_diff(self, old: str, new: str) -> str:
        res = self.git("range-diff", "--no-color", old, new, check=False)
        return res.stdout.decode("utf-8", errors="replace")

    def ls_files(self, tree: str, prefix: str) -> list[str]:
        """Paths of the blobs under ``prefix`` in ``tree``."""
        out = self.out("ls-tree", "-r", "--name-only", tree, "--", prefix)
        return [p for p in out.splitlines() if p]

    def commit_tree(self, tree: str, parents: Sequence[str], message: str, *, author: Ident,
                    committer: Ident) -> str:
        env = {"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email,
               "GIT_AUTHOR_DATE": f"@{author.timestamp} {author.tz}",
               "GIT_COMMITTER_NAME": committer.name, "GIT_COMMITTER_EMAIL": committer.email,
               "GIT_COMMITTER_DATE": f"@{committer.timestamp} {committer.tz}"}
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        return self.git(*args, input=message.encode(), env=env).stdout.decode().strip()

    @contextlib.contextmanager
    def temporary_index(self, treeish: str) -> Iterator[Index]:
        fd, name = tempfile.mkstemp(prefix="index.", dir=self.git_dir)
        os.close(fd)
        os.unlink(name)
        index = Index(self, Path(name))
        try:
            self.git("read-tree", treeish, env=index.env)
            yield index
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def worktree_add(self, path: Path, commit: str) -> None:
        self.git("worktree", "add", "--quiet", "--detach", str(path), commit)

    def worktree_move(self, src: Path, dst: Path) -> None:
        self.git("worktree", "move", str(src), str(dst))

    def worktree_remove(self, path: Path) -> None:
        self.git("worktree", "remove", "--force", "--force", str(path), check=False)
        self.git("worktree", "prune", check=False)

    def is_worktree(self, path: Path) -> bool:
        listing = self.out("worktree", "list", "--porcelain")
        return any(line == f"worktree {path}" for line in listing.splitlines())

    def fetch(self, url: str, refspec: str) -> None:
        res = self.git("fetch", "--quiet", "--no-tags", url, refspec, check=False)
        if res.returncode != 0:
            raise GitError(f"git fetch {url} {refspec} failed: {res.stderr.decode(errors='replace').strip()}")

    # -- reading trees (used to build wheels) ------------------------------------------------
    def diff_tree(self, old: str, new: str) -> list[TreeChange]:
        """Every blob that differs between two trees (no rename detection), in path order."""
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", old, new).stdout
        fields = out.split(b"\0")
        changes = []
        for meta, path in zip(fields[0:-1:2], fields[1::2], strict=False):
            old_mode, new_mode, _, _, status = meta.decode().lstrip(":").split()
            changes.append(TreeChange(status=status[0], path=path.decode("utf-8", "surrogateescape"),
                                      old_mode=old_mode, new_mode=new_mode))
        return changes

    def tree_paths(self, tree: str) -> list[str]:
        """Every blob path in ``tree``."""
        out = self.git("ls-tree", "-r", "-z", "--name-only", tree).stdout
        return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]

    def commit_time(self, rev: str) -> int:
        """The committer timestamp of ``rev`` (seconds since the epoch)."""
        return int(self.out("show", "-s", "--format=%ct", rev))


@dataclasses.dataclass(frozen=True, slots=True)
class TreeChange:
    status: str  # "A" added, "D" deleted, "M" modified, "T" type changed
    path: str
    old_mode: str  # "000000" when added
    new_mode: str  # "000000" when deleted


class Index:
    """A temporary index file: apply patches without touching any working tree."""

    def __init__(self, repo: Repo, path: Path) -> None:
        self.repo = repo
        self.path = path
        self.env = {"GIT_INDEX_FILE": str(path)}

    def apply(self, patches: Sequence[Path], *, reverse: bool = False,
              check: bool = False, verbose: bool = False) -> ApplyResult:
        args = ["apply", "--cached"] + (["--verbose"] if verbose else [])
        if reverse:
            args.append("--reverse")
        if check:
            args.append("--check")
        res = self.repo.git(*args, *map(str, patches), env=self.env, check=False)
        return ApplyResult(res.returncode == 0, res.stderr.decode(errors="replace"))

    def apply_text(self, patch: str, *, reverse: bool = False) -> ApplyResult:
        args = ["apply", "--cached", "--check"] + (["--reverse"] if reverse else [])
        res = self.repo.git(*args, input=patch.encode(), env=self.env, check=False)
        return ApplyResult(res.returncode == 0, res.stderr.decode(errors="replace"))

    def write_tree(self) -> str:
        return self.repo.out("write-tree", env=self.env)

    def read_tree(self, treeish: str) -> None:
        self.repo.git("read-tree", treeish, env=self.env)


def _merge_messages(raw: str) -> tuple[str, ...]:
    """merge-tree -z messages: records of <count> NUL <paths...> NUL <type> NUL <message> NUL."""
    parts = raw.split("\0")
    out = []
    i = 0
    while i < len(parts):
        if not parts[i].strip().isdigit():
            i += 1
            continue
        count = int(parts[i])
        i += 1 + count  # skip the paths
        if i + 1 < len(parts):
            out.append(parts[i + 1].strip())  # the human message; parts[i] is its type
        i += 2
    return tuple(m for m in out if m)


def run(cmd: Sequence[str], *, input: bytes | None = None, env: dict[str, str] | None = None,
        check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        res = subprocess.run(list(cmd), input=input, capture_output=True, env=_environment(env),
                             cwd=cwd)
    except FileNotFoundError:
        raise GitError("git is not installed or not on PATH") from None
    if check and res.returncode != 0:
        raise GitError(f"{' '.join(cmd[:3])} ... failed ({res.returncode}): "
                       f"{res.stderr.decode(errors='replace').strip()}")
    return res
