"""Time patchtool against plain git on a 30-patch series over real sglang 0.5.23.

Usage: python bench/run.py [--runs N] [--warmup N] [--cache-dir DIR] [--patchtool CMD]
                           [--project DIR] [--count-git]

Pairs, each run as whole commands, interleaved A B A B after the warm-up:

  check  A  patchtool check --root <bench project>              (no checkout)
         B  bash: GIT_INDEX_FILE=tmp git read-tree v0.5.23; then per patch
            git apply --cached, git write-tree, git commit-tree   (target: A/B <= 2.0)
  apply  A  patchtool apply --into DIR                           (a new worktree)
         B  git worktree add --detach DIR v0.5.23; git -C DIR am <30 patches>
                                                                  (target: A/B <= 1.2)

Both sides run against bench/out/cache, a hard-linked local clone of the user's
cache (PATCHTOOL_CACHE_DIR, default the user cache), so the runs leave no worktrees
or objects behind there. Wall time is time.perf_counter() around each whole command; peak RSS is the
ru_maxrss that os.wait4() reports for the command (it covers the command and every
descendant it waited for, i.e. the biggest single process of the tree). Results go
to stdout as a table and to bench/out/ as JSON. Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_series
from make_series import BenchError, compile_patchtool, find_patchtool, git_env

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
TARGETS = {"check": 2.0, "apply": 1.2}
FIXED_IDENT = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
               "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost",
               "GIT_AUTHOR_DATE": "@0 +0000", "GIT_COMMITTER_DATE": "@0 +0000"}


# -- running one command -------------------------------------------------------------------

class Measured:
    def __init__(self, seconds: float, maxrss_kib: int, stdout: str, returncode: int = 0) -> None:
        self.seconds = seconds
        self.maxrss_kib = maxrss_kib
        self.stdout = stdout
        self.returncode = returncode


def measure(cmd: list[str], env: dict[str, str], *, cwd: Path | None = None, ok: tuple[int, ...] = (0,)) -> Measured:
    """Run ``cmd`` to completion; wall time and the peak RSS of its process tree. Raise when it
    exits with a status outside ``ok``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        if proc.returncode not in ok:
            raise BenchError(f"{shlex.join(cmd[:4])} ... failed ({proc.returncode}):\n"
                             f"{stdout}{err.read().decode(errors='replace')}")
    return Measured(elapsed, usage.ru_maxrss, stdout, proc.returncode)


def quiet(cmd: list[str], env: dict[str, str]) -> None:
    subprocess.run(cmd, env=env, capture_output=True, check=False)


# -- the bench project -----------------------------------------------------------------------

def ensure_project(project: Path | None, cache_dir: Path, base: str) -> Path:
    """The bench project, (re)built when missing or made by another make_series.py / base."""
    stamp_text = hashlib.sha256((BENCH / "make_series.py").read_bytes()
                                + make_series.DEFAULT_PIN_FILE.read_bytes()
                                + base.encode()).hexdigest()
    if project is None:
        project = OUT / f"project-{base[:12]}"
    stamp = project / ".bench-stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        return project
    if project.exists():
        if not (project / ".bench-stamp").exists() and any(project.iterdir()):
            raise BenchError(f"{project} exists and was not made by make_series.py; "
                             "choose another --project")
        shutil.rmtree(project)
    print(f"building the bench project in {project} ...", flush=True)
    make_series.build(project, cache_dir=cache_dir)
    stamp.write_text(stamp_text)
    return project


def private_cache(source_repo: Path, tag: str, base: str) -> Path:
    """A bench-only patchtool cache: a local (hard-linked) clone of the user's ``upstream.git``.

    Both sides of every pair run against it, so the user's cache gets no worktrees and
    none of the commits the runs make (``git am`` stamps each with the current time, so
    they differ from run to run); ``prune`` drops those afterwards.
    """
    cache = OUT / "cache"
    repo = cache / "upstream.git"
    have = subprocess.run(["git", f"--git-dir={repo}", "rev-parse", "--verify", "--quiet",
                           f"refs/tags/{tag}^{{commit}}"], capture_output=True, text=True,
                          env=git_env(), check=False).stdout.strip() if (repo / "HEAD").exists() else ""
    if have != base:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        res = subprocess.run(["git", "clone", "--bare", "--quiet", str(source_repo), str(repo)],
                             capture_output=True, text=True, env=git_env(), check=False)
        if res.returncode:
            raise BenchError(f"could not copy {source_repo} to {repo}: {res.stderr.strip()}")
        for args in (["remote", "remove", "origin"], ["config", "gc.auto", "0"],
                     ["config", "core.logAllRefUpdates", "false"]):
            quiet(["git", f"--git-dir={repo}", *args], git_env())
    quiet(["git", f"--git-dir={repo}", "worktree", "prune"], git_env())
    return cache


def patch_files(project: Path) -> list[Path]:
    return sorted((project / "patches").glob("*.patch"))


