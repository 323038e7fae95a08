"""Time patchtool against plain git on a 30-patch series over real sglang 0.5.23.

Usage: python bench/run.py [--runs N] [--warmup N] [--cache-dir DIR] [--patchtool CMD]
                           [--baseline-patchtool CMD] [--floor-python PY] [--project DIR]
                           [--count-git]

Pairs, each run as whole commands, interleaved A B A B after the warm-up:

  check    A  patchtool check --root <bench project>              (no checkout)
           B  bash: GIT_INDEX_FILE=tmp git read-tree v0.5.23; then per patch
              git apply --cached, git write-tree, git commit-tree   (target: A/B <= 2.0)
  apply    A  patchtool apply --into DIR                           (a new worktree)
           B  git worktree add --detach DIR v0.5.23; git -C DIR am <30 patches>
                                                                    (target: A/B <= 1.2)
  startup  A  patchtool --version; patchtool status --root <bench project> (warm cache)
           B  python -c "import typer, git": the floor of the libraries (shown, no target:
              start-up milliseconds are not a target of this project)

With --baseline-patchtool CMD every patchtool command is also timed with CMD (say the code
before a rewrite: 'env PYTHONPATH=OLD/tool python -m patchtool'), in the same iterations, against
its own copy of the cache, and the ratios patchtool/baseline are printed too.

Every side runs against bench/out/cache (the baseline: bench/out/cache-baseline), a hard-linked
local clone of the user's cache (PATCHTOOL_CACHE_DIR, default the user cache), so the runs leave
no worktrees or objects behind there. Wall time is time.perf_counter() around each whole command; peak RSS is the
ru_maxrss that os.wait4() reports for the command (it covers the command and every
descendant it waited for, i.e. the biggest single process of the tree). Results go
to stdout as a table and to bench/out/ as JSON. Standard library only: patchtool and the floor
are commands.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_series
from make_series import BenchError, command_python, compile_patchtool, find_baseline, find_patchtool, git_env

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
TARGETS = {"check": 2.0, "apply": 1.2}
STARTUP_TARGET = None  # --version and status against the floor (python -c "import typer, git"): shown, no target
FLOOR = "import typer, git"
FIXED_IDENT = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_AUTHOR_DATE": "@0 +0000",
    "GIT_COMMITTER_DATE": "@0 +0000",
}


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
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        if proc.returncode not in ok:
            raise BenchError(
                f"{shlex.join(cmd[:4])} ... failed ({proc.returncode}):\n{stdout}{err.read().decode(errors='replace')}"
            )
    return Measured(elapsed, usage.ru_maxrss, stdout, proc.returncode)


def quiet(cmd: list[str], env: dict[str, str]) -> None:
    subprocess.run(cmd, env=env, capture_output=True, check=False)


# -- the bench project -----------------------------------------------------------------------


def ensure_project(project: Path | None, cache_dir: Path, base: str) -> Path:
    """The bench project, (re)built when missing or made by another make_series.py / base."""
    stamp_text = hashlib.sha256(
        (BENCH / "make_series.py").read_bytes() + make_series.DEFAULT_PIN_FILE.read_bytes() + base.encode()
    ).hexdigest()
    if project is None:
        project = OUT / f"project-{base[:12]}"
    stamp = project / ".bench-stamp"
    if stamp.is_file() and stamp.read_text() == stamp_text:
        return project
    if project.exists():
        if not (project / ".bench-stamp").exists() and any(project.iterdir()):
            raise BenchError(f"{project} exists and was not made by make_series.py; choose another --project")
        shutil.rmtree(project)
    print(f"building the bench project in {project} ...", flush=True)
    make_series.build(project, cache_dir=cache_dir)
    stamp.write_text(stamp_text)
    return project


def private_cache(source_repo: Path, tags: dict[str, str], cache: Path) -> Path:
    """A bench-only patchtool cache: a local (hard-linked) clone of the user's ``upstream.git``,
    made again when one of ``tags`` (name -> commit, named there by ``alias_releases``) differs,
    and the user's verified wheels, linked: with them a rebase or scan to an imported release
    reads sha256 and size from the cache, not the index.

    Every side of every pair runs against its own, so the user's cache gets no worktrees and
    none of the commits the runs make (``git am`` stamps each with the current time, so
    they differ from run to run); ``prune`` drops those afterwards.
    """
    repo = cache / "upstream.git"
    have = {}
    if (repo / "HEAD").exists():
        for tag in tags:
            have[tag] = subprocess.run(
                ["git", f"--git-dir={repo}", "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}"],
                capture_output=True,
                text=True,
                env=git_env(),
                check=False,
            ).stdout.strip()
    if have != tags:
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        res = subprocess.run(
            ["git", "clone", "--bare", "--quiet", str(source_repo), str(repo)],
            capture_output=True,
            text=True,
            env=git_env(),
            check=False,
        )
        if res.returncode:
            raise BenchError(f"could not copy {source_repo} to {repo}: {res.stderr.strip()}")
        for args in (
            ["remote", "remove", "origin"],
            ["config", "gc.auto", "0"],
            ["config", "core.logAllRefUpdates", "false"],
        ):
            quiet(["git", f"--git-dir={repo}", *args], git_env())
        make_series.alias_releases(repo, tags)
    quiet(["git", f"--git-dir={repo}", "worktree", "prune"], git_env())
    downloads = source_repo.parent / "downloads"
    for path in downloads.rglob("*.whl") if downloads.is_dir() else ():
        dest = cache / "downloads" / path.relative_to(downloads)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, dest)
            except OSError:  # another file system
                shutil.copy2(path, dest)
    return cache


def patch_files(project: Path) -> list[Path]:
    return sorted((project / "patches").glob("*.patch"))


def subject_of(patch: Path) -> str:
    lines = patch.read_text(encoding="utf-8").split("\n")
    for i, line in enumerate(lines):
        if line.startswith("Subject: "):
            subject = line[len("Subject: ") :]
            for cont in lines[i + 1 :]:
                if not cont.startswith(" "):
                    break
                subject += cont
            return subject.removeprefix("[PATCH] ")
    return "patch"


def baseline_check_script(path: Path, repo: Path, tag: str, patches: list[Path], index: Path) -> Path:
    """The plain-git equivalent of a check that also commits: read-tree, then per patch
    apply --cached, write-tree and commit-tree. Prints the final tree."""
    q = shlex.quote
    lines = [
        "set -eu",
        f"export GIT_DIR={q(str(repo))} GIT_INDEX_FILE={q(str(index))}",
        f"rm -f {q(str(index))}",
        f"git read-tree {q(tag)}",
        f"c=$(git rev-parse {q(tag)}^{{commit}})",
    ]
    for p in patches:
        lines += [
            f"git apply --cached {q(str(p))}",
            "t=$(git write-tree)",
            f'c=$(git commit-tree "$t" -p "$c" -m {q(subject_of(p))})',
        ]
    lines += ['echo "$t"', f"rm -f {q(str(index))}"]
    path.write_text("\n".join(lines) + "\n")
    return path


# -- main -----------------------------------------------------------------------------------------

# (name, A (pair, side), B (pair, side), target for A/B)
RATIOS = (
    ("check: patchtool/git", ("check", "patchtool"), ("check", "git"), TARGETS["check"]),
    ("apply: patchtool/git", ("apply", "patchtool"), ("apply", "git"), TARGETS["apply"]),
    (f"--version: patchtool/floor ({FLOOR})", ("version", "patchtool"), ("floor", "python"), STARTUP_TARGET),
    (f"status: patchtool/floor ({FLOOR})", ("status", "patchtool"), ("floor", "python"), STARTUP_TARGET),
)
PAIRS = ("check", "apply", "version", "status", "floor")
# iteration tag -> (command, environment, the worktree it makes or None, the repository that worktree is in)
Maker = Callable[[str], tuple[list[str], dict[str, str], Path | None, Path | None]]


def main(argv: list[str] | None = None) -> int:
    ap = make_series.bench_parser(__doc__, runs=7, min_runs=5, baseline=True)
    ap.add_argument(
        "--project", type=Path, default=None, help="where the bench project lives (default: bench/out/project-<base>)"
    )
    ap.add_argument(
        "--floor-python",
        default=None,
        metavar="PY",
        help=f"the Python that runs the start-up floor, `{FLOOR}` (default: patchtool's own)",
    )
    ap.add_argument(
        "--count-git",
        action="store_true",
        help="also count the git processes each command starts (one extra, untimed run)",
    )
    return make_series.bench_main(ap, argv, run)


def run(args: argparse.Namespace) -> int:
    cache_dir = (args.cache_dir or make_series.default_cache_dir()).absolute()
    pin = make_series.read_pin(make_series.DEFAULT_PIN_FILE)
    source_repo, base = make_series.resolve_base(cache_dir, pin)
    tag = f"v{pin['version']}"
    OUT.mkdir(parents=True, exist_ok=True)
    project = ensure_project(args.project.absolute() if args.project else None, cache_dir, base)
    patches = patch_files(project)
    patchtool = find_patchtool(args.patchtool)
    compile_patchtool(patchtool)
    baseline = find_baseline(args.baseline_patchtool)
    sides = {"patchtool": patchtool, **({"baseline": baseline} if baseline else {})}
    caches = {
        side: private_cache(source_repo, {tag: base}, OUT / ("cache" if side == "patchtool" else f"cache-{side}"))
        for side in sides
    }
    work = Path(tempfile.mkdtemp(prefix="ptbench-"))
    try:
        commands = make_commands(sides, caches, project, patches, tag, work, args.floor_python)
        verify(commands, project, pin["name"], len(patches))
        samples = interleave(commands, args)
        counts = count_git(commands, work) if args.count_git else {}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for cache in caches.values():
            quiet(["git", f"--git-dir={cache / 'upstream.git'}", "worktree", "prune"], git_env())
            quiet(["git", f"--git-dir={cache / 'upstream.git'}", "prune", "--expire=now"], git_env())

    summary = summarise(samples, counts, patches, project, cache_dir, caches, base, sides, args)
    print_table(summary)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(summary, indent=2) + "\n"
    (OUT / f"summary-{stamp}.json").write_text(text)
    (OUT / "latest.json").write_text(text)
    print(f"\nJSON: {OUT / f'summary-{stamp}.json'} (and {OUT / 'latest.json'})")
    return 0


def floor_command(
    patchtool: list[str], floor_python: str | None, env: dict[str, str]
) -> tuple[list[str], dict[str, str]] | str:
    """``python -c "import typer, git"`` in patchtool's Python (or ``floor_python``), or why it cannot
    run there (a Python without typer or GitPython: the start-up ratios are then left out)."""
    python, extra = command_python(patchtool)
    cmd = [floor_python or python, "-c", FLOOR]
    env = {**env, **extra}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        return f"`{shlex.join(cmd)}` fails ({last}); install typer and GitPython there, or pass --floor-python"
    return cmd, env


def make_commands(
    sides: dict[str, list[str]],
    caches: dict[str, Path],
    project: Path,
    patches: list[Path],
    tag: str,
    work: Path,
    floor_python: str | None,
) -> dict[tuple[str, str], Maker]:
    repo = caches["patchtool"] / "upstream.git"
    genv = git_env(FIXED_IDENT)
    script = baseline_check_script(work / "baseline-check.sh", repo, tag, patches, work / "index")
    commands: dict[tuple[str, str], Maker] = {}
    for side, pt in sides.items():
        env = git_env({"PATCHTOOL_CACHE_DIR": str(caches[side])})
        side_repo = caches[side] / "upstream.git"
        commands |= {
            ("check", side): lambda _i, pt=pt, env=env: ([*pt, "check", "--root", str(project)], env, None, None),
            ("apply", side): lambda i, pt=pt, env=env, s=side, r=side_repo: (
                [*pt, "apply", "--root", str(project), "--into", str(work / f"{s}-{i}")],
                env,
                work / f"{s}-{i}",
                r,
            ),
            ("version", side): lambda _i, pt=pt, env=env: ([*pt, "--version"], env, None, None),
            ("status", side): lambda _i, pt=pt, env=env: ([*pt, "status", "--root", str(project)], env, None, None),
        }
    floor = floor_command(sides["patchtool"], floor_python, git_env())
    if isinstance(floor, str):
        print(f"no start-up floor: {floor}", flush=True)
    else:
        commands[("floor", "python")] = lambda _i, c=floor[0], e=floor[1]: (c, e, None, None)
    commands |= {
        ("check", "git"): lambda _i: (["bash", str(script)], genv, None, None),
        ("apply", "git"): lambda i: (
            [
                "bash",
                "-c",
                'set -e; git --git-dir="$1" worktree add --quiet --detach "$2" "$3"; '
                'shift 3; git -C "$0" am --quiet "$@"',
                str(work / f"git-{i}"),
                str(repo),
                str(work / f"git-{i}"),
                tag,
                *map(str, patches),
            ],
            genv,
            work / f"git-{i}",
            repo,
        ),
    }
    return dict(sorted(commands.items(), key=lambda kv: PAIRS.index(kv[0][0])))


def drop_tree(repo: Path, tree: Path) -> None:
    genv = git_env(FIXED_IDENT)
    quiet(["git", f"--git-dir={repo}", "worktree", "remove", "--force", "--force", str(tree)], genv)
    shutil.rmtree(tree, ignore_errors=True)
    quiet(["git", f"--git-dir={repo}", "worktree", "prune"], genv)


def once(commands: dict[tuple[str, str], Maker], key: tuple[str, str], i: str) -> Measured:
    """One timed run of ``key``; for an apply, its stdout is the tree it built. Its worktree is removed."""
    cmd, env, tree, repo = commands[key](i)
    try:
        m = measure(cmd, env)
        if tree is not None:
            m.stdout = subprocess.run(
                ["git", "-C", str(tree), "rev-parse", "HEAD^{tree}"],
                capture_output=True,
                text=True,
                env=git_env(FIXED_IDENT),
                check=True,
            ).stdout.strip()
        return m
    finally:
        if tree is not None and repo is not None:
            drop_tree(repo, tree)


def verify(commands: dict[tuple[str, str], Maker], project: Path, pin_name: str, count: int) -> None:
    """The project is clean, every apply and the git script build the same tree, status runs."""
    sides = [s for p, s in commands if p == "check" and s != "git"]
    for side in sides:
        first = once(commands, ("check", side), "check")
        if "check: clean" not in first.stdout:
            raise BenchError(f"{side} check of {project} is not clean:\n{first.stdout}")
        once(commands, ("status", side), "check")
    trees = {f"{side} apply": once(commands, ("apply", side), "verify").stdout for side in [*sides, "git"]}
    trees["git apply --cached"] = once(commands, ("check", "git"), "verify").stdout.strip()
    if len(set(trees.values())) != 1:
        raise BenchError(f"the trees differ: {trees}")
    print(
        f"verified: check clean, all {len(trees)} build tree {trees['git apply --cached'][:12]} "
        f"({count} patches on {pin_name})",
        flush=True,
    )


def interleave(
    commands: dict[tuple[str, str], Maker], args: argparse.Namespace
) -> dict[tuple[str, str], list[Measured]]:
    samples: dict[tuple[str, str], list[Measured]] = {k: [] for k in commands}
    for w in range(args.warmup):
        for k in commands:
            once(commands, k, f"w{w}")
    for i in range(args.runs):
        for k in commands:  # A B A B: each pair back to back, every iteration
            samples[k].append(once(commands, k, str(i)))
        print(
            f"  run {i + 1}/{args.runs}: "
            + "  ".join(f"{k[0]}/{k[1]} {samples[k][-1].seconds * 1000:.0f}ms" for k in commands),
            flush=True,
        )
    return samples


def count_git(commands: dict[tuple[str, str], Maker], work: Path) -> dict[str, int]:
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
        cmd, env, tree, repo = make(f"count-{key[0]}-{key[1]}")
        env = {**env, "PATH": f"{shim_dir}{os.pathsep}{env.get('PATH', '')}"}
        log.write_text("")
        try:
            measure(cmd, env)
        finally:
            if tree is not None and repo is not None:
                drop_tree(repo, tree)
        counts[f"{key[0]}/{key[1]}"] = len(log.read_text().splitlines())
    return counts


def summarise(
    samples: dict[tuple[str, str], list[Measured]],
    counts: dict[str, int],
    patches: list[Path],
    project: Path,
    cache_dir: Path,
    caches: dict[str, Path],
    base: str,
    sides: dict[str, list[str]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    for (pair, side), ms in samples.items():
        secs = [m.seconds for m in ms]
        results.setdefault(pair, {})[side] = {
            "median_s": statistics.median(secs),
            "min_s": min(secs),
            "max_s": max(secs),
            "stdev_s": statistics.stdev(secs) if len(secs) > 1 else 0.0,
            "runs_s": secs,
            "peak_rss_kib": max(m.maxrss_kib for m in ms),
            "git_processes": counts.get(f"{pair}/{side}"),
        }
    ratios = []
    for name, (pa, sa), (pb, sb), target in RATIOS:
        if sb not in results.get(pb, {}):
            ratios.append({"name": name, "ratio": None, "target": target, "meets_target": None})
            continue
        ratio = results[pa][sa]["median_s"] / results[pb][sb]["median_s"]
        meets = None if target is None else ratio <= target
        ratios.append({"name": name, "ratio": ratio, "target": target, "meets_target": meets})
    before = [
        {"pair": pair, "ratio": r["patchtool"]["median_s"] / r["baseline"]["median_s"]}
        for pair, r in results.items()
        if "baseline" in r
    ]
    return {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip(),
        },
        "upstream": {"cache": str(cache_dir), "bench_caches": {s: str(c) for s, c in caches.items()}, "base": base},
        "series": {"project": str(project), "patches": len(patches)},
        "patchtool": sides["patchtool"],
        "baseline": sides.get("baseline"),
        "runs": args.runs,
        "warmup": args.warmup,
        "results": results,
        "ratios": ratios,
        "baseline_ratios": before,
    }


def print_table(summary: dict[str, Any]) -> None:
    r = summary["results"]
    print(
        f"\n{summary['series']['patches']} patches on {summary['upstream']['base'][:12]}, "
        f"{summary['runs']} runs each (medians; min-max in brackets)\n"
    )
    head = f"{'pair':<9}{'command':<11}{'median':>10}{'  min-max':<20}{'peak RSS':>10}{'git procs':>11}"
    print(head)
    print("-" * len(head))
    for pair, sides in r.items():
        for side, s in sides.items():
            procs = "" if s["git_processes"] is None else str(s["git_processes"])
            print(
                f"{pair:<9}{side:<11}{s['median_s'] * 1000:>8.0f}ms"
                f"  [{s['min_s'] * 1000:.0f}-{s['max_s'] * 1000:.0f}ms]".ljust(20)
                + f"{s['peak_rss_kib'] / 1024:>8.1f}MB{procs:>11}"
            )
    print()
    for x in summary["ratios"]:
        if x["ratio"] is None:
            print(f"{x['name']}: not measured (no floor)")
            continue
        if x["target"] is None:
            print(f"{x['name']} = {x['ratio']:.3f}x (no target)")
            continue
        verdict = "meets" if x["meets_target"] else "MISSES"
        print(f"{x['name']} = {x['ratio']:.3f}x (target <= {x['target']}x: {verdict})")
    for x in summary["baseline_ratios"]:
        print(f"{x['pair']}: patchtool/baseline = {x['ratio']:.3f}x")


if __name__ == "__main__":
    sys.exit(main())
