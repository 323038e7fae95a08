"""Build a benchmark patch project: 30 real-looking patches on real sglang 0.5.23.

Usage: python bench/make_series.py DEST [--cache-dir DIR] [--pin-file FILE] [--count N]

The upstream tree comes from the patchtool cache (``upstream.git``, tag ``v<version>``,
imported by ``patchtool check``). Nothing is written into the cache: the commits are
made in a scratch bare repository that borrows the cache's objects through
``objects/info/alternates`` and is deleted afterwards.

The series is deterministic: the same upstream tree gives byte-identical patches.
Files under python/sglang/srt/ are chosen by a fixed hash order; each patch makes a
small edit inside one function (a comment line, a ``return`` split into a named
result, or a line added after an earlier patch's comment). A few patches revisit a
file an earlier patch changed, with that patch's line in their context, so the
series only applies in order.

Standard library only, so it runs with any Python >= 3.11.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PIN_FILE = REPO / "upstream-pins" / "sglang-0.5.23.toml"
SEED = "patchtool-bench-v1"  # change it and every patch changes
SRT = "python/sglang/srt/"
# patch n (1-based) revisits the file of patch m and adds a line after m's comment
REVISITS = {10: 2, 20: 12, 30: 22}
AUTHORS = (
    ("Ada Serving", "ada@example.org"),
    ("Bo Kernels", "bo@example.org"),
    ("Cy Scheduler", "cy@example.org"),
    ("Di Runtime", "di@example.org"),
)
FIXED_DATE = "@1700000000 +0000"


class BenchError(Exception):
    pass


def find_patchtool(spec: str | None) -> list[str]:
    """The patchtool command: --patchtool, else the repository's .venv, else PATH."""
    if spec:
        return shlex.split(spec)
    if (REPO / ".venv" / "bin" / "patchtool").exists():
        return [str(REPO / ".venv" / "bin" / "patchtool")]
    if shutil.which("patchtool"):
        return ["patchtool"]
    raise BenchError("no patchtool found: create .venv (pip install -e .) or pass --patchtool")


def command_python(cmd: list[str]) -> tuple[str, dict[str, str]]:
    """The Python a patchtool command runs in, and the variables a leading ``env A=B`` sets for it.

    ``[env A=B ...] PYTHON -m patchtool`` names its Python; a script (``.venv/bin/patchtool``) names
    it in its ``#!`` line; anything else is taken to run in this interpreter."""
    rest, env = list(cmd), {}
    if rest and Path(rest[0]).name == "env":
        rest.pop(0)
        while rest and "=" in rest[0] and not rest[0].startswith("-"):
            key, _, value = rest.pop(0).partition("=")
            env[key] = value
    if len(rest) >= 3 and rest[1:3] == ["-m", "patchtool"]:
        return rest[0], env
    script = Path(shutil.which(rest[0]) or rest[0]) if rest else Path()
    first = script.read_bytes()[:200].split(b"\n", 1)[0] if script.is_file() else b""
    return (first[2:].decode().strip() if first.startswith(b"#!") else sys.executable), env


