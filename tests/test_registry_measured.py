"""Measurements the registry records as its own ("measured here"), re-measured on this machine.

register-pressure-rewrite is to be revisited "if a profile shows register spills in the MMA
kernel". Without a GPU the nearest evidence is ptxas's resource report for patch 0002's split
kernel, compiled offline for sm_120a through Triton's compile API and the ptxas it ships. What
ptxas allocates depends on what Triton knows about the arguments: a launch tells it which
pointers and integers are multiples of 16 (and turns an integer 1 into a constant). So the
kernel is compiled from a recorded launch on DSv4-shaped caches, once with those facts, once
with page_bytes not a multiple of 16, and once with none.

retread.toml quotes the figures with the kernel's sha256 and the Triton version they were
measured with; this test computes the same figures and asserts the registry's text has them. A
figure for another kernel or another Triton is stale evidence: it fails, naming both, with the
figures to record instead.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MMA = "python/sglang/kernels/ops/attention/flash_mla_sm120_mma.py"
REGISTRY = Path(__file__).resolve().parent.parent / "retread.toml"
ENTRY = "register-pressure-rewrite"
# the recorded launch: a C64 decode step, 64 heads, SWA and c4 pages as DSv4 lays them out
BATCH, HEADS, SWA_PAGE, C4_PAGE = 64, 64, 256, 64
TARGET = ("cuda", 120, 32)  # Triton's GPUTarget for sm_120, 32-thread warps
TEST = "test_mma_split_kernel_spills_only_without_the_launch_alignment"


def recorded() -> tuple[str, dict[str, str]]:
    """retread.toml's evidence row this test measures: (its text, its conditions)."""
    import tomllib

    entry = next(e for e in tomllib.loads(REGISTRY.read_text())["rejected"] if e["id"] == ENTRY)
    (row,) = [r for r in entry["evidence"] if r["source"].endswith(f"::{TEST}")]
    return f"{row['before']} {row['after']}", row["conditions"]


def stale(conditions: dict[str, str], digest: str, triton: str) -> str | None:
    """Why the recorded figures are not for this kernel and Triton, or None."""
    kernel = re.search(r"kernel sha256 ([0-9a-f]{12})\b", conditions["kernel"])
    toolchain = re.search(r"Triton (\S+) ", conditions["toolchain"])
    assert kernel and toolchain, conditions
    if kernel.group(1) != digest:
        return f"retread.toml's {ENTRY} figures are for kernel sha256 {kernel.group(1)}; the shipped kernel is {digest}"
    if toolchain.group(1) != triton:
        return f"retread.toml's {ENTRY} figures were measured with Triton {toolchain.group(1)}; this is Triton {triton}"
    return None


def figures(launch: dict[str, int], unaligned: dict[str, int], bare: dict[str, int]) -> list[str]:
    """The registry's wording of the three compiles' figures."""
    assert launch["spill_stores"] == launch["spill_loads"] == 0
    return [
        f"{launch['registers']} registers, no spills, {launch['shared']:,} B shared memory",
        f"{unaligned['registers']} registers, {unaligned['spill_stores']} B spill stores",
        f"{bare['registers']} registers, {bare['spill_stores']} B spill stores, {bare['spill_loads']} B spill loads; "
        f"{bare['shared']:,} B shared memory",
    ]


