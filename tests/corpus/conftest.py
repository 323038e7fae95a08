"""The corpus tier: patchtool beside real git on material written elsewhere or in git's style
(``pytest -m corpus`` runs it alone; the normal suite runs it too).

python-unidiff's sample diffs are not copied into this repository: they are read from
python-unidiff's own sdist on PyPI (``unidiff-0.7.5.tar.gz``, MIT, verified by its sha256),
downloaded once into the test cache (``.cache/test-upstream``, as the real SGLang releases are)."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import urllib.request

import pytest
from differ import CACHE, UNIDIFF_SAMPLES, UNIDIFF_SDIST, UNIDIFF_SHA256, UNIDIFF_URL


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "corpus: patchtool against real git on public or git-style cases")


@pytest.fixture(scope="session")
def unidiff_samples() -> dict[str, bytes]:
    """Each sample diff of python-unidiff 0.7.5's sdist, by name (without ``.diff``)."""
    sdist = CACHE / "fixtures" / UNIDIFF_SDIST
    if not sdist.is_file() or hashlib.sha256(sdist.read_bytes()).hexdigest() != UNIDIFF_SHA256:
        try:
            with urllib.request.urlopen(UNIDIFF_URL, timeout=60) as answer:
                data = answer.read(1 << 20)
        except OSError as exc:
            pytest.skip(f"PyPI is unreachable from here ({exc}); the unidiff samples come from its sdist")
        assert hashlib.sha256(data).hexdigest() == UNIDIFF_SHA256, "PyPI served another unidiff-0.7.5.tar.gz"
        sdist.parent.mkdir(parents=True, exist_ok=True)
        tmp = sdist.with_suffix(f".{os.getpid()}.part")
        tmp.write_bytes(data)
        tmp.replace(sdist)
    with tarfile.open(fileobj=io.BytesIO(sdist.read_bytes()), mode="r:gz") as tar:
        found = {}
        for name in UNIDIFF_SAMPLES:
            member = tar.extractfile(f"unidiff-0.7.5/tests/samples/{name}.diff")
            assert member is not None
            found[name] = member.read()
    return found
