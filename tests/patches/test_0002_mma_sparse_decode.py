"""0002: split-K MMA sparse MLA decode kernel for sm_120 (the "mma" backend).

Runs the new Triton kernels (split + combine) on the CPU through the Triton
interpreter and checks them against two torch references of sparse MLA decode
on the real DSv4 FP8 page layout (448 FP8 nope + 64 BF16 rope + UE8M0 scales,
584 bytes/token): a plain one written here and upstream's own "torch" backend
(``_sm120_sparse_decode_fwd``, lifted from the patched ``flash_mla_sm120.py``
with ``ast`` because that module imports sglang). The kernel runs as shipped,
bf16 MMA operands included; the interpreter's broken bf16 ``tl.dot`` is mended
in the test (``triton_support.interpreter_bf16_dot``), which also counts the
bf16 dots so a test proves that path ran. Also compiles the kernels offline for
sm_120a (no GPU) and records their shared memory, registers and spills; checks
the split heuristic as a pure function, ``_kernel_num_heads`` (the model's q
width for this backend) by running it, and, with ``ast``, that the dispatcher
and ``environ.py`` carry the patch's hunks with the safe default.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import ast
import tomllib
import types
from pathlib import Path

import pytest
from dsv4_mla_reference import (
    SCALE,
    D,
    assert_close,
    make_cache,
    reference,
    upstream_sparse_decode_fwd,
)
from triton_support import (
    GuardedTorch,
    compile_scenario,
    interpreter_bf16_dot,
    interpreter_stores,
    load_compilable,
    ptxas_available,
    recorded_launches,
)

from helpers import lazy, load_module

torch = lazy("torch")  # imported before the first test (tests/conftest.py), not at collection
triton = lazy("triton")  # the kernel module needs it

pytestmark = pytest.mark.upstream

ATTN = ("python", "sglang", "kernels", "ops", "attention")
H = 16  # DeepSeek-V4-Flash at TP4: 16 local heads


# -- loading ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_dots():
    """The interpreter's tl.dot, mended for bf16 operands and counted, for this module."""
    with interpreter_bf16_dot() as count:
        yield count


@pytest.fixture(scope="module")
def mma(patched_tree, bf16_dots):
    return load_module(patched_tree.joinpath(*ATTN, "flash_mla_sm120_mma.py"), "_flash_mla_sm120_mma_0002")


@pytest.fixture(scope="module")
def upstream_torch_backend(patched_tree):
    """upstream's torch backend (_gather_and_dequant + _sm120_sparse_decode_fwd)."""
    return upstream_sparse_decode_fwd(patched_tree)


@pytest.fixture(scope="module")
def problem():
    """batch 2, 16 heads, topk 64, a 256-token-page SWA cache and a 64-token-page extra cache."""
    gen = torch.Generator().manual_seed(2)
    k_cache, kv = make_cache(2, 256, gen)
    extra_cache, extra_kv = make_cache(4, 64, gen)
    B, T, ET = 2, 64, 48
    q = torch.randn(B, 1, H, D, generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, 512, (B, 1, T), generator=gen, dtype=torch.int32)
    idx[0, 0, [3, 17, 40]] = -1  # holes
    idx[1, 0, 45:] = -1  # a sequence shorter than topk ...
    tlen = torch.tensor([T, 37], dtype=torch.int32)  # ... cut shorter still by its length
    eidx = torch.randint(0, 256, (B, 1, ET), generator=gen, dtype=torch.int32)
    eidx[0, 0, 30:] = -1
    etlen = torch.tensor([20, ET], dtype=torch.int32)
    sink = torch.randn(H, generator=gen)
    return dict(
        q=q,
        k_cache=k_cache,
        kv=kv,
        idx=idx,
        tlen=tlen,
        extra_cache=extra_cache,
        extra_kv=extra_kv,
        eidx=eidx,
        etlen=etlen,
        sink=sink,
        B=B,
        T=T,
        ET=ET,
    )


def run(mma, p, target_ctas, *, sink=True, extra=False, q=None):
    return mma.flash_mla_sparse_decode_mma(
        p["q"] if q is None else q,
        p["k_cache"],
        p["idx"],
        p["tlen"],
        p["sink"] if sink else None,
        D,
        SCALE,
        p["extra_cache"] if extra else None,
        p["eidx"] if extra else None,
        p["etlen"] if extra else None,
        target_ctas=target_ctas,
    )


