"""What the GPU checks share: the gates that skip a check by name, the device as the results file
records it, and the figures a check reports.

A check calls ``require_cuda()`` (any CUDA GPU) or ``require_sm120()`` (sm_120 only) first; on other
hardware it is skipped with a reason that starts ``needs a CUDA GPU, not run`` or ``needs sm_120,
not run``, and the results file records it as not run, by name. ``require_nvcc()``/``require_tool()``
gate on a CUDA tool, ``require_deployment()`` on a running deployment. Only the standard library, torch
and (when present) triton are imported, so this runs in a bare GPU image.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

NO_CUDA = "needs a CUDA GPU, not run"
NOT_SM120 = "needs sm_120, not run"
NO_NVCC = "needs nvcc, not run"
NO_DEPLOYMENT = "needs a running deployment, not run"
DEPLOYMENT_ENV = "PATCHTOOL_GPU_DEPLOYMENT"  # the router in front of the PD pair: its URL
PD_SERVERS_ENV = "PATCHTOOL_GPU_PD_SERVERS"  # the pair behind it, addressed directly: "PREFILL_URL DECODE_URL"
SM120 = (12, 0)

Figure = int | float | str | bool


def sm_name(capability: tuple[int, int] | None) -> str | None:
    """``(12, 0)`` -> ``sm_120``: the name the manifest's ``hardware`` fields use."""
    return None if capability is None else f"sm_{capability[0]}{capability[1]}"


def cuda_skip_reason() -> str | None:
    """Why no CUDA check can run here, or None when one can."""
    try:
        import torch
    except ImportError as exc:
        return f"{NO_CUDA}: torch does not import ({exc})"
    if not torch.cuda.is_available():
        build = torch.version.cuda
        why = (
            f"torch {torch.__version__} is a CPU build"
            if build is None
            else f"torch {torch.__version__} (CUDA {build}) sees no GPU"
        )
        return f"{NO_CUDA}: {why}"
    return None


def sm120_skip_reason(capability: tuple[int, int], name: str) -> str | None:
    """Pure: why a check that needs sm_120 cannot run on this GPU, or None when it can."""
    if tuple(capability) == SM120:
        return None
    return f"{NOT_SM120}: this GPU is {name} ({sm_name(capability)})"


def require_cuda() -> None:
    """Skip the calling check unless a CUDA GPU is usable here."""
    reason = cuda_skip_reason()
    if reason is not None:
        pytest.skip(reason)


def require_sm120() -> None:
    """Skip the calling check unless the GPU is sm_120 (RTX PRO 6000 Blackwell and its kin)."""
    reason = cuda_skip_reason()
    if reason is not None:
        pytest.skip(f"{NOT_SM120}: {reason.removeprefix(NO_CUDA + ': ')}")
    import torch

    reason = sm120_skip_reason(torch.cuda.get_device_capability(0), torch.cuda.get_device_name(0))
    if reason is not None:
        pytest.skip(reason)


def tool_path(name: str) -> str | None:
    """A CUDA tool as the CPU tests find nvcc (``$NVCC``, then PATH), then where CUDA images keep it:
    ``$<NAME>``, PATH, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``/usr/local/cuda/bin``."""
    found = os.environ.get(name.upper()) or shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (candidate := Path(home, "bin", name)).is_file():
            return str(candidate)
    return None


def require_tool(name: str) -> str:
    """The CUDA tool ``name`` (``ncu``, ``nvcc``) to run, or a skip of the calling check naming it."""
    found = tool_path(name)
    if found is None:
        pytest.skip(f"needs {name}, not run: not in ${name.upper()}, on PATH, or under $CUDA_HOME or /usr/local/cuda")
    return found


def nvcc_path() -> str | None:
    """nvcc as the CPU tests find it (``$NVCC``, then PATH), then where CUDA images keep it."""
    return tool_path("nvcc")


def require_nvcc() -> str:
    """The nvcc to build with, or a skip of the calling check."""
    return require_tool("nvcc")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Deployment:
    """Where a deployment-scale check finds the deployment: the router in front of it and, for a check
    that bypasses the router, its prefill and decode servers (URLs without a trailing slash)."""

    router: str | None = None
    prefill: str | None = None
    decode: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Deployment:
        """Pure: ``$PATCHTOOL_GPU_DEPLOYMENT`` (the router's URL) and ``$PATCHTOOL_GPU_PD_SERVERS``
        (``PREFILL_URL DECODE_URL``); ValueError naming the variable when one is not that."""
        router = environ.get(DEPLOYMENT_ENV, "").strip()
        servers = environ.get(PD_SERVERS_ENV, "").split()
        if servers and len(servers) != 2:
            raise ValueError(f"${PD_SERVERS_ENV} is {environ[PD_SERVERS_ENV]!r}: write 'PREFILL_URL DECODE_URL'")
        prefill, decode = [_url(PD_SERVERS_ENV, url) for url in servers] or [None, None]
        return cls(router=_url(DEPLOYMENT_ENV, router) if router else None, prefill=prefill, decode=decode)

    def skip_reason(self, *, pd_servers: bool = False) -> str | None:
        """Pure: why a check that needs the router (or, with ``pd_servers``, the prefill and decode
        servers) cannot run against this deployment, or None when it can."""
        if pd_servers and (self.prefill is None or self.decode is None):
            return f"{NO_DEPLOYMENT}: set ${PD_SERVERS_ENV} to its prefill and decode servers' URLs ('PREFILL_URL DECODE_URL')"
        if not pd_servers and self.router is None:
            return f"{NO_DEPLOYMENT}: set ${DEPLOYMENT_ENV} to the URL of its router"
        return None


