"""0001: DeepSeek-V4 DSA indexer keys in bf16 (--enable-deepseek-v4-bf16-indexer).

Loads the new module srt/layers/attention/dsv4/bf16_indexer.py by path (torch and
Triton's CPU interpreter) and checks its byte layout, its start-up checks and its
Triton paged scorer against a float64 reference; shows on fixed-seed data that bf16
keys keep a needle on top of near-tied keys where fp8 e4m3 keys (per-token fp32
scale, as the fused kernel stores them) lose it; runs the kernel's bf16 store
address and packing code (sgl_kernel/deepseek_v4/bf16_index_k.h) and the fused kernel's own
bf16 store branch (cut from fused_norm_rope_v2.cuh) with the host C++ compiler against the
torch store; compiles the bf16 store variant of
fused_norm_rope_v2.cuh with nvcc for sm_120; and checks with ast that every upstream
hunk is in place. What needs a GPU is in tests/gpu/test_0001_bf16_indexer.py.
"""

import ast
import os
import re
import struct
import subprocess

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

import pytest
from triton_support import GuardedTorch, interpreter_stores

from helpers import lazy, load_module, require_tool

torch = lazy("torch")  # imported before the first test (tests/conftest.py), not at collection
tvm_libinfo = lazy("tvm_ffi.libinfo")

pytestmark = pytest.mark.upstream

SGLANG = ("python", "sglang")
DSV4 = (*SGLANG, "srt", "layers", "attention", "dsv4")
HEAD_DIM = 128
PAGE = 64  # C4 index page size of DeepSeek-V4


@pytest.fixture(scope="module")
def bi(patched_tree):
    module = load_module(patched_tree.joinpath(*DSV4, "bf16_indexer.py"), "_dsv4_bf16_indexer_0001")
    module.torch = guarded = GuardedTorch()
    scorer = module.bf16_paged_mqa_logits

    def checked_scorer(*args, **kwargs):
        guarded.tails.clear()
        logits = scorer(*args, **kwargs)
        past = guarded.stored_past()
        assert past == 0, f"the scorer stored {past} values past the end of its logits"
        return logits

    module.bf16_paged_mqa_logits = checked_scorer
    return module


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
    ok = dict(fp4=False, is_cuda=True, is_sm120=True, model_type="deepseek_v4", hisparse=False)
    bi.validate_bf16_indexer_args(**ok)
    with pytest.raises(ValueError, match="--enable-deepseek-v4-fp4-indexer"):
        bi.validate_bf16_indexer_args(**{**ok, "fp4": True})
    with pytest.raises(ValueError, match="CUDA"):
        bi.validate_bf16_indexer_args(**{**ok, "is_cuda": False, "is_sm120": False})


@pytest.mark.parametrize(
    "change, refusal",
    [
        # sm_90 / sm_100: the Triton bf16 scorer would replace DeepGEMM's fp8 one, unmeasured there
        ({"is_sm120": False}, "runs on sm_120 GPUs only"),
        ({"model_type": "deepseek_v41"}, "has not been run with DeepSeek-V4.1"),
        ({"hisparse": True}, "has not been run with --enable-hisparse"),
    ],
)
def test_switch_refuses_what_has_not_run(bi, change, refusal):
    """Issue 32: the switch is limited to sm_120 (until a cost row has run elsewhere) and refuses
    DeepSeek-V4.1 and HiSparse, which neither the field nor these tests ran with bf16 keys."""
    ok = dict(fp4=False, is_cuda=True, is_sm120=True, model_type="deepseek_v4", hisparse=False)
    with pytest.raises(ValueError, match=re.escape(refusal)):
        bi.validate_bf16_indexer_args(**{**ok, **change})


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


# ----------------------------------------------------------- start-up checks

OVERLAP = "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"


def _overlap(bi, *, phases=("decode",), on=True, explicit=False):
    return bi.bf16_multi_stream_overlap_conflict(capturing_phases=phases, overlap_on=on, overlap_explicit=explicit)


# every phase whose CUDA graphs run the attention's alternate stream under capture: a decode or
# colocated server's decode graphs, and prefill full/breakable graphs (breakable is CUDA's default,
# and MQALayer.forward enables the stream in any breakable capture, deepseek_v4.py:2625-2635)
CAPTURING = [("decode",), ("prefill",), ("decode", "prefill")]


@pytest.mark.parametrize("phases", CAPTURING)
def test_multi_stream_overlap_forced_off_by_default(bi, phases):
    # the field's corruption setup: bf16 keys, CUDA graphs, overlap at its default (on)
    warning = _overlap(bi, phases=phases)
    assert warning == (
        f"Setting {OVERLAP}=0 (default on) for --enable-deepseek-v4-bf16-indexer with "
        f"{' and '.join(phases)} CUDA graphs: under graph capture the C4 indexer's alternate stream "
        "races with main-stream tensors on the bf16 path (graph-pool intermediates alias)."
        + (
            # the field turned it off on decode only (report 004, thread one): where the user reads
            # the warning it says that prefill is inferred and its cost unmeasured (issue 32)
            " The race was seen on decode; prefill shares the capture path, and what turning the "
            "overlap off there costs has not been measured."
            if "prefill" in phases
            else ""
        )
    )
    assert "corrupts KV" not in warning  # report 004: the canary found the index-K buffer intact


@pytest.mark.parametrize("phases", CAPTURING)
def test_multi_stream_overlap_refused_when_set_on(bi, phases):
    with pytest.raises(ValueError) as excinfo:
        _overlap(bi, phases=phases, explicit=True)
    message = str(excinfo.value)
    assert f"{OVERLAP}=1 cannot be combined with --enable-deepseek-v4-bf16-indexer" in message
    assert f"set {OVERLAP}=0 (or disable the {' and '.join(phases)} CUDA graphs" in message


@pytest.mark.parametrize(
    "case",
    [
        {"on": False},  # already off (e.g. SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0)
        {"on": False, "explicit": True},
        {"phases": ()},  # no phase captures a graph: the stream never runs under capture
        {"phases": (), "explicit": True},
    ],
)
def test_multi_stream_overlap_left_alone(bi, case):
    assert _overlap(bi, **case) is None


def test_pd_layout_names_the_index_format(bi):
    base = "v4,c4:v4,c128:v4"
    # fp8 and fp4 keep upstream's string, so a patched fp4 (SM100/gfx95) server still pairs with an
    # unpatched one (an fp8/fp4 mix is upstream's to catch); bf16 differs from both
    assert bi.pd_kv_layout_with_index_k(base, "fp8") == base
    assert bi.pd_kv_layout_with_index_k(base, "fp4") == base
    assert bi.pd_kv_layout_with_index_k(base, "bf16") == base + ",c4-index-k:bf16"
    with pytest.raises(ValueError):
        bi.pd_kv_layout_with_index_k(base, "fp16")


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


