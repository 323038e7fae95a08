"""0003: DeepSeek-V4 mHC projection GEMM in bf16 (SGLANG_OPT_MHC_BF16_GEMM).

Loads the two new modules straight from the patched tree (no sglang import):
the switch, the bf16 weight cache and the torch hc_pre GEMM
(srt/models/deepseek_common/mhc_bf16.py), and the Triton GEMM + square-sum the
fused post+pre boundary uses for a bf16 fn (kernels/ops/layernorm/mhc_bf16_gemm.py,
run by the Triton CPU interpreter). The fp32 references are upstream's own code
lifted out of the patched tree with `ast` (hc_pre_torch_impl, _mhc_pre_torch).
`ast` checks prove the small hunks in upstream files are in place. The interpreter's bf16
tl.dot is mended in the test (triton_support.interpreter_bf16_dot), never in the kernel, and
the kernel is also compiled offline for sm_120a (triton_support.compile_scenario) to record
its resources.

Tolerance: the residual stream is bf16, so x is exact and the only rounding the
patch adds is the weight's, |fn_bf16 - fn| <= 2^-8 |fn| elementwise (bf16 unit
roundoff). Hence |mix_bf16 - mix_fp32| <= 2^-8 * (|x| @ |fn|^T) * rsqrt, plus the
fp32 accumulation term (bounded by 4 K 2^-24 of the same magnitude); the tests
assert that bound per element.
"""

import ast
import os
import types
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before anything below imports triton

import pytest
from triton_support import (
    compile_scenario,
    interpreter_bf16_dot,
    interpreter_stores,
    load_compilable,
    ptxas_available,
    recorded_launches,
)

from helpers import lazy, load_module

torch = lazy("torch")  # imported before the first test (tests/conftest.py), not at collection
F = lazy("torch.nn.functional")

pytestmark = pytest.mark.upstream

PKG = ("python", "sglang")
BF16_U = 2.0**-8  # bf16 unit roundoff (8-bit significand, round to nearest)
K_REAL, N_REAL = 4 * 4096, 24  # V4-Flash: hc_mult 4 x hidden 4096, (2 + 4) * 4 mixes
RMS_EPS = 1e-6


def _path(tree, *parts):
    return tree.joinpath(*PKG, *parts)


@pytest.fixture(scope="module")
def mhc_bf16(patched_tree):
    return load_module(
        _path(patched_tree, "srt", "models", "deepseek_common", "mhc_bf16.py"),
        "_mhc_bf16_0003",
    )


@pytest.fixture(scope="module")
def bf16_dots():
    """The interpreter's tl.dot, mended for bf16 operands and counted, for this module."""
    with interpreter_bf16_dot() as count:
        yield count


@pytest.fixture(scope="module")
def gemm_kernel(patched_tree, bf16_dots):
    """The kernel module, run by the CPU interpreter."""
    return load_module(
        _path(patched_tree, "kernels", "ops", "layernorm", "mhc_bf16_gemm.py"),
        "_mhc_bf16_gemm_0003",
    )


def _tree(patched_tree, *parts):
    return ast.parse(_path(patched_tree, *parts).read_text())


