"""Time `patchtool rebase` and `patchtool scan` against git: 30 and 100 patches moved from sglang 0.5.20 to 0.5.23.

Usage: python bench/rebase_bench.py [--patches 30,100] [--pairs P,...] [--runs N] [--warmup N]
                                    [--cache-dir DIR] [--patchtool CMD] [--baseline-patchtool CMD]
                                    [--project DIR] [--index URL]

The series (bench/make_rebase_series.py): small edits of real 0.5.20 code, chosen by what upstream
did to their code by 0.5.23 (unchanged, moved, rewritten next to the edit, rewritten under it,
taken upstream, file deleted) plus edits that build on earlier ones; 30 of them, and a 100-patch
series that repeats the same pattern of kinds.

First, untimed, what each tool resolves without help and where it puts every hunk
(bench/rebase_verify.py). Then, timed, interleaved after the warm-up (every side of every pair
back to back, each iteration), each a whole command (a bash script for the loops), medians:

  rebase        patchtool: `rebase --to 0.5.23` then `rebase --skip --reason ...` at every stop,
                on a fresh copy of the project | `git am -3` + `git am --skip` at every stop, in a
                prepared worktree at v0.5.23 (untimed) | `git rebase --onto v0.5.23 v0.5.20` +
                `git rebase --skip`, in a prepared worktree at the branch (untimed)
  rebase-clean  the same on the series without the patches that stop patchtool (one command each)
  report        `rebase --to 0.5.23 --dry-run --json`: the full report (every outcome, drift,
                assumption checks, range-diff), against the `git am -3` side of `rebase`
  steps         the rebase one command at a time (bench/rebase_steps.py): at each conflict the
                files are resolved (untimed) and `rebase --continue` timed; a deleted file
                `rebase --skip`; the figure is the median command that goes to the next stop
  scan          `patchtool scan --versions 0.5.20..0.5.23` | per version, `git worktree add` a
                checkout, then `git apply --check` each patch in it
  scan-pypi     the patchtool scan again, reading PyPI instead of the local index

With --baseline-patchtool CMD every patchtool side is timed a second time with CMD (another
checkout of patchtool, say the code before a rewrite), in the same iterations, against its own
hard-linked copy of the cache, and the ratios patchtool/baseline are printed beside the targets.

patchtool reads a local copy of PyPI's sglang index (fetched once per run of this script, served
on 127.0.0.1 via PATCHTOOL_INDEX_URL), so no timed command waits on the network except
`scan-pypi`. Everything runs against bench/out/rebase/cache, a hard-linked clone of the user's
cache (PATCHTOOL_CACHE_DIR, default the user cache), which is given sglang 0.5.20 to 0.5.23
through `patchtool rebase` when it lacks them. Results: a table on stdout, JSON in
bench/out/rebase-<UTC time>.json and bench/out/rebase-latest.json. Standard library only: patchtool
is run as a command, never imported.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_series import (
    BenchError,
    bench_main,
    bench_parser,
    compile_patchtool,
    default_cache_dir,
    find_baseline,
    find_patchtool,
    git_env,
)
from rebase_setup import (
    NEW,
    OLD,
    OUT,
    VERSIONS,
    WORK,
    drop_new_refs,
    ensure_project,
    ensure_releases,
    git,
    git_loop_script,
    local_index,
    make_branch,
    rebase_script,
    refs,
    scan_script,
    subset_project,
)
from rebase_steps import STOPS, stepwise
from rebase_verify import Setting, print_verification, verify
from run import FIXED_IDENT, Measured, measure, private_cache, quiet

PAIRS = ("rebase", "rebase-clean", "report", "steps", "scan", "scan-pypi")
# the ratios printed: (name, A (pair, side), B (pair, side))
RATIOS = (
    ("rebase vs git am -3", ("rebase", "patchtool"), ("rebase", "git am -3")),
    ("rebase vs git rebase", ("rebase", "patchtool"), ("rebase", "git rebase")),
    ("rebase-clean vs git am -3", ("rebase-clean", "patchtool"), ("rebase-clean", "git am -3")),
    ("rebase-clean vs git rebase", ("rebase-clean", "patchtool"), ("rebase-clean", "git rebase")),
    ("report (--dry-run) vs git am -3 skipping", ("report", "patchtool"), ("rebase", "git am -3")),
    ("scan vs git apply --check", ("scan", "patchtool"), ("scan", "git apply --check")),
)
# targets by series size: ratio name -> (target, "<=" or "<"); the steps target is in seconds
TARGETS: dict[int, dict[str, tuple[float, str]]] = {
    30: {
        "rebase vs git am -3": (1.5, "<="),
        "rebase vs git rebase": (1.0, "<"),
        "rebase-clean vs git am -3": (1.5, "<="),
        "rebase-clean vs git rebase": (1.0, "<"),
        "scan vs git apply --check": (0.2, "<="),
    },
    100: {
        "report (--dry-run) vs git am -3 skipping": (1.0, "<="),
        "rebase-clean vs git am -3": (0.9, "<="),
        "steps: median command to the next stop (s)": (0.25, "<="),
    },
}
STEPS_RATIO = "steps: median command to the next stop (s)"

Maker = Callable[[str], Any]  # iteration tag -> a Measured, or a stepwise dict for "steps"


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, runs=5, min_runs=3, baseline=True)
    ap.add_argument(
        "--patches", default="30,100", help="the series sizes to run, comma-separated: 30, 100 or both (default 30,100)"
    )
    ap.add_argument("--pairs", default=",".join(PAIRS), help=f"the pairs to time (default all: {','.join(PAIRS)})")
    ap.add_argument(
        "--project",
        type=Path,
        default=None,
        help="where the bench projects live, as project<N>-<base> (default: bench/out/rebase)",
    )
    ap.add_argument("--index", default="https://pypi.org/simple", help="the index to copy sglang's page from")
    return bench_main(ap, argv, run)


class Bench:
    """One run of the script: the commands, the caches, the releases; shared by the series sizes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        try:
            self.sizes = [int(x) for x in args.patches.split(",") if x.strip()]
        except ValueError:
            raise BenchError(f"--patches takes sizes like 30,100, not {args.patches!r}") from None
        self.pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
        unknown = sorted(set(self.pairs) - set(PAIRS))
        if unknown:
            raise BenchError(f"unknown pair(s) {', '.join(unknown)}; choose from {', '.join(PAIRS)}")
        self.patchtool = find_patchtool(args.patchtool)
        compile_patchtool(self.patchtool)
        self.baseline = find_baseline(args.baseline_patchtool)
        self.cache_dir = (args.cache_dir or default_cache_dir()).absolute()
        self.tags, self.pin_text = ensure_releases(self.patchtool, self.cache_dir)
        WORK.mkdir(parents=True, exist_ok=True)
        source = self.cache_dir / "upstream.git"
        self.caches = {"patchtool": private_cache(source, self.tags, WORK / "cache")}
        if self.baseline:
            self.caches["baseline"] = private_cache(source, self.tags, WORK / "cache-baseline")
        self.repo = self.caches["patchtool"] / "upstream.git"
        # the git sides' timed worktrees live in a repository of their own: in a patchtool cache each
        # would be one more configuration file that side's every command checks, the other side's not
        self.caches["git"] = private_cache(source, self.tags, WORK / "cache-git")
        self.git_repo = self.caches["git"] / "upstream.git"
        self.commands = {"patchtool": self.patchtool, **({"baseline": self.baseline} if self.baseline else {})}
        self.git_env = git_env(FIXED_IDENT)
        self.index_url = ""

    def env(self, side: str, *, index: bool = True) -> dict[str, str]:
        extra = {"PATCHTOOL_CACHE_DIR": str(self.caches[side])}
        if index:
            extra["PATCHTOOL_INDEX_URL"] = self.index_url
        return git_env(extra)


