"""Time `patchtool build` (repack the cached sglang wheel with the series) against `wheel unpack` + `wheel pack`.

Usage: python bench/wheel_bench.py [--runs N] [--warmup N] [--cache-dir DIR] [--patchtool CMD]
                                   [--baseline-patchtool CMD] [--python PY]

The pair, each run as whole commands, interleaved A B A B after the warm-up:

  A  patchtool build --out DIR              (this repository's series on the active pin; the
                                             upstream wheel and its import already cached)
  B  python -m wheel unpack -d DIR <wheel>; python -m wheel pack -d DIR <unpacked>
                                            (the same cached wheel; target: A/B <= 1.0)
  A' the same build with --baseline-patchtool CMD, when given (say the code before a rewrite),
     in the same iterations: the ratio A/A' is printed too

Wall time is time.perf_counter() around each whole command (B: both commands). Peak RSS
is the ru_maxrss os.wait4() reports (the command's largest process, descendants it
waited for included). The memory target is peak RSS of A <= 2 x the wheel's compressed
size + the constant, taken as the peak RSS of `patchtool --version` (Python and the
imports). Standard library only; `wheel` must be importable by --python (default: this
interpreter). Results go to stdout and to bench/out/wheel-<UTC time>.json and
bench/out/wheel-latest.json.
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
import time
import tomllib
from pathlib import Path

from make_series import (
    BenchError,
    bench_main,
    bench_parser,
    compile_patchtool,
    default_cache_dir,
    find_baseline,
    find_patchtool,
)

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OUT = BENCH / "out"
TARGET_RATIO = 1.0
TARGET_MEMORY = 2.0  # x the compressed wheel, above the start-up constant


def measure(cmds: list[list[str]], env: dict[str, str]) -> tuple[float, int]:
    """Run ``cmds`` one after another; total wall seconds and the largest peak RSS (KiB)."""
    total, peak = 0.0, 0
    for cmd in cmds:
        with tempfile.TemporaryFile() as out:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env)
            _, status, usage = os.wait4(proc.pid, 0)
            total += time.perf_counter() - t0
            if os.waitstatus_to_exitcode(status) != 0:
                out.seek(0)
                raise BenchError(f"{shlex.join(cmd[:4])} ... failed:\n{out.read().decode(errors='replace')}")
        peak = max(peak, usage.ru_maxrss)
    return total, peak


def cached_wheel(cache_dir: Path) -> Path:
    pin_name = tomllib.loads((REPO / "patchset.toml").read_text())["pin"]
    art = tomllib.loads((REPO / "upstream-pins" / f"{pin_name}.toml").read_text()).get("artifact")
    if not art or not art["filename"].endswith(".whl"):
        raise BenchError(f"pin {pin_name} has no release wheel to repack")
    path = cache_dir / "downloads" / art["sha256"][:2] / art["filename"]
    if not path.is_file():
        raise BenchError(f"{path} is not cached; run `patchtool build` (or `patchtool check`) once first")
    return path


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, runs=7, min_runs=5, per="side", baseline=True)
    ap.add_argument("--python", default=sys.executable, help="a Python with `wheel` installed")
    return bench_main(ap, argv, run)


def run(args: argparse.Namespace) -> int:
    cache_dir = (args.cache_dir or default_cache_dir()).absolute()
    patchtool = find_patchtool(args.patchtool)
    compile_patchtool(patchtool)
    baseline = find_baseline(args.baseline_patchtool)
    if subprocess.run([args.python, "-c", "import wheel"], capture_output=True).returncode:
        raise BenchError(f"{args.python} cannot import wheel: pip install wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k != "SOURCE_DATE_EPOCH"}
    env.update(PATCHTOOL_CACHE_DIR=str(cache_dir), GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    wheel = cached_wheel(cache_dir)
    work = Path(tempfile.mkdtemp(prefix="ptwheelbench-"))
    try:

        def side_a(i: int, pt: list[str] = patchtool) -> list[list[str]]:
            return [[*pt, "build", "--root", str(REPO), "--out", str(work / f"a-{i}")]]

        def side_b(i: int) -> list[list[str]]:
            unpacked = work / f"u-{i}"
            stem = "-".join(wheel.name.split("-")[:2])
            (work / f"b-{i}").mkdir()  # wheel pack does not create its --dest-dir
            return [
                [args.python, "-m", "wheel", "unpack", "-d", str(unpacked), str(wheel)],
                [args.python, "-m", "wheel", "pack", "-d", str(work / f"b-{i}"), str(unpacked / stem)],
            ]

        labels = ["patchtool build", *(["baseline build"] if baseline else []), "wheel unpack+pack"]
        times: dict[str, list[float]] = {k: [] for k in labels}
        rss: dict[str, list[int]] = {k: [] for k in labels}
        startup = min(measure([[*patchtool, "--version"]], env)[1] for _ in range(3))
        for i in range(args.warmup + args.runs):
            sides = [("patchtool build", side_a(i)), ("wheel unpack+pack", side_b(i))]
            if baseline:
                sides.insert(1, ("baseline build", side_a(i + 10_000, baseline)))
            for label, cmds in sides:
                seconds, peak = measure(cmds, env)
                if i >= args.warmup:
                    times[label].append(seconds)
                    rss[label].append(peak)
            for leftover in work.iterdir():
                shutil.rmtree(leftover, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    a, b = (summary(times[k]) for k in ("patchtool build", "wheel unpack+pack"))
    ratio = a["median"] / b["median"]
    before = summary(times["baseline build"]) if baseline else None
    peak_a = max(rss["patchtool build"])
    size_kib = wheel.stat().st_size // 1024
    over = peak_a - startup
    result = {
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "wheel": {"file": wheel.name, "compressed_kib": size_kib},
        "runs": args.runs,
        "warmup": args.warmup,
        "seconds": {"patchtool build": a, "wheel unpack+pack": b, **({"baseline build": before} if before else {})},
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "baseline": baseline,
        "baseline_ratio": a["median"] / before["median"] if before else None,
        "peak_rss_kib": {
            "patchtool build": peak_a,
            "wheel unpack+pack": max(rss["wheel unpack+pack"]),
            "patchtool --version": startup,
        },
        "memory_over_startup_x_wheel": over / size_kib,
        "target_memory": TARGET_MEMORY,
    }
    print_result(result, {k: max(v) for k, v in rss.items()})
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = result["when"].replace(":", "")
    for name in (f"wheel-{stamp}.json", "wheel-latest.json"):
        (OUT / name).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ratio <= TARGET_RATIO and over <= TARGET_MEMORY * size_kib else 1


def print_result(result: dict, peak: dict[str, int]) -> None:  # type: ignore[type-arg]
    size_kib = result["wheel"]["compressed_kib"]
    print(
        f"{result['wheel']['file']} ({size_kib / 1024:.1f} MiB), {result['runs']} runs after {result['warmup']} "
        "warm-up, interleaved"
    )
    print(f"{'':22} {'median s':>9} {'min-max s':>13} {'peak RSS MiB':>13}")
    for label, s in result["seconds"].items():
        print(f"{label:22} {s['median']:9.3f} {s['min']:6.3f}-{s['max']:<6.3f} {peak[label] / 1024:13.1f}")
    print(f"{'patchtool --version':22} {'':9} {'':13} {result['peak_rss_kib']['patchtool --version'] / 1024:13.1f}")
    ratio = result["ratio"]
    verdict = "ok" if ratio <= TARGET_RATIO else "OVER TARGET"
    print(f"ratio build / (unpack+pack): {ratio:.2f} (target <= {TARGET_RATIO}) {verdict}")
    if result["baseline_ratio"] is not None:
        print(f"build: patchtool/baseline = {result['baseline_ratio']:.3f}x")
    over = result["memory_over_startup_x_wheel"]
    mem_verdict = "ok" if over <= TARGET_MEMORY else "OVER TARGET"
    print(
        f"peak RSS above start-up: {over * size_kib / 1024:.1f} MiB = {over:.2f} x the wheel "
        f"(target <= {TARGET_MEMORY}) {mem_verdict}"
    )


if __name__ == "__main__":
    sys.exit(main())
