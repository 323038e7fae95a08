"""The only module that runs git. No git object leaves it: callers get SHAs, paths and bytes."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from patchtool.errors import GitError, UsageError
from patchtool.paths import tree_path_problem

FIXED_IDENT = ("patchtool", "patchtool@localhost")
T = TypeVar("T")


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

    def commit_info(self, rev: str) -> tuple[str, str, str] | None:
        """(commit, tree, message) of ``rev`` in one process; None when it does not exist."""
        res = self.git("log", "-1", "--no-walk", "--format=%H%x00%T%x00%B", rev, "--", check=False)
        if res.returncode:
            return None
        commit, tree, message = res.stdout.decode("utf-8", "replace").split("\0", 2)
        return commit, tree, message

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

    def fast_import(self, stream: Iterable[bytes], *options: str) -> None:
        """Feed a fast-import stream; refs move only when the whole stream is in. A crash report
        git leaves behind is removed: its gist is in the error, and a stale one from a killed
        process is swept before the next import."""
        for stale in self.git_dir.glob("fast_import_crash_*"):
            stale.unlink(missing_ok=True)
        cmd = ["git", f"--git-dir={self.git_dir}", "fast-import", "--quiet", "--date-format=raw",
               "--done", *options]
        with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=_environment()) as proc:
            assert proc.stdin is not None and proc.stderr is not None
            try:
                for chunk in stream:
                    proc.stdin.write(chunk)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # git stopped reading: its exit status and stderr say why
            except BaseException:
                proc.kill()
                proc.wait()
                (self.git_dir / f"fast_import_crash_{proc.pid}").unlink(missing_ok=True)
                raise
            err = proc.stderr.read()
            if proc.wait() != 0:
                (self.git_dir / f"fast_import_crash_{proc.pid}").unlink(missing_ok=True)
                lines = [ln for ln in err.decode(errors="replace").splitlines()
                         if not ln.startswith("fast-import: dumping crash report")]
                raise GitError(f"git fast-import failed: {chr(10).join(lines).strip()}")

    def cat_files(self, tree: str, paths: Sequence[str]) -> dict[str, bytes | None]:
        """Contents of ``paths`` in ``tree`` (None where absent), one git process for all."""
        found = self.cat_blobs([f"{tree}:{p}" for p in paths])
        return {p: found[f"{tree}:{p}"] for p in paths}

    def cat_blobs(self, specs: Sequence[str]) -> dict[str, bytes | None]:
        """Contents of ``rev:path`` specs from any trees (None where absent), one git process."""
        with self.reader() as reader:
            return {spec: reader.blob(spec) for spec in dict.fromkeys(specs)}

    def format_patch(self, commit: str) -> str:
        """The canonical export of one commit: git's own format, without the Date line."""
        text = self.git("format-patch", "-1", commit, *_EXPORT).stdout.decode("utf-8")
        patches = _split_patches(text)
        return patches[0] if patches else text  # git exports nothing for an empty commit

    def format_patches(self, base: str, tip: str) -> Pending[list[str]]:
        """The canonical export of every commit in base..tip, oldest first, in one git process
        that runs while the caller goes on."""
        return Pending(["git", f"--git-dir={self.git_dir}", "format-patch", f"{base}..{tip}", *_EXPORT],
                       lambda out: _split_patches(out.decode("utf-8")))

    def range_diff(self, old: str, new: str) -> Pending[str]:
        """``git range-diff old new``, running while the caller goes on."""
        return Pending(["git", f"--git-dir={self.git_dir}", "range-diff", "--no-color", old, new],
                       lambda out: out.decode("utf-8", errors="replace"))

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
        if self.git("worktree", "remove", "--force", "--force", str(path), check=False).returncode:
            self.git("worktree", "prune", check=False)  # a worktree deleted by hand: drop its record

    def prune_worktrees(self) -> None:
        """Forget worktrees whose directories are gone, including one a killed `git worktree add`
        left locked ("initializing"); a worktree someone locked on purpose stays."""
        listing = self.out("worktree", "list", "--porcelain").split("\n\n")
        for block in listing:
            fields = {key: value for key, _, value in (line.partition(" ") for line in block.splitlines())}
            path = fields.get("worktree")
            if path and fields.get("locked") == "initializing" and not Path(path).exists():
                self.git("worktree", "unlock", path, check=False)
        self.git("worktree", "prune", check=False)

    def is_worktree(self, path: Path) -> bool:
        listing = self.out("worktree", "list", "--porcelain")
        return any(line == f"worktree {path}" for line in listing.splitlines())

    def fetch(self, url: str, refspec: str) -> None:
        res = self.git("fetch", "--quiet", "--no-tags", url, refspec, check=False)
        if res.returncode != 0:
            raise GitError(f"git fetch {url} {refspec} failed: {res.stderr.decode(errors='replace').strip()}")

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Repo]:
        """A throwaway repository that borrows this one's objects: fetch into it to look at what a
        remote has, and keep what it fetched only by fetching that from it. This repository gains
        nothing it was not asked to keep, not even the history of a ref that turned out wrong."""
        with tempfile.TemporaryDirectory(prefix="patchtool-scratch-") as tmp:
            scratch = Repo.init_bare(Path(tmp))
            (scratch.git_dir / "objects" / "info" / "alternates").write_text(
                f"{(self.git_dir / 'objects').absolute()}\n")
            yield scratch

    # -- replaying a series in memory (rebase, scan) -----------------------------------------
    @contextlib.contextmanager
    def reader(self) -> Iterator[ObjectReader]:
        reader = ObjectReader(self)
        try:
            yield reader
        finally:
            reader.close()

    def entries(self, treeish: str, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
        """``path -> (mode, sha)`` for those of ``paths`` that are files in ``treeish``."""
        if not paths:
            return {}
        out = self.git("ls-tree", "-z", "--full-tree", treeish, "--", *sorted(set(paths)),
                       env={"GIT_LITERAL_PATHSPECS": "1"}).stdout
        found = {}
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            mode, kind, sha = meta.decode().split()
            if kind == "blob":
                found[path.decode("utf-8", "surrogateescape")] = (mode, sha)
        return found

    def changes(self, base: str, tip: str) -> list[tuple[str, tuple[RawChange, ...]]]:
        """Every commit of base..tip, oldest first, with the files it changes (renames found)."""
        out = self.git("log", "--reverse", "-z", "--raw", "--no-abbrev", "-M", "--format=%x01%H",
                       f"{base}..{tip}").stdout.decode("utf-8", "surrogateescape")
        commits: list[tuple[str, list[RawChange]]] = []
        tokens = out.split("\0")
        i = 0
        while i < len(tokens):
            token = tokens[i].strip("\n")
            i += 1
            if token.startswith("\x01"):
                commits.append((token[1:], []))
            elif token.startswith(":") and commits:
                old_mode, new_mode, old_blob, new_blob, status = token[1:].split()
                paths = [tokens[i]]
                i += 1
                if status[0] in "RC":
                    paths.append(tokens[i])
                    i += 1
                absent = "0" * 40
                commits[-1][1].append(RawChange(
                    status=status[0], old_path=None if status[0] == "A" else paths[0],
                    new_path=None if status[0] == "D" else paths[-1],
                    old_mode=None if old_mode == "000000" else old_mode,
                    new_mode=None if new_mode == "000000" else new_mode,
                    old_blob=None if old_blob == absent else old_blob,
                    new_blob=None if new_blob == absent else new_blob))
        return [(sha, tuple(files)) for sha, files in commits]

    def diff_raw(self, old: str, new: str) -> tuple[RawChange, ...]:
        """Every file that differs between two commits or trees, with its blobs (no renames)."""
        out = self.git("diff-tree", "-r", "-z", "--raw", "--no-abbrev", "--no-renames", "--no-commit-id",
                       old, new).stdout.decode("utf-8", "surrogateescape")
        fields = out.split("\0")
        found = []
        absent = "0" * 40
        for meta, path in zip(fields[0:-1:2], fields[1::2], strict=False):
            old_mode, new_mode, old_blob, new_blob, status = meta.lstrip(":").split()
            found.append(RawChange(
                status=status[0], old_path=None if status[0] == "A" else path,
                new_path=None if status[0] == "D" else path,
                old_mode=None if old_mode == "000000" else old_mode,
                new_mode=None if new_mode == "000000" else new_mode,
                old_blob=None if old_blob == absent else old_blob,
                new_blob=None if new_blob == absent else new_blob))
        return tuple(found)

    def cherry(self, upstream: str, head: str, limit: str) -> set[str]:
        """The commits of limit..head whose patch-id matches a commit upstream has and head's
        history does not (``git cherry``: the ones it marks ``-``)."""
        out = self.out("cherry", upstream, head, limit)
        return {line[2:].strip() for line in out.splitlines() if line.startswith("- ")}

    def renames(self, old: str, new: str, sources: Sequence[str]) -> dict[str, str]:
        """Where ``sources`` (paths deleted between the trees ``old`` and ``new``) went: git's rename
        detection with only them as sources and every added file as a candidate, as merge-ort
        limits detection to the paths that matter, which keeps it cheap on a 4,000-file tree."""
        added = self.git("diff-tree", "-r", "-z", "--name-only", "--diff-filter=A", "--no-commit-id",
                         old, new).stdout.decode("utf-8", "surrogateescape").split("\0")
        added = [p for p in added if p]
        if not sources or not added:
            return {}
        out = self.git("diff-tree", "-r", "-z", "-M", "--diff-filter=R", "--no-commit-id", old, new, "--",
                       *sources, *added, env={"GIT_LITERAL_PATHSPECS": "1"}).stdout
        fields = out.decode("utf-8", "surrogateescape").split("\0")
        found = {}
        i = 0
        while i + 2 < len(fields):
            if fields[i].startswith(":"):
                found[fields[i + 1]] = fields[i + 2]
                i += 3
            else:
                i += 1
        return found

    def write_commits(self, parent: str | None, commits: Sequence[NewCommit], *, ref: str) -> list[str]:
        """A chain of commits on ``parent`` (None: the first is a root commit) written by one
        ``git fast-import``, which leaves ``ref`` at the last (name it in the caller's namespace of
        the cache): their shas, in order."""
        if not commits:
            return []
        for c in commits:
            for f in c.files:
                why = tree_path_problem(f.path)
                if why is not None:  # callers validate their paths; this keeps any slip out of git
                    raise GitError(f"refusing to write {f.path!r} into a commit: {why}")
        fd, marks = tempfile.mkstemp(prefix="marks.", dir=self.git_dir)
        os.close(fd)
        try:
            self.fast_import(_commit_stream(parent, commits, ref), "--force", f"--export-marks={marks}")
            found = dict(line.split() for line in Path(marks).read_text().splitlines() if line)
        finally:
            os.unlink(marks)
        return [found[f":{n}"] for n in range(1, len(commits) + 1)]

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
class RawChange:
    """One file of a commit, as ``git log --raw -M`` names it (None where a side is absent)."""

    status: str  # "A", "M", "D", "R", "T" (or "C")
    old_path: str | None
    new_path: str | None
    old_mode: str | None
    new_mode: str | None
    old_blob: str | None
    new_blob: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class FileWrite:
    """A file of a commit to write: an existing blob, new content, or (mode None) a deletion."""

    path: str
    mode: str | None
    blob: str | None = None
    data: bytes | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class NewCommit:
    """A commit to write: its parent is the commit before it in the batch."""

    message: str
    author: Ident
    committer: Ident
    files: tuple[FileWrite, ...]


class Pending(Generic[T]):
    """A git command running alongside the caller's work: started early, read when needed."""

    def __init__(self, cmd: list[str], convert: Callable[[bytes], T]) -> None:
        self._cmd = cmd
        self._convert = convert
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_environment())

    def result(self) -> T:
        out, err = self._proc.communicate()
        if self._proc.returncode:
            raise GitError(f"{' '.join(self._cmd[:3])} ... failed ({self._proc.returncode}): "
                           f"{err.decode(errors='replace').strip()}")
        return self._convert(out)


