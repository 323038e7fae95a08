"""Time `patchtool rebase` and `patchtool scan` against git: 30 patches moved from sglang 0.5.20 to 0.5.23.

Usage: python bench/rebase_bench.py [--runs N] [--warmup N] [--cache-dir DIR] [--patchtool CMD]
                                    [--project DIR]

The series (bench/make_rebase_series.py): 30 small edits of real 0.5.20 code, chosen by what
upstream did to their code by 0.5.23 (unchanged, moved, rewritten next to the edit, rewritten
under it, taken upstream, file deleted) plus two edits that build on earlier ones.

First, untimed, what each tool resolves without help and where it puts every hunk:

  patchtool   `rebase --to 0.5.23 --dry-run --json`: one outcome per patch; resolved = applied
              or already upstream; the real rebase is then run with `--skip` at every stop and
              `patchtool check` must be clean on the result
  git am -3   onto a worktree at v0.5.23: patches before the first stop; then `git am --skip` at
              every stop (resolved = the rest); and each patch alone on a fresh v0.5.23
  git rebase  `--onto v0.5.23 v0.5.20` of a branch with the 30 commits, `--skip` at every stop

  Placement: every changed line of every patch a tool applied is located with ast (the innermost
  def or class around it) and compared with where the patch put it on 0.5.20; a line in another
  scope, where the old scope still exists, is a misplaced hunk. The final trees of patchtool and
  `git am -3` are compared file by file.

Then, timed, interleaved A B C A B C after the warm-up, each a whole command (a bash script for
the loops), medians:

  rebase        patchtool: `rebase --to 0.5.23` then `rebase --skip --reason ...` at every stop,
                on a fresh copy of the project | `git am -3` + `git am --skip` at every stop, in a
                prepared worktree at v0.5.23 (untimed) | `git rebase --onto v0.5.23 v0.5.20` +
                `git rebase --skip`, in a prepared worktree at the branch (untimed)
  rebase-clean  the same three on the series without the patches that stop patchtool (nothing
                stops any of the three; one command each)
  scan          `patchtool scan --versions 0.5.20..0.5.23` | per version, `git worktree add` a
                checkout, then `git apply --check` each of the 30 patches in it
  scan-pypi     the patchtool scan again, reading PyPI instead of the local index

patchtool reads a local copy of PyPI's sglang index (fetched once per run of this script,
served on 127.0.0.1 via PATCHTOOL_INDEX_URL), so no timed command waits on the network except
`scan-pypi`. Everything runs against bench/out/rebase/cache, a hard-linked clone of the user's
cache (PATCHTOOL_CACHE_DIR, default the user cache), which must hold, or is given, sglang
0.5.20 to 0.5.23 (the imports and the verified wheels). Results: a table on stdout, JSON in
bench/out/rebase-<UTC time>.json and bench/out/rebase-latest.json. Standard library only (plus
patchtool, which imports the releases).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import http.server
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_rebase_series as series_maker
from make_series import (
    BenchError,
    bench_main,
    bench_parser,
    compile_patchtool,
    default_cache_dir,
    find_patchtool,
    git_env,
)
from run import FIXED_IDENT, Measured, measure, quiet, subject_of

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
WORK = OUT / "rebase"
VERSIONS = ("0.5.20", "0.5.21", "0.5.22", "0.5.23")
OLD, NEW = "v0.5.20", "v0.5.23"
STOPS = ("conflict", "target gone")
RESOLVED = ("applied unchanged", "applied with shifted context", "merged by 3-way merge", "partly upstream",
            "already upstream")
# (pair, A side, B side, target for A/B, what the target means)
TARGETS = (("rebase", "patchtool", "git am -3", 1.5, "<="), ("rebase", "patchtool", "git rebase", 1.0, "<"),
           ("rebase-clean", "patchtool", "git am -3", 1.5, "<="),
           ("rebase-clean", "patchtool", "git rebase", 1.0, "<"),
           ("scan", "patchtool", "git apply --check", 0.2, "<="))


# -- git and the releases --------------------------------------------------------------------

def git(repo: Path, *args: str, cwd: Path | None = None, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["git", *args] if cwd else ["git", f"--git-dir={repo}", *args]
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=git_env({**FIXED_IDENT, **(env or {})}),
                         check=False)
    if check and res.returncode:
        raise BenchError(f"git {' '.join(args[:3])} failed: {res.stderr.strip()}")
    return res


def ensure_releases(cache_dir: Path) -> dict[str, str]:
    """Import sglang 0.5.20..0.5.23 into the user's cache (downloads what is missing): tag -> commit."""
    from packaging.version import Version

    from patchtool.upstream.cache import Cache
    from patchtool.upstream.pins import load_pin
    from patchtool.upstream.releases import pin_for_version
    cache = Cache(cache_dir)
    pin = load_pin(REPO, "sglang-0.5.23")
    return {f"v{v}": cache.ensure(pin if v == "0.5.23" else pin_for_version(pin, Version(v), cache=cache)).commit
            for v in VERSIONS}