def run(args: argparse.Namespace) -> int:
    bench = Bench(args)
    before = {side: refs(c / "upstream.git") for side, c in bench.caches.items()}
    sizes: dict[str, Any] = {}
    try:
        projects = {
            n: ensure_project(
                args.project.absolute() / f"project{n}-{bench.tags[OLD][:12]}" if args.project else None,
                n,
                bench.caches["patchtool"],
                bench.tags,
                bench.pin_text,
            )
            for n in bench.sizes
        }
        with local_index(args.index) as index_url:
            bench.index_url = index_url
            for n in bench.sizes:
                sizes[str(n)] = one_size(bench, n, projects[n])
    finally:
        for side, cache in bench.caches.items():
            repo = cache / "upstream.git"
            quiet(["git", f"--git-dir={repo}", "worktree", "prune"], bench.git_env)
            drop_new_refs(repo, before[side])
            quiet(["git", f"--git-dir={repo}", "prune", "--expire=now"], bench.git_env)
    summary = {
        "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip(),
        },
        "upstream": {"cache": str(bench.cache_dir), "tags": bench.tags},
        "patchtool": bench.patchtool,
        "baseline": bench.baseline,
        "runs": args.runs,
        "warmup": args.warmup,
        "pairs": bench.pairs,
        "sizes": sizes,
    }
    for s in sizes.values():
        print_table(s, summary)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(summary, indent=2) + "\n"
    (OUT / f"rebase-{stamp}.json").write_text(text)
    (OUT / "rebase-latest.json").write_text(text)
    print(f"\nJSON: {OUT / f'rebase-{stamp}.json'} (and {OUT / 'rebase-latest.json'})")
    return 0


