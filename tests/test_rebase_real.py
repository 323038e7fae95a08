"""`rebase` and `scan` on real sglang 0.5.20, 0.5.21, 0.5.22 and 0.5.23 from PyPI.

Two series: the test series in tests/data/rebase-real/ (five small edits of real 0.5.20 code, one
per outcome; its README says which code and why), rebased in a copy in tmp_path; and this
repository's own series, scanned back from its pin (0.5.23) to 0.5.20. Each release is downloaded
and imported at most once into the `real_cache`; `rebase --to` and `scan` still read the index.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from conftest import REPO, release_tag
from helpers import leftover_state, snapshot
from patchtool.project.pins import load_pin
from patchtool.upstream.cache import Base, Cache
from patchtool.upstream.releases import pin_for_version

pytestmark = pytest.mark.upstream

DATA = Path(__file__).resolve().parent / "data" / "rebase-real"
VERSIONS = ("0.5.20", "0.5.21", "0.5.22", "0.5.23")
WHEEL = "sglang-{}-cp311-cp311-manylinux_2_34_x86_64.whl"

RATIO, SWA, FLUSH, MARLIN, HCCL = (
    "ratio-after-empty-retract",
    "swa-prealloc-bound",
    "reset-ratio-on-flush",
    "marlin-no-capability",
    "remote-instance-hccl",
)
FILES = {
    RATIO: "patches/0001-scheduler-conservative-ratio-after-empty-retract.patch",
    SWA: "patches/0002-disaggregation-assert-swa-prealloc-bound.patch",
    FLUSH: "patches/0003-scheduler-reset-ratio-on-flush.patch",
    MARLIN: "patches/0004-marlin-no-compute-capability.patch",
    HCCL: "patches/0005-remote-instance-hccl-on-npu.patch",
}
TRACKER = "python/sglang/srt/managers/scheduler_components/new_token_ratio_tracker.py"
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
MARLIN_UTILS = "python/sglang/srt/layers/quantization/marlin_utils.py"
REMOTE = "python/sglang/srt/connector/remote_instance.py"
DECODE = "python/sglang/srt/disaggregation/decode.py"
# how far each release moved _prealloc_required_tokens (the hunk is at line 511 in 0.5.20)
SWA_OFFSET = {"0.5.21": 62, "0.5.22": 58, "0.5.23": 81}
REVERSE_DETAIL = "it applies in reverse on the target"


# -- helpers -----------------------------------------------------------------------------------


def patchtool(root: Path, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATCHTOOL_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "patchtool", *args], cwd=root, capture_output=True, text=True, env=env, check=False
    )


def envelope(res: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    try:
        return json.loads(res.stdout)  # type: ignore[no-any-return]
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (exit {res.returncode}):\n{res.stdout}\n{res.stderr}") from None


def outcomes(data: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {p["id"]: p["outcome"] for p in data["patches"]}


def upstream_git(cache: Path, *args: str) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        ["git", f"--git-dir={cache / 'upstream.git'}", *args], capture_output=True, env=env, check=True
    ).stdout


def release(cache: Path, version: str) -> str:
    """The cache's import of sglang ``version``: its tag is ``sglang-<version>-<sha12>``."""
    return release_tag(cache, "sglang", version)


def scope_of(source: str, line: int) -> str:
    """The qualified name of the innermost def or class around ``line``, read with ast."""
    found = "<module>"

    def visit(node: ast.AST, prefix: str) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if child.lineno <= line <= (child.end_lineno or child.lineno):
                    found = name
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def landed(patch: Path, cache: Path, version: str, work: Path) -> list[tuple[str, str, list[str]]]:
    """Apply ``patch`` with plain, fuzz-free `git apply` to its files taken from the release; for
    every added line: the scope it sits in, the line, and the two lines above it."""
    text = patch.read_text(encoding="utf-8")
    work.mkdir(parents=True)
    for path in re.findall(r"^\+\+\+ b/(.+)$", text, re.MULTILINE):
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(upstream_git(cache, "cat-file", "blob", f"{release(cache, version)}:{path}"))
    subprocess.run(["git", "apply", str(patch)], cwd=work, capture_output=True, check=True)
    out = []
    path, line = "", 0
    for row in text.splitlines():
        if row.startswith("diff --git "):
            path, line = "", 0
        elif row.startswith("+++ b/"):
            path = row[len("+++ b/") :]
        elif m := re.match(r"^@@ -\d+(?:,\d+)? \+(\d+)", row):
            line = int(m.group(1))
        elif path and line and row[:1] in ("+", " "):
            if row[:1] == "+":
                lines = (work / path).read_text(encoding="utf-8").splitlines()
                assert lines[line - 1] == row[1:]
                out.append(
                    (
                        scope_of("\n".join(lines), line),
                        row[1:].strip(),
                        [ln.strip() for ln in lines[line - 3 : line - 1]],
                    )
                )
            line += 1
    return out


