"""Tests of the benchmark's own pure parts (no git, no patchtool, no sglang).

Outside the suite's testpaths: run them by name,
`python -m pytest -q -p no:cacheprovider bench/test_bench.py`.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_rebase_series as series
from make_series import BenchError, command_python
from rebase_steps import resolve_text


def test_the_30_patch_order_is_the_one_the_figures_were_taken_on() -> None:
    assert series.order_for(30) == (series.ORDER, series.REVISITS)


def test_the_100_patch_order_repeats_the_30_and_revisits_what_it_can() -> None:
    order, revisits = series.order_for(100)
    assert len(order) == 100
    assert Counter(order) == {
        "unchanged": 27,
        "shifted": 27,
        "merge": 20,
        "conflict": 10,
        "upstream": 7,
        "revisit": 6,
        "gone": 3,
    }
    assert revisits == {14: 2, 25: 11, 44: 32, 55: 41, 74: 62, 85: 71}
    # a revisit builds on an earlier note, which only unchanged and shifted patches leave
    assert all(
        order[n - 1] == "revisit" and order[m - 1] in ("unchanged", "shifted") and m < n for n, m in revisits.items()
    )
    with pytest.raises(BenchError):
        series.order_for(50)


def test_a_conflict_is_resolved_to_upstreams_line_with_the_patchs_comment() -> None:
    text = (
        "a\n<<<<<<< sglang 0.5.23 + series\n        self._page_backup_or_log(op)\n=======\n"
        "        self._page_backup(op)  # fork: keep in step\n>>>>>>> patch rb-0009\nb"
    )
    assert resolve_text(text) == "a\n        self._page_backup_or_log(op)  # fork: keep in step\nb"


def test_a_diff3_conflict_drops_the_ancestor_and_an_empty_upstream_side_keeps_the_patch() -> None:
    text = (
        "<<<<<<< ours\n    x = 2\n||||||| base\n    x = 1\n=======\n    x = 1  # fork\n>>>>>>> theirs\n"
        "<<<<<<< ours\n=======\n    y = 3\n>>>>>>> theirs"
    )
    assert resolve_text(text) == "    x = 2  # fork\n    y = 3"


def test_a_text_without_markers_is_left_alone() -> None:
    assert resolve_text("a\n# b\nc = '#'") == "a\n# b\nc = '#'"


@pytest.mark.parametrize(
    ("cmd", "python", "env"),
    [
        (["/v/bin/python", "-m", "patchtool"], "/v/bin/python", {}),
        (
            ["env", "PYTHONPATH=/old/tool", "A=b=c", "/v/bin/python", "-m", "patchtool"],
            "/v/bin/python",
            {"PYTHONPATH": "/old/tool", "A": "b=c"},
        ),
        (["/nowhere/patchtool"], sys.executable, {}),
    ],
)
def test_the_python_of_a_patchtool_command(cmd: list[str], python: str, env: dict[str, str]) -> None:
    assert command_python(cmd) == (python, env)


def test_the_python_of_a_script_is_its_shebang(tmp_path: Path) -> None:
    script = tmp_path / "patchtool"
    script.write_text("#!/opt/venv/bin/python3\nimport patchtool\n")
    assert command_python([str(script)]) == ("/opt/venv/bin/python3", {})
