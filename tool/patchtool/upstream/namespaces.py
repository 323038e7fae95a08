"""What one patch repository keeps in the shared cache, namespaced by that repository.

Every clone of the patch repository on a machine shares one cache (``upstream.git``), so each
ref and file a command leaves there for later (a checkout branch and its base, the record of
the series a checkout was made from, a rebase's replayed commits) is named under the project's
key. Two clones then never see each other's checkouts or rebases.

The key is derived from the repository's resolved path: the same directory always gets the
same key (whatever symbolic links lead to it), a copy or a move is another project and starts
with no checkout of its own. A key stored in the repository would follow a copy, and two
copies would share their state again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from patchtool import fsroot, git
from patchtool.errors import UsageError
from patchtool.inputs import loads_json
from patchtool.paths import tree_path_problem

REFS = "refs/patchtool"
BRANCHES = "patchtool"  # checkout branches: refs/heads/patchtool/<key>/<branch>


def project_key(root: Path) -> str:
    """The project's name in the cache: 16 hex digits of the sha256 of its resolved path."""
    return hashlib.sha256(str(root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def replay_ref(root: Path) -> str:
    """Where a rebase of this project keeps the commits it replayed."""
    return f"{REFS}/{project_key(root)}/replay"


def check_branch(branch: str) -> str:
    """``branch`` when it can name a checkout branch: a safe tree path (it names the worktree's
    directory) that git accepts as a branch name; UsageError naming why not."""
    why = tree_path_problem(branch)
    if why is None and not git.ref_format_ok(f"refs/heads/{branch}"):
        why = "git refuses it as a branch name (see `git help check-ref-format`)"
    if why is not None:
        raise UsageError(
            f"{branch!r} is not a usable branch name: {why}",
            hint="pick a name of letters, digits, '-', '_', '.' and '/' (e.g. series, work/fix-1)",
        )
    return branch


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckoutBranch:
    """The names one checkout branch of one project has in the cache."""

    root: Path
    branch: str
    key: str

    @classmethod
    def of(cls, root: Path, branch: str) -> CheckoutBranch:
        return cls(root=root, branch=check_branch(branch), key=project_key(root))

    @property
    def short(self) -> str:
        """The branch as git shows it in the worktree."""
        return f"{BRANCHES}/{self.key}/{self.branch}"

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.short}"

    @property
    def base_ref(self) -> str:
        return f"{REFS}/{self.key}/base/{self.branch}"

    @property
    def refresh_ref(self) -> str:
        """Where ``checkout --refresh`` writes the rebuilt branch before moving it."""
        return f"{REFS}/{self.key}/refresh/{self.branch}"

    def record_path(self, repo: git.Repo) -> Path:
        return repo.git_dir / "patchtool" / "checkouts" / self.key / f"{self.branch}.json"

    def load_record(self, repo: git.Repo) -> CheckoutRecord | None:
        """The series this checkout was made from (or last exported or refreshed to), or None."""
        try:
            return CheckoutRecord.from_dict(loads_json(self.record_path(repo).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def save_record(self, repo: git.Repo, record: CheckoutRecord) -> None:
        rel = self.record_path(repo).relative_to(repo.git_dir).as_posix()
        data = {"schema": 1, "root": str(self.root.resolve()), "branch": self.branch, **record.to_dict()}
        fsroot.Root(repo.git_dir).write(rel, json.dumps(data, indent=2, sort_keys=True))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RecordedPatch:
    id: str
    file: str
    sha256: str  # of the patch file's bytes
    commit: str  # on the branch; "" where it has none (the patches after where a checkout stopped)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Repairing:
    """A refresh of a stopped checkout's patch under way: the commit it puts on the branch and the
    sha256 of the patch text it writes, noted before the branch moves."""

    commit: str
    sha256: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckoutRecord:
    """The series a checkout branch holds: the pin, its base and each patch in series order."""

    pin: str
    base: str
    patches: tuple[RecordedPatch, ...]
    stopped: str | None = None  # the patch that does not apply at the pin, left in the worktree
    repairing: Repairing | None = None  # a refresh of ``stopped`` that began moving the branch

    @classmethod
    def from_dict(cls, data: object) -> CheckoutRecord | None:
        """The record ``data`` holds, or None unless it has the shape ``to_dict`` gives (a
        damaged file is no record)."""
        if not isinstance(data, dict) or data.get("schema") != 1:
            return None
        if not all(isinstance(data.get(k), str) for k in ("pin", "base")) or not isinstance(data.get("patches"), list):
            return None
        fields = ("id", "file", "sha256", "commit")
        if not all(isinstance(p, dict) and all(isinstance(p.get(k), str) for k in fields) for p in data["patches"]):
            return None
        stopped, note = data.get("stopped"), data.get("repairing")
        stopped = stopped if isinstance(stopped, str) else None
        if not (stopped and isinstance(note, dict) and all(isinstance(note.get(k), str) for k in ("commit", "sha256"))):
            note = None  # a note counts only with its stopped patch
        return cls(
            pin=data["pin"],
            base=data["base"],
            patches=tuple(RecordedPatch(**{k: p[k] for k in fields}) for p in data["patches"]),
            stopped=stopped,
            repairing=Repairing(commit=note["commit"], sha256=note["sha256"]) if note else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
