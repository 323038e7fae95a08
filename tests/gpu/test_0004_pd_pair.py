"""0004 on a PD pair this check starts itself, on one GPU, with a tiny random-weight model made here.

What a client receives when the patch refuses a request (issue 32): the prefill server answers 503
naming the flag, and the decode half of the same request, failed through ``conclude_failure``,
answers 500 ("KV transfer failed"). Through a PD router the client sees whichever the router passes
on, possibly a non-retryable 500: ``test_refusal_through_the_router`` records what it is.

The GPU machine has no network, so nothing is downloaded: a Llama-shaped model with random weights
(2 layers, hidden 64, vocabulary 32,000) is written with ``transformers`` into a temporary directory,
and the servers run with ``--skip-tokenizer-init`` on token ids. Must be installed in the checks'
interpreter (the rows skip by name where one is missing):

- sglang 0.5.23's dependencies (``pip install sglang==0.5.23`` brings them; the patched tree's
  ``python/`` goes first on ``PYTHONPATH``, so the servers run the patched code);
- ``transformers`` and ``safetensors`` (to write the model);
- a KV transfer backend: ``mooncake-transfer-engine`` (``$PATCHTOOL_GPU_PD_BACKEND=mooncake``, the
  default) or ``nixl`` (``=nixl``);
- for the router row, ``sglang-router``.

Both servers share the GPU (``--mem-fraction-static 0.25`` each, no CUDA graphs, so they start
in about a minute). Caps small enough for a burst of 32 pairs of 1,024-token prompts to fill:
``--max-queued-requests 4 --max-queued-tokens 2048`` on prefill.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import gpu_support
import pytest
from test_0004_pd_admission import FLAGS, Answer, _post, run_burst

BACKEND_ENV = "PATCHTOOL_GPU_PD_BACKEND"
BACKENDS = {"mooncake": ("mooncake", "mooncake-transfer-engine"), "nixl": ("nixl", "nixl")}
BURST, PROMPT_TOKENS = 32, 1024
CAPS = ("--max-queued-requests", "4", "--max-queued-tokens", "2048")
ROUTER = (sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation", "--host", "127.0.0.1")
START_TIMEOUT_S = 120.0  # a tiny model without CUDA graphs starts well inside this, and inside the runner's 150 s


def missing_modules(names: dict[str, str]) -> list[str]:
    """Pure: of ``{module: what installs it}``, what to install for the modules that do not import."""
    return [package for module, package in names.items() if importlib.util.find_spec(module) is None]


def require_modules(names: dict[str, str]) -> None:
    """Skip the calling check, naming the packages to install, unless every module imports."""
    missing = missing_modules(names)
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, not run: install it in the checks' interpreter")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_tiny_model(where: Path) -> Path:
    """A Llama-shaped model with random weights, written locally (no download)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        torch_dtype="bfloat16",
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(where, safe_serialization=True)
    return where