def leave_out(root: Path, ident: str) -> None:
    """Remove one patch from the series (entry and file), as its owner would."""
    text = (root / "patchset.toml").read_text()
    head, *entries = text.split("[[patch]]\n")
    (root / "patchset.toml").write_text(
        head + "".join(f"[[patch]]\n{e}" for e in entries if f'id = "{ident}"' not in e)
    )
    (root / FILES[ident]).unlink()


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def releases(real_cache: Path) -> dict[str, Base]:
    """The four releases, imported once into the persistent test cache."""
    cache = Cache(real_cache)
    pin = load_pin(DATA, "sglang-0.5.20")
    return {v: cache.ensure(pin if v == "0.5.20" else pin_for_version(pin, Version(v), cache=cache)) for v in VERSIONS}


@pytest.fixture
def series(tmp_path: Path, releases: dict[str, Base]) -> Path:
    """A copy of the test series (patchset.toml, the 0.5.20 pin, five patches)."""
    root = tmp_path / "series"
    shutil.copytree(DATA, root, ignore=shutil.ignore_patterns("*.py", "*.md", "__pycache__"))
    return root


# -- the test series -----------------------------------------------------------------------------


def test_the_series_is_real_0_5_20_code(
    series: Path, real_cache: Path, releases: dict[str, Base], tmp_path: Path
) -> None:
    """The patches are what make_patches.py makes from the imported 0.5.20, and the facts each
    outcome rests on hold in the real releases."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_patches", DATA / "make_patches.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made = module.main(real_cache, tmp_path / "regenerated")
    assert {p.name: p.read_bytes() for p in made} == {Path(f).name: (DATA / f).read_bytes() for f in FILES.values()}

    check = envelope(patchtool(series, real_cache, "check", "--json"))
    assert check["status"] == "ok", check["errors"]
    assert [a["outcome"] for a in check["data"]["applies"]] == ["applied"] * 5
    assert (
        releases["0.5.20"].tree
        == tomllib.loads((DATA / "upstream-pins/sglang-0.5.20.toml").read_text())["artifact"]["tree"]
    )

    def blob(version: str, path: str) -> str:
        return upstream_git(real_cache, "rev-parse", f"{release(real_cache, version)}:{path}").decode().strip()

    # 0001's file never changes; 0005's post-image is upstream's file from 0.5.21 on
    assert len({blob(v, TRACKER) for v in VERSIONS}) == 1
    post = re.search(r"^index [0-9a-f]+\.\.([0-9a-f]+)", (DATA / FILES[HCCL]).read_text(), re.MULTILINE)
    assert post and all(blob(v, REMOTE) == post.group(1) for v in VERSIONS[1:])
    assert blob("0.5.20", REMOTE) != post.group(1)


@pytest.mark.parametrize("version", ["0.5.21", "0.5.22", "0.5.23"])
def test_dry_run_gives_each_real_patch_its_outcome(series: Path, real_cache: Path, version: str) -> None:
    before = snapshot(series)
    res = patchtool(series, real_cache, "rebase", "--to", version, "--dry-run", "--json")
    out = envelope(res)
    data = out["data"]
    stuck = [p for p in data["patches"] if p["outcome"] in ("conflict", "target gone")]
    assert res.returncode == (5 if stuck else 0), out["errors"]  # 5: a conflict predicted
    assert (data["status"], data["old_version"], data["new_version"]) == ("dry-run", "0.5.20", version)
    assert outcomes(data) == {
        RATIO: "applied unchanged",
        SWA: "applied with shifted context",
        FLUSH: "merged by 3-way merge",
        MARLIN: "conflict",
        HCCL: "already upstream",
    }
    steps = {p["id"]: p for p in data["patches"]}
    offset = SWA_OFFSET[version]
    assert steps[SWA]["detail"] == f"{DECODE}: hunk 1 at {511 + offset} (+{offset})"
    assert steps[SWA]["shifted"] == [
        {"file": DECODE, "hunk": 1, "old_line": 511, "new_line": 511 + offset, "offset": offset}
    ]
    assert steps[FLUSH]["detail"] == "the context changed; the 3-way merge resolved it"
    assert steps[MARLIN]["conflicted"] == [MARLIN_UTILS]
    assert steps[HCCL]["detail"] == REVERSE_DETAIL
    # the version that already carries the patch is in the report
    assert data["drop"] == [
        {
            "patch": HCCL,
            "why": f"already upstream in {version}: {REVERSE_DETAIL}",
            # both pieces of evidence hold: upstream's file is 0005's post-image from 0.5.21 on
            "evidence": [
                "it applies in reverse on the target (as `git apply -R`), every hunk at its own place",
                "applying it changes nothing: the 3-way merge leaves the target as it is",
            ],
        }
    ]
    # flush_cache's `if` line changed under the 3-way patch; the others' code did not
    assert data["drift"] == [
        {
            "patch": FLUSH,
            "path": SCHEDULER,
            "scope": "Scheduler.flush_cache",
            "change": "changed",
            "detail": "Scheduler.flush_cache changed upstream (+0 lines)",
        }
    ]
    assert data["follow_up"] == [] and data["failed_assumptions"] == []
    assert snapshot(series) == before


def test_rebase_to_0_5_21_then_0_5_23(
    series: Path, real_cache: Path, releases: dict[str, Base], tmp_path: Path
) -> None:
    """The series without its conflicting patch, moved for real: files, pin, dropped entry, check."""
    leave_out(series, MARLIN)
    old = {ident: (series / f).read_text() for ident, f in FILES.items() if ident != MARLIN}
    res = patchtool(series, real_cache, "rebase", "--to", "0.5.21", "--json", "--report", str(tmp_path / "r.md"))
    out = envelope(res)
    assert res.returncode == 0, out["errors"]
    data = out["data"]
    assert data["status"] == "done"
    assert outcomes(data) == {
        RATIO: "applied unchanged",
        SWA: "applied with shifted context",
        FLUSH: "merged by 3-way merge",
        HCCL: "already upstream",
    }
    dropped_file = "patches/dropped/0005-remote-instance-hccl-on-npu.patch"
    assert sorted(data["written"]) == sorted(
        [FILES[SWA], FILES[FLUSH], dropped_file, "patchset.toml", "upstream-pins/sglang-0.5.21.toml", f"-{FILES[HCCL]}"]
    )
    assert data["follow_up"] == []

    assert (series / FILES[RATIO]).read_text() == old[RATIO]  # unchanged: byte-identical
    assert (series / FILES[SWA]).read_text() != old[SWA]
    assert (series / dropped_file).read_text() == old[HCCL] and not (series / FILES[HCCL]).exists()
    flush = (series / FILES[FLUSH]).read_text()
    assert " if self.is_fully_idle(ignore_waiting=self._engine_paused):\n" in flush  # 0.5.21's context

    manifest = tomllib.loads((series / "patchset.toml").read_text())
    assert manifest["pin"] == "sglang-0.5.21"
    assert [p["id"] for p in manifest["patch"]] == [RATIO, SWA, FLUSH]
    (dropped,) = manifest["dropped"]
    assert {k: dropped[k] for k in ("id", "file", "upstream", "dropped_at", "reason")} == {
        "id": HCCL,
        "file": dropped_file,
        "upstream": {"status": "merged", "version": "0.5.21"},
        "dropped_at": "0.5.21",
        "reason": f"already upstream in 0.5.21: {REVERSE_DETAIL}",
    }
    pin = load_pin(series, "sglang-0.5.21")
    assert pin.artifact and pin.artifact.filename == WHEEL.format("0.5.21")
    assert pin.artifact.tree == releases["0.5.21"].tree and re.fullmatch(r"[0-9a-f]{64}", pin.artifact.sha256)
    report = (tmp_path / "r.md").read_text()
    assert f"| `{HCCL}` | already upstream |" in report and f"already upstream in 0.5.21: {REVERSE_DETAIL}" in report
    assert not leftover_state(series)

    check = envelope(patchtool(series, real_cache, "check", "--json"))
    assert check["status"] == "ok", check["errors"]
    assert check["data"]["pin"] == "sglang-0.5.21" and len(check["data"]["applies"]) == 3

    # no hunk misplaced: each added line sits in the function it was written for
    assert landed(series / FILES[SWA], real_cache, "0.5.21", tmp_path / "swa") == [
        (
            "DecodePreallocQueue._prealloc_required_tokens",
            "assert swa_len <= full_len, (swa_len, full_len)",
            [
                "def _prealloc_required_tokens(self, req: Req) -> Tuple[int, int]:",
                "full_len, swa_len = self._prealloc_kv_lens(req)",
            ],
        )
    ]
    assert landed(series / FILES[FLUSH], real_cache, "0.5.21", tmp_path / "flush") == [
        (
            "Scheduler.flush_cache",
            "self.new_token_ratio_tracker.reset()",
            ["self.cur_batch_for_debug = None", "self.last_batch = None"],
        )
    ]

    # the rebased series is a good base for the next move: flush_cache is identical in 0.5.23
    res = patchtool(series, real_cache, "rebase", "--to", "0.5.23", "--json")
    data = envelope(res)["data"]
    assert res.returncode == 0
    assert outcomes(data) == {
        RATIO: "applied unchanged",
        SWA: "applied with shifted context",
        FLUSH: "applied with shifted context",
    }
    assert [p.get("detail") for p in data["patches"]] == [
        None,
        f"{DECODE}: hunk 1 at 592 (+19)",
        f"{SCHEDULER}: hunk 1 at 5520 (+331)",
    ]
    assert [p.get("shifted") for p in data["patches"]] == [
        None,
        [{"file": DECODE, "hunk": 1, "old_line": 573, "new_line": 592, "offset": 19}],
        [{"file": SCHEDULER, "hunk": 1, "old_line": 5189, "new_line": 5520, "offset": 331}],
    ]
    assert data["drift"] == []
    check = envelope(patchtool(series, real_cache, "check", "--json"))
    assert check["status"] == "ok" and check["data"]["pin"] == "sglang-0.5.23", check["errors"]
    assert [scope for scope, _, _ in landed(series / FILES[FLUSH], real_cache, "0.5.23", tmp_path / "f23")] == [
        "Scheduler.flush_cache"
    ]


@pytest.mark.slow
def test_real_conflict_stops_abort_restores_skip_drops(series: Path, real_cache: Path) -> None:
    """The whole series: marlin's fix collides with 0.5.21's own fix of the same two lines."""
    before = snapshot(series)
    res = patchtool(series, real_cache, "rebase", "--to", "0.5.21", "--json")
    out = envelope(res)
    assert res.returncode == 3 and out["status"] == "conflict", out["errors"]
    assert outcomes(out["data"]) == {
        RATIO: "applied unchanged",
        SWA: "applied with shifted context",
        FLUSH: "merged by 3-way merge",
        MARLIN: "conflict",
        HCCL: "not reached",
    }
    conflicted = (Path(out["data"]["worktree"]) / MARLIN_UTILS).read_text()
    assert conflicted.count("<<<<<<<") == 2
    assert conflicted.count("capability = major * 10 + minor if major is not None else None") == 2  # 0.5.21
    assert conflicted.count("capability = None if major is None else major * 10 + minor") == 2  # ours
    assert patchtool(series, real_cache, "rebase", "--abort").returncode == 0
    assert snapshot(series) == before

    assert patchtool(series, real_cache, "rebase", "--to", "0.5.21").returncode == 3
    res = patchtool(series, real_cache, "rebase", "--skip", "--reason", "0.5.21 fixed it its own way", "--json")
    out = envelope(res)
    assert res.returncode == 0, out["errors"]
    assert outcomes(out["data"]) == {
        RATIO: "applied unchanged",
        SWA: "applied with shifted context",
        FLUSH: "merged by 3-way merge",
        MARLIN: "dropped",
        HCCL: "already upstream",
    }
    manifest = tomllib.loads((series / "patchset.toml").read_text())
    assert [(d["id"], d["reason"], d["upstream"]["status"]) for d in manifest["dropped"]] == [
        (MARLIN, "0.5.21 fixed it its own way", "pending"),
        (HCCL, f"already upstream in 0.5.21: {REVERSE_DETAIL}", "merged"),
    ]
    check = envelope(patchtool(series, real_cache, "check", "--json"))
    assert check["status"] == "ok", check["errors"]


def test_scan_of_the_test_series(series: Path, real_cache: Path) -> None:
    res = patchtool(series, real_cache, "scan", "--versions", "0.5.20..0.5.23", "--json")
    data = envelope(res)["data"]
    stuck = {outcome for row in data["matrix"].values() for outcome in row.values()} & {"conflict", "target gone"}
    assert res.returncode == (5 if stuck else 0), res.stderr  # 5: a conflict predicted
    assert data["versions"] == list(VERSIONS)
    later = {
        RATIO: "applied unchanged",
        SWA: "applied with shifted context",
        FLUSH: "merged by 3-way merge",
        MARLIN: "conflict",
        HCCL: "already upstream",
    }
    assert data["matrix"] == {
        ident: {"0.5.20": "applied unchanged", **dict.fromkeys(VERSIONS[1:], later[ident])} for ident in later
    }


# -- the curated series ----------------------------------------------------------------------------

S = "python/sglang/srt/"
CURATED = {
    "dsv4-bf16-indexer-keys": {
        "0.5.20": "conflict",
        "0.5.21": "conflict",
        "0.5.22": "conflict",
        "0.5.23": "applied unchanged",
    },
    "sm120-mma-sparse-decode": {
        "0.5.20": "conflict",
        "0.5.21": "applied with shifted context",
        "0.5.22": "applied with shifted context",
        "0.5.23": "applied unchanged",
    },
    "dsv4-mhc-bf16-gemm": {
        "0.5.20": "target gone",
        "0.5.21": "target gone",
        "0.5.22": "target gone",
        "0.5.23": "applied unchanged",
    },
    "pd-max-queued-requests": {
        "0.5.20": "conflict",
        "0.5.21": "merged by 3-way merge",
        "0.5.22": "applied with shifted context",
        "0.5.23": "applied unchanged",
    },
    "dsv4-refuse-tbo": {
        "0.5.20": "conflict",
        "0.5.21": "applied with shifted context",
        "0.5.22": "applied with shifted context",
        "0.5.23": "applied unchanged",
    },
}
CURATED_CONFLICTS = {
    ("dsv4-bf16-indexer-keys", "0.5.20"): {
        "python/sglang/kernels/jit/csrc/deepseek_v4/fused_norm_rope_v2.cuh",
        f"{S}arg_groups/fields/exec_.py",
        f"{S}arg_groups/serving_hook.py",
        f"{S}mem_cache/deepseek_v4_memory_pool.py",
        f"{S}arg_groups/field_order.py",
        f"{S}disaggregation/common/conn.py",
    },
    ("dsv4-bf16-indexer-keys", "0.5.21"): {
        f"{S}arg_groups/fields/exec_.py",
        f"{S}arg_groups/field_order.py",
        f"{S}disaggregation/common/conn.py",
        f"{S}mem_cache/deepseek_v4_memory_pool.py",
    },
    ("dsv4-bf16-indexer-keys", "0.5.22"): {
        f"{S}arg_groups/field_order.py",
        f"{S}disaggregation/common/conn.py",
        f"{S}mem_cache/deepseek_v4_memory_pool.py",
    },
    ("sm120-mma-sparse-decode", "0.5.20"): {f"{S}environ.py"},
    ("dsv4-mhc-bf16-gemm", "0.5.20"): {"python/sglang/kernels/ops/layernorm/mhc.py", f"{S}models/deepseek_v4.py"},
    ("pd-max-queued-requests", "0.5.20"): {f"{S}managers/scheduler.py"},
    ("dsv4-refuse-tbo", "0.5.20"): {f"{S}arg_groups/deepseek_v4_hook.py"},
}
# the files a patch changes that the release does not have (modify/delete: "target gone")
CURATED_GONE = {("dsv4-mhc-bf16-gemm", v): {f"{S}models/deepseek_v4_boundary.py"} for v in VERSIONS[:3]}


@pytest.mark.slow
def test_scan_of_the_curated_series(real_cache: Path, releases: dict[str, Base]) -> None:
    """The repository's series (pinned at 0.5.23) against 0.5.20..0.5.23, as observed in the code.

    Nothing is "already upstream" anywhere: none of the five changes is in any release. 0.5.23 is
    the pin: every patch applies unchanged there.

    0.5.20 stops every patch, each because the code next to its lines is newer than 0.5.20:
    - dsv4-bf16-indexer-keys: fused_norm_rope_v2.cuh has no KVLayout template parameter (the V4.1
      layouts came in 0.5.21), so the bf16-store static_assert the patch removes is not followed by
      the V4.1-layout one; exec_.py has no `enable_dsa_fused_indexer` field, next to which the patch
      adds `enable_deepseek_v4_bf16_indexer` (it appears in 0.5.22, which is why 0.5.21 still
      conflicts in exec_.py alone); serving_hook.py has the older DeepGEMM W_o comment (no "SM120
      API compatibility is centralized" line) the patch inserts its validation above; and
      deepseek_v4_memory_pool.py sets use_fp4_indexer straight from get_exec() (no
      `use_fp4_indexer` parameter, no index_page_size) where the patch adds use_bf16_indexer.
    - sm120-mma-sparse-decode: environ.py has no SGLANG_OPT_SM120_DIRECT_SWA_KV (new in 0.5.21),
      the line right after the SGLANG_SM120_MMA_TARGET_CTAS variable the patch adds.
    - dsv4-mhc-bf16-gemm: mhc.py still tests `envs.SGLANG_OPT_DEEPGEMM_HC_PRENORM.get()` where the
      patch turns `_use_deep_gemm_hc_prenorm()` (0.5.21 on) into an `elif`; and deepseek_v4.py's
      refresh_mhc_norm_weight_cache ends after the two norm-weight casts (no
      `is_batch_invariant_mode_enabled` import, no TF32/bf16 split parts), the import the patch's
      layer refresh call now follows. Its outcome is "target gone", as at 0.5.21 and 0.5.22: below.
    - pd-max-queued-requests: scheduler.py does not import `role_switch` or `KvChecksumComputer`
      (both from 0.5.21), the two imports the patch's new import sits between; nothing else.
    - dsv4-refuse-tbo: deepseek_v4_hook.py's hook has the long "Residual imperative arm" docstring
      (a one-liner from 0.5.21), right after which the patch adds its import.

    dsv4-bf16-indexer-keys conflicts at every earlier release in three more files: field_order.py,
    because upstream appends fields to POSITIONAL_FIELD_ORDER each release (0.5.23's last entry,
    after which the patch appends its flag, is new in 0.5.23); and conn.py and
    deepseek_v4_memory_pool.py, because the PD handshake's kv_layout check ("KV layout mismatch",
    pd_kv_layout) that the patch adds the index-K format to is new in 0.5.23.
    pd-max-queued-requests no longer touches field_order.py (issue 32: its hunk there had 0001's
    line as context; collect_input_fields places an unlisted field last), so it conflicts nowhere
    but 0.5.20's scheduler.py.

    dsv4-mhc-bf16-gemm is "target gone" at 0.5.20, 0.5.21 and 0.5.22: since issue 32 it hands the
    layer's bf16 copy to the fused post+pre call in deepseek_v4_boundary.py (HcReadCall), a module
    new in 0.5.23 (modify/delete). It no longer touches deepseek_v4_fused_mhc.py, so the conflicts
    it had there at 0.5.21 and 0.5.22 are gone; its deepseek_v4.py hunks merge there.

    0.5.21 and 0.5.22 "shifted": the code each hunk touches and its context are as at 0.5.23; only
    line numbers differ (e.g. pd-max-queued-requests' _add_request_to_queue hunk at 0.5.22, offset
    -127). pd-max-queued-requests at 0.5.21 is "merged by 3-way merge": its prefill.py hunk calls
    the refused halves' resolution at the top of PrefillBootstrapQueue.pop_bootstrapped, which
    0.5.21 still declares with the PP consensus parameters (return_failed_reqs, pp_good_rids,
    pp_bad_rids); 0.5.22 declares it as 0.5.23 does.
    """
    res = patchtool(REPO, real_cache, "scan", "--versions", "0.5.20..0.5.23", "--json")
    data = envelope(res)["data"]
    stuck = {outcome for row in data["matrix"].values() for outcome in row.values()} & {"conflict", "target gone"}
    assert res.returncode == (5 if stuck else 0), res.stderr  # 5: a conflict predicted
    assert (data["pin"], data["versions"]) == ("sglang-0.5.23", list(VERSIONS))
    stopped = [
        (ident, v, detail)
        for ident, row in data["details"].items()
        for v, detail in row.items()
        if data["matrix"][ident][v] in ("conflict", "target gone")
    ]
    conflicts = {
        (ident, v): found
        for ident, v, detail in stopped
        if (found := set(re.findall(r"Merge conflict in ([^\s;]+)", detail)))
    }
    gone = {
        (ident, v): found
        for ident, v, detail in stopped
        if (found := set(re.findall(r"CONFLICT \(modify/delete\): (\S+) deleted upstream", detail)))
    }
    wrong = {
        f"{ident} @ {v}: {data['matrix'][ident][v]} ({data['details'][ident].get(v, '')})"
        for ident, row in CURATED.items()
        for v, want in row.items()
        if data["matrix"][ident][v] != want
    }
    assert not wrong, "\n".join(sorted(wrong))
    assert data["matrix"] == CURATED
    assert conflicts == CURATED_CONFLICTS
    assert gone == CURATED_GONE
