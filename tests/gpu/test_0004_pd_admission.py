"""0004 on a real PD pair: a burst is refused at prefill, and refused requests' decode halves are freed.

This check drives a running prefill + decode pair built from the patched wheel, over HTTP,
without a router: each request goes to both servers with the same bootstrap room, as the
router sends it, so what frees a refused decode half is the servers' own doing. It needs no
GPU where it runs, only the pair; without one it skips by name.

Launch the pair with small caps so a burst fills them (any model; the numbers below assume
prompts of SGLANG_PD_BURST_PROMPT_TOKENS tokens):

    python -m sglang.launch_server --model-path $MODEL --disaggregation-mode prefill \
        --port 30000 --max-queued-requests 8 --max-queued-tokens 32768 ...
    python -m sglang.launch_server --model-path $MODEL --disaggregation-mode decode \
        --port 30001 ...

then

    SGLANG_PD_PREFILL_URL=http://127.0.0.1:30000 SGLANG_PD_DECODE_URL=http://127.0.0.1:30001 \
    SGLANG_PD_MAX_QUEUED_REQUESTS=8 SGLANG_PD_MAX_QUEUED_TOKENS=32768 \
    python -m pytest tests/gpu/test_0004_pd_admission.py

Optional: SGLANG_PD_BOOTSTRAP_HOST (default: the prefill URL's host), SGLANG_PD_BOOTSTRAP_PORT
(default 8998), SGLANG_PD_BURST (pairs sent at once, default 64), SGLANG_PD_BURST_PROMPT_TOKENS
(default 8192).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

PREFILL = os.environ.get("SGLANG_PD_PREFILL_URL")
DECODE = os.environ.get("SGLANG_PD_DECODE_URL")
FLAGS = ("--max-queued-requests", "--max-queued-tokens")
# Decode gives up on a stranded half after SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s by
# default, sglang 0.5.23 environ.py); a freed half answers long before that.
FREED_WITHIN_S = 60.0
REQUEST_TIMEOUT_S = 600.0

pytestmark = pytest.mark.skipif(
    not (PREFILL and DECODE),
    reason="needs a running PD pair, not run: set SGLANG_PD_PREFILL_URL and SGLANG_PD_DECODE_URL",
)


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
    request = urllib.request.Request(url + "/generate", data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            return Answer(response.status, response.read().decode(errors="replace"), time.monotonic())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.read().decode(errors="replace"), time.monotonic())


def _loads(url: str) -> list[dict]:
    with urllib.request.urlopen(url + "/v1/loads?include=core,disagg", timeout=10) as response:
        return json.load(response)["loads"]


def _queued(url: str) -> int:
    # PREFILL: waiting + bootstrap queues (SchedulerLoadInquirer.get_loads).
    return sum(load["num_waiting_reqs"] for load in _loads(url))


def _idle(prefill: str, decode: str) -> bool:
    keys = ("prefill_bootstrap_queue_reqs", "prefill_inflight_queue_reqs",
            "decode_prealloc_queue_reqs", "decode_transfer_queue_reqs")
    loads = _loads(prefill) + _loads(decode)
    return all(load["num_waiting_reqs"] == 0 and load["num_running_reqs"] == 0
               and all(load.get("disaggregation", {}).get(key, 0) == 0 for key in keys)
               for load in loads)


@pytest.fixture(scope="module")
def burst() -> Burst:
    assert PREFILL and DECODE
    max_requests = int(os.environ["SGLANG_PD_MAX_QUEUED_REQUESTS"])
    max_tokens = int(os.environ["SGLANG_PD_MAX_QUEUED_TOKENS"])
    size = int(os.environ.get("SGLANG_PD_BURST", "64"))
    prompt_tokens = int(os.environ.get("SGLANG_PD_BURST_PROMPT_TOKENS", "8192"))
    host = os.environ.get("SGLANG_PD_BOOTSTRAP_HOST") or urllib.parse.urlparse(PREFILL).hostname
    port = int(os.environ.get("SGLANG_PD_BOOTSTRAP_PORT", "8998"))
    assert _idle(PREFILL, DECODE), "the pair must be idle before the burst"

    rng = random.Random(4)
    seen = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen[0] = max(seen[0], _queued(PREFILL))
            time.sleep(0.05)

    def pair(i: int) -> Pair:
        room = rng.getrandbits(62)
        payload = {
            "input_ids": [rng.randrange(100, 20_000) for _ in range(prompt_tokens)],
            "sampling_params": {"max_new_tokens": 8, "temperature": 0.0},
            "bootstrap_host": host, "bootstrap_port": port, "bootstrap_room": room,
        }
        with ThreadPoolExecutor(2) as both:
            prefill = both.submit(_post, PREFILL, payload)
            decode = both.submit(_post, DECODE, payload)
            return Pair(room, prefill.result(), decode.result())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with ThreadPoolExecutor(size) as pool:
        pairs = list(pool.map(pair, range(size)))
    stop.set()
    sampler.join()

    start = time.monotonic()
    drained = None
    while time.monotonic() - start < FREED_WITHIN_S:
        if _idle(PREFILL, DECODE):
            drained = time.monotonic() - start
            break
        time.sleep(1)
    return Burst(pairs, seen[0], drained, max_requests, max_tokens, prompt_tokens)


def test_burst_is_refused_at_prefill_with_503(burst: Burst):
    refused = [p for p in burst.pairs if p.refused]
    admitted = [p for p in burst.pairs if p.prefill.status == 200]
    assert refused, f"no 503 naming {FLAGS} in {len(burst.pairs)} pairs"
    assert len(refused) + len(admitted) == len(burst.pairs), [
        (p.prefill.status, p.prefill.body[:200]) for p in burst.pairs
        if not p.refused and p.prefill.status != 200]
    # Every admitted pair runs to the end on decode.
    assert all(p.decode.status == 200 for p in admitted), [
        (p.decode.status, p.decode.body[:200]) for p in admitted if p.decode.status != 200]
    # The queue never held more than both caps allow (prompts of equal length).
    bound = min(burst.max_requests, max(1, burst.max_tokens // burst.prompt_tokens))
    assert burst.max_queued_seen <= bound, (burst.max_queued_seen, bound)


def test_refused_decode_half_is_freed_without_the_router(burst: Burst):
    refused = [p for p in burst.pairs if p.refused]
    assert refused
    late = [(p.room, round(p.decode.done_at - p.prefill.done_at, 1)) for p in refused
            if p.decode.done_at - p.prefill.done_at > FREED_WITHIN_S]
    assert not late, f"decode halves answered more than {FREED_WITHIN_S}s after the 503: {late}"
    # DecodeTransferQueue.pop_transferred answers a failed room with 500.
    assert all(p.decode.status == 500 for p in refused), [
        (p.decode.status, p.decode.body[:200]) for p in refused if p.decode.status != 500]
    assert burst.drained_after_s is not None, f"queues not empty {FREED_WITHIN_S}s after the burst"
