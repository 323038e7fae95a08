"""How the package's modules import: down the layers ARCHITECTURE.md documents, and no private
API of the command-line library. Every import counts, at module level or inside a function."""

from __future__ import annotations

import ast
import dataclasses
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
    ("wheel", "rebase"),
    ("sglang",),
    ("cli", "__main__"),
)
FORK = "patchtool.sglang"

# Imports that still point up, each with why it is not broken yet. Keep this short.
ALLOWED_UP: set[tuple[str, str]] = set()


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


def imports(path: Path) -> Iterator[Import]:
    """Every import in the module at ``path``, wherever it stands in the module."""
    return imports_of(path.read_text(), path)


def imports_of(source: str, path: Path) -> Iterator[Import]:
    """Every import in ``source``, the module at ``path``."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source, filename=str(path))):
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
    found = {i.target for i in every_import() if i.module == "patchtool.cli.app"}
    assert "patchtool.confine" in found  # imported inside _confinement()


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
