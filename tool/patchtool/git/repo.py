"""A git repository addressed by its git directory: the cache (``upstream.git``), or a scratch one.

Refs, commits, trees, fast-import, worktrees, exports (format-patch, range-diff, cherry) and
temporary indexes. Every command runs through ``Runner`` (GitPython's command wrapper); objects
are read through ``ObjectReader`` (GitPython's persistent cat-file). Callers get SHAs, paths,
bytes and the dataclasses below, never a GitPython object.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from patchtool import fsroot, progress
from patchtool.errors import GitError
from patchtool.git import owned
from patchtool.git.changes import RawChange, TreeChange, parse_log, parse_raw, parse_renames, parse_tree_changes
from patchtool.git.command import LOCAL_ONLY_ENV, Argv, Pending, Result, Runner, remote_env
from patchtool.git.limits import FetchLimits, FetchTooLarge, FetchTooSlow, leftovers, pack_files
from patchtool.git.objects import ObjectReader
from patchtool.git.stream import FIXED_IDENT, Ident, NewCommit, commit_stream
from patchtool.paths import read_text_if_present, tree_path_problem
from patchtool.urls import LocalUrls, SourceUrl, permit

OWN_REFS = "refs/patchtool/"  # the refs only patchtool writes, and only under its ``ref_guard``
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# what git's check_refname_format refuses anywhere in a name, and what would change a refspec's meaning
_NOT_IN_REFSPEC = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|^$")

# who moves a ref that keeps a reflog (a checkout branch), without asking the user's configuration
_REFLOG_IDENT = {"GIT_COMMITTER_NAME": FIXED_IDENT[0], "GIT_COMMITTER_EMAIL": FIXED_IDENT[1]}


@dataclasses.dataclass(frozen=True, slots=True)
class ApplyResult:
    ok: bool
    stderr: str


@dataclasses.dataclass(frozen=True, slots=True)
class LoggedCommit:
    """A commit of a branch as ``git log`` shows it."""

    commit: str
    parents: tuple[str, ...]
    subject: str
    message: str  # stripped, as ``%B`` and strip() leave it


@dataclasses.dataclass(frozen=True, slots=True)
class WalkedCommit:
    """A commit as a walk over many tips shows it (``Repo.walk``)."""

    commit: str
    parents: tuple[str, ...]
    committer: str  # the committer's e-mail
    subject: str


@dataclasses.dataclass(frozen=True, slots=True)
class WorktreeEntry:
    """One worktree git knows of (``git worktree list --porcelain``)."""

    path: str
    branch: str | None  # the full ref it has checked out, None when detached or bare
    locked: str | None  # the reason given ("" for none), None when not locked
    head: str | None = None  # the commit its HEAD names, None when bare or unborn


_REF_NAME = re.compile(r"[\w.+@/-]+")  # a ref's name patchtool asks about: nothing a batch query would split


class Repo:
    """A git repository addressed by its git directory (bare or not)."""

    def __init__(
        self,
        git_dir: Path,
        *,
        ref_guard: Callable[[], contextlib.AbstractContextManager[None]] | None = None,
        own: bool = False,
    ) -> None:
        """``ref_guard``: the lock every write of a ref under ``OWN_REFS`` is made under (the
        cache's), so that a ref lock git left there is stale once it is held; ``own``: patchtool
        makes this repository (the cache's), so what git reads there is held to what patchtool
        wrote (``owned.restore``) before any git runs in it or a worktree of it."""
        self.git_dir = git_dir
        if own:
            owned.own(git_dir)
        self._runner = Runner(git_dir=git_dir)
        self._ref_guard = ref_guard
        self._local = threading.local()  # each thread its own object reader (a scan replays in threads)

    @classmethod
    def init_bare(cls, path: Path) -> Repo:
        path.mkdir(parents=True, exist_ok=True)
        if not (path / "HEAD").exists():
            Runner().run("init", "--quiet", "--bare", args=[str(path)])
            repo = cls(path, own=True)
            repo.out("config", args=["core.logAllRefUpdates", "false"])
            repo.out("config", args=["gc.auto", "0"])
        repo = cls(path, own=True)
        repo.restore_config()
        return repo

    def restore_config(self) -> None:
        """Hold this repository, one patchtool made, to what patchtool and git wrote there
        (``owned.restore``): only its own keys in its configuration, ``core.hooksPath`` at
        /dev/null (so a hook planted in ``hooks/``, or anywhere, runs in none of the user's own
        ``git commit``, ``rebase -i`` or ``mergetool`` in a worktree of it, ``work/series``, whose
        ``.git`` points here), and each worktree's ``commondir`` ``../..``."""
        owned.restore(self.git_dir)

    def ignore_byte_code(self) -> None:
        """Python's byte-code (``__pycache__/``, ``*.pyc``), which running the tests in a worktree
        leaves behind, ignored in every worktree of this repository (its ``info/exclude``): no patch
        carries it, and a sparse worktree's ``git add -A`` would refuse it outside its paths."""
        if "__pycache__/" not in (read_text_if_present(self.git_dir, "info/exclude") or ""):
            fsroot.Root(self.git_dir).append("info/exclude", "__pycache__/\n*.pyc\n")

    def git(
        self,
        command: str,
        *options: str,
        args: Sequence[str] = (),
        paths: Sequence[str] | None = None,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> Result:
        """Any git command on this repository (for the layer and the tests; the rest of patchtool
        calls the named methods below): data in ``args`` and ``paths``, never in ``options``."""
        return self._runner.run(command, *options, args=args, paths=paths, input=input, env=env, check=check)

    def out(
        self,
        command: str,
        *options: str,
        args: Sequence[str] = (),
        paths: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        """stdout of a git command that must succeed, stripped (for the layer and the tests)."""
        return self._runner.out(command, *options, args=args, paths=paths, env=env)

    # -- refs and commits ---------------------------------------------------------------------
    def resolve(self, rev: str) -> str | None:
        """The commit ``rev`` names, None when it names none."""
        found = self._objects().commit(rev)
        return found.sha if found is not None else None

    def worktree_refs(self) -> dict[str, tuple[str, str | None]]:
        """Every linked worktree's own ref (``refs/worktree/*``, ``refs/bisect/*``,
        ``refs/rewritten/*``: git keeps them loose in the worktree's administrative directory, and
        ``for-each-ref`` here lists none) naming a commit, as git names it from here
        (``worktrees/<id>/refs/...``) -> (that commit, the worktree's path where recorded)."""
        admin = self.git_dir / "worktrees"
        found: dict[str, tuple[str, str | None]] = {}
        for tree in sorted(admin.iterdir()) if admin.is_dir() else []:
            if tree.is_symlink() or not (tree / "refs").is_dir():
                continue
            gitdir = tree / "gitdir"
            path = str(Path(gitdir.read_text(errors="replace").strip()).parent) if gitdir.is_file() else None
            for ref in sorted((tree / "refs").rglob("*")):
                name = f"worktrees/{tree.name}/{ref.relative_to(tree).as_posix()}"
                plain = _REF_NAME.fullmatch(name) and ref.is_file() and not ref.is_symlink()
                if plain and (sha := self.resolve(name)) is not None:
                    found[name] = (sha, path)
        return found

    def commit_info(self, rev: str) -> tuple[str, str, str] | None:
        """(commit, tree, message) of ``rev``; None when it does not exist."""
        found = self._objects().commit(rev)
        return (found.sha, found.tree, found.message) if found is not None else None

    def tree_of(self, rev: str) -> str:
        found = self._objects().tree_sha(rev)
        if found is None:
            raise GitError(f"{rev!r} names no tree in {self.git_dir}")
        return found

    def has_object(self, sha: str) -> bool:
        return self._objects().read(sha) is not None

    def commit_message(self, rev: str) -> str:
        found = self._objects().commit(rev)
        if found is None:
            raise GitError(f"{rev!r} names no commit in {self.git_dir}")
        return found.message.strip()

    def commit_time(self, rev: str) -> int:
        """The committer timestamp of ``rev`` (seconds since the epoch)."""
        return int(self.out("show", "-s", "--format=%ct", args=[rev]))

    def idents(self, commit: str) -> tuple[Ident, Ident]:
        """(author, committer) of ``commit``, dates included, to write it again unchanged."""
        fields = self.out(
            "log", "-1", "--date=raw", "--format=%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd", args=[commit]
        ).split("\0")
        (a_time, a_tz), (c_time, c_tz) = fields[2].split(), fields[5].split()
        return Ident(fields[0], fields[1], int(a_time), a_tz), Ident(fields[3], fields[4], int(c_time), c_tz)

    def is_ancestor(self, ancestor: str, rev: str) -> bool:
        return self._runner.run("merge-base", "--is-ancestor", args=[ancestor, rev], check=False).returncode == 0

    def refs_containing(self, commit: str, *prefixes: str) -> list[str]:
        """The refs under ``prefixes`` whose history has ``commit`` (none when it is unknown)."""
        res = self._runner.run(
            "for-each-ref", f"--contains={commit}", "--format=%(refname)", args=prefixes, check=False
        )
        return res.stdout.decode("utf-8", "replace").split() if res.returncode == 0 else []

    def log(self, base: str, tip: str) -> list[LoggedCommit]:
        """The commits of base..tip, oldest first, in one git process."""
        out = self._runner.run(
            "log", "--reverse", "-z", "--format=%H%x00%P%x00%s%x00%B", args=[f"{base}..{tip}"], paths=[]
        ).stdout.decode("utf-8", "replace")
        fields = out.split("\0")
        return [
            LoggedCommit(
                commit=fields[i],
                parents=tuple(fields[i + 1].split()),
                subject=fields[i + 2].strip(),
                message=fields[i + 3].strip(),
            )
            for i in range(0, len(fields) - 3, 4)
        ]

    def walk(self, tips: Sequence[str], excluding: Sequence[str]) -> list[WalkedCommit]:
        """Every commit reachable from ``tips`` (commits or refs) and from none of ``excluding``,
        newest first, in one git process (the names go on its stdin, never on its command line)."""
        if not tips:
            return []
        names = "".join(f"{t}\n" for t in tips) + "".join(f"^{e}\n" for e in excluding)
        out = self._runner.run(
            "log", "--stdin", "-z", "--format=%H%x00%P%x00%ce%x00%s", paths=[], input=names.encode()
        ).stdout.decode("utf-8", "replace")
        fields = out.split("\0")
        return [
            WalkedCommit(
                commit=fields[i], parents=tuple(fields[i + 1].split()), committer=fields[i + 2], subject=fields[i + 3]
            )
            for i in range(0, len(fields) - 3, 4)
        ]

    def reflog(self, ref: str) -> list[str]:
        """The commits ``ref``'s reflog names, newest first (``ref@{0}`` first); none without one."""
        res = self._runner.run("log", "-g", "--format=%H", args=[ref], paths=[], check=False)
        return res.stdout.decode().split() if res.returncode == 0 else []

    def rev_list(self, base: str, tip: str) -> list[str]:
        """The commits of base..tip, oldest first."""
        return self.out("rev-list", "--reverse", args=[f"{base}..{tip}"]).split()

    def update_ref(
        self,
        ref: str,
        new: str,
        old: str | None = None,
        *,
        reason: str | None = None,
        reflog: bool = False,
        check: bool = True,
    ) -> str | None:
        """Move ``ref`` to ``new``; ``old=""`` means it must not exist yet. ``reason`` goes to the
        reflog, which ``reflog`` creates. Returns None, or git's complaint when ``check`` is False."""
        options = [*(["--create-reflog"] if reflog else []), *([f"-m{reason}"] if reason else [])]
        with self._writing_ref(ref):
            res = self._runner.run(
                "update-ref",
                *options,
                args=[ref, new, *([old] if old is not None else [])],
                env=_REFLOG_IDENT if reason else None,
                check=check,
            )
        return res.stderr.strip() if res.returncode else None

    def delete_ref(self, ref: str) -> None:
        with self._writing_ref(ref):
            self._runner.run("update-ref", "-d", args=[ref], check=False)

    @contextlib.contextmanager
    def _writing_ref(self, ref: str) -> Iterator[None]:
        """Write ``ref`` under the guard when it is one of patchtool's own: the lock file a killed
        git left beside it (``<ref>.lock``) then has no living owner, and is removed first."""
        if self._ref_guard is None or not ref.startswith(OWN_REFS):
            yield
            return
        with self._ref_guard():
            if tree_path_problem(ref) is None:  # a ref named from data never reaches outside refs/
                (self.git_dir / f"{ref}.lock").unlink(missing_ok=True)
            yield

    def interpret_trailers(self, message: str, trailer: str) -> str:
        """``message`` with ``trailer`` added as git adds trailers."""
        return self._runner.run("interpret-trailers", f"--trailer={trailer}", input=message.encode()).stdout.decode()

    def commit_tree(self, tree: str, parents: Sequence[str], message: str, *, author: Ident, committer: Ident) -> str:
        env = {**author.env("AUTHOR"), **committer.env("COMMITTER")}
        return (
            self._runner.run("commit-tree", *(f"-p{p}" for p in parents), args=[tree], input=message.encode(), env=env)
            .stdout.decode()
            .strip()
        )

    # -- writing commits ------------------------------------------------------------------------
    def fast_import(self, stream: Iterable[bytes], *options: str) -> None:
        """Feed a fast-import stream; refs move only when the whole stream is in. A crash report
        git leaves behind is removed: its gist is in the error, and a stale one from a killed
        process is swept before the next import."""
        for stale in self.git_dir.glob("fast_import_crash_*"):
            stale.unlink(missing_ok=True)
        running = self._runner.start(
            Argv("fast-import", ("--quiet", "--date-format=raw", "--done", *options)), stdin=True, stdout=False
        )
        proc = running.popen
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
            lines = [
                ln
                for ln in err.decode(errors="replace").splitlines()
                if not ln.startswith("fast-import: dumping crash report")
            ]
            raise GitError(f"git fast-import failed: {chr(10).join(lines).strip()}")

    def write_commits(
        self, parent: str | None, commits: Sequence[NewCommit], *, ref: str, shown_as: str | None = None
    ) -> list[str]:
        """A chain of commits on ``parent`` (None: the first is a root commit) written by one
        ``git fast-import``, which leaves ``ref`` at the last (name it in the caller's namespace of
        the cache): their shas, in order. ``shown_as``: a progress task of that name counts the
        files handed to git."""
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
            files = sum(len(c.files) for c in commits)
            shown = progress.task(shown_as, total=files, unit="files") if shown_as else contextlib.nullcontext(None)
            with self._writing_ref(ref), shown as task:
                stream = commit_stream(parent, commits, ref, each_file=task.advance if task else None)
                self.fast_import(stream, "--force", f"--export-marks={marks}")
            found = dict(line.split() for line in Path(marks).read_text().splitlines() if line)
        finally:
            os.unlink(marks)
        return [found[f":{n}"] for n in range(1, len(commits) + 1)]

    # -- reading objects and trees --------------------------------------------------------------
    def _objects(self) -> ObjectReader:
        """This thread's reader: one cat-file process for every object a command reads."""
        reader: ObjectReader | None = getattr(self._local, "reader", None)
        if reader is None:
            reader = self._local.reader = ObjectReader(self)
        return reader

    @contextlib.contextmanager
    def reader(self) -> Iterator[ObjectReader]:
        yield self._objects()

    def cat_files(self, tree: str, paths: Sequence[str]) -> dict[str, bytes | None]:
        """Contents of ``paths`` in ``tree`` (None where absent), one git process for all."""
        found = self.cat_blobs([f"{tree}:{p}" for p in paths])
        return {p: found[f"{tree}:{p}"] for p in paths}

    def cat_blobs(self, specs: Sequence[str]) -> dict[str, bytes | None]:
        """Contents of ``rev:path`` specs from any trees (None where absent), one git process."""
        reader = self._objects()
        return {spec: reader.blob(spec) for spec in dict.fromkeys(specs)}

    def ls_files(self, tree: str, prefix: str) -> list[str]:
        """Paths of the blobs under ``prefix`` in ``tree``."""
        return self._names("ls-tree", args=[tree, prefix])  # ls-tree: after --end-of-options, "--" is a path

    def tree_paths(self, tree: str) -> list[str]:
        """Every blob path in ``tree``."""
        return self._names("ls-tree", args=[tree])

    def blobs_under(self, tree: str, prefix: str, *, most: int) -> dict[str, str] | None:
        """``path -> blob id`` of the files under ``prefix`` in ``tree``, None where their listing
        is more than ``most`` bytes (git is stopped there): trees alone are read, so a partial
        clone without blobs lists them too."""
        proc = self._runner.start(Argv("ls-tree", ("-r", "-z"), (tree, *([prefix] if prefix else []))))
        out, stream = bytearray(), proc.popen.stdout
        assert stream is not None
        while chunk := stream.read(1 << 16):
            out += chunk
            if len(out) > most:
                proc.popen.kill()
                proc.popen.wait()
                return None
        if proc.popen.wait() != 0:
            raise GitError(f"git ls-tree {tree} failed in {self.git_dir}")
        found = {}
        for record in filter(None, out.split(b"\0")):
            meta, _, path = record.partition(b"\t")
            _, kind, sha = meta.decode().split()
            if kind == "blob":
                found[path.decode("utf-8", "surrogateescape")] = sha
        return found

    def _names(self, command: str, *, args: Sequence[str]) -> list[str]:
        """The NUL-separated paths a ``-r -z --name-only`` listing prints, unquoted, each as git spells it."""
        out = self._runner.run(command, "-r", "-z", "--name-only", args=args).stdout
        return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]

    def entries(self, treeish: str, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
        """``path -> (mode, sha)`` for those of ``paths`` that are files in ``treeish``."""
        if not paths:
            return {}
        reader = self._objects()
        tree = self.tree_of(treeish)
        return {p: entry for p in sorted(set(paths)) if (entry := reader.entry(tree, p)) is not None}

    # -- what changed -----------------------------------------------------------------------------
    def changes(self, base: str, tip: str) -> list[tuple[str, tuple[RawChange, ...]]]:
        """Every commit of base..tip, oldest first, with the files it changes (renames found)."""
        out = self._runner.run(
            "log", "--reverse", "-z", "--raw", "--no-abbrev", "-M", "--format=%x01%H", args=[f"{base}..{tip}"], paths=[]
        ).stdout
        return parse_log(out.decode("utf-8", "surrogateescape"))

    def diff_raw(self, old: str, new: str) -> tuple[RawChange, ...]:
        """Every file that differs between two commits or trees, with its blobs (no renames)."""
        out = self._runner.run(
            "diff-tree", "-r", "-z", "--raw", "--no-abbrev", "--no-renames", "--no-commit-id", args=[old, new]
        ).stdout
        return parse_raw(out.decode("utf-8", "surrogateescape"))

    def diff_tree(self, old: str, new: str) -> list[TreeChange]:
        """Every blob that differs between two trees (no rename detection), in path order."""
        return parse_tree_changes(
            self._runner.run("diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", args=[old, new]).stdout
        )

    def paths_changed(self, old: str, new: str, kinds: str) -> list[str]:
        """The files of the tree ``new`` that ``git diff-tree`` from ``old`` marks with one of
        ``kinds`` (its ``--diff-filter`` letters: ``A`` added, ``M`` modified)."""
        out = self._runner.run(
            "diff-tree", "-r", "-z", "--name-only", f"--diff-filter={kinds}", "--no-commit-id", args=[old, new]
        ).stdout
        return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]

    def renames(self, old: str, new: str, sources: Sequence[str]) -> dict[str, str]:
        """Where ``sources`` (paths deleted between the trees ``old`` and ``new``) went: git's rename
        detection with only them as sources and every added file as a candidate, as merge-ort
        limits detection to the paths that matter, which keeps it cheap on a 4,000-file tree."""
        added = self.paths_changed(old, new, "A")
        if not sources or not added:
            return {}
        out = self._runner.run(
            "diff-tree",
            "-r",
            "-z",
            "-M",
            "--diff-filter=R",
            "--no-commit-id",
            args=[old, new],
            paths=[*sources, *added],
            env={"GIT_LITERAL_PATHSPECS": "1"},
        ).stdout
        return parse_renames(out.decode("utf-8", "surrogateescape"))

    def cherry(self, upstream: str, head: str, limit: str) -> set[str]:
        """The commits of limit..head whose patch-id matches a commit upstream has and head's
        history does not (``git cherry``: the ones it marks ``-``)."""
        out = self.out("cherry", args=[upstream, head, limit])
        return {line[2:].strip() for line in out.splitlines() if line.startswith("- ")}

    # -- exports ------------------------------------------------------------------------------------
    def messages(self, base: str, tip: str) -> list[tuple[str, str]]:
        """(sha, message) of every commit in ``base..tip``, newest first: what a history without
        trees (``--filter=tree:0``) answers."""
        raw = self.git("log", "--format=%H%n%B%x00", args=[f"{base}..{tip}"]).stdout.decode("utf-8", "replace")
        out = []
        for chunk in raw.split("\0"):
            sha, _, message = chunk.strip("\n").partition("\n")
            if len(sha) == 40:
                out.append((sha, message))
        return out

    def tags(self) -> dict[str, str]:
        """Every tag's name and the commit it names."""
        raw = self.out(
            "for-each-ref", "--format=%(refname:lstrip=2)%00%(objectname)%00%(*objectname)", args=["refs/tags/"]
        )
        out = {}
        for line in raw.splitlines():
            name, direct, peeled = line.split("\0")
            out[name] = peeled or direct
        return out

    def changed_blobs(self, base: str, tip: str, paths: Sequence[str]) -> set[str]:
        """The blobs, both sides, of every change ``base..tip`` made to ``paths`` (trees needed, no blobs)."""
        raw = self.out("log", "--raw", "--no-abbrev", "--no-renames", "--format=", args=[f"{base}..{tip}"], paths=paths)
        return {
            blob
            for line in raw.splitlines()
            if line.startswith(":")
            for blob in line.split()[2:4]
            if set(blob) != {"0"}
        }

    def log_patches(self, base: str, tip: str, paths: Sequence[str], *, context: int = 3) -> str:
        """``git log -p -U<context>`` of ``base..tip`` over ``paths``, oldest first, each commit
        introduced by ``commit <sha>`` and its subject on the next line."""
        return self.git(
            "log",
            "-p",
            f"-U{context}",
            "--reverse",
            "--no-renames",
            "--full-index",
            "--no-color",
            "--format=commit %H%n%s",
            args=[f"{base}..{tip}"],
            paths=paths,
        ).stdout.decode("utf-8", "surrogateescape")

    def patch_ids(self, text: str) -> list[tuple[str, str]]:
        """(patch-id, commit) of each ``commit <sha>`` section of ``text`` (``git patch-id --stable``)."""
        raw = self.git("patch-id", "--stable", input=text.encode("utf-8", "surrogateescape")).stdout.decode()
        return [(pid, sha) for pid, _, sha in (line.partition(" ") for line in raw.splitlines())]

    def format_patch(self, commit: str) -> str:
        """The canonical export of one commit: git's own format, without the Date line."""
        text = self._runner.run("format-patch", "-1", *_EXPORT, args=[commit]).stdout.decode("utf-8")
        patches = _split_patches(text)
        return patches[0] if patches else text  # git exports nothing for an empty commit

    def format_patch_each(self, base: str, chain: Sequence[str]) -> list[str]:
        """``format_patch`` of each commit of ``chain`` (each the parent of the next, the first
        on ``base``), from one git process: its export of base..tip is cut where each commit's own
        ``From <sha>`` line starts, which no earlier commit can hold (it would hold its own
        descendant's hash). Where one is not found (git exports nothing for an empty commit), each
        is exported alone."""
        if not chain:
            return []
        text = self._runner.run("format-patch", *_EXPORT_WITH_IDS, args=[f"{base}..{chain[-1]}"]).stdout.decode("utf-8")
        starts: list[int] = []
        for sha in chain:
            at = text.find(f"From {sha} {_MBOX_DATE}\n", starts[-1] if starts else 0)
            if at < 0 or (at > 0 and text[at - 1] != "\n") or (not starts and at != 0):
                return [self.format_patch(sha) for sha in chain]
            starts.append(at)
        out = []
        for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
            message = text[start:end]
            if end < len(text) and message.endswith("\n\n"):
                message = message[:-1]  # the blank line git puts between messages in one mbox
            alone = _ZERO_FROM + message.split("\n", 1)[1]  # as --zero-commit exports it alone
            patches = _split_patches(alone)
            out.append(patches[0] if patches else alone)
        return out

    def format_patches(self, base: str, tip: str) -> Pending[list[str]]:
        """The canonical export of every commit in base..tip, oldest first, in one git process
        that runs while the caller goes on."""
        return Pending(
            self._runner,
            Argv("format-patch", _EXPORT, (f"{base}..{tip}",)),
            lambda out: _split_patches(out.decode("utf-8")),
        )

    def range_diff(self, old: str, new: str) -> Pending[str]:
        """``git range-diff old new``, running while the caller goes on."""
        return Pending(
            self._runner,
            Argv("range-diff", ("--no-color",), (old, new)),
            lambda out: out.decode("utf-8", errors="replace"),
        )

    # -- places to work: temporary indexes, worktrees, scratch repositories -----------------------
    @contextlib.contextmanager
    def temporary_index(self, treeish: str) -> Iterator[Index]:
        fd, name = tempfile.mkstemp(prefix="index.", dir=self.git_dir)
        os.close(fd)
        os.unlink(name)
        index = Index(self, Path(name))
        try:
            index.read_tree(treeish)
            yield index
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    def worktrees(self) -> list[WorktreeEntry]:
        """The worktrees git knows of, the repository's own first. Read NUL-separated and decoded
        as the file system's names are: a path git lists need not be UTF-8, nor free of newlines."""
        raw = self._runner.run("worktree list", "--porcelain", "-z").stdout.decode("utf-8", "surrogateescape")
        out = []
        for block in raw.split("\0\0"):
            fields = {key: value for key, _, value in (line.partition(" ") for line in block.split("\0"))}
            if "worktree" in fields:
                out.append(
                    WorktreeEntry(
                        path=fields["worktree"],
                        branch=fields.get("branch"),
                        locked=fields.get("locked"),
                        head=fields.get("HEAD"),
                    )
                )
        return out

    def is_worktree(self, path: Path) -> bool:
        return any(w.path == str(path) for w in self.worktrees())

    def worktree_add(
        self, path: Path, rev: str, *, detach: bool = True, checkout: bool = True, check: bool = True
    ) -> bool:
        """A worktree at ``path`` with ``rev`` checked out: detached, or (``detach=False``) the
        branch ``rev`` names. Without ``checkout`` no file is written yet. False when git refused
        and ``check`` is False."""
        options = ["--quiet", *([] if checkout else ["--no-checkout"]), *(["--detach"] if detach else [])]
        self.restore_config()  # a worktree the user may commit in by hand
        self.ignore_byte_code()  # and run the tests in
        return self._runner.run("worktree add", *options, args=[str(path), rev], check=check).returncode == 0

    def worktree_move(self, src: Path, dst: Path) -> None:
        self.out("worktree move", args=[str(src), str(dst)])

    def worktree_repair(self, path: Path) -> None:
        """Point the cache's record of the worktree at ``path`` back to where it is now (the
        repository it lives in was moved); nothing when it is no worktree."""
        self._runner.run("worktree repair", args=[str(path)], check=False)

    def worktree_remove(self, path: Path) -> None:
        if self._runner.run("worktree remove", "--force", "--force", args=[str(path)], check=False).returncode:
            self.forget_missing_worktrees()  # a worktree deleted by hand: drop its record

    def forget_missing_worktrees(self) -> None:
        """``git worktree prune``: forget worktrees whose directories are gone."""
        self._runner.run("worktree prune", check=False)

    def prune_worktrees(self) -> None:
        """Forget worktrees whose directories are gone, including one a killed `git worktree add`
        left locked ("initializing"); a worktree someone locked on purpose stays."""
        for w in self.worktrees():
            if w.locked == "initializing" and not Path(w.path).exists():
                self._runner.run("worktree unlock", args=[w.path], check=False)
        self.forget_missing_worktrees()

    def fetch(
        self,
        url: SourceUrl,
        refspec: str | Sequence[str],
        *,
        allow_local: LocalUrls | bool,
        limits: FetchLimits | None = None,
        filter: str | None = None,
        refetch: bool = False,
        partial: bool = False,
        by_id: bool = False,
    ) -> None:
        """Fetch ``refspec`` from a remote by a protocol the user allows (``urls.permit``: https,
        and with ``allow_local`` plain http and local repositories; any the user gave themselves),
        which git is held to as well; within ``limits`` (else the user's, ``FetchLimits.from_environment``):
        past its deadline ``FetchTooSlow``, past its size or its count of refs ``FetchTooLarge``, and
        nothing of it kept. Every refspec names its ref: a pattern (``*``) would let the remote
        choose how many refs the fetch writes (``remote_refs`` lists them first)."""
        permit(url, allow_local=allow_local)
        limits = limits or FetchLimits.from_environment()
        specs = (refspec,) if isinstance(refspec, str) else tuple(refspec)
        what = f"git fetch {url} {' '.join(specs) if len(specs) < 4 else f'({len(specs)} objects)'}"
        told = f"the git fetch from {url}"  # the refspec names patchtool's own refs, nothing the user wrote
        if any("*" in spec or "\n" in spec for spec in specs):
            raise ValueError(f"{what}: a refspec names one ref, on one line")
        limits.check_refs(sum(":" in spec for spec in specs), told)
        before = pack_files(self.git_dir)
        options = (
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--stdin",  # the refspecs, one a line: as many as the limit allows, on no command line
            *((f"--filter={filter}",) if filter else ()),
            *(("--refetch",) if refetch else ()),
        )
        # a partial fetch names its remote a promisor by the url: a path git would refuse as that name
        partial = partial or filter is not None  # every fetch into a partial clone names its remote alike
        local_path = url.scheme == "file" and "://" not in url.text
        where = Path(url.text).absolute().as_uri() if partial and local_path else url.text
        proc = self._runner.start(
            Argv("fetch", options, (where,)),
            stdin=True,
            env=remote_env(allow_local=bool(allow_local) or url.user, by_id=by_id),
            preexec=limits.preexec(),
        )
        try:
            status, _, raw = limits.wait(proc.popen, what=told, input="".join(f"{s}\n" for s in specs).encode())
        except (FetchTooSlow, FetchTooLarge):
            leftovers(self.git_dir, before)
            raise
        if status == 0:
            return
        said = raw.decode(errors="replace").strip()
        said = said if len(said) <= 2000 else f"... {said[-2000:]}"  # git's own last words, bounded
        outgrown = limits.outgrown(self.git_dir, before, status, said)
        leftovers(self.git_dir, before)
        if outgrown:
            raise limits.too_large(told)
        if limits.starved(said):
            raise limits.out_of_memory(told)
        raise GitError(f"{what} failed: {said}")

    def remote_refs(
        self, url: SourceUrl, prefix: str, *, allow_local: LocalUrls | bool, limits: FetchLimits | None = None
    ) -> dict[str, str]:
        """The refs beneath ``prefix`` (``refs/tags/``) that the remote ``url`` lists, by name (the
        rest of it) with the object each names (``git ls-remote``, under the fetch's deadline and
        protocols): what a fetch of some of them by name asks for. A name git would not take in a
        refspec (a pattern, a control character or space, bytes that are not UTF-8) is left out, as
        git's own fetch leaves a broken name out."""
        permit(url, allow_local=allow_local)
        limits = limits or FetchLimits.from_environment()
        proc = self._runner.start(
            Argv("ls-remote", ("--refs",), (url.text, f"{prefix}*")),
            env=remote_env(allow_local=bool(allow_local) or url.user),
            preexec=limits.preexec(),
        )
        status, out, err = limits.wait(proc.popen, what=f"the git ls-remote of {url}", listing=True)
        if status != 0:
            said = err.decode(errors="replace").strip()
            if limits.starved(said):
                raise limits.out_of_memory(f"the git ls-remote of {url}")
            raise GitError(f"git ls-remote {url} failed: {said[-2000:]}")
        found = {}
        for raw in out.split(b"\n"):
            try:
                sha, _, ref = raw.decode().partition("\t")
            except UnicodeDecodeError:  # a name patchtool's readers of refs would not read back
                continue
            name = ref.removeprefix(prefix)
            if ref.startswith(prefix) and _OBJECT_ID.fullmatch(sha) and not _NOT_IN_REFSPEC.search(name):
                found[name] = sha
        return found

    def fetch_from(self, other: Repo, refspec: str) -> None:
        """Fetch ``refspec`` from another of patchtool's own repositories (local transport alone)."""
        res = self._runner.run(
            "fetch",
            "--quiet",
            "--no-tags",
            args=[str(other.git_dir.absolute()), refspec],
            env=LOCAL_ONLY_ENV,
            check=False,
        )
        if res.returncode != 0:
            raise GitError(f"git fetch {other.git_dir} {refspec} failed: {res.stderr.strip()}")

    @contextlib.contextmanager
    def scratch(self) -> Iterator[Repo]:
        """A throwaway repository that borrows this one's objects: fetch into it to look at what a
        remote has, and keep what it fetched only by fetching that from it. This repository gains
        nothing it was not asked to keep, not even the history of a ref that turned out wrong."""
        with tempfile.TemporaryDirectory(prefix="patchtool-scratch-") as tmp:
            scratch = Repo.init_bare(Path(tmp))
            (scratch.git_dir / "objects" / "info" / "alternates").write_text(
                f"{(self.git_dir / 'objects').absolute()}\n"
            )
            yield scratch


class Index:
    """A temporary index file: apply patches without touching any working tree."""

    def __init__(self, repo: Repo, path: Path) -> None:
        self.repo = repo
        self.path = path
        self.env = {"GIT_INDEX_FILE": str(path)}

    def apply(
        self, patches: Sequence[Path], *, reverse: bool = False, check: bool = False, verbose: bool = False
    ) -> ApplyResult:
        args = [
            "apply",
            "--cached",
            *(["--verbose"] if verbose else []),
            *(["--reverse"] if reverse else []),
            *(["--check"] if check else []),
        ]
        res = self.repo.git(*args, args=[str(p) for p in patches], env=self.env, check=False)
        return _applied(res, ", ".join(str(p) for p in patches))

    def apply_text(self, patch: str, *, reverse: bool = False) -> ApplyResult:
        args = ["apply", "--cached", "--check", *(["--reverse"] if reverse else [])]
        res = self.repo.git(*args, input=patch.encode(), env=self.env, check=False)
        return _applied(res, "a hunk of a patch")

    def write_tree(self) -> str:
        return self.repo.out("write-tree", env=self.env)

    def write_files(self, files: Mapping[str, tuple[str, bytes] | None]) -> None:
        """Each path of ``files`` set to ``(mode, content)``, or removed where None."""
        lines = []
        for path, file in files.items():
            if why := tree_path_problem(path):  # callers validate their paths; this keeps any slip out of git
                raise GitError(f"refusing to write {path!r} into an index: {why}")
            if file is None:
                lines.append(f"0 {'0' * 40}\t{path}")
                continue
            mode, data = file
            blob = self.repo.git("hash-object", "-w", "--stdin", input=data).stdout.decode().strip()
            lines.append(f"{mode} {blob}\t{path}")
        if lines:
            data = "".join(f"{line}\0" for line in lines).encode("utf-8", "surrogateescape")
            self.repo.git("update-index", "-z", "--index-info", input=data, env=self.env)

    def read_tree(self, treeish: str) -> None:
        self.repo.out("read-tree", args=[treeish], env=self.env)


# git's words when an allocation fails (xmalloc's die, a failed mmap) or the kernel refuses memory
_OUT_OF_MEMORY = re.compile(r"Out of memory|malloc failed|mmap failed|Cannot allocate memory")


def _applied(res: Result, what: str) -> ApplyResult:
    """git apply's verdict; GitError when git ran out of memory (or was killed), which says
    nothing of whether the patch applies and must not read as "does not apply"."""
    if res.returncode < 0 or (res.returncode == 128 and _OUT_OF_MEMORY.search(res.stderr)):
        why = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"killed by signal {-res.returncode}"
        raise GitError(
            f"git apply ran out of memory on {what} ({why}); whether it applies is not known",
            hint="give git more memory; a patch's binary hunks are bounded, so this is the machine's limit",
        )
    return ApplyResult(res.returncode == 0, res.stderr)


_EXPORT = ("--stdout", "--zero-commit", "--full-index", "--no-signature", "--no-stat", "--no-numbered")
_EXPORT_WITH_IDS = tuple(o for o in _EXPORT if o != "--zero-commit")  # each message's From line names its commit
_MBOX_DATE = "Mon Sep 17 00:00:00 2001"  # git's fixed date on a message's 'From <sha>' line
_ZERO_FROM = f"From {'0' * 40} {_MBOX_DATE}\n"


def _split_patches(text: str) -> list[str]:
    """format-patch output cut into one text per commit, each without its Date line."""
    marker = _ZERO_FROM
    out = []
    chunks = text.split(marker)[1:]
    for i, chunk in enumerate(chunks):
        # less the blank line git puts between messages in one mbox
        one = chunk[:-1] if i + 1 < len(chunks) and chunk.endswith("\n\n") else chunk
        head, sep, rest = (marker + one).partition("\n\n")
        head = "\n".join(line for line in head.split("\n") if not line.startswith("Date: "))
        out.append(head + sep + rest)
    return out
