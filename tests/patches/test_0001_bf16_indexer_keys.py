"""0001: DeepSeek-V4 DSA indexer keys in bf16 (--enable-deepseek-v4-bf16-indexer).

Loads the new module srt/layers/attention/dsv4/bf16_indexer.py by path (torch
only) and checks its byte layout, its validation and its paged scorer against a
float64 reference; shows on fixed-seed data that bf16 keys keep a needle on top
of near-tied keys where fp8 e4m3 keys (per-token fp32 scale, as the fused kernel
stores them) lose it; compiles the bf16 store variant of fused_norm_rope_v2.cuh
with nvcc for sm_120; and checks with ast that every upstream hunk is in place.
"""

import ast
import re
import subprocess

import pytest
import torch
import tvm_ffi.libinfo

from patchtool.testing import load_module, require_tool

pytestmark = pytest.mark.upstream

SGLANG = ("python", "sglang")
DSV4 = (*SGLANG, "srt", "layers", "attention", "dsv4")
HEAD_DIM = 128
PAGE = 64  # C4 index page size of DeepSeek-V4


@pytest.fixture(scope="module")
def bi(patched_tree):
    return load_module(patched_tree.joinpath(*DSV4, "bf16_indexer.py"), "_dsv4_bf16_indexer_0001")


def _src(tree, *parts):
    return tree.joinpath(*SGLANG, *parts).read_text()


def _func(source, name, cls=None):
    mod = ast.parse(source)
    scope = mod.body
    if cls is not None:
        scope = next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    for node in ast.walk(ast.Module(body=scope, type_ignores=[])):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{cls + '.' if cls else ''}{name} not found")


# ---------------------------------------------------------------- byte layout


def test_bytes_per_token_per_format(bi):
    assert bi.index_k_bytes_per_token(HEAD_DIM, "fp8") == 132
    assert bi.index_k_bytes_per_token(HEAD_DIM, "fp4") == 68
    assert bi.index_k_bytes_per_token(HEAD_DIM, "bf16") == 256
    with pytest.raises(ValueError):
        bi.index_k_bytes_per_token(HEAD_DIM, "fp16")


def test_format_selection_and_validation(bi):
    assert bi.index_k_format(False, False) == "fp8"
    assert bi.index_k_format(True, False) == "fp4"
    assert bi.index_k_format(False, True) == "bf16"
    with pytest.raises(ValueError):
        bi.index_k_format(True, True)
    bi.validate_bf16_indexer_args(bf16=False, fp4=True, is_cuda=False)
    bi.validate_bf16_indexer_args(bf16=True, fp4=False, is_cuda=True)
    with pytest.raises(ValueError, match="--enable-deepseek-v4-fp4-indexer"):
        bi.validate_bf16_indexer_args(bf16=True, fp4=True, is_cuda=True)
    with pytest.raises(ValueError, match="CUDA"):
        bi.validate_bf16_indexer_args(bf16=True, fp4=False, is_cuda=False)


