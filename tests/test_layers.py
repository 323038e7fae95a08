"""How the package's modules import: down the layers ARCHITECTURE.md documents, and no private
API of the command-line library. Every import counts, at module level or inside a function."""

from __future__ import annotations
import __future__

import ast
import dataclasses
import functools
import graphlib
import importlib
import inspect
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tool" / "patchtool"

# ARCHITECTURE.md's layers, bottom up: a module may import its own layer and those below it.
# "" is the top-level modules (the foundations); __main__ is the entry point, with cli; sglang is
# the SGLang fork's room, which only cli may import.
LAYERS = (
    ("",),
    ("git", "diff"),
    ("project",),
    ("upstream",),
    ("registry",),
    ("series",),
    ("edit",),
    ("wheel", "rebase"),
    ("sglang",),
    ("cli", "__main__"),
)
FORK = "patchtool.sglang"

# Imports that still point up, each with why it is not broken yet. Keep this short.
ALLOWED_UP: set[tuple[str, str]] = set()
# Imports that close a cycle, each with why. Keep this short.
ALLOWED_BACK = {
    # command.py runs owned.restore before git runs in the cache; restore runs git through a Runner
    ("patchtool.git.owned", "patchtool.git.command"),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted: a module, or module.name for `from module import name`
    line: int

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The module at ``path``, parsed once per run: most tests here read every module of the package."""
    return ast.parse(path.read_text(), filename=str(path))


@functools.cache
def imports(path: Path) -> tuple[Import, ...]:
    """Every import in the module at ``path``, wherever it stands in the module."""
    return tuple(imports_in(parsed(path), path))


def imports_of(source: str, path: Path) -> Iterator[Import]:
    """Every import in ``source``, the module at ``path``."""
    return imports_in(ast.parse(source, filename=str(path)), path)


def imports_in(tree: ast.Module, path: Path) -> Iterator[Import]:
    """Every import in ``tree``, the module at ``path``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (Import(name, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([node.module] if node.module else [])])
            yield from (Import(name, f"{base}.{alias.name}", node.lineno) for alias in node.names)


def every_import() -> list[Import]:
    return [found for path in sorted(PACKAGE.rglob("*.py")) for found in imports(path)]


def layer(module: str) -> int:
    """The layer of a dotted name under ``patchtool``: its subpackage's, or the foundations'."""
    first = module.split(".")[1] if module.count(".") else ""
    first = first if (PACKAGE / first).is_dir() or first == "__main__" else ""
    (index,) = [i for i, names in enumerate(LAYERS) if first in names]
    return index


def upward(found: Import) -> bool:
    return (
        found.target.split(".")[0] == "patchtool"
        and layer(found.target) > layer(found.module)
        and not any(found.module == m and found.target.startswith(f"{t}.") for m, t in ALLOWED_UP)
    )


def test_imports_point_down_the_layers() -> None:
    offenders = [str(i) for i in every_import() if upward(i)]
    assert offenders == [], "imports that point up ARCHITECTURE.md's layers:\n" + "\n".join(offenders)


def test_no_generic_module_imports_the_sglang_room() -> None:
    """What only the SGLang fork knows lives in patchtool.sglang; the generic tool never reaches
    into it, so a maintainer of another package's fork reads a generic tool. The CLI wires it in."""
    generic = [
        str(i)
        for i in every_import()
        if (i.target == FORK or i.target.startswith(f"{FORK}."))
        and not i.module.startswith((f"{FORK}.", "patchtool.cli"))
        and i.module != FORK
    ]
    assert generic == [], "generic modules that import the SGLang room:\n" + "\n".join(generic)


def test_the_sglang_room_is_found_wherever_it_is_imported() -> None:
    source = "from patchtool.sglang import deploy\ndef f():\n    from patchtool.sglang.launch import fit\n"
    found = [str(i) for i in imports_of(source, PACKAGE / "registry" / "probe.py") if i.target.startswith(FORK)]
    assert found == [
        "patchtool.registry.probe:1 imports patchtool.sglang.deploy",
        "patchtool.registry.probe:3 imports patchtool.sglang.launch.fit",
    ]
    assert all(upward(i) for i in imports_of(source, PACKAGE / "registry" / "probe.py"))


def test_every_allowed_exception_is_still_needed() -> None:
    """An exception that no import needs any more goes from ALLOWED_UP."""
    needed = {
        (i.module, t) for i in every_import() for m, t in ALLOWED_UP if i.module == m and i.target.startswith(f"{t}.")
    }
    assert needed == ALLOWED_UP


def test_every_subpackage_has_a_layer() -> None:
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages <= {name for names in LAYERS for name in names}


def test_the_command_line_uses_no_private_api_of_typer_or_click() -> None:
    """typer vendors click under ``typer._click``; its private modules change in any release, so
    patchtool uses what typer exports (``typer.TyperException``, ``typer.core``, ``typer.main``)."""
    private = [
        str(i)
        for i in every_import()
        if i.target.split(".")[0] in ("typer", "click")
        and any(part.startswith("_") for part in i.target.split(".")[1:])
    ]
    assert private == []


def test_the_import_parser_sees_imports_inside_functions() -> None:
    found = {i.target for i in every_import() if i.module == "patchtool.cli.core"}
    assert "patchtool.rebase.transaction" in found  # imported inside rebase()


def runtime_imports(path: Path) -> list[Import]:
    """The imports of the module at ``path`` that run: at module level or inside a function, not
    under ``if TYPE_CHECKING:``."""
    tree = parsed(path)
    checking = [n for n in ast.walk(tree) if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"]
    hidden = {n.lineno for block in checking for n in ast.walk(block) if isinstance(n, ast.Import | ast.ImportFrom)}
    return [i for i in imports(path) if i.line not in hidden]


def cli_module(target: str) -> str | None:
    """The module of cli/ that importing ``target`` (a module, or a name in one) loads, if any."""
    for name in (target, target.rpartition(".")[0]):
        if name.startswith("patchtool.cli.") and (PACKAGE / "cli" / f"{name[len('patchtool.cli.') :]}.py").is_file():
            return name
    return None


def in_cycles(edges: dict[str, set[str]]) -> list[str]:
    """The nodes of ``edges`` (node -> the nodes it points to) that reach themselves."""

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in edges.get(start, ()))

    return sorted(n for n in edges if reaches(n, n, {n}))


def test_no_module_imports_one_that_imports_it_back() -> None:
    """Within a layer as across them, the modules read in one order: none imports, at module level
    or inside a function, a module that imports it back (the edit wing and the rebase included)."""
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {i.target if i.target in modules else i.target.rpartition(".")[0] for i in runtime_imports(path)}
        edges[name] = {t for t in targets if t in modules and t != name}
    assert {(m, t) for m, t in ALLOWED_BACK if t in edges[m]} == ALLOWED_BACK  # each still needed
    for m, t in ALLOWED_BACK:
        edges[m].discard(t)
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"modules in an import cycle: {' -> '.join(exc.args[1])}") from None