def compile_patchtool(patchtool: list[str]) -> None:
    """Write patchtool's bytecode, as `pip install` does: with PYTHONDONTWRITEBYTECODE set (or an
    editable install that never ran) every timed command would compile its modules again. It is
    the package the command imports (its Python, its PYTHONPATH), which may not be this one's."""
    python, extra = command_python(patchtool)
    env = {**os.environ, **extra}
    where = subprocess.run(
        [python, "-c", "import os, patchtool; print(os.path.dirname(patchtool.__file__))"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if where.returncode == 0:
        subprocess.run(
            [python, "-m", "compileall", "-q", where.stdout.strip()], capture_output=True, env=env, check=False
        )


def find_baseline(spec: str | None) -> list[str] | None:
    """The --baseline-patchtool command (the code to compare with), compiled; None without one."""
    if not spec:
        return None
    baseline = shlex.split(spec)
    compile_patchtool(baseline)
    return baseline


def bench_parser(
    doc: str, *, runs: int, min_runs: int, per: str = "command", baseline: bool = False
) -> argparse.ArgumentParser:
    """The options every benchmark takes: --runs, --warmup, --cache-dir, --patchtool (and, where it
    times the two side by side, --baseline-patchtool)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--runs", type=int, default=runs, help=f"measured runs per {per} (>= {min_runs})")
    ap.add_argument("--warmup", type=int, default=1, help=f"unmeasured runs per {per} first")
    ap.add_argument(
        "--cache-dir", type=Path, default=None, help="patchtool cache (default: $PATCHTOOL_CACHE_DIR or the user cache)"
    )
    ap.add_argument(
        "--patchtool", default=None, help="the patchtool command (default: .venv/bin/patchtool, else patchtool on PATH)"
    )
    if baseline:
        ap.add_argument(
            "--baseline-patchtool",
            default=None,
            metavar="CMD",
            help="a second patchtool command (e.g. an older checkout: 'env PYTHONPATH=OLD/tool python "
            "-m patchtool'), timed beside the first in the same run, with the ratios new/baseline",
        )
    ap.set_defaults(min_runs=min_runs)
    return ap


def bench_main(ap: argparse.ArgumentParser, argv: list[str] | None, run: Callable[[argparse.Namespace], int]) -> int:
    """Parse, check --runs, run; a BenchError is a message and exit 1."""
    args = ap.parse_args(argv)
    if args.runs < args.min_runs:
        ap.error(f"--runs must be at least {args.min_runs}")
    try:
        return run(args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def default_cache_dir() -> Path:
    env = os.environ.get("PATCHTOOL_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "patchtool"


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """git isolated from user configuration and inherited GIT_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    if extra:
        env.update(extra)
    return env


def git(git_dir: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None) -> bytes:
    res = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args], input=input, capture_output=True, env=git_env(env), check=False
    )
    if res.returncode:
        raise BenchError(f"git {' '.join(args[:2])} failed: {res.stderr.decode(errors='replace')}")
    return res.stdout


def read_pin(pin_file: Path) -> dict:
    data = tomllib.loads(pin_file.read_text(encoding="utf-8"))
    return {"name": pin_file.stem, "version": data["version"], "tree": data.get("artifact", {}).get("tree")}


def release_commit(repo: Path, version: str) -> str | None:
    """The commit of sglang ``version``'s import in the patchtool cache's ``repo``, which names it
    ``refs/tags/sglang-<version>-<12 hex of the artifact's sha256>`` (tool/patchtool/upstream/refnames.py);
    None when it is not imported. The bench's private copies of the cache also call it ``v<version>``
    (``alias_releases``), the name the git side's commands use."""
    res = subprocess.run(
        ["git", f"--git-dir={repo}", "for-each-ref", "--format=%(objectname)", f"refs/tags/sglang-{version}-*"],
        capture_output=True,
        text=True,
        env=git_env(),
        check=False,
    )
    commits = set(res.stdout.split())
    if res.returncode or len(commits) != 1:
        return None
    return git(repo, "rev-parse", f"{commits.pop()}^{{commit}}").decode().strip()


def alias_releases(repo: Path, commits: dict[str, str]) -> None:
    """Name each release ``v<version>`` in a private copy of the cache (``commits``: that name ->
    commit), for the git side of a pair: `git read-tree v0.5.23`, `git rebase --onto v0.5.23 ...`."""
    for name, commit in commits.items():
        git(repo, "update-ref", f"refs/tags/{name}", commit)


def resolve_base(cache_dir: Path, pin: dict) -> tuple[Path, str]:
    """The cache repo and the pinned commit; BenchError with a hint when not imported yet."""
    repo = cache_dir / "upstream.git"
    tag = f"v{pin['version']}"
    hint = f"run `PATCHTOOL_CACHE_DIR={cache_dir} patchtool check` in {REPO} once to import {pin['name']}"
    if not (repo / "HEAD").exists():
        raise BenchError(f"no patchtool cache at {cache_dir} (no upstream.git); {hint}")
    commit = release_commit(repo, pin["version"])
    if commit is None:
        raise BenchError(f"pin {pin['name']} is not imported in {cache_dir} (no tag sglang-{pin['version']}-*); {hint}")
    if pin["tree"]:
        tree = git(repo, "rev-parse", f"{commit}^{{tree}}").decode().strip()
        if tree != pin["tree"]:
            raise BenchError(f"tag {tag} in {repo} has tree {tree}, the pin says {pin['tree']}")
    return repo, commit


# -- choosing and making the edits -------------------------------------------------------


def _key(path: str) -> str:
    return hashlib.sha256(f"{SEED}:{path}".encode()).hexdigest()


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return sorted(funcs, key=lambda n: (n.lineno, n.name))


def _body_start(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.stmt | None:
    body = fn.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return body[0] if body else None


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" "))]


