"""The GPU checks' fixtures. tests/conftest.py keeps this directory out of the normal suite: it is
collected only when named (`python tests/gpu/run.py`, `nox -s gpu`, `python -m pytest tests/gpu/...`).

Fixtures: ``patched_tree_gpu`` (the patched tree's root) and ``record`` (figures for the results
file). Gates are in ``gpu_support``: ``require_cuda()``, ``require_sm120()``, ``require_tool()`` and
``require_deployment()``; sglang's serving benchmark against a deployment is in ``gpu_deploy``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gpu_support
import gpu_tree
import pytest


@pytest.fixture(scope="session")
def patched_tree_gpu(request: pytest.FixtureRequest) -> Path:
    """The patched tree: ``$PATCHTOOL_GPU_TREE`` (the runner sets it; a directory made by
    `patchtool apply --into DIR` or unpacked from `run.py --pack-tree`), else the tree the CPU
    tests build (``patched_tree``: `patchtool apply` with the test cache)."""
    given = os.environ.get(gpu_tree.TREE_ENV)
    if given:
        try:
            return gpu_tree.open_tree(Path(given)).path
        except gpu_tree.TreeError as exc:
            pytest.fail(f"${gpu_tree.TREE_ENV}: {exc}")
    missing = os.environ.get(gpu_tree.TREE_ERROR_ENV)
    if missing:
        pytest.skip(f"no patched tree, not run: {missing}")
    path: Path = request.getfixturevalue("patched_tree")
    return path


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``record(name=value, ...)``: figures this check measured, kept in the results file."""
    recorder: Callable[..., Any] = gpu_support.recorder(request.node)
    return recorder
