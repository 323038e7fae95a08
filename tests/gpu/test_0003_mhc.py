"""0003 on a GPU: the bf16 mHC pre GEMM compiled for the device and run, and the A/Bs.

One test per check that patchset.toml's ``[[patch.gpu_verification]]`` rows of
``dsv4-mhc-bf16-gemm`` name in their ``run``:

- ``test_bf16_gemm_vs_references`` (any CUDA GPU Triton compiles bf16 MMA for; sm_90+):
  the Triton GEMM + square-sum at decode and prefill token counts, split as upstream splits,
  against the bf16-weight GEMM it implements and upstream's fp32 GEMM;
- ``test_hc_pre_torch_path`` (CUDA): hc_pre's bf16 torch path (torch.mm with fp32 output)
  against upstream's fp32 hc_pre_torch_impl;
- ``test_launch_resources`` (sm_120): what the driver reports equals the offline sm_120a
  compile of tests/patches/test_0003_mhc_bf16_gemm.py;
- ``test_gemm_time_ab`` (sm_120): the GEMM stage alone, bf16 Triton vs the fp32 GEMM of
  hc_pre's torch path, printed (run with -s);
- ``test_cuda_graph_replay_after_weight_refresh`` (CUDA): hc_pre's bf16 path captured, the fp32
  weights updated in place and the layer refreshed (``refresh_layer_bf16_gemm_weights``, as
  ``post_load_weights`` runs after a weight update), replayed: the graph reads the new weights;
- ``test_needle_recall_deployment`` (a running PD deployment, its router at
  $PATCHTOOL_GPU_DEPLOYMENT; the GPUs are the deployment's, not this machine's): needle-in-haystack
  recall, run once with the decode and prefill servers at SGLANG_OPT_MHC_BF16_GEMM=0 and once at 1.

The serving A/B against the deployment is in test_0003_deploy.py.
"""

from __future__ import annotations

import ast
import json
import os
import random
import types
import urllib.request
from pathlib import Path

import gpu_support
import pytest
import torch
import torch.nn.functional as F

from helpers import load_module

HERE = Path(__file__).resolve().parent
LAYERNORM = ("python", "sglang", "kernels", "ops", "layernorm")
K_REAL, N_REAL = 4 * 4096, 24  # V4-Flash: hc_mult 4 x hidden 4096, (2 + 4) * 4 mixes
BF16_U = 2.0**-8
RMS_EPS = 1e-6
TOKENS = (1, 8, 32, 64, 96, 512, 8192)
# tests/patches/test_0003_mhc_bf16_gemm.py: Triton 3.8.0's offline sm_120a compile (188 SMs; 3.9.0's is the same).
OFFLINE = {
    1: dict(registers=48, spills=0, shared=12288),
    32: dict(registers=48, spills=0, shared=16384),
    64: dict(registers=68, spills=0, shared=24576),
    8192: dict(registers=68, spills=0, shared=24576),
}


def _func(tree, name):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.fixture(scope="module")
def tree(patched_tree_gpu):
    assert os.environ.get("TRITON_INTERPRET", "0") != "1", (
        "TRITON_INTERPRET=1 is set (the CPU kernel tests set it): run tests/gpu in its own process"
    )
    return Path(patched_tree_gpu)


@pytest.fixture(scope="module")
def gemm(tree):
    return load_module(tree.joinpath(*LAYERNORM, "mhc_bf16_gemm.py"), "_mhc_bf16_gemm_gpu")


@pytest.fixture(scope="module")
def mhc_bf16(tree):
    return load_module(tree / "python/sglang/srt/models/deepseek_common/mhc_bf16.py", "_mhc_bf16_gpu")


@pytest.fixture(scope="module")
def num_splits(tree):
    """upstream's _compute_num_split_for_mhc_pre, on this device's SM count."""
    fn = _func(ast.parse(tree.joinpath(*LAYERNORM, "mhc.py").read_text()), "_compute_num_split_for_mhc_pre")
    ns = {"torch": torch}
    exec(compile(ast.Module([fn], []), "_compute_num_split_for_mhc_pre", "exec"), ns)
    return ns["_compute_num_split_for_mhc_pre"]


@pytest.fixture(scope="module")
def hc_pre_torch_impl(tree):
    """upstream's fp32 hc_pre_torch_impl, nested in DeepseekV4DecoderLayerBase.hc_pre."""
    v4 = ast.parse((tree / "python/sglang/srt/models/deepseek_v4.py").read_text())
    cls = next(n for n in v4.body if isinstance(n, ast.ClassDef) and n.name == "DeepseekV4DecoderLayerBase")
    impl = _func(_func(cls, "hc_pre"), "hc_pre_torch_impl")
    impl.decorator_list = []
    ns = {"torch": torch, "F": F, "self": types.SimpleNamespace(rms_norm_eps=RMS_EPS)}
    exec(compile(ast.Module([impl], []), "hc_pre_torch_impl", "exec"), ns)
    return ns["hc_pre_torch_impl"]