def _url(variable: str, value: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
        raise ValueError(f"${variable}: {value!r} is not an http:// or https:// URL")
    return value.rstrip("/")


def require_deployment(*, pd_servers: bool = False) -> Deployment:
    """The deployment a deployment-scale check drives (recall sweeps, throughput A/B, hours-long
    soaks), started beforehand: the router at ``$PATCHTOOL_GPU_DEPLOYMENT``, or with ``pd_servers``
    the prefill and decode servers at ``$PATCHTOOL_GPU_PD_SERVERS``. Without it the check is skipped,
    and the runner records it as not run, by name; a variable that is set but malformed fails it."""
    try:
        deployment = Deployment.from_env(os.environ)
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    reason = deployment.skip_reason(pd_servers=pd_servers)
    if reason is not None:
        pytest.skip(reason)
    return deployment


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NcuLaunch:
    """One kernel launch ncu profiled: its kernel and each metric as (unit, value), by section."""

    id: int
    kernel: str
    metrics: dict[tuple[str, str], tuple[str, str]]

    def number(self, section: str, metric: str, *, units: tuple[str, ...] | None = None) -> float:
        """A metric's value as a number (ncu may group digits with commas); ValueError naming the
        launch when it is missing, not a number, or (with ``units``) in another unit."""
        if (section, metric) not in self.metrics:
            raise ValueError(f"ncu launch {self.id} ({self.kernel}) has no {section} / {metric}")
        unit, value = self.metrics[section, metric]
        if units is not None and unit not in units:
            raise ValueError(f"ncu launch {self.id} ({self.kernel}): {metric} is in {unit!r}, not {' or '.join(units)}")
        try:
            return float(value.replace(",", ""))
        except ValueError:
            raise ValueError(f"ncu launch {self.id} ({self.kernel}): {metric} is {value!r}") from None


def ncu_launches(text: str) -> list[NcuLaunch]:
    """Pure: the launches in ``ncu --import REPORT --csv --page details``, in profiling order. Lines
    that are not the table (ncu's ``==PROF==`` lines) and rule rows (no metric name) are skipped."""
    rows = csv.DictReader(line for line in text.splitlines() if line.startswith('"'))
    launches: dict[int, NcuLaunch] = {}
    for row in rows:
        if not row.get("Metric Name") or not (row.get("ID") or "").isdigit():
            continue
        launch = launches.setdefault(
            int(row["ID"]), NcuLaunch(id=int(row["ID"]), kernel=row.get("Kernel Name") or "", metrics={})
        )
        launch.metrics[row.get("Section Name") or "", row["Metric Name"]] = (
            row.get("Metric Unit") or "",
            row.get("Metric Value") or "",
        )
    return [launches[i] for i in sorted(launches)]


def nvcc_version(nvcc: str | None) -> str | None:
    """``12.8.93`` from ``nvcc --version``; None without nvcc or when it does not answer."""
    if nvcc is None:
        return None
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"release [\d.]+, V([\d.]+)", out)
    return match.group(1) if match else None


def device_info() -> dict[str, Any]:
    """The device and software a results file records for every check.

    ``name``/``capability`` are None where no CUDA GPU is usable (``no_gpu`` says why); versions
    are None for what is not installed.
    """
    info: dict[str, Any] = {
        "name": None,
        "capability": None,
        "count": 0,
        "no_gpu": None,
        "torch": None,
        "triton": None,
        "cuda": None,
        "nvcc": None,
    }
    info["nvcc"] = nvcc_version(nvcc_path())
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        import torch
    except ImportError as exc:
        info["no_gpu"] = f"torch does not import ({exc})"
        return info
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    reason = cuda_skip_reason()
    if reason is not None:
        info["no_gpu"] = reason.removeprefix(NO_CUDA + ": ")
        return info
    info["name"] = torch.cuda.get_device_name(0)
    info["capability"] = sm_name(torch.cuda.get_device_capability(0))
    info["count"] = torch.cuda.device_count()
    return info


def figures(values: dict[str, Any]) -> dict[str, Figure]:
    """Figures as the results file stores them: finite numbers, strings and booleans, checked when
    recorded so a bad one fails its own check rather than the report."""
    out: dict[str, Figure] = {}
    for name, given in values.items():
        # a 0-d tensor or numpy scalar gives its number
        value = given.item() if hasattr(given, "item") and callable(given.item) else given
        if not isinstance(value, int | float | str | bool):
            raise TypeError(f"figure {name!r}: {type(value).__name__} is not a number, string or boolean")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"figure {name!r} is {value}: record the finite number that was measured")
        out[name] = value
    return out


FIGURES_PROPERTY = "gpu_figures"  # the user_properties key the results plugin reads


def recorder(node: pytest.Item) -> Callable[..., None]:
    """``record(max_abs_err=..., ms=...)`` for one check: the figures go into the results file."""

    def record(**values: Any) -> None:
        node.user_properties.append((FIGURES_PROPERTY, figures(values)))

    return record


def cuda_time_ms(fn: Any, iters: int = 50) -> float:
    """Milliseconds per call of ``fn`` on the current CUDA stream, after 5 warm-up calls (CUDA
    events around ``iters`` calls)."""
    import torch

    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / iters