def subject_of(patch: Path) -> str:
    lines = patch.read_text(encoding="utf-8").split("\n")
    for i, line in enumerate(lines):
        if line.startswith("Subject: "):
            subject = line[len("Subject: "):]
            for cont in lines[i + 1:]:
                if not cont.startswith(" "):
                    break
                subject += cont
            return subject.removeprefix("[PATCH] ")
    return "patch"


def baseline_check_script(path: Path, repo: Path, tag: str, patches: list[Path], index: Path) -> Path:
    """The plain-git equivalent of a check that also commits: read-tree, then per patch
    apply --cached, write-tree and commit-tree. Prints the final tree."""
    q = shlex.quote
    lines = ["set -eu", f"export GIT_DIR={q(str(repo))} GIT_INDEX_FILE={q(str(index))}",
             f"rm -f {q(str(index))}", f"git read-tree {q(tag)}", f"c=$(git rev-parse {q(tag)}^{{commit}})"]
    for p in patches:
        lines += [f"git apply --cached {q(str(p))}", "t=$(git write-tree)",
                  f"c=$(git commit-tree \"$t\" -p \"$c\" -m {q(subject_of(p))})"]
    lines += ["echo \"$t\"", f"rm -f {q(str(index))}"]
    path.write_text("\n".join(lines) + "\n")
    return path


# -- main --------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = make_series.bench_parser(__doc__, runs=7, min_runs=5)
    ap.add_argument("--project", type=Path, default=None,
                    help="where the bench project lives (default: bench/out/project-<base>)")
    ap.add_argument("--count-git", action="store_true",
                    help="also count the git processes each command starts (one extra, untimed run)")
    return make_series.bench_main(ap, argv, run)


def run(args: argparse.Namespace) -> int:
    cache_dir = (args.cache_dir or make_series.default_cache_dir()).absolute()
    pin = make_series.read_pin(make_series.DEFAULT_PIN_FILE)
    source_repo, base = make_series.resolve_base(cache_dir, pin)
    tag = f"v{pin['version']}"
    OUT.mkdir(parents=True, exist_ok=True)
    project = ensure_project(args.project.absolute() if args.project else None, cache_dir, base)
    bench_cache = private_cache(source_repo, tag, base)
    repo = bench_cache / "upstream.git"
    patches = patch_files(project)

    patchtool = find_patchtool(args.patchtool)
    compile_patchtool(patchtool)

    pt_env = git_env({"PATCHTOOL_CACHE_DIR": str(bench_cache)})
    git_base_env = git_env(FIXED_IDENT)
    gitdir = ["git", f"--git-dir={repo}"]

    work = Path(tempfile.mkdtemp(prefix="ptbench-"))
    made: list[Path] = []

    def cleanup(tree: Path) -> None:
        quiet([*gitdir, "worktree", "remove", "--force", "--force", str(tree)], git_base_env)
        shutil.rmtree(tree, ignore_errors=True)
        quiet([*gitdir, "worktree", "prune"], git_base_env)

    script = baseline_check_script(work / "baseline-check.sh", repo, tag, patches, work / "index")
    commands = {
        ("check", "patchtool"): lambda i: (
            [*patchtool, "check", "--root", str(project)], pt_env, None),
        ("check", "git"): lambda i: (["bash", str(script)], git_base_env, None),
        ("apply", "patchtool"): lambda i: (
            [*patchtool, "apply", "--root", str(project), "--into", str(work / f"pt-{i}")],
            pt_env, work / f"pt-{i}"),
        ("apply", "git"): lambda i: (
            ["bash", "-c", 'set -e; git --git-dir="$1" worktree add --quiet --detach "$2" "$3"; '
                           'shift 3; git -C "$0" am --quiet "$@"',
             str(work / f"git-{i}"), str(repo), str(work / f"git-{i}"), tag,
             *map(str, patches)],
            git_base_env, work / f"git-{i}"),
        ("startup", "patchtool"): lambda i: ([*patchtool, "--version"], pt_env, None),
    }

    def once(key: tuple[str, str], i: int | str) -> Measured:
        cmd, env, tree = commands[key](i)
        try:
            m = measure(cmd, env)
            if key[0] == "apply":
                assert tree is not None
                m.stdout = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD^{tree}"],
                                          capture_output=True, text=True, env=git_base_env,
                                          check=True).stdout.strip()
            return m
        finally:
            if tree is not None:
                cleanup(tree)
                made.append(tree)

    try:
        # correctness first: the project is clean, and both sides of each pair build the same tree
        first = once(("check", "patchtool"), "check")
        if "check: clean" not in first.stdout:
            raise BenchError(f"patchtool check of {project} is not clean:\n{first.stdout}")
        pt_tree = once(("apply", "patchtool"), "verify").stdout
        git_tree = once(("apply", "git"), "verify").stdout
        check_tree = once(("check", "git"), "verify").stdout.strip()
        if not (pt_tree == git_tree == check_tree):
            raise BenchError(f"the trees differ: patchtool apply {pt_tree}, git am {git_tree}, "
                             f"git apply --cached {check_tree}")
        print(f"verified: check clean, all three build tree {pt_tree[:12]} "
              f"({len(patches)} patches on {pin['name']})", flush=True)

        keys = list(commands)
        samples: dict[tuple[str, str], list[Measured]] = {k: [] for k in keys}
        for w in range(args.warmup):
            for k in keys:
                once(k, f"w{w}")
        for i in range(args.runs):
            for k in keys:  # A B A B: each pair back to back, every iteration
                samples[k].append(once(k, i))
            print(f"  run {i + 1}/{args.runs}: " + "  ".join(
                f"{k[0]}/{k[1]} {samples[k][-1].seconds * 1000:.0f}ms" for k in keys), flush=True)

        counts = count_git(commands, work, cleanup) if args.count_git else {}
    finally:
        for tree in made:
            if tree.exists():
                cleanup(tree)
        shutil.rmtree(work, ignore_errors=True)
        quiet([*gitdir, "prune", "--expire=now"], git_base_env)

    summary = summarise(samples, counts, patches, project, cache_dir, bench_cache, base, patchtool, args)
    print_table(summary)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(summary, indent=2) + "\n"
    (OUT / f"summary-{stamp}.json").write_text(text)
    (OUT / "latest.json").write_text(text)
    print(f"\nJSON: {OUT / f'summary-{stamp}.json'} (and {OUT / 'latest.json'})")
    return 0


