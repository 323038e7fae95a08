"""DeepSeek-V4 sparse MLA decode references for patch 0002's tests (CPU and GPU).

A paged cache in the DSv4 FP8 layout (448 FP8 nope + 64 BF16 rope + UE8M0 scales, 584
bytes/token, pages padded to a multiple of 576 bytes as the DeepSeekV4 pool pads them), a plain
torch reference of sparse MLA decode, the tolerance both test tiers apply, and upstream's own
torch backend lifted from the patched tree with ``ast`` (its module imports sglang). Needs only
torch, imported at first use: no environment is touched, so the GPU tests can load it as well.
"""

from __future__ import annotations

import ast
import importlib
import math
from pathlib import Path

from helpers import lazy

torch = lazy("torch")

NOPE, ROPE, D = 448, 64, 512
BYTES_PER_TOKEN = 584
SCALE = D**-0.5
ATTN = ("python", "sglang", "kernels", "ops", "attention")


def upstream_sparse_decode_fwd(patched_tree: Path):
    """upstream's torch backend (_gather_and_dequant + _sm120_sparse_decode_fwd)."""
    path = Path(patched_tree).joinpath(*ATTN, "flash_mla_sm120.py")
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
            and node.targets[0].id
            in {"_NOPE_DIM", "_ROPE_DIM", "_NOPE_ROPE_STRIDE", "_TILE_SIZE", "_NUM_TILES", "_SCALE_STRIDE", "_D"}
        ):
            body.append(node)
    assert {n.name for n in body if isinstance(n, ast.FunctionDef)} == wanted_fns
    namespace = {"torch": importlib.import_module("torch"), "math": math}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["_sm120_sparse_decode_fwd"]


def make_cache(num_pages, page_size, gen, device="cpu"):
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
    kv[:, :NOPE] = (nope.float().view(n, 7, 64) * torch.exp2(scales.float() - 127.0).view(n, 7, 1)).view(n, NOPE)
    kv[:, NOPE:] = rope.float()
    # the backend's view: [pages, page_size, 1, 584] over the padded page buffer
    raw = raw.to(device)
    k_cache = (
        raw[:, : page_size * BYTES_PER_TOKEN].view(num_pages, page_size, 1, BYTES_PER_TOKEN).view(torch.float8_e4m3fn)
    )
    return k_cache, kv.to(torch.bfloat16).float().to(device)


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
            bad |= torch.arange(idx.shape[1], device=idx.device)[None, :] >= tlen.long()[:, None]
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
