"""The rebase benchmark's untimed first pass: what each tool resolves without help, and where.

  patchtool   `rebase --to 0.5.23 --dry-run --json`: one outcome per patch; resolved = applied or
              already upstream. Then the real rebase with `--skip` at every stop, and again one
              command at a time with each conflict resolved and `--continue`; `patchtool check` must
              be clean after each
  git am -3   onto a worktree at v0.5.23: patches before the first stop; then `git am --skip` at
              every stop (resolved = the rest); and each patch alone on a fresh v0.5.23
  git rebase  `--onto v0.5.23 v0.5.20` of a branch with the commits (merge-ort), `--skip` at every stop

Placement: every changed line of every patch a tool applied is located with ast (the innermost def
or class around it) and compared with where the patch put it on 0.5.20; a line in another scope,
where the old scope still exists, is a misplaced hunk. Each patch patchtool resolved is also
compared line by line with where `git rebase` put it, and the final trees of patchtool, `git am -3`
and `git rebase` are compared file by file.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from make_series import BenchError
from rebase_setup import NEW, OLD, REPO, git, rebase_script
from rebase_steps import STOPS, stepwise

RESOLVED = (
    "applied unchanged",
    "applied with shifted context",
    "merged by 3-way merge",
    "partly upstream",
    "already upstream",
)

Line = tuple[str, str, str, str]  # (path, +/-, scope, text)


# -- where a change sits ---------------------------------------------------------------------------


class Scopes:
    """The innermost def/class around a line of a blob, read with ast (cached per blob)."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.cache: dict[str, tuple[list[tuple[int, int, str]], set[str]]] = {}

    def table(self, rev: str, path: str) -> tuple[list[tuple[int, int, str]], set[str]]:
        blob = git(self.repo, "rev-parse", f"{rev}:{path}").stdout.strip()
        if blob not in self.cache:
            text = git(self.repo, "cat-file", "blob", blob).stdout
            spans: list[tuple[int, int, str]] = []

            def visit(node: ast.AST, prefix: str) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        name = f"{prefix}{child.name}"
                        spans.append((child.lineno, child.end_lineno or child.lineno, name))
                        visit(child, f"{name}.")
                    else:
                        visit(child, prefix)

            with contextlib.suppress(SyntaxError):
                visit(ast.parse(text), "")
            self.cache[blob] = (spans, {s[2] for s in spans})
        return self.cache[blob]

    def at(self, rev: str, path: str, line: int) -> str:
        spans, _ = self.table(rev, path)
        inner = [s for s in spans if s[0] <= line <= s[1]]
        return max(inner)[2] if inner else "<module>"

    def exists(self, rev: str, path: str, name: str) -> bool:
        return name == "<module>" or name in self.table(rev, path)[1]


def placement(scopes: Scopes, repo: Path, parent: str, commit: str) -> list[Line]:
    """Every changed line of ``commit``: (path, +/-, scope, text), sorted."""
    diff = git(repo, "diff", "--no-color", "--no-renames", "-U0", parent, commit).stdout
    out = []
    path = ""
    old = new = 0
    for row in diff.splitlines():
        if row.startswith("+++ "):
            path = row[len("+++ b/") :]
        elif row.startswith("--- "):
            continue
        elif m := re.match(r"^@@ -(\d+)(?:,\d+)? \+(\d+)", row):
            old, new = int(m.group(1)), int(m.group(2))
        elif row.startswith("-") and path:
            out.append((path, "-", scopes.at(parent, path, old), row[1:].strip()))
            old += 1
        elif row.startswith("+") and path:
            out.append((path, "+", scopes.at(commit, path, new), row[1:].strip()))
            new += 1
    return sorted(out)


