"""What patchset.toml and the patches' commit messages claim about the curated SGLang series, held
to the field reports (FACTS.md, reports 000 and 004; issue 22's second review). A claim the review
found wrong is asserted absent, what the reports say instead present, and a figure a CPU test
computes is asserted to be the figure that test asserts."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
PATCHES = {p["id"]: p for p in tomllib.loads((REPO / "patchset.toml").read_text())["patch"]}


def flat(value: Any) -> str:
    """Every string of a patchset.toml entry, joined: where a claim may sit."""
    if isinstance(value, dict):
        return " ".join(flat(v) for v in value.values())
    if isinstance(value, list):
        return " ".join(flat(v) for v in value)
    return str(value)


def metadata(ident: str) -> str:
    return " ".join(flat(PATCHES[ident]).split())


def message(ident: str) -> str:
    """The patch file's commit message (its text before the first diff), one line."""
    text = (REPO / PATCHES[ident]["file"]).read_text()
    return " ".join(text.split("\ndiff --git ", 1)[0].split())


def test_0001_says_what_was_corrupted_and_what_was_not() -> None:
    for text in (metadata("dsv4-bf16-indexer-keys"), message("dsv4-bf16-indexer-keys")):
        assert not re.search(r"(?i)KV corruption|corrupts? (the )?KV", text)
    assert "a canary proved the index-K buffer itself pristine" in metadata("dsv4-bf16-indexer-keys")


def test_0001_quotes_30x3_only_for_the_co_restart_check() -> None:
    entry = PATCHES["dsv4-bf16-indexer-keys"]
    for row in [*entry["evidence"], *entry["knobs"]]:
        text = flat(row)
        if "30x3" in text:
            assert "belong to the PD co-restart check" in text, text
    assert "30x3" not in entry["why"] and "30x3" not in message("dsv4-bf16-indexer-keys")


def test_0001_says_what_report_000_says_against_it() -> None:
    text = metadata("dsv4-bf16-indexer-keys")
    assert "part III lists the bf16 indexer keys among the speed patches" in text
    assert "part V" in text and "requiring CUDA kernel modifications" in text
    assert "ref [30] confirms fp8 index keys in the compressor code" in text
    assert "the needle's rank was never measured" in text
    assert "the needle's rank was never measured" in message("dsv4-bf16-indexer-keys")


def test_0001_fp8_figure_is_the_one_its_test_asserts() -> None:
    """The near-tie trial count is a figure of the CPU interpreter's run, not of the field: the
    evidence row must quote what the test asserts, exactly."""
    source = (REPO / "tests" / "patches" / "test_0001_bf16_indexer_keys.py").read_text()
    trials = re.search(r"^\s+trials, haystack = (\d+), \d+$", source, re.MULTILINE)
    fp8 = re.search(r"^\s+assert fp8_top1 == (\d+)\b", source, re.MULTILINE)
    assert trials and fp8 and "assert bf16_top1 == trials" in source
    (row,) = [
        r
        for r in PATCHES["dsv4-bf16-indexer-keys"]["evidence"]
        if r["source"].endswith("::test_bf16_keys_keep_the_needle_where_fp8_keys_lose_it")
    ]
    assert row["before"].endswith(f"needle on top in {fp8.group(1)} of {trials.group(1)}"), row["before"]
    assert row["after"].endswith(f"{trials.group(1)} of {trials.group(1)}"), row["after"]
    assert f"the test asserts exactly {fp8.group(1)} and {trials.group(1)}" in row["conditions"]["data"]


def test_0002_says_what_mma_replaces_and_no_padded_splits_above_64() -> None:
    text = metadata("sm120-mma-sparse-decode")
    assert "640" not in text and "768" not in text
    # issue 32: mma serves decode sizes only; its scratch above them is stated, not budgeted
    assert "What mma replaces: only calls of at most SM120_DECODE_MAX_TOKENS = 64 query rows" in text
    assert "take FlashInfer's sm_120 path as at the default backend" in text
    assert "about 256 MiB a layer call at 4,096 tokens" in text
    assert "at C80/C96 q is never padded" in text