def private_cache(source: Path, tags: dict[str, str]) -> Path:
    """bench/out/rebase/cache: a hard-linked clone of the user's upstream.git, refreshed when a tag differs."""
    cache = WORK / "cache"
    repo = cache / "upstream.git"
    have = {}
    if (repo / "HEAD").exists():
        for tag in tags:
            res = git(repo, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}", check=False)
            have[tag] = res.stdout.strip()
    if have != tags:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        res = subprocess.run(["git", "clone", "--bare", "--quiet", str(source), str(repo)], capture_output=True,
                             text=True, env=git_env(), check=False)
        if res.returncode:
            raise BenchError(f"could not copy {source} to {repo}: {res.stderr.strip()}")
        for args in (["remote", "remove", "origin"], ["config", "gc.auto", "0"],
                     ["config", "core.logAllRefUpdates", "false"]):
            quiet(["git", f"--git-dir={repo}", *args], git_env())
    quiet(["git", f"--git-dir={repo}", "worktree", "prune"], git_env())
    # the verified release files too (hard links), as the user's cache keeps them: with them a
    # rebase or scan to an imported release reads sha256 and size from the cache, not the index
    downloads = source.parent / "downloads"
    for path in downloads.rglob("*.whl") if downloads.is_dir() else ():
        dest = cache / "downloads" / path.relative_to(downloads)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, dest)
            except OSError:  # another file system
                shutil.copy2(path, dest)
    return cache


def ensure_project(project: Path | None, cache_dir: Path, bench_cache: Path, tags: dict[str, str]) -> Path:
    pin_text = series_maker.pin_text(cache_dir)
    stamp_text = hashlib.sha256((BENCH / "make_rebase_series.py").read_bytes() + (BENCH / "make_series.py").read_bytes()
                                + pin_text.encode() + tags[OLD].encode() + tags[NEW].encode()).hexdigest()
    project = project or WORK / f"project-{tags[OLD][:12]}"
    stamp = project / ".bench-stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        return project
    if project.exists():
        if not stamp.exists() and any(project.iterdir()):
            raise BenchError(f"{project} exists and was not made by make_rebase_series.py; choose another --project")
        shutil.rmtree(project)
    print(f"building the rebase bench project in {project} ...", flush=True)
    series_maker.build(project, cache_dir=bench_cache, pin_text=pin_text)
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


# -- the local index -----------------------------------------------------------------------------

