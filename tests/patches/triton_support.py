"""Triton helpers for the patches' kernel tests: the CPU interpreter's bf16 ``tl.dot``, and
offline compiles for a GPU target that is not on this machine.

The kernels under test run as written in production (bf16 MMA operands, no interpreter
branch); whatever the CPU interpreter cannot do is accommodated here, in the tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from helpers import lazy

# Imported at first use, not at collection (tests/conftest.py imports them before a
# test module's first test): collecting the tests needs neither numpy nor triton.
np = lazy("numpy")
torch = lazy("torch")
triton = lazy("triton")
tl = lazy("triton.language")
knobs = lazy("triton.knobs")
triton_compiler = lazy("triton.compiler")
backends_compiler = lazy("triton.backends.compiler")
interpreter = lazy("triton.runtime.interpreter")
triton_jit = lazy("triton.runtime.jit")

if TYPE_CHECKING:
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction


# RTX PRO 6000 Blackwell: compute capability 12.0, warp size 32. Triton's CUDA backend
# compiles capability >= 90 for the arch-specific target ('a' suffix): ptxas --gpu-name=sm_120a.
def sm120() -> GPUTarget:
    return backends_compiler.GPUTarget("cuda", 120, 32)


# -- the CPU interpreter's bf16 tl.dot ---------------------------------------------------------


@dataclasses.dataclass
class DotCount:
    calls: int = 0  # tl.dot calls the interpreter ran
    bf16: int = 0  # ... of which both operands were bf16


def _probe_bf16_dot(X, W, Out):  # jitted when called, so under the caller's TRITON_INTERPRET
    r = tl.arange(0, 16)
    x = tl.load(X + r[:, None] * 16 + r[None, :])
    w = tl.load(W + r[None, :] * 16 + r[:, None])
    tl.store(Out + r[:, None] * 16 + r[None, :], tl.dot(x, w, tl.zeros((16, 16), tl.float32)))


def _with_language(kernel: Callable[..., None]) -> Callable[..., None]:
    """``kernel`` with the real triton.language as its ``tl``: the interpreter patches the
    language module it finds among a kernel's globals by identity, which a lazy stand-in is not."""
    import triton.language

    return types.FunctionType(kernel.__code__, {**kernel.__globals__, "tl": triton.language}, kernel.__name__)


def interpreter_bf16_dot_ok() -> bool:
    """Whether the interpreter's tl.dot on bf16 operands gives the fp32 product."""
    import torch

    x = torch.randn(16, 16).bfloat16()
    w = torch.randn(16, 16).bfloat16()
    out = torch.empty(16, 16)
    triton.jit(_with_language(_probe_bf16_dot))[(1,)](x, w, out)
    return torch.allclose(out, x.float() @ w.float().t(), rtol=1e-5, atol=1e-5)