def _func(tree, name, cls=None):
    scope = tree
    if cls is not None:
        scope = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    for node in ast.walk(scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise AssertionError(f"{name} not found")


@pytest.fixture(scope="module")
def upstream_refs(patched_tree):
    """Upstream's fp32 hc_pre_torch_impl (nested in hc_pre) and _mhc_pre_torch."""
    v4 = _tree(patched_tree, "srt", "models", "deepseek_v4.py")
    impl = _func(_func(v4, "hc_pre", cls="DeepseekV4DecoderLayerBase"), "hc_pre_torch_impl")
    impl.decorator_list = []  # compile_in_capture_mode is a passthrough outside capture
    ns = {"torch": torch, "F": F, "self": types.SimpleNamespace(rms_norm_eps=RMS_EPS)}
    exec(compile(ast.Module([impl], []), "hc_pre_torch_impl", "exec"), ns)
    mhc = _tree(patched_tree, "kernels", "ops", "layernorm", "mhc.py")
    pre = _func(mhc, "_mhc_pre_torch")
    ns2 = {"torch": torch, "Tuple": tuple}
    exec(compile(ast.Module([pre], []), "_mhc_pre_torch", "exec"), ns2)
    return ns["hc_pre_torch_impl"], ns2["_mhc_pre_torch"]


def _inputs(tokens, hc, hidden, seed):
    g = torch.Generator().manual_seed(seed)
    k = hc * hidden
    mix = (2 + hc) * hc
    # A bf16 residual stream with an outlier channel, and fn at mixing-weight scale.
    x = torch.randn(tokens, hc, hidden, generator=g)
    x[:, :, 7] *= 30.0
    x = x.bfloat16()
    fn = torch.randn(mix, k, generator=g) * (1.0 / k**0.5)
    return x, fn


def _bound(x, fn, rsqrt):
    """Per-element bound on |mix_bf16 - mix_fp32| (weight rounding + fp32 accumulation)."""
    mag = x.flatten(1).float().abs() @ fn.abs().t()
    k = fn.shape[1]
    return (BF16_U + 4 * k * 2.0**-24) * mag * rsqrt + 1e-6


# -- the switch --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, is_cuda, invariant, from_prev, expect",
    [
        (True, True, False, False, True),
        (False, True, False, False, False),  # default off: opt-in only
        (True, False, False, False, False),  # ROCm / CPU / XPU / NPU paths never read it
        (True, True, True, False, False),  # batch-invariant mode keeps fp32
        (True, True, False, True, False),  # V4.1 same-sublayer pre-mix has its own kernels
    ],
)
def test_switch_decision(mhc_bf16, flag, is_cuda, invariant, from_prev, expect):
    got = mhc_bf16.mhc_bf16_gemm_enabled(
        flag, is_cuda=is_cuda, batch_invariant=invariant, pre_from_prev_sublayer=from_prev
    )
    assert got is expect


# -- the weight cache ----------------------------------------------------------------------


def _layer(*, pre_from_prev):
    """A decoder layer as refresh_layer_bf16_gemm_weights sees it: an nn.Module with its two fp32
    mixing weights as parameters, and whether its pre mix is V4.1's same-sublayer one."""
    _, attn = _inputs(1, 4, 64, seed=3)
    _, ffn = _inputs(1, 4, 64, seed=4)
    layer = torch.nn.Module()
    layer.hc_attn_fn = torch.nn.Parameter(attn, requires_grad=False)
    layer.hc_ffn_fn = torch.nn.Parameter(ffn, requires_grad=False)
    layer.hc_pre_from_prev_sublayer = pre_from_prev
    return layer


SWITCH_ON = dict(flag=True, on_cuda=True, batch_invariant=False)


def test_weight_cache_builds_once_and_refreshes(mhc_bf16):
    layer = _layer(pre_from_prev=False)
    param = layer.hc_attn_fn
    fn0 = param.data.clone()
    assert mhc_bf16.mhc_gemm_weight(layer, param) is param  # nothing built: fp32 as upstream

    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **SWITCH_ON) is True
    built = mhc_bf16.mhc_gemm_weight(layer, param)
    assert built.dtype == torch.bfloat16 and built.is_contiguous()
    assert torch.equal(built, fn0.bfloat16())  # round-to-nearest, bit for bit
    assert param.dtype == torch.float32 and torch.equal(param.data, fn0)  # fp32 untouched
    # Every lookup returns that one tensor: the cast happens once, not per forward.
    x_bf16 = torch.zeros(2, 256, dtype=torch.bfloat16)
    for _ in range(3):
        assert mhc_bf16.mhc_gemm_weight(layer, param) is built
        assert mhc_bf16.mhc_gemm_weight(layer, param, x_bf16) is built
    assert mhc_bf16.mhc_gemm_weight(layer, param, x_bf16.float()) is param  # fp32 activations
    # a tensor that is not one of the layer's mixing weights is returned as it is
    other = param.data.clone()
    assert mhc_bf16.mhc_gemm_weight(layer, other) is other

    # A weight update (in place, as weight loaders do) plus the layer's refresh:
    # new values, same storage, so captured CUDA graphs stay valid.
    ptr = built.data_ptr()
    fn1 = fn0 * -2.0 + 0.25
    param.data.copy_(fn1)
    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **SWITCH_ON) is True
    again = mhc_bf16.mhc_gemm_weight(layer, param)
    assert again is built and again.data_ptr() == ptr
    assert torch.equal(again, fn1.bfloat16())

    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **{**SWITCH_ON, "flag": False}) is False
    assert mhc_bf16.mhc_gemm_weight(layer, param) is param


