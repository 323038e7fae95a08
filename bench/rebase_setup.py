"""The rebase benchmark's setting: releases, private caches, projects, branches, the local index, scripts.

Everything here goes through git and the patchtool *command* (never patchtool's modules), so the
benchmark runs with the standard library alone and times any version of patchtool, old or new.
"""

from __future__ import annotations

import hashlib
import http.server
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import make_rebase_series as series_maker
from make_series import BenchError, git_env, release_commit
from run import FIXED_IDENT, subject_of

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
WORK = OUT / "rebase"
VERSIONS = ("0.5.20", "0.5.21", "0.5.22", "0.5.23")
OLD, NEW = "v0.5.20", "v0.5.23"
LOOP_LIMIT = 256  # the most stops a scripted loop goes through


def git(
    repo: Path, *args: str, cwd: Path | None = None, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = ["git", *args] if cwd else ["git", f"--git-dir={repo}", *args]
    res = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, env=git_env({**FIXED_IDENT, **(env or {})}), check=False
    )
    if check and res.returncode:
        raise BenchError(f"git {' '.join(args[:3])} failed: {res.stderr.strip()}")
    return res


def refs(repo: Path) -> set[str]:
    return set(git(repo, "for-each-ref", "--format=%(refname)").stdout.split())


def drop_new_refs(repo: Path, before: set[str]) -> None:
    """Delete the replay refs patchtool made in ``repo`` since ``before``: one per project it
    rebased, and the bench's projects are scratch copies. Its other refs stay: the series chains
    (``refs/patchtool/chain/...``) are remembered beside the repository by commit, and pruning
    their commits would leave patchtool a memo of commits that are gone."""
    for ref in sorted(refs(repo) - before):
        if ref.startswith("refs/patchtool/") and ref.endswith("/replay") and "/chain/" not in ref:
            git(repo, "update-ref", "-d", ref, check=False)