def misplaced(scopes: Scopes, commit: str, want: list[Line], got: list[Line]) -> tuple[list[str], list[str]]:
    """(misplaced lines, lines in a scope upstream renamed) of ``got`` against ``want``."""
    if got == want:
        return [], []
    wrong, renamed = [], []
    expected = {(p, s, t): scope for p, s, scope, t in want}
    for path, sign, scope, text in got:
        was = expected.get((path, sign, text))
        if was is None or was == scope:
            continue
        line = f"{path}: {sign}{text[:60]!r} was in {was}, landed in {scope}"
        (wrong if scopes.exists(commit, path, was) else renamed).append(line)
    if {(p, s, t) for p, s, _, t in got} != set(expected):
        wrong.append("the changed lines differ from the patch's")
    return wrong, renamed


# -- each tool, once ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Setting:
    """What the verification works on: the patchtool command and project, the private cache's
    repository, the series as a branch on v0.5.20 and as patch files, and a scratch directory."""

    patchtool: list[str]
    project: Path
    repo: Path
    env: dict[str, str]
    work: Path
    tip: str
    patches: list[Path]


@dataclasses.dataclass(frozen=True)
class ToolRun:
    stops: list[str]  # the patches it stopped at, in order
    commits: dict[str, str]  # patch id -> its commit on v0.5.23
    tip: str


def git_loop(tree: Path, start: list[str], state: str, skip: list[str], limit: int) -> tuple[list[int], list[str]]:
    """Run ``start`` in ``tree``, then ``skip`` while ``state`` (a git path) exists; the 1-based numbers
    of the patches it stopped at, and the subjects of the commits it made on v0.5.23."""
    res = git(REPO, *start, cwd=tree, check=False)
    path = Path(git(REPO, "rev-parse", "--git-path", state, cwd=tree).stdout.strip())
    path = path if path.is_absolute() else tree / path
    stops = []
    for _ in range(limit + 1):
        if not path.exists():
            break
        name = "next" if state == "rebase-apply" else "msgnum"
        stops.append(int((path / name).read_text()))
        git(REPO, *skip, cwd=tree, check=False)
    if path.exists() or (res.returncode and not stops):
        raise BenchError(f"{' '.join(start[:2])} did not finish in {tree}: {res.stderr}")
    subjects = [
        " ".join(s.split())
        for s in git(REPO, "log", "--reverse", "--format=%s", f"{NEW}..HEAD", cwd=tree).stdout.splitlines()
    ]
    return stops, subjects


def _check_clean(s: Setting, root: Path, after: str) -> None:
    check = subprocess.run(
        [*s.patchtool, "check", "--root", str(root)], capture_output=True, text=True, env=s.env, check=False
    )
    if check.returncode or "check: clean" not in check.stdout:
        raise BenchError(f"patchtool check after {after} is not clean:\n{check.stdout}{check.stderr}")


def run_patchtool(s: Setting, ids: list[str]) -> tuple[dict[str, str], ToolRun, dict[str, list[str]]]:
    """The dry run's outcomes and commits; then the real rebase, with --skip at each stop and again
    one command at a time (resolve and --continue), each checked clean; what the latter did at each stop."""
    res = subprocess.run(
        [*s.patchtool, "rebase", "--to", "0.5.23", "--dry-run", "--json", "--root", str(s.project)],
        capture_output=True,
        text=True,
        env=s.env,
        check=False,
    )
    if res.returncode not in (0, 5):  # 5: a conflict predicted, the report complete
        raise BenchError(f"patchtool rebase --dry-run failed ({res.returncode}): {res.stdout}{res.stderr}")
    data = json.loads(res.stdout)["data"]
    outcome = {p["id"]: p["outcome"] for p in data["patches"]}
    commits = {p["id"]: p["commit"] for p in data["patches"] if p.get("commit")}
    copy = s.work / "verify-project"
    shutil.copytree(s.project, copy)
    res = subprocess.run(
        ["bash", str(rebase_script(s.work / "verify-pt.sh", s.patchtool, copy))],
        capture_output=True,
        text=True,
        env=s.env,
        check=False,
    )
    if res.returncode:
        raise BenchError(f"patchtool rebase with --skip at every stop failed: {res.stdout}{res.stderr}")
    _check_clean(s, copy, "the rebase with --skip at every stop")
    steps = stepwise(s.patchtool, s.project, s.work / "verify-steps", s.env)["steps"]
    _check_clean(s, s.work / "verify-steps", "the rebase with --continue at every conflict")
    actions = {a: [x["patch"] for x in steps if x["action"] == a] for a in ("continue", "skip")}
    tip = commits[[i for i in ids if i in commits][-1]] if commits else ""
    return outcome, ToolRun([i for i in ids if outcome[i] in STOPS], commits, tip), actions


