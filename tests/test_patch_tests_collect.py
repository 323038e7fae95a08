"""The patches' own tests are listed (``pytest --co``) where torch, numpy and triton are not
installed: those are imported by a fixture at a module's first test, never at collection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "numpy", "triton", "tvm_ffi")


def test_patch_tests_collect_without_torch_numpy_or_triton() -> None:
    blocked = "; ".join(f"sys.modules[{m!r}] = None" for m in HEAVY)  # `import torch` raises ImportError
    code = (
        f"import sys; {blocked}; import pytest; "
        "sys.exit(pytest.main(['--co', '-q', '-p', 'no:cacheprovider', 'tests/patches']))"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    listed = {line.split("::", 1)[0] for line in res.stdout.splitlines() if "::" in line}
    assert listed == {f"tests/patches/{p.name}" for p in (REPO / "tests" / "patches").glob("test_*.py")}
