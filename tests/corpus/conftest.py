"""The corpus tier: patchtool beside real git on material written elsewhere or in git's style
(``pytest -m corpus`` runs it alone; the normal suite runs it too)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "corpus: patchtool against real git on public or git-style cases")