def count_git(commands: dict, work: Path, cleanup) -> dict[str, int]:
    """How many git processes each command starts, through a logging ``git`` first on PATH."""
    real = shutil.which("git")
    assert real is not None
    shim_dir = work / "shim"
    shim_dir.mkdir()
    log = work / "git.log"
    shim = shim_dir / "git"
    shim.write_text(f'#!/bin/sh\necho "$*" >> {shlex.quote(str(log))}\nexec {shlex.quote(real)} "$@"\n')
    shim.chmod(0o755)
    counts = {}
    for key, make in commands.items():
        cmd, env, tree = make(f"count-{key[0]}-{key[1]}")
        env = {**env, "PATH": f"{shim_dir}{os.pathsep}{env.get('PATH', '')}"}
        log.write_text("")
        try:
            measure(cmd, env)
        finally:
            if tree is not None:
                cleanup(tree)
        counts[f"{key[0]}/{key[1]}"] = len(log.read_text().splitlines())
    return counts


def summarise(samples, counts, patches, project, cache_dir, bench_cache, base, patchtool, args) -> dict:
    results = {}
    for (pair, side), ms in samples.items():
        secs = [m.seconds for m in ms]
        results.setdefault(pair, {})[side] = {
            "median_s": statistics.median(secs), "min_s": min(secs), "max_s": max(secs),
            "stdev_s": statistics.stdev(secs) if len(secs) > 1 else 0.0,
            "runs_s": secs, "peak_rss_kib": max(m.maxrss_kib for m in ms),
            "git_processes": counts.get(f"{pair}/{side}"),
        }
    for pair, target in TARGETS.items():
        ratio = results[pair]["patchtool"]["median_s"] / results[pair]["git"]["median_s"]
        results[pair]["ratio"] = ratio
        results[pair]["target"] = target
        results[pair]["meets_target"] = ratio <= target
    return {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "git": subprocess.run(["git", "--version"], capture_output=True,
                                          text=True).stdout.strip()},
        "upstream": {"cache": str(cache_dir), "bench_cache": str(bench_cache), "base": base},
        "series": {"project": str(project), "patches": len(patches)},
        "patchtool": patchtool, "runs": args.runs, "warmup": args.warmup,
        "results": results,
    }


def print_table(summary: dict) -> None:
    r = summary["results"]
    print(f"\n{summary['series']['patches']} patches on {summary['upstream']['base'][:12]}, "
          f"{summary['runs']} runs each (medians; min-max in brackets)\n")
    head = f"{'pair':<8}{'command':<11}{'median':>10}{'  min-max':<20}{'peak RSS':>10}{'git procs':>11}"
    print(head)
    print("-" * len(head))
    for pair in ("check", "apply", "startup"):
        for side in ("patchtool", "git"):
            if side not in r[pair]:
                continue
            s = r[pair][side]
            procs = "" if s["git_processes"] is None else str(s["git_processes"])
            print(f"{pair:<8}{side:<11}{s['median_s'] * 1000:>8.0f}ms"
                  f"  [{s['min_s'] * 1000:.0f}-{s['max_s'] * 1000:.0f}ms]".ljust(20)
                  + f"{s['peak_rss_kib'] / 1024:>8.1f}MB{procs:>11}")
    print()
    for pair in TARGETS:
        p = r[pair]
        verdict = "meets" if p["meets_target"] else "MISSES"
        print(f"{pair}: patchtool/git = {p['ratio']:.2f}x (target <= {p['target']}x: {verdict})")
    print(f"startup floor: `patchtool --version` takes {r['startup']['patchtool']['median_s'] * 1000:.0f}ms")


if __name__ == "__main__":
    sys.exit(main())