def run_git(s: Setting, ids: list[str], how: str) -> ToolRun:
    """``git am -3`` (how="am") or ``git rebase --onto`` (how="rebase") with --skip at every stop."""
    by_subject = {" ".join(n["subject"].split()): n["id"] for n in _notes(s.project).values()}
    tree = s.work / f"verify-{how}"
    git(s.repo, "worktree", "add", "--quiet", "--detach", str(tree), NEW if how == "am" else s.tip)
    if how == "am":
        stops, subjects = git_loop(
            tree, ["am", "-3", "-q", *map(str, s.patches)], "rebase-apply", ["am", "-q", "--skip"], len(ids)
        )
    else:
        stops, subjects = git_loop(
            tree, ["rebase", "-q", "--onto", NEW, OLD], "rebase-merge", ["rebase", "--skip"], len(ids)
        )
    commits = dict(
        zip(
            (by_subject[x] for x in subjects),
            git(s.repo, "rev-list", "--reverse", f"{NEW}..HEAD", cwd=tree).stdout.split(),
            strict=True,
        )
    )
    return ToolRun([ids[n - 1] for n in stops], commits, git(s.repo, "rev-parse", "HEAD", cwd=tree).stdout.strip())


def am_alone(s: Setting, ids: list[str]) -> dict[str, bool]:
    """Whether ``git am -3`` applies each patch alone on a fresh v0.5.23."""
    tree = s.work / "verify-am"
    alone = {}
    for i, patch in zip(ids, s.patches, strict=True):
        git(s.repo, "reset", "-q", "--hard", NEW, cwd=tree)
        alone[i] = git(s.repo, "am", "-3", "-q", str(patch), cwd=tree, check=False).returncode == 0
        git(s.repo, "am", "--abort", cwd=tree, check=False)
    return alone


def _notes(project: Path) -> dict[str, dict[str, str]]:
    return {n["id"]: n for n in json.loads((project / "bench-series.json").read_text())}


# -- where each tool put each patch ------------------------------------------------------------------


def placement_report(
    scopes: Scopes, repo: Path, want: dict[str, list[Line]], commits: dict[str, str]
) -> dict[str, Any]:
    bad, renamed, same = {}, {}, 0
    for i, c in commits.items():
        wrong, moved = misplaced(scopes, c, want[i], placement(scopes, repo, f"{c}^", c))
        same += not wrong and not moved
        if wrong:
            bad[i] = wrong
        if moved:
            renamed[i] = moved
    return {"applied": len(commits), "same_scope": same, "misplaced": bad, "scope_renamed": renamed}


def against_git_rebase(scopes: Scopes, repo: Path, pt: ToolRun, rb: ToolRun) -> dict[str, Any]:
    """Each patch both applied: do patchtool's changed lines sit in the scopes git rebase put them in?"""
    both = [i for i in pt.commits if i in rb.commits]
    differ = {}
    for i in both:
        mine = placement(scopes, repo, f"{pt.commits[i]}^", pt.commits[i])
        theirs = placement(scopes, repo, f"{rb.commits[i]}^", rb.commits[i])
        if mine != theirs:
            differ[i] = [
                f"{p}: {sign}{text[:60]!r} in {scope}" for p, sign, scope, text in sorted(set(mine) ^ set(theirs))
            ]
    return {
        "compared": len(both),
        "differ": differ,
        "only_patchtool": [i for i in pt.commits if i not in rb.commits],
        "only_git_rebase": [i for i in rb.commits if i not in pt.commits],
    }


