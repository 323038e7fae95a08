"""Time `patchtool rebase --history` against the same rebase without it: the 100-patch series moved
from sglang 0.5.20 to 0.5.23 (bench/make_rebase_series.py), with upstream's history read from a
local mirror.

Usage: python bench/history_bench.py [--runs N] [--commits N] [--cache-dir DIR] [--patchtool CMD]

SGLang's own repository is not fetched (this machine reaches PyPI alone): the mirror is a
synthetic upstream repository in bench/out/history/mirror.git, built from the two releases the
cache holds. Its v0.5.20 is the 0.5.20 import's commit; then one commit per file that changed by
0.5.23 (setting it to its 0.5.23 content), interleaved with filler commits to a CHANGELOG.md until
there are --commits commits (default 3000); the last is tagged v0.5.23 (the 0.5.23 tree plus
CHANGELOG.md). The mirror allows filters (`uploadpack.allowFilter`), as GitHub does, so the cold
fetch takes commits alone first, then trees, then the patches' blobs.

Timed, each a whole `patchtool rebase --to 0.5.23 --dry-run --json` process on the project:
  cold     --history with no history in the cache: the fetches and the questions (once, and
           --runs more times each on a fresh history directory)
  warm     --history with the history cached
  without  no --history
warm and without are interleaved after one warm-up of each; medians. The target: warm/without
<= 1.5. Results: a table on stdout and bench/out/history-latest.json. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_series import default_cache_dir, find_patchtool
from rebase_setup import ensure_releases

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out" / "history"


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    res = subprocess.run(
        ["git", f"--git-dir={repo}", *args], input=input, capture_output=True, check=True, env=_git_env()
    )
    return res.stdout.decode().strip()


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return {**env, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def make_mirror(cache: Path, tags: dict[str, str], dest: Path, commits: int) -> Path:
    """The synthetic upstream repository between the cache's 0.5.20 and 0.5.23 imports."""
    if (dest / "HEAD").exists():
        return dest
    old, new = tags["v0.5.20"], tags["v0.5.23"]
    tmp = dest.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["git", "init", "-q", "--bare", str(tmp)], check=True, env=_git_env())
    (tmp / "objects" / "info" / "alternates").write_text(f"{(cache / 'upstream.git' / 'objects').absolute()}\n")
    fields = git(tmp, "diff-tree", "-r", "--no-renames", "-z", old, new).split("\0")
    changes = []  # (fast-import file command, path)
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta:
            continue
        _, mode, _, blob, status = meta.lstrip(":").split(" ")
        changes.append((f"D {path}\n" if status.startswith("D") else f"M {mode} {blob} {path}\n", path))
    total = max(commits, len(changes))
    at = {i * total // len(changes): c for i, c in enumerate(changes)} if changes else {}
    stream = [f"reset refs/heads/main\nfrom {old}\n"]
    log = ""
    for n in range(total):
        if n in at:
            op, path = at[n]
            message = f"Update {path}"
        else:
            log += f"- change {n}\n"
            op = f"M 100644 inline CHANGELOG.md\ndata {len(log.encode())}\n{log}"
            message = f"Changelog entry {n}"
        stream.append(
            f"commit refs/heads/main\ncommitter Upstream <up@example.com> {1700000000 + n} +0000\n"
            f"data {len(message.encode())}\n{message}\n{op}\n"
        )
    subprocess.run(
        ["git", f"--git-dir={tmp}", "fast-import", "--quiet"],
        input="".join(stream).encode(),
        check=True,
        env=_git_env(),
    )
    git(tmp, "tag", "v0.5.20", old)
    git(tmp, "tag", "v0.5.23", "refs/heads/main")
    git(tmp, "repack", "-a", "-d", "-q")
    (tmp / "objects" / "info" / "alternates").unlink()
    git(tmp, "config", "uploadpack.allowFilter", "true")
    git(tmp, "config", "uploadpack.allowAnySHA1InWant", "true")
    tmp.rename(dest)
    return dest


def with_git_table(project: Path, mirror: Path) -> None:
    """The project's pins name the mirror as upstream's repository, with the tag template."""
    for pin in (project / "upstream-pins").glob("*.toml"):
        text = pin.read_text()
        if "[git]" in text:
            start = text.index("[git]")
            end = text.find("\n[", start + 1)
            text = text[:start] + text[end + 1 :] if end >= 0 else text[:start]
        pin.write_text(text.rstrip("\n") + f'\n\n[git]\nurl = "{mirror}"\ntag = "v{{version}}"\n')


def timed(patchtool: list[str], project: Path, env: dict[str, str], *more: str) -> float:
    start = time.perf_counter()
    res = subprocess.run(
        [*patchtool, "rebase", "--to", "0.5.23", "--dry-run", "--json", "--root", str(project), *more],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    took = time.perf_counter() - start
    if res.returncode not in (0, 5):
        raise SystemExit(f"rebase failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--commits", type=int, default=3000)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--patchtool", default=None)
    args = ap.parse_args(argv)
    patchtool = find_patchtool(args.patchtool)
    cache = (args.cache_dir or default_cache_dir()).absolute()
    tags, pin_text = ensure_releases(patchtool, cache)
    OUT.mkdir(parents=True, exist_ok=True)
    mirror = make_mirror(cache, tags, OUT / f"mirror-{args.commits}.git", args.commits)
    project = OUT / "project"
    if not (project / "patchset.toml").exists():
        from make_rebase_series import build

        build(project, cache_dir=cache, pin_text=pin_text, count=100)
    shutil.copyfile(
        BENCH.parent / "upstream-pins" / "sglang-0.5.23.toml", project / "upstream-pins" / "sglang-0.5.23.toml"
    )
    with_git_table(project, mirror)
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(cache), "PATCHTOOL_ALLOW_LOCAL_URLS": "1"}
    history = cache / "history"
    cold = []
    for _ in range(max(args.runs // 2, 1)):
        shutil.rmtree(history, ignore_errors=True)
        cold.append(timed(patchtool, project, env, "--history"))
    size = sum(f.stat().st_size for f in history.rglob("*") if f.is_file())
    timed(patchtool, project, env, "--history")
    timed(patchtool, project, env)
    warm, without = [], []
    for _ in range(args.runs):
        warm.append(timed(patchtool, project, env, "--history"))
        without.append(timed(patchtool, project, env))
    result = {
        "commits": int(git(mirror, "rev-list", "--count", "v0.5.20..v0.5.23")),
        "cold_s": statistics.median(cold),
        "warm_s": statistics.median(warm),
        "without_s": statistics.median(without),
        "ratio_warm_without": statistics.median(warm) / statistics.median(without),
        "history_bytes": size,
        "mirror_bytes": sum(f.stat().st_size for f in mirror.rglob("*") if f.is_file()),
        "runs": args.runs,
    }
    print(f"synthetic upstream: {result['commits']} commits between v0.5.20 and v0.5.23 (local mirror)")
    for key in ("cold_s", "warm_s", "without_s"):
        print(f"  {key:10} {result[key]:.2f} s")
    print(f"  warm/without {result['ratio_warm_without']:.2f} (target <= 1.5)")
    print(f"  history cached: {size / 1e6:.1f} MB (mirror {result['mirror_bytes'] / 1e6:.1f} MB)")
    (BENCH / "out" / "history-latest.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