def targets_for(p, head_blocks=1):
    """target_ctas values giving 1, 2 and the maximum number of splits (topk/BLOCK_T)."""
    base = p["B"] * head_blocks
    return {1: 0, 2: 2 * base, p["T"] // 16: 10**6}


# -- the split heuristic ----------------------------------------------------------------------


def test_default_and_unset_mean_one_split(mma):
    for target in (0, None):
        for batch in (1, 4, 64, 96):
            assert mma.mma_num_splits(target, batch, 16, 512) == 1
    assert mma.flash_mla_sparse_decode_mma.__defaults__[-1] == 0


@pytest.mark.parametrize(
    "target, batch, heads, topk, expected",
    [
        (512, 64, 16, 512, 8),  # ceil(512 / (64 * 1))
        (512, 96, 16, 512, 6),  # ceil(512 / 96)
        (512, 80, 16, 512, 7),
        (512, 64, 64, 512, 2),  # q padded to 64 heads (upstream, before this patch): 4 head blocks
        (512, 1, 16, 512, 32),  # clamped to ceil(512 / 16) tiles
        (512, 1, 16, 40, 3),  # ceil(40 / 16)
        (512, 600, 16, 512, 1),  # batch alone fills the wave
        (188, 8, 20, 512, 12),  # 20 heads = 2 head blocks: ceil(188 / 16)
        (1, 4, 16, 0, 1),  # empty top-k still gets one split
    ],
)
def test_split_formula_and_clamps(mma, target, batch, heads, topk, expected):
    assert mma.mma_num_splits(target, batch, heads, topk) == expected


def test_wave_fill_ctas_at_the_fields_concurrencies(mma):
    """patchset.toml quotes what 512 launches with native heads at TP4 (one head block): 8, 7 and 6
    splits, 512, 560 and 576 CTAs at C64, C80 and C96; with q padded to 64 heads, 2 splits at C64."""
    splits = {c: mma.mma_num_splits(512, c, 16, 512) for c in (64, 80, 96)}
    assert splits == {64: 8, 80: 7, 96: 6}
    assert {c: n * c for c, n in splits.items()} == {64: 512, 80: 560, 96: 576}
    assert mma.mma_num_splits(512, 64, 64, 512) * 64 * 4 == 512  # 2 splits x 4 head blocks


def test_negative_target_is_refused(mma):
    with pytest.raises(ValueError, match="SGLANG_SM120_MMA_TARGET_CTAS"):
        mma.mma_num_splits(-1, 4, 16, 512)


def test_measured_launch_configuration(mma):
    # BLOCK_T16 / num_warps 4 / num_stages 2 is the measured sm_120 optimum;
    # num_warps 8 and num_stages 3 were worse everywhere.
    assert (mma.MMA_BLOCK_T, mma.MMA_NUM_WARPS, mma.MMA_NUM_STAGES) == (16, 4, 2)
    assert mma.MMA_BLOCK_H == 16
    tree = ast.parse(open(mma.__file__).read())
    launches = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Subscript)
        and getattr(node.func.value, "id", "") == "_mma_sparse_decode_split"
    ]
    assert len(launches) == 1
    kw = {k.arg: ast.unparse(k.value) for k in launches[0].keywords}
    assert kw["num_warps"] == "MMA_NUM_WARPS" and kw["num_stages"] == "MMA_NUM_STAGES"
    assert kw["BLOCK_T"] == "MMA_BLOCK_T"
    # a fixed configuration, not an autotuner (no autotuning under CUDA-graph capture)
    decorators = [ast.unparse(d) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for d in n.decorator_list]
    assert decorators == ["triton.jit", "triton.jit"], decorators


# -- the kernel as shipped: bf16 MMA operands, no interpreter branch ---------------------------


def test_production_module_has_no_interpreter_branch(mma):
    source = Path(mma.__file__).read_text()
    assert "TRITON_INTERPRET" not in source and "os.environ" not in source
    tree = ast.parse(source)
    split = _function(tree, "_mma_sparse_decode_split")
    assert "OP_DTYPE" not in {a.arg for a in split.args.args}