def one_size(bench: Bench, n: int, project: Path) -> dict[str, Any]:
    """Verify and time the ``n``-patch series; its summary."""
    repo = bench.repo
    patches = sorted((project / "patches").glob("*.patch"))
    work = Path(tempfile.mkdtemp(prefix=f"ptbench-rebase{n}-"))
    trees: list[Path] = []
    try:
        tip = make_branch(repo, f"rebase-bench-{n}", patches, work / "index")
        print(f"verifying: {len(patches)} patches, {OLD} -> {NEW} ...", flush=True)
        (work / "verify").mkdir()
        verified = verify(
            Setting(bench.patchtool, project, repo, bench.env("patchtool"), work / "verify", tip, patches)
        )
        print_verification(verified)
        outcomes = verified["counts"]["patchtool"]["outcomes"]
        baseline_differ = baseline_outcomes(bench, project, outcomes)
        keep = {i for i, o in outcomes.items() if o not in STOPS}
        clean = subset_project(project, work / "clean-project", keep)
        clean_patches = sorted((clean / "patches").glob("*.patch"))
        clean_tip = make_branch(repo, f"rebase-bench-{n}-clean", clean_patches, work / "index")
        branches = [f"+refs/heads/rebase-bench-{n}{end}:refs/heads/rebase-bench-{n}{end}" for end in ("", "-clean")]
        git(bench.git_repo, "fetch", "-q", str(repo), *branches)
        commands = timed_commands(bench, work, trees, project, patches, tip, clean, clean_patches, clean_tip)
        checks = scan_checks(commands) if "scan" in bench.pairs else {}
        samples = interleave(commands, bench.args)
    finally:
        for tree in trees:
            quiet(
                ["git", f"--git-dir={bench.git_repo}", "worktree", "remove", "--force", "--force", str(tree)],
                bench.git_env,
            )
        shutil.rmtree(work, ignore_errors=True)
        for each in (repo, bench.git_repo):
            quiet(["git", f"--git-dir={each}", "worktree", "prune"], bench.git_env)
            for ref in (f"rebase-bench-{n}", f"rebase-bench-{n}-clean"):
                quiet(["git", f"--git-dir={each}", "update-ref", "-d", f"refs/heads/{ref}"], bench.git_env)
    return summarise(n, samples, verified, checks, len(keep), project, baseline_differ)


