"""Load test: 32 concurrent clients against `ragteam serve retriever` on loopback, then bad input.

Starts the server as a subprocess (`--port 0`, the URL read from its first line) over an index folder (by
default the pooled HotpotQA-500 paragraphs, BM25, built once under $RAGTEAM_HOME), then:

  1. load: `--clients` concurrent clients (asyncio + httpx) each send up to `--requests` POST /retrieve
     requests of 1-4 HotpotQA questions (topk 1-10), all within `--seconds`; every answer is checked (status
     200, one list per query, topk hits each). Prints throughput, latency percentiles, how many requests
     the server folded into one batch, and the error count, which must be 0.
  2. abuse: malformed JSON, a non-UTF-8 body, a 5 MB body, negative / zero / huge / string topk, wrong
     types, too many and too long queries: each must get a 4xx JSON answer; then a normal request must
     still succeed and the process must still be alive.

Exit status 0 only when both phases pass.

    .venv/bin/python bench/retriever_load.py
    .venv/bin/python bench/retriever_load.py --index indexes/hotpot --kind hybrid --clients 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hotpotqa-dev-500.jsonl"


async def load_phase(base: str, questions: list[str], clients: int, requests: int, seconds: float) -> dict:
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + seconds

    async def client(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(timeout=30) as c:
            for _ in range(requests):
                if time.monotonic() > deadline:
                    return
                qs = rng.sample(questions, rng.randint(1, 4))
                k = rng.randint(1, 10)
                t0 = time.perf_counter()
                try:
                    r = await c.post(
                        base + "/retrieve", json={"queries": qs, "topk": k, "return_scores": True}
                    )
                    body = r.json()
                    ok = (
                        r.status_code == 200
                        and len(body["result"]) == len(qs)
                        and all(len(row) == k and "document" in row[0] for row in body["result"])
                    )
                    if not ok:
                        errors.append(f"HTTP {r.status_code}: {r.text[:200]}")
                except Exception as e:  # noqa: BLE001 - a failed request is an error of the run
                    errors.append(f"{type(e).__name__}: {e}")
                latencies.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    wall = time.perf_counter() - t0
    lat = np.asarray(latencies)
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "first_errors": errors[:5],
        "seconds": wall,
        "requests_per_s": len(latencies) / wall,
        "p50_ms": float(np.percentile(lat, 50)),
        "p95_ms": float(np.percentile(lat, 95)),
        "p99_ms": float(np.percentile(lat, 99)),
    }


ABUSE = [
    ("malformed JSON", b'{"queries": ["a", ', 400),
    ("not UTF-8", b"\xff\xfe\x00garbage", 400),
    ("5 MB body", json.dumps({"queries": ["x" * 1000] * 5000}).encode(), 413),
    ("body is a list", b'["q"]', 422),
    ("no queries", b'{"topk": 3}', 422),
    ("queries is a string", b'{"queries": "q"}', 422),
    ("empty queries", b'{"queries": []}', 422),
    ("a query is a number", b'{"queries": ["a", 7]}', 422),
    ("too many queries", json.dumps({"queries": ["q"] * 10_000}).encode(), 422),
    ("query too long", json.dumps({"queries": ["w " * 5000]}).encode(), 422),
    ("negative topk", b'{"queries": ["q"], "topk": -5}', 422),
    ("zero topk", b'{"queries": ["q"], "topk": 0}', 422),
    ("huge topk", b'{"queries": ["q"], "topk": 10000000000000}', 422),
    ("string topk", b'{"queries": ["q"], "topk": "10"}', 422),
    ("float topk", b'{"queries": ["q"], "topk": 2.5}', 422),
    ("bad return_scores", b'{"queries": ["q"], "return_scores": "yes"}', 422),
]


def abuse_phase(base: str, proc: subprocess.Popen) -> dict:
    failures = []
    with httpx.Client(timeout=30) as c:
        for name, body, want in ABUSE:
            try:
                r = c.post(base + "/retrieve", content=body, headers={"content-type": "application/json"})
                good = r.status_code == want and "error" in r.json()
                shown = f"HTTP {r.status_code} {r.json().get('error', '')[:70]}"
            except Exception as e:  # noqa: BLE001 - any failure is a failed case
                good, shown = False, f"{type(e).__name__}: {e}"
            print(f"  {'ok ' if good else 'BAD'} {name:<22} -> {shown}", file=sys.stderr)
            if not good:
                failures.append(f"{name}: {shown}")
        after = c.post(base + "/retrieve", json={"queries": ["Shirley Temple"], "topk": 2})
        health = c.get(base + "/health").json()
    alive = proc.poll() is None
    if after.status_code != 200 or not alive:
        failures.append(f"server after abuse: HTTP {after.status_code}, alive={alive}")
    return {
        "cases": len(ABUSE),
        "failures": failures,
        "still_serving": after.status_code == 200 and alive,
        "health": health,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", help="index folder (default: pooled paragraphs of --data, built once)")
    ap.add_argument(
        "--data", default=str(DEFAULT_DATA), help="questions to send (and to pool, without --index)"
    )
    ap.add_argument("--kind", default="bm25", choices=["bm25", "dense", "hybrid"])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=50, help="requests per client at most")
    ap.add_argument("--seconds", type=float, default=60.0, help="the load phase stops after this long")
    args = ap.parse_args()

    from ragteam.config import setup_caches
    from ragteam.data.questions import read_questions
    from ragteam.retrieval.factory import KIND_NEEDS, dataset_index
    from ragteam.serve.testing import ServerProcess

    setup_caches()
    questions = [q.question for q in read_questions(args.data).questions]
    index = Path(args.index) if args.index else dataset_index(args.data, kinds=KIND_NEEDS[args.kind]).path
    server = ServerProcess(["retriever", "--index", str(index), "--kind", args.kind, "--host", "127.0.0.1"])
    with server:
        for line in server.lines:
            print(f"  server: {line}", file=sys.stderr)
        base = server.url
        load = asyncio.run(load_phase(base, questions, args.clients, args.requests, args.seconds))
        stats = httpx.get(base + "/health", timeout=10).json()
        print(
            f"load: {args.clients} clients, {load['requests']} requests in {load['seconds']:.1f} s "
            f"({load['requests_per_s']:.0f} req/s), latency p50 {load['p50_ms']:.1f} ms, p95 "
            f"{load['p95_ms']:.1f} ms, p99 {load['p99_ms']:.1f} ms, errors {load['errors']}"
        )
        print(
            f"server: {stats['batches']} batched searches for {stats['requests']} requests "
            f"({stats['requests'] / max(1, stats['batches']):.1f} per batch on average, at most "
            f"{stats['max_batch_requests']})"
        )
        for e in load["first_errors"]:
            print(f"  error: {e}")
        abuse = abuse_phase(base, server.proc)
        print(
            f"abuse: {abuse['cases'] - len(abuse['failures'])}/{abuse['cases']} bad requests got the expected "
            f"4xx; still serving: {abuse['still_serving']}"
        )
        for f in abuse["failures"]:
            print(f"  failure: {f}")
    ok = load["errors"] == 0 and load["requests"] > 0 and not abuse["failures"]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