def test_copies_live_on_the_module_not_on_the_parameter(mhc_bf16):
    """Issue 32: the copy was an attribute of the nn.Parameter. It is the layer's now, as upstream's
    _input_layernorm_weight_bf16 is: the parameters carry nothing new, the copies are plain module
    attributes (not parameters or buffers, so not in state_dict), and a parameter replaced by a
    new object takes no stale copy with it."""
    layer = _layer(pre_from_prev=False)
    before = {name: dict(vars(p)) for name, p in layer.named_parameters()}
    keys = set(layer.state_dict())
    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **SWITCH_ON) is True
    assert {name: dict(vars(p)) for name, p in layer.named_parameters()} == before
    assert set(layer.state_dict()) == keys
    for name, attr in mhc_bf16.MHC_BF16_WEIGHT_ATTRS:
        copy = vars(layer)[attr]
        assert copy.dtype == torch.bfloat16 and torch.equal(copy, getattr(layer, name).data.bfloat16())
        assert mhc_bf16.mhc_gemm_weight(layer, getattr(layer, name)) is copy
    assert mhc_bf16.mhc_bf16_gemm_bytes(layer) == 2 * layer.hc_attn_fn.numel() * 2


def test_layer_refresh_builds_both_weights(mhc_bf16):
    layer = _layer(pre_from_prev=False)
    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **SWITCH_ON) is True
    for fn in (layer.hc_attn_fn, layer.hc_ffn_fn):
        weight = mhc_bf16.mhc_gemm_weight(layer, fn)
        assert weight.dtype == torch.bfloat16 and torch.equal(weight, fn.data.bfloat16())


@pytest.mark.parametrize("off", [dict(flag=False), dict(on_cuda=False), dict(batch_invariant=True)], ids=str)
def test_layer_refresh_drops_the_copy_when_off(mhc_bf16, off):
    layer = _layer(pre_from_prev=False)
    mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **SWITCH_ON)  # a copy from an earlier load
    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **{**SWITCH_ON, **off}) is False
    for fn in (layer.hc_attn_fn, layer.hc_ffn_fn):
        assert mhc_bf16.mhc_gemm_weight(layer, fn) is fn
    assert mhc_bf16.mhc_bf16_gemm_bytes(layer) == 0


def test_layer_refresh_keeps_v41_same_sublayer_pre_mix_fp32(mhc_bf16):
    # V4.1's layers (hc_pre_from_prev_sublayer) mix through HcSubLayer's own compensated
    # kernels: with the switch on and everything else allowing it, they keep fp32 weights.
    layer = _layer(pre_from_prev=True)
    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **SWITCH_ON) is False
    for fn in (layer.hc_attn_fn, layer.hc_ffn_fn):
        assert mhc_bf16.mhc_gemm_weight(layer, fn) is fn
    assert mhc_bf16.mhc_bf16_gemm_bytes(layer) == 0


# -- the torch hc_pre GEMM ------------------------------------------------------------------


