"""Build the rebase benchmark project: 30 or 100 patches on real sglang 0.5.20, to be moved to 0.5.23.

Usage: python bench/make_rebase_series.py DEST [--count 30|100] [--cache-dir DIR] [--patchtool CMD]

Needs v0.5.20 and v0.5.23 imported in the patchtool cache (``bench/rebase_bench.py`` imports them,
and so does this script when run alone). Each patch is a small edit inside one function of a file
under python/sglang/srt/, one file per patch, picked in a fixed hash order by what upstream did to
it by 0.5.23:

  unchanged  (8)  the file is byte-identical in 0.5.23: a comment at the top of a function body
  shifted    (8)  the function and the lines around the edit are identical, at another line
  merge      (6)  upstream rewrote one line of the function; the patch inserts a comment two
                  lines below it, inside the 3 lines of context, so plain `git apply` fails and
                  a 3-way merge succeeds
  conflict   (3)  the patch edits the very line upstream rewrote
  upstream   (2)  the patch is upstream's own one-line change of that function
  gone       (1)  the file is deleted in 0.5.23 (not renamed: a 3-way merge would follow it)
  revisit    (2)  a second edit of an earlier patch's file, next to its comment (order matters)

The 100-patch series repeats that pattern of 30 kinds three times and then its first 10 (27
unchanged, 27 shifted, 20 merge, 10 conflict, 7 upstream, 3 gone, 6 revisits); each kind takes
the next files of the same hash order, so its files are not those of the 30-patch series (and a
changed file is tried for "merge" first: 0.5.20 has only 21 files that offer one).

The commits are made in a scratch repository that borrows the cache's objects, with fixed
authors and dates, and exported in patchtool's canonical form: the same releases always give
byte-identical patches. ``bench-series.json`` beside ``patchset.toml`` records each patch's kind,
file and function. Standard library only; run alone, it imports the releases and writes the 0.5.20
pin through the patchtool command (``--patchtool CMD``).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_series import (
    AUTHORS,
    FIXED_DATE,
    BenchError,
    default_cache_dir,
    find_patchtool,
    git,
    git_env,
    release_commit,
    slug,
)

REPO = Path(__file__).resolve().parent.parent
SEED = "patchtool-rebase-bench-v1"  # change it and every patch changes
SRT = "python/sglang/srt/"
OLD, NEW = "0.5.20", "0.5.23"
# the series order: kind of patch n (1-based); a revisit names the earlier patch it builds on
ORDER = (
    "unchanged",
    "shifted",
    "merge",
    "unchanged",
    "shifted",
    "upstream",
    "merge",
    "unchanged",
    "conflict",
    "shifted",
    "unchanged",
    "merge",
    "shifted",
    "revisit",
    "unchanged",
    "gone",
    "merge",
    "shifted",
    "conflict",
    "unchanged",
    "shifted",
    "merge",
    "upstream",
    "unchanged",
    "revisit",
    "shifted",
    "merge",
    "conflict",
    "unchanged",
    "shifted",
)
REVISITS = {14: 2, 25: 11}
COUNTS = (30, 100)


def order_for(count: int) -> tuple[tuple[str, ...], dict[int, int]]:
    """The kinds of patches 1..count and, for each revisit, the patch it builds on: ORDER repeated."""
    if count not in COUNTS:
        raise BenchError(f"the series has {' or '.join(map(str, COUNTS))} patches, not {count}")
    order = tuple(ORDER[i % len(ORDER)] for i in range(count))
    revisits = {n: n - k + REVISITS[k] for n in range(1, count + 1) if (k := (n - 1) % len(ORDER) + 1) in REVISITS}
    return order, revisits


NOTE = "# NOTE(fork):"


@dataclasses.dataclass
class Edit:
    kind: str
    path: str
    function: str
    text: str  # the whole new file
    subject: str
    body: str
    note_line: int = 0  # 1-based line of the added comment, for a later revisit


class Blobs:
    """Blob contents by path at two tags, through one ``git cat-file --batch``."""

    def __init__(self, repo: Path) -> None:
        self.proc = subprocess.Popen(
            ["git", f"--git-dir={repo}", "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=git_env(),
        )

    def read(self, rev: str) -> bytes | None:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(rev.encode() + b"\n")
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().split()
        if len(header) < 3:
            return None
        data = self.proc.stdout.read(int(header[2]))
        self.proc.stdout.read(1)
        return data

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait()


def _key(text: str) -> str:
    return hashlib.sha256(f"{SEED}:{text}".encode()).hexdigest()


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" "))]


def _module(path: str) -> str:
    return path[len(SRT) : -3].replace("/", ".")


def functions(tree: ast.AST) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every def by qualified name; names that occur twice are left out (ambiguous)."""
    found: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.setdefault(f"{prefix}{child.name}", []).append(child)
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return {name: nodes[0] for name, nodes in found.items() if len(nodes) == 1}


