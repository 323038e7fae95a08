"""A stand-in for ``python -m sglang.benchmark.serving`` (sglang 0.5.23), for the CPU tests of the
deployment checks: it takes the options those checks pass (an unknown one is a usage error, exit 2),
sends ``--num-prompts`` requests to ``BASE_URL/generate`` at most ``--max-concurrency`` at a time, as
the real one does with ``--backend sglang``, and appends to ``--output-file`` a line with the real
one's keys for what it measured. Without streaming, TTFT is the whole request's latency.
tests/sglang_fork/test_gpu_deploy.py checks that the real benchmark has these options and keys.

Its times are a model, not a measurement of the machine it runs on: each request tells the stub
deployment (tests/sglang_fork/test_gpu_deploy.py) the concurrency it runs at, the stub answers with the latency
a deployment would have had (``meta_info.e2e_latency``), and the run lasts as long as its waves of
``--max-concurrency`` requests, each as long as its slowest. So the same stub gives the same figures
on a busy machine as on an idle one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang.benchmark.serving")
    p.add_argument("--backend", required=True, choices=["sglang"])
    p.add_argument("--base-url", required=True)
    p.add_argument("--dataset-name", required=True, choices=["random"])
    p.add_argument("--random-input-len", type=int, required=True)
    p.add_argument("--random-output-len", type=int, required=True)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--num-prompts", type=int, required=True)
    p.add_argument("--max-concurrency", type=int, required=True)
    p.add_argument("--output-file", required=True)
    return p


def main() -> None:
    args = _parser().parse_args()
    base = args.base_url.rstrip("/")
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as response:
        model = json.load(response)["data"][0]["id"]

    def one(i: int) -> tuple[float, int] | None:
        body = json.dumps(
            {
                "text": f"prompt {i} of {args.random_input_len} tokens",
                "sampling_params": {"max_new_tokens": args.random_output_len},
                "stand_in_concurrency": args.max_concurrency,
            }
        ).encode()
        request = urllib.request.Request(base + "/generate", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                meta = json.load(response)["meta_info"]
                return float(meta["e2e_latency"]), int(meta["completion_tokens"])
        except (OSError, ValueError, KeyError):  # HTTPError is an OSError
            return None

    with ThreadPoolExecutor(args.max_concurrency) as pool:
        answers = list(pool.map(one, range(args.num_prompts)))
    waves = [answers[i : i + args.max_concurrency] for i in range(0, len(answers), args.max_concurrency)]
    duration = sum(max((a[0] for a in wave if a is not None), default=0.0) for wave in waves) or 1e-9
    outputs = [a for a in answers if a is not None]
    latencies_ms = [latency * 1000 for latency, _ in outputs] or [0.0]
    total = sum(tokens for _, tokens in outputs)
    result = {
        "backend": args.backend,
        "model": model,
        "max_concurrency": args.max_concurrency,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "duration": duration,
        "completed": len(outputs),
        "total_output_tokens": total,
        "output_throughput": total / duration,
        "mean_ttft_ms": statistics.mean(latencies_ms),
        "median_ttft_ms": statistics.median(latencies_ms),
        "mean_tpot_ms": statistics.mean(ms / max(1, args.random_output_len) for ms in latencies_ms),
    }
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    print("{:<40} {:<10}".format("Successful requests:", len(outputs)))
    print("{:<40} {:<10.2f}".format("Benchmark duration (s):", duration))
    print("{:<40} {:<10.2f}".format("Output token throughput (tok/s):", result["output_throughput"]))
    print("{:<40} {:<10.2f}".format("Mean TTFT (ms):", result["mean_ttft_ms"]))
    print("=" * 50)
    with open(args.output_file, "a") as file:
        file.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