def load_kernel_module(tree: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("flash_mla_sm120_mma", tree / MMA)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded_split_launch(module: ModuleType) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The first split-kernel launch of a C64 decode step on DSv4 caches laid out as upstream's pool
    lays them out (pages padded to a multiple of 576 B): (kernel, arguments by name, options)."""
    import torch

    kernel = module._mma_sparse_decode_split
    launches: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    class Recorder:
        def __getitem__(self, grid: Any) -> Any:
            return lambda *args, **kwargs: launches.append((args, kwargs))

    def cache(pages: int, page_size: int) -> torch.Tensor:
        padded = -(-page_size * 584 // 576) * 576
        pool = torch.zeros(pages, padded, dtype=torch.uint8)
        return pool.as_strided((pages, page_size, 1, 584), (padded, 584, 584, 1))

    batch, heads = BATCH, HEADS
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "_mma_sparse_decode_split", Recorder())
        mp.setattr(module, "_mma_sparse_decode_combine", Recorder())
        module.flash_mla_sparse_decode_mma(
            torch.zeros(batch, 1, heads, 512, dtype=torch.bfloat16),
            cache(8, SWA_PAGE),
            torch.zeros(batch, 1, 128, dtype=torch.int32),
            torch.full((batch,), 128, dtype=torch.int32),
            None,
            512,
            None,
            cache(8, C4_PAGE),
            torch.zeros(batch, 1, 512, dtype=torch.int32),
            torch.full((batch,), 512, dtype=torch.int32),
            target_ctas=0,
        )
    args, kwargs = next((a, k) for a, k in launches if "DIRECT" in k)
    names = list(kernel.arg_names)
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages")}
    return kernel, {**dict(zip(names, args, strict=False)), **kwargs}, options


def compile_resources(
    kernel: Any,
    values: dict[str, Any],
    options: dict[str, Any],
    tmp: Path,
    *,
    facts: bool,
    not_aligned: tuple[str, ...] = (),
) -> dict[str, int]:
    """ptxas's report for ``kernel`` compiled for sm_120a; ``facts``: with what a launch tells Triton."""
    import triton
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas-blackwell"
    if not ptxas.is_file():
        pytest.skip(f"this Triton ships no ptxas for Blackwell ({ptxas})")
    signature: dict[str, str] = {}
    constants: dict[tuple[int, ...], Any] = {}
    attrs: dict[tuple[int, ...], Any] = {}
    for i, name in enumerate(kernel.arg_names):
        value = values[name]
        if kernel.params[i].is_constexpr:
            signature[name], constants[(i,)] = "constexpr", value
            continue
        kind, key = native_specialize_impl(BaseBackend, value, False, True, True)
        if kind == "constexpr" and facts:  # an integer 1
            signature[name], constants[(i,)] = "constexpr", key
            continue
        signature[name] = "i32" if kind == "constexpr" else kind
        if facts and key == "D" and name not in not_aligned:
            attrs[(i,)] = [["tt.divisibility", 16]]
    compiled = triton.compile(
        ASTSource(fn=kernel, signature=signature, constexprs=constants, attrs=attrs),
        target=GPUTarget(*TARGET),
        options={**options, "enable_fp_fusion": True},
    )
    ptx = tmp / f"split-{facts}-{'-'.join(not_aligned)}.ptx"
    ptx.write_text(compiled.asm["ptx"])
    assert re.search(r"^\.target sm_120a\b", compiled.asm["ptx"], re.MULTILINE)
    res = subprocess.run(
        [str(ptxas), "-arch=sm_120a", "-v", str(ptx), "-o", str(ptx.with_suffix(".cubin"))],
        capture_output=True,
        text=True,
        check=True,
    )
    usage = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", res.stdout + res.stderr)
    registers = re.search(r"Used (\d+) registers", res.stdout + res.stderr)
    assert usage is not None and registers is not None, res.stdout + res.stderr
    return {
        "registers": int(registers.group(1)),
        "spill_stores": int(usage.group(1)),
        "spill_loads": int(usage.group(2)),
        "shared": compiled.metadata.shared,
    }


def measure(tree: Path, tmp: Path) -> dict[str, Any]:
    """The three compiles of the split kernel, as JSON-able figures; run in a process of its own
    (``main``), since triton.language's helpers stay interpreter functions in a process where
    another test imported it under TRITON_INTERPRET=1."""
    kernel, values, options = recorded_split_launch(load_kernel_module(tree))
    return {
        "options": options,
        "aligned": values["page_bytes"] % 16 == 0,
        "launch": compile_resources(kernel, values, options, tmp, facts=True),
        "unaligned": compile_resources(kernel, values, options, tmp, facts=True, not_aligned=("page_bytes",)),
        "bare": compile_resources(kernel, values, options, tmp, facts=False),
    }


def main(argv: list[str]) -> None:
    import json

    print(json.dumps(measure(Path(argv[0]), Path(argv[1]))))


@pytest.mark.upstream
@pytest.mark.slow
def test_mma_split_kernel_spills_only_without_the_launch_alignment(patched_tree: Path, tmp_path: Path) -> None:
    pytest.importorskip("triton")
    import json
    import os
    import sys

    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas-blackwell"
    if not ptxas.is_file():
        pytest.skip(f"this Triton ships no ptxas for Blackwell ({ptxas})")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")  # compile it, do not reuse a result
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), *sys.path])
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, test_registry_measured as m; m.main(sys.argv[1:])",
            str(patched_tree),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-8000:]
    found = json.loads(res.stdout.strip().splitlines()[-1])
    launch, unaligned, bare = found["launch"], found["unaligned"], found["bare"]
    assert found["options"] == {"num_warps": 4, "num_stages": 2} and found["aligned"]
    assert launch["spill_stores"] == 0 and launch["spill_loads"] == 0  # what runs on the DSv4 pool
    assert unaligned["spill_stores"] > 0 and bare["spill_stores"] > 0
    digest = hashlib.sha256((patched_tree / MMA).read_bytes()).hexdigest()[:12]
    text, conditions = recorded()
    measured = figures(launch, unaligned, bare)
    why = stale(conditions, digest, triton.__version__)
    assert why is None, f"{why}: re-measure and record {measured} (stale evidence)"
    for figure in measured:
        assert figure in text, (figure, text)
    version = subprocess.run([str(ptxas), "--version"], capture_output=True, text=True, check=True).stdout
    release = re.search(r"release (\d+\.\d+)", version)
    assert f"GPUTarget{TARGET!r}" in conditions["toolchain"], conditions["toolchain"]
    assert release and f"ptxas-blackwell {release.group(1)} -arch=sm_120a" in conditions["toolchain"], version
    shape = f"C{BATCH}, {HEADS} heads, SWA {SWA_PAGE}-token and c4 {C4_PAGE}-token pages, target_ctas 0"
    assert shape in conditions["launch"], conditions["launch"]


def test_figures_for_another_kernel_are_stale_naming_both() -> None:
    """Without compiling: the recorded row names its kernel and Triton, and a figure measured for
    another kernel or another Triton is refused, naming both (it used to be skipped)."""
    _, conditions = recorded()
    kernel = re.search(r"kernel sha256 ([0-9a-f]{12})\b", conditions["kernel"])
    toolchain = re.search(r"Triton (\S+) ", conditions["toolchain"])
    assert kernel and toolchain, conditions
    assert stale(conditions, kernel.group(1), toolchain.group(1)) is None
    # the launch measured is not patch 0002's shipped one, and the row says so
    assert "no attention sink" in conditions["launch"] and "Not the launch patch 0002 quotes" in conditions["launch"]
    assert stale(conditions, "5f2b6b5b5c8c", toolchain.group(1)) == (
        f"retread.toml's {ENTRY} figures are for kernel sha256 {kernel.group(1)}; the shipped kernel is 5f2b6b5b5c8c"
    )
    assert stale(conditions, kernel.group(1), "0.0") == (
        f"retread.toml's {ENTRY} figures were measured with Triton {toolchain.group(1)}; this is Triton 0.0"
    )