def test_the_command_line_has_no_import_cycle() -> None:
    """No module of cli/ imports one that imports it back, at module level or inside a function:
    what a command depends on reaches it through its signature, not through a module's state."""
    edges: dict[str, set[str]] = {}
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        mine = module_name(path)
        edges[mine] = {t for i in runtime_imports(path) if (t := cli_module(i.target)) not in (None, mine)}
    assert in_cycles(edges) == [], "modules of cli/ in an import cycle"
    assert in_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c"]


def frozen(value: object) -> bool:
    """Whether ``value`` cannot change: a constant, a tuple or mapping proxy of them, a frozen
    dataclass, a compiled pattern, or what a module defines (a function, a class, a type alias)."""
    if value is __future__.annotations or isinstance(value, str | bytes | int | float | type(None) | re.Pattern):
        return True
    if isinstance(value, tuple | frozenset):
        return all(frozen(v) for v in value)
    if isinstance(value, types.MappingProxyType):
        return all(frozen(k) and frozen(v) for k, v in value.items())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return bool(value.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    return (
        callable(value)
        or inspect.ismodule(value)
        or isinstance(value, typing.TypeVar)
        or typing.get_origin(value) is not None
    )


def test_the_command_line_holds_no_state_in_its_modules() -> None:
    """Every name a module of cli/ binds is a constant, and no function rebinds one (``global``):
    a command line's state is its invocation, on typer's context."""
    held = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        module = importlib.import_module(module_name(path))
        held += [
            f"{module.__name__}.{name}"
            for name, value in vars(module).items()
            if not name.startswith("__") and not frozen(value)
        ]
        tree = ast.parse(path.read_text())
        held += [f"{module.__name__}:{n.lineno} global" for n in ast.walk(tree) if isinstance(n, ast.Global)]
    assert held == []


def test_a_dict_or_a_global_is_state() -> None:
    assert not frozen({"a": 1}) and not frozen([1]) and not frozen((1, [2])) and frozen((1, ("a", b"b")))
    assert frozen(types.MappingProxyType({"a": (1,)})) and not frozen(types.MappingProxyType({"a": [1]}))


def test_an_upward_import_is_found_wherever_it_stands() -> None:
    """One at module level, one inside a function, one relative: each is named as an offender."""
    source = "from patchtool.cli import app\ndef f():\n    import patchtool.rebase.state\nfrom ..series import apply\n"
    path = PACKAGE / "upstream" / "probe.py"
    found = sorted((i for i in imports_of(source, path) if upward(i)), key=lambda i: i.line)
    assert [str(i) for i in found] == [
        "patchtool.upstream.probe:1 imports patchtool.cli.app",
        "patchtool.upstream.probe:3 imports patchtool.rebase.state",
        "patchtool.upstream.probe:4 imports patchtool.series.apply",
    ]
