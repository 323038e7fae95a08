"""Start-up budget: `patchtool --version` and `patchtool status` (warm cache) against the floor of
the libraries themselves, `python -c "import typer, git"`, timed side by side (interleaved runs,
medians of wall time, and of CPU time, which a busy machine disturbs less). Target: each at most
1.5x the floor.

    PATCHTOOL_CACHE_DIR=... python bench/startup_bench.py [--runs 31] [--root DIR] [--before TOOL_DIR]

``--root`` is a patch repository whose pin is imported in the cache (default: this checkout);
``--before`` another checkout's ``tool/`` directory, timed in the same run for a before/after.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and the processes it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.decode()[-2000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--root", type=Path, default=REPO)
    parser.add_argument("--before", type=Path, help="another checkout's tool/ directory, timed alongside")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # the tool runs from .pyc files
    py = sys.executable
    commands = {"--version": ["--version"], "status": ["status"], "status --json": ["status", "--json"]}
    cases: dict[str, tuple[list[str], str]] = {"floor: import typer, git": ([py, "-c", "import typer, git"], "")}
    for label, tool in (("before", args.before), ("", REPO / "tool")):
        if tool is not None:
            cases.update(
                {
                    f"{label} patchtool {name}".strip(): ([py, "-m", "patchtool", *words], str(tool))
                    for name, words in commands.items()
                }
            )
    for cmd, tool in cases.values():  # warm-up: bytecode caches, the page cache, the pin's import
        timed(cmd, args.root, {**env, "PYTHONPATH": tool})
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (cmd, tool) in cases.items():
            took, used = timed(cmd, args.root, {**env, "PYTHONPATH": tool})
            wall[name].append(took)
            cpu[name].append(used)
    floor = "floor: import typer, git"
    wall_floor, cpu_floor = statistics.median(wall[floor]), statistics.median(cpu[floor])
    print(f"{'command':<35} {'wall ms':>8} {'x floor':>8} {'CPU ms':>8} {'x floor':>8}   (medians of {args.runs})")
    for name in cases:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"{name:<35} {w * 1000:8.1f} {w / wall_floor:8.2f} {c * 1000:8.1f} {c / cpu_floor:8.2f}")


if __name__ == "__main__":
    main()