@contextlib.contextmanager
def interpreter_bf16_dot() -> Iterator[DotCount]:
    """Run bf16 ``tl.dot`` correctly under ``TRITON_INTERPRET=1``, counting the calls.

    Triton 3.x's interpreter stores bf16 as raw uint16 and its create_dot multiplies those
    bit patterns (it widens only fp8 operands), so a bf16 tl.dot comes out as garbage on the
    CPU. Here bf16 dot operands are widened to fp32 first: exact, since a bf16 x bf16 product
    is exact in fp32, i.e. what a bf16 MMA with fp32 accumulation computes on the GPU. Nothing
    else in the emulator changes. The count lets a test prove the bf16 path ran.
    """
    count = DotCount()
    builder = type(interpreter.interpreter_builder)
    create_dot = builder.create_dot

    def widen(h: Any) -> Any:
        if h.dtype.scalar == tl.bfloat16:
            bits = h.data.astype(np.uint32) << np.uint32(16)
            return interpreter.TensorHandle(bits.view(np.float32), tl.float32)
        return h

    def create_dot_bf16(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        count.calls += 1
        count.bf16 += a.dtype.scalar == tl.bfloat16 and b.dtype.scalar == tl.bfloat16
        return create_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(builder, "create_dot", create_dot_bf16)
        assert interpreter_bf16_dot_ok()
        count.calls = count.bf16 = 0
        yield count


@dataclasses.dataclass
class StoreLog:
    """The bytes each launch's programs stored, in launch order (``interpreter_stores``)."""

    launches: list[list[Any]] = dataclasses.field(default_factory=list)

    def stored_twice(self) -> list[tuple[int, int]]:
        """(launch, bytes) for each launch that stored some byte more than once, by one program
        or by two: on a GPU nothing orders two such stores, so which value lands is a race."""
        twice = []
        for n, chunks in enumerate(self.launches):
            if chunks:
                written = np.concatenate(chunks)
                extra = written.size - np.unique(written).size
                if extra:
                    twice.append((n, int(extra)))
        return twice


@contextlib.contextmanager
def interpreter_stores() -> Iterator[StoreLog]:
    """Record under ``TRITON_INTERPRET=1`` the byte addresses every masked-in ``tl.store``
    writes, one list per launch (a launch starts at program (0, 0, 0)). The interpreter runs a
    launch's programs one after another, so a byte stored twice gets the later value there; on
    a GPU the order is not defined, so a test asserts each byte is stored at most once."""
    log = StoreLog()
    builder = type(interpreter.interpreter_builder)
    set_grid_idx, create_masked_store = builder.set_grid_idx, builder.create_masked_store

    def set_grid_idx_logged(self: Any, x: int, y: int, z: int) -> Any:
        if (x, y, z) == (0, 0, 0):
            log.launches.append([])
        return set_grid_idx(self, x, y, z)

    def create_masked_store_logged(self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any) -> Any:
        size = value.data.dtype.itemsize
        where = np.broadcast_to(mask.data, ptrs.data.shape)
        starts = ptrs.data[where].astype(np.uint64)
        log.launches[-1].append((starts[:, None] + np.arange(size, dtype=np.uint64)[None, :]).ravel())
        return create_masked_store(self, ptrs, value, mask, *rest)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(builder, "set_grid_idx", set_grid_idx_logged)
        mp.setattr(builder, "create_masked_store", create_masked_store_logged)
        yield log


# -- offline compiles ---------------------------------------------------------------------------
#
# A kernel is compiled for a GPU this machine does not have through Triton's compile API and a
# GPUTarget, in a child process: triton.language's own @jit helpers (tl.sum, tl.max, ...) are
# interpreter functions for good once triton.language was imported under TRITON_INTERPRET=1,
# as the kernel tests do, and the code generator cannot call those.


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Resources:
    """What ptxas reports for one compiled kernel, per CTA / per thread."""

    shared: int  # bytes of shared memory per CTA (Triton's metadata.shared)
    registers: int  # per thread
    spill_stores: int  # bytes per thread
    spill_loads: int  # bytes per thread
    mma: tuple[str, ...]  # the distinct mma instructions in the PTX

    def figures(self) -> dict[str, int]:
        return dict(
            shared=self.shared, registers=self.registers, spill_stores=self.spill_stores, spill_loads=self.spill_loads
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Launch:
    """One recorded ``kernel[grid](*args, **kwargs)`` call."""

    kernel: JITFunction
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def with_arg(self, name: str, value: Any) -> Launch:
        args = list(self.args)
        args[list(self.kernel.arg_names).index(name)] = value
        return Launch(self.kernel, self.grid, tuple(args), self.kwargs)

    def arg(self, name: str) -> Any:
        return self.args[list(self.kernel.arg_names).index(name)]


class _Recorder:
    def __init__(self, kernel: JITFunction, launches: list[Launch]) -> None:
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            self.launches.append(Launch(self.kernel, tuple(grid), args, kwargs))

        return record


def load_compilable(load: Callable[[], ModuleType]) -> ModuleType:
    """``load()``, a kernel module loaded while TRITON_INTERPRET is off, so that its
    ``@triton.jit`` functions are compilable JITFunctions."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "0")
        return load()


@contextlib.contextmanager
def recorded_launches(module: ModuleType, *names: str) -> Iterator[list[Launch]]:
    """Within the block, launches of ``module.<name>`` are recorded instead of run, with the
    exact arguments the host code passes, so no device is needed."""
    launches: list[Launch] = []
    with pytest.MonkeyPatch.context() as mp:
        for name in names:
            kernel = getattr(module, name)
            assert isinstance(kernel, triton_jit.JITFunction), (name, type(kernel))
            mp.setattr(module, name, _Recorder(kernel, launches))
        yield launches


_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_MMA = re.compile(r"\bmma\.sync\.aligned\.[\w.]+")


def compile_offline(launch: Launch, target: GPUTarget | None = None) -> Resources:
    """Compile a recorded launch for ``target`` as the JIT would on that device: Triton's own
    binder specialises the arguments (16-byte aligned pointers and integers divisible by 16
    get ``tt.divisibility``, integers equal to 1 become constants), then ``triton.compile``
    runs the whole pipeline down to ptxas. A fresh cache directory forces ptxas to run, whose
    log gives registers and spills (the driver reports them only on a GPU). Runs in the
    child process of ``compile_scenario``."""
    target = target or sm120()
    kernel = launch.kernel
    backend = triton_compiler.make_backend(target)
    binder = triton_jit.create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*launch.args, **launch.kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, launch.kwargs, bound, specialization, options)
    source = triton_compiler.ASTSource(kernel, signature, constexprs, attrs)
    log = io.StringIO()
    with tempfile.TemporaryDirectory() as cache, knobs.cache.scope(), knobs.nvidia.scope():
        knobs.cache.dir = cache
        knobs.nvidia.dump_ptxas_log = True
        with contextlib.redirect_stdout(log):
            compiled = triton.compile(source, target=target, options=options.__dict__)
    text = log.getvalue()
    registers = _REGISTERS.findall(text)
    spills = _SPILLS.findall(text)
    assert len(registers) == 1 and len(spills) == 1, text
    return Resources(
        shared=int(compiled.metadata.shared),
        registers=int(registers[0]),
        spill_stores=int(spills[0][0]),
        spill_loads=int(spills[0][1]),
        mma=tuple(sorted(set(_MMA.findall(compiled.asm["ptx"])))),
    )


def compile_scenario(test_file: Path, scenario: str, *args: str) -> dict[str, Resources]:
    """Compile for sm_120a the launches ``<test_file>.<scenario>(*args)`` returns as
    ``{name: Launch}``, in a child process with the interpreter off; ``{name: Resources}``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent), *sys.path])
    code = "import triton.language, triton_support, sys; triton_support._main(sys.argv[1:])"
    res = subprocess.run(
        [sys.executable, "-c", code, str(test_file), scenario, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-8000:]
    payload = json.loads(res.stdout.strip().splitlines()[-1])
    return {name: Resources(**{**fields, "mma": tuple(fields["mma"])}) for name, fields in payload.items()}


def _main(argv: list[str]) -> None:
    # triton.language is already imported with the interpreter off (see compile_scenario);
    # the test module may now set TRITON_INTERPRET=1 at import without harm to it.
    test_file, scenario, *args = argv
    spec = importlib.util.spec_from_file_location("_scenario_module", test_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.environ["TRITON_INTERPRET"] = "0"
    launches = getattr(module, scenario)(*args)
    out = {name: dataclasses.asdict(compile_offline(launch)) for name, launch in launches.items()}
    print(json.dumps(out))


def ptxas_available(target: GPUTarget | None = None) -> bool:
    """Whether the ptxas Triton uses for ``target`` (sm_120) is there (the triton wheel ships it)."""
    from triton.backends.nvidia.compiler import get_ptxas

    try:
        return bool(get_ptxas((target or sm120()).arch).path)
    except RuntimeError:
        return False


# NaN values after every buffer a kernel module allocates with torch.empty / torch.full: at least
# GUARD, and as many as the buffer holds (a store a whole head block past its tensor lands there)
GUARD = 256


class GuardedTorch:
    """torch as a kernel module sees it (``module.torch = GuardedTorch()``), except that
    ``empty`` and ``full`` leave max(GUARD, size) NaNs after the buffer they return: a kernel that stores
    past its output writes there, where ``stored_past()`` finds it, and not into the heap, where
    the interpreter would abort the whole run or the write would go unseen."""

    def __init__(self) -> None:
        self.tails: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def empty(self, *shape: Any, **kwargs: Any) -> Any:
        return self._with_tail(shape, None, kwargs)

    def full(self, shape: Any, fill: Any, **kwargs: Any) -> Any:
        return self._with_tail(shape, fill, kwargs)

    def _with_tail(self, shape: Any, fill: Any, kwargs: dict[str, Any]) -> Any:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        n = 1
        for size in shape:
            n *= int(size)
        wanted = kwargs.pop("dtype", torch.float32)
        flat = torch.full((n + max(GUARD, n),), float("nan"), dtype=torch.float32, **kwargs).to(wanted)
        if fill is not None:
            flat[:n] = fill
        self.tails.append(flat[n:])
        return flat[:n].view(shape)

    def stored_past(self) -> int:
        """Values written into any guard since the last ``tails.clear()``."""
        return sum(int((~tail.isnan()).sum()) for tail in self.tails)
