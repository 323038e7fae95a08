"""Measurements the registry records as its own ("measured here"), re-measured on this machine.

register-pressure-rewrite was to be revisited "if a profile shows register spills in the MMA
kernel". Compiling patch 0002's split kernel offline for sm_120a (Triton's own compiler and the
ptxas it ships; no GPU) shows how many registers it takes and what it spills. The entry quotes
the numbers below for Triton 3.9.0; another Triton may give other numbers, so only there are
they compared exactly.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

MMA = "python/sglang/kernels/ops/attention/flash_mla_sm120_mma.py"
REGISTRY = Path(__file__).resolve().parent.parent / "retread.toml"


def compile_split_kernel(tree: Path, tmp: Path, *, num_warps: int, num_stages: int) -> dict[str, Any]:
    """ptxas's resource report for _mma_sparse_decode_split as the decode path launches it."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas-blackwell"
    if not ptxas.is_file():
        pytest.skip(f"this Triton ships no ptxas for Blackwell ({ptxas})")
    spec = importlib.util.spec_from_file_location("flash_mla_sm120_mma", tree / MMA)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = module._mma_sparse_decode_split
    pointers = {"Q_ptr": "*bf16", "cache_fp8_ptr": "*fp8e4nv", "cache_uint8_ptr": "*u8", "cache_bf16_ptr": "*bf16",
                "indices_ptr": "*i32", "topk_len_ptr": "*i32", "O_ptr": "*fp32", "LSE_ptr": "*fp32",
                "sink_ptr": "*fp32"}
    # what _launch_split passes for a split launch with topk_length and no sink (module constants)
    constants = {"HAS_TOPK_LEN": True, "DIRECT": False, "HAS_SINK": False, "NOPE_DIM": module._NOPE_DIM,
                 "NOPE_PAD": module._NOPE_PAD, "ROPE_DIM": module._ROPE_DIM, "TOKEN_STRIDE": module._TOKEN_DATA_STRIDE,
                 "SCALE_STRIDE": module._SCALE_STRIDE, "BLOCK_H": module.MMA_BLOCK_H, "BLOCK_T": module.MMA_BLOCK_T,
                 "OP_DTYPE": triton.language.bfloat16}
    names = list(kernel.arg_names)
    signature = {n: pointers.get(n, "constexpr" if n in constants else "fp32" if n == "sm_scale" else "i32")
                 for n in names}
    source = ASTSource(fn=kernel, signature=signature, constexprs={(names.index(k),): v for k, v in constants.items()})
    compiled = triton.compile(source, target=GPUTarget("cuda", 120, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages,
                                       "enable_fp_fusion": True})  # Triton 3.9's launch default
    ptx = tmp / f"split-w{num_warps}-s{num_stages}.ptx"
    ptx.write_text(compiled.asm["ptx"])
    arch = re.search(r"^\.target (sm_\w+)", compiled.asm["ptx"], re.MULTILINE)
    assert arch is not None and arch.group(1) == "sm_120a"
    res = subprocess.run([str(ptxas), f"-arch={arch.group(1)}", "-v", str(ptx), "-o", str(ptx.with_suffix(".cubin"))],
                         capture_output=True, text=True, check=True)
    report = res.stdout + res.stderr
    usage = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", report)
    registers = re.search(r"Used (\d+) registers", report)
    assert usage is not None and registers is not None, report
    stack, stores, loads = (int(x) for x in usage.groups())
    return {"registers": int(registers.group(1)), "spill_stores": stores, "spill_loads": loads, "stack": stack,
            "shared": compiled.metadata.shared, "triton": triton.__version__}


@pytest.mark.upstream
@pytest.mark.slow
def test_mma_split_kernel_spills_at_num_warps_4(patched_tree: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))  # compile it, do not reuse a result
    w4 = compile_split_kernel(patched_tree, tmp_path, num_warps=4, num_stages=2)
    w8 = compile_split_kernel(patched_tree, tmp_path, num_warps=8, num_stages=2)
    assert w4["spill_stores"] > 0 and w4["spill_loads"] > 0  # the revisit condition: spills in the MMA kernel
    assert w8["spill_stores"] == 0 and w8["spill_loads"] == 0
    if w4["triton"] == "3.9.0":  # the toolchain retread.toml names
        assert w4 == {"registers": 255, "spill_stores": 364, "spill_loads": 356, "stack": 352, "shared": 34880,
                      "triton": "3.9.0"}
        assert w8 == {"registers": 255, "spill_stores": 0, "spill_loads": 0, "stack": 0, "shared": 34880,
                      "triton": "3.9.0"}
        text = REGISTRY.read_text()
        assert "255 registers; 364 B spill stores, 356 B spill loads, 352 B stack frame" in text
        assert "255 registers and 364 B of spill stores per thread" in text
