"""Never twice: a patch's result that defines a Python name twice in one scope.

A backport whose function, method or class upstream already has beside it merges cleanly and
leaves two definitions; Python keeps the last, silently. Only files where the patch adds a
``def`` or ``class`` line are parsed, and only the names it adds count. Legitimate
redefinitions are not duplicates: ``@overload``, a property's ``setter``/``getter``/``deleter``
(each decorated with an attribute of its name; two setters are two), singledispatch's ``def _``,
and definitions in different branches of one ``if`` or ``try`` (alternatives; a ``try``'s
``else`` and ``finally`` run with its body). A definition in a branch and another beside the
statement are two. An import or an assignment binds its name as a definition does (upstream
moved a function into another module and imports it where the backport defines it), except an
assignment that reads the name (``f = wrap(f)``). A file that does not parse is not judged by
this rule.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable

_DEF = re.compile(r"^\s*(?:async\s+def|def|class)\s+([A-Za-z_]\w*)")
_Defn = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def added_names(added: Iterable[str]) -> frozenset[str]:
    """The names of the ``def`` and ``class`` lines among ``added``."""
    return frozenset(m.group(1) for line in added if (m := _DEF.match(line)))


def _role(node: _Defn) -> str | None:
    """What a definition is of its name: None for ``@overload`` (never a duplicate); the attribute
    for a def decorated with one of its own name's (``@x.setter``: a property's setter is not its
    getter, but two setters are two); "" for a plain one."""
    if node.name == "_":
        return None  # a name for what is never looked up by it: singledispatch's @f.register implementations
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if (isinstance(target, ast.Name) and target.id == "overload") or (
            isinstance(target, ast.Attribute) and target.attr == "overload"
        ):
            return None
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == node.name:
            return target.attr
    return ""


def _branches(node: ast.stmt) -> list[list[ast.stmt]]:
    """What a compound statement that is not a scope may run, each a list of statements, as
    alternatives: an ``if``'s two branches; a ``try``'s body then ``else``, or a handler, each
    then ``finally``; a loop's body then its ``else``; a ``with``'s body; each ``match`` case."""
    final = list(getattr(node, "finalbody", ()))
    if isinstance(node, ast.If):
        paths = [node.body, node.orelse]
    elif isinstance(node, ast.Try | ast.TryStar):
        paths = [node.body + node.orelse + final] + [h.body + final for h in node.handlers]
    elif isinstance(node, ast.Match):
        paths = [c.body for c in node.cases]
    else:
        paths = [list(getattr(node, "body", ())) + list(getattr(node, "orelse", ()))]
    return [p for p in paths if p and isinstance(p[0], ast.stmt)]


def _count(
    body: list[ast.stmt], names: frozenset[str], scope: str, out: Counter[tuple[str, str]]
) -> Counter[tuple[str, str]]:
    """Each (name, role) of ``names`` a scope's statement list binds, and how often: a definition in
    a branch counts beside the statement list's own, branches of one statement as alternatives
    (the most any of them binds). Nested scopes are counted into ``out`` as they are met."""
    here: Counter[tuple[str, str]] = Counter()
    for node in body:
        if isinstance(node, _Defn):
            _scope(node.body, names, f"{scope}.{node.name}" if scope else node.name, out)
            if node.name in names and (role := _role(node)) is not None:
                here[node.name, role] += 1
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):  # an import binds its name as a def does
            bound = (a.asname or a.name.partition(".")[0] for a in node.names)
            here.update((name, "") for name in bound if name in names)
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign):  # so does an assignment, but not ``f = wrap(f)``
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            used = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} if node.value is not None else set()
            here.update((t.id, "") for t in targets if isinstance(t, ast.Name) and t.id in names and t.id not in used)
            continue
        alternatives = [_count(b, names, scope, out) for b in _branches(node)]
        here.update(Counter({k: max(c[k] for c in alternatives) for a in alternatives for k in a}))
    return here


def _scope(body: list[ast.stmt], names: frozenset[str], scope: str, out: Counter[tuple[str, str]]) -> None:
    for (name, _role), count in _count(body, names, scope, out).items():
        out[scope, name] = max(out[scope, name], count)


def definitions(source: str, names: frozenset[str]) -> Counter[tuple[str, str]] | None:
    """(scope, name) -> how often one scope defines it in one role, for ``names``; None where
    ``source`` does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the parser's limits too
        return None
    out: Counter[tuple[str, str]] = Counter()
    _scope(tree.body, names, "", out)
    return out


def defined_twice(path: str, result: str, names: frozenset[str], *before: str | None) -> tuple[str, ...]:
    """Each name of ``names`` that ``result`` defines more than once in one scope where none of
    ``before`` (the target, the patch's own file at the old pin) did: a line of evidence each."""
    if not names or not path.endswith(".py") or (found := definitions(result, names)) is None:
        return ()
    known = [definitions(b, names) if b is not None else None for b in before]
    out = []
    for (scope, name), count in sorted(found.items()):
        if count < 2 or any(k is not None and k[(scope, name)] >= count for k in known):
            continue
        where = f"{scope}.{name}" if scope else name
        out.append(f"{path}: {where} would be defined {count} times in one scope; the target already defines it there")
    return tuple(out)