def test_every_mma_runs_on_bf16_operands(mma, problem, bf16_dots):
    # The interpreter runs the programs one by one: request 0 has 64 valid slots (4 tiles of
    # 16), request 1 is cut to 37 by its topk_length (3 tiles); each tile does 4 dots (QK nope
    # and rope, PV nope and rope). Every one must have bf16 operands, as the GPU MMA reads.
    before_calls, before_bf16 = bf16_dots.calls, bf16_dots.bf16
    run(mma, problem, 0)
    assert bf16_dots.calls - before_calls == 4 * (4 + 3)
    assert bf16_dots.bf16 - before_bf16 == 4 * (4 + 3)


# -- numerical agreement ------------------------------------------------------------------------


@pytest.mark.parametrize("splits", [1, 2, 4])
@pytest.mark.parametrize("sink", [False, True])
def test_split_and_combine_match_reference(mma, problem, splits, sink):
    p = problem
    target = targets_for(p)[splits]
    launch = mma._Launch(p["k_cache"], p["idx"], p["tlen"], p["B"], H, target)
    assert launch.num_splits == splits
    out, lse = run(mma, p, target, sink=sink)
    assert out.shape == (p["B"], 1, H, D) and out.dtype == torch.bfloat16
    assert lse.shape == (p["B"], H, 1) and lse.dtype == torch.float32
    ref_out, ref_lse = reference(p["q"], [(p["kv"], p["idx"], p["tlen"])], p["sink"] if sink else None)
    assert_close(out[:, 0], lse[..., 0], ref_out, ref_lse)


@pytest.mark.parametrize("splits", [1, 2, 4])
def test_extra_cache_merges_as_more_splits(mma, problem, splits):
    p = problem
    out, lse = run(mma, p, targets_for(p)[splits], extra=True)
    ref_out, ref_lse = reference(
        p["q"],
        [(p["kv"], p["idx"], p["tlen"]), (p["extra_kv"], p["eidx"], p["etlen"])],
        p["sink"],
    )
    assert_close(out[:, 0], lse[..., 0], ref_out, ref_lse)


def test_split_counts_agree_with_each_other(mma, problem):
    outs = [run(mma, problem, t, extra=True)[0].float() for t in targets_for(problem).values()]
    for other in outs[1:]:
        assert (other - outs[0]).abs().max().item() <= 0.1


@pytest.mark.parametrize("splits", [1, 4])
def test_matches_upstream_torch_backend(mma, problem, upstream_torch_backend, splits):
    p = problem
    ref_out, ref_lse = upstream_torch_backend(
        p["q"],
        p["k_cache"],
        p["idx"],
        p["tlen"],
        p["sink"],
        D,
        SCALE,
        p["extra_cache"],
        p["eidx"],
        p["etlen"],
    )
    # the plain reference and upstream's torch backend agree on this input
    mine, _ = reference(
        p["q"],
        [(p["kv"], p["idx"], p["tlen"]), (p["extra_kv"], p["eidx"], p["etlen"])],
        p["sink"],
    )
    assert (ref_out.float()[:, 0] - mine).abs().max().item() <= 0.1
    out, lse = run(mma, p, targets_for(p)[splits], extra=True)
    assert out.shape == ref_out.shape and lse.shape == ref_lse.shape
    assert_close(out[:, 0], lse[..., 0], ref_out.float()[:, 0], ref_lse[..., 0])


@pytest.mark.parametrize("target", [0, 10**6])
def test_request_without_valid_tokens_gives_zeros(mma, problem, target):
    p = dict(problem)
    p["idx"] = problem["idx"].clone()
    p["idx"][1] = -1
    out, lse = run(mma, p, target, sink=True)
    assert torch.count_nonzero(out[1]) == 0
    assert (lse[1] == float("-inf")).all()
    ref_out, ref_lse = reference(p["q"], [(p["kv"], p["idx"], p["tlen"])], p["sink"])
    assert_close(out[:, 0], lse[..., 0], ref_out, ref_lse)


@pytest.mark.parametrize("target", [0, 10**6])
def test_partial_head_block(mma, problem, target):
    # 20 heads: a second, partly masked 16-head block.
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(problem["B"], 1, 20, D, generator=gen).to(torch.bfloat16)
    sink = torch.randn(20, generator=gen)
    p = dict(problem, sink=sink)
    out, lse = run(mma, p, target, q=q)
    assert out.shape == (problem["B"], 1, 20, D)
    ref_out, ref_lse = reference(q, [(p["kv"], p["idx"], p["tlen"])], sink)
    assert_close(out[:, 0], lse[..., 0], ref_out, ref_lse)