def test_0003_counts_its_bf16_copies() -> None:
    entry = PATCHES["dsv4-mhc-bf16-gemm"]
    assert "67,633,152 B (64.5 MiB) per rank" in entry["why"]
    assert "::test_bf16_weight_copies_cost_64_5_mib_per_rank" in entry["why"]
    (knob,) = [k for k in entry["knobs"] if k["name"] == "SGLANG_OPT_MHC_BF16_GEMM"]
    assert "64.5 MiB per rank" in knob["note"]
    # the CUDA GEMM's values are GPU-only: a row to run, not a result
    assert "its values on a GPU are the gpu_verification row test_hc_pre_torch_path, not yet run" in " ".join(
        entry["why"].split()
    )
    assert any(r["run"].endswith("test_0003_mhc.py::test_hc_pre_torch_path") for r in entry["gpu_verification"])


def test_0004_recommends_no_invented_token_cap() -> None:
    entry = PATCHES["pd-max-queued-requests"]
    for text in (metadata("pd-max-queued-requests"), message("pd-max-queued-requests")):
        assert not re.search(r"110,?000|3,437", text), "a token cap the reports never measured"
    (knob,) = [k for k in entry["knobs"] if k["name"] == "--max-queued-tokens"]
    assert not re.search(r"\d", knob["recommended"]["prefill"])
    assert "~220,000 is what piled up in the incident, field report 000, part I, not a measured limit" in knob["note"]


def test_0004_states_the_hicache_pairing_and_the_pd_behaviour_change() -> None:
    entry = PATCHES["pd-max-queued-requests"]
    (hicache,) = [k for k in entry["knobs"] if k["name"] == "--hicache-ratio"]
    assert hicache["recommended"] == {"prefill": "2.0"} and "FACTS.md patch 4" in hicache["note"]
    why = " ".join(entry["why"].split())
    assert "Counting it at decode" not in why and "as this patch did" not in why
    assert "starts getting 503s from its prefill server with this patch" in why
    assert "gets 503s from its prefill server once this patch is in" in message("pd-max-queued-requests")
    for decided in (
        "--max-queued-tokens 0 admits a request only into an empty queue",
        "no priority eviction",
        "per DP-attention rank",
    ):
        assert decided in why and decided in message("pd-max-queued-requests"), decided


def test_0005_scope_is_every_v4_launch_and_it_fixes_nothing_the_field_hit() -> None:
    entry = PATCHES["dsv4-refuse-tbo"]
    assert entry["scope"]["hardware"][0].startswith("any (the guard runs on every platform")
    why = " ".join(entry["why"].split())
    assert "It fixes nothing the field hit: in the field's topology upstream already refuses the flag" in why


@pytest.mark.parametrize("ident", list(PATCHES))
def test_nothing_gpu_only_is_claimed_verified(ident: str) -> None:
    """No evidence row rests on a GPU check: tests/gpu has not run on this series."""
    for row in PATCHES[ident].get("evidence", []):
        assert "tests/gpu" not in row["source"], row
        assert not re.search(r"(?i)\bverified\b", flat(row)), row


# -- issue 32, the third review: claims held to the reports --------------------------------------


def test_registry_says_bf16_keys_did_not_fully_resolve_the_longest_contexts() -> None:
    registry = tomllib.loads((REPO / "retread.toml").read_text())
    text = " ".join(flat(registry).split())
    assert "the fix was bf16 index keys" not in text
    assert "did not fully resolve the issue at the longest contexts" in text


def test_0003_is_an_experiment_and_its_cause_a_diagnosis() -> None:
    entry = PATCHES["dsv4-mhc-bf16-gemm"]
    assert entry.get("experiment"), "0003 has no performance figure: its entry marks it an experiment"
    why = " ".join(entry["why"].split())
    assert why.startswith("An experiment, not a measured improvement")
    assert "carries the code with SGLANG_OPT_MHC_BF16_GEMM off" in why
    for text in (metadata("dsv4-mhc-bf16-gemm"), message("dsv4-mhc-bf16-gemm")):
        assert not re.search(r"(?i)(cause|bug) was (the )?fp8 index keys", text), text
    assert "the reports' diagnosis, not a measurement" in message("dsv4-mhc-bf16-gemm")
    assert "not on the nn.Parameter" in message("dsv4-mhc-bf16-gemm")