def statement_starts(tree: ast.AST) -> dict[int, ast.stmt]:
    """Line -> the simple statement that starts and ends on it (no compound statements)."""
    return {
        n.lineno: n
        for n in ast.walk(tree)
        if isinstance(n, ast.stmt)
        and n.lineno == n.end_lineno
        and not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


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


def note_at_body_start(
    path: str, lines: list[str], fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str, kind: str
) -> Edit | None:
    first = _body_start(fn)
    if first is None or first.lineno <= fn.lineno or isinstance(first, ast.Pass):
        return None
    line = lines[first.lineno - 1]
    ind = _indent(line)
    if len(ind) != first.col_offset or not ind:
        return None
    comment = f"{ind}{NOTE} {fn.name} runs per batch on the serving path; keep it cheap."
    new = [*lines[: first.lineno - 1], comment, *lines[first.lineno - 1 :]]
    return Edit(
        kind,
        path,
        name,
        "\n".join(new),
        f"{_module(path)}: document the hot path in {fn.name}()",
        f"{fn.name}() runs once per scheduled batch. Say so where it is defined,\nso later changes keep it cheap.",
        note_line=first.lineno,
    )


def plan_unchanged(path: str, old: str, kind: str) -> Edit | None:
    try:
        tree = ast.parse(old)
    except SyntaxError:
        return None
    lines = old.split("\n")
    for name, fn in sorted(functions(tree).items(), key=lambda kv: _key(f"{path}:{kv[0]}")):
        if not fn.name.startswith("__") and (edit := note_at_body_start(path, lines, fn, name, kind)):
            return edit
    return None


def plan_changed(path: str, old: str, new: str, wanted: list[str]) -> Edit | None:
    """A shifted, merge, conflict or upstream edit, whichever of ``wanted`` this file offers first."""
    try:
        old_tree, new_tree = ast.parse(old), ast.parse(new)
    except SyntaxError:
        return None
    old_lines, new_lines = old.split("\n"), new.split("\n")
    old_fns, new_fns = functions(old_tree), functions(new_tree)
    starts_old, starts_new = statement_starts(old_tree), statement_starts(new_tree)
    for kind in wanted:
        for name in sorted(set(old_fns) & set(new_fns), key=lambda n: _key(f"{path}:{kind}:{n}")):
            a, b = old_fns[name], new_fns[name]
            if a.name.startswith("__") or a.end_lineno is None or b.end_lineno is None:
                continue
            body_a = old_lines[a.lineno - 1 : a.end_lineno]
            body_b = new_lines[b.lineno - 1 : b.end_lineno]
            if kind == "shifted":
                # identical, moved, and identical in the 3 lines around it too
                if (
                    a.lineno == b.lineno
                    or old_lines[a.lineno - 4 : a.end_lineno + 3] != new_lines[b.lineno - 4 : b.end_lineno + 3]
                ):
                    continue
                if edit := note_at_body_start(path, old_lines, a, name, kind):
                    return edit
                continue
            ops = [
                op
                for op in difflib.SequenceMatcher(None, body_a, body_b, autojunk=False).get_opcodes()
                if op[0] != "equal"
            ]
            if len(ops) != 1 or ops[0][0] != "replace" or ops[0][2] - ops[0][1] != 1 or ops[0][4] - ops[0][3] != 1:
                continue
            k = a.lineno + ops[0][1]  # 1-based line upstream rewrote, in the old file
            k_new = b.lineno + ops[0][3]
            if k not in starts_old or k_new not in starts_new or "#" in old_lines[k - 1]:
                continue
            if old_lines[k - 1].strip() == new_lines[k_new - 1].strip():
                continue  # only the indentation changed
            if kind == "conflict":
                new_text = [
                    *old_lines[: k - 1],
                    f"{old_lines[k - 1]}  # fork: keep in step with the kernel",
                    *old_lines[k:],
                ]
                return Edit(
                    kind,
                    path,
                    name,
                    "\n".join(new_text),
                    f"{_module(path)}: mark the line {a.name}() shares with the kernel",
                    "Keep this line in step with the fork's kernel when it changes.",
                )
            if kind == "upstream":
                new_text = [*old_lines[: k - 1], new_lines[k_new - 1], *old_lines[k:]]
                return Edit(
                    kind,
                    path,
                    name,
                    "\n".join(new_text),
                    f"{_module(path)}: backport a fix to {a.name}()",
                    f"Backport of upstream's change to {a.name}() (sglang {NEW}).",
                )
            if kind == "merge":
                after = k + 3  # insert before this line: lines k+1 and k+2 separate us from upstream's
                if after > a.end_lineno or after not in starts_old:
                    continue
                ind = _indent(old_lines[after - 1])
                if len(ind) != starts_old[after].col_offset or not ind:
                    continue
                comment = f"{ind}{NOTE} checked against the fork's scheduler invariants."
                new_text = [*old_lines[: after - 1], comment, *old_lines[after - 1 :]]
                return Edit(
                    kind,
                    path,
                    name,
                    "\n".join(new_text),
                    f"{_module(path)}: note the invariant {a.name}() keeps",
                    f"{a.name}() is relied on by the fork's scheduler; say so next to the code.",
                )
    return None


def revisit(edit: Edit, text: str, n: int) -> Edit:
    lines = text.split("\n")
    anchor = lines[edit.note_line - 1]
    assert anchor.lstrip().startswith(NOTE), (edit.path, anchor)
    extra = f"{_indent(anchor)}# Measured in rebase bench patch {n:04d}: see the series notes."
    new = [*lines[: edit.note_line], extra, *lines[edit.note_line :]]
    return Edit(
        "revisit",
        edit.path,
        edit.function,
        "\n".join(new),
        f"{_module(edit.path)}: point the hot-path note at its measurement",
        "Follow-up to the earlier note in this file: say where the number comes from.",
    )


# the kinds a changed file is tried for, in order; the 100-patch series tries "merge" first, since
# only 21 files of 0.5.20 offer one and "conflict" or "upstream" would take them
PREFER = {30: ("conflict", "upstream", "merge", "shifted"), 100: ("merge", "conflict", "upstream", "shifted")}


def renamed(repo: Path, old_commit: str, new_commit: str) -> set[str]:
    """The files of ``old_commit`` that git sees renamed in ``new_commit`` (a 3-way merge follows them)."""
    fields = git(repo, "diff", "--name-status", "-M", "-z", old_commit, new_commit).decode().split("\0")
    out, i = set(), 0
    while i < len(fields) - 1:
        if fields[i][:1] in "RC":
            out.add(fields[i + 1])
            i += 3
        else:
            i += 2
    return out


def choose(repo: Path, old_commit: str, new_commit: str, order: tuple[str, ...] = ORDER) -> dict[str, list[Edit]]:
    """Edits by kind, one file each, in the fixed hash order of the files."""
    quota = {k: order.count(k) for k in set(order) if k != "revisit"}
    out: dict[str, list[Edit]] = {k: [] for k in quota}
    listing = git(repo, "ls-tree", "-r", "-z", old_commit, "--", SRT).decode().split("\0")
    old_blobs = {p.split("\t")[1]: p.split()[2] for p in listing if p}
    listing = git(repo, "ls-tree", "-r", "-z", new_commit, "--", SRT).decode().split("\0")
    new_blobs = {p.split("\t")[1]: p.split()[2] for p in listing if p}
    paths = sorted(
        (p for p in old_blobs if p.endswith(".py") and not p.endswith("__init__.py") and "/tests/" not in p), key=_key
    )
    moved = renamed(repo, old_commit, new_commit)
    blobs = Blobs(repo)
    try:
        for path in paths:
            if all(len(out[k]) >= quota[k] for k in quota):
                break
            raw = blobs.read(old_blobs[path])
            try:
                old = (raw or b"").decode("utf-8")
            except UnicodeDecodeError:
                continue
            # CRLF files are skipped: `git am` strips the CRs of a mailed patch
            if "\r" in old or not 80 <= old.count("\n") <= 6000:
                continue
            edit = None
            if path not in new_blobs:
                if len(out["gone"]) < quota["gone"] and path not in moved:
                    edit = plan_unchanged(path, old, "gone")
            elif new_blobs[path] == old_blobs[path]:
                if len(out["unchanged"]) < quota["unchanged"]:
                    edit = plan_unchanged(path, old, "unchanged")
            else:
                wanted = [k for k in PREFER[len(order)] if len(out[k]) < quota[k]]
                if wanted:
                    new = (blobs.read(new_blobs[path]) or b"").decode("utf-8", "replace")
                    edit = plan_changed(path, old, new, wanted)
            if edit is not None:
                out[edit.kind].append(edit)
    finally:
        blobs.close()
    missing = {k: quota[k] - len(v) for k, v in out.items() if len(v) < quota[k]}
    if missing:
        raise BenchError(f"not enough candidate files for {missing}")
    return out


def resolve(repo: Path, version: str) -> str:
    commit = release_commit(repo, version)
    if commit is None:
        raise BenchError(
            f"sglang {version} is not imported in {repo.parent}; run bench/rebase_bench.py, which imports it"
        )
    return commit


def build(dest: Path, *, cache_dir: Path, pin_text: str, count: int = 30) -> Path:
    """Write the bench project of ``count`` patches into ``dest`` (must not exist or be empty)."""
    repo = cache_dir / "upstream.git"
    old_commit, new_commit = resolve(repo, OLD), resolve(repo, NEW)
    if dest.exists() and any(dest.iterdir()):
        raise BenchError(f"{dest} exists and is not empty")
    order, revisits = order_for(count)
    edits = choose(repo, old_commit, new_commit, order)
    pools = {k: iter(v) for k, v in edits.items()}
    plan: list[Edit] = []
    scratch = Path(tempfile.mkdtemp(prefix="ptbench-rebase-scratch-"))
    try:
        sgit = scratch / "git"
        subprocess.run(["git", "init", "-q", "--bare", str(sgit)], env=git_env(), check=True)
        (sgit / "objects" / "info" / "alternates").write_text(f"{repo / 'objects'}\n")
        index_env = {"GIT_INDEX_FILE": str(scratch / "index")}
        git(sgit, "read-tree", old_commit, env=index_env)
        parent = old_commit
        patches = []
        for n, kind in enumerate(order, 1):
            if kind == "revisit":
                earlier = plan[revisits[n] - 1]
                text = git(sgit, "cat-file", "blob", f"{parent}:{earlier.path}").decode()
                edit = revisit(earlier, text, n)
            else:
                edit = next(pools[kind])
            plan.append(edit)
            blob = git(sgit, "hash-object", "-w", "--stdin", input=edit.text.encode()).decode().strip()
            mode = git(sgit, "ls-files", "-s", "--", edit.path, env=index_env).decode().split()[0]
            git(sgit, "update-index", "--cacheinfo", f"{mode},{blob},{edit.path}", env=index_env)
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
                git(
                    sgit,
                    "commit-tree",
                    tree,
                    "-p",
                    parent,
                    input=f"{edit.subject}\n\n{edit.body}\n".encode(),
                    env=ident,
                )
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
            patches.append(
                (f"{n:04d}-{slug(edit.subject)}.patch", re.sub(r"^Date: .*\n", "", text, count=1, flags=re.MULTILINE))
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (dest / "patches").mkdir(parents=True, exist_ok=True)
    (dest / "upstream-pins").mkdir(exist_ok=True)
    (dest / "upstream-pins" / f"sglang-{OLD}.toml").write_text(pin_text)
    entries, notes = [], []
    for n, ((name, text), edit) in enumerate(zip(patches, plan, strict=True), 1):
        (dest / "patches" / name).write_text(text, encoding="utf-8")
        entries.append(
            "[[patch]]\n"
            f'id = "rb-{n:04d}"\n'
            f'file = "patches/{name}"\n'
            f'kind = "{("correctness", "performance", "reliability", "operations")[n % 4]}"\n'
            f'why = "Rebase benchmark patch {n} of {count}: {edit.subject}."\n'
            'owner = "bench"\n'
            'applies_to = ">=0.5.20,<0.5.24"\n'
            'drop_when = "Never: it exists to time patchtool rebase."\n'
            'upstream = { status = "pending" }\n'
        )
        notes.append(
            {
                "id": f"rb-{n:04d}",
                "file": f"patches/{name}",
                "kind": edit.kind,
                "path": edit.path,
                "function": edit.function,
                "subject": edit.subject,
            }
        )
    (dest / "patchset.toml").write_text(
        f"# Generated by bench/make_rebase_series.py: {count} patches on sglang 0.5.20 for timing a rebase.\n"
        f'schema = 1\npin = "sglang-{OLD}"\n\n' + "\n".join(entries),
        encoding="utf-8",
    )
    (dest / "bench-series.json").write_text(json.dumps(notes, indent=1) + "\n")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", type=Path, help="directory to create the bench project in")
    ap.add_argument("--count", type=int, choices=COUNTS, default=30, help="how many patches (default 30)")
    ap.add_argument(
        "--cache-dir", type=Path, default=None, help="patchtool cache (default: $PATCHTOOL_CACHE_DIR or the user cache)"
    )
    ap.add_argument(
        "--patchtool",
        default=None,
        help="the patchtool command that imports the releases (default: .venv/bin/patchtool, else PATH)",
    )
    args = ap.parse_args(argv)
    cache_dir = (args.cache_dir or default_cache_dir()).absolute()
    from rebase_setup import ensure_releases  # it builds on this module

    try:
        _, pin = ensure_releases(find_patchtool(args.patchtool), cache_dir)
        build(args.dest.absolute(), cache_dir=cache_dir, pin_text=pin, count=args.count)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"rebase bench project: {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
