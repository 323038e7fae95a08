"""Run the GPU checks under a time budget and write the results file (`nox -s gpu` runs this).

    python tests/gpu/run.py [CHECK ...] [--tree DIR|ARCHIVE] [--out FILE] [--budget S] [--check-timeout S]
    python tests/gpu/run.py --pack-tree gpu-tree.tar.gz      # on a machine that can build the tree

CHECK is a pytest node id or path under tests/gpu (default: all of tests/gpu). Every check ends as
pass, fail or not-run with its reason (a check for sm_120 on another GPU: "needs sm_120, not run").
Checks run in one pytest process; one that runs longer than --check-timeout is killed as a failure
(a hang) and the rest resume in a fresh process; when the budget is spent, what has not run is
recorded as not run. Needs Python 3.11+, pytest, and torch/triton for the checks themselves.

Exit status: 0 when no check failed, 1 when one did or the run itself could not be made (no patched
tree, pytest could not start), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import gpu_tree  # noqa: E402  (beside this script; the image has no patchtool to import)
from gpu_results_plugin import DEADLINE_ENV, STATE_ENV, now  # noqa: E402

SCHEMA = 1
KIND = "patchtool-gpu-results"
DEFAULT_BUDGET = 420.0  # 7 minutes: the whole run, tree included, stays under 8
DEFAULT_CHECK_TIMEOUT = 150.0
RESULTS_DIR = "gpu-results"
_GRACE = 3.0  # seconds between SIGTERM and SIGKILL
_MIN_RELAUNCH = 10.0  # a fresh pytest process needs this much budget to be worth starting


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGTERM, _terminated)
    args = _parser().parse_args(argv)
    args.raw_argv = argv
    if args.pack_tree:
        try:
            tree = gpu_tree.pack(Path(args.pack_tree), cache_dir=args.cache_dir)
        except gpu_tree.TreeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(
            f"packed the patched tree ({len(tree.stamp['patches'])} patches, tip {tree.stamp['tip']}) "
            f"into {tree.path}; on the GPU machine: python tests/gpu/run.py --tree {tree.path}"
        )
        return 0
    started = now()
    with tempfile.TemporaryDirectory(prefix="gpu-run-") as scratch:
        results = run_checks(args, Path(scratch), started)
    out = Path(args.out) if args.out else REPO / RESULTS_DIR / _file_name(results)
    write_results(out, results)
    print(summary_text(results, out))
    failed = results["summary"]["fail"] or results["errors"]
    return 1 if failed else 0


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through _run_pytest, which stops the checks' process


def run_checks(args: argparse.Namespace, scratch: Path, started: float) -> dict[str, Any]:
    deadline = started + args.budget
    errors: list[str] = []
    tree: gpu_tree.Tree | None = None
    env = _pytest_env()
    try:
        tree = gpu_tree.resolve(args.tree or os.environ.get(gpu_tree.TREE_ENV), scratch, cache_dir=args.cache_dir)
        env[gpu_tree.TREE_ENV] = str(tree.path)
    except gpu_tree.TreeError as exc:
        errors.append(f"no patched tree: {exc}")
        env[gpu_tree.TREE_ERROR_ENV] = str(exc)
        env.pop(gpu_tree.TREE_ENV, None)
    stamp = tree.stamp if tree and tree.stamp and "patches" in tree.stamp else _repo_stamp()

    selectors = args.checks or [str(HERE.relative_to(REPO))]
    root = _rootdir(selectors)
    collected: list[str] = []
    checks: dict[str, dict[str, Any]] = {}
    device: dict[str, Any] | None = None
    pending = selectors
    launches = 0
    unreached = f"not run: the time budget of {args.budget:g} s ran out before it started"
    while pending:
        launches += 1
        state_file = scratch / f"state-{launches}.json"
        stop = _run_pytest(pending, env, state_file, root=root, deadline=deadline, check_timeout=args.check_timeout)
        state = _read_state(state_file)
        if state is None:
            errors.append(f"pytest did not start (exit {stop.returncode}): {stop.output_tail}")
            break
        device = device or state["device"]
        collected += [n for n in state["collected"] if n not in collected]
        checks.update(state["checks"])
        if stop.returncode not in (0, 1, 5, None):  # 2 interrupted, 3 internal error, 4 usage error
            errors.append(f"pytest exited {stop.returncode}: {stop.output_tail}")
            unreached = f"not run: pytest stopped before it (exit {stop.returncode})"
        if stop.killed is None:
            break
        running = (state.get("running") or {}).get("check")
        if running is not None:
            ran = round(now() - state["running"]["since"], 1)
            if stop.killed == "check-timeout":
                reason = (
                    f"killed after {ran} s, still running at the per-check limit of {args.check_timeout:g} s (a hang?)"
                )
                checks[running] = {"outcome": "fail", "reason": reason, "duration_s": ran, "figures": {}}
            else:
                reason = f"not run to the end: the time budget of {args.budget:g} s ran out after {ran} s of it"
                checks[running] = {"outcome": "not-run", "reason": reason, "duration_s": ran, "figures": {}}
        if deadline - now() < _MIN_RELAUNCH:
            break
        pending = [_absolute(root, n) for n in collected if n not in checks]
    for nodeid in collected:
        checks.setdefault(nodeid, {"outcome": "not-run", "duration_s": 0.0, "figures": {}, "reason": unreached})
    if device is None:
        device = _device_here()
    finished = now()
    rows = [_check_row(n, checks[n], device, stamp) for n in collected]
    return {
        "schema": SCHEMA,
        "kind": KIND,
        "started": _iso(started),
        "finished": _iso(finished),
        "duration_s": round(finished - started, 1),
        "budget_s": args.budget,
        "check_timeout_s": args.check_timeout,
        "command": shlex.join(["python", "tests/gpu/run.py", *(args.raw_argv or [])]),
        "repository": {"commit": gpu_tree._git_head(REPO), "dirty": _dirty(REPO)},
        "tree": tree.to_dict() if tree else None,
        "device": device,
        "checks": rows,
        "summary": {outcome: sum(r["outcome"] == outcome for r in rows) for outcome in ("pass", "fail", "not-run")},
        "errors": errors,
    }


class _Stop:
    def __init__(self, returncode: int | None, killed: str | None, output_tail: str) -> None:
        self.returncode = returncode
        self.killed = killed  # None, "check-timeout" or "budget"
        self.output_tail = output_tail


def _run_pytest(
    selectors: list[str], env: dict[str, str], state_file: Path, *, root: Path, deadline: float, check_timeout: float
) -> _Stop:
    """One pytest process over ``selectors``, its output passed through, stopped at the deadline or
    when one check outlives ``check_timeout``."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "gpu_results_plugin",
        "-p",
        "no:cacheprovider",
        "--continue-on-collection-errors",
        "-q",
        "-rA",
        "--rootdir",
        str(root),
        *selectors,
    ]
    log = state_file.with_suffix(".log")
    with log.open("w+b") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env={**env, STATE_ENV: str(state_file), DEADLINE_ENV: str(deadline)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        killed = None
        shown = 0
        try:
            while True:
                try:
                    proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                shown = _pass_through(log, shown)
                now_s = now()
                running = (_read_state(state_file) or {}).get("running")
                if now_s > deadline:
                    killed = "budget"
                elif running and now_s - running["since"] > check_timeout:
                    killed = "check-timeout"
                if killed:
                    break
        finally:  # also when the runner itself is interrupted: no check outlives it on the GPU
            if proc.poll() is None:
                _kill(proc)
        _pass_through(log, shown)
        out.seek(0)
        tail = out.read().decode("utf-8", "replace").strip().splitlines()[-8:]
    return _Stop(None if killed else proc.returncode, killed, "\n".join(tail))


def _rootdir(selectors: list[str]) -> Path:
    """The repository, so node ids read tests/gpu/...; checks kept elsewhere get a root above
    them too, so each keeps its file in its node id."""
    paths = [(REPO / s.split("::", 1)[0]).resolve() for s in selectors]
    return Path(os.path.commonpath([REPO, *paths]))


def _absolute(root: Path, nodeid: str) -> str:
    """A node id as an argument that selects it again from any directory."""
    file, sep, rest = nodeid.partition("::")
    return str(root / file) + sep + rest


def _pass_through(log: Path, shown: int) -> int:
    data = log.read_bytes()
    if len(data) > shown:
        sys.stdout.write(data[shown:].decode("utf-8", "replace"))
        sys.stdout.flush()
    return len(data)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, _GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return None


def _check_row(
    nodeid: str, check: dict[str, Any], device: dict[str, Any], stamp: dict[str, Any] | None
) -> dict[str, Any]:
    file, _, name = nodeid.partition("::")
    patch = gpu_tree.patch_of(file, stamp)
    return {
        "check": nodeid,
        "file": file,
        "name": name or None,
        "patch": patch["id"] if patch else None,
        "patch_file": patch["file"] if patch else None,
        "patch_sha256": patch["sha256"] if patch else None,
        "device": device.get("name"),
        "capability": device.get("capability"),
        "versions": {k: device.get(k) for k in ("torch", "triton", "cuda", "nvcc")},
        "outcome": check["outcome"],
        "reason": check.get("reason"),
        "duration_s": check.get("duration_s", 0.0),
        "figures": check.get("figures", {}),
    }


def write_results(path: Path, results: dict[str, Any]) -> None:
    """The results file, written whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    os.replace(partial, path)


def summary_text(results: dict[str, Any], out: Path) -> str:
    device = results["device"]
    where = (
        f"{device['name']} ({device['capability']})" if device.get("name") else f"no CUDA GPU ({device.get('no_gpu')})"
    )
    lines = [
        f"GPU checks on {where}; torch {device.get('torch')}, triton {device.get('triton')}, "
        f"CUDA {device.get('cuda')}, nvcc {device.get('nvcc')}"
    ]
    for row in results["checks"]:
        figures = " ".join(f"{k}={v}" for k, v in row["figures"].items())
        detail = (row["reason"] or "").split("\n", 1)[0] or figures  # the file has the whole reason
        lines.append(
            f"  {row['outcome']:<7} {row['check']} ({row['duration_s']:.1f} s)" + (f": {detail}" if detail else "")
        )
    lines += [f"  error: {e}" for e in results["errors"]]
    s = results["summary"]
    lines.append(
        f"{s['pass']} passed, {s['fail']} failed, {s['not-run']} not run in {results['duration_s']} s; results: {out}"
    )
    return "\n".join(lines)


def _pytest_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the CPU tests set it; here the kernels are compiled for the device
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(REPO / "tool"), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _repo_stamp() -> dict[str, Any] | None:
    try:
        return gpu_tree.series_stamp(REPO)
    except (OSError, ValueError, KeyError):
        return None


def _device_here() -> dict[str, Any]:
    import gpu_support

    return gpu_support.device_info()


def _dirty(repo: Path) -> bool | None:
    try:
        res = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return None
    return bool(res.stdout.strip()) if res.returncode == 0 else None


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _file_name(results: dict[str, Any]) -> str:
    device = results["device"]
    label = f"{device['name']}-{device['capability']}" if device.get("name") else "no-gpu"
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    return results["started"].replace(":", "").replace("-", "") + f"-{slug}.json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python tests/gpu/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("checks", nargs="*", metavar="CHECK", help="pytest node ids or paths under tests/gpu (default: all)")
    p.add_argument(
        "--tree",
        help="the patched tree: a directory (`patchtool apply --into DIR`) or an archive "
        "from --pack-tree (default: $PATCHTOOL_GPU_TREE, else `patchtool apply` now)",
    )
    p.add_argument("--cache-dir", type=Path, help="patchtool's cache when the tree is built here")
    p.add_argument("--out", help=f"the results file (default: {RESULTS_DIR}/<start>-<device>.json)")
    p.add_argument(
        "--budget", type=float, default=DEFAULT_BUDGET, help="seconds for the whole run (default %(default)s)"
    )
    p.add_argument(
        "--check-timeout",
        type=float,
        default=DEFAULT_CHECK_TIMEOUT,
        help="seconds one check may run before it is killed as hung (default %(default)s)",
    )
    p.add_argument(
        "--pack-tree", metavar="ARCHIVE", help="build the patched tree and pack it into ARCHIVE (.tar.gz), then exit"
    )
    return p


if __name__ == "__main__":
    raise SystemExit(main())
