"""0002: split-K MMA sparse MLA decode kernel for sm_120 (the "mma" backend).

Runs the new Triton kernels (split + combine) on the CPU through the Triton
interpreter and checks them against two torch references of sparse MLA decode
on the real DSv4 FP8 page layout (448 FP8 nope + 64 BF16 rope + UE8M0 scales,
584 bytes/token): a plain one written here and upstream's own "torch" backend
(``_sm120_sparse_decode_fwd``, lifted from the patched ``flash_mla_sm120.py``
with ``ast`` because that module imports sglang). Also checks the split
heuristic as a pure function and, with ``ast``, that the dispatcher and
``environ.py`` carry the patch's hunks with the safe default.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import ast
import math

import pytest
import torch
import triton  # noqa: F401  (the kernel module needs it; fail loudly if absent)

from patchtool.testing import load_module

pytestmark = pytest.mark.upstream

ATTN = ("python", "sglang", "kernels", "ops", "attention")
NOPE, ROPE, D = 448, 64, 512
BYTES_PER_TOKEN = 584
H = 16
SCALE = D ** -0.5


# -- loading ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mma(patched_tree):
    return load_module(patched_tree.joinpath(*ATTN, "flash_mla_sm120_mma.py"), "_flash_mla_sm120_mma_0002")


@pytest.fixture(scope="module")
def upstream_torch_backend(patched_tree):
    """upstream's torch backend (_gather_and_dequant + _sm120_sparse_decode_fwd)."""
    path = patched_tree.joinpath(*ATTN, "flash_mla_sm120.py")
    tree = ast.parse(path.read_text())
    wanted_fns = {"_gather_and_dequant", "_sm120_sparse_decode_fwd"}
    body = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted_fns:
            body.append(node)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in {"_NOPE_DIM", "_ROPE_DIM", "_NOPE_ROPE_STRIDE",
                                       "_TILE_SIZE", "_NUM_TILES", "_SCALE_STRIDE", "_D"}
        ):
            body.append(node)
    assert {n.name for n in body if isinstance(n, ast.FunctionDef)} == wanted_fns
    namespace = {"torch": torch, "math": math}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["_sm120_sparse_decode_fwd"]


# -- a DSv4 paged FP8 cache and a plain reference ---------------------------------------------