def _operands(tokens, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(tokens, K_REAL, generator=g) * 3).bfloat16()
    x[:, 7] *= 30.0
    fn = torch.randn(N_REAL, K_REAL, generator=g) * (1.0 / K_REAL**0.5)
    return x.cuda(), fn.cuda()


def _bound(x, fn):
    return (BF16_U + 4 * K_REAL * 2.0**-24) * (x.float().abs() @ fn.abs().t()) + 1e-4


def test_bf16_gemm_vs_references(gemm, num_splits):
    gpu_support.require_cuda()
    for tokens in TOKENS:
        x, fn = _operands(tokens, seed=tokens)
        splits = num_splits(tokens, K_REAL)
        out = torch.full((splits, tokens, N_REAL), float("nan"), device="cuda")
        sq = torch.full((splits, tokens), float("nan"), device="cuda")
        gemm.mhc_pre_gemm_sqrsum_bf16(x, fn.bfloat16(), out, sq)
        torch.cuda.synchronize()
        assert not out.isnan().any() and not sq.isnan().any(), tokens
        xf = x.float()
        exact = xf @ fn.bfloat16().float().t()
        torch.testing.assert_close(out.sum(0), exact, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(sq.sum(0), xf.square().sum(-1), rtol=1e-5, atol=1e-3)
        assert torch.all((out.sum(0) - xf @ fn.t()).abs() <= _bound(x, fn)), tokens


def test_hc_pre_torch_path(mhc_bf16, hc_pre_torch_impl):
    gpu_support.require_cuda()
    for tokens in TOKENS:
        x, fn = _operands(tokens, seed=100 + tokens)
        x = x.view(tokens, 4, 4096)
        # The CUDA branch (torch.mm out_dtype): fp32 out, not a second bf16 rounding.
        assert mhc_bf16.bf16_mix_gemm(x.flatten(1), fn.bfloat16()).dtype == torch.float32
        x_flat_ref, mixes_ref = hc_pre_torch_impl(x, fn)
        x_flat, mixes = mhc_bf16.hc_pre_mixes_bf16(x, fn.bfloat16(), RMS_EPS)
        assert torch.equal(x_flat, x_flat_ref)
        rsqrt = torch.rsqrt(x_flat_ref.square().mean(-1, keepdim=True) + RMS_EPS)
        err = (mixes - mixes_ref).squeeze(1).abs()
        assert torch.all(err <= _bound(x.flatten(1), fn) * rsqrt), tokens
        _, exact = hc_pre_torch_impl(x, fn.bfloat16().float())
        torch.testing.assert_close(mixes, exact, rtol=1e-5, atol=1e-5)


def test_launch_resources(gemm, num_splits):
    gpu_support.require_sm120()
    support = load_module(HERE.parent / "patches" / "triton_support.py", "_triton_support_gpu3")
    seen = {}
    for tokens in OFFLINE:
        x, fn = _operands(tokens, seed=tokens)
        splits = num_splits(tokens, K_REAL)
        out = torch.empty(splits, tokens, N_REAL, device="cuda")
        sq = torch.empty(splits, tokens, device="cuda")
        with support.recorded_launches(gemm, "_mhc_pre_gemm_sqrsum_bf16_kernel") as launches:
            gemm.mhc_pre_gemm_sqrsum_bf16(x, fn.bfloat16(), out, sq)
        (launch,) = launches
        kernel = launch.kernel.run(*launch.args, grid=launch.grid, warmup=False, **launch.kwargs)
        torch.cuda.synchronize()
        seen[tokens] = dict(registers=kernel.n_regs, spills=kernel.n_spills, shared=kernel.metadata.shared)
    print("driver-reported resources:", seen)
    assert seen == OFFLINE


def test_gemm_time_ab(gemm, num_splits):
    """The mHC pre GEMM stage alone: the bf16 Triton GEMM + square-sum (split as upstream
    splits) vs the fp32 GEMM and square-sum hc_pre's torch path runs. Not the TileLang fp32
    kernels of the fused boundary: the decode A/B row measures the whole step."""
    gpu_support.require_sm120()
    rows = []
    for tokens in TOKENS:
        x, fn = _operands(tokens, seed=tokens)
        fn_bf16 = fn.bfloat16()
        splits = num_splits(tokens, K_REAL)
        out = torch.empty(splits, tokens, N_REAL, device="cuda")
        sq = torch.empty(splits, tokens, device="cuda")
        row = {
            "tokens": tokens,
            "bf16_triton_ms": gpu_support.cuda_time_ms(
                lambda x=x, w=fn_bf16, o=out, s=sq: gemm.mhc_pre_gemm_sqrsum_bf16(x, w, o, s)
            ),
            "fp32_torch_ms": gpu_support.cuda_time_ms(
                lambda x=x, w=fn: (F.linear(x.float(), w), x.float().square().sum(-1))
            ),
        }
        rows.append(row)
        print(row)
    assert all(row["bf16_triton_ms"] > 0 and row["fp32_torch_ms"] > 0 for row in rows)


# -- needle in a haystack against a running deployment ------------------------------------------

_FILLER = (
    "The river bends past the old mill, where the miller keeps his ledgers in a dry oak chest. ",
    "Every spring the orchard blooms white and the bees return to the hives behind the barn. ",
    "Traders from the coast bring salt and cloth, and leave with wool, cheese and cider. ",
)


def _haystack(tokens, depth, needle, rng):
    # ~20 tokens per filler sentence for DeepSeek's tokenizer; the report's boundary was ~4k.
    sentences = [rng.choice(_FILLER) for _ in range(max(1, tokens // 20))]
    sentences.insert(int(len(sentences) * depth), needle + " ")
    return "".join(sentences)


def _chat(url, model, prompt):
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 512,
            "temperature": 0,
        }
    ).encode()
    req = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        message = json.loads(resp.read())["choices"][0]["message"]
    return (message.get("content") or "") + (message.get("reasoning_content") or "")


def test_needle_recall_deployment():
    url = gpu_support.require_deployment().router
    with urllib.request.urlopen(f"{url}/v1/models", timeout=60) as resp:
        model = json.loads(resp.read())["data"][0]["id"]
    rng = random.Random(0)
    results = {}
    for tokens in (2000, 4000, 8000, 12000):
        for depth in (0.1, 0.5, 0.9):
            code = f"{rng.randrange(10**6):06d}"
            needle = f"The secret passphrase for the archive is {code}."
            prompt = (
                _haystack(tokens, depth, needle, rng)
                + "\n\nWhat is the secret passphrase for the archive? Answer with the number only."
            )
            results[(tokens, depth)] = code in _chat(url, model, prompt)
    print("needle recall (context tokens, depth) -> found:", results)
    assert all(results.values()), results


def test_cuda_graph_replay_after_weight_refresh(mhc_bf16, record):
    """A captured decode graph holds the bf16 copy's address: a weight update must refresh the copy
    in place (``refresh_bf16_gemm_weight`` overwrites a fitting copy), or every replay after it
    reads the old weights. Captured at 64 tokens, weights replaced in place, the layer refreshed,
    replayed: equal to eager on the new weights."""
    gpu_support.require_cuda()
    x, fn_attn = _operands(64, seed=5)
    _, fn_ffn = _operands(1, seed=6)
    layer = types.SimpleNamespace(hc_attn_fn=fn_attn, hc_ffn_fn=fn_ffn, hc_pre_from_prev_sublayer=False)
    assert mhc_bf16.refresh_layer_bf16_gemm_weights(layer, flag=True, on_cuda=True, batch_invariant=False)
    copy = mhc_bf16.mhc_gemm_weight(layer, layer.hc_attn_fn, x)
    assert copy.dtype == torch.bfloat16

    def step():
        return mhc_bf16.hc_pre_mixes_bf16(x, mhc_bf16.mhc_gemm_weight(layer, layer.hc_attn_fn, x), RMS_EPS)[1]

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    _, new_fn = _operands(64, seed=7)
    layer.hc_attn_fn.copy_(new_fn)  # a weight update writes the fp32 parameter in place
    mhc_bf16.refresh_layer_bf16_gemm_weights(layer, flag=True, on_cuda=True, batch_invariant=False)
    same_copy = mhc_bf16.mhc_gemm_weight(layer, layer.hc_attn_fn, x).data_ptr() == copy.data_ptr()
    graph.replay()
    torch.cuda.synchronize()
    eager = step()
    record(copy_refreshed_in_place=same_copy, replay_equals_eager=torch.equal(captured, eager))
    assert same_copy, "the refresh made a new bf16 copy: the captured graph still reads the old one"
    assert torch.equal(captured, eager), "the replay after the refresh does not read the new weights"