def baseline_outcomes(bench: Bench, project: Path, outcomes: dict[str, str]) -> list[str] | None:
    """The patches whose dry-run outcome differs between patchtool and the baseline (None without one)."""
    if not bench.baseline:
        return None
    res = subprocess.run(
        [*bench.baseline, "rebase", "--to", "0.5.23", "--dry-run", "--json", "--root", str(project)],
        capture_output=True,
        text=True,
        env=bench.env("baseline"),
        check=False,
    )
    if res.returncode not in (0, 5):  # 5: a conflict predicted (older patchtool: 0)
        raise BenchError(f"the baseline's rebase --dry-run failed ({res.returncode}): {res.stdout}{res.stderr}")
    theirs = {p["id"]: p["outcome"] for p in json.loads(res.stdout)["data"]["patches"]}
    differ = [f"{i}: {o} / baseline {theirs.get(i)}" for i, o in outcomes.items() if theirs.get(i) != o]
    print(f"  the baseline's dry run: {len(differ)} outcome(s) differ" + "".join(f"\n      {d}" for d in differ))
    return differ


# -- the timed commands ------------------------------------------------------------------------------


def timed_commands(
    bench: Bench,
    work: Path,
    trees: list[Path],
    project: Path,
    patches: list[Path],
    tip: str,
    clean: Path,
    clean_patches: list[Path],
    clean_tip: str,
) -> dict[tuple[str, str], Maker]:
    repo, genv = bench.git_repo, bench.git_env
    am_tree, rb_tree = work / "am", work / "rb"
    for tree, rev in ((am_tree, NEW), (rb_tree, tip)):
        git(repo, "worktree", "add", "--quiet", "--detach", str(tree), rev)
        trees.append(tree)

    def git_side(tree: Path, start: list[str], reset: list[str], state: str, skip: str) -> Maker:
        def once(i: str) -> Measured:
            git(repo, *("am" if state == "rebase-apply" else "rebase"), "--abort", cwd=tree, check=False)
            git(repo, *reset, cwd=tree)
            script = git_loop_script(work / f"{tree.name}-{i}.sh", tree, shlex.join(start), state, skip)
            return measure(["bash", str(script)], genv)

        return once

    def am(series: list[Path]) -> Maker:
        return git_side(
            am_tree,
            ["git", "am", "-3", "-q", *map(str, series)],
            ["reset", "-q", "--hard", NEW],
            "rebase-apply",
            "git am -q --skip",
        )

    def rebase(branch_tip: str) -> Maker:
        return git_side(
            rb_tree,
            ["git", "rebase", "-q", "--onto", NEW, OLD],
            ["checkout", "-q", "--detach", "-f", branch_tip],
            "rebase-merge",
            "git rebase --skip",
        )

    cmds: dict[tuple[str, str], Maker] = {}
    for side, pt in bench.commands.items():
        env = bench.env(side)

        def fresh(source: Path, pt: list[str] = pt, env: dict[str, str] = env, side: str = side) -> Maker:
            def once(i: str) -> Measured:
                copy = work / f"{side}-{source.name}-{i}"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(source, copy)
                return measure(["bash", str(rebase_script(work / f"{side}-{i}.sh", pt, copy))], env)

            return once

        report = [*pt, "rebase", "--to", "0.5.23", "--dry-run", "--json", "--root", str(project)]
        scan = [*pt, "scan", "--versions", f"{VERSIONS[0]}..{VERSIONS[-1]}", "--json", "--root", str(project)]
        cmds |= {
            ("rebase", side): fresh(project),
            ("rebase-clean", side): fresh(clean),
            ("report", side): lambda _i, c=report, e=env: measure(c, e, ok=(0, 5)),
            ("steps", side): lambda i, pt=pt, e=env, s=side: stepwise(pt, project, work / f"steps-{s}-{i}", e),
            ("scan", side): lambda _i, c=scan, e=env: measure(c, e, ok=(0, 5)),
        }
        if side == "patchtool":
            pypi_env = bench.env(side, index=False)
            cmds[("scan-pypi", side)] = lambda _i, c=scan, e=pypi_env: measure(c, e, ok=(0, 5))
    cmds |= {
        ("rebase", "git am -3"): am(patches),
        ("rebase", "git rebase"): rebase(tip),
        ("rebase-clean", "git am -3"): am(clean_patches),
        ("rebase-clean", "git rebase"): rebase(clean_tip),
        ("scan", "git apply --check"): scan_git(bench, work, patches),
    }
    wanted = set(bench.pairs) | ({"rebase"} if "report" in bench.pairs else set())  # report's B side
    return {k: v for k, v in sorted(cmds.items(), key=lambda kv: PAIRS.index(kv[0][0])) if k[0] in wanted}