def test_0002_quotes_no_field_figure_in_code_and_names_its_baseline() -> None:
    text = message("sm120-mma-sparse-decode")
    assert "cannot fill the GPU" not in text
    assert "The default backend is FlashInfer's" in text
    assert "this kernel has not run on sm_120 at all" in text
    why = metadata("sm120-mma-sparse-decode")
    assert "this kernel has not run on any sm_120 GPU" in why


def test_0004_labels_its_derivations_and_the_two_statuses() -> None:
    why = " ".join(PATCHES["pd-max-queued-requests"]["why"].split())
    for text in (why, message("pd-max-queued-requests")):
        assert "A request cap alone would not have stopped that queue" not in text
        assert "the prompts averaged ~11,000 tokens" not in text
        assert "Derivation, not a field observation" in text
    assert "503 from prefill, 500 from decode" in why
    assert "has not been observed" in why
    assert "non-default decode allocation policy or with optimistic prefill" in why
    assert "The token cap counts whole prompts" in why


def test_0001_limits_and_capacity_are_stated() -> None:
    why = " ".join(PATCHES["dsv4-bf16-indexer-keys"]["why"].split())
    assert "sm_120 CUDA GPUs only" in why and "refused with DeepSeek-V4.1 and with --enable-hisparse" in why
    assert "KV capacity, by arithmetic (no report measures it)" in why
    assert "+651 B per token of context on each rank" in why
    assert "What it costs in KV capacity, by arithmetic (no report measures it)" in message("dsv4-bf16-indexer-keys")


# -- issue 32: the pull request's description (`export --pr`) quotes the manifest, sources kept ---


def pull_request_text(ident: str) -> tuple[str, list[dict[str, Any]]]:
    """``export --pr ident``'s PULL_REQUEST.md, and the entries it carries (itself last)."""
    from patchtool.edit.pullrequest import description
    from patchtool.project.repository import Project
    from patchtool.series.standalone import required_closure

    project = Project.load(REPO)
    carried = required_closure(project.manifest, ident)
    by_id = {lp.id: lp for lp in project.series()}
    text = description([project.manifest.get(i) for i in carried], [by_id[i] for i in carried], project.pin())
    return text, [PATCHES[i] for i in carried]


@pytest.mark.parametrize("ident", [i for i, p in PATCHES.items() if "experiment" not in p])
def test_pull_request_description_quotes_each_figure_with_its_source(ident: str) -> None:
    text, entries = pull_request_text(ident)
    flat_text = " ".join(text.split())
    for entry in entries:
        for row in entry.get("evidence", []):
            said = " ".join(f"{row['metric']}: {'; '.join(str(v) for v in _values(row))}".split())
            assert f"- {said} " in flat_text + " ", said
            # the figures, then their conditions, then their source: nothing between them
            source = " ".join(f"Source: {row['source']}".split())
            after = flat_text.split(f"- {said}", 1)[1]
            assert after.lstrip().removeprefix(_conditions(row)).lstrip().startswith(source), (said, source)
    # every figure in the description is one the manifest (or a carried patch's subject) states
    known = " ".join(metadata(e["id"]) for e in entries) + " " + " ".join(message(e["id"]) for e in entries)
    for figure in set(re.findall(r"\d[\d,.]*\d|\d", flat_text)):
        assert figure in known, f"{figure} is in the description of {ident} but in no entry it carries"
    # the claims the reviews found wrong stay out of it
    assert not re.search(r"(?i)KV corruption|corrupts? (the )?KV|110,?000|3,437|cannot fill the GPU", flat_text)
    assert "30x3" not in flat_text or "belong to the PD co-restart check" in flat_text


def _values(row: dict[str, Any]) -> list[str]:
    values = " -> ".join(str(row[k]) for k in ("before", "after") if k in row)
    return [v for v in (values, row.get("change")) if v]


def _conditions(row: dict[str, Any]) -> str:
    if not row.get("conditions"):
        return ""
    return " ".join(("(" + "; ".join(f"{k}: {v}" for k, v in row["conditions"].items()) + ")").split())