@pytest.mark.parametrize("head_dim_v", [400, 480])  # inside the nope part, inside the rope part
@pytest.mark.parametrize("target, extra", [(0, False), (10**6, False), (0, True)], ids=["direct", "splits", "extra"])
def test_stores_stay_inside_their_rows(mma, problem, monkeypatch, head_dim_v, target, extra):
    """Each store site's masks, run: 20 heads (a second, partly masked head block) and a
    head_dim_v under 512, through the direct store (one split), the partial stores and the
    combine (four splits), and two launches' partials (the extra cache). out, lse and the
    partial buffers are allocated with NaN after them, so a store past its tensor is seen
    (the last head's row is the last in memory); no byte is stored twice in a launch (on a GPU
    the later store is a race); and out must be the reference's first head_dim_v values."""
    p = problem
    gen = torch.Generator().manual_seed(13)
    q = torch.randn(p["B"], 1, 20, D, generator=gen).to(torch.bfloat16)
    sink = torch.randn(20, generator=gen)
    guarded = GuardedTorch()
    monkeypatch.setattr(mma, "torch", guarded)
    with interpreter_stores() as stores:
        out, lse = mma.flash_mla_sparse_decode_mma(
            q,
            p["k_cache"],
            p["idx"],
            p["tlen"],
            sink,
            head_dim_v,
            SCALE,
            p["extra_cache"] if extra else None,
            p["eidx"] if extra else None,
            p["etlen"] if extra else None,
            target_ctas=target,
        )
    assert len(stores.launches) == (1 if (target, extra) == (0, False) else 2 + extra)
    assert stores.stored_twice() == [], "(launch, bytes) stored more than once in one launch"
    assert len(guarded.tails) == (2 if (target, extra) == (0, False) else 4)
    assert guarded.stored_past() == 0, f"{guarded.stored_past()} values stored past a buffer"
    assert out.shape == (p["B"], 1, 20, head_dim_v)
    parts = [(p["kv"], p["idx"], p["tlen"])]
    if extra:
        parts.append((p["extra_kv"], p["eidx"], p["etlen"]))
    ref_out, ref_lse = reference(q, parts, sink)
    assert_close(out[:, 0], lse[..., 0], ref_out[..., :head_dim_v], ref_lse)


def test_strided_indices_and_topk_length_give_the_contiguous_result(mma, problem):
    """The kernel reads indices[b, t] at b * stride + t and topk_length[b] at b: strided views
    (every other column of wider tensors, whose gaps hold other valid values) must be made unit
    stride first, or the kernel attends to the gaps' tokens and lengths."""
    p = problem
    gen = torch.Generator().manual_seed(11)
    wide_idx = torch.randint(0, 512, (p["B"], 1, 2 * p["T"]), generator=gen, dtype=torch.int32)
    wide_idx[..., ::2] = p["idx"]
    wide_len = torch.stack([p["tlen"], torch.full_like(p["tlen"], 5)], dim=1)
    idx, tlen = wide_idx[..., ::2], wide_len[:, 0]
    assert idx.stride(-1) == 2 and tlen.stride(-1) == 2
    for target in (0, 10**6):
        out, lse = run(mma, dict(p, idx=idx, tlen=tlen), target)
        ref_out, ref_lse = run(mma, p, target)
        assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse), target


def test_empty_batch(mma, problem):
    p = dict(problem, q=problem["q"][:0], idx=problem["idx"][:0], tlen=problem["tlen"][:0])
    out, lse = run(mma, p, 512)
    assert out.shape == (0, 1, H, D) and lse.shape == (0, H, 1)


def test_refuses_other_cache_layouts(mma, problem):
    wrong = problem["k_cache"].view(torch.uint8)[..., :528]  # a V4.1 fp8 token width
    with pytest.raises(AssertionError, match="584 bytes/token"):
        run(mma, dict(problem, k_cache=wrong), 0)


# -- offline compile for sm_120a (no GPU) ---------------------------------------------------------