@pytest.mark.parametrize(
    "tokens, hc, hidden",
    [(1, 4, 64), (5, 4, 256), (3, 4, 4096)],  # last: the real [T, 16384] x [24, 16384]^T
)
def test_torch_hc_pre_within_bf16_bound(mhc_bf16, upstream_refs, tokens, hc, hidden):
    hc_pre_torch_impl, _ = upstream_refs
    x, fn = _inputs(tokens, hc, hidden, seed=tokens + hidden)
    x_flat_ref, mixes_ref = hc_pre_torch_impl(x, fn)

    fn_bf16 = fn.bfloat16()
    x_flat, mixes = mhc_bf16.hc_pre_mixes_bf16(x, fn_bf16, RMS_EPS)
    assert x_flat.dtype == torch.float32 and torch.equal(x_flat, x_flat_ref)
    assert mixes.shape == mixes_ref.shape == (tokens, 1, (2 + hc) * hc)
    assert mixes.dtype == torch.float32

    rsqrt = torch.rsqrt(x_flat_ref.square().mean(-1, keepdim=True) + RMS_EPS)
    err = (mixes - mixes_ref).squeeze(1).abs()
    assert torch.all(err <= _bound(x, fn, rsqrt)), err.max()
    # ... and it is the bf16-weight GEMM exactly (fp32 accumulation of exact products).
    _, mixes_exact = hc_pre_torch_impl(x, fn_bf16.float())
    torch.testing.assert_close(mixes, mixes_exact, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tokens, hidden", [(4, 256), (16, 256), (3, 4096)])
def test_downstream_mixing_stays_close(upstream_refs, tokens, hidden):
    """Upstream's whole pre step (scale + sigmoid, sinkhorn, combine) on fp32 vs
    bf16-rounded fn. With d = max |mix_bf16 - mix_fp32| (itself inside the bf16
    bound), the outputs move by no more than their Lipschitz constants times d:
    post: 2 * sigmoid' (<= 1/4) * scale[1]; comb: softmax (<= 1/2 in the inf-norm)
    * scale[2], with a factor 2 for the sinkhorn sweeps; layer_input (bf16):
    scale[0] / 4 * sum_j |x_j| plus one bf16 ulp of the output."""
    _, mhc_pre_torch = upstream_refs
    hc = 4
    x, fn = _inputs(tokens, hc, hidden, seed=99 + hidden)
    g = torch.Generator().manual_seed(7)
    hc_scale = torch.rand(3, generator=g) + 0.5
    hc_base = torch.randn((2 + hc) * hc, generator=g) * 0.5
    args = (hc_scale, hc_base, RMS_EPS, 1e-6, 1e-6, 2.0, 20)
    post_ref, comb_ref, y_ref = mhc_pre_torch(x, fn, *args)
    post, comb, y = mhc_pre_torch(x, fn.bfloat16().float(), *args)

    x_flat = x.flatten(1).float()
    rsqrt = torch.rsqrt(x_flat.square().mean(-1, keepdim=True) + RMS_EPS)
    dmix = ((x_flat @ fn.bfloat16().float().t() - x_flat @ fn.t()) * rsqrt).abs()
    assert torch.all(dmix <= _bound(x, fn, rsqrt))
    d = dmix.amax(-1)  # per token
    s0, s1, s2 = hc_scale.tolist()
    slack = 1e-6
    assert torch.all((post - post_ref).abs().amax((-2, -1)) <= 0.5 * s1 * d + slack)
    assert torch.all((comb - comb_ref).abs().amax((-2, -1)) <= s2 * d + slack)
    # One bf16 ulp (<= 2^-7 |y|) for the two outputs rounding to neighbouring values.
    y_bound = (s0 / 4) * d[:, None] * x.float().abs().sum(1) + 2.0**-7 * y_ref.float().abs()
    assert torch.all((y.float() - y_ref.float()).abs() <= y_bound + slack)
    # The perturbation is small in absolute terms too (fn at mixing-weight scale).
    assert d.max().item() < 0.02


def test_cuda_gemm_outputs_fp32(mhc_bf16):
    """The CUDA branch's GEMM, run on meta tensors (aten::mm.dtype has no CPU kernel): bf16
    operands, fp32 output. A bf16 output would round every logit a second time."""
    x = torch.empty(3, K_REAL, dtype=torch.bfloat16, device="meta")
    w = torch.empty(N_REAL, K_REAL, dtype=torch.bfloat16, device="meta")
    out = mhc_bf16.bf16_mm_fp32_out(x, w)
    assert (out.dtype, tuple(out.shape)) == (torch.float32, (3, N_REAL))


def test_cuda_branch_runs_that_gemm(patched_tree):
    mod = _tree(patched_tree, "srt", "models", "deepseek_common", "mhc_bf16.py")
    branch = next(n for n in _func(mod, "bf16_mix_gemm").body if isinstance(n, ast.If))
    assert ast.unparse(branch.test) == "x_bf16.is_cuda"
    assert [ast.unparse(s) for s in branch.body] == ["return bf16_mm_fp32_out(x_bf16, w_bf16)"]
    mm = _func(mod, "bf16_mm_fp32_out").body[-1]
    assert ast.unparse(mm) == "return torch.mm(x_bf16, w_bf16.t(), out_dtype=torch.float32)"


# -- what the switch costs in memory --------------------------------------------------------

# DeepSeek-V4-Flash (FACTS.md, "Model": 43 layers, hidden 4096; hc_mult 4 as the checkpoint's
# [24, 16384] fn). patchset.toml quotes these two figures.
BF16_COPIES_BYTES_PER_RANK = 67_633_152  # 64.5 MiB
FP32_FN_BYTES = 1_572_864  # 1.5 MiB: one fp32 fn, what upstream's GEMM reads per call


def _config_defaults(patched_tree, *names):
    cfg = _tree(patched_tree, "srt", "configs", "deepseek_v4.py")
    cls = next(n for n in cfg.body if isinstance(n, ast.ClassDef) and n.name == "DeepSeekV4Config")
    found = {
        n.target.id: ast.literal_eval(n.value)
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id in names
    }
    return [found[name] for name in names]


def test_bf16_weight_copies_cost_64_5_mib_per_rank(mhc_bf16, patched_tree):
    """Every decoder layer of a rank keeps its fp32 hc_attn_fn / hc_ffn_fn and gains a bf16 copy
    of each; fn is replicated, not TP-sharded, so each rank holds all 43 layers' copies
    (PP 1; the MTP layer's post_load_weights returns before the refresh and keeps fp32 only)."""
    layers, hidden, hc_mult = _config_defaults(patched_tree, "num_hidden_layers", "hidden_size", "hc_mult")
    assert (layers, hidden, hc_mult) == (43, 4096, 4)  # the V4-Flash figures of FACTS.md
    v4 = _tree(patched_tree, "srt", "models", "deepseek_v4.py")
    ns = {"torch": torch, "nn": torch.nn, "Tuple": tuple}
    exec(compile(ast.Module([_func(v4, "make_hc_mixing_params")], []), "make_hc_mixing_params", "exec"), ns)
    attn_fn, ffn_fn, *_ = ns["make_hc_mixing_params"](hc_mult, hidden)
    layer = torch.nn.Module()
    layer.hc_attn_fn, layer.hc_ffn_fn, layer.hc_pre_from_prev_sublayer = attn_fn, ffn_fn, False
    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, **SWITCH_ON) is True
    copies = [mhc_bf16.mhc_gemm_weight(layer, fn) for fn in (attn_fn, ffn_fn)]
    assert [tuple(c.shape) for c in copies] == [(N_REAL, K_REAL)] * 2
    per_layer = mhc_bf16.mhc_bf16_gemm_bytes(layer)
    assert per_layer == sum(c.numel() * c.element_size() for c in copies)
    assert layers * per_layer == BF16_COPIES_BYTES_PER_RANK == 64.5 * 2**20
    assert attn_fn.numel() * attn_fn.element_size() == FP32_FN_BYTES == 1.5 * 2**20

    post_load = _func(v4, "post_load_weights", cls="DeepseekV4ForCausalLM")
    src = ast.unparse(post_load)
    assert "if is_nextn:\n        return" in src
    assert "for layer_id in range(self.model.start_layer, self.model.end_layer):" in src


