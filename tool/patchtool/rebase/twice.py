"""Never twice: a patch's result that defines a Python name twice in one scope.

A backport whose function, method or class upstream already has beside it merges cleanly and
leaves two definitions; Python keeps the last, silently. Only files where the patch adds a
``def`` or ``class`` line are parsed, and only the names it adds count. Legitimate
redefinitions are not duplicates: ``@overload``, a property's ``setter``/``getter``/``deleter``
and ``@f.register`` (each decorated with an attribute of a name), and definitions in different
branches of an ``if`` or ``try`` (each branch is a statement list of its own). A file that does
not parse is not judged by this rule.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Iterator

_DEF = re.compile(r"^\s*(?:async\s+def|def|class)\s+([A-Za-z_]\w*)")
_Defn = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def added_names(added: Iterable[str]) -> frozenset[str]:
    """The names of the ``def`` and ``class`` lines among ``added``."""
    return frozenset(m.group(1) for line in added if (m := _DEF.match(line)))


def _legitimate(node: _Defn) -> bool:
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Name) and target.id == "overload":
            return True
        if isinstance(target, ast.Attribute) and (
            target.attr == "overload" or (isinstance(target.value, ast.Name) and target.value.id == node.name)
        ):
            return True
    return False


def _bodies(node: ast.AST, scope: str) -> Iterator[tuple[str, list[ast.stmt]]]:
    """Every statement list under ``node``, each with the name of the scope it is in."""
    for field in ("body", "orelse", "finalbody"):
        body = getattr(node, field, None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            yield scope, body
    for handler in getattr(node, "handlers", ()):
        yield from _bodies(handler, scope)
    for case in getattr(node, "cases", ()):
        yield from _bodies(case, scope)
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _Defn):
            yield from _bodies(child, f"{scope}.{child.name}" if scope else child.name)
        elif isinstance(child, ast.stmt):
            yield from _bodies(child, scope)


def definitions(source: str, names: frozenset[str]) -> Counter[tuple[str, str]] | None:
    """(scope, name) -> how often one statement list defines it, for ``names``; None where
    ``source`` does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    out: Counter[tuple[str, str]] = Counter()
    for scope, body in _bodies(tree, ""):
        counted = Counter(n.name for n in body if isinstance(n, _Defn) and n.name in names and not _legitimate(n))
        for name, count in counted.items():
            key = (scope, name)
            out[key] = max(out[key], count)
    return out


def defined_twice(path: str, result: str, names: frozenset[str], *before: str | None) -> tuple[str, ...]:
    """Each name of ``names`` that ``result`` defines more than once in one scope where none of
    ``before`` (the target, the patch's own file at the old pin) did: a line of evidence each."""
    if not names or not path.endswith(".py"):
        return ()
    found = definitions(result, names)
    if found is None:
        return ()
    known = [definitions(b, names) if b is not None else None for b in before]
    out = []
    for (scope, name), count in sorted(found.items()):
        if count < 2 or any(k is not None and k[(scope, name)] >= count for k in known):
            continue
        where = f"{scope}.{name}" if scope else name
        out.append(f"{path}: {where} would be defined {count} times in one scope; the target already defines it there")
    return tuple(out)
