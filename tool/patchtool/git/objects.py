"""Reading objects through GitPython's persistent ``git cat-file --batch``: any number of objects
for one git process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchtool.errors import GitError
from patchtool.git.command import mapped, new_git

if TYPE_CHECKING:
    from patchtool.git.repo import Repo


class ObjectReader:
    """One cat-file process of its own (GitPython's persistent commands are not thread-safe, and a
    scan replays several releases side by side), started on the first read."""

    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self._git = new_git()
        self._git.set_persistent_git_options(git_dir=str(Path(repo.git_dir)))
        self._blobs: dict[str, bytes] = {}

    def read(self, spec: str) -> tuple[str, str, bytes] | None:
        """(sha, type, content) of ``spec`` (a sha or ``rev:path``), None when it does not exist."""
        if "\n" in spec or "\0" in spec:
            return None  # no object is named so; git would read another name
        with mapped("git cat-file --batch"):
            try:
                sha, kind, _, data = self._git.get_object_data(spec)
            except ValueError:  # GitPython's word for "<spec> missing" (or ambiguous)
                self._check_alive(spec)
                return None
        return sha.decode() if isinstance(sha, bytes) else sha, kind.decode() if isinstance(kind, bytes) else kind, data

    def _check_alive(self, spec: str) -> None:
        proc = self._git.cat_file_all
        if proc is None or proc.proc.poll() is not None:
            raise GitError(f"git cat-file --batch ended while reading {spec} in {self.repo.git_dir}")

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
        self._git.clear_cache()  # ends the cat-file process
