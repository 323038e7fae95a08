"""0000: the runner's own check, no patch: a CUDA matmul against the same product on the CPU.

It proves the GPU, torch's CUDA build and the results file work before any patch's check is read.
"""

from __future__ import annotations

import gpu_support


def test_cuda_matmul_matches_cpu(record):
    gpu_support.require_cuda()
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(512, 384, generator=gen, dtype=torch.float64)
    b = torch.randn(384, 256, generator=gen, dtype=torch.float64)
    want = a @ b
    got = (a.cuda() @ b.cuda()).cpu()
    err = (got - want).abs().max().item()
    record(max_abs_err=err, shape="512x384x256", dtype="float64")
    # float64 products of 384 terms: both sides round at ~1e-16 relative; 1e-9 leaves room for
    # another summation order and nothing for a wrong result
    assert err <= 1e-9 * want.abs().max().item(), err