# -- the Triton GEMM + square-sum of the fused boundary -------------------------------------


@pytest.mark.parametrize(
    "tokens, k, n_splits",
    [
        (5, 512, 1),
        (20, 1024, 3),  # 1024 / 3 is not a multiple of the k block: ragged splits
        (33, 256, 8),  # more splits than k blocks: empty splits must write zeros
        (2, K_REAL, 64),  # real shape, the decode split count on 188 SMs
        (3, K_REAL, 62),
    ],
)
def test_triton_gemm_sqrsum(gemm_kernel, tokens, k, n_splits):
    g = torch.Generator().manual_seed(k + tokens)
    x = (torch.randn(tokens, k, generator=g) * 3).bfloat16()
    fn = torch.randn(N_REAL, k, generator=g) * (1.0 / k**0.5)
    # both inputs with NaN after them: a load past the last row's k (a dropped k mask in a
    # ragged split) reads NaN, which no masked-in product can hide
    x_buf = torch.full((2 * x.numel(),), float("nan"), dtype=torch.bfloat16)
    fn_buf = torch.full((2 * fn.numel(),), float("nan"), dtype=torch.bfloat16)
    x = x_buf[: x.numel()].view(tokens, k).copy_(x)
    fn_bf16 = fn_buf[: fn.numel()].view(N_REAL, k).copy_(fn)
    # NaN after each output, as much as it holds: a store past the last split's last row is seen
    out_buf = torch.full((2 * n_splits * tokens * N_REAL,), float("nan"))
    sq_buf = torch.full((2 * n_splits * tokens,), float("nan"))
    out = out_buf[: n_splits * tokens * N_REAL].view(n_splits, tokens, N_REAL)
    sq = sq_buf[: n_splits * tokens].view(n_splits, tokens)
    with interpreter_stores() as stores:
        gemm_kernel.mhc_pre_gemm_sqrsum_bf16(x, fn_bf16, out, sq)
    assert stores.stored_twice() == [], "a value stored twice: on a GPU, a race"
    assert not out.isnan().any() and not sq.isnan().any()
    assert out_buf[out.numel() :].isnan().all() and sq_buf[sq.numel() :].isnan().all(), "stored past an output"

    xf = x.float()
    # Against the bf16-weight GEMM it implements (fp32 accumulation: reorder only).
    torch.testing.assert_close(out.sum(0), xf @ fn_bf16.float().t(), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(sq.sum(0), xf.square().sum(-1), rtol=1e-5, atol=1e-3)
    # Against the fp32 GEMM upstream runs: inside the bf16 weight-rounding bound.
    err = (out.sum(0) - xf @ fn.t()).abs()
    bound = (BF16_U + 4 * k * 2.0**-24) * (xf.abs() @ fn.abs().t()) + 1e-4
    assert torch.all(err <= bound), err.max()


def test_triton_gemm_runs_bf16_dots(gemm_kernel, bf16_dots):
    # 5 tokens (one 16-row block), K 512 in 2 splits of 256 = 4 k-blocks of 64 each: 8 dots.
    x = torch.ones(5, 512, dtype=torch.bfloat16)
    fn = torch.ones(N_REAL, 512, dtype=torch.bfloat16)
    out, sq = torch.empty(2, 5, N_REAL), torch.empty(2, 5)
    before_calls, before_bf16 = bf16_dots.calls, bf16_dots.bf16
    gemm_kernel.mhc_pre_gemm_sqrsum_bf16(x, fn, out, sq)
    assert bf16_dots.calls - before_calls == 8 and bf16_dots.bf16 - before_bf16 == 8
    assert torch.equal(out.sum(0), torch.full((5, N_REAL), 512.0))


def test_triton_gemm_rejects_fp32_weights(gemm_kernel):
    x = torch.zeros(2, 256, dtype=torch.bfloat16)
    out, sq = torch.empty(1, 2, N_REAL), torch.empty(1, 2)
    with pytest.raises(AssertionError):
        gemm_kernel.mhc_pre_gemm_sqrsum_bf16(x, torch.zeros(N_REAL, 256), out, sq)


# -- offline compile for sm_120a (no GPU) -----------------------------------------------------

# Triton 3.8.0 / its ptxas 13.3.33 for sm_120a (Triton 3.9.0 gives the same), num_warps 4,
# default num_stages (3), at the launch's specialisation, on 188 SMs:
# "t<tokens>_m<BLOCK_M>_s<n_splits>" -> resources.
SM120_GEMM = {
    "t1_m16_s64": dict(shared=12288, registers=48, spill_stores=0, spill_loads=0),
    "t32_m32_s64": dict(shared=16384, registers=48, spill_stores=0, spill_loads=0),
    "t64_m64_s64": dict(shared=24576, registers=68, spill_stores=0, spill_loads=0),
    "t8192_m64_s1": dict(shared=24576, registers=68, spill_stores=0, spill_loads=0),
}


def sm120_launches(patched_tree):
    """Scenario for triton_support.compile_scenario: the bf16 GEMM launches mhc_fused_post_pre
    makes on a 188-SM sm_120 for decode (1, 32, 64 tokens) and an 8192-token prefill, with
    upstream's own split rule (_compute_num_split_for_mhc_pre). Meta tensors: nothing runs."""
    module = load_compilable(
        lambda: load_module(
            _path(Path(patched_tree), "kernels", "ops", "layernorm", "mhc_bf16_gemm.py"), "_mhc_0003_compile"
        )
    )
    split_rule = _func(
        _tree(Path(patched_tree), "kernels", "ops", "layernorm", "mhc.py"), "_compute_num_split_for_mhc_pre"
    )
    sm120 = types.SimpleNamespace(multi_processor_count=188)
    ns = {"torch": types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_properties=lambda _: sm120))}
    exec(compile(ast.Module([split_rule], []), "_compute_num_split_for_mhc_pre", "exec"), ns)
    launches = {}
    for tokens in (1, 32, 64, 8192):
        n_splits = ns["_compute_num_split_for_mhc_pre"](tokens, K_REAL)
        x = torch.empty(tokens, K_REAL, dtype=torch.bfloat16, device="meta")
        fn = torch.empty(N_REAL, K_REAL, dtype=torch.bfloat16, device="meta")
        out = torch.empty(n_splits, tokens, N_REAL, device="meta")
        sq = torch.empty(n_splits, tokens, device="meta")
        with recorded_launches(module, "_mhc_pre_gemm_sqrsum_bf16_kernel") as recorded:
            module.mhc_pre_gemm_sqrsum_bf16(x, fn, out, sq)
        (launch,) = recorded
        launches[f"t{tokens}_m{launch.kwargs['BLOCK_M']}_s{n_splits}"] = launch
    return launches