@dataclass
class Pair:
    prefill: str
    decode: str
    bootstrap_port: int
    logs: tuple[Path, Path]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _start(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)  # a guard against a hang, not a measure
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def local_pair(patched_tree_gpu: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    gpu_support.require_cuda()
    backend = os.environ.get(BACKEND_ENV, "mooncake")
    if backend not in BACKENDS:
        pytest.fail(f"${BACKEND_ENV}={backend!r}: give one of {', '.join(BACKENDS)}", pytrace=False)
    module, package = BACKENDS[backend]
    require_modules({"transformers": "transformers", "safetensors": "safetensors", module: package})
    tree_python = str(Path(patched_tree_gpu) / "python")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (tree_python, os.environ.get("PYTHONPATH")) if p)}
    probe = subprocess.run(
        [sys.executable, "-c", "import sglang.launch_server"], env=env, capture_output=True, text=True
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.skip(f"needs sglang 0.5.23's dependencies, not run: the patched tree does not import ({last})")
    work = tmp_path_factory.mktemp("pd-pair")
    model = write_tiny_model(work / "model")
    ports = [_free_port() for _ in range(3)]
    common = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--host", "127.0.0.1"]
    common += ["--skip-tokenizer-init", "--disable-cuda-graph", "--mem-fraction-static", "0.25"]
    common += ["--disaggregation-transfer-backend", backend, "--context-length", "4096"]
    logs = (work / "prefill.log", work / "decode.log")
    bootstrap = ("--disaggregation-bootstrap-port", str(ports[2]))
    procs = [
        _start(
            [*common, "--port", str(ports[0]), "--disaggregation-mode", "prefill", *bootstrap, *CAPS],
            logs[0],
            env,
        ),
        _start([*common, "--port", str(ports[1]), "--disaggregation-mode", "decode"], logs[1], env),
    ]
    urls = [f"http://127.0.0.1:{p}" for p in ports[:2]]
    try:
        start = time.monotonic()
        while not all(_healthy(u) for u in urls):
            for proc, log in zip(procs, logs, strict=True):
                if proc.poll() is not None:
                    tail = log.read_text(errors="replace")[-3000:]
                    pytest.fail(f"{log.name[:-4]} server exited {proc.returncode}:\n{tail}", pytrace=False)
            if time.monotonic() - start > START_TIMEOUT_S:
                pytest.fail(f"the pair did not answer /health within {START_TIMEOUT_S:.0f} s", pytrace=False)
            time.sleep(2)
        yield Pair(prefill=urls[0], decode=urls[1], bootstrap_port=ports[2], logs=logs)
    finally:
        _stop(procs)


def test_refusal_status_a_client_receives(local_pair: Pair, record):
    """Each request sent to both servers, as a router sends it: a refused one gets 503 naming the
    flag from prefill and 500 from decode; an admitted one 200 from both."""
    burst = run_burst(local_pair.prefill, local_pair.decode, size=BURST, prompt_tokens=PROMPT_TOKENS)
    refused = [p for p in burst.pairs if p.refused]
    admitted = [p for p in burst.pairs if p.prefill.status == 200]
    decode_statuses = sorted({p.decode.status for p in refused})
    record(
        pairs=len(burst.pairs),
        refused=len(refused),
        admitted=len(admitted),
        refused_decode_statuses=",".join(map(str, decode_statuses)),
        max_queued_seen=burst.max_queued_seen,
    )
    assert refused, f"no 503 naming {FLAGS} in {len(burst.pairs)} pairs"
    assert len(refused) + len(admitted) == len(burst.pairs)
    assert all(p.decode.status == 200 for p in admitted)
    assert decode_statuses == [500], [(p.decode.status, p.decode.body[:200]) for p in refused]


def test_refusal_through_the_router(local_pair: Pair, tmp_path: Path, record):
    """The same burst through sglang's PD router: what the client receives for a refused request
    is recorded (``refused_statuses``: 503 is retryable, 500 is not), and every request gets an
    answer, 200 or a refusal, none a hang."""
    require_modules({"sglang_router": "sglang-router"})
    port = _free_port()
    prefill = (local_pair.prefill, str(local_pair.bootstrap_port))
    router = _start(
        [*ROUTER, "--port", str(port), "--prefill", *prefill, "--decode", local_pair.decode],
        tmp_path / "router.log",
        dict(os.environ),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        start = time.monotonic()
        while not _healthy(url):
            if router.poll() is not None or time.monotonic() - start > START_TIMEOUT_S:
                pytest.fail((tmp_path / "router.log").read_text(errors="replace")[-3000:], pytrace=False)
            time.sleep(1)
        payloads = [
            {
                "input_ids": [(i * 7919 + j) % 19_000 + 100 for j in range(PROMPT_TOKENS)],
                "sampling_params": {"max_new_tokens": 8, "temperature": 0.0},
            }
            for i in range(BURST)
        ]
        with ThreadPoolExecutor(BURST) as pool:
            answers: list[Answer] = list(pool.map(lambda body: _post(url, body), payloads))
    finally:
        _stop([router])
    statuses = sorted({a.status for a in answers if a.status != 200})
    record(
        requests=len(answers),
        ok=sum(a.status == 200 for a in answers),
        refused_statuses=",".join(map(str, statuses)),
        refusals_retryable=bool(statuses) and statuses == [503],
        bodies=json.dumps(sorted({a.body[:120] for a in answers if a.status != 200}))[:500],
    )
    assert statuses, f"the router passed no refusal on in {len(answers)} requests"
    assert set(statuses) <= {500, 503}, [(a.status, a.body[:200]) for a in answers if a.status not in (200, 500, 503)]
