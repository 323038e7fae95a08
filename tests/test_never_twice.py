"""Never twice (issue 31): a replayed patch that adds a ``def`` or ``class`` never leaves a name
defined twice in one scope that neither upstream nor the patch had, unless it is a legitimate
redefinition (``@overload``).

Generated modules: a few functions and a class with methods. Upstream and the patch each add a
function (or a class) from a small pool of names, anywhere in the module or in the class, and
may edit a body; the patch's addition may be an ``@overload`` stub. The patch is replayed onto
upstream for real (git repositories, ``replay_one``). The oracle counts definitions with ``ast``
on its own: an applied result holds no duplicate neither side had, and a stop that says "define
a name twice" shows one.
"""

from __future__ import annotations

import ast
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers import format_patch, git, write_tree
from patchtool import git as gitmod
from patchtool.git.treemerge import Renames, Workspace
from patchtool.project.manifest import parse_text
from patchtool.project.repository import LoadedPatch
from patchtool.rebase.replay import replay_one

MANIFEST = (
    'schema = 1\npin = "demo-1.0"\n\n[[patch]]\nid = "p"\nfile = "patches/p.patch"\nkind = "correctness"\n'
    'owner = "t"\nwhy = "w"\napplies_to = ">=1.0"\ndrop_when = "upstream"\nupstream = { status = "pending" }\n'
)
ENTRY = parse_text(MANIFEST).patches[0]
LABELS = ("upstream", "base", "patch")
PATH = "demo/mod.py"
NEW = ("check", "Limits", "parse")  # the names either side may add

Item = tuple[str, str]  # (scope: "" or "C", source of one definition at column 0)


def define(name: str, value: int, *, overload: bool = False) -> str:
    head = "@overload\n" if overload else ""
    if name[0].isupper():
        return f"{head}class {name}:\n    size = {value}\n"
    return f"{head}def {name}(*args):\n    return {value}\n"


def module(top: list[str], methods: list[str]) -> str:
    """The module: its functions, then class C with ``methods`` (indented)."""
    body = "\n\n".join(top)
    inner = "\n".join("".join(f"    {line}\n" if line else "\n" for line in m.splitlines()) for m in methods)
    inner = inner or "    pass\n"
    return f'"""Generated."""\n\nfrom typing import overload\n\n\n{body}\n\nclass C:\n{inner}'


@st.composite
def sides(draw: st.DrawFn) -> tuple[str, str, str]:
    """(base, upstream, patch) versions of the module."""
    top = [define(f"f{i}", i) for i in range(draw(st.integers(1, 4)))]
    methods = [define(f"m{i}", i) for i in range(draw(st.integers(0, 3)))]

    def edited(side: str) -> str:
        t, m = list(top), list(methods)
        for _ in range(draw(st.integers(1, 2), label=f"{side} additions")):
            into = draw(st.sampled_from(("top", "class")), label=f"{side} scope")
            name = draw(st.sampled_from(NEW), label=f"{side} name")
            value = draw(st.integers(0, 2), label=f"{side} value")
            stub = side == "patch" and not name[0].isupper() and draw(st.booleans(), label="overload")
            item = define(name, value, overload=stub)
            target = t if into == "top" else m
            target.insert(draw(st.integers(0, len(target)), label=f"{side} at"), item)
        if draw(st.booleans(), label=f"{side} edits a body") and t:
            i = draw(st.integers(0, len(t) - 1))
            t[i] = t[i].replace("return", f"return {len(side)} +")
        return module(t, m)

    return module(top, methods), edited("upstream"), edited("patch")


def duplicates(source: str) -> Counter[tuple[str, str]]:
    """(scope, name) -> how many times more than once module and class C define it, ``@overload``
    stubs not counted (a legitimate redefinition)."""
    tree = ast.parse(source)
    out: Counter[tuple[str, str]] = Counter()
    bodies = [("", tree.body), *((n.name, n.body) for n in tree.body if isinstance(n, ast.ClassDef))]
    for scope, body in bodies:
        names = Counter(
            n.name
            for n in body
            if isinstance(n, ast.FunctionDef | ast.ClassDef)
            and not any(isinstance(d, ast.Name) and d.id == "overload" for d in n.decorator_list)
        )
        out.update({(scope, k): v - 1 for k, v in names.items() if v > 1})
    return out


def commit(work: Path, source: str, message: str) -> str:
    write_tree(work, {PATH: source})
    git(work, "add", "-A")
    git(work, "commit", "-q", "--allow-empty", "-m", message)
    return git(work, "rev-parse", "HEAD").strip()


@settings(max_examples=40, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sides())
def test_a_replayed_patch_never_defines_a_name_twice_that_neither_side_did(case: tuple[str, str, str]) -> None:
    base_src, up_src, patch_src = case
    with tempfile.TemporaryDirectory(prefix="patchtool-twice-") as tmp:
        work = Path(tmp)
        git(work, "init", "-q")
        base = commit(work, base_src, "base")
        upstream = commit(work, up_src, "upstream")
        git(work, "checkout", "-q", base)
        patch = commit(work, patch_src, "patch")
        repo = gitmod.Repo(work / ".git")
        ((_, changes),) = repo.changes(base, patch)
        lp = LoadedPatch(entry=ENTRY, text=format_patch(work, patch), path=work / "p.patch")
        with repo.reader() as reader:
            ws = Workspace(repo, reader, upstream, (), Renames(repo, repo.tree_of(base), repo.tree_of(upstream)))
            step, files, _ = replay_one(ws, patch, changes, lp, LABELS)
            result = files.get(PATH) if files else None
            text = ws.data(result).decode() if result is not None else None
    event(str(step.outcome))
    known = duplicates(up_src) | duplicates(patch_src)
    if step.outcome.applied:
        assert text is not None
        new = duplicates(text) - known
        assert not new, (step, text)
    if "define a name twice" in step.detail:
        event("stopped: a name twice")
        assert text is not None and duplicates(text) - known, (step, text)