@pytest.fixture(scope="module")
def sm120_resources(patched_tree):
    if not ptxas_available():
        pytest.skip("no ptxas for sm_120a in this triton install")
    return compile_scenario(Path(__file__), "sm120_launches", str(patched_tree))


def test_sm120a_toolchain_is_the_one_quoted():
    """patchset.toml quotes the compile figures for Triton 3.8.0 and its ptxas V13.3.33: the
    Triton torch 2.14.1 requires (triton~=3.8.0), so the one a deployment of sglang 0.5.23's pin
    compiles its kernels with. Another toolchain's figures would be another measurement."""
    if not ptxas_available():
        pytest.skip("no ptxas for sm_120a in this triton install")
    import subprocess

    import triton
    from triton.backends.nvidia.compiler import get_ptxas

    assert triton.__version__ == "3.8.0"
    out = subprocess.run([get_ptxas(120).path, "--version"], capture_output=True, text=True, check=True).stdout
    assert "V13.3.33" in out, out


def test_sm120a_gemm_resources(sm120_resources):
    got = {name: res.figures() for name, res in sm120_resources.items()}
    assert got == SM120_GEMM
    for res in sm120_resources.values():
        assert res.mma == ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",)


# -- the hunks in upstream files -------------------------------------------------------------


def _calls(node):
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None))
    return names


