"""Tests of run.py's pure parts: each patch's verdict from the rebase's --json reports, and the
truth x verdict table. Outside the suite's testpaths: run them by name,
`python -m pytest -q -p no:cacheprovider bench/realseries/test_run.py`.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run

NAMES = ["a.patch", "b.patch", "c.patch", "d.patch"]


def _envelope(*outcomes: dict) -> dict:
    status = "conflict" if any(o["outcome"] == "conflict" for o in outcomes) else "done"
    return {"exit_code": 3 if status == "conflict" else 0, "data": {"status": status, "patches": list(outcomes)}}


def _p(pid: str, outcome: str, **more: object) -> dict:
    return {"id": pid, "file": f"patches/{pid}.patch", "outcome": outcome, **more}


def _rebase() -> list[dict]:
    """A rebase as the corpus run makes it: a stop at b (with upstream evidence), skipped; a stop
    at c (without), skipped; then done, with a already upstream and d applied."""
    up = _p("a", "already upstream", detail="reverse-applies", evidence=["reverse apply at the target"])
    return [
        _envelope(
            up,
            _p("b", "conflict", detail="CONFLICT in x.py", upstream_has=["x.py:3"]),
            _p("c", "not reached"),
            _p("d", "not reached"),
        ),
        _envelope(
            up,
            _p("b", "dropped", detail="skipped: corpus run"),
            _p("c", "conflict", detail="CONFLICT in y.py"),
            _p("d", "not reached"),
        ),
        _envelope(
            up,
            _p("b", "dropped", detail="skipped: corpus run"),
            _p("c", "dropped", detail="skipped: corpus run"),
            _p("d", "applied with shifted context", detail="z.py: hunk 1 at 9 (+2)"),
        ),
    ]


def test_a_skipped_stop_keeps_the_stops_outcome_and_evidence() -> None:
    v = {x["name"]: x for x in run.verdicts(_rebase(), NAMES)}
    assert v["a.patch"]["verdict"] == run.UPSTREAM
    assert v["a.patch"]["evidence"] == ["reverse apply at the target"]
    assert v["b.patch"]["verdict"] == run.STOP_EVIDENCE
    assert v["b.patch"]["outcome"] == "conflict, then dropped"
    assert v["b.patch"]["detail"] == "CONFLICT in x.py"
    assert v["b.patch"]["evidence"] == ["upstream has: x.py:3"]
    assert v["c.patch"]["verdict"] == run.STOP
    assert v["c.patch"]["evidence"] == []
    assert v["d.patch"]["verdict"] == run.APPLIED


def test_a_rebase_that_did_not_finish_or_reports_another_series_gives_no_verdict() -> None:
    unfinished = run.verdicts(_rebase()[:1], NAMES)
    assert [x["verdict"] for x in unfinished] == [run.UPSTREAM, run.STOP_EVIDENCE, run.MISSING, run.MISSING]
    assert {x["verdict"] for x in run.verdicts(_rebase(), NAMES[:3])} == {run.MISSING}
    assert {x["verdict"] for x in run.verdicts([], NAMES)} == {run.MISSING}


def test_a_patch_written_without_a_hunk_is_kept_empty_not_applied(tmp_path: Path) -> None:
    envelopes = _rebase()
    envelopes[-1]["data"]["patches"][3]["commit"] = "c0ffee"
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches/d.patch").write_bytes(b"")
    assert run._written_empty(tmp_path, envelopes) == {"patches/d.patch"}
    (tmp_path / "patches/d.patch").write_bytes(b"--- a/z.py\n+++ b/z.py\n@@ -1 +1 @@\n-a\n+b\n")
    assert run._written_empty(tmp_path, envelopes) == frozenset()
    assert run._written_empty(tmp_path, envelopes[:1]) == frozenset()  # not done: nothing written yet
    v = run.verdicts(envelopes, NAMES, empty=frozenset({"patches/d.patch"}))[3]
    assert (v["verdict"], v["outcome"]) == (run.EMPTY, "applied with shifted context, written empty")
    assert run.judge("fully", run.EMPTY) == run.KEPT_EMPTY
    assert run.judge("not", run.EMPTY) == run.KEPT_EMPTY


def _dry_run(*outcomes: dict) -> dict:
    return {"exit_code": 5, "data": {"status": "dry-run", "patches": list(outcomes)}}


def test_the_dry_runs_verdicts_are_set_against_the_rebases_with_every_stop_skipped() -> None:
    up = _p("a", "already upstream", evidence=["reverse apply at the target"])
    dry = _dry_run(
        up,
        _p("b", "conflict", detail="CONFLICT in x.py", upstream_has=["x.py:3"]),
        _p("c", "applied unchanged", assumes=["b"]),  # the rebase stopped at c: a disagreement
        _p("d", "applied with shifted context", assumes=["c"]),  # as the rebase: it agrees
    )
    rows = run.agreement(run.dry_verdicts(dry, NAMES), run.verdicts(_rebase(), NAMES))
    assert [r["agree"] for r in rows] == [True, True, False, True]
    assert rows[1]["dry_run"] == rows[1]["rebase"] == f"{run.STOP_EVIDENCE} (conflict)"
    assert (rows[2]["dry_run"], rows[2]["rebase"]) == (f"{run.APPLIED} (applied unchanged)", f"{run.STOP} (conflict)")
    assert rows[3]["assumes"] == ["c"]
    # the same outcome with and without evidence is another verdict
    bare = _dry_run(up, _p("b", "conflict"), _p("c", "conflict"), _p("d", "applied with shifted context"))
    rows = run.agreement(run.dry_verdicts(bare, NAMES), run.verdicts(_rebase(), NAMES))
    assert [r["agree"] for r in rows] == [True, False, True, True]
    # so is another outcome under the same verdict: merged where the rebase applied it shifted
    merged = _dry_run(
        up, _p("b", "conflict", upstream_has=["x.py:3"]), _p("c", "conflict"), _p("d", "merged by 3-way merge")
    )
    rows = run.agreement(run.dry_verdicts(merged, NAMES), run.verdicts(_rebase(), NAMES))
    assert [r["agree"] for r in rows] == [True, True, True, False]
    assert rows[3]["dry_run"] == f"{run.APPLIED} (merged by 3-way merge)"
    # a dry run (or a rebase) that reports another series compares nothing
    rows = run.agreement(run.dry_verdicts(_dry_run(up), NAMES), run.verdicts(_rebase(), NAMES))
    assert {r["agree"] for r in rows} == {None}
    rows = run.agreement(run.dry_verdicts(dry, NAMES), run.verdicts(_rebase()[:1], NAMES))
    assert [r["agree"] for r in rows] == [True, True, None, None]
    results = [{"package": "lib", "patches": 4, "from": "1", "to": "2", "steps": [], "agreement": rows}]
    assert "| 0 | - | 0 | 2/2 |" in run.table(results)
    assert "for 2/2 patches" in run.table(results)


def test_the_table_lists_each_disagreement_with_both_verdicts() -> None:
    dry = _dry_run(
        _p("a", "already upstream"),
        _p("b", "conflict", upstream_has=["x.py:3"]),
        _p("c", "applied unchanged", assumes=["b"]),
        _p("d", "applied with shifted context"),
    )
    rows = run.agreement(run.dry_verdicts(dry, NAMES), run.verdicts(_rebase(), NAMES))
    results = [{"package": "lib", "patches": 4, "from": "1", "to": "2", "steps": [], "agreement": rows}]
    text = run.table(results)
    assert "| 3/4 |" in text
    assert "for 3/4 patches" in text
    assert (
        "- lib `c.patch`: dry run applied (applied unchanged), assumes b skipped; "
        "rebase stop, no upstream evidence (conflict)"
    ) in text
    assert "a.patch" not in text


def test_what_a_verdict_counts_as_depends_on_the_truth() -> None:
    assert run.judge("fully", run.UPSTREAM) == run.RECOGNISED
    assert run.judge("other-form", run.STOP_EVIDENCE) == run.RECOGNISED
    assert run.judge("partly", run.PARTLY) == run.RECOGNISED
    assert run.judge("fully", run.PARTLY) == run.TWICE  # the rest applied again
    assert run.judge("fully", run.APPLIED) == run.TWICE
    assert run.judge("fully", run.STOP) == run.UNRECOGNISED
    assert run.judge("partly", run.UPSTREAM) == run.WRONG_DROP  # what upstream lacks is lost
    assert run.judge("not", run.UPSTREAM) == run.WRONG_DROP
    assert run.judge("n/a", run.PARTLY) == run.WRONG_HUNKS
    assert run.judge("not", run.STOP) is None
    assert run.judge("n/a", run.APPLIED) is None
    assert run.judge("unsure", run.UPSTREAM) is None


def test_the_truth_table_counts_each_package_and_lists_what_counts_against_patchtool() -> None:
    results = [{"package": "lib", "verdicts": run.verdicts(_rebase(), NAMES)}]
    truth = {("lib", "a.patch"): "not", ("lib", "b.patch"): "fully", ("lib", "c.patch"): "fully"}
    text = run.truth_table(results, truth)  # d.patch has no truth: unsure
    assert "| fully | 0 | 0 | 1 | 1 | 0 | 0 | 0 | 0 | 2 |" in text
    assert "| not | 1 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | 1 |" in text
    assert "| unsure | 0 | 0 | 0 | 0 | 1 | 0 | 0 | 0 | 1 |" in text
    # patches, absorbed, recognised, twice, unrecognised, kept empty, wrongly dropped, wrong hunks
    assert "| lib | 4 | 2 | 1 | 0 | 1 | 0 | 1 | 0 |" in text
    assert "| all | 4 | 2 | 1 | 0 | 1 | 0 | 1 | 0 |" in text
    assert "- lib `a.patch`: truth not, wrongly dropped as upstream: already upstream; reverse-applies" in text
    assert "- lib `c.patch`: truth fully, stopped without upstream evidence" in text
    assert "b.patch" not in text.split("count against patchtool")[1]


def test_the_truth_names_each_patch_once_with_a_known_truth_and_its_evidence() -> None:
    with open(run.HERE / "truth.toml", "rb") as f:
        entries = tomllib.load(f)["patch"]
    names = {p.name for p in run.packages()}
    assert len(entries) == 91
    assert len({(e["package"], e["name"]) for e in entries}) == len(entries)
    assert {e["package"] for e in entries} == names
    assert all(e["truth"] in run.TRUTHS and e["truth"] != "unsure" and e["evidence"] for e in entries)
    assert set(run.load_truth(run.HERE / "truth.toml").values()) <= set(run.TRUTHS)


META = """{% set version = "57.4.0" %}
source:
  url: https://pypi.io/packages/source/s/setuptools/setuptools-{{ version }}.tar.gz
  patches:
    # a comment between items
    - patches/0002-disable-downloads.patch
    - patches/0010-sysconfigdata.patch  # [py<=39 and python_impl=="cpython"]
    - patches/0035-pypy-scheme.patch   # [win or py>37]