def scan_git(bench: Bench, work: Path, patches: list[Path]) -> Maker:
    def once(i: str) -> Measured:
        trees = work / f"scan-{i}"
        script = scan_script(work / f"scan-{i}.sh", bench.git_repo, trees, patches)
        try:
            return measure(["bash", str(script)], bench.git_env)
        finally:
            for v in VERSIONS:
                quiet(
                    ["git", f"--git-dir={bench.git_repo}", "worktree", "remove", "--force", "--force", str(trees / v)],
                    bench.git_env,
                )
                shutil.rmtree(trees / v, ignore_errors=True)

    return once


def scan_checks(commands: dict[tuple[str, str], Maker]) -> dict[str, Any]:
    """What each scan finds (untimed): patchtool's matrix, and git apply --check's passes per version."""
    matrix = json.loads(commands[("scan", "patchtool")]("check").stdout)["data"]["matrix"]
    passes = commands[("scan", "git apply --check")]("check").stdout.split()
    return {"scan_matrix": matrix, "git_apply_check_passes": dict(zip(passes[::2], passes[1::2], strict=True))}


def interleave(commands: dict[tuple[str, str], Maker], args: argparse.Namespace) -> dict[tuple[str, str], list[Any]]:
    samples: dict[tuple[str, str], list[Any]] = {k: [] for k in commands}
    for w in range(args.warmup):
        for once in commands.values():
            once(f"w{w}")
    for r in range(args.runs):
        for key, once in commands.items():  # every side of every pair back to back, every iteration
            samples[key].append(once(str(r)))
        print(
            f"  run {r + 1}/{args.runs}: "
            + "  ".join(f"{k[0]}/{k[1]} {_seconds(samples[k][-1]):.2f}s" for k in commands),
            flush=True,
        )
    return samples


def _seconds(sample: Any) -> float:
    if isinstance(sample, Measured):
        return sample.seconds
    return float(sample["start_s"] + sum(s["seconds"] for s in sample["steps"]))


# -- the summary -----------------------------------------------------------------------------------


def _stats(secs: list[float]) -> dict[str, Any]:
    return {"median_s": statistics.median(secs), "min_s": min(secs), "max_s": max(secs), "runs_s": secs}


