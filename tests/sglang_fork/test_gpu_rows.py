"""The GPU rows issue 32 asked for, on a machine without a GPU: each collects, and each is recorded
as not run with the reason it needs (a CUDA GPU, or sm_120 for the rows that only sm_120 shows),
never as failed; and what the rows decide without a GPU (what to install, which concurrencies the
mma kernel serves) is right."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from test_gpu_runner import GPU, _env, by_name, results, run_gpu

sys.path.insert(0, str(GPU))

NEW_ROWS = {
    "test_0001_bf16_indexer.py": ("test_indexer_layer_end_to_end_flag_on", "test_multi_stream_race_reproducer"),
    "test_0002_mma.py": ("test_cuda_graph_replay", "test_peak_memory_at_and_above_64_rows"),
    "test_0003_mhc.py": ("test_cuda_graph_replay_after_weight_refresh",),
    "test_0004_pd_pair.py": ("test_refusal_status_a_client_receives", "test_refusal_through_the_router"),
}
SM120_ROWS = ("test_kernel_time_ab", "test_split_vs_flashinfer")


@pytest.mark.upstream
def test_without_a_gpu_the_new_rows_are_not_run_by_name(tmp_path: Path, patched_tree: Path) -> None:
    out = tmp_path / "results.json"
    files = [str(GPU / name) for name in NEW_ROWS]
    res = run_gpu("--out", str(out), "--tree", str(patched_tree), *files, env=_env())
    assert res.returncode == 0, res.stdout + res.stderr
    data = results(out)
    assert data["errors"] == [] and data["summary"]["fail"] == 0, data["summary"]
    rows = by_name(data)
    for name, checks in NEW_ROWS.items():
        for check in checks:
            row = rows[check]
            assert row["file"] == f"tests/gpu/{name}", row
            assert row["outcome"] == "not-run" and row["reason"].startswith("needs a CUDA GPU, not run: "), row
            assert row["patch"] is not None, row  # tied to its patch by the file's number
    for check in SM120_ROWS:  # the rows only sm_120 shows say so, not merely "no GPU"
        assert rows[check]["reason"].startswith("needs sm_120, not run: "), rows[check]
    for row in data["checks"]:
        assert row["outcome"] == "not-run" and re.match(r"needs [^:]+, not run", row["reason"]), row


def test_a_pd_pair_row_names_what_to_install() -> None:
    import test_0004_pd_pair as pair

    assert pair.missing_modules({"json": "stdlib", "patchtool_no_such_module": "no-such-package"}) == [
        "no-such-package"
    ]
    with pytest.raises(pytest.skip.Exception, match=r"^needs no-such-package, not run: install it"):
        pair.require_modules({"patchtool_no_such_module": "no-such-package"})
    assert pair.BACKENDS["mooncake"] == ("mooncake", "mooncake-transfer-engine")


def test_the_pd_throughput_row_compares_only_what_mma_serves() -> None:
    """Since issue 32 decode batches above 64 rows run FlashInfer: C80 and C96 are no mma figure."""
    import test_0002_deploy as deploy

    assert deploy.DECODE_MAX_TOKENS == 64 and deploy.MMA_SERVED == (64,)