build:
  number: 0
"""


def test_a_feedstocks_series_is_its_recipes_patches_list_for_one_build() -> None:
    assert run.recipe_version(META) == "57.4.0"
    assert run.recipe_patches(META) == [
        ("patches/0002-disable-downloads.patch", None),
        ("patches/0010-sysconfigdata.patch", 'py<=39 and python_impl=="cpython"'),
        ("patches/0035-pypy-scheme.patch", "win or py>37"),
    ]
    assert [run.selected(s) for _, s in run.recipe_patches(META)] == [True, False, True]
    assert run.selected("not win and (osx or linux)")
    assert run.recipe_patches("source:\n  url: x\n") == []


def test_a_selector_the_script_cannot_read_is_an_error_not_code_run() -> None:
    for selector in ("__import__('os').system('true')", "py.bit_length()", "unknown_name"):
        with pytest.raises(ValueError, match="a selector this script does not read"):
            run.selected(selector)


def test_a_package_names_debian_or_a_feedstock_at_a_commit() -> None:
    base = {"name": "x", "from": "1", "to": "2", "scan": "1..2"}
    assert run.Package.from_dict({**base, "debian": "python-x"}).source == "python-x"
    fs = run.Package.from_dict({**base, "feedstock": "conda-forge/x-feedstock", "commit": "0123456789abcdef"})
    assert (fs.source, fs.material) == ("conda-forge/x-feedstock@0123456789", "conda-forge+x-feedstock")
    for bad in ({**base}, {**base, "debian": "d", "feedstock": "f", "commit": "c"}, {**base, "feedstock": "f"}):
        try:
            run.Package.from_dict(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