def steps_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The stepwise runs of one side: every command that went to the next stop, the first (rebase
    --to) and the last (the one that finished) apart."""
    to_stop = [s["seconds"] for r in runs for s in r["steps"] if not s["finished"]]
    last = [s["seconds"] for r in runs for s in r["steps"] if s["finished"]]
    return {
        "to_next_stop": _stats(to_stop) if to_stop else None,
        "finishing": _stats(last) if last else None,
        "start": _stats([r["start_s"] for r in runs]),
        "total": _stats([_seconds(r) for r in runs]),
        "per_run": {a: sum(s["action"] == a for s in runs[0]["steps"]) for a in ("continue", "skip")},
    }


def summarise(
    n: int,
    samples: dict[tuple[str, str], list[Any]],
    verified: dict[str, Any],
    checks: dict[str, Any],
    clean_count: int,
    project: Path,
    baseline_differ: list[str] | None,
) -> dict[str, Any]:
    results: dict[str, dict[str, Any]] = {}
    steps: dict[str, Any] = {}
    for (pair, side), ms in samples.items():
        if pair == "steps":
            steps[side] = steps_summary(ms)
        else:
            results.setdefault(pair, {})[side] = {
                **_stats([m.seconds for m in ms]),
                "peak_rss_kib": max(m.maxrss_kib for m in ms),
            }
    targets = TARGETS.get(n, {})

    def verdict(name: str, value: float) -> dict[str, Any]:
        target, how = targets.get(name, (None, ""))
        meets = None if target is None else (value <= target if how == "<=" else value < target)
        return {
            "name": name,
            "value": value,
            "target": f"{how} {target}" if target is not None else None,
            "meets": meets,
        }

    ratios = [
        verdict(name, results[a[0]][a[1]]["median_s"] / results[b[0]][b[1]]["median_s"])
        for name, a, b in RATIOS
        if a[1] in results.get(a[0], {}) and b[1] in results.get(b[0], {})
    ]
    if steps.get("patchtool", {}).get("to_next_stop"):
        ratios.append(verdict(STEPS_RATIO, steps["patchtool"]["to_next_stop"]["median_s"]))
    before = [
        {"pair": pair, "ratio": sides["patchtool"]["median_s"] / sides["baseline"]["median_s"]}
        for pair, sides in results.items()
        if "baseline" in sides and "patchtool" in sides
    ]
    if all(steps.get(s, {}).get("to_next_stop") for s in ("patchtool", "baseline")):
        before.append(
            {
                "pair": "steps (to the next stop)",
                "ratio": steps["patchtool"]["to_next_stop"]["median_s"] / steps["baseline"]["to_next_stop"]["median_s"],
            }
        )
    placed = verified["placement"]
    return {
        "patches": n,
        "project": str(project),
        "clean_subset": clean_count,
        "kinds": verified["kinds"],
        "resolved": verified["counts"],
        "placement": placed,
        "placement_vs_git_rebase": verified["placement_vs_git_rebase"],
        "files_differ": verified["files_differ"],
        "resolved_target": {
            "meets": verified["counts"]["patchtool"]["resolved"] >= verified["counts"]["git am -3"]["resolved"]
            and not any(p["misplaced"] for p in placed.values())
            and not verified["placement_vs_git_rebase"]["differ"]
        },
        "baseline_outcomes_differ": baseline_differ,
        **checks,
        "results": results,
        "steps": steps,
        "ratios": ratios,
        "baseline_ratios": before,
    }


def print_table(s: dict[str, Any], summary: dict[str, Any]) -> None:
    print(
        f"\n{s['patches']} patches, {OLD} -> {NEW} ({s['clean_subset']} in the clean subset), "
        f"{summary['runs']} runs each (medians; min-max in brackets)\n"
    )
    head = f"{'pair':<14}{'command':<19}{'median':>9}  {'min-max':<16}{'peak RSS':>10}"
    print(head)
    print("-" * len(head))
    for pair, sides in s["results"].items():
        for side, r in sides.items():
            spread = f"[{r['min_s']:.2f}-{r['max_s']:.2f}s]"
            print(f"{pair:<14}{side:<19}{r['median_s']:>8.2f}s  {spread:<16}{r['peak_rss_kib'] / 1024:>8.1f}MB")
    for side, st in s["steps"].items():
        for what in ("start", "to_next_stop", "finishing"):
            if st[what]:
                spread = f"[{st[what]['min_s']:.2f}-{st[what]['max_s']:.2f}s]"
                print(
                    f"{'steps':<14}{side:<19}{st[what]['median_s']:>8.2f}s  {spread:<16}  {what.replace('_', ' ')}"
                    + (
                        f" ({len(st[what]['runs_s'])} commands: {st['per_run']['continue']} --continue, "
                        f"{st['per_run']['skip']} --skip per run)"
                        if what == "to_next_stop"
                        else ""
                    )
                )
    print()
    for x in s["ratios"]:
        verdict = "" if x["meets"] is None else f" (target {x['target']}: {'meets' if x['meets'] else 'MISSES'})"
        unit = "s" if x["name"] == STEPS_RATIO else "x"
        print(f"{x['name']}: {x['value']:.3f}{unit}{verdict}")
    for x in s["baseline_ratios"]:
        print(f"{x['pair']}: patchtool/baseline = {x['ratio']:.3f}x")
    print(
        f"no hunk misplaced, patchtool resolves as many as git am -3, and places each as git rebase does: "
        f"{'meets' if s['resolved_target']['meets'] else 'MISSES'}"
    )
    if "git_apply_check_passes" in s:
        print(f"git apply --check passes per version: {s['git_apply_check_passes']}")


if __name__ == "__main__":
    sys.exit(main())
