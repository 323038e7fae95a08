"""patchtool's modules share only public names: a name another module needs has no leading
underscore, so what is private to a module can change without reading the rest of the package."""

from __future__ import annotations

import ast
from pathlib import Path

import patchtool

PACKAGE = Path(patchtool.__file__).parent


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _shared_private_names(source: str) -> list[str]:
    """``from patchtool... import _x`` and ``_x`` in ``__all__``, each as it reads in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "patchtool":
            found += [f"from {node.module} import {a.name}" for a in node.names if _private(a.name)]
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            found += [
                f"__all__ holds {e.value}"
                for e in ast.walk(node.value)
                if isinstance(e, ast.Constant) and isinstance(e.value, str) and _private(e.value)
            ]
    return found


def test_the_check_sees_a_private_import_and_a_private_export() -> None:
    assert _shared_private_names(
        "from patchtool.series.ids import slug, _taken\n__all__ = ['_q', '__version__']\n"
    ) == ["from patchtool.series.ids import _taken", "__all__ holds _q"]


def test_no_module_imports_or_exports_another_modules_private_name() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}: {what}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for what in _shared_private_names(path.read_text(encoding="utf-8"))
    ]
    assert found == []
