"""A module in the style of Debian's security backports, and its fix, shared by the tests of
patches upstream absorbed (``test_absorbed.py``: from the target's content; ``test_history.py``:
from upstream's history), and ``make_upstream``: an upstream repository with its history between
two tags and a project carrying a series on the first, pinned by git.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

from cli_run import in_process
from helpers import format_patch, git, write_tree

HEADERS = '''\
"""Parse HTTP-ish headers."""

MAX = 64


def parse_header(data):
    name, _, value = data.partition(b":")
    name = name.strip()
    value = value.strip()
    return name, value


def parse_all(lines):
    return [parse_header(line) for line in lines]


def names(lines):
    return [name for name, _ in parse_all(lines)]
'''
NAME_CHECK = '    if len(name) > MAX:\n        raise ValueError("header name too long")\n'
VALUE_CHECK = '    if len(value) > 4 * MAX:\n        raise ValueError("header value too long")\n'
PARTITION = '    name, _, value = data.partition(b":")\n'
FIXED = HEADERS.replace(PARTITION, PARTITION + NAME_CHECK)


@dataclasses.dataclass(frozen=True)
class Upstream:
    root: Path  # the project
    repo: Path  # upstream's repository
    cache: Path
    commits: dict[str, str]  # subject -> sha

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(self.cache)}
        return in_process([*args, "--root", str(self.root)], env=env)

    def dry_run(self, *more: str) -> dict[str, object]:
        res = self.run("rebase", "--to", "1.1", "--dry-run", "--json", *more)
        assert res.returncode in (0, 5), res.stdout + res.stderr
        data: dict[str, object] = json.loads(res.stdout)["data"]
        return data


def commit(repo: Path, message: str, files: dict[str, str | bytes]) -> str:
    write_tree(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def make_upstream(
    tmp_path: Path,
    history: list[tuple[str, dict[str, str | bytes]]],
    patches: list[tuple[str, str, dict[str, str | bytes]]],
    base: dict[str, str | bytes] | None = None,
) -> Upstream:
    """Upstream ``base`` tagged v1.0, then each ``(message, files)`` of ``history``, tagged v1.1;
    one patch per ``(id, message, files)`` of ``patches``, each on the one before it from v1.0
    (its message may name upstream's commits: ``{subject}`` is replaced by that commit's sha)."""
    up = tmp_path / "upstream"
    up.mkdir()
    git(up, "init", "-q", "-b", "main")
    git(up, "config", "uploadpack.allowFilter", "true")  # as GitHub: a partial fetch gets what it asks for
    v10 = commit(up, "demo 1.0", base or {"demo/headers.py": HEADERS})
    git(up, "tag", "v1.0")
    commits = {message.partition("\n")[0]: commit(up, message, files) for message, files in history}
    git(up, "tag", "v1.1")
    root = tmp_path / "project"
    (root / "patches").mkdir(parents=True)
    (root / "upstream-pins").mkdir()
    git(up, "checkout", "-q", "-b", "debian", "v1.0")
    manifest = 'schema = 1\npin = "demo-1.0"\n'
    for n, (pid, template, files) in enumerate(patches, 1):
        message = template
        for subject, sha in commits.items():
            message = message.replace("{" + subject + "}", sha)
        commit(up, message, files)
        name = f"patches/{n:04d}-{pid}.patch"
        (root / name).write_text(format_patch(up))
        manifest += (
            f'\n[[patch]]\nid = "{pid}"\nfile = "{name}"\nkind = "correctness"\nowner = "debian"\n'
            'why = "security fix"\napplies_to = ">=1.0"\ndrop_when = "upstream"\nupstream = { status = "pending" }\n'
        )
    git(up, "checkout", "-q", "main")
    git(up, "branch", "-q", "-D", "debian")  # the series' commits are not upstream's
    (root / "upstream-pins" / "demo-1.0.toml").write_text(
        f'schema = 1\nname = "demo"\nversion = "1.0"\nuse = "git"\n\n[git]\nurl = "{up}"\ntag = "v1.0"\n'
        f'commit = "{v10}"\n'
    )
    (root / "patchset.toml").write_text(manifest)
    return Upstream(root=root, repo=up, cache=tmp_path / "cache", commits=commits)


def steps(data: dict[str, object]) -> dict[str, dict[str, object]]:
    return {p["id"]: p for p in data["patches"]}  # type: ignore[attr-defined,index]