PATCH_MODULES = {"sglang.srt.models.deepseek_common.mhc_bf16", "sglang.kernels.ops.layernorm.mhc_bf16_gemm"}


def _imported(node):
    """The modules an import statement loads (`from a import b`: a and a.b)."""
    if isinstance(node, ast.ImportFrom):
        return {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    return set()


@pytest.mark.parametrize(
    "parts, module",
    [
        (("srt", "models", "deepseek_v4.py"), "sglang.srt.models.deepseek_common.mhc_bf16"),
        (("srt", "models", "deepseek_v4_boundary.py"), "sglang.srt.models.deepseek_common.mhc_bf16"),
        (("kernels", "ops", "layernorm", "mhc.py"), "sglang.kernels.ops.layernorm.mhc_bf16_gemm"),
    ],
    ids=lambda v: v[-1] if isinstance(v, tuple) else "",
)
def test_new_modules_are_imported_at_module_level(patched_tree, parts, module):
    """Once, when the file loads (both new modules import only torch / triton), not on every
    forward: no function of the file imports them."""
    mod = _tree(patched_tree, *parts)
    assert any(module in _imported(n) for n in mod.body)
    for fn in ast.walk(mod):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = set().union(*(_imported(n) for n in ast.walk(fn)))
            assert not inner & PATCH_MODULES, f"{fn.name} imports {inner & PATCH_MODULES}"


def test_env_switch_default_off(patched_tree):
    text = _path(patched_tree, "srt", "environ.py").read_text()
    assert "    SGLANG_OPT_MHC_BF16_GEMM = EnvBool(False)\n" in text


def test_weight_cache_hunk(patched_tree):
    v4 = _tree(patched_tree, "srt", "models", "deepseek_v4.py")
    refresh = _func(v4, "refresh_mhc_norm_weight_cache", cls="DeepseekV4DecoderLayerBase")
    calls = [
        n
        for n in ast.walk(refresh)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "mhc_bf16.refresh_layer_bf16_gemm_weights"
    ]
    assert len(calls) == 1
    assert [ast.unparse(a) for a in calls[0].args] == ["self"]
    assert {k.arg: ast.unparse(k.value) for k in calls[0].keywords} == {
        "flag": "envs.SGLANG_OPT_MHC_BF16_GEMM.get()",
        "on_cuda": "_is_cuda and self.hc_attn_fn.is_cuda",
        "batch_invariant": "is_batch_invariant_mode_enabled()",
    }


def test_torch_path_hunk(patched_tree):
    v4 = _tree(patched_tree, "srt", "models", "deepseek_v4.py")
    hc_pre = _func(v4, "hc_pre", cls="DeepseekV4DecoderLayerBase")
    branch = next(
        n for n in ast.walk(hc_pre) if isinstance(n, ast.If) and "hc_pre_mixes_bf16" in _calls(ast.Module(n.body, []))
    )
    assert ast.unparse(branch.test) == "hc_fn_gemm.dtype == torch.bfloat16"
    assert "hc_pre_torch_impl" in _calls(ast.Module(branch.orelse, []))
    assert "hc_fn_gemm = mhc_bf16.mhc_gemm_weight(self, hc_fn, x)" in ast.unparse(hc_pre)
    # The upstream fp32 implementation is still the fallback.
    impl = _func(hc_pre, "hc_pre_torch_impl")
    assert "F.linear(x_flat, hc_fn)" in ast.unparse(impl)


def test_fused_boundary_passes_bf16_weight(patched_tree):
    """The fused post+pre boundary of a CUDA V4 layer (HcReadCall.update_and_read) hands
    apply_mhc_post_pre_boundary the layer's copy; the shared AMD/GLM wrapper is unchanged."""
    mod = _tree(patched_tree, "srt", "models", "deepseek_v4_boundary.py")
    fn = _func(mod, "update_and_read", cls="HcReadCall")
    body = ast.unparse(fn)
    resolve = "fn = mhc_bf16.mhc_gemm_weight(layer, fn)"
    assert body.index("fn, scale, base = self._parameters()") < body.index(resolve)
    assert body.index(resolve) < body.index("apply_mhc_post_pre_boundary(")
    call = next(
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "apply_mhc_post_pre_boundary"
    )
    assert ast.unparse(call.args[4]) == "fn"
    wrapper = _path(patched_tree, "srt", "models", "deepseek_common", "amd", "deepseek_v4_fused_mhc.py")
    assert "mhc_bf16" not in wrapper.read_text()


def test_fused_post_pre_accepts_bf16(patched_tree):
    mhc = _tree(patched_tree, "kernels", "ops", "layernorm", "mhc.py")
    fn = _func(mhc, "mhc_fused_post_pre")
    src = ast.unparse(fn)
    assert "assert fn.dtype in (torch.float32, torch.bfloat16)" in src
    assert "assert fn.dtype == torch.float32" not in src
    assert "fma_token_threshold = 32 if fn.dtype == torch.float32 else 0" in src
    # A bf16 fn is routed to the bf16 GEMM ahead of DeepGEMM / the fp32 TileLang GEMM.
    branch = next(
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.If) and "mhc_pre_gemm_sqrsum_bf16" in _calls(ast.Module(n.body, []))
    )
    assert ast.unparse(branch.test) == "fn.dtype == torch.bfloat16"
    assert isinstance(branch.orelse[0], ast.If)
    assert ast.unparse(branch.orelse[0].test) == "_use_deep_gemm_hc_prenorm()"