# Triton 3.8.0 (torch 2.14.1's, the Triton sglang 0.5.23's pin deploys) / its ptxas 13.3.33 for
# sm_120a, num_warps 4 / num_stages 2, at the launch's specialisation (the toolchain:
# tests/patches/test_0003_mhc_bf16_gemm.py::test_sm120a_toolchain_is_the_one_quoted). Triton 3.9.0
# gave 248 registers for the partials and 200 / 208 B of unaligned spills, with either ptxas:
# the PTX differs, not the assembler (docs/tests.md). patchset.toml quotes these; the GPU check
# tests/gpu/test_0002_mma.py::test_launch_resources compares them with what the driver reports.
SM120_SPLIT_DIRECT = dict(shared=36928, registers=252, spill_stores=0, spill_loads=0)
SM120_SPLIT_PARTIAL = dict(shared=36928, registers=251, spill_stores=0, spill_loads=0)
SM120_COMBINE = dict(shared=0, registers=40, spill_stores=0, spill_loads=0)
# ... and with the page size in bytes not divisible by 16 (no vectorised fp8 gather).
SM120_SPLIT_UNALIGNED_PAGE = dict(shared=34880, registers=255, spill_stores=192, spill_loads=200)
BF16_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"


def shipped_launches(patched_tree):
    """The launches the shipped call makes at C64 on TP4 (16 native heads, topk 512), recorded
    on the CPU: a SWA layer (256-token pages, target 0: one split, DIRECT) and a c4 layer with
    the extra cache (64-token pages, target 512: split partials + combine). Caches are laid out
    as the DeepSeekV4 pool pads them (page bytes a multiple of 576)."""
    module = load_compilable(
        lambda: load_module(Path(patched_tree).joinpath(*ATTN, "flash_mla_sm120_mma.py"), "_mma_0002_compile")
    )
    gen = torch.Generator().manual_seed(0)
    swa, _ = make_cache(2, 256, gen)
    c4, _ = make_cache(2, 64, gen)
    B, topk = 64, 512
    q = torch.zeros(B, 1, H, D, dtype=torch.bfloat16)
    idx = torch.zeros(B, 1, topk, dtype=torch.int32)
    tlen = torch.full((B,), topk, dtype=torch.int32)
    sink = torch.zeros(H)
    with recorded_launches(module, "_mma_sparse_decode_split", "_mma_sparse_decode_combine") as launches:
        module.flash_mla_sparse_decode_mma(q, swa, idx, tlen, sink, D, SCALE, target_ctas=0)
        module.flash_mla_sparse_decode_mma(q, swa, idx, tlen, sink, D, SCALE, c4, idx, tlen, target_ctas=512)
    return launches


def sm120_launches(patched_tree):
    """Scenario for triton_support.compile_scenario: the launches to compile, by name."""
    direct, partial, _, combine = shipped_launches(patched_tree)
    assert direct.kwargs["DIRECT"] and not partial.kwargs["DIRECT"]
    # The same DIRECT launch with a page size in bytes that is not a multiple of 16.
    unaligned = direct.with_arg("page_bytes", direct.arg("page_bytes") + 1)
    return {"direct": direct, "partial": partial, "combine": combine, "unaligned_page": unaligned}


@pytest.fixture(scope="module")
def sm120_resources(patched_tree):
    if not ptxas_available():
        pytest.skip("no ptxas for sm_120a in this triton install")
    return compile_scenario(Path(__file__), "sm120_launches", str(patched_tree))


def test_shipped_launch_grids(patched_tree):
    # 16 native heads = one head block; 512 / 64 requests = 8 splits per cache at C64.
    launches = shipped_launches(patched_tree)
    assert [launch.grid for launch in launches] == [(64, 1, 1), (64, 1, 8), (64, 1, 8), (64, 16)]
    assert [launch.kernel.__name__ for launch in launches] == ["_mma_sparse_decode_split"] * 3 + [
        "_mma_sparse_decode_combine"
    ]
    assert all(launch.kwargs["num_warps"] == 4 for launch in launches)
    assert all(launch.kwargs["num_stages"] == 2 for launch in launches[:3])
    # the pool's padded pages: a multiple of 576 bytes, so the JIT marks them divisible by 16
    assert all(launch.arg("page_bytes") % 576 == 0 for launch in launches[:3])