def plan_edit(path: str, text: str, index: int) -> tuple[str, str, str, int] | None:
    """(new text, subject, body, line of the added comment or -1); None when the file does not fit.

    ``index`` picks the kind: even -> a comment at the top of a function body,
    odd -> a single-line ``return <expr>`` becomes ``result = <expr>`` + ``return result``.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.split("\n")
    module = path[len(SRT) : -3].replace("/", ".")
    funcs = [f for f in _functions(tree) if not f.name.startswith("__")]
    if not funcs:
        return None
    # a function in the middle of the file, so the hunk has context on both sides
    order = sorted(funcs, key=lambda f: _key(f"{path}:{f.name}:{f.lineno}"))
    if index % 2 == 1:
        for fn in order:
            rets = [
                n
                for n in ast.walk(fn)
                if isinstance(n, ast.Return) and n.value is not None and n.lineno == n.end_lineno
            ]
            for ret in sorted(rets, key=lambda r: r.lineno):
                line = lines[ret.lineno - 1]
                stripped = line.strip()
                if not stripped.startswith("return ") or "#" in stripped or stripped.endswith(("\\", ",")):
                    continue
                if "result" in fn.name or any("result" in ln for ln in lines[fn.lineno - 1 : fn.end_lineno]):
                    continue
                ind = _indent(line)
                if len(ind) != ret.col_offset:
                    continue
                expr = stripped[len("return ") :]
                new = [*lines[: ret.lineno - 1], f"{ind}result = {expr}", f"{ind}return result", *lines[ret.lineno :]]
                subject = f"{module}: name the result of {fn.name}()"
                body = (
                    f"Bind the value {fn.name}() returns to a local before returning it, so a\n"
                    f"breakpoint or a debug log can see it. No behaviour change."
                )
                return "\n".join(new), subject, body, -1
        return None
    for fn in order:
        first = _body_start(fn)
        if first is None or first.lineno <= fn.lineno or isinstance(first, ast.Pass):
            continue
        line = lines[first.lineno - 1]
        ind = _indent(line)
        if len(ind) != first.col_offset or not ind:
            continue
        comment = f"{ind}# NOTE(serving): {fn.name} is on the request path; keep it allocation-free."
        new = [*lines[: first.lineno - 1], comment, *lines[first.lineno - 1 :]]
        subject = f"{module}: document the hot path in {fn.name}()"
        body = (
            f"{fn.name}() runs once per scheduled batch. Say so where it is defined,\nso later changes keep it cheap."
        )
        return "\n".join(new), subject, body, first.lineno  # 1-based line of the comment
    return None


def revisit_edit(path: str, text: str, comment_line: int, n: int) -> tuple[str, str, str]:
    lines = text.split("\n")
    anchor = lines[comment_line - 1]
    assert anchor.lstrip().startswith("# NOTE(serving):"), (path, anchor)
    ind = _indent(anchor)
    extra = f"{ind}# Measured in bench series patch {n:04d}: see the series notes."
    new = [*lines[:comment_line], extra, *lines[comment_line:]]
    module = path[len(SRT) : -3].replace("/", ".")
    return (
        "\n".join(new),
        f"{module}: point the hot-path note at its measurement",
        "Follow-up to the earlier note in this file: say where the number comes from.",
    )


def slug(subject: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-")
    return s[:52].rstrip("-")


def candidates(repo: Path, commit: str) -> list[str]:
    out = git(repo, "ls-tree", "-r", "-z", "--name-only", commit, "--", SRT).decode()
    paths = [p for p in out.split("\0") if p.endswith(".py") and not p.endswith("__init__.py")]
    return sorted(paths, key=_key)


def build(dest: Path, *, cache_dir: Path, pin_file: Path = DEFAULT_PIN_FILE, count: int = 30) -> Path:
    """Write the bench project into ``dest`` (must not exist or be empty); return ``dest``."""
    pin = read_pin(pin_file)
    repo, base = resolve_base(cache_dir, pin)
    if dest.exists() and any(dest.iterdir()):
        raise BenchError(f"{dest} exists and is not empty")
    scratch = Path(tempfile.mkdtemp(prefix="ptbench-scratch-"))
    try:
        sgit = scratch / "git"
        subprocess.run(["git", "init", "-q", "--bare", str(sgit)], env=git_env(), check=True)
        (sgit / "objects" / "info" / "alternates").write_text(f"{repo / 'objects'}\n")
        patches = _make_commits(sgit, base, count, candidates(repo, base))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (dest / "patches").mkdir(parents=True, exist_ok=True)
    (dest / "upstream-pins").mkdir(exist_ok=True)
    shutil.copyfile(pin_file, dest / "upstream-pins" / pin_file.name)
    entries = []
    for n, (name, text, subject, path) in enumerate(patches, 1):
        (dest / "patches" / name).write_text(text, encoding="utf-8")
        entries.append(
            "[[patch]]\n"
            f'id = "bench-{n:04d}"\n'
            f'file = "patches/{name}"\n'
            f'kind = "{("correctness", "performance", "reliability", "operations")[n % 4]}"\n'
            f'why = "Benchmark patch {n} of {count}: {subject} ({path})."\n'
            f'owner = "bench"\n'
            f'applies_to = ">={pin["version"]},<{_next_patch(pin["version"])}"\n'
            f'drop_when = "Never: it exists to time patchtool."\n'
            'upstream = { status = "pending" }\n'
        )
    (dest / "patchset.toml").write_text(
        "# Generated by bench/make_series.py: a 30-patch series for timing patchtool.\n"
        f'schema = 1\npin = "{pin["name"]}"\n\n' + "\n".join(entries),
        encoding="utf-8",
    )
    return dest


def _next_patch(version: str) -> str:
    parts = version.split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return ".".join(parts)


def _make_commits(sgit: Path, base: str, count: int, paths: list[str]) -> list[tuple[str, str, str, str]]:
    index_env = {"GIT_INDEX_FILE": str(sgit / "bench-index")}
    git(sgit, "read-tree", base, env=index_env)
    parent = base
    comments: dict[int, tuple[str, int]] = {}  # patch n -> (path, comment line)
    used: set[str] = set()
    pool = iter(paths)
    out = []
    for n in range(1, count + 1):
        if n in REVISITS and REVISITS[n] in comments:
            path, line = comments[REVISITS[n]]
            text = git(sgit, "cat-file", "blob", f"{parent}:{path}").decode()
            new, subject, body = revisit_edit(path, text, line, n)
        else:
            kind = 0 if any(v == n for v in REVISITS.values()) else n
            for path in pool:
                if path in used:
                    continue
                raw = git(sgit, "cat-file", "blob", f"{parent}:{path}")
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                # CRLF files are skipped: `git am` strips the CRs from a mailed patch (unless
                # --keep-cr), so the git baseline could not apply their patches
                if "\r" in text or not 80 <= text.count("\n") <= 4000:
                    continue
                plan = plan_edit(path, text, kind)
                if plan is not None:
                    break
            else:
                raise BenchError(f"ran out of candidate files at patch {n}")
            new, subject, body, line = plan
            used.add(path)
            if line > 0:
                comments[n] = (path, line)
        blob = git(sgit, "hash-object", "-w", "--stdin", input=new.encode()).decode().strip()
        mode = git(sgit, "ls-files", "-s", "--", path, env=index_env).decode().split()[0]
        git(sgit, "update-index", "--cacheinfo", f"{mode},{blob},{path}", env=index_env)
        tree = git(sgit, "write-tree", env=index_env).decode().strip()
        name, email = AUTHORS[n % len(AUTHORS)]
        ident = {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_AUTHOR_DATE": FIXED_DATE,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_COMMITTER_DATE": FIXED_DATE,
        }
        parent = (
            git(sgit, "commit-tree", tree, "-p", parent, input=f"{subject}\n\n{body}\n".encode(), env=ident)
            .decode()
            .strip()
        )
        text = git(
            sgit,
            "format-patch",
            "-1",
            parent,
            "--stdout",
            "--zero-commit",
            "--full-index",
            "--no-signature",
            "--no-stat",
        ).decode()
        text = re.sub(r"^Date: .*\n", "", text, count=1, flags=re.MULTILINE)
        out.append((f"{n:04d}-{slug(subject)}.patch", text, subject, path))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", type=Path, help="directory to create the bench project in")
    ap.add_argument(
        "--cache-dir", type=Path, default=None, help="patchtool cache (default: $PATCHTOOL_CACHE_DIR or the user cache)"
    )
    ap.add_argument("--pin-file", type=Path, default=DEFAULT_PIN_FILE)
    ap.add_argument("--count", type=int, default=30)
    args = ap.parse_args(argv)
    try:
        build(
            args.dest.absolute(),
            cache_dir=(args.cache_dir or default_cache_dir()).absolute(),
            pin_file=args.pin_file,
            count=args.count,
        )
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"bench project: {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
