"""0002 on a GPU: the split-K MMA sparse decode kernel compiled for the device and run.

One test per check that patchset.toml's ``[[patch.gpu_verification]]`` rows of
``sm120-mma-sparse-decode`` name in their ``run``:

- ``test_split_vs_torch_reference`` (any CUDA GPU Triton compiles bf16 MMA for; sm_90+ is
  what the project runs it on): the kernel against upstream's torch backend and a plain
  float reference, at the shipped shapes, target_ctas 0 and 512;
- ``test_split_vs_flashinfer`` (sm_120): against FlashInfer's sm_120 DSv4 decode, the
  default backend;
- ``test_launch_resources`` (sm_120): what the driver reports for the compiled kernels
  equals the offline sm_120a compile of tests/patches/test_0002_mma_sparse_decode.py;
- ``test_launch_resources_under_ncu`` (sm_120, ncu): ncu profiles those launches (the test
  above, run under it) and reports the same registers and shared memory, and the CTAs per SM
  they allow;
- ``test_kernel_time_ab`` (sm_120): kernel time at C64, target_ctas 0 vs 512, native 16 heads
  vs q padded to 64, and FlashInfer, printed (run with -s); at C80 and C96 FlashInfer alone, since
  the patch routes calls of more than SM120_DECODE_MAX_TOKENS = 64 query rows to FlashInfer: a
  server with mma selected never runs mma there;
- ``test_cuda_graph_replay`` (any CUDA GPU): the kernel captured once at decode batch 64 and
  replayed on fresh inputs equals eager, bit for bit, at target_ctas 0 and 512;
- ``test_peak_memory_at_and_above_64_rows`` (any CUDA GPU): peak memory of a call at 64 rows (the
  most mma serves), and of a direct call at 4,096 rows, which the server no longer makes: above 64
  rows it routes to FlashInfer, so that figure is what the route avoids, not a cost of serving.

``test_split_vs_torch_reference`` and ``test_split_vs_flashinfer`` still call the kernel at 96 and
128 rows directly: its numerics there, not a size a server with mma selected gives it.

The kernel module and upstream's torch backend come from the patched tree
(``patched_tree_gpu``); the references from tests/patches/dsv4_mla_reference.py.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import gpu_support
import gpu_tree
import pytest
import torch
from gpu_results_plugin import DEADLINE_ENV, STATE_ENV

from helpers import load_module

ATTN = ("python", "sglang", "kernels", "ops", "attention")
HERE = Path(__file__).resolve().parent
H = 16  # DeepSeek-V4-Flash at TP4: 16 local heads, as _kernel_num_heads now hands the kernel
TOPK = 512  # index_topk
BATCHES = (1, 8, 64, 96, 128)
DECODE_MAX_TOKENS = 64  # flash_mla_sm120.SM120_DECODE_MAX_TOKENS: above it the patch routes to FlashInfer
DEVICE = "cuda"
# tests/patches/test_0002_mma_sparse_decode.py: Triton 3.8.0's offline sm_120a compile (the Triton
# torch 2.14.1, sglang 0.5.23's pin, requires); Triton 3.9.0 compiles the partials to 248 registers.
OFFLINE = {
    "direct": dict(registers=252, spills=0, shared=36928),
    "partial": dict(registers=251, spills=0, shared=36928),
    "combine": dict(registers=40, spills=0, shared=0),
}
# ncu's figures for those launches: the offline compile's, and what sm_120 (64K registers, ~99 KB
# shared memory and 48 warps per SM) makes of them: 2 CTAs of 4 warps per SM by registers and by
# shared memory, 8 of 48 warps.
NCU_WANT = dict(
    direct_registers=OFFLINE["direct"]["registers"],
    partial_registers=OFFLINE["partial"]["registers"],
    split_dynamic_shared_b=OFFLINE["direct"]["shared"],
    block_limit_registers=2,
    block_limit_shared_mem=2,
    theoretical_occupancy_pct=16.7,
)
NCU_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def ref():
    return load_module(HERE.parent / "patches" / "dsv4_mla_reference.py", "_dsv4_mla_reference_gpu")


@pytest.fixture(scope="module")
def mma(patched_tree_gpu):
    assert os.environ.get("TRITON_INTERPRET", "0") != "1", (
        "TRITON_INTERPRET=1 is set (the CPU kernel tests set it): run tests/gpu in its own process"
    )
    return load_module(Path(patched_tree_gpu).joinpath(*ATTN, "flash_mla_sm120_mma.py"), "_mma_0002_gpu")


def make_problem(ref, batch, *, heads=H, seed=0):
    """A c4 layer at decode: a 256-token-page SWA cache and a 64-token-page c4 cache, topk 512
    each, with holes (-1) and per-request valid lengths."""
    dev = DEVICE
    gen = torch.Generator().manual_seed(seed)
    swa, swa_kv = ref.make_cache(16, 256, gen, dev)
    c4, c4_kv = ref.make_cache(64, 64, gen, dev)
    q = torch.randn(batch, 1, heads, ref.D, generator=gen).to(torch.bfloat16).to(dev)
    idx = torch.randint(0, 16 * 256, (batch, 1, TOPK), generator=gen, dtype=torch.int32)
    idx[:, :, 5::37] = -1
    tlen = torch.randint(TOPK // 4, TOPK + 1, (batch,), generator=gen, dtype=torch.int32)
    eidx = torch.randint(0, 64 * 64, (batch, 1, TOPK), generator=gen, dtype=torch.int32)
    etlen = torch.randint(1, TOPK + 1, (batch,), generator=gen, dtype=torch.int32)
    sink = torch.randn(heads, generator=gen)
    return dict(
        q=q,
        swa=swa,
        swa_kv=swa_kv,
        idx=idx.to(dev),
        tlen=tlen.to(dev),
        c4=c4,
        c4_kv=c4_kv,
        eidx=eidx.to(dev),
        etlen=etlen.to(dev),
        sink=sink.to(dev),
    )


def run_mma(mma, ref, p, target_ctas):
    return mma.flash_mla_sparse_decode_mma(
        p["q"],
        p["swa"],
        p["idx"],
        p["tlen"],
        p["sink"],
        ref.D,
        ref.SCALE,
        p["c4"],
        p["eidx"],
        p["etlen"],
        target_ctas=target_ctas,
    )


def test_split_vs_torch_reference(mma, ref, patched_tree_gpu):
    gpu_support.require_cuda()
    upstream = ref.upstream_sparse_decode_fwd(patched_tree_gpu)
    for batch in BATCHES:
        p = make_problem(ref, batch, seed=batch)
        want_out, want_lse = ref.reference(
            p["q"],
            [(p["swa_kv"], p["idx"], p["tlen"]), (p["c4_kv"], p["eidx"], p["etlen"])],
            p["sink"],
        )
        up_out, up_lse = upstream(
            p["q"], p["swa"], p["idx"], p["tlen"], p["sink"], ref.D, ref.SCALE, p["c4"], p["eidx"], p["etlen"]
        )
        outs = {}
        for target in (0, 512):
            out, lse = run_mma(mma, ref, p, target)
            torch.cuda.synchronize()
            assert out.shape == (batch, 1, H, ref.D) and lse.shape == (batch, H, 1)
            ref.assert_close(out[:, 0], lse[..., 0], want_out, want_lse)
            ref.assert_close(out[:, 0], lse[..., 0], up_out.float()[:, 0], up_lse[..., 0])
            outs[target] = out.float()
        assert (outs[0] - outs[512]).abs().max().item() <= 0.1, batch


def _flashinfer_decode(p, ref):
    """FlashInfer's sm_120 DSv4 decode through sglang's own wrapper, at the head count it
    supports: 16 if it has a 16-head kernel, else q zero-padded to 64 (as upstream pads)."""
    pytest.importorskip("flashinfer")
    sm120 = importlib.import_module("sglang.kernels.ops.attention.flash_mla_sm120")
    q, sink = p["q"], p["sink"]
    batch = q.shape[0]
    if not sm120.flashinfer_dsv4_decode_supports_num_heads(H, batch):
        q = torch.cat([q, q.new_zeros(batch, 1, 64 - H, ref.D)], dim=2)
        sink = torch.cat([sink, sink.new_zeros(64 - H)])
    out, lse = sm120._flash_mla_flashinfer(
        q,
        p["swa"],
        p["idx"],
        p["tlen"],
        sink.float(),
        ref.D,
        ref.SCALE,
        p["c4"],
        p["eidx"],
        p["etlen"],
    )
    return out[:, :, :H], lse


def test_split_vs_flashinfer(mma, ref):
    gpu_support.require_sm120()
    for batch in BATCHES:
        p = make_problem(ref, batch, seed=100 + batch)
        fi_out, _ = _flashinfer_decode(p, ref)
        for target in (0, 512):
            out, _ = run_mma(mma, ref, p, target)
            torch.cuda.synchronize()
            assert torch.isfinite(out.float()).all()
            err = (out.float() - fi_out.float()).abs().max().item()
            assert err <= 2e-2 * fi_out.float().abs().max().item() + 1e-2, (batch, target, err)


def test_launch_resources(mma, ref):
    """The launches of one c4 layer at C64 (SWA at target 0: one DIRECT split; c4 at 512:
    split partials + combine), recorded from the shipped call, then run on this device: the
    JIT compiles them for it, and the driver reports registers and spills. ncu profiles
    these launches (see patchset.toml)."""
    gpu_support.require_sm120()
    support = load_module(HERE.parent / "patches" / "triton_support.py", "_triton_support_gpu")
    p = make_problem(ref, 64, seed=64)
    with support.recorded_launches(mma, "_mma_sparse_decode_split", "_mma_sparse_decode_combine") as launches:
        mma.flash_mla_sparse_decode_mma(
            p["q"], p["swa"], p["idx"], p["tlen"], p["sink"], ref.D, ref.SCALE, target_ctas=0
        )
        run_mma(mma, ref, p, 512)
    assert [launch.grid for launch in launches] == [(64, 1, 1), (64, 1, 8), (64, 1, 8), (64, 16)]
    compiled = [launch.kernel.run(*launch.args, grid=launch.grid, warmup=False, **launch.kwargs) for launch in launches]
    torch.cuda.synchronize()
    seen = {
        key: dict(registers=kernel.n_regs, spills=kernel.n_spills, shared=kernel.metadata.shared)
        for key, kernel in zip(("direct", "partial", "partial", "combine"), compiled, strict=True)
    }
    print("driver-reported resources:", seen)
    assert seen == OFFLINE


def ncu_resources(launches):
    """Pure: the figures ncu gives for test_launch_resources' launches (DIRECT split, two c4 split
    partials, combine), named as the expectation below; ValueError when they are not those launches
    or the three split launches disagree on what they share."""
    kinds = ["combine" if "combine" in launch.kernel else "split" for launch in launches]
    if kinds != ["split", "split", "split", "combine"]:
        raise ValueError(f"ncu profiled {[launch.kernel for launch in launches]}, not 3 split launches and a combine")
    registers = [int(launch.number("Launch Statistics", "Registers Per Thread")) for launch in launches[:3]]
    if registers[1] != registers[2]:
        raise ValueError(f"the two c4 partial launches have {registers[1]} and {registers[2]} registers per thread")
    shared = {
        (
            int(launch.number("Launch Statistics", "Dynamic Shared Memory Per Block", units=("byte/block", "byte"))),
            int(launch.number("Occupancy", "Block Limit Registers")),
            int(launch.number("Occupancy", "Block Limit Shared Mem")),
            round(launch.number("Occupancy", "Theoretical Occupancy"), 1),
        )
        for launch in launches[:3]
    }
    if len(shared) != 1:
        raise ValueError(f"the split launches differ in shared memory, block limits or occupancy: {sorted(shared)}")
    ((dynamic_shared, limit_registers, limit_shared, occupancy),) = shared
    return dict(
        direct_registers=registers[0],
        partial_registers=registers[1],
        split_dynamic_shared_b=dynamic_shared,
        block_limit_registers=limit_registers,
        block_limit_shared_mem=limit_shared,
        theoretical_occupancy_pct=occupancy,
    )


def test_launch_resources_under_ncu(patched_tree_gpu, record, tmp_path):
    """test_launch_resources run under ncu (LaunchStats and Occupancy of the _mma_sparse_decode
    launches); what ncu reports is compared with the offline compile and the CTAs per SM it allows."""
    gpu_support.require_sm120()
    ncu = gpu_support.require_tool("ncu")
    report = tmp_path / "launches"
    # the profiled pytest is not one of the runner's: it must not write the runner's live state
    env = {k: v for k, v in os.environ.items() if k not in (STATE_ENV, DEADLINE_ENV)}
    env[gpu_tree.TREE_ENV] = str(patched_tree_gpu)
    profile = subprocess.run(
        [
            ncu,
            "--kernel-name",
            "regex:_mma_sparse_decode",
            "--section",
            "LaunchStats",
            "--section",
            "Occupancy",
            "--export",
            str(report),
            "--force-overwrite",
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"{Path(__file__).resolve()}::test_launch_resources",
        ],
        cwd=HERE.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=NCU_TIMEOUT_S,
        check=False,
    )
    output = (profile.stdout + profile.stderr).strip()
    if "ERR_NVGPUCTRPERM" in output:
        pytest.skip("needs ncu with access to the GPU's performance counters, not run: ERR_NVGPUCTRPERM")
    rep = report.with_suffix(".ncu-rep")
    assert rep.is_file(), f"ncu wrote no report (exit {profile.returncode}): {output[-2000:]}"
    table = subprocess.run(
        [ncu, "--import", str(rep), "--csv", "--page", "details", "--print-units", "base"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert table.returncode == 0, table.stdout[-2000:] + table.stderr[-2000:]
    seen = ncu_resources(gpu_support.ncu_launches(table.stdout))
    record(**seen)
    assert seen == NCU_WANT


def test_kernel_time_ab(mma, ref):
    """Kernel-level A/B of one c4 layer's decode attention: not the field's end-to-end
    throughput, which the PD A/B row measures. Prints ms per call."""
    gpu_support.require_sm120()
    rows = []
    for batch in (64, 80, 96):
        p = make_problem(ref, batch, seed=batch)
        if batch > DECODE_MAX_TOKENS:  # the server routes these to FlashInfer: mma never runs there
            rows.append({"batch": batch, "served_by": "flashinfer", "flashinfer": _flashinfer_ms(p, ref)})
            print(rows[-1])
            continue
        padded = dict(
            p,
            q=torch.cat([p["q"], p["q"].new_zeros(batch, 1, 64 - H, ref.D)], dim=2),
            sink=torch.cat([p["sink"], p["sink"].new_zeros(64 - H)]),
        )
        row = {"batch": batch, "served_by": "mma"}
        for target in (0, 512):
            row[f"mma_t{target}"] = gpu_support.cuda_time_ms(lambda p=p, t=target: run_mma(mma, ref, p, t))
            row[f"mma_t{target}_pad64"] = gpu_support.cuda_time_ms(lambda q=padded, t=target: run_mma(mma, ref, q, t))
        row["flashinfer"] = _flashinfer_ms(p, ref)
        rows.append(row)
        print(row)
    assert all(v is None or v > 0 for row in rows for v in row.values() if not isinstance(v, str))


def _flashinfer_ms(p, ref):
    try:
        return gpu_support.cuda_time_ms(lambda p=p: _flashinfer_decode(p, ref))
    except pytest.skip.Exception:
        return None


def test_cuda_graph_replay(mma, ref, record):
    """The mma backend under a decode CUDA graph: captured once at batch 64 (the most it serves),
    its inputs refilled with another problem of the same shapes, replayed: equal to eager."""
    gpu_support.require_cuda()
    for target in (0, 512):
        p = make_problem(ref, DECODE_MAX_TOKENS, seed=1)
        run_mma(mma, ref, p, target)  # compile outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = run_mma(mma, ref, p, target)
        fresh = make_problem(ref, DECODE_MAX_TOKENS, seed=2)
        for key, value in fresh.items():
            p[key].copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        eager = run_mma(mma, ref, p, target)
        torch.cuda.synchronize()
        for got, want in zip(captured, eager, strict=True):
            assert torch.equal(got, want), f"target_ctas {target}: graph replay differs from eager"
    record(replay_equals_eager=True, batch=DECODE_MAX_TOKENS)


def test_peak_memory_at_and_above_64_rows(mma, ref, record):
    """Peak memory a call adds, at 64 rows (the most mma serves: its fp32 split partials are 4 MiB
    by the patch's arithmetic) and, called directly, at 4,096 rows (about 256 MiB by the same
    arithmetic). Since issue 32 a server with mma selected sends more than 64 rows (prefill chunks,
    MTP verify) to FlashInfer: the 4,096-row figure is what that route avoids, never a cost of
    serving. Printed and recorded per target_ctas."""
    gpu_support.require_cuda()
    figures = {}
    for rows in (DECODE_MAX_TOKENS, 4096):
        p = make_problem(ref, rows, seed=3)
        for target in (0, 512):
            run_mma(mma, ref, p, target)  # compile first: the compile's allocations are not the call's
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            run_mma(mma, ref, p, target)
            torch.cuda.synchronize()
            figures[f"peak_extra_mib_{rows}_t{target}"] = (torch.cuda.max_memory_allocated() - base) / 2**20
    figures["above_64_rows_served_by"] = "flashinfer (SM120_DECODE_MAX_TOKENS = 64)"
    print(figures)
    record(**figures)
    assert all(v >= 0 for k, v in figures.items() if k.startswith("peak"))
