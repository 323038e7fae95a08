"""Time the Python scope scanner (``patchtool.diff.scopes.python_scopes``) on every .py file of sglang 0.5.23.

Usage: python bench/scopes_bench.py [--baseline REV] [--runs N] [--cache-dir DIR] [--ast] [--tokenize]

Compares the scanner in this working tree with the one at git revision REV (default ``main``;
``tool/patchtool/diff/scopes.py``, or ``tool/patchtool/scopes.py`` before the package was grouped),
each the best of N passes over all files (default 5), and with ``ast.parse`` and the standard
``tokenize`` module (one pass each) when asked. The files come straight out of the release wheel
in the patchtool cache (``PATCHTOOL_CACHE_DIR``, default the user cache): run ``patchtool check``
once to download it. Only the standard library is needed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import subprocess
import sys
import time
import tokenize
import tomllib
import types
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

from make_series import default_cache_dir

REPO = Path(__file__).resolve().parent.parent
PIN = REPO / "upstream-pins" / "sglang-0.5.23.toml"
SCANNER = ("tool/patchtool/diff/scopes.py", "tool/patchtool/scopes.py")  # where it lives, newest first


def scanner_at(rev: str) -> str:
    """The scanner's source at git revision ``rev``, wherever it lived then."""
    for path in SCANNER:
        res = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, text=True, check=False)
        if res.returncode == 0:
            return res.stdout
    sys.exit(f"no scope scanner at {rev} (looked for {', '.join(SCANNER)})")


def load_scanner(name: str, text: str) -> types.ModuleType:
    """A scopes.py given as text, as a module of its own."""
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses look their module up
    exec(compile(text, f"<{name}>", "exec"), module.__dict__)
    return module


def sources(cache_dir: Path) -> list[str]:
    art = tomllib.loads(PIN.read_text())["artifact"]
    wheel = cache_dir / "downloads" / art["sha256"][:2] / art["filename"]
    if not wheel.is_file():
        sys.exit(f"no {wheel}; run `PATCHTOOL_CACHE_DIR={cache_dir} patchtool check` in {REPO} once")
    with zipfile.ZipFile(wheel) as zf:
        return [zf.read(n).decode("utf-8", "replace") for n in zf.namelist() if n.endswith(".py")]


def best(fn: Callable[[str], object], texts: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for text in texts:
            fn(text)
        times.append(time.perf_counter() - start)
    return min(times)


def tokens(text: str) -> None:
    try:
        for _ in tokenize.generate_tokens(io.StringIO(text).readline):
            pass
    except (tokenize.TokenError, SyntaxError):
        pass


def parse(text: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.suppress(SyntaxError, ValueError):
            ast.parse(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--baseline", default="main", help="git revision of the scanner to compare with")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--ast", action="store_true", help="also time ast.parse")
    ap.add_argument("--tokenize", action="store_true", help="also time the tokenize module")
    args = ap.parse_args(argv)
    texts = sources((args.cache_dir or default_cache_dir()).absolute())
    old = load_scanner("scopes_baseline", scanner_at(args.baseline))
    here = next(REPO / p for p in SCANNER if (REPO / p).is_file())
    spec = importlib.util.spec_from_file_location("scopes_here", here)
    assert spec and spec.loader
    new = importlib.util.module_from_spec(spec)
    sys.modules["scopes_here"] = new
    spec.loader.exec_module(new)

    print(f"{len(texts)} files, {sum(map(len, texts)) / 1e6:.1f} MB of sglang 0.5.23, best of {args.runs}")
    t_old = best(old.python_scopes.__wrapped__, texts, args.runs)  # __wrapped__: past the lru_cache
    t_new = best(new.python_scopes.__wrapped__, texts, args.runs)
    print(f"scanner at {args.baseline:<10} {t_old:7.3f} s")
    print(f"scanner here       {t_new:7.3f} s   {t_new / t_old:.2f}x the baseline")
    if args.ast:
        t_ast = best(parse, texts, 1)
        print(f"ast.parse          {t_ast:7.3f} s   {t_ast / t_new:.1f}x the scanner here")
    if args.tokenize:
        t_tok = best(tokens, texts, 1)
        print(f"tokenize           {t_tok:7.3f} s   {t_tok / t_new:.1f}x the scanner here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