def _paged_case(seed, batch=3, heads=4, num_pages=7, seq=(1, 150, 257), max_seq_len=300, width=None):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(num_pages, PAGE, HEAD_DIM, generator=g).to(torch.bfloat16)
    cache = keys.view(torch.uint8).view(num_pages, PAGE, 1, 256)
    q = torch.randn(batch, 1, heads, HEAD_DIM, generator=g).to(torch.float8_e4m3fn)
    weight = torch.rand(batch, heads, generator=g) + 0.1
    seq_lens = torch.tensor(seq, dtype=torch.int32)
    width = width or -(-max_seq_len // PAGE)
    page_table = torch.stack([torch.randint(0, num_pages, (width,), generator=g) for _ in range(batch)])
    return q, keys, cache, weight, seq_lens, page_table.to(torch.int32), max_seq_len


def _valid(seq_lens, max_seq_len):
    return torch.arange(max_seq_len).unsqueeze(0) < seq_lens.reshape(-1, 1)


@pytest.mark.parametrize("heads", [4, 64])  # 4 exercises the padded head block, 64 is V4-Flash
def test_scorer_matches_reference(bi, heads):
    q, keys, cache, weight, seq_lens, page_table, max_seq_len = _paged_case(2, heads=heads)
    got = bi.bf16_paged_mqa_logits(q, cache, weight, seq_lens, page_table, None, max_seq_len, False)
    assert got.shape == (3, max_seq_len) and got.dtype == torch.float32
    ref = _reference_logits(q.float(), keys, weight, seq_lens, page_table, max_seq_len)
    valid = _valid(seq_lens, max_seq_len)
    assert bool(torch.isfinite(got[valid]).all())
    torch.testing.assert_close(got.double()[valid], ref[valid], rtol=1e-5, atol=1e-4)
    if heads == 4:  # tokens where every head's q.k is negative score exactly 0: the ReLU is exercised
        assert bool((ref[valid] == 0).any()) and bool((got[valid] == 0).any())

    # clean_logits, a [B, 1] seq_lens, a bf16 page view and any split count give the
    # same scores, and the torch reference agrees
    clean = bi.bf16_paged_mqa_logits(q, cache, weight, seq_lens, page_table, None, max_seq_len, True)
    assert torch.equal(torch.isfinite(clean), valid)
    torch.testing.assert_close(clean.double()[valid], ref[valid], rtol=1e-5, atol=1e-4)
    for splits in (2, 3, 7):
        with interpreter_stores() as stores:
            other = bi.bf16_paged_mqa_logits(
                q,
                cache.view(torch.bfloat16),
                weight,
                seq_lens.unsqueeze(-1),
                page_table,
                None,
                max_seq_len,
                True,
                num_splits=splits,
            )
        torch.testing.assert_close(other, clean, rtol=0, atol=0)
        # each position is one split's: two splits storing one logit would race on a GPU
        assert len(stores.launches) == 1 and stores.stored_twice() == [], splits
    torch_ref = bi.bf16_paged_mqa_logits_torch(q, cache, weight, seq_lens, page_table, max_seq_len)
    assert torch.equal(torch.isfinite(torch_ref), valid)
    torch.testing.assert_close(torch_ref.double()[valid], ref[valid], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("num_splits", [None, 3])  # the CPU's default (one program a row), and 3
def test_scorer_reads_only_the_rows_own_pages(bi, num_splits):
    """The kernel's work follows seq_lens, not the page table's width: it visits the
    ceil(seq_len / 64) pages of each row and writes nothing past them, however the pages
    are split between programs. Uninitialised memory is NaN here, so every position the
    kernel never touched stays NaN."""
    width = 4096  # a table 16x wider than the longest row needs (a 1M-token graph table)
    q, _keys, cache, weight, seq_lens, page_table, _ = _paged_case(5, seq=(0, 1, 64, 200), batch=4, width=width)
    max_seq_len = width * PAGE
    previous = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        got = bi.bf16_paged_mqa_logits(
            q, cache, weight, seq_lens, page_table, None, max_seq_len, False, num_splits=num_splits
        )
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = previous
    for b, n in enumerate(seq_lens.tolist()):
        visited = -(-n // PAGE) * PAGE
        assert bool(torch.isfinite(got[b, :n]).all())
        assert bool((got[b, n:visited] == float("-inf")).all())
        assert bool(got[b, visited:].isnan().all()), (b, n, int((~got[b, visited:].isnan()).sum()))


def test_scorer_reads_no_padded_head_and_no_page_past_the_table(bi):
    """4 heads run in a 16-head block, and the page table is narrower than two rows'
    sequences. q and weight are views into buffers that hold, for heads 4..15, a q whose dot
    with a key over 1.2 in its first value overflows to +inf, and a NaN weight; each table row
    is followed in memory by the next row's page ids. A kernel that reads a padded head's q
    (its weight masked to 0: inf * 0) or weight (0 * NaN) scores NaN; one that walks past the
    table's width scores the next row's pages where the reference has -inf (the table covers
    128 positions). q is bf16 here, which the scorer takes as it takes fp8 e4m3."""
    q, keys, cache, weight, seq_lens, page_table, max_seq_len = _paged_case(8, seq=(150, 190, 40))
    q_buf = torch.zeros(3, 1, 16, HEAD_DIM, dtype=torch.bfloat16)
    q_buf[:, :, 4:, 0] = 3e38
    q_buf[:, :, :4] = q.to(torch.bfloat16)  # exact: every e4m3 value is a bf16 value
    assert bool((keys[..., 0] > 1.2).any())
    w_buf = torch.full((3, 16), float("nan"))
    w_buf[:, :4] = weight
    narrow = page_table[:, :2].contiguous()
    got = bi.bf16_paged_mqa_logits(q_buf[:, :, :4], cache, w_buf[:, :4], seq_lens, narrow, None, max_seq_len, True)
    covered = seq_lens.clamp(max=2 * PAGE)
    ref = _reference_logits(q.float(), keys, weight, covered, narrow, max_seq_len)
    assert not bool(got.isnan().any())
    assert torch.equal(torch.isfinite(got), _valid(covered, max_seq_len))
    valid = _valid(covered, max_seq_len)
    torch.testing.assert_close(got.double()[valid], ref[valid], rtol=1e-5, atol=1e-4)


def test_scorer_empty_shapes(bi):
    q, _keys, cache, weight, seq_lens, page_table, _ = _paged_case(6)
    for fn in (
        lambda m: bi.bf16_paged_mqa_logits(q, cache, weight, seq_lens * 0, page_table[:, :0], None, m, False),
        lambda m: bi.bf16_paged_mqa_logits_torch(q, cache, weight, seq_lens * 0, page_table[:, :0], m),
    ):
        assert fn(0).shape == (3, 0)
    empty = bi.bf16_paged_mqa_logits(q[:0], cache, weight[:0], seq_lens[:0], page_table[:0], None, 300, False)
    assert empty.shape == (0, 300)


def test_scorer_clips_negative_head_scores(bi):
    q, keys, cache, weight, seq_lens, page_table, max_seq_len = _paged_case(3, batch=1, heads=2, seq=(64,))
    neg = bi.bf16_paged_mqa_logits(
        (-q.float()).to(torch.bfloat16), cache, weight, seq_lens, page_table, None, max_seq_len
    )
    pos = bi.bf16_paged_mqa_logits(q, cache, weight, seq_lens, page_table, None, max_seq_len)
    # relu(x) + relu(-x) = |x| per head: the two halves add up to the weighted |q.k|
    k = keys[page_table[0, 0]].double()
    absdot = (q[0, 0].double() @ k.T).abs()  # [heads, 64]
    expect = (weight[0].double().unsqueeze(-1) * absdot).sum(0)
    torch.testing.assert_close((neg + pos)[0, :64].double(), expect, rtol=1e-5, atol=1e-4)


def test_num_splits_fills_the_gpu_twice_at_small_batch(bi):
    """Programs per row: ceil(2 * SMs / batch), clamped to [1, the row's page budget]; one
    program a row off CUDA. 188 SMs is the RTX PRO 6000 (FACTS.md)."""
    sms = 188
    assert bi._num_splits(1, 4096, sms) == 376
    assert bi._num_splits(1, 40, sms) == 40  # never more programs than pages
    assert bi._num_splits(64, 4096, sms) == 6  # ceil(376 / 64)
    assert bi._num_splits(375, 4096, sms) == 2
    assert bi._num_splits(376, 4096, sms) == 1
    assert bi._num_splits(4096, 4096, sms) == 1
    assert bi._num_splits(0, 4096, sms) == 376  # an empty batch launches nothing; no division by 0
    assert bi._num_splits(8, 0, sms) == 1  # an empty table still gets one program a row
    assert bi._num_sms(torch.device("cpu")) == 1


def test_scorer_reads_page_zero_for_a_negative_page_id(bi):
    """A -1 (unused) page-table entry under seq_lens is read as page 0, as the torch reference
    clamps it; it never reads memory before the pool. The pool here sits just after a page of NaN
    keys: a kernel that follows the -1 reads them, and its scores differ from the reference (NaN, or
    0 where the ReLU's maximum drops the NaN, as the interpreter's does)."""
    q, keys, _, weight, seq_lens, page_table, max_seq_len = _paged_case(7, batch=2, seq=(150, 150))
    num_pages = keys.shape[0]
    backing = torch.full((num_pages + 1, PAGE, HEAD_DIM), float("nan"), dtype=torch.bfloat16)
    backing[1:] = keys
    cache = backing[1:].view(torch.uint8).view(num_pages, PAGE, 1, 256)
    page_table[1, 1] = -1
    got = bi.bf16_paged_mqa_logits(q, cache, weight, seq_lens, page_table, None, max_seq_len, True)
    ref = _reference_logits(q.float(), keys, weight, seq_lens, page_table.clamp(min=0), max_seq_len)
    valid = _valid(seq_lens, max_seq_len)
    assert bool(torch.isfinite(got[valid]).all()), "the scorer read the memory before page 0"
    torch.testing.assert_close(
        got.double()[valid], ref[valid], rtol=1e-5, atol=1e-4, msg=lambda m: f"a -1 page is not page 0: {m}"
    )
    torch_ref = bi.bf16_paged_mqa_logits_torch(q, cache, weight, seq_lens, page_table, max_seq_len)
    torch.testing.assert_close(got, torch_ref, rtol=1e-5, atol=1e-4)


def test_scorer_writes_nothing_past_max_seq_len(bi):
    """max_seq_len = 100 is not a multiple of the 64-token page: row 0's last page covers
    positions 64-127, and the store mask keeps 100-127 out of the logits. Row 1 (no tokens) is
    the next 100 floats of the same buffer and must stay as allocated (NaN here)."""
    q, _keys, cache, weight, seq_lens, page_table, max_seq_len = _paged_case(8, batch=2, seq=(100, 0), max_seq_len=100)
    assert page_table.shape[1] == 2
    previous = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        got = bi.bf16_paged_mqa_logits(q, cache, weight, seq_lens, page_table, None, max_seq_len, False)
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = previous
    assert bool(torch.isfinite(got[0]).all())
    written = int((~got[1].isnan()).sum())
    assert written == 0, f"{written} logits of row 0's page tail landed in row 1"


AOT_COMPILE = r"""
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget

spec = importlib.util.spec_from_file_location("bf16_indexer_aot", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
ints = ("max_seq_len", "max_pages", "num_splits", "stride_qb", "stride_qh", "stride_wb", "stride_sb",
        "stride_pb", "stride_ob")
signature = {"q_ptr": "*fp8e4nv", "k_ptr": "*bf16", "w_ptr": "*fp32", "seq_lens_ptr": "*i32",
             "page_table_ptr": "*i32", "out_ptr": "*fp32", **dict.fromkeys(ints, "i32")}
# the operand dtype the wrapper picks off the interpreter
constexprs = {"NUM_HEADS": 64, "BLOCK_H": 64, "HEAD_DIM": 128, "PAGE": 64, "OP_DTYPE": module._dot_operand_dtype()}
signature.update(dict.fromkeys(constexprs, "constexpr"))
src = triton.compiler.ASTSource(fn=module._bf16_paged_mqa_logits_kernel, signature=signature,
                                constexprs=constexprs)
kernel = triton.compile(src, target=GPUTarget("cuda", 120, 32))
print(json.dumps({"ptx": kernel.asm["ptx"], "shared": kernel.metadata.shared}))
"""


def test_scorer_compiles_for_sm120(patched_tree):
    """The interpreter runs the kernel's arithmetic; this compiles it for the GPU the
    deployment has (no GPU needed): bf16 tensor-core MMA, fp8 query converted in
    registers, shared memory within sm_120's ~99 KB per SM (FACTS.md). In a process of
    its own: Triton imported under TRITON_INTERPRET=1 cannot compile for a GPU."""
    import json
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run(
        [sys.executable, "-c", AOT_COMPILE, str(patched_tree.joinpath(*DSV4, "bf16_indexer.py"))],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    kernel = json.loads(res.stdout.splitlines()[-1])
    assert set(re.findall(r"mma\.sync\.aligned\.\S+", kernel["ptx"])) == {
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
    }  # bf16 operands, fp32 accumulate
    # The fp8 query is converted in registers, and exactly: Triton 3.8 (torch 2.14.1's, so the
    # deployment's) goes e4m3 -> f16 -> bf16, every f16 pair on to bf16; Triton 3.9 converts
    # e4m3x2 to bf16x2 in one step. Both exact (test_fp8_query_fits_f16_then_bf16).
    fp8 = re.findall(r"cvt\.[\w.]*e4m3[\w.]*", kernel["ptx"])
    assert fp8 and set(fp8) == {"cvt.rn.f16x2.e4m3x2"}, set(fp8)
    assert kernel["ptx"].count("cvt.bf16.f16") == 2 * len(fp8)
    assert kernel["shared"] <= 99 * 1024, kernel["shared"]


def test_fp8_query_fits_f16_then_bf16():
    """Every e4m3 value (3 mantissa bits, 2^-9 to 448) is an f16 value, and every such f16 value
    is a bf16 value: the sm_120 compile's e4m3 -> f16 -> bf16 path is exact whatever its
    rounding, as a one-step e4m3 -> bf16 conversion is. All 256 codes; NaN stays NaN."""
    fp8 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
    exact = fp8.to(torch.float64)
    finite = ~exact.isnan()
    for path in (fp8.to(torch.float16), fp8.to(torch.float16).to(torch.bfloat16), fp8.to(torch.bfloat16)):
        got = path.to(torch.float64)
        assert torch.equal(got.isnan(), ~finite) and torch.equal(got[finite], exact[finite])
    assert int(exact.isnan().sum()) == 2  # 0x7f and 0xff: the only non-finite e4m3fn codes


def test_gpu_checks_are_listed_in_patchset(patched_tree):
    """Every check in tests/gpu/test_0001_bf16_indexer.py is a gpu_verification row of
    this patch, run by its exact pytest node, and every row names one of them."""
    import tomllib
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    gpu = repo / "tests" / "gpu" / "test_0001_bf16_indexer.py"
    entry = next(
        p for p in tomllib.loads((repo / "patchset.toml").read_text())["patch"] if p["id"] == "dsv4-bf16-indexer-keys"
    )
    node = re.compile(r"^python -m pytest (?:-s )?tests/gpu/test_0001_bf16_indexer\.py::(test_\w+)$")
    names = [node.match(v["run"]) for v in entry["gpu_verification"]]
    assert all(names), [v["run"] for v in entry["gpu_verification"]]
    tests = {
        n.name for n in ast.parse(gpu.read_text()).body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    }
    assert sorted(m.group(1) for m in names) == sorted(tests)


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
            q.view(1, 1, 1, HEAD_DIM),
            bi.index_k_page_view(buf, PAGE, HEAD_DIM, "bf16"),
            torch.ones(1, 1),
            torch.tensor([haystack], dtype=torch.int32),
            torch.zeros(1, 1, dtype=torch.int32),
            None,
            haystack,
        )
        bf16_top1 += int(logits[0].argmax()) == 0

        # fp8 arm: upstream's scoring of the 132 B layout, relu(q . k_fp8) * w * scale
        k8, scale = _fp8_index_k(keys.float())
        fp8_scores = torch.relu(k8.double() @ qd) * scale.double().squeeze(-1)
        fp8_top1 += int(fp8_scores.argmax()) == 0
    assert bf16_top1 == trials
    # fixed seed, torch 2.13.0 (the pinned CPU wheel): the figure patchset.toml quotes
    assert fp8_top1 == 40, fp8_top1


# ------------------------------------------- kernel store layout (host C++)

JIT = (*SGLANG, "kernels", "jit")
LAYOUT_HEADER = "sgl_kernel/deepseek_v4/bf16_index_k.h"

# Runs the header's address and packing code for every lane of a warp, as
# fused_norm_rope_indexer<..., kBf16Store = true> does for each token it stores.
STORE_HARNESS = r"""
#include <sgl_kernel/deepseek_v4/bf16_index_k.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace layout = sglang::deepseek_v4::bf16_index_k;
static_assert(layout::page_bytes(6) == 256 * 64);
static_assert(layout::row_offset(64 + 3, 6) == 256 * 64 + 3 * 256);

int main(int argc, char** argv) {
  const int page_bits = std::atoi(argv[1]);
  const long num_pages = std::atol(argv[2]);
  const long n = std::atol(argv[3]);
  std::FILE* in = std::fopen(argv[4], "rb");
  std::vector<long long> locs(n);
  std::vector<float> rows(n * layout::kHeadDim);
  if (std::fread(locs.data(), 8, n, in) != size_t(n)) return 2;
  if (std::fread(rows.data(), 4, rows.size(), in) != rows.size()) return 2;
  std::vector<unsigned char> cache(num_pages * layout::page_bytes(page_bits), 0);
  for (long i = 0; i < n; ++i) {
    for (unsigned lane = 0; lane < 32; ++lane) {
      float values[layout::kValuesPerLane];
      std::memcpy(values, &rows[i * layout::kHeadDim + lane * layout::kValuesPerLane], sizeof values);
      const auto words = layout::lane_words(values);
      const long long at = layout::row_offset(locs[i], page_bits) + layout::lane_offset(lane);
      if (at < 0 || at + 8 > (long long)cache.size()) return 3;
      std::memcpy(&cache[at], words.word, 8);
    }
  }
  std::FILE* out = std::fopen(argv[5], "wb");
  std::fwrite(cache.data(), 1, cache.size(), out);
  std::fclose(out);
  return 0;
}
"""


@pytest.fixture(scope="module")
def store_harness(patched_tree, tmp_path_factory):
    cxx = require_tool("c++", env="CXX", enables="the host run of the bf16 indexer store's address and packing code")
    work = tmp_path_factory.mktemp("bf16_store")
    (work / "harness.cc").write_text(STORE_HARNESS)
    exe = work / "harness"
    res = subprocess.run(
        [
            cxx,
            "-std=c++20",
            "-O1",
            f"-I{patched_tree.joinpath(*JIT, 'include')}",
            str(work / "harness.cc"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return exe


def _special_rows(n):
    """Rows with the values whose bf16 rounding is easy to get wrong."""
    rows = torch.randn(n, HEAD_DIM, generator=torch.Generator().manual_seed(7)) * 3
    specials = [
        0.0,
        -0.0,
        float("inf"),
        float("-inf"),
        float("nan"),
        1.0 + 2.0**-8,  # a tie: rounds to even (1.0)
        1.0 + 3 * 2.0**-8,  # a tie: rounds to even (1 + 2^-6)
        1.0 + 2.0**-8 + 2.0**-20,  # just above a tie: rounds up
        3.3895314e38,  # rounds to +inf
        1e-40,
        -1e-45,  # fp32 subnormals
        -65504.0,
        448.0,
        2.0**-133,
    ]
    rows[0, : len(specials)] = torch.tensor(specials)
    # NaNs whose payload sits in the low 16 bits only: rounding them as numbers gives inf
    rows.view(torch.int32)[0, len(specials) : len(specials) + 2] = torch.tensor([0x7F800001, -0x7FFF7FFF])
    return rows


def _store_rows_with(exe, bi, tmp_path, page_bits):
    """Runs ``exe`` (a harness taking page_bits, num_pages, n, input file, output file) on 40
    slots of 9 pages, the first three at a page's first and last slot and the cache's last, and
    checks every byte of the cache it writes against the torch store."""
    page_size = 1 << page_bits
    num_pages = 9
    g = torch.Generator().manual_seed(page_bits)
    locs = torch.randperm(num_pages * page_size, generator=g)[:40].to(torch.int64)
    locs[:3] = torch.tensor([0, page_size - 1, num_pages * page_size - 1])
    rows = _special_rows(len(locs))
    data = tmp_path / "in.bin"
    data.write_bytes(locs.numpy().tobytes() + rows.numpy().tobytes())
    out = tmp_path / "out.bin"
    res = subprocess.run(
        [str(exe), str(page_bits), str(num_pages), str(len(locs)), str(data), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, (res.returncode, res.stderr)
    kernel = torch.frombuffer(bytearray(out.read_bytes()), dtype=torch.uint8).view(num_pages, page_size * 256)

    expect = torch.zeros(num_pages, page_size * 256, dtype=torch.uint8)
    bi.store_bf16_index_k_torch(expect, locs, rows, page_size)
    # NaN has no one bf16 encoding (torch's CPU cast and __float2bfloat16_rn differ):
    # compare NaN-ness there and every other byte exactly
    nan = expect.view(torch.bfloat16).isnan()
    assert torch.equal(kernel.view(torch.bfloat16).isnan(), nan)
    keep = ~nan.repeat_interleave(2, dim=-1)
    diff = ((kernel != expect) & keep).nonzero()
    assert diff.numel() == 0, f"{len(diff)} bytes differ, first at (page, byte) {diff[:4].tolist()}"
    # the special values decode as round-to-nearest-even of fp32 says
    got = kernel.view(-1, 256)[locs[0]].view(torch.bfloat16)[:14].float()
    want = rows[0, :14].to(torch.bfloat16).float()
    assert struct.pack("<14f", *got.nan_to_num(0.5).tolist()) == struct.pack("<14f", *want.nan_to_num(0.5).tolist())


@pytest.mark.parametrize("page_bits", [6, 2])  # 64 is the C4 index page
def test_kernel_store_layout_matches_torch_store(bi, store_harness, tmp_path, page_bits):
    _store_rows_with(store_harness, bi, tmp_path, page_bits)


# The kernel's own bf16 store branch, cut from fused_norm_rope_v2.cuh and compiled for the host
# with stand-ins for what it names from the kernel: `data` (the lane's 4 fp32 values), `lane_id`,
# `out_loc`, `params.kvcache`, kPageBits and the kernel's own kPageBytes line, AlignedVector (its
# store(ptr, offset) writes sizeof(*this) bytes at ptr + offset * sizeof(*this), refused when
# misaligned or outside the cache) and PDLTriggerSecondary (nothing on the host). The branch must
# end the lane's work: running past it is an error, since the fp8 store follows in the kernel.
BRANCH_HARNESS = r"""
#include <sgl_kernel/deepseek_v4/bf16_index_k.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace sglang {

static uint8_t* g_base = nullptr;
static int64_t g_size = 0;
static int g_error = 0;  // 3: a store outside the cache or misaligned, 4: ran past the branch

template <typename T, std::size_t N>
struct AlignedVector {
  T v[N];
  T& operator[](std::size_t i) { return v[i]; }
  T operator[](std::size_t i) const { return v[i]; }
  void store(void* ptr, int64_t offset = 0) const {
    const int64_t at = static_cast<uint8_t*>(ptr) - g_base + offset * int64_t(sizeof v);
    if (at < 0 || at + int64_t(sizeof v) > g_size || at % int64_t(sizeof v) != 0) {
      g_error = 3;
      return;
    }
    std::memcpy(g_base + at, v, sizeof v);
  }
};

template <bool>
inline void PDLTriggerSecondary() {}

struct Params {
  uint8_t* kvcache;
};

template <int32_t kPageBits>
void bf16_branch(const Params& params, int64_t out_loc, uint32_t lane_id, const AlignedVector<float, 4>& data) {
  constexpr bool kBf16Store = true;
  constexpr bool kUsePDL = true;
  constexpr int64_t kHeadDim = 128;
  constexpr int64_t kVecSize = 4;
  @PAGE_BYTES@
  if constexpr (kBf16Store) {@BRANCH@
  }
  g_error = 4;
}

template <int32_t kPageBits>
int store_all(uint8_t* cache, int64_t size, const std::vector<long long>& locs, const std::vector<float>& rows) {
  g_base = cache;
  g_size = size;
  for (std::size_t i = 0; i < locs.size(); ++i) {
    for (uint32_t lane = 0; lane < 32; ++lane) {
      AlignedVector<float, 4> data;
      std::memcpy(data.v, &rows[i * 128 + lane * 4], sizeof data.v);
      bf16_branch<kPageBits>(Params{cache}, locs[i], lane, data);
      if (g_error) return g_error;
    }
  }
  return 0;
}

}  // namespace sglang

int main(int argc, char** argv) {
  const int page_bits = std::atoi(argv[1]);
  const long num_pages = std::atol(argv[2]);
  const long n = std::atol(argv[3]);
  std::FILE* in = std::fopen(argv[4], "rb");
  std::vector<long long> locs(n);
  std::vector<float> rows(n * 128);
  if (std::fread(locs.data(), 8, n, in) != size_t(n)) return 2;
  if (std::fread(rows.data(), 4, rows.size(), in) != rows.size()) return 2;
  std::vector<uint8_t> cache((num_pages * 256) << page_bits, 0);
  const int rc = page_bits == 6 ? sglang::store_all<6>(cache.data(), cache.size(), locs, rows)
               : page_bits == 2 ? sglang::store_all<2>(cache.data(), cache.size(), locs, rows)
                                : 2;
  if (rc) return rc;
  std::FILE* out = std::fopen(argv[5], "wb");
  std::fwrite(cache.data(), 1, cache.size(), out);
  std::fclose(out);
  return 0;
}
"""


@pytest.fixture(scope="module")
def branch_harness(patched_tree, tmp_path_factory):
    cxx = require_tool("c++", env="CXX", enables="the host run of the fused kernel's bf16 store branch")
    cuh = patched_tree.joinpath(*JIT, "csrc", "deepseek_v4", "fused_norm_rope_v2.cuh").read_text()
    kernel = cuh[cuh.index("INDEXER_KERNEL void fused_norm_rope_indexer(") :]
    page_bytes = re.search(r"constexpr int64_t kPageBytes = [^;]*;", kernel)
    branch = re.search(r"if constexpr \(kBf16Store\) \{(.*?)\n  \}\n", kernel, re.S)
    assert page_bytes and branch, "fused_norm_rope_indexer's kPageBytes or its bf16 store branch not found"
    work = tmp_path_factory.mktemp("bf16_branch")
    source = BRANCH_HARNESS.replace("@PAGE_BYTES@", page_bytes.group(0)).replace("@BRANCH@", branch.group(1))
    (work / "branch.cc").write_text(source)
    exe = work / "branch"
    cmd = [
        cxx,
        "-std=c++20",
        "-O1",
        f"-I{patched_tree.joinpath(*JIT, 'include')}",
        str(work / "branch.cc"),
        "-o",
        str(exe),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return exe


@pytest.mark.parametrize("page_bits", [6, 2])
def test_kernel_bf16_branch_stores_what_torch_stores(bi, branch_harness, tmp_path, page_bits):
    """The kernel's own store code run for every lane of every token: which lane writes which
    8 bytes of which slot's row, both words in order, and that the lane's work ends there.
    What feeds it (norm, rope, hadamard) and the launch run only on a GPU
    (tests/gpu/test_0001_bf16_indexer.py::test_store_kernel_matches_torch_reference)."""
    _store_rows_with(branch_harness, bi, tmp_path, page_bits)


def test_kernel_stores_through_the_layout_header(patched_tree):
    """The kernel includes the layout header and its bf16 branch reads as the header's calls.
    A pin of the text only: what catches a changed store is
    test_kernel_bf16_branch_stores_what_torch_stores, which runs that branch (docs/tests.md,
    the store-site mutation table)."""
    cuh = patched_tree.joinpath(*JIT, "csrc", "deepseek_v4", "fused_norm_rope_v2.cuh").read_text()
    assert f"#include <{LAYOUT_HEADER}>" in cuh
    branch = re.search(r"if constexpr \(kBf16Store\) \{(.*?)\n  \}\n", cuh, re.S)
    assert branch, "bf16 store branch not found"
    body = " ".join(branch.group(1).split())
    assert "const auto words = layout::lane_words(data);" in body
    assert "result[0] = words.word[0]; result[1] = words.word[1];" in body
    assert (
        "result.store(params.kvcache + layout::row_offset(out_loc, kPageBits) + layout::lane_offset(lane_id));"
    ) in body
    assert "static_assert(kPageBytes == layout::page_bytes(kPageBits));" in body
    assert body.rstrip().endswith("return;")


# ------------------------------------------------------------- kernel (nvcc)


def test_fused_kernel_bf16_indexer_store_compiles_for_sm120(patched_tree, tmp_path):
    nvcc = require_tool("nvcc", env="NVCC", enables="the sm_120 compile of the bf16 indexer store")
    jit = patched_tree.joinpath(*SGLANG, "kernels", "jit")
    cuh = jit / "csrc" / "deepseek_v4" / "fused_norm_rope_v2.cuh"
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
        nvcc,
        "-c",
        str(tu),
        "-o",
        str(obj),
        "-arch=sm_120",
        "-DSGL_CUDA_ARCH=1200",
        "-std=c++20",
        "-O3",
        "--expt-relaxed-constexpr",
        f"-I{jit / 'include'}",
        f"-I{jit / 'csrc'}",
        f"-I{tvm_libinfo.find_include_path()}",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    blob = obj.read_bytes()
    # fused_norm_rope_indexer<bf16|fp32, mode, 6, true, 0, kBf16Store=true>, both modes
    for dtype in (b"13__nv_bfloat16", b"f"):
        for mode in (b"0", b"1"):
            sym = (
                b"_ZN6sglang23fused_norm_rope_indexerI"
                + dtype
                + b"LNS_11ForwardModeE"
                + mode
                + b"ELi6ELb1ELi0ELb1EEEvNS_24FusedNormRopeStoreParamsE"
            )
            assert sym in blob, sym
    # the text, checked after the build so that a kernel that does not select the bf16 store
    # fails on the object's symbols above, not on a pin
    text = cuh.read_text()
    assert "static_assert(!(kIsIndexer && kBf16Store)" not in text
    assert re.search(r"fused_norm_rope_indexer<DType, kMode, kLogPageSize, kUsePDL, kPreshuffleSize, kBf16Store>", text)
    assert re.search(r"constexpr int64_t kPageBytes = \(kBf16Store \? 256ll : 132ll\) << kPageBits;", text)


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
    help_text = " ".join(ast.literal_eval(field.annotation.slice.elts[1]).split())
    assert "--enable-deepseek-v4-fp4-indexer" in help_text
    # behaviour, not the reports' diagnosis (issue 32): format, bytes, capacity, where it runs
    for needle in ("256 B per compressed token", "fp8 keys take 132 B", "fewer tokens in the KV pool", "sm_120 only"):
        assert needle in help_text, help_text
    assert not re.search(r"(?i)lost (the )?needle|recall", help_text), help_text


BF16_MODULE = "sglang.srt.layers.attention.dsv4.bf16_indexer"


class _Env:
    def __init__(self, value=False, explicit=False):
        self.value, self.explicit = value, explicit

    def get(self):
        return self.value

    def is_set(self):
        return self.explicit

    def set(self, value):
        self.value = value


class _Envs:
    """Every env var off and unset, except those given."""

    def __init__(self, **given):
        self.__dict__.update(given)

    def __getattr__(self, name):
        env = _Env()
        setattr(self, name, env)
        return env


class _Falsy:
    """Every attribute not given is None: a server with nothing else switched on."""

    def __init__(self, **given):
        self.__dict__.update(given)

    def __getattr__(self, name):
        return None


def _run_environment_hook(
    patched_tree,
    bi,
    *,
    bf16,
    decode="full",
    prefill="breakable",
    explicit=None,
    sm120=True,
    model_type="deepseek_v4",
    hisparse=False,
):
    """Runs the patched serving_hook.handle_environment_variables on a stand-in server config,
    recording every import it makes; returns (imports, warnings, the overlap env)."""
    import builtins
    import logging
    from types import SimpleNamespace

    source = _src(patched_tree, "srt", "arg_groups", "serving_hook.py")
    fn = _func(source, "handle_environment_variables")
    imports, warnings = [], []
    real_import = builtins.__import__

    def recording_import(name, globals=None, locals=None, fromlist=(), level=0):
        imports.append(name)
        if name == BF16_MODULE:
            return bi
        if name.split(".")[0] in ("sglang", "triton"):
            raise ImportError(f"not on the start-up path under test: {name}")
        return real_import(name, globals, locals, fromlist, level)

    overlap = _Env(True, explicit=explicit is not None) if explicit is None else _Env(explicit, True)
    cfg = _Falsy(
        enable_deepseek_v4_bf16_indexer=bf16,
        enable_deepseek_v4_fp4_indexer=False,
        enable_hisparse=hisparse,
        cuda_graph_config={"decode": SimpleNamespace(backend=decode), "prefill": SimpleNamespace(backend=prefill)},
    )
    logger = logging.getLogger("test_0001_hook")
    logger.warning = lambda msg, *args: warnings.append(msg % args if args else msg)
    ns = {
        "__builtins__": {**vars(builtins), "__import__": recording_import},
        "resolving_view": lambda server_args: cfg,
        "handle_multimodal_feature_transport": lambda server_args: None,
        "declare_resolution": lambda *a, **k: None,
        "envs": _Envs(**{OVERLAP: overlap}),
        "get_platform": lambda: _Falsy(is_cuda=True, is_sm120=sm120),
        "model_config_of": lambda server_args: SimpleNamespace(hf_config=SimpleNamespace(model_type=model_type)),
        "is_gfx95_supported": lambda: False,
        "logger": logger,
        "Phase": SimpleNamespace(ALL=("decode", "prefill")),
        "Backend": SimpleNamespace(DISABLED="disabled"),
        "Any": object,
    }
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "<serving_hook>", "exec"), ns)
    ns["handle_environment_variables"](object())
    return imports, warnings, overlap


def test_server_start_imports_no_triton_without_the_switch(bi, patched_tree):
    """Every server runs this hook: without the switch it imports neither bf16_indexer nor Triton
    (CPU wheels and macOS have no Triton) and leaves the overlap alone."""
    imports, warnings, overlap = _run_environment_hook(patched_tree, bi, bf16=False)
    assert imports == [] and warnings == []
    assert overlap.get() is True
    serving_hook = ast.parse(_src(patched_tree, "srt", "arg_groups", "serving_hook.py"))
    top_level = [ast.unparse(n) for n in serving_hook.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any("bf16_indexer" in line or "triton" in line for line in top_level), top_level
    # the module itself needs Triton: that is why it is imported only with the switch
    module = ast.parse(_src(patched_tree, *DSV4[2:], "bf16_indexer.py"))
    assert "import triton" in [ast.unparse(n) for n in module.body if isinstance(n, ast.Import)]


@pytest.mark.parametrize(
    "decode, prefill",
    [
        ("full", "disabled"),  # a PD decode server (apply_cuda_graph_disaggregation_roles)
        ("disabled", "breakable"),  # a PD prefill server at CUDA's default prefill backend
        ("disabled", "full"),
        ("full", "breakable"),  # a colocated server at the defaults
    ],
)
def test_switch_turns_the_overlap_off_in_every_capturing_phase(bi, patched_tree, decode, prefill):
    imports, warnings, overlap = _run_environment_hook(patched_tree, bi, bf16=True, decode=decode, prefill=prefill)
    assert imports == [BF16_MODULE]
    phases = " and ".join(p for p, backend in (("decode", decode), ("prefill", prefill)) if backend != "disabled")
    unmeasured = (
        " The race was seen on decode; prefill shares the capture path, and what turning the overlap "
        "off there costs has not been measured."
    )
    assert warnings == [
        f"Setting {OVERLAP}=0 (default on) for --enable-deepseek-v4-bf16-indexer with {phases} CUDA graphs: "
        "under graph capture the C4 indexer's alternate stream races with main-stream tensors on the bf16 "
        "path (graph-pool intermediates alias)." + (unmeasured if prefill != "disabled" else "")
    ]
    assert overlap.get() is False


def test_switch_refuses_an_explicit_overlap_and_keeps_eager_servers(bi, patched_tree):
    with pytest.raises(ValueError, match=f"{OVERLAP}=1 cannot be combined with --enable-deepseek-v4-bf16-indexer"):
        _run_environment_hook(patched_tree, bi, bf16=True, decode="disabled", prefill="breakable", explicit=True)
    # no phase captures: the alternate stream never runs under capture, nothing changes
    imports, warnings, overlap = _run_environment_hook(
        patched_tree, bi, bf16=True, decode="disabled", prefill="disabled"
    )
    assert (imports, warnings, overlap.get()) == ([BF16_MODULE], [], True)
    # the model reads the switch when it builds its streams, after this hook has run
    model = _src(patched_tree, "srt", "models", "deepseek_v4.py")
    assert f"envs.{OVERLAP}.get()" in ast.unparse(_func(model, "__init__", cls="MQALayer"))


def test_switch_validation_runs_in_the_hook(bi, patched_tree):
    source = _src(patched_tree, "srt", "arg_groups", "serving_hook.py")
    calls = [
        c
        for c in ast.walk(_func(source, "handle_environment_variables"))
        if isinstance(c, ast.Call) and getattr(c.func, "id", None) == "validate_bf16_indexer_args"
    ]
    assert len(calls) == 1
    assert {k.arg: ast.unparse(k.value) for k in calls[0].keywords} == {
        "fp4": "cfg.enable_deepseek_v4_fp4_indexer",
        "is_cuda": "get_platform().is_cuda",
        "is_sm120": "get_platform().is_sm120",
        "model_type": "model_config_of(server_args).hf_config.model_type",
        "hisparse": "cfg.enable_hisparse",
    }


@pytest.mark.parametrize(
    "given, refusal",
    [
        ({"sm120": False}, "runs on sm_120 GPUs only"),
        ({"model_type": "deepseek_v41"}, "DeepSeek-V4.1"),
        ({"hisparse": True}, "--enable-hisparse"),
    ],
)
def test_server_start_refuses_what_has_not_run(bi, patched_tree, given, refusal):
    """The hook itself, run on a stand-in config: an sm_90/sm_100 GPU, DeepSeek-V4.1 or HiSparse
    stops the start with the switch on, and is left alone without it."""
    with pytest.raises(ValueError, match=re.escape(refusal)):
        _run_environment_hook(patched_tree, bi, bf16=True, **given)
    imports, warnings, overlap = _run_environment_hook(patched_tree, bi, bf16=False, **given)
    assert (imports, warnings, overlap.get()) == ([], [], True)


def test_index_store_asks_the_layers_own_pool(patched_tree):
    """compressor_v2 asks DeepSeekV4TokenToKVPool.index_k_is_bf16(layer_id), which reads the pool of
    the layer's own compression ratio: a model whose C4 index pool is None (only low-ratio pools)
    answers False instead of an AttributeError on None."""
    from types import SimpleNamespace

    source = _src(patched_tree, "srt", "mem_cache", "deepseek_v4_memory_pool.py")
    methods = [_func(source, name, cls="DeepSeekV4TokenToKVPool") for name in ("index_k_is_bf16", "_indexer_pool")]
    pool_cls = ast.ClassDef(name="Pool", bases=[], keywords=[], body=methods, decorator_list=[], type_params=[])
    ns = {"DeepSeekV4IndexerPool": object}
    exec(compile(ast.fix_missing_locations(ast.Module(body=[pool_cls], type_ignores=[])), "<pool>", "exec"), ns)

    low_ratio_only = ns["Pool"]()
    low_ratio_only.c4_indexer_kv_pool = None
    low_ratio_only.index_pools = {1: SimpleNamespace(use_bf16_indexer=False)}
    low_ratio_only.layer_mapping = {3: (1, 0, None)}
    assert low_ratio_only.index_k_is_bf16(3) is False

    v4 = ns["Pool"]()
    v4.index_pools = {4: SimpleNamespace(use_bf16_indexer=True), 128: SimpleNamespace(use_bf16_indexer=False)}
    v4.c4_indexer_kv_pool = v4.index_pools[4]
    v4.layer_mapping = {2: (4, 1, None), 5: (128, 0, None)}
    assert (v4.index_k_is_bf16(2), v4.index_k_is_bf16(5)) == (True, False)


def test_pd_kv_layout_carries_the_index_format(bi, patched_tree, monkeypatch):
    """Runs the pool's real pd_kv_layout on a stand-in pool: a bf16 prefill and an fp8
    decode (the pair the finding describes) now hand the handshake different strings."""
    import sys
    from types import SimpleNamespace

    source = _src(patched_tree, "srt", "mem_cache", "deepseek_v4_memory_pool.py")
    method = _func(source, "pd_kv_layout", cls="DeepSeekV4TokenToKVPool")
    ns = {"KVLayout": SimpleNamespace(UNIFORM_FP8=SimpleNamespace(value="uniform_fp8"))}
    exec(compile(ast.Module(body=[method], type_ignores=[]), "<pool>", "exec"), ns)
    # fp8, fp4 and no index pool never import the Triton module: None in sys.modules makes an import fail
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.attention.dsv4.bf16_indexer", None)

    def pool(fp4=False, bf16=False, uniform=False, index=True):
        return SimpleNamespace(
            uniform_fp8=uniform,
            compression_ratios=[0, 4, 128],
            kv_layout=SimpleNamespace(value="v4"),
            compressed_kv_layout=lambda ratio: SimpleNamespace(value="v4"),
            c4_indexer_kv_pool=SimpleNamespace(use_fp4_indexer=fp4, use_bf16_indexer=bf16) if index else None,
        )

    layout = ns["pd_kv_layout"]
    assert layout(pool()) == "v4,c4:v4,c128:v4"  # upstream's string for fp8
    assert layout(pool(fp4=True)) == "v4,c4:v4,c128:v4"  # upstream's fp4 string, unchanged
    assert layout(pool(index=False)) == "v4,c4:v4,c128:v4"
    assert layout(pool(fp4=True, uniform=True)) == "uniform_fp8"
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.attention.dsv4.bf16_indexer", bi)
    assert layout(pool(bf16=True)) == "v4,c4:v4,c128:v4,c4-index-k:bf16"
    assert layout(pool(bf16=True, uniform=True)) == "uniform_fp8,c4-index-k:bf16"
    assert layout(pool(bf16=True)) != layout(pool())

    # the handshake's mismatch error names the switch
    conn = _src(patched_tree, "srt", "disaggregation", "common", "conn.py")
    assert "--enable-deepseek-v4-bf16-indexer / --enable-deepseek-v4-fp4-indexer" in conn


def test_field_appended_to_positional_order(patched_tree):
    source = _src(patched_tree, "srt", "arg_groups", "field_order.py")
    order = ast.literal_eval(
        next(
            n.value
            for n in ast.parse(source).body
            if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "POSITIONAL_FIELD_ORDER"
        )
    )
    assert order.count("enable_deepseek_v4_bf16_indexer") == 1
    # appended after upstream's last entry, nothing reordered (later patches append after it)
    assert order[order.index("return_aux_hidden_state_layer_ids") + 1] == "enable_deepseek_v4_bf16_indexer"


def test_pool_bytes_per_token(patched_tree):
    source = _src(patched_tree, "srt", "mem_cache", "deepseek_v4_memory_pool.py")
    ns = {}
    exec(
        compile(
            ast.Module(body=[_func(source, "get_dsv4_indexer_bytes_per_token")], type_ignores=[]), "<pool>", "exec"
        ),
        ns,
    )
    fn = ns["get_dsv4_indexer_bytes_per_token"]
    assert (fn(128, False), fn(128, True), fn(128, False, True)) == (132, 68, 256)
    init = ast.unparse(_func(source, "__init__", cls="DeepSeekV4IndexerPool"))
    assert "self.use_bf16_indexer = not use_fp4_indexer and get_exec().kernel.enable_deepseek_v4_bf16_indexer" in init
    per_token = ast.unparse(_func(source, "get_bytes_per_token", cls="DeepSeekV4IndexerPool"))
    assert "self.use_bf16_indexer" in per_token
    budget = _src(patched_tree, "srt", "model_executor", "pool_configurator.py")
    calls = [
        ast.unparse(c)
        for c in ast.walk(ast.parse(budget))
        if isinstance(c, ast.Call)
        and getattr(c.func, "id", None) == "get_dsv4_indexer_bytes_per_token"
        and ast.unparse(c.args[0]) == "self.indexer_head_dim"
        and not c.keywords
    ]
    assert len(calls) == 1, calls  # the C4 budget (the low-ratio one is fp4 by keyword)
    assert calls[0].endswith(", get_exec().kernel.enable_deepseek_v4_bf16_indexer)"), calls


def test_store_path_asks_for_bf16(patched_tree):
    source = _src(patched_tree, "srt", "layers", "attention", "dsv4", "compressor_v2.py")
    fn = _func(source, "forward_unified", cls="CompressorBackendMixin")
    branch = next(
        n for n in ast.walk(fn) if isinstance(n, ast.If) and ast.unparse(n.test) == "compressor.is_in_indexer"
    )
    body = ast.unparse(ast.Module(body=branch.body, type_ignores=[]))
    assert "bf16_store = token_to_kv_pool.index_k_is_bf16(layer_id)" in body
    assert "c4_indexer_kv_pool" not in ast.unparse(fn)  # None on a model without a C4 index pool
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
    assert (
        "index_k_page_view(c4_indexer_kv_cache, 64, c4_indexer.head_dim, index_k_format(use_fp4_indexer, c4_indexer.use_bf16_indexer))"
        in text
    )
    # the scorer chain: bf16 is chosen before TileLang / aiter / torch-fp8 / DeepGEMM
    chain = next(n for n in ast.walk(reader) if isinstance(n, ast.If) and "fp8_fp4_paged_mqa_logits" in ast.unparse(n))
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
    refusals = [
        n for n in ast.walk(nonpaged) if isinstance(n, ast.If) and "c4_indexer.use_bf16_indexer" in ast.unparse(n.test)
    ]
    assert len(refusals) == 1
    assert ast.unparse(refusals[0].body[0]) == "return False"