def ensure_releases(patchtool: list[str], cache_dir: Path) -> tuple[dict[str, str], str]:
    """sglang 0.5.20..0.5.23 imported into the user's cache, through ``patchtool rebase`` of an empty
    series from 0.5.23 down to 0.5.20 (which downloads what is missing): tag -> commit, and the
    0.5.20 pin that rebase wrote."""
    scratch = Path(tempfile.mkdtemp(prefix="ptbench-releases-"))
    repo = cache_dir / "upstream.git"
    before = refs(repo) if (repo / "HEAD").exists() else set()
    try:
        (scratch / "patches").mkdir()
        (scratch / "upstream-pins").mkdir()
        shutil.copyfile(
            REPO / "upstream-pins" / f"sglang-{VERSIONS[-1]}.toml",
            scratch / "upstream-pins" / f"sglang-{VERSIONS[-1]}.toml",
        )
        (scratch / "patchset.toml").write_text(f'schema = 1\npin = "sglang-{VERSIONS[-1]}"\n')
        env = git_env({"PATCHTOOL_CACHE_DIR": str(cache_dir)})
        for version in reversed(VERSIONS[:-1]):
            res = subprocess.run(
                [*patchtool, "rebase", "--to", version, "--root", str(scratch)],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if res.returncode:
                raise BenchError(
                    f"could not import sglang {version} with `patchtool rebase`:\n{res.stdout}{res.stderr}"
                )
        text = (scratch / "upstream-pins" / f"sglang-{VERSIONS[0]}.toml").read_text()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if (repo / "HEAD").exists():
            drop_new_refs(repo, before)
    text = re.sub(r"\A(#[^\n]*\n)+", f"# sglang {VERSIONS[0]}: the base of the rebase benchmark series.\n", text)
    tags = {}
    for v in VERSIONS:
        commit = release_commit(repo, v)
        if commit is None:
            raise BenchError(f"sglang {v} is not in {repo} after the import")
        tags[f"v{v}"] = commit
    return tags, text


def ensure_project(project: Path | None, count: int, bench_cache: Path, tags: dict[str, str], pin_text: str) -> Path:
    """The bench project of ``count`` patches, (re)built when missing or made by other code or releases."""
    stamp_text = hashlib.sha256(
        (BENCH / "make_rebase_series.py").read_bytes()
        + (BENCH / "make_series.py").read_bytes()
        + pin_text.encode()
        + tags[OLD].encode()
        + tags[NEW].encode()
        + str(count).encode()
    ).hexdigest()
    project = project or WORK / f"project{count}-{tags[OLD][:12]}"
    stamp = project / ".bench-stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        return project
    if project.exists():
        if not stamp.exists() and any(project.iterdir()):
            raise BenchError(f"{project} exists and was not made by make_rebase_series.py; choose another --project")
        shutil.rmtree(project)
    print(f"building the {count}-patch rebase bench project in {project} ...", flush=True)
    series_maker.build(project, cache_dir=bench_cache, pin_text=pin_text, count=count)
    stamp.write_text(stamp_text)
    return project


def make_branch(repo: Path, name: str, patches: list[Path], index: Path) -> str:
    """refs/heads/<name>: the patches as commits on v0.5.20 (what `git rebase` needs, and what puts
    every intermediate blob in the repository, which `git am -3` needs for its fake ancestors)."""
    parent = git(repo, "rev-parse", f"{OLD}^{{commit}}").stdout.strip()
    env = {"GIT_INDEX_FILE": str(index)}
    git(repo, "read-tree", parent, env=env)
    for patch in patches:
        git(repo, "apply", "--cached", str(patch), env=env)
        tree = git(repo, "write-tree", env=env).stdout.strip()
        parent = git(repo, "commit-tree", tree, "-p", parent, "-m", subject_of(patch)).stdout.strip()
    index.unlink(missing_ok=True)
    git(repo, "update-ref", f"refs/heads/{name}", parent)
    return parent


def subset_project(project: Path, dest: Path, keep: set[str]) -> Path:
    """The project without the patches outside ``keep`` (entries and files)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(project, dest)
    text = (dest / "patchset.toml").read_text()
    head, *entries = text.split("[[patch]]\n")
    kept = []
    for entry in entries:
        ident = re.search(r'^id = "([^"]+)"', entry, re.MULTILINE)
        assert ident
        if ident.group(1) in keep:
            kept.append(f"[[patch]]\n{entry}")
        else:
            file = re.search(r'^file = "([^"]+)"', entry, re.MULTILINE)
            assert file
            (dest / file.group(1)).unlink()
    (dest / "patchset.toml").write_text(head + "".join(kept))
    return dest


@contextmanager
def local_index(index_url: str) -> Iterator[str]:
    """PyPI's sglang project page (PEP 691 JSON), fetched once and served on 127.0.0.1."""
    req = urllib.request.Request(
        f"{index_url.rstrip('/')}/sglang/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = resp.read()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/simple/sglang":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


# -- the scripts the timed commands run ------------------------------------------------------------


def rebase_script(path: Path, patchtool: list[str], project: Path) -> Path:
    """``rebase --to 0.5.23``, then ``rebase --skip`` at every stop."""
    pt = shlex.join([*patchtool])
    root = shlex.quote(str(project))
    path.write_text(
        f"{pt} rebase --to 0.5.23 --root {root} >/dev/null 2>&1; rc=$?\nn=0\n"
        f"while [ $rc -eq 3 ] && [ $n -lt {LOOP_LIMIT} ]; do\n"
        f"  {pt} rebase --skip --reason 'bench: left out' --root {root} >/dev/null 2>&1; rc=$?\n"
        "  n=$((n + 1))\ndone\nexit $rc\n"
    )
    return path


def git_loop_script(path: Path, tree: Path, start: str, state: str, skip: str) -> Path:
    """``start`` in ``tree``, then ``skip`` while git's ``state`` directory exists."""
    path.write_text(
        f"cd {shlex.quote(str(tree))} || exit 1\n{start} >/dev/null 2>&1 && exit 0\n"
        f"d=$(git rev-parse --git-path {state})\nn=0\n"
        f'while [ -d "$d" ] && [ $n -lt {LOOP_LIMIT} ]; do {skip} >/dev/null 2>&1; n=$((n + 1)); done\n'
        f'[ ! -d "$d" ]\n'
    )
    return path


def scan_script(path: Path, repo: Path, trees: Path, patches: list[Path]) -> Path:
    """Per version: `git worktree add` a checkout, then `git apply --check` each patch in it."""
    q = shlex.quote
    lines = ["set -e"]
    for v in VERSIONS:
        tree = q(str(trees / v))
        lines += [f"git --git-dir={q(str(repo))} worktree add --quiet --detach {tree} v{v}", "ok=0"]
        lines += [f"git -C {tree} apply --check {q(str(p))} 2>/dev/null && ok=$((ok + 1)) || true" for p in patches]
        lines.append(f'echo "{v} $ok"')
    path.write_text("\n".join(lines) + "\n")
    return path
