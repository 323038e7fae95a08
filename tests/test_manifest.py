"""Pure parsing of patchset.toml: dicts and text in, data or exact errors out."""

from __future__ import annotations

import copy
import functools
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from patchtool.errors import InvalidInput, Problem
from patchtool.paths import MAX_INPUT_BYTES
from patchtool.project.manifest import Manifest, Status, key_line, parse_text
from patchtool.registry import entries

REPO = Path(__file__).resolve().parent.parent

ENTRY: dict[str, Any] = {
    "id": "queue-cap",
    "file": "patches/0004-queue-cap.patch",
    "kind": "reliability",
    "why": "unbounded PD queue",
    "owner": "serving",
    "applies_to": ">=0.5.23,<0.5.24",
    "drop_when": "upstream honours the flag",
    "upstream": {"status": "pending"},
    "evidence": [
        {
            "metric": "pending tokens at saturation",
            "before": 220000,
            "after": "bounded",
            "conditions": {"hardware": "sm_120"},
            "source": "field report 000",
        }
    ],
    "knobs": [
        {
            "name": "--max-queued-requests",
            "type": "flag",
            "relation": "needs",
            "recommended": {"prefill": "32", "decode": "32"},
        }
    ],
    "assumptions": [
        {
            "id": "abort-only-null",
            "file": "python/sglang/srt/managers/scheduler.py",
            "regex": "_abort_on_queued_limit",
            "min_count": 1,
            "why": "the patch calls it",
        }
    ],
}


def manifest(*entries: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"schema": 1, "pin": "sglang-0.5.23", "patch": list(entries), **top}