@contextmanager
def local_index(index_url: str) -> Iterator[str]:
    """PyPI's sglang project page (PEP 691 JSON), fetched once and served on 127.0.0.1."""
    req = urllib.request.Request(f"{index_url.rstrip('/')}/sglang/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
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


# -- where a change sits ---------------------------------------------------------------------------

class Scopes:
    """The innermost def/class around a line of a blob, read with ast (cached per blob)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.cache: dict[str, tuple[list[tuple[int, int, str]], set[str]]] = {}

    def table(self, rev: str, path: str) -> tuple[list[tuple[int, int, str]], set[str]]:
        blob = git(self.repo, "rev-parse", f"{rev}:{path}").stdout.strip()
        if blob not in self.cache:
            text = git(self.repo, "cat-file", "blob", blob).stdout
            spans: list[tuple[int, int, str]] = []

            def visit(node: ast.AST, prefix: str) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        name = f"{prefix}{child.name}"
                        spans.append((child.lineno, child.end_lineno or child.lineno, name))
                        visit(child, f"{name}.")
                    else:
                        visit(child, prefix)

            try:
                visit(ast.parse(text), "")
            except SyntaxError:
                pass
            self.cache[blob] = (spans, {s[2] for s in spans})
        return self.cache[blob]

    def at(self, rev: str, path: str, line: int) -> str:
        spans, _ = self.table(rev, path)
        inner = [s for s in spans if s[0] <= line <= s[1]]
        return max(inner)[2] if inner else "<module>"

    def exists(self, rev: str, path: str, name: str) -> bool:
        return name == "<module>" or name in self.table(rev, path)[1]


def placement(scopes: Scopes, repo: Path, parent: str, commit: str) -> list[tuple[str, str, str, str]]:
    """Every changed line of ``commit``: (path, +/-, scope, text), sorted."""
    diff = git(repo, "diff", "--no-color", "--no-renames", "-U0", parent, commit).stdout
    out = []
    path = ""
    old = new = 0
    for row in diff.splitlines():
        if row.startswith("+++ "):
            path = row[len("+++ b/"):]
        elif row.startswith("--- "):
            continue
        elif m := re.match(r"^@@ -(\d+)(?:,\d+)? \+(\d+)", row):
            old, new = int(m.group(1)), int(m.group(2))
        elif row.startswith("-") and path:
            out.append((path, "-", scopes.at(parent, path, old), row[1:].strip()))
            old += 1
        elif row.startswith("+") and path:
            out.append((path, "+", scopes.at(commit, path, new), row[1:].strip()))
            new += 1
    return sorted(out)


def misplaced(scopes: Scopes, commit: str, want: list[tuple[str, str, str, str]],
              got: list[tuple[str, str, str, str]]) -> tuple[list[str], list[str]]:
    """(misplaced lines, lines in a scope upstream renamed) of ``got`` against ``want``."""
    if got == want:
        return [], []
    wrong, renamed = [], []
    expected = {(p, s, t): scope for p, s, scope, t in want}
    for path, sign, scope, text in got:
        was = expected.get((path, sign, text))
        if was is None or was == scope:
            continue
        line = f"{path}: {sign}{text[:60]!r} was in {was}, landed in {scope}"
        (wrong if scopes.exists(commit, path, was) else renamed).append(line)
    if {(p, s, t) for p, s, _, t in got} != set(expected):
        wrong.append("the changed lines differ from the patch's")
    return wrong, renamed


# -- the verification pass -----------------------------------------------------------------------------

def patchtool_outcomes(patchtool: list[str], project: Path, env: dict[str, str]) -> dict:  # type: ignore[type-arg]
    res = subprocess.run([*patchtool, "rebase", "--to", "0.5.23", "--dry-run", "--json", "--root", str(project)],
                         capture_output=True, text=True, env=env, check=False)
    if res.returncode:
        raise BenchError(f"patchtool rebase --dry-run failed ({res.returncode}): {res.stdout}{res.stderr}")
    return json.loads(res.stdout)["data"]  # type: ignore[no-any-return]


def git_loop(tree: Path, start: list[str], state: str, skip: list[str], limit: int) -> tuple[list[int], list[str]]:
    """Run ``start`` in ``tree``, then ``skip`` while ``state`` (a git path) exists; the 1-based numbers
    of the patches it stopped at, and the subjects of the commits it made on v0.5.23."""
    res = git(REPO, *start, cwd=tree, check=False)
    path = Path(git(REPO, "rev-parse", "--git-path", state, cwd=tree).stdout.strip())
    path = path if path.is_absolute() else tree / path
    stops = []
    for _ in range(limit + 1):
        if not path.exists():
            break
        name = "next" if state == "rebase-apply" else "msgnum"
        stops.append(int((path / name).read_text()))
        git(REPO, *skip, cwd=tree, check=False)
    if path.exists() or (res.returncode and not stops):
        raise BenchError(f"{' '.join(start[:2])} did not finish in {tree}: {res.stderr}")
    subjects = [" ".join(s.split()) for s in
                git(REPO, "log", "--reverse", "--format=%s", f"{NEW}..HEAD", cwd=tree).stdout.splitlines()]
    return stops, subjects


series_patches: list[Path] = []


def verify(patchtool: list[str], project: Path, repo: Path, pt_env: dict[str, str], work: Path,
           branch_tip: str) -> dict:  # type: ignore[type-arg]
    notes = {n["id"]: n for n in json.loads((project / "bench-series.json").read_text())}
    ids = list(notes)
    by_subject = {" ".join(n["subject"].split()): n["id"] for n in notes.values()}
    if len(by_subject) != len(ids):
        raise BenchError("two patches share a subject; the git commits cannot be matched to patches")
    scopes = Scopes(repo)
    old_commits = git(repo, "rev-list", "--reverse", f"{OLD}..{branch_tip}").stdout.split()
    want = {i: placement(scopes, repo, f"{c}^", c) for i, c in zip(ids, old_commits, strict=True)}

    # patchtool: the dry run, then the real thing with --skip at each stop, then check
    data = patchtool_outcomes(patchtool, project, pt_env)
    pt_outcome = {p["id"]: p["outcome"] for p in data["patches"]}
    pt_commit = {p["id"]: p["commit"] for p in data["patches"] if p.get("commit")}
    first_stop = next((n for n, i in enumerate(ids) if pt_outcome[i] in STOPS), len(ids))
    copy = work / "verify-project"
    shutil.copytree(project, copy)
    res = subprocess.run(["bash", str(rebase_script(work / "verify-pt.sh", patchtool, copy))],
                         capture_output=True, text=True, env=pt_env, check=False)
    if res.returncode:
        raise BenchError(f"patchtool rebase with --skip at every stop failed: {res.stdout}{res.stderr}")
    check = subprocess.run([*patchtool, "check", "--root", str(copy)], capture_output=True, text=True, env=pt_env,
                           check=False)
    if check.returncode or "check: clean" not in check.stdout:
        raise BenchError(f"patchtool check after the rebase is not clean:\n{check.stdout}{check.stderr}")

    # git am -3: in order with --skip; then each patch alone
    am_tree = work / "verify-am"
    git(repo, "worktree", "add", "--quiet", "--detach", str(am_tree), NEW)
    am_stops, am_subjects = git_loop(am_tree, ["am", "-3", "-q", *map(str, series_patches)], "rebase-apply",
                                     ["am", "-q", "--skip"], len(ids))
    am_commits = dict(zip((by_subject[s] for s in am_subjects),
                          git(repo, "rev-list", "--reverse", f"{NEW}..HEAD", cwd=am_tree).stdout.split(), strict=True))
    am_tip = git(repo, "rev-parse", "HEAD", cwd=am_tree).stdout.strip()
    alone = {}
    for i, patch in zip(ids, series_patches, strict=True):
        git(repo, "reset", "-q", "--hard", NEW, cwd=am_tree)
        alone[i] = git(repo, "am", "-3", "-q", str(patch), cwd=am_tree, check=False).returncode == 0
        git(repo, "am", "--abort", cwd=am_tree, check=False)

    # git rebase --onto
    rb_tree = work / "verify-rebase"
    git(repo, "worktree", "add", "--quiet", "--detach", str(rb_tree), branch_tip)
    rb_stops, rb_subjects = git_loop(rb_tree, ["rebase", "-q", "--onto", NEW, OLD], "rebase-merge",
                                     ["rebase", "--skip"], len(ids))
    rb_commits = dict(zip((by_subject[s] for s in rb_subjects),
                          git(repo, "rev-list", "--reverse", f"{NEW}..HEAD", cwd=rb_tree).stdout.split(), strict=True))

    # where each tool put each patch
    report: dict[str, dict] = {}  # type: ignore[type-arg]
    for tool, commits in (("patchtool", pt_commit), ("git am -3", am_commits), ("git rebase", rb_commits)):
        bad, renamed, same = {}, {}, 0
        for i, c in commits.items():
            wrong, moved = misplaced(scopes, c, want[i], placement(scopes, repo, f"{c}^", c))
            same += not wrong and not moved
            if wrong:
                bad[i] = wrong
            if moved:
                renamed[i] = moved
        report[tool] = {"applied": len(commits), "same_scope": same, "misplaced": bad, "scope_renamed": renamed}
    pt_tip = pt_commit[[i for i in ids if i in pt_commit][-1]]
    differ = git(repo, "diff", "--name-only", pt_tip, am_tip).stdout.split()

    upstream = [i for i in ids if pt_outcome[i] == "already upstream"]
    counts = {
        "patchtool": {"resolved": sum(pt_outcome[i] in RESOLVED for i in ids), "before_first_stop": first_stop,
                      "stopped_at": [i for i in ids if pt_outcome[i] in STOPS], "outcomes": pt_outcome},
        "git am -3": {"resolved": len(ids) - len(am_stops), "before_first_stop": (am_stops or [len(ids) + 1])[0] - 1,
                      "stopped_at": [ids[n - 1] for n in am_stops], "committed": len(am_commits),
                      "alone_resolved": sum(alone.values()),
                      "alone_failed": [i for i in ids if not alone[i]]},
        "git rebase": {"resolved": len(ids) - len(rb_stops), "before_first_stop": (rb_stops or [len(ids) + 1])[0] - 1,
                       "stopped_at": [ids[n - 1] for n in rb_stops], "committed": len(rb_commits)},
    }
    for tree in (am_tree, rb_tree):
        git(repo, "worktree", "remove", "--force", "--force", str(tree), check=False)
    shutil.rmtree(copy, ignore_errors=True)
    return {"kinds": {i: notes[i]["kind"] for i in ids}, "counts": counts, "placement": report,
            "upstream_patches": upstream, "patchtool_vs_git_am_files_differ": differ}


# -- the timed commands ------------------------------------------------------------------------------

def rebase_script(path: Path, patchtool: list[str], project: Path) -> Path:
    pt = shlex.join([*patchtool])
    root = shlex.quote(str(project))
    path.write_text(f"{pt} rebase --to 0.5.23 --root {root} >/dev/null 2>&1; rc=$?\nn=0\n"
                    f"while [ $rc -eq 3 ] && [ $n -lt 64 ]; do\n"
                    f"  {pt} rebase --skip --reason 'bench: left out' --root {root} >/dev/null 2>&1; rc=$?\n"
                    "  n=$((n + 1))\ndone\nexit $rc\n")
    return path


def git_loop_script(path: Path, tree: Path, start: str, state: str, skip: str) -> Path:
    path.write_text(f"cd {shlex.quote(str(tree))} || exit 1\n{start} >/dev/null 2>&1 && exit 0\n"
                    f"d=$(git rev-parse --git-path {state})\nn=0\n"
                    f'while [ -d "$d" ] && [ $n -lt 64 ]; do {skip} >/dev/null 2>&1; n=$((n + 1)); done\n'
                    f'[ ! -d "$d" ]\n')
    return path


def scan_script(path: Path, repo: Path, trees: Path, patches: list[Path]) -> Path:
    q = shlex.quote
    lines = ["set -e"]
    for v in VERSIONS:
        tree = q(str(trees / v))
        lines += [f"git --git-dir={q(str(repo))} worktree add --quiet --detach {tree} v{v}", "ok=0"]
        lines += [f"git -C {tree} apply --check {q(str(p))} 2>/dev/null && ok=$((ok + 1)) || true" for p in patches]
        lines.append(f'echo "{v} $ok"')
    path.write_text("\n".join(lines) + "\n")
    return path


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


# -- main ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, runs=5, min_runs=3)
    ap.add_argument("--project", type=Path, default=None,
                    help="where the bench project lives (default: bench/out/rebase/project-<base>)")
    ap.add_argument("--index", default="https://pypi.org/simple", help="the index to copy sglang's page from")
    return bench_main(ap, argv, run)


def run(args: argparse.Namespace) -> int:
    patchtool = find_patchtool(args.patchtool)
    compile_patchtool(patchtool)
    cache_dir = (args.cache_dir or default_cache_dir()).absolute()
    tags = ensure_releases(cache_dir)
    WORK.mkdir(parents=True, exist_ok=True)
    bench_cache = private_cache(cache_dir / "upstream.git", tags)
    repo = bench_cache / "upstream.git"
    project = ensure_project(args.project.absolute() if args.project else None, cache_dir, bench_cache, tags)
    series_patches[:] = sorted((project / "patches").glob("*.patch"))
    work = Path(tempfile.mkdtemp(prefix="ptbench-rebase-"))
    git_env_fixed = git_env(FIXED_IDENT)
    trees: list[Path] = []

    def drop_tree(tree: Path) -> None:
        quiet(["git", f"--git-dir={repo}", "worktree", "remove", "--force", "--force", str(tree)], git_env_fixed)
        shutil.rmtree(tree, ignore_errors=True)

    try:
        with local_index(args.index) as index_url:
            pt_env = git_env({"PATCHTOOL_CACHE_DIR": str(bench_cache), "PATCHTOOL_INDEX_URL": index_url})
            pypi_env = git_env({"PATCHTOOL_CACHE_DIR": str(bench_cache)})
            tip = make_branch(repo, "rebase-bench", series_patches, work / "index")
            print(f"verifying: {len(series_patches)} patches, {OLD} -> {NEW} ...", flush=True)
            verified = verify(patchtool, project, repo, pt_env, work, tip)
            counts = verified["counts"]
            keep = {i for i, o in counts["patchtool"]["outcomes"].items() if o not in STOPS}
            clean = subset_project(project, work / "clean-project", keep)
            clean_patches = sorted((clean / "patches").glob("*.patch"))
            clean_tip = make_branch(repo, "rebase-bench-clean", clean_patches, work / "index")
            print_verification(verified)

            # prepared worktrees (untimed), reset between runs
            am_tree, rb_tree = work / "am", work / "rb"
            for tree, rev in ((am_tree, NEW), (rb_tree, tip)):
                git(repo, "worktree", "add", "--quiet", "--detach", str(tree), rev)
                trees.append(tree)

            def prepared_am(patches: list[Path]) -> Callable[[str], tuple[list[str], dict[str, str]]]:
                def make(i: str) -> tuple[list[str], dict[str, str]]:
                    git(repo, "am", "--abort", cwd=am_tree, check=False)
                    git(repo, "reset", "-q", "--hard", NEW, cwd=am_tree)
                    start = shlex.join(["git", "am", "-3", "-q", *map(str, patches)])
                    return ["bash", str(git_loop_script(work / f"am-{i}.sh", am_tree, start, "rebase-apply",
                                                        "git am -q --skip"))], git_env_fixed
                return make

            def prepared_rebase(branch_tip: str) -> Callable[[str], tuple[list[str], dict[str, str]]]:
                def make(i: str) -> tuple[list[str], dict[str, str]]:
                    git(repo, "rebase", "--abort", cwd=rb_tree, check=False)
                    git(repo, "checkout", "-q", "--detach", "-f", branch_tip, cwd=rb_tree)
                    start = shlex.join(["git", "rebase", "-q", "--onto", NEW, OLD])
                    return ["bash", str(git_loop_script(work / f"rb-{i}.sh", rb_tree, start, "rebase-merge",
                                                        "git rebase --skip"))], git_env_fixed
                return make

            def fresh_patchtool(source: Path) -> Callable[[str], tuple[list[str], dict[str, str]]]:
                def make(i: str) -> tuple[list[str], dict[str, str]]:
                    copy = work / f"pt-{source.name}-{i}"
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(source, copy)
                    return ["bash", str(rebase_script(work / f"pt-{i}.sh", patchtool, copy))], pt_env
                return make

            def scan_git(i: str) -> tuple[list[str], dict[str, str]]:
                scan_trees = work / f"scan-{i}"
                for v in VERSIONS:
                    drop_tree(scan_trees / v)
                trees.extend(scan_trees / v for v in VERSIONS)
                script = scan_script(work / f"scan-{i}.sh", repo, scan_trees, series_patches)
                return ["bash", str(script)], git_env_fixed

            scan_cmd = [*patchtool, "scan", "--versions", "0.5.20..0.5.23", "--json", "--root", str(project)]
            commands: dict[tuple[str, str], Callable[[str], tuple[list[str], dict[str, str]]]] = {
                ("rebase", "patchtool"): fresh_patchtool(project),
                ("rebase", "git am -3"): prepared_am(series_patches),
                ("rebase", "git rebase"): prepared_rebase(tip),
                ("rebase-clean", "patchtool"): fresh_patchtool(clean),
                ("rebase-clean", "git am -3"): prepared_am(clean_patches),
                ("rebase-clean", "git rebase"): prepared_rebase(clean_tip),
                ("scan", "patchtool"): lambda i: (scan_cmd, pt_env),
                ("scan", "git apply --check"): scan_git,
                ("scan-pypi", "patchtool"): lambda i: (scan_cmd, pypi_env),
            }

            def once(key: tuple[str, str], i: str) -> Measured:
                cmd, env = commands[key](i)
                m = measure(cmd, env)
                if key[0] == "scan":
                    for tree in [t for t in trees if t.parent.name == f"scan-{i}"]:
                        drop_tree(tree)
                return m

            scan_data = json.loads(once(("scan", "patchtool"), "check").stdout)["data"]
            git_checks = once(("scan", "git apply --check"), "check").stdout.split()
            samples: dict[tuple[str, str], list[Measured]] = {k: [] for k in commands}
            for w in range(args.warmup):
                for key in commands:
                    once(key, f"w{w}")
            for n in range(args.runs):
                for key in commands:  # A B C, A B C: every pair back to back, every iteration
                    samples[key].append(once(key, str(n)))
                print(f"  run {n + 1}/{args.runs}: " + "  ".join(
                    f"{k[0]}/{k[1]} {samples[k][-1].seconds:.2f}s" for k in commands), flush=True)
    finally:
        for tree in trees:
            drop_tree(tree)
        shutil.rmtree(work, ignore_errors=True)
        quiet(["git", f"--git-dir={repo}", "worktree", "prune"], git_env_fixed)
        for ref in ("rebase-bench", "rebase-bench-clean"):
            quiet(["git", f"--git-dir={repo}", "update-ref", "-d", f"refs/heads/{ref}"], git_env_fixed)
        quiet(["git", f"--git-dir={repo}", "prune", "--expire=now"], git_env_fixed)

    summary = summarise(samples, verified, scan_data, git_checks, len(keep), project, cache_dir, tags, patchtool, args)
    print_table(summary)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(summary, indent=2) + "\n"
    (OUT / f"rebase-{stamp}.json").write_text(text)
    (OUT / "rebase-latest.json").write_text(text)
    print(f"\nJSON: {OUT / f'rebase-{stamp}.json'} (and {OUT / 'rebase-latest.json'})")
    return 0


def summarise(samples, verified, scan_data, git_checks, clean_count, project, cache_dir, tags, patchtool,  # type: ignore[no-untyped-def]
              args) -> dict:  # type: ignore[type-arg]
    results: dict[str, dict] = {}  # type: ignore[type-arg]
    for (pair, side), ms in samples.items():
        secs = [m.seconds for m in ms]
        results.setdefault(pair, {})[side] = {
            "median_s": statistics.median(secs), "min_s": min(secs), "max_s": max(secs), "runs_s": secs,
            "peak_rss_kib": max(m.maxrss_kib for m in ms)}
    ratios = []
    for pair, a, b, target, how in TARGETS:
        ratio = results[pair][a]["median_s"] / results[pair][b]["median_s"]
        ratios.append({"pair": pair, "a": a, "b": b, "ratio": ratio, "target": f"{how} {target}",
                       "meets": ratio <= target if how == "<=" else ratio < target})
    pt_counts, am_counts = verified["counts"]["patchtool"], verified["counts"]["git am -3"]
    return {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()},
        "upstream": {"cache": str(cache_dir), "tags": tags},
        "series": {"project": str(project), "patches": len(series_patches), "clean_subset": clean_count,
                   "kinds": verified["kinds"]},
        "patchtool": patchtool, "runs": args.runs, "warmup": args.warmup,
        "resolved": verified["counts"], "placement": verified["placement"],
        "patchtool_vs_git_am_files_differ": verified["patchtool_vs_git_am_files_differ"],
        "resolved_target": {"meets": pt_counts["resolved"] >= am_counts["resolved"]
                            and not any(p["misplaced"] for p in verified["placement"].values())},
        "scan_matrix": scan_data["matrix"], "git_apply_check_passes": dict(zip(git_checks[::2], git_checks[1::2],
                                                                               strict=True)),
        "results": results, "ratios": ratios,
    }


def print_verification(verified: dict) -> None:  # type: ignore[type-arg]
    c = verified["counts"]
    print(f"\nresolved without help (of {len(verified['kinds'])}):")
    for tool in ("patchtool", "git am -3", "git rebase"):
        extra = f", alone on a fresh {NEW}: {c[tool]['alone_resolved']}" if "alone_resolved" in c[tool] else ""
        print(f"  {tool:<11} {c[tool]['resolved']:>2} (before the first stop: {c[tool]['before_first_stop']}"
              f"{extra}); stops: {', '.join(c[tool]['stopped_at']) or 'none'}")
    for tool, p in verified["placement"].items():
        print(f"  {tool:<11} applied {p['applied']}, every changed line in its old scope: {p['same_scope']}, "
              f"misplaced: {len(p['misplaced'])}, in a scope upstream renamed: {len(p['scope_renamed'])}")
        for ident, lines in {**p["misplaced"], **p["scope_renamed"]}.items():
            print(f"      {ident}: {'; '.join(lines)}")
    differ = verified["patchtool_vs_git_am_files_differ"]
    print(f"  final trees, patchtool vs git am -3: {len(differ)} file(s) differ {differ if differ else ''}")


def print_table(summary: dict) -> None:  # type: ignore[type-arg]
    r = summary["results"]
    print(f"\n{summary['series']['patches']} patches, {OLD} -> {NEW} ({summary['series']['clean_subset']} in the "
          f"clean subset), {summary['runs']} runs each (medians; min-max in brackets)\n")
    head = f"{'pair':<14}{'command':<19}{'median':>9}  {'min-max':<16}{'peak RSS':>10}"
    print(head)
    print("-" * len(head))
    for pair, sides in r.items():
        for side, s in sides.items():
            spread = f"[{s['min_s']:.2f}-{s['max_s']:.2f}s]"
            print(f"{pair:<14}{side:<19}{s['median_s']:>8.2f}s  {spread:<16}{s['peak_rss_kib'] / 1024:>8.1f}MB")
    print()
    for x in summary["ratios"]:
        verdict = "meets" if x["meets"] else "MISSES"
        print(f"{x['pair']}: {x['a']}/{x['b']} = {x['ratio']:.2f}x (target {x['target']}: {verdict})")
    passes = summary["git_apply_check_passes"]
    print(f"git apply --check passes per version: {passes}")


if __name__ == "__main__":
    sys.exit(main())
