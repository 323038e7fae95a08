"""``init`` + ``import`` of a real quilt series against the scripted git import it replaces.

Issue 30 asks that a new fork of an sdist with a 10-patch series cost at most 2x what a script
costs that unpacks the same sdist into a git repository, commits it, then ``git apply``s and
commits each patch. Both sides run on the same machine in the same run, alternately, from a warm
patchtool cache (the sdist downloaded once before timing; the script reads the same file):

    python bench/import_bench.py --debian DIR --package werkzeug --runs 5

``--debian DIR`` is where ``bench/realseries/run.py fetch`` put Debian's packaging; the package's
release and series come from ``bench/realseries/packages.toml``. The series is cut to its first
``--patches`` entries (default 10, or all it has). Prints the medians and the ratio
patchtool/script; standard library only. ``--baseline-patchtool CMD`` times a second patchtool
(the code before a change) in the same iterations, against a cache of its own, after checking that
both import the same commits: the ratio new/baseline is printed too. Each patchtool's bytecode is
written first (``compileall``), as ``pip install`` does.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

from make_series import compile_patchtool

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent
IDENTITY = {
    "GIT_AUTHOR_NAME": "Bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "Bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


def package(name: str) -> dict[str, str]:
    with open(HERE / "realseries" / "packages.toml", "rb") as f:
        for p in tomllib.load(f)["package"]:
            if p["name"] == name:
                return p  # type: ignore[no-any-return]
    raise SystemExit(f"{name} is not in bench/realseries/packages.toml")


def series_of(debian: Path, count: int) -> Path:
    """A copy of the first ``count`` entries of Debian's series, with their patches."""
    src = debian / "debian" / "patches"
    lines = [ln for ln in (src / "series").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    out = Path(tempfile.mkdtemp(prefix="import-bench-series."))
    kept = lines[:count]
    for ln in kept:
        name = ln.split()[0]
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / name, out / name)
    (out / "series").write_text("\n".join(kept) + "\n")
    return out