def make_cache(num_pages, page_size, gen):
    """A pool laid out like DeepSeekV4 SWA/extra pages, and its dequantised values.

    Returns (k_cache view [pages, page_size, 1, 584] fp8, kv [pages*page_size, 512] f32).
    """
    page_bytes = -(-page_size * BYTES_PER_TOKEN // 576) * 576  # the pool's padded page
    n = num_pages * page_size
    nope = torch.randn(n, NOPE, generator=gen).to(torch.float8_e4m3fn)
    scales = torch.randint(124, 129, (n, NOPE // 64), generator=gen, dtype=torch.uint8)
    rope = torch.randn(n, ROPE, generator=gen).to(torch.bfloat16)

    raw = torch.zeros(num_pages, page_bytes, dtype=torch.uint8)
    data = raw[:, : page_size * 576].view(num_pages, page_size, 576)
    data[..., :NOPE] = nope.view(torch.uint8).view(num_pages, page_size, NOPE)
    data[..., NOPE:] = rope.view(torch.uint8).view(num_pages, page_size, 2 * ROPE)
    scale_region = raw[:, page_size * 576 : page_size * 584].view(num_pages, page_size, 8)
    scale_region[..., :7] = scales.view(num_pages, page_size, 7)

    kv = torch.empty(n, D)
    kv[:, :NOPE] = (
        nope.float().view(n, 7, 64) * torch.exp2(scales.float() - 127.0).view(n, 7, 1)
    ).view(n, NOPE)
    kv[:, NOPE:] = rope.float()
    # the backend's view: [pages, page_size, 1, 584] over the padded page buffer
    k_cache = raw[:, : page_size * BYTES_PER_TOKEN].view(
        num_pages, page_size, 1, BYTES_PER_TOKEN
    ).view(torch.float8_e4m3fn)
    return k_cache, kv.to(torch.bfloat16).float()


def reference(q, parts, sink, scale=SCALE):
    """Sparse MLA decode in torch: gather the top-k rows, mask, softmax, weighted sum.

    parts: [(kv [N, 512], indices [B, 1, T], topk_length [B] or None), ...], one softmax.
    Returns out [B, H, 512] f32 and the natural-log LSE [B, H] of the scores (no sink).
    """
    gathered, invalid = [], []
    for kv, idx, tlen in parts:
        idx = idx.reshape(idx.shape[0], -1).long()
        bad = idx < 0
        if tlen is not None:
            bad |= torch.arange(idx.shape[1])[None, :] >= tlen.long()[:, None]
        gathered.append(kv[idx.clamp(min=0)])
        invalid.append(bad)
    g = torch.cat(gathered, dim=1)
    bad = torch.cat(invalid, dim=1)
    s = torch.einsum("bhd,btd->bht", q[:, 0].float(), g) * scale
    s = s.masked_fill(bad[:, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    denom = lse if sink is None else torch.logaddexp(lse, sink.view(1, -1))
    w = torch.exp(s - denom[..., None]).nan_to_num(0.0)
    return torch.einsum("bht,btd->bhd", w, g), lse


def assert_close(out, lse, ref_out, ref_lse):
    out = out.float()
    assert torch.isfinite(out).all()
    # bf16 P operand and bf16 output: ~2^-8 relative per term
    tol = 1.5e-2 * ref_out.abs().max().item() + 1e-2
    err = (out - ref_out).abs()
    assert err.max().item() <= tol, (err.max().item(), tol)
    assert err.mean().item() <= tol / 10, (err.mean().item(), tol)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[~finite] == float("-inf")).all()
    torch.testing.assert_close(lse[finite], ref_lse[finite], atol=2e-3, rtol=1e-4)


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
    return dict(q=q, k_cache=k_cache, kv=kv, idx=idx, tlen=tlen, extra_cache=extra_cache,
                extra_kv=extra_kv, eidx=eidx, etlen=etlen, sink=sink, B=B, T=T, ET=ET)


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
        (512, 64, 64, 512, 2),  # 64 padded heads = 4 head blocks
        (512, 1, 16, 512, 32),  # clamped to ceil(512 / 16) tiles
        (512, 1, 16, 40, 3),  # ceil(40 / 16)
        (512, 600, 16, 512, 1),  # batch alone fills the wave
        (188, 8, 20, 512, 12),  # 20 heads = 2 head blocks: ceil(188 / 16)
        (1, 4, 16, 0, 1),  # empty top-k still gets one split
    ],
)
def test_split_formula_and_clamps(mma, target, batch, heads, topk, expected):
    assert mma.mma_num_splits(target, batch, heads, topk) == expected


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
        node for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
        and getattr(node.func.value, "id", "") == "_mma_sparse_decode_split"
    ]
    assert len(launches) == 1
    kw = {k.arg: ast.unparse(k.value) for k in launches[0].keywords}
    assert kw["num_warps"] == "MMA_NUM_WARPS" and kw["num_stages"] == "MMA_NUM_STAGES"
    assert kw["BLOCK_T"] == "MMA_BLOCK_T"
    # a fixed configuration, not an autotuner (no autotuning under CUDA-graph capture)
    decorators = [
        ast.unparse(d) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
        for d in n.decorator_list
    ]
    assert decorators == ["triton.jit", "triton.jit"], decorators


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
    ref_out, ref_lse = reference(
        p["q"], [(p["kv"], p["idx"], p["tlen"])], p["sink"] if sink else None
    )
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
        p["q"], p["k_cache"], p["idx"], p["tlen"], p["sink"], D, SCALE,
        p["extra_cache"], p["eidx"], p["etlen"],
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


def test_empty_batch(mma, problem):
    p = dict(problem, q=problem["q"][:0], idx=problem["idx"][:0], tlen=problem["tlen"][:0])
    out, lse = run(mma, p, 512)
    assert out.shape == (0, 1, H, D) and lse.shape == (0, H, 1)


def test_refuses_other_cache_layouts(mma, problem):
    wrong = problem["k_cache"].view(torch.uint8)[..., :528]  # a V4.1 fp8 token width
    with pytest.raises(AssertionError, match="584 bytes/token"):
        run(mma, dict(problem, k_cache=wrong), 0)


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
        value for n in branches for value in ("flashinfer", "triton", "mma")
        if _compares_backend_to(n.test, value)
    ]
    assert order == ["flashinfer", "triton", "mma"], order
    mma_branch = next(n for n in branches if _compares_backend_to(n.test, "mma"))
    imports = [n for n in mma_branch.body if isinstance(n, ast.ImportFrom)]
    assert [(i.module, [a.name for a in i.names]) for i in imports] == [
        ("sglang.kernels.ops.attention.flash_mla_sm120_mma", ["flash_mla_sparse_decode_mma"])
    ]
    ret = mma_branch.body[-1]
    assert isinstance(ret, ast.Return) and isinstance(ret.value, ast.Call)
    assert ast.unparse(ret.value.func) == "flash_mla_sparse_decode_mma"
    assert [ast.unparse(a) for a in ret.value.args] == [
        "q", "k_cache", "indices", "topk_length", "attn_sink", "head_dim_v",
        "softmax_scale", "extra_k_cache", "extra_indices", "extra_topk_length",
    ]
    assert {k.arg: ast.unparse(k.value) for k in ret.value.keywords} == {
        "target_ctas": "_sm120_mma_target_ctas"
    }
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
