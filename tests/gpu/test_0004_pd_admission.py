"""0004 on a real PD pair: a burst is refused at prefill, and refused requests' decode halves are freed.

This check drives a running prefill + decode pair built from the patched wheel, over HTTP,
without a router: each request goes to both servers with the same bootstrap room, as the
router sends it, so what frees a refused decode half is the servers' own doing. It needs no
GPU where it runs, only the pair; without one it skips by name.

Launch the pair with small caps so a burst fills them (any model whose context holds the burst's
prompts of 8,192 tokens):

    python -m sglang.launch_server --model-path $MODEL --disaggregation-mode prefill \
        --port 30000 --max-queued-requests 8 --max-queued-tokens 32768 ...
    python -m sglang.launch_server --model-path $MODEL --disaggregation-mode decode \
        --port 30001 ...

then

    PATCHTOOL_GPU_PD_SERVERS="http://127.0.0.1:30000 http://127.0.0.1:30001" \
    python -m pytest tests/gpu/test_0004_pd_admission.py

The caps and the bootstrap port are what the prefill server reports in /server_info (the patched
wheel reports max_queued_tokens); the bootstrap host is the prefill URL's, as the router sends it.
Without $PATCHTOOL_GPU_PD_SERVERS the checks are not run, by name (gpu_support.require_deployment).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gpu_support
import pytest

FLAGS = ("--max-queued-requests", "--max-queued-tokens")
BURST = 64  # pairs sent at once
PROMPT_TOKENS = 8192
# Decode gives up on a stranded half after SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s by
# default, sglang 0.5.23 environ.py); a freed half answers long before that.
FREED_WITHIN_S = 60.0
REQUEST_TIMEOUT_S = 600.0


@dataclass
class Answer:
    status: int
    body: str
    done_at: float


@dataclass
class Pair:
    room: int
    prefill: Answer
    decode: Answer

    @property
    def refused(self) -> bool:
        return self.prefill.status == 503 and any(flag in self.prefill.body for flag in FLAGS)


@dataclass
class Burst:
    pairs: list[Pair]
    max_queued_seen: int
    drained_after_s: float | None
    max_requests: int
    max_tokens: int
    prompt_tokens: int


def _post(url: str, payload: dict) -> Answer:
    request = urllib.request.Request(
        url + "/generate", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return Answer(response.status, response.read().decode(errors="replace"), time.monotonic())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.read().decode(errors="replace"), time.monotonic())


def _get(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def admission_caps(server_info: dict[str, Any]) -> tuple[int, int, int]:
    """Pure: the prefill server's max_queued_requests, max_queued_tokens and bootstrap port, from
    its /server_info; ValueError saying what is missing."""
    if "max_queued_tokens" not in server_info:
        raise ValueError("the prefill server reports no max_queued_tokens: is it the patched wheel?")
    keys = ("max_queued_requests", "max_queued_tokens", "disaggregation_bootstrap_port")
    unset = [k for k in keys if not isinstance(server_info.get(k), int)]
    if unset:
        raise ValueError(
            f"the prefill server has no {', '.join(unset)} set: launch it with "
            "--max-queued-requests and --max-queued-tokens (patchset.toml's run: 8 and 32768)"
        )
    requests, tokens, port = (server_info[k] for k in keys)
    return requests, tokens, port


def _loads(url: str) -> list[dict]:
    loads: list[dict] = _get(url + "/v1/loads?include=core,disagg")["loads"]
    return loads


def _queued(url: str) -> int:
    # PREFILL: waiting + bootstrap queues (SchedulerLoadInquirer.get_loads).
    return sum(load["num_waiting_reqs"] for load in _loads(url))


def _idle(prefill: str, decode: str) -> bool:
    keys = (
        "prefill_bootstrap_queue_reqs",
        "prefill_inflight_queue_reqs",
        "decode_prealloc_queue_reqs",
        "decode_transfer_queue_reqs",
    )
    loads = _loads(prefill) + _loads(decode)
    return all(
        load["num_waiting_reqs"] == 0
        and load["num_running_reqs"] == 0
        and all(load.get("disaggregation", {}).get(key, 0) == 0 for key in keys)
        for load in loads
    )


@pytest.fixture(scope="module")
def burst() -> Burst:
    servers = gpu_support.require_deployment(pd_servers=True)
    assert servers.prefill and servers.decode
    return run_burst(servers.prefill, servers.decode)


def run_burst(prefill: str, decode: str, *, size: int = BURST, prompt_tokens: int = PROMPT_TOKENS) -> Burst:
    """``size`` pairs of ``prompt_tokens``-token prompts sent at once to the idle pair, each to both
    servers with one bootstrap room, as a router sends it; the prefill queue sampled meanwhile."""
    try:
        max_requests, max_tokens, port = admission_caps(_get(prefill + "/server_info", timeout=60))
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    host = urllib.parse.urlparse(prefill).hostname
    assert _idle(prefill, decode), "the pair must be idle before the burst"

    rng = random.Random(4)
    seen = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen[0] = max(seen[0], _queued(prefill))
            time.sleep(0.05)

    def pair(i: int) -> Pair:
        room = rng.getrandbits(62)
        payload = {
            "input_ids": [rng.randrange(100, 20_000) for _ in range(prompt_tokens)],
            "sampling_params": {"max_new_tokens": 8, "temperature": 0.0},
            "bootstrap_host": host,
            "bootstrap_port": port,
            "bootstrap_room": room,
        }
        with ThreadPoolExecutor(2) as both:
            to_prefill = both.submit(_post, prefill, payload)
            to_decode = both.submit(_post, decode, payload)
            return Pair(room, to_prefill.result(), to_decode.result())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with ThreadPoolExecutor(size) as pool:
        pairs = list(pool.map(pair, range(size)))
    stop.set()
    sampler.join()

    start = time.monotonic()
    drained = None
    while time.monotonic() - start < FREED_WITHIN_S:
        if _idle(prefill, decode):
            drained = time.monotonic() - start
            break
        time.sleep(1)
    return Burst(pairs, seen[0], drained, max_requests, max_tokens, prompt_tokens)


def test_burst_is_refused_at_prefill_with_503(burst: Burst):
    refused = [p for p in burst.pairs if p.refused]
    admitted = [p for p in burst.pairs if p.prefill.status == 200]
    assert refused, f"no 503 naming {FLAGS} in {len(burst.pairs)} pairs"
    assert len(refused) + len(admitted) == len(burst.pairs), [
        (p.prefill.status, p.prefill.body[:200]) for p in burst.pairs if not p.refused and p.prefill.status != 200
    ]
    # Every admitted pair runs to the end on decode.
    assert all(p.decode.status == 200 for p in admitted), [
        (p.decode.status, p.decode.body[:200]) for p in admitted if p.decode.status != 200
    ]
    # The queue never held more than both caps allow (prompts of equal length).
    bound = min(burst.max_requests, max(1, burst.max_tokens // burst.prompt_tokens))
    assert burst.max_queued_seen <= bound, (burst.max_queued_seen, bound)


def test_refused_decode_half_is_freed_without_the_router(burst: Burst):
    refused = [p for p in burst.pairs if p.refused]
    assert refused
    late = [
        (p.room, round(p.decode.done_at - p.prefill.done_at, 1))
        for p in refused
        if p.decode.done_at - p.prefill.done_at > FREED_WITHIN_S
    ]
    assert not late, f"decode halves answered more than {FREED_WITHIN_S}s after the 503: {late}"
    # DecodeTransferQueue.pop_transferred answers a failed room with 500.
    assert all(p.decode.status == 500 for p in refused), [
        (p.decode.status, p.decode.body[:200]) for p in refused if p.decode.status != 500
    ]
    assert burst.drained_after_s is not None, f"queues not empty {FREED_WITHIN_S}s after the burst"