class ObjectReader:
    """One long-lived ``git cat-file --batch``: any number of objects for one process."""

    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self._proc: subprocess.Popen[bytes] | None = None
        self._blobs: dict[str, bytes] = {}

    def read(self, spec: str) -> tuple[str, str, bytes] | None:
        """(sha, type, content) of ``spec`` (a sha or ``rev:path``), None when it does not exist."""
        if "\n" in spec or "\0" in spec:
            return None  # no object is named so; git would read another name
        if self._proc is None:
            self._proc = subprocess.Popen(["git", f"--git-dir={self.repo.git_dir}", "cat-file", "--batch"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, env=_environment())
        assert self._proc.stdin is not None and self._proc.stdout is not None
        name = spec.encode()
        self._proc.stdin.write(name + b"\n")
        self._proc.stdin.flush()
        reply = self._proc.stdout.readline()
        if not reply:
            raise GitError(f"git cat-file --batch ended while reading {spec}")
        reply = reply.rstrip(b"\n")
        # "<spec> missing": the spec as given, spaces and all, so it is compared whole
        if reply in (name + b" missing", name + b" ambiguous"):
            return None
        header = reply.split(b" ")
        if len(header) != 3 or not header[2].isdigit():
            raise GitError(f"git cat-file --batch gave {reply!r} for {spec}")
        data = self._proc.stdout.read(int(header[2]) + 1)[:-1]
        return header[0].decode(), header[1].decode(), data

    def blob(self, spec: str) -> bytes | None:
        """A blob's content; blobs asked for by sha are remembered (they never change)."""
        if spec in self._blobs:
            return self._blobs[spec]
        found = self.read(spec)
        data = found[2] if found is not None and found[1] == "blob" else None
        if data is not None and len(spec) == 40:
            self._blobs[spec] = data
        return data

    def close(self) -> None:
        if self._proc is not None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None


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


_EXPORT = ("--stdout", "--zero-commit", "--full-index", "--no-signature", "--no-stat", "--no-numbered")


def _split_patches(text: str) -> list[str]:
    """format-patch output cut into one text per commit, each without its Date line."""
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


_FAST_IMPORT_ESCAPES = {ord("\\"): b"\\\\", ord('"'): b'\\"', ord("\n"): b"\\n", ord("\t"): b"\\t"}


def _quote_path(path: str) -> bytes:
    """``path`` as git fast-import reads it ("Paths" in ``git help fast-import``): verbatim, or
    C-style quoted when it starts with a double quote or holds a control character (a newline
    would end the command; a quote at the start would make git unquote it)."""
    raw = path.encode("utf-8", "surrogateescape")
    if not raw.startswith(b'"') and not any(b < 0x20 or b == 0x7F for b in raw):
        return raw
    out = bytearray(b'"')
    for b in raw:
        if b in _FAST_IMPORT_ESCAPES:
            out += _FAST_IMPORT_ESCAPES[b]
        elif b < 0x20 or b == 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    return bytes(out + b'"')


def _commit_stream(parent: str | None, commits: Sequence[NewCommit], ref: str) -> Iterator[bytes]:
    """The fast-import stream for a chain of commits on ``parent``, ending in ``done``."""
    for n, c in enumerate(commits, 1):
        yield from _commit_command(n, c, ref, parent if n == 1 else f":{n - 1}")
    yield b"done\n"


def _commit_command(mark: int, c: NewCommit, ref: str, parent: str | None) -> Iterator[bytes]:
    """One ``commit`` command, its new contents inline: the one place a commit and the paths of
    its files are written to a stream git reads."""
    message = c.message.encode()
    yield (f"commit {ref}\nmark :{mark}\nauthor {c.author.line()}\ncommitter {c.committer.line()}\n"
           .encode() + b"data %d\n" % len(message) + message + b"\n")
    if parent is not None:
        yield f"from {parent}\n".encode()
    for f in c.files:
        path = _quote_path(f.path)
        if f.mode is None:
            yield b"D " + path + b"\n"
        elif f.data is None:
            yield f"M {f.mode} {f.blob} ".encode() + path + b"\n"
        else:
            yield f"M {f.mode} inline ".encode() + path + b"\n" + b"data %d\n" % len(f.data)
            yield f.data
            yield b"\n"
    yield b"\n"


@functools.cache
def _git_version() -> tuple[int, ...]:
    out = run(["git", "--version"]).stdout.decode()
    return tuple(int(x) for x in re.findall(r"\d+", out)[:3])


def merge_file(ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str]) -> tuple[bytes, int]:
    """A 3-way merge of one file's contents with git's own merge (xdiff, as merge-ort uses it):
    the result, with conflict markers where needed, and the number of conflicts."""
    with tempfile.TemporaryDirectory(prefix="patchtool-merge-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(tmp) / name).write_bytes(data)
            names.append(str(Path(tmp) / name))
        # merge-ort diffs with histogram; merge-file can be told so from git 2.42
        algorithm = ["--diff-algorithm=histogram"] if _git_version() >= (2, 42) else []
        res = run(["git", "merge-file", "-p", *algorithm, "-L", labels[0], "-L", labels[1], "-L", labels[2],
                   *names], check=False)
    if res.returncode >= 128 or res.returncode < 0:
        raise GitError(f"git merge-file failed: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout, res.returncode


_IDENT_RE = re.compile(r"^(.*) <(.*)> (\d+) ([+-]\d{4})$")
# what decides who the user is to git: their identity variables and where their configuration is
_USER_IDENTITY_ENV = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
                      "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
                      "GIT_CONFIG_NOSYSTEM")


def user_idents(cwd: Path) -> tuple[Ident, Ident]:
    """(author, committer) as ``git commit`` in ``cwd`` would record them for the user: their
    GIT_AUTHOR_*/GIT_COMMITTER_* variables, then user.name/user.email from the repository's and
    their own configuration. The one git call that sees the user's configuration and identity
    variables (every other one is isolated from them); UsageError with git's own words when git
    does not know who the user is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _USER_IDENTITY_ENV}
    env.update(LC_ALL="C", LANGUAGE="C", GIT_TERMINAL_PROMPT="0")
    idents = []
    for var in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
        try:
            res = subprocess.run(["git", "var", var], cwd=cwd, capture_output=True, env=env)
        except FileNotFoundError:
            raise GitError("git is not installed or not on PATH") from None
        m = _IDENT_RE.match(res.stdout.decode("utf-8", "replace").strip())
        if res.returncode or m is None:
            said = res.stderr.decode(errors="replace").strip() or f"git var {var} failed"
            raise UsageError(f"git does not know who you are, so it cannot make the commit: {said}",
                             hint='git config --global user.name "Your Name" && '
                                  'git config --global user.email you@example.com')
        idents.append(Ident(m.group(1), m.group(2), int(m.group(3)), m.group(4)))
    return idents[0], idents[1]


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