def verify(s: Setting) -> dict[str, Any]:
    notes = _notes(s.project)
    ids = list(notes)
    if len({" ".join(n["subject"].split()) for n in notes.values()}) != len(ids):
        raise BenchError("two patches share a subject; the git commits cannot be matched to patches")
    scopes = Scopes(s.repo)
    old_commits = git(s.repo, "rev-list", "--reverse", f"{OLD}..{s.tip}").stdout.split()
    want = {i: placement(scopes, s.repo, f"{c}^", c) for i, c in zip(ids, old_commits, strict=True)}
    outcome, pt, stepped = run_patchtool(s, ids)
    am = run_git(s, ids, "am")
    alone = am_alone(s, ids)
    rb = run_git(s, ids, "rebase")
    for how in ("am", "rebase"):
        git(s.repo, "worktree", "remove", "--force", "--force", str(s.work / f"verify-{how}"), check=False)
    shutil.rmtree(s.work / "verify-project", ignore_errors=True)
    shutil.rmtree(s.work / "verify-steps", ignore_errors=True)

    def counts(run: ToolRun) -> dict[str, Any]:
        first = next((n for n, i in enumerate(ids) if i in run.stops), len(ids))
        return {
            "resolved": len(ids) - len(run.stops),
            "before_first_stop": first,
            "stopped_at": run.stops,
            "committed": len(run.commits),
        }

    return {
        "kinds": {i: notes[i]["kind"] for i in ids},
        "counts": {
            "patchtool": {
                **counts(pt),
                "resolved": sum(outcome[i] in RESOLVED for i in ids),
                "outcomes": outcome,
                "stepwise": stepped,
            },
            "git am -3": {
                **counts(am),
                "alone_resolved": sum(alone.values()),
                "alone_failed": [i for i in ids if not alone[i]],
            },
            "git rebase": counts(rb),
        },
        "placement": {
            tool: placement_report(scopes, s.repo, want, run.commits)
            for tool, run in (("patchtool", pt), ("git am -3", am), ("git rebase", rb))
        },
        "placement_vs_git_rebase": against_git_rebase(scopes, s.repo, pt, rb),
        "upstream_patches": [i for i in ids if outcome[i] == "already upstream"],
        "files_differ": {
            "git am -3": git(s.repo, "diff", "--name-only", pt.tip, am.tip).stdout.split(),
            "git rebase": git(s.repo, "diff", "--name-only", pt.tip, rb.tip).stdout.split(),
        },
    }


def print_verification(v: dict[str, Any]) -> None:
    c = v["counts"]
    print(f"\nresolved without help (of {len(v['kinds'])}):")
    for tool in ("patchtool", "git am -3", "git rebase"):
        extra = f", alone on a fresh {NEW}: {c[tool]['alone_resolved']}" if "alone_resolved" in c[tool] else ""
        print(
            f"  {tool:<11} {c[tool]['resolved']:>3} (before the first stop: {c[tool]['before_first_stop']}"
            f"{extra}); stops: {', '.join(c[tool]['stopped_at']) or 'none'}"
        )
    stepped = c["patchtool"]["stepwise"]
    print(
        f"  patchtool one command at a time: --continue after resolving {len(stepped['continue'])}, "
        f"--skip {len(stepped['skip'])}; check clean"
    )
    for tool, p in v["placement"].items():
        print(
            f"  {tool:<11} applied {p['applied']}, every changed line in its old scope: {p['same_scope']}, "
            f"misplaced: {len(p['misplaced'])}, in a scope upstream renamed: {len(p['scope_renamed'])}"
        )
        for ident, lines in {**p["misplaced"], **p["scope_renamed"]}.items():
            print(f"      {ident}: {'; '.join(lines)}")
    vs = v["placement_vs_git_rebase"]
    print(
        f"  patchtool vs git rebase (merge-ort), patch by patch: {vs['compared']} compared, "
        f"{len(vs['differ'])} placed differently"
        + "".join(f"\n      {i}: {'; '.join(d)}" for i, d in vs["differ"].items())
    )
    for tool, differ in v["files_differ"].items():
        print(f"  final trees, patchtool vs {tool}: {len(differ)} file(s) differ {differ or ''}")
