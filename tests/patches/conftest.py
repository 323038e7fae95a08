"""The patches' tests import torch, numpy and triton at their first test, not at collection:
``pytest --co`` lists them where those are not installed."""

from __future__ import annotations

import pytest

from patchtool.testing import lazy_modules


@pytest.fixture(scope="module", autouse=True)
def _heavy_modules(request: pytest.FixtureRequest) -> None:
    """Import the modules a test module holds lazily (``patchtool.testing.lazy``: torch, numpy,
    triton ...) before its first test, in the environment it set up at import (TRITON_INTERPRET=1);
    skip it, naming the module, where one is missing."""
    for name in lazy_modules(request.module):
        pytest.importorskip(name)