def test_page_view_and_store_layout(bi):
    num_pages = 5
    buf = torch.zeros(num_pages, PAGE * 256, dtype=torch.uint8)
    view = bi.index_k_page_view(buf, PAGE, HEAD_DIM, "bf16")
    assert view.shape == (num_pages, PAGE, 1, 256)
    assert view.data_ptr() == buf.data_ptr()
    fp8_buf = torch.zeros(num_pages, PAGE * 132, dtype=torch.uint8)
    assert bi.index_k_page_view(fp8_buf, PAGE, HEAD_DIM, "fp8").shape == (num_pages, PAGE, 1, 132)
    with pytest.raises(ValueError):
        bi.index_k_page_view(fp8_buf, PAGE, HEAD_DIM, "bf16")  # fp8-sized pool, bf16 reader

    g = torch.Generator().manual_seed(1)
    loc = torch.tensor([0, 63, 64, 130, 319])
    k = torch.randn(len(loc), HEAD_DIM, generator=g)
    bi.store_bf16_index_k_torch(buf, loc, k, PAGE)
    flat = buf.view(-1)
    for i, slot in enumerate(loc.tolist()):
        # the kernel's addressing: page * page_bytes + offset * 256, no scale region
        start = (slot // PAGE) * PAGE * 256 + (slot % PAGE) * 256
        row = flat[start : start + 256].view(torch.bfloat16)
        assert torch.equal(row, k[i].to(torch.bfloat16))
    rows = bi.bf16_index_k_rows(view)
    assert rows.shape == (num_pages, PAGE, HEAD_DIM) and rows.dtype == torch.bfloat16
    assert torch.equal(rows.reshape(-1, HEAD_DIM)[loc], k.to(torch.bfloat16))
    assert int((rows.reshape(-1, HEAD_DIM).abs().sum(-1) != 0).sum()) == len(loc)


# -------------------------------------------------------------------- scorer


def _reference_logits(q, keys, weight, seq_lens, page_table, max_seq_len):
    """float64 loop: logits[b, t] = sum_h w[b, h] * relu(q[b, h] . k_t), -inf past seq_len."""
    out = torch.full((q.shape[0], max_seq_len), float("-inf"), dtype=torch.float64)
    for b in range(q.shape[0]):
        qb = q[b, 0].double()
        for t in range(int(seq_lens[b])):
            k = keys[page_table[b, t // PAGE], t % PAGE].double()
            out[b, t] = (weight[b].double() * torch.relu(qb @ k)).sum()
    return out


def _paged_case(seed, batch=3, heads=4, num_pages=7, seq=(1, 150, 257), max_seq_len=300):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(num_pages, PAGE, HEAD_DIM, generator=g).to(torch.bfloat16)
    cache = keys.view(torch.uint8).view(num_pages, PAGE, 1, 256)
    q = torch.randn(batch, 1, heads, HEAD_DIM, generator=g).to(torch.float8_e4m3fn)
    weight = torch.rand(batch, heads, generator=g) + 0.1
    seq_lens = torch.tensor(seq, dtype=torch.int32)
    max_pages = -(-max_seq_len // PAGE)
    page_table = torch.stack([torch.randperm(num_pages, generator=g)[:max_pages] for _ in range(batch)])
    return q, keys, cache, weight, seq_lens, page_table.to(torch.int32), max_seq_len


def test_scorer_matches_reference(bi):
    q, keys, cache, weight, seq_lens, page_table, max_seq_len = _paged_case(2)
    got = bi.bf16_paged_mqa_logits(q, cache, weight, seq_lens, page_table, None, max_seq_len, False)
    assert got.shape == (3, max_seq_len) and got.dtype == torch.float32
    ref = _reference_logits(q.float(), keys, weight, seq_lens, page_table, max_seq_len)
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(got), finite)
    torch.testing.assert_close(got.double()[finite], ref[finite], rtol=1e-5, atol=1e-4)
    # rows where every head's q.k is negative score exactly 0: the ReLU is exercised
    assert bool((ref[finite] == 0).any()) and bool((got[finite] == 0).any())

    # row chunking (tiny workspace), a [B, 1] seq_lens and a bf16 page view change nothing
    chunked = bi.bf16_paged_mqa_logits(
        q, cache.view(torch.bfloat16), weight, seq_lens.unsqueeze(-1), page_table, None,
        max_seq_len, False, workspace_bytes=1,
    )
    torch.testing.assert_close(chunked, got, rtol=0, atol=0)


def test_scorer_clips_negative_head_scores(bi):
    q, keys, cache, weight, seq_lens, page_table, max_seq_len = _paged_case(3, batch=1, heads=2, seq=(64,))
    neg = bi.bf16_paged_mqa_logits(-q.float(), cache, weight, seq_lens, page_table, None, max_seq_len)
    pos = bi.bf16_paged_mqa_logits(q.float(), cache, weight, seq_lens, page_table, None, max_seq_len)
    # relu(x) + relu(-x) = |x| per head: the two halves add up to the weighted |q.k|
    k = keys[page_table[0, 0]].double()
    absdot = (q[0, 0].double() @ k.T).abs()  # [heads, 64]
    expect = (weight[0].double().unsqueeze(-1) * absdot).sum(0)
    torch.testing.assert_close((neg + pos)[0, :64].double(), expect, rtol=1e-5, atol=1e-4)


# ----------------------------------------------- needle among near-tied keys


U_BF16 = 2.0**-8  # unit roundoff of bf16 (8 significant bits, round to nearest)


def _fp8_index_k(k):
    """The fused kernel's fp8 store: per-token scale = max(1e-4, amax) / 448, e4m3."""
    scale = k.abs().amax(-1, keepdim=True).clamp(min=1e-4) / 448.0
    return (k / scale).to(torch.float8_e4m3fn), scale


def test_bf16_keys_keep_the_needle_where_fp8_keys_lose_it(bi):
    """Each trial: one needle key and 63 distractors whose exact scores trail the
    needle by just more than the worst-case bf16 rounding error of the two keys
    (sum_i |q_i k_i| * 2^-8 each). bf16 keys therefore keep the needle on top by
    construction; e4m3 keys (3 mantissa bits) must not be able to."""
    g = torch.Generator().manual_seed(0)
    trials, haystack = 100, 64
    bf16_top1 = fp8_top1 = 0
    for _ in range(trials):
        q = torch.randn(HEAD_DIM, generator=g, dtype=torch.float64).to(torch.float8_e4m3fn)
        qd = q.double()
        needle = torch.randn(HEAD_DIM, generator=g, dtype=torch.float64)
        if qd @ needle < 0:
            needle = -needle
        d = needle + 0.05 * torch.randn(haystack - 1, HEAD_DIM, generator=g, dtype=torch.float64)
        for _ in range(3):  # move each distractor along q to its target score
            margin = 1.01 * U_BF16 * (qd.abs() @ needle.abs() + d.abs() @ qd.abs())
            d = d + (((qd @ needle - margin) - d @ qd) / (qd @ qd)).unsqueeze(-1) * qd
        bound = U_BF16 * (qd.abs() @ needle.abs() + d.abs() @ qd.abs())
        assert bool(((qd @ needle) - d @ qd > bound).all())
        keys = torch.cat([needle.unsqueeze(0), d])  # needle at slot 0

        # bf16 arm: the module's store + paged scorer, one head of weight 1
        buf = torch.zeros(1, PAGE * 256, dtype=torch.uint8)
        bi.store_bf16_index_k_torch(buf, torch.arange(haystack), keys.float(), PAGE)
        logits = bi.bf16_paged_mqa_logits(
            q.view(1, 1, 1, HEAD_DIM), bi.index_k_page_view(buf, PAGE, HEAD_DIM, "bf16"),
            torch.ones(1, 1), torch.tensor([haystack], dtype=torch.int32),
            torch.zeros(1, 1, dtype=torch.int32), None, haystack,
        )
        bf16_top1 += int(logits[0].argmax()) == 0

        # fp8 arm: upstream's scoring of the 132 B layout, relu(q . k_fp8) * w * scale
        k8, scale = _fp8_index_k(keys.float())
        fp8_scores = torch.relu(k8.double() @ qd) * scale.double().squeeze(-1)
        fp8_top1 += int(fp8_scores.argmax()) == 0
    assert bf16_top1 == trials
    # fixed seed: 56 of 100 with torch 2.x; the point is that fp8 loses a large share
    assert fp8_top1 <= trials * 3 // 4, fp8_top1


# ------------------------------------------------------------- kernel (nvcc)


def test_fused_kernel_bf16_indexer_store_compiles_for_sm120(patched_tree, tmp_path):
    nvcc = require_tool("nvcc", env="NVCC", enables="the sm_120 compile of the bf16 indexer store")
    jit = patched_tree.joinpath(*SGLANG, "kernels", "jit")
    cuh = jit / "csrc" / "deepseek_v4" / "fused_norm_rope_v2.cuh"
    text = cuh.read_text()
    assert 'static_assert(!(kIsIndexer && kBf16Store)' not in text
    assert re.search(r"fused_norm_rope_indexer<DType, kMode, kLogPageSize, kUsePDL, kPreshuffleSize, kBf16Store>", text)
    assert re.search(r"constexpr int64_t kPageBytes = \(kBf16Store \? 256ll : 132ll\) << kPageBits;", text)
    tu = tmp_path / "bf16_indexer_store.cu"
    tu.write_text(
        '#include "deepseek_v4/fused_norm_rope_v2.cuh"\n'
        "namespace t {\n"
        "template <typename D, bool kBf16>\n"
        "using K = sglang::FusedNormRopeKernel<D, 128, 64, 64, 0, kBf16, sglang::V4, true>;\n"
        "static_assert(K<sglang::bf16_t, true>::kPageBytes == 256 * 64);\n"
        "static_assert(K<sglang::fp32_t, true>::kPageBytes == 256 * 64);\n"
        "static_assert(K<sglang::bf16_t, false>::kPageBytes == 132 * 64);\n"
        "auto bf16_in = &K<sglang::bf16_t, true>::forward;\n"
        "auto fp32_in = &K<sglang::fp32_t, true>::forward;\n"
        "auto fp8_store = &K<sglang::bf16_t, false>::forward;\n"
        "}\n"
    )
    obj = tmp_path / "bf16_indexer_store.o"
    cmd = [
        nvcc, "-c", str(tu), "-o", str(obj), "-arch=sm_120", "-DSGL_CUDA_ARCH=1200",
        "-std=c++20", "-O3", "--expt-relaxed-constexpr",
        f"-I{jit / 'include'}", f"-I{jit / 'csrc'}", f"-I{tvm_ffi.libinfo.find_include_path()}",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    blob = obj.read_bytes()
    # fused_norm_rope_indexer<bf16|fp32, mode, 6, true, 0, kBf16Store=true>, both modes
    for dtype in (b"13__nv_bfloat16", b"f"):
        for mode in (b"0", b"1"):
            sym = (b"_ZN6sglang23fused_norm_rope_indexerI" + dtype + b"LNS_11ForwardModeE" + mode
                   + b"ELi6ELb1ELi0ELb1EEEvNS_24FusedNormRopeStoreParamsE")
            assert sym in blob, sym


# ------------------------------------------------------------ upstream hunks


def test_flag_field_beside_fp4(patched_tree):
    source = _src(patched_tree, "srt", "arg_groups", "fields", "exec_.py")
    for cls in ast.walk(ast.parse(source)):
        if isinstance(cls, ast.ClassDef):
            names = {n.target.id: n for n in cls.body if isinstance(n, ast.AnnAssign)}
            if "enable_deepseek_v4_fp4_indexer" in names:
                break
    else:
        raise AssertionError("fp4 indexer field not found")
    field = names.get("enable_deepseek_v4_bf16_indexer")
    assert field is not None, "bf16 indexer field missing beside the fp4 one"
    assert isinstance(field.value, ast.Constant) and field.value.value is False
    assert "--enable-deepseek-v4-fp4-indexer" in ast.get_source_segment(source, field)


def test_validation_called(patched_tree):
    source = _src(patched_tree, "srt", "arg_groups", "serving_hook.py")
    fn = _func(source, "handle_environment_variables")
    calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call)
             and getattr(c.func, "id", None) == "validate_bf16_indexer_args"]
    assert len(calls) == 1
    kwargs = {k.arg: ast.unparse(k.value) for k in calls[0].keywords}
    assert kwargs["bf16"] == "cfg.enable_deepseek_v4_bf16_indexer"
    assert kwargs["fp4"] == "cfg.enable_deepseek_v4_fp4_indexer"


def test_pool_bytes_per_token(patched_tree):
    source = _src(patched_tree, "srt", "mem_cache", "deepseek_v4_memory_pool.py")
    ns = {}
    exec(compile(ast.Module(body=[_func(source, "get_dsv4_indexer_bytes_per_token")], type_ignores=[]),
                 "<pool>", "exec"), ns)
    fn = ns["get_dsv4_indexer_bytes_per_token"]
    assert (fn(128, False), fn(128, True), fn(128, False, True)) == (132, 68, 256)
    init = ast.unparse(_func(source, "__init__", cls="DeepSeekV4IndexerPool"))
    assert "self.use_bf16_indexer = not use_fp4_indexer and get_exec().kernel.enable_deepseek_v4_bf16_indexer" in init
    per_token = ast.unparse(_func(source, "get_bytes_per_token", cls="DeepSeekV4IndexerPool"))
    assert "self.use_bf16_indexer" in per_token
    budget = _src(patched_tree, "srt", "model_executor", "pool_configurator.py")
    calls = [ast.unparse(c) for c in ast.walk(ast.parse(budget)) if isinstance(c, ast.Call)
             and getattr(c.func, "id", None) == "get_dsv4_indexer_bytes_per_token"
             and ast.unparse(c.args[0]) == "self.indexer_head_dim" and not c.keywords]
    assert len(calls) == 1, calls  # the C4 budget (the low-ratio one is fp4 by keyword)
    assert calls[0].endswith(", get_exec().kernel.enable_deepseek_v4_bf16_indexer)"), calls


def test_store_path_asks_for_bf16(patched_tree):
    source = _src(patched_tree, "srt", "layers", "attention", "dsv4", "compressor_v2.py")
    fn = _func(source, "forward_unified", cls="CompressorBackendMixin")
    branch = next(n for n in ast.walk(fn) if isinstance(n, ast.If)
                  and ast.unparse(n.test) == "compressor.is_in_indexer")
    body = ast.unparse(ast.Module(body=branch.body, type_ignores=[]))
    assert "bf16_store = token_to_kv_pool.c4_indexer_kv_pool.use_bf16_indexer" in body
    assert "bf16_store=bf16_store" in ast.unparse(fn)
    # compress_norm_rope_store hands bf16_store to the JIT module (template kBf16Store)
    ops = _src(patched_tree, "kernels", "ops", "attention", "dsv4", "compress.py")
    store = ast.unparse(_func(ops, "compress_norm_rope_store"))
    assert re.search(r"_jit_compress_norm_rope_module\([^)]*bf16_store", store)


def test_reader_view_scorer_and_nonpaged_off(patched_tree):
    source = _src(patched_tree, "srt", "layers", "attention", "dsv4", "indexer.py")
    init = ast.unparse(_func(source, "__init__", cls="C4Indexer"))
    assert "self.use_bf16_indexer = get_exec().kernel.enable_deepseek_v4_bf16_indexer" in init

    reader = _func(source, "forward_c4_indexer")
    text = ast.unparse(reader)
    assert "132" not in text, "reader still hard-codes the fp8 row width"
    assert "index_k_page_view(c4_indexer_kv_cache, 64, c4_indexer.head_dim, index_k_format(use_fp4_indexer, c4_indexer.use_bf16_indexer))" in text
    # the scorer chain: bf16 is chosen before TileLang / aiter / torch-fp8 / DeepGEMM
    chain = next(n for n in ast.walk(reader) if isinstance(n, ast.If)
                 and "fp8_fp4_paged_mqa_logits" in ast.unparse(n))
    tests = []
    while isinstance(chain, ast.If):
        tests.append((ast.unparse(chain.test), ast.unparse(ast.Module(body=chain.body, type_ignores=[]))))
        chain = chain.orelse[0] if len(chain.orelse) == 1 else None
    conds = [t for t, _ in tests]
    bf16 = conds.index("c4_indexer.use_bf16_indexer")
    assert tests[bf16][1].strip() == "fn = bf16_paged_mqa_logits"
    assert bf16 < conds.index("envs.SGLANG_OPT_USE_TILELANG_INDEXER.get()")
    assert "from sglang.srt.layers.attention.dsv4.bf16_indexer import" in source

    nonpaged = _func(source, "_can_use_nonpaged_indexer")
    refusals = [n for n in ast.walk(nonpaged) if isinstance(n, ast.If)
                and "c4_indexer.use_bf16_indexer" in ast.unparse(n.test)]
    assert len(refusals) == 1
    assert ast.unparse(refusals[0].body[0]) == "return False"