def test_sm120a_resources_at_the_shipped_configuration(sm120_resources):
    assert sm120_resources["direct"].figures() == SM120_SPLIT_DIRECT
    assert sm120_resources["partial"].figures() == SM120_SPLIT_PARTIAL
    assert sm120_resources["combine"].figures() == SM120_COMBINE
    # Two CTAs per SM, by FACTS.md's 65536 registers and ~99 KB shared memory per SM:
    # registers are allocated per warp in units of 256 (8 per thread), and every CTA
    # reserves 1 KB of shared memory for the system.
    for key in ("direct", "partial"):
        res = sm120_resources[key]
        regs_per_cta = -(-res.registers // 8) * 8 * 32 * 4
        assert 65536 // regs_per_cta == 2
        assert (99 * 1024) // (res.shared + 1024) == 2


def test_sm120a_split_uses_bf16_tensor_core_mma(sm120_resources):
    for key in ("direct", "partial"):
        assert sm120_resources[key].mma == (BF16_MMA,)
    assert sm120_resources["combine"].mma == ()


def test_sm120a_unaligned_page_bytes_spill(sm120_resources):
    # The figures depend on the JIT's divisibility specialisation of page_bytes: without it
    # the fp8 gather is not vectorised and ptxas spills.
    assert sm120_resources["unaligned_page"].figures() == SM120_SPLIT_UNALIGNED_PAGE


def test_metadata_quotes_the_measured_resources():
    manifest = tomllib.loads((Path(__file__).resolve().parents[2] / "patchset.toml").read_text())
    entry = next(p for p in manifest["patch"] if p["id"] == "sm120-mma-sparse-decode")
    ncu = next(v for v in entry["gpu_verification"] if "ncu" in v["run"])
    for text in (entry["why"], ncu["expect"]):
        assert f"{SM120_SPLIT_DIRECT['shared']:,} B" in text
        assert f"{SM120_SPLIT_DIRECT['registers']} registers" in text


# -- the model's q width for this backend ----------------------------------------------------------


@pytest.fixture(scope="module")
def kernel_num_heads(patched_tree):
    """MqaAttentionBase._kernel_num_heads from the patched deepseek_v4.py, run with stand-ins
    for the platform and the env (the flashinfer branch imports sglang and is not run)."""
    path = patched_tree.joinpath("python", "sglang", "srt", "models", "deepseek_v4.py")
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MqaAttentionBase")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_kernel_num_heads")

    def call(backend, *, n_local_heads=16, attn_tp_size=4, num_tokens=64, sm120=True):
        namespace = {
            "get_platform": lambda: types.SimpleNamespace(is_sm120=sm120),
            "SM120_DECODE_MAX_TOKENS": 64,
            "envs": types.SimpleNamespace(SGLANG_SM120_FLASHMLA_BACKEND=types.SimpleNamespace(get=lambda: backend)),
        }
        exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
        layer = types.SimpleNamespace(n_local_heads=n_local_heads, attn_tp_size=attn_tp_size, n_heads=64)
        return namespace["_kernel_num_heads"](layer, num_tokens)

    return call


def test_mma_decode_gets_native_heads(kernel_num_heads):
    # TP4: 16 local heads, one head block; no 64-head padding on decode.
    for tokens in (1, 8, 64):
        assert kernel_num_heads("mma", num_tokens=tokens) == 16
    assert kernel_num_heads("mma", n_local_heads=32, attn_tp_size=2) == 32  # TP2: two blocks
    assert kernel_num_heads("mma", num_tokens=65) == 16  # prefill, as upstream


def test_other_backends_keep_upstream_padding(kernel_num_heads):
    for backend in ("triton", "torch"):
        assert kernel_num_heads(backend) == 64
        assert kernel_num_heads(backend, num_tokens=65) == 16
    assert kernel_num_heads("mma", attn_tp_size=1, n_local_heads=64) == 64
    assert kernel_num_heads("triton", sm120=False) == 64


# -- the hunks in upstream files ------------------------------------------------------------------


def _function(tree, name):
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, name
    return found[0]


def _compares_backend_to(node, value):
    return (
        isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Name)
        and node.left.id == "_sm120_default_backend"
        and len(node.comparators) == 1
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value == value
    )


