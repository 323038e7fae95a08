"""Absorption judged on inputs a helper wrote to attack issue 31's claims, none of them from the
tests written with the feature: each case here dropped, merged or gave evidence for a patch
upstream does not have, or left a name defined twice, on main at 9022c5e.

1. A hunk that moves a line (removes it and adds it back elsewhere) counted as upstream in the
   unchanged target: its removed line is among its kept ones, so only the added line was looked
   for. A hunk that moves lines is now upstream only with its lines in their new order.
2. A patch that deletes a line upstream only moved two lines down merged to nothing and was
   dropped. A line a patch removes that the file had once must be gone from the target, and
   "applying it changes nothing" drops only when the hunks the content can judge agree.
3. A patch adding a check upstream wrote weaker (a warning, the raise only in strict mode,
   between the patch's two lines) had "every line it adds". Each run of added lines must be
   there as one block.
4. and 5. A second ``@x.setter``, and a def in a ``try`` branch beside a plain one, were applied
   unchanged: both are now "defined twice" (``rebase/twice.py``).
"""

from __future__ import annotations

from pathlib import Path

from debian_backports import Upstream, make_upstream, steps


def _fixture(
    tmp: Path, base: dict[str, str], upstream: list[tuple[str, dict[str, str]]], patched: dict[str, str], message: str
) -> Upstream:
    """An upstream repository (v1.0: ``base``; v1.1: after the ``upstream`` commits), a project
    pinned to v1.0 by git with one patch, ``fix`` (``patched`` files, ``message``)."""
    return make_upstream(tmp, [*upstream], [("fix", message, {**patched})], base={**base})


def _dry(u: Upstream, *extra: str) -> dict[str, object]:
    return steps(u.dry_run(*extra))["fix"]


AUTH = """\
def parse(req):
    return req


def handle(req):
    data = parse(req)
    use(data)
    check(req)
    return data


def handle2(req):
    data = parse(req)
    use(data)
    check(req)
    return data


def tail():
    return 0
"""


def _reorder(fn: str) -> tuple[str, str]:
    return (
        f"def {fn}(req):\n    data = parse(req)\n    use(data)\n    check(req)\n",
        f"def {fn}(req):\n    data = parse(req)\n    check(req)\n    use(data)\n",
    )


def test_a_reorder_is_not_dropped_on_a_commit_that_reordered_another_function(tmp_path: Path) -> None:
    """The patch moves check() before use() in handle(); upstream made that move in handle2()
    only, and the patch names that commit. handle() in 1.1 still uses before it checks."""
    old2, new2 = _reorder("handle2")
    old, new = _reorder("handle")
    ups = [("Check before use in handle2", {"demo/auth.py": AUTH.replace(old2, new2)})]
    u = _fixture(
        tmp_path,
        {"demo/__init__.py": "", "demo/auth.py": AUTH},
        ups,
        {"demo/auth.py": AUTH.replace(old, new)},
        "x\n\n(cherry picked from commit {Check before use in handle2})\n",
    )
    step = _dry(u, "--history")
    assert step["outcome"] != "already upstream", step


def test_a_reorder_hunk_is_not_partly_upstream(tmp_path: Path) -> None:
    """Upstream changed the line above the reordering hunk: the conflict is "resolved" by leaving
    the reorder out, and the patch applies its other hunk as "partly upstream"."""
    old, new = _reorder("handle")
    v11 = AUTH.replace(
        "def handle(req):\n    data = parse(req)\n", "def handle(req):\n    data = parse(req, strict=True)\n"
    )
    patched = AUTH.replace(old, new).replace("    return 0\n", "    return 1\n")
    u = _fixture(
        tmp_path,
        {"demo/__init__.py": "", "demo/auth.py": AUTH},
        [("strict", {"demo/auth.py": v11})],
        {"demo/auth.py": patched},
        "x",
    )
    step = _dry(u)
    assert step["outcome"] == "conflict", step
    assert not any("every line it adds" in e for e in step.get("evidence", [])), step


IO = """\
import os


def save(path, data):
    open(path, "w").write(data)
    os.chmod(path, 0o777)
    log(path)
    sync(path)
    return path
"""


def test_a_deletion_upstream_only_moved_is_not_dropped(tmp_path: Path) -> None:
    """The patch removes chmod 0o777; upstream moved the call below sync(). The 3-way merge
    "changes nothing" and the patch leaves the series without a stop."""
    moved = IO.replace(
        "    os.chmod(path, 0o777)\n    log(path)\n    sync(path)\n",
        "    log(path)\n    sync(path)\n    os.chmod(path, 0o777)\n",
    )
    u = _fixture(
        tmp_path,
        {"demo/__init__.py": "", "demo/io.py": IO},
        [("Sync before chmod", {"demo/io.py": moved})],
        {"demo/io.py": IO.replace("    os.chmod(path, 0o777)\n", "")},
        "Do not make saved files world-writable",
    )
    step = _dry(u)
    assert step["outcome"] != "already upstream", step


READ = """\
LIMIT = 10


def read(size, strict=False):
    buf = alloc()
    fill(buf, size)
    return buf
"""
WEAKER = READ.replace(
    "    buf = alloc()\n",
    '    buf = alloc()\n    if size > LIMIT:\n        warn("too big")\n    if strict:\n        raise ValueError("too big")\n',
)
HARD = READ.replace(
    "    buf = alloc()\n", '    buf = alloc()\n    if size > LIMIT:\n        raise ValueError("too big")\n'
)


def test_a_weaker_upstream_fix_is_not_the_patch(tmp_path: Path) -> None:
    u = _fixture(
        tmp_path,
        {"demo/__init__.py": "", "demo/r.py": READ},
        [("Warn on big reads", {"demo/r.py": WEAKER})],
        {"demo/r.py": HARD},
        "x\n\n(cherry picked from commit {Warn on big reads})\n",
    )
    step = _dry(u, "--history")
    assert step["outcome"] != "already upstream", step
    step = _dry(u)
    assert not any(e.startswith("the target has every line it adds") for e in step.get("evidence", [])), step


CONN = """\
class Conn:
    def __init__(self):
        self._timeout = 0

    @property
    def timeout(self):
        return self._timeout

    def open(self):
        return 1

    def read(self):
        return 2
"""


def test_a_setter_upstream_added_is_not_added_twice(tmp_path: Path) -> None:
    setter = "\n    @timeout.setter\n    def timeout(self, value):\n        self._timeout = {}\n"
    u = _fixture(
        tmp_path,
        {"demo/__init__.py": "", "demo/conn.py": CONN},
        [("Add the setter", {"demo/conn.py": CONN + setter.format("int(value)")})],
        {
            "demo/conn.py": CONN.replace(
                "        return self._timeout\n", "        return self._timeout\n" + setter.format("value")
            )
        },
        "Backport the timeout setter",
    )
    step = _dry(u)
    assert step["outcome"] == "conflict", step


def test_a_function_upstream_added_beside_a_try_is_not_added_twice(tmp_path: Path) -> None:
    base = "import os\n\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n"
    shim = "import os\n\ntry:\n    from os import fspath as helper\nexcept ImportError:\n    def helper(x):\n        return str(x)\n"
    u = _fixture(
        tmp_path,
        {"demo/__init__.py": "", "demo/util.py": base},
        [("Add helper", {"demo/util.py": base + "\n\ndef helper(x):\n    return os.fspath(x)\n"})],
        {"demo/util.py": base.replace("import os\n", shim, 1)},
        "Backport helper",
    )
    step = _dry(u)
    assert step["outcome"] == "conflict", step