def errors(data: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        Manifest.from_dict(data)
    return [p.render() for p in exc.value.problems]


def test_valid_entry_parses_to_data() -> None:
    m = Manifest.from_dict(manifest(ENTRY))
    p = m.patches[0]
    assert p.upstream.status is Status.PENDING
    assert p.evidence[0].before == 220000
    assert p.knobs[0].recommended == {"prefill": "32", "decode": "32"}
    assert "0.5.23" in p.applies_to and "0.5.24" not in p.applies_to
    assert p.assumptions[0].min_count == 1


def test_dotted_key_names_the_bad_upstream_status() -> None:
    bad = copy.deepcopy(ENTRY)
    bad["upstream"] = {"status": "merge"}
    others = [ENTRY | {"id": f"p{i}", "file": f"patches/{i}.patch"} for i in range(3)]
    assert errors(manifest(*others, bad)) == [
        "patchset.toml: patch queue-cap: patch[3].upstream.status: unknown value 'merge'; expected one "
        "of pending, submitted, backport, inappropriate, denied, merged"
    ]


@pytest.mark.parametrize(
    ("upstream", "message"),
    [
        ({"status": "submitted"}, "patch[0].upstream.url: status 'submitted' needs 'url'"),
        ({"status": "backport"}, "patch[0].upstream.ref: status 'backport' needs 'ref'"),
        ({"status": "inappropriate"}, "patch[0].upstream.reason: status 'inappropriate' needs 'reason'"),
        ({"status": "merged"}, "patch[0].upstream.version: status 'merged' needs 'version'"),
        ({"status": "merged", "version": "soon"}, "patch[0].upstream.version: 'soon' is not a PEP 440 version"),
        ({"status": "submitted", "url": "github #1"}, "patch[0].upstream.url: 'github #1' is not an http(s) URL"),
        ({"status": "pending", "extra": 1}, "patch[0].upstream.extra: unknown key"),
    ],
)
def test_upstream_status_vocabulary_is_validated(upstream: dict[str, Any], message: str) -> None:
    assert any(message in e for e in errors(manifest(ENTRY | {"upstream": upstream})))


def test_good_statuses() -> None:
    for up in (
        {"status": "submitted", "url": "https://github.com/sgl-project/sglang/pull/1"},
        {"status": "backport", "ref": "abc123"},
        {"status": "denied"},
        {"status": "inappropriate", "reason": "fork-only knob"},
        {"status": "merged", "version": "0.5.24"},
    ):
        assert Manifest.from_dict(manifest(ENTRY | {"upstream": up})).patches[0].upstream.status == up["status"]


def test_missing_and_unknown_keys_are_all_reported_at_once() -> None:
    bad = {k: v for k, v in ENTRY.items() if k not in ("why", "owner")} | {"colour": "red"}
    found = errors(manifest(bad, registry=3))
    assert "patchset.toml: patch queue-cap: patch[0].why: missing required key" in found
    assert "patchset.toml: patch queue-cap: patch[0].owner: missing required key" in found
    assert any("patch[0].colour: unknown key" in e for e in found)
    assert "patchset.toml: registry: unexpected type integer (expected string)" in found


def test_wrong_types_name_expected_type() -> None:
    found = errors(manifest(ENTRY | {"kind": 3, "applies_to": "0.5.23 or later"}))
    assert "patchset.toml: patch queue-cap: patch[0].kind: unexpected type integer (expected string)" in found
    assert any("patch[0].applies_to: '0.5.23 or later' is not a PEP 440 version specifier" in e for e in found)


def test_same_patch_listed_twice() -> None:
    found = errors(manifest(ENTRY, ENTRY))
    assert any("patch[1].id: duplicate patch id 'queue-cap' (also patch[0])" in e for e in found)
    assert any("patch[1].file: patches/0004-queue-cap.patch is listed twice (also patch[0])" in e for e in found)


@pytest.mark.parametrize(
    "path",
    ["../x.patch", "/etc/x.patch", "patches/../../x.patch", "patches/.git/x.patch", "other/x.patch", "patches/x.diff"],
)
def test_patch_file_must_stay_under_patches(path: str) -> None:
    assert any("patch[0].file" in e for e in errors(manifest(ENTRY | {"file": path})))


def test_assumption_and_knob_validation() -> None:
    bad = copy.deepcopy(ENTRY)
    bad["assumptions"] = [
        {"id": "x", "file": "a.py", "regex": "(", "why": "w"},
        {"id": "x", "file": "a.py", "count": 1, "why": "w"},
    ]
    bad["knobs"] = [{"name": "max-queued", "type": "flag", "relation": "needs", "recommended": {}}]
    found = errors(manifest(bad))
    assert any("patch[0].assumptions[0].regex: invalid regular expression '('" in e for e in found)
    assert any("patch[0].assumptions[1].regex: a count needs a 'regex' to count" in e for e in found)
    assert any("patch[0].knobs[0].name: a server flag starts with '--'" in e for e in found)


def test_evidence_needs_numbers() -> None:
    bad = ENTRY | {"evidence": [{"metric": "throughput", "source": "report"}]}
    assert any("patch[0].evidence[0]: evidence needs a measured value" in e for e in errors(manifest(bad)))


def test_malformed_toml_names_the_line() -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_text('schema = 1\npin = "x"\n[[patch]\n')
    (problem,) = exc.value.problems
    assert problem.line == 3
    assert problem.render().startswith("patchset.toml:3: not valid TOML")


def test_schema_errors_carry_line_numbers() -> None:
    text = 'schema = 1\npin = "p"\n\n[[patch]]\nid = "a"\n\n[[patch]]\nid = "b"\nkind = "nope"\n'
    with pytest.raises(InvalidInput) as exc:
        parse_text(text)
    kinds = [p for p in exc.value.problems if p.key == "patch[1].kind"]
    assert kinds[0].line == 9


def test_key_line_finds_inline_and_nested_keys() -> None:
    text = '[[patch]]\nid = "a"\nupstream = { status = "x" }\n[[patch]]\nid = "b"\n[patch.upstream]\nstatus = "y"\n'
    assert key_line(text, "patch[0].upstream.status") == 3
    assert key_line(text, "patch[1].upstream.status") == 7
    assert key_line(text, "patch[1].id") == 5


def test_key_line_counts_lines_as_toml_does() -> None:
    """A U+2028 or U+0085 inside a string ends no line (``str.splitlines`` said it did)."""
    text = '[[patch]]\nwhy = "a\u2028b\x85c"\nid = "a"\n'
    assert tomllib.loads(text)["patch"][0]["id"] == "a"
    assert key_line(text, "patch[0].id") == 3


def _lines_run(call: Callable[[], object]) -> int:
    """How many lines of Python ``call`` runs: a measure of its work that is the same on every
    run, whatever the machine's load."""
    count = 0

    def trace(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += event == "line"
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count


@pytest.mark.parametrize("parse", [parse_text, lambda text: entries.parse_text(text, file="registry.toml")])
def test_naming_the_line_of_every_problem_is_linear_in_the_file(parse: Callable[[str], object]) -> None:
    """A small file with many problems: each problem's line is looked up in one index of the
    file, not by reading the file again (4,000 unknown tables took 26 s, 6,000 took 97 s)."""

    def problems(n: int) -> list[Problem]:
        with pytest.raises(InvalidInput) as exc:
            parse("".join(f"[t{i}]\n" for i in range(n)))
        return exc.value.problems

    lines = {p.key: p.line for p in problems(300)}
    assert (lines["t0"], lines["t7"], lines["t299"]) == (1, 8, 300)
    work = [_lines_run(functools.partial(problems, n)) for n in (400, 800)]
    assert work[1] < 2.5 * work[0], f"twice the tables took {work[1] / work[0]:.1f} times the work: not linear"


def test_real_manifest_round_trips() -> None:
    text = (REPO / "patchset.toml").read_text()
    m = parse_text(text)
    assert Manifest.from_dict(m.to_dict()) == m
    assert m.pin == "sglang-0.5.23" and m.patches
    assert tomllib.loads(text)["patch"][0]["id"] == m.patches[0].id


def test_evidence_values_are_numbers_or_strings() -> None:
    bad = ENTRY | {"evidence": [{"metric": "m", "source": "s", "before": True, "after": 1.5}]}
    assert any("patch[0].evidence[0].before: expected a number or a string" in e for e in errors(manifest(bad)))


def test_names_that_become_paths_are_checked_types_where_the_manifest_is_read() -> None:
    from patchtool.names import PatchId, RepoPath

    m = Manifest.from_dict(manifest(ENTRY))
    entry = m.patches[0]
    assert type(entry.id) is PatchId and type(entry.file) is RepoPath
    with pytest.raises(ValueError, match="escapes the tree"):
        RepoPath("patches/../../x.patch")
    with pytest.raises(ValueError, match="is not a valid id"):
        PatchId("--upload-pack=x")


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("min_count", 2**70, f"must be at most {MAX_INPUT_BYTES + 1}, got {2**70}"),
        ("count", MAX_INPUT_BYTES + 2, f"must be at most {MAX_INPUT_BYTES + 1}, got {MAX_INPUT_BYTES + 2}"),
        ("schema", 10**30, f"must be at most 1000, got {10**30}"),
        ("evidence", 2**63, f"must be between -{2**63 - 1} and {2**63 - 1} (what TOML holds), got {2**63}"),
    ],
)
def test_every_number_has_a_maximum(where: str, value: int, message: str) -> None:
    entry = copy.deepcopy(ENTRY)
    top: dict[str, Any] = {}
    if where == "schema":
        top["schema"] = value
    elif where == "evidence":
        entry["evidence"][0]["before"] = value
    else:
        entry["assumptions"][0].pop("min_count")
        entry["assumptions"][0][where] = value
    assert any(e.endswith(message) for e in errors(manifest(entry, **top))), errors(manifest(entry, **top))