def test_dispatcher_has_mma_branch(patched_tree):
    path = patched_tree.joinpath(*ATTN, "flash_mla_sm120.py")
    tree = ast.parse(path.read_text())

    module_assigns = {
        n.targets[0].id: ast.unparse(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
    }
    assert module_assigns["_sm120_mma_target_ctas"] == "envs.SGLANG_SM120_MMA_TARGET_CTAS.get()"

    fn = _function(tree, "flash_mla_with_kvcache_sm120")
    branches = [n for n in fn.body if isinstance(n, ast.If)]
    order = [
        value
        for n in branches
        for value in ("flashinfer", "triton", "mma")
        if any(_compares_backend_to(c, value) for c in ast.walk(n.test))
    ]
    # the first branch also takes mma above decode sizes (test_mma_serves_decode_sizes_only)
    assert order == ["flashinfer", "mma", "triton", "mma"], order
    mma_branch = next(n for n in branches if _compares_backend_to(n.test, "mma"))
    imports = [n for n in mma_branch.body if isinstance(n, ast.ImportFrom)]
    assert [(i.module, [a.name for a in i.names]) for i in imports] == [
        ("sglang.kernels.ops.attention.flash_mla_sm120_mma", ["flash_mla_sparse_decode_mma"])
    ]
    ret = mma_branch.body[-1]
    assert isinstance(ret, ast.Return) and isinstance(ret.value, ast.Call)
    assert ast.unparse(ret.value.func) == "flash_mla_sparse_decode_mma"
    assert [ast.unparse(a) for a in ret.value.args] == [
        "q",
        "k_cache",
        "indices",
        "topk_length",
        "attn_sink",
        "head_dim_v",
        "softmax_scale",
        "extra_k_cache",
        "extra_indices",
        "extra_topk_length",
    ]
    assert {k.arg: ast.unparse(k.value) for k in ret.value.keywords} == {"target_ctas": "_sm120_mma_target_ctas"}
    # the torch fallback still comes last
    assert isinstance(fn.body[-1], ast.Return)


def test_environ_declares_safe_default(patched_tree):
    path = patched_tree.joinpath("python", "sglang", "srt", "environ.py")
    text = path.read_text()
    tree = ast.parse(text)
    fields = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for i, stmt in enumerate(cls.body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                fields[stmt.targets[0].id] = (cls.name, i, ast.unparse(stmt.value))
    cls, pos, value = fields["SGLANG_SM120_MMA_TARGET_CTAS"]
    assert value == "EnvInt(0)"  # 0 = no split-K wave fill: 512 hung long-context decode
    backend_cls, backend_pos, backend_value = fields["SGLANG_SM120_FLASHMLA_BACKEND"]
    assert backend_value == "EnvStr('flashinfer')"  # the default backend is unchanged
    assert (cls, pos) == (backend_cls, backend_pos + 1)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "SGLANG_SM120_FLASHMLA_BACKEND =" in line)
    assert '"mma"' in lines[at - 1] or '"mma"' in lines[at - 2]
    assert text.count("SGLANG_SM120_MMA_TARGET_CTAS") == 1


# -- issue 32: decode sizes only, and the CTA target checked at start-up ---------------------------


def _run_dispatcher(patched_tree, backend, num_tokens):
    """Upstream's flash_mla_with_kvcache_sm120 as patched, run with its kernels replaced by
    markers: which path a call of ``num_tokens`` query rows takes."""
    import builtins

    path = patched_tree.joinpath(*ATTN, "flash_mla_sm120.py")
    fn = _function(ast.parse(path.read_text()), "flash_mla_with_kvcache_sm120")
    real_import = builtins.__import__

    def marker(name):
        return lambda *args, **kwargs: name

    def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "sglang.kernels.ops.attention.flash_mla_sm120_mma":
            return types.SimpleNamespace(flash_mla_sparse_decode_mma=marker("mma"))
        if name == "sglang.kernels.ops.attention.flash_mla_sm120_triton":
            return types.SimpleNamespace(flash_mla_sparse_decode_triton=lambda *a: ("triton", None))
        return real_import(name, globals, locals, fromlist, level)

    namespace = {
        "__builtins__": {**vars(builtins), "__import__": recording_import},
        "_sm120_default_backend": backend,
        "_sm120_mma_target_ctas": 0,
        "SM120_DECODE_MAX_TOKENS": 64,
        "_flash_mla_sm120_prefill": marker("flashinfer prefill"),
        "_flash_mla_flashinfer": marker("flashinfer decode"),
        "_sm120_sparse_decode_fwd": lambda *a: ("torch", None),
    }
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    q = types.SimpleNamespace(shape=(num_tokens, 1, 16, 512))
    return namespace["flash_mla_with_kvcache_sm120"](q=q, k_cache=None, indices=None, head_dim_v=512)


def test_mma_serves_decode_sizes_only(patched_tree):
    """Issue 32: above 64 query rows (prefill chunks, MTP verify) the mma kernel would allocate fp32
    split partials of tokens x heads x splits x 2 KiB outside the memory budget (about 256 MiB a
    layer call at 4,096 tokens). Those calls take FlashInfer's sm_120 path, the default backend's
    path at those sizes; decode sizes run the mma kernel."""
    for tokens in (1, 32, 64):
        assert _run_dispatcher(patched_tree, "mma", tokens) == "mma"
    for tokens in (65, 4096):
        assert _run_dispatcher(patched_tree, "mma", tokens) == "flashinfer prefill"
    # the other backends as upstream has them
    assert _run_dispatcher(patched_tree, "flashinfer", 64) == "flashinfer decode"
    assert _run_dispatcher(patched_tree, "flashinfer", 65) == "flashinfer prefill"
    assert _run_dispatcher(patched_tree, "triton", 4096)[0] == "triton"


def test_mma_scratch_above_decode_sizes_is_what_the_review_quotes(mma):
    """The figure the test above quotes, from flash_mla_sparse_decode_mma's mid_out (fp32 [tokens,
    heads, splits, 512]): at the default target (0, one split a launch) a layer with the extra
    compressed cache launches twice, 2 splits; 4,096 tokens x 16 heads (TP4) is 256 MiB. At the 64
    decode rows it is 4 MiB."""
    splits = mma.mma_num_splits(0, 4096, 16, 512) + mma.mma_num_splits(0, 4096, 16, 512)
    assert splits == 2
    assert 4096 * 16 * splits * mma._D * 4 == 256 * 2**20
    assert 64 * 16 * splits * mma._D * 4 == 4 * 2**20


def _model_hook(patched_tree):
    path = patched_tree.joinpath("python", "sglang", "srt", "arg_groups", "model_hook.py")
    return path, ast.parse(path.read_text())


@pytest.mark.parametrize("value, refused", [(-1, True), (-512, True), (0, False), (512, False)])
def test_target_ctas_checked_at_start_up(patched_tree, value, refused):
    """Issue 32: a negative SGLANG_SM120_MMA_TARGET_CTAS used to be refused only at the first
    attention call, in warm-up or capture; the start-up hook refuses it."""
    path, tree = _model_hook(patched_tree)
    fn = _function(tree, "validate_sm120_mma_target_ctas")
    env = types.SimpleNamespace(get=lambda: value)
    namespace = {"envs": types.SimpleNamespace(SGLANG_SM120_MMA_TARGET_CTAS=env)}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    if refused:
        with pytest.raises(ValueError, match=f"SGLANG_SM120_MMA_TARGET_CTAS must be >= 0.*got {value}"):
            namespace["validate_sm120_mma_target_ctas"]()
    else:
        namespace["validate_sm120_mma_target_ctas"]()


def test_target_ctas_check_runs_for_deepseek_v4_on_sm120_with_mma(patched_tree):
    _, tree = _model_hook(patched_tree)
    hook = _function(tree, "handle_model_specific_adjustments")
    guarded = [
        n
        for n in ast.walk(hook)
        if isinstance(n, ast.If)
        and ast.unparse(n.test) == "envs.SGLANG_SM120_FLASHMLA_BACKEND.get() == 'mma'"
        and [ast.unparse(s) for s in n.body] == ["validate_sm120_mma_target_ctas()"]
    ]
    assert len(guarded) == 1
    sm120 = [n for n in ast.walk(hook) if isinstance(n, ast.If) and ast.unparse(n.test) == "get_platform().is_sm120"]
    assert any(guarded[0] in list(ast.walk(block)) for block in sm120)
