"""How the package's modules import: no private API of the command-line library. Every import
counts, at module level or inside a function."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tool" / "patchtool"


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
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (Import(name, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[:len(parts) - node.level + 1], *([node.module] if node.module else [])])
            yield from (Import(name, f"{base}.{alias.name}", node.lineno) for alias in node.names)


def every_import() -> list[Import]:
    return [found for path in sorted(PACKAGE.rglob("*.py")) for found in imports(path)]


def test_the_command_line_uses_no_private_api_of_typer_or_click() -> None:
    """typer vendors click under ``typer._click``; its private modules change in any release, so
    patchtool uses what typer exports (``typer.TyperException``, ``typer.core``, ``typer.main``)."""
    private = [str(i) for i in every_import() if i.target.split(".")[0] in ("typer", "click")
               and any(part.startswith("_") for part in i.target.split(".")[1:])]
    assert private == []


def test_the_import_parser_sees_imports_inside_functions() -> None:
    found = {i.target for i in every_import() if i.module == "patchtool.cli.app"}
    assert "patchtool.confine" in found  # imported inside _confinement()