def patchtool_import(
    pt: list[str], env: dict[str, str], spec: str, series: Path, *, read_back: bool = False
) -> dict[str, str]:
    """``init`` + ``import`` in a new directory; with ``read_back``, the files the import wrote
    (the patches, the manifest, the kept quilt series), to compare two patchtools' imports."""
    with tempfile.TemporaryDirectory(prefix="import-bench-pt.") as d:
        for args in (["init", "--upstream", spec, "--sdist"], ["import", "--series", str(series / "series")]):
            r = subprocess.run([*pt, *args], cwd=d, env=env, capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(f"patchtool {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
        root = Path(d)
        if not read_back:
            return {}
        return {
            str(f.relative_to(root)): f.read_text()
            for f in sorted(root.rglob("*"))
            if f.is_file() and ".patchtool" not in f.relative_to(root).parts
        }


def scripted_import(env: dict[str, str], sdist: Path, series: Path) -> None:
    """What a maintainer's script does: unpack, commit, then git apply and commit each patch."""
    with tempfile.TemporaryDirectory(prefix="import-bench-git.") as d:
        with tarfile.open(sdist) as tf:
            tf.extractall(d, filter="data")
        (top,) = Path(d).iterdir()

        def git(*args: str) -> None:
            subprocess.run(["git", *args], cwd=top, env=env, check=True, capture_output=True)

        git("init", "-q")
        git("add", "-A")
        git("commit", "-q", "-m", "upstream")
        for ln in (series / "series").read_text().splitlines():
            name, *opts = ln.split()
            git("apply", *(o for o in opts if o.startswith("-p")), str(series / name))
            git("add", "-A")
            git("commit", "-q", "-m", name)


def cpu_seconds() -> float:
    """User and system time of this process and of every child it has waited for: the script's
    side unpacks in this process, patchtool's in its own; less shaken than the clock by a busy
    machine."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debian", type=Path, required=True)
    ap.add_argument("--package", default="werkzeug")
    ap.add_argument("--patches", type=int, default=10)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--patchtool", default=shlex.join(["env", f"PYTHONPATH={CHECKOUT / 'tool'}", sys.executable, "-m", "patchtool"])
    )
    ap.add_argument("--baseline-patchtool", default=None, metavar="CMD", help="a second patchtool, timed beside")
    a = ap.parse_args(argv)
    p = package(a.package)
    spec = f"{p['name']}=={p['from']}"
    series = series_of(a.debian / p["debian"], a.patches)
    cache = Path(tempfile.mkdtemp(prefix="import-bench-cache."))
    env = {
        **os.environ,
        **IDENTITY,
        "PATCHTOOL_CACHE_DIR": str(cache),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(CHECKOUT / "tool"), os.environ.get("PYTHONPATH")])),
    }
    pt = shlex.split(a.patchtool)
    compile_patchtool(pt)
    imported = patchtool_import(pt, env, spec, series, read_back=True)  # warm-up: downloads and imports the sdist once
    (sdist,) = [f for f in cache.rglob("*.tar.gz") if f.is_file()][:1] or [None]
    if sdist is None:
        raise SystemExit(f"no sdist of {spec} in the patchtool cache {cache}")
    base = shlex.split(a.baseline_patchtool) if a.baseline_patchtool else None
    base_env = {**env, "PATCHTOOL_CACHE_DIR": str(cache) + "-baseline"}
    if base is not None:
        compile_patchtool(base)
        if patchtool_import(base, base_env, spec, series, read_back=True) != imported:  # warm-up, and the same import
            raise SystemExit("the baseline patchtool imports other patches or another manifest")
    scripted_import(env, sdist, series)  # warm-up
    ours: list[float] = []
    olds: list[float] = []
    theirs: list[float] = []
    cpu: dict[str, list[float]] = {"ours": [], "olds": [], "theirs": []}
    for _ in range(a.runs):
        for side, times, run in (
            ("ours", ours, lambda: patchtool_import(pt, env, spec, series)),
            ("olds", olds, (lambda: patchtool_import(base, base_env, spec, series)) if base is not None else None),
            ("theirs", theirs, lambda: scripted_import(env, sdist, series)),
        ):
            if run is None:
                continue
            c, t = cpu_seconds(), time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
            cpu[side].append(cpu_seconds() - c)
    n = len((series / "series").read_text().splitlines())
    po, gs = statistics.median(ours), statistics.median(theirs)
    print(f"{spec}, {n} patches, {a.runs} runs each, medians:")
    print(f"  patchtool init + import    {po:7.2f} s  (min {min(ours):.2f}, max {max(ours):.2f})")
    if olds:
        bo = statistics.median(olds)
        print(f"  baseline init + import     {bo:7.2f} s  (min {min(olds):.2f}, max {max(olds):.2f})")
    print(f"  git: unpack, apply, commit {gs:7.2f} s  (min {min(theirs):.2f}, max {max(theirs):.2f})")
    print(f"  ratio patchtool/git        {po / gs:7.2f}x  (target: at most 2x)")
    if olds:
        print(f"  ratio baseline/git         {bo / gs:7.2f}x")
        print(f"  ratio patchtool/baseline   {po / bo:7.2f}x")
    print(
        f"  ratio of the minimums      {min(ours) / min(theirs):7.2f}x"
        + (f" (baseline {min(olds) / min(theirs):.2f}x)" if olds else "")
    )
    cpus = {side: statistics.median(v) for side, v in cpu.items() if v}
    print(
        f"  CPU seconds (user+sys, medians): patchtool {cpus['ours']:.2f}, git {cpus['theirs']:.2f}, "
        f"ratio {cpus['ours'] / cpus['theirs']:.2f}x"
        + (f"; baseline {cpus['olds']:.2f}, ratio {cpus['olds'] / cpus['theirs']:.2f}x" if "olds" in cpus else "")
    )
    for c in (cache, Path(base_env["PATCHTOOL_CACHE_DIR"])):
        shutil.rmtree(c, ignore_errors=True)
    shutil.rmtree(series, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
