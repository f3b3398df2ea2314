"""Servers under load and under pathological load: 64 concurrent clients against each `ragteam serve` server.

Issue 23 asks that one oversized request must never take its batch down: "64 concurrent clients to each
server while one request in every batch is pathological in size: zero good requests fail, the server's peak
memory stays within a stated bound, good requests' p95 latency stated beside the calm baseline". This bench
measures exactly that, black-box: each server is started as a subprocess through the CLI (`ragteam serve
retriever|llm|team ... --port 0` on loopback, its URL read from its `serving on` line), so it runs against
whatever code the `ragteam` command imports (`PYTHONPATH=SNAPSHOT/src` runs an older checkout). Per server:

  1. calm: `--clients` concurrent clients (asyncio + httpx), each sending `--requests` good requests one
     after another; every answer is checked (status 200 and the shape a client reads).
  2. pathological: the same clients and requests, plus `clients // batch` extra clients (at least 1; `batch`
     is the server's batch size: `--llm-batch` requests, `--team-batch` questions, /retrieve's 512 queries)
     that each send pathological requests back to back until the good clients are done, so about one
     request in every batch is pathological:
       - `serve retriever`: the largest `topk` it accepts (`--max-topk`), with the most queries per request
         (`--max-queries`), each of the longest query text it accepts (`--max-query-chars`, HotpotQA words);
       - `serve llm`: the longest prompt it accepts and, alternating, the largest forced prefix
         (`continue_final_message`) after a short question; both found before the phases by bisection over
         what the server answers 200 (the largest number of filler words that fits the model's context);
       - `serve team`: the longest question it accepts (`--max-question-chars` characters: a real question
         then emoji, the most tokens per character; the team cuts it to its model's context).
     Each pathological request's status is counted: 200, or a 4xx naming a limit, are both acceptable;
     a good request that fails is not.
  3. `serve llm` only, huge-prompt (issue 33): the same good clients, plus `clients // batch` clients (at
     least 1) sending a 3.9 MB prompt (under the 4 MB body limit, far over the context) back to back. Each
     must be refused 400; the server decides that before its model thread sees the prompt
     (`ragteam.serve.llm_prompt`), so good requests' p95 must stay within `HUGE_P95_RATIO` (2x) of calm.
     Before, the prompt was tokenized in the decoding thread for seconds, and every request waited.
  4. `serve retriever` only (the bad-input phase of the bench/retriever_load.py this replaces): 16 kinds of
     bad input, each must get a 4xx JSON answer, and a normal request after them must succeed.

Memory: the server's peak resident set per phase (/proc/PID/status VmHWM, reset between phases through
/proc/PID/clear_refs; psutil's sampled RSS where /proc has neither) must stay within `--rss-bound-mb`. The
server runs under an address-space limit (`--mem-limit-mb`, RLIMIT_AS), so a batch that would grow without
bound fails its allocation inside the server (the "less memory free" case of issue 23) instead of pushing the
machine into swap or the OOM killer (and its oom_score_adj is 1000: on a shared machine short of memory the
kernel kills it before anyone else's job).

Printed: a table per server and phase (requests, good failures, p50/p95 latency, the ratio p95 pathological /
p95 calm measured side by side in one run, the pathological requests' status codes, requests per batch from
/health, peak RSS); every failing good request with its status and body, and the tail of the server's log.
Exit status 0 only when no good request failed, no server died, every peak RSS is within the bound, the
huge-prompt phase's p95 is within 2x of calm and the bad-input phase passed.

    nice -n 19 .venv/bin/python bench/serve_load.py                      # all three servers, tiny model
    nice -n 19 .venv/bin/python bench/serve_load.py --servers llm --model smollm2 --requests 2
    nice -n 19 .venv/bin/python bench/serve_load.py --servers retriever --requests 50 --clients 32
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "hotpotqa-dev-500.jsonl"
RAGTEAM = Path(sys.executable).with_name("ragteam")  # the CLI of the interpreter running this bench
SERVERS = ("retriever", "llm", "team")
REQUESTS = {"retriever": 25, "llm": 4, "team": 2}  # per good client and phase, unless --requests
RETRIEVER_BATCH = 512  # `serve retriever --max-batch`: queries per batched search (its default)
FILLER = " the river flows"  # the llm's filler unit: 4 tokens of the tiny model's BPE, 3 of SmolLM2's
EMOJI = "\U0001f600"
HUGE_PROMPT = FILLER * 243_750  # 3.9 MB of text: under `serve llm`'s 4 MB body limit, far over any context
HUGE_P95_RATIO = 2.0  # good requests' p95 beside huge prompts, at most this times calm


class Server:
    """`ragteam serve KIND ARGS --host 127.0.0.1 --port 0` as a subprocess under an address-space limit."""

    def __init__(self, kind: str, args: list[str], mem_limit_mb: int, timeout: float = 600.0) -> None:
        self.kind, self.args, self.mem_limit_mb, self.timeout = kind, args, mem_limit_mb, timeout
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"serve-{kind}-", suffix=".log", delete=False)
        self.lines: list[str] = []
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None

    def _limit(self) -> None:
        """In the child, before exec: the address-space limit, and first in line for the OOM killer should
        the machine run short anyway (other jobs share it)."""
        limit = self.mem_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            Path("/proc/self/oom_score_adj").write_text("1000")
        except OSError:
            pass

    def start(self) -> Server:
        cmd = [str(RAGTEAM), "serve", self.kind, *self.args, "--host", "127.0.0.1", "--port", "0"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, preexec_fn=self._limit
        )
        watchdog = threading.Timer(self.timeout, self.proc.kill)  # a silent server would block readline
        watchdog.start()
        try:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line.rstrip())
                if line.startswith("serving on "):
                    self.url = line.split()[-1]
                    threading.Thread(target=self._drain, daemon=True).start()
                    return self
        finally:
            watchdog.cancel()
        self.stop()
        raise RuntimeError(f"`{' '.join(cmd)}` did not start; its log:\n{self.log_tail()}")

    def _drain(self) -> None:  # keep reading stdout, so a full pipe never blocks the server
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        self.log.flush()
        text = Path(self.log.name).read_text(encoding="utf-8", errors="replace")
        return "\n".join([*self.lines[-3:], *text.splitlines()[-lines:]])

    def reset_peak(self) -> None:
        """Start a new peak: VmHWM falls back to the current RSS (Linux clear_refs 5); psutil samples anew."""
        assert self.proc is not None
        try:
            Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
        except OSError:
            pass
        self._sampled = 0.0

    def peak_rss_mb(self) -> float:
        """Peak resident set since `reset_peak`, in MB (VmHWM; else the largest RSS psutil sampled)."""
        assert self.proc is not None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return self._sampled

    def sample_rss(self) -> None:
        """Where /proc has no VmHWM: remember the largest RSS seen (psutil), called while a phase runs."""
        try:
            import psutil

            rss = psutil.Process(self.proc.pid).memory_info().rss / 2**20  # type: ignore[union-attr]
            self._sampled = max(getattr(self, "_sampled", 0.0), rss)
        except Exception:  # noqa: BLE001 - no psutil, or the process is gone: nothing to sample
            pass

    def stop(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


@dataclass
class Target:
    """What to send one server: its route, a good request (body and its check) and its pathological ones."""

    name: str
    route: str
    args: list[str]
    batch: int  # requests one batch holds when the server is full (for "one pathological per batch")
    good: Callable[[random.Random], tuple[dict, Callable[[httpx.Response], str]]]
    pathological: list[tuple[str, dict]] = field(default_factory=list)  # (kind, body), sent in turn
    huge: list[tuple[str, dict]] = field(default_factory=list)  # the huge-prompt phase's requests (llm)


def _ok_json(r: httpx.Response) -> dict | None:
    try:
        body = r.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def retriever_target(args: argparse.Namespace, questions: list[str]) -> Target:
    def good(rng: random.Random) -> tuple[dict, Callable[[httpx.Response], str]]:
        qs, k = rng.sample(questions, rng.randint(1, 4)), rng.randint(1, 10)

        def check(r: httpx.Response) -> str:
            body = _ok_json(r)
            rows = body.get("result") if body else None
            if r.status_code == 200 and isinstance(rows, list) and len(rows) == len(qs):
                if all(len(row) == k and "document" in row[0] for row in rows):
                    return ""
            return f"HTTP {r.status_code}: {r.text[:300]}"

        return {"queries": qs, "topk": k, "return_scores": True}, check

    rng = random.Random(7)
    queries = []
    for _ in range(args.max_queries):  # HotpotQA words, as long as the server accepts, no two alike
        text = ""
        while len(text) < args.max_query_chars:
            text += rng.choice(questions) + " "
        queries.append(text[: args.max_query_chars].strip().ljust(args.max_query_chars, "?"))
    index = args.index or retriever_index(args)
    return Target(
        "retriever",
        "/retrieve",
        ["--index", str(index), "--kind", args.kind, "--max-topk", str(args.max_topk)]
        + ["--max-queries", str(args.max_queries), "--max-query-chars", str(args.max_query_chars)],
        max(1, RETRIEVER_BATCH * 2 // 5),  # good requests hold 2.5 queries on average
        good,
        [("topk", {"queries": queries, "topk": args.max_topk})],
    )


def retriever_index(args: argparse.Namespace) -> Path:
    """An index of `--data`'s pooled paragraphs for `--kind`, built once by `ragteam index` under
    $RAGTEAM_HOME (a folder that already holds its kinds is reused)."""
    kinds = ["bm25", "dense"] if args.kind == "hybrid" else [args.kind]
    home = Path(os.environ.get("RAGTEAM_HOME", ROOT / ".ragteam"))
    folder = home / "bench" / f"serve-load-{Path(args.data).stem}"
    if not all((folder / kind).exists() for kind in kinds):
        cmd = [str(RAGTEAM), "index", "--data", args.data, "--out", str(folder), "--kinds", *kinds]
        subprocess.run([*cmd, "--no-progress"], check=True, stdout=subprocess.DEVNULL)
    return folder


def chat_check(r: httpx.Response) -> str:
    body = _ok_json(r)
    try:
        assert r.status_code == 200 and body is not None
        assert isinstance(body["choices"][0]["message"]["content"], str)
    except (AssertionError, KeyError, IndexError, TypeError):
        return f"HTTP {r.status_code}: {r.text[:300]}"
    return ""


def llm_target(args: argparse.Namespace, questions: list[str]) -> Target:
    def good(rng: random.Random) -> tuple[dict, Callable[[httpx.Response], str]]:
        q = rng.choice(questions)
        messages = [{"role": "user", "content": q}]
        return {"messages": messages, "max_tokens": args.max_tokens, "temperature": 0}, chat_check

    args_ = [
        "--model.model",
        args.model,
        "--model.threads",
        "1",
        "--model.max-batch-size",
        str(args.llm_batch),
    ]
    huge = {"messages": [{"role": "user", "content": HUGE_PROMPT}], "max_tokens": args.max_tokens}
    return Target("llm", "/v1/chat/completions", args_, args.llm_batch, good, huge=[("3.9 MB prompt", huge)])


def llm_pathological(base: str, max_tokens: int) -> list[tuple[str, dict]]:
    """The longest prompt and the largest forced prefix the server answers 200: the most filler units it
    answers (`largest_answered`), each probe run alone on the idle server; printed with their token counts."""
    question = "Who wrote Hamlet?"

    def body(units: int, prefix_units: int) -> dict:
        messages = [{"role": "user", "content": question + FILLER * units}]
        if prefix_units == 0:
            return {"messages": messages, "max_tokens": max_tokens, "temperature": 0}
        messages.append({"role": "assistant", "content": "The answer is" + FILLER * prefix_units})
        return {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "continue_final_message": True,
            "add_generation_prompt": False,
        }

    out = []
    with httpx.Client(timeout=600) as c:
        for kind, make in (("prompt", lambda u: body(u, 0)), ("prefix", lambda u: body(0, u))):
            units, probes = largest_answered(
                lambda u, make=make: c.post(base + "/v1/chat/completions", json=make(u))
            )
            (r, alone), refused = probes[units], probes[units + 1][0]
            usage, forced = r.json()["usage"], r.json()["choices"][0].get("forced_tokens")
            print(
                f"  llm {kind}: {units} filler units answered alone in {alone:.1f} s ({usage['prompt_tokens']} "
                f"prompt tokens, {forced} forced, {usage['completion_tokens']} completion); {units + 1} "
                f"answered {refused.status_code}: {refused.text[:160]}",
                file=sys.stderr,
            )
            out.append((kind, make(units)))
    return out


def largest_answered(send: Callable[[int], httpx.Response]) -> tuple[int, dict]:
    """The most filler units `send(units)` is answered 200 for, and every probe (units -> answer, seconds).

    A first guess from two short probes and the context a refusal names (a refused request costs nothing;
    one answered near the limit costs a long prefill on a real model), then bisection."""
    probes: dict[int, tuple[httpx.Response, float]] = {}

    def answered(units: int) -> httpx.Response:
        if units not in probes:
            start = time.perf_counter()
            probes[units] = (send(units), time.perf_counter() - start)
        return probes[units][0]

    def tokens(units: int) -> int:  # what the filler grows: the prompt, or the prompt and the prefix
        answer = answered(units).json()
        return answer["usage"]["prompt_tokens"] + (answer["choices"][0].get("forced_tokens") or 0)

    lo, hi = 0, 1 << 16  # lo is answered 200, hi refused
    context = re.search(r"context of (\d+)", answered(hi).text)
    if context and tokens(64) > tokens(0):
        guess = (int(context.group(1)) - 1 - tokens(0)) * 64 // (tokens(64) - tokens(0))
        if not answered(guess + 2).is_success:
            lo, hi = (guess - 2, guess + 2) if answered(guess - 2).is_success else (0, guess + 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if answered(mid).is_success else (lo, mid)
    answered(lo + 1)
    return lo, probes


def team_target(args: argparse.Namespace, questions: list[str]) -> Target:
    def good(rng: random.Random) -> tuple[dict, Callable[[httpx.Response], str]]:
        return {"messages": [{"role": "user", "content": rng.choice(questions)}]}, chat_check

    head = "Who portrayed Corliss Archer in the film Kiss and Tell? "
    longest = head + EMOJI * (args.max_question_chars - len(head))
    args_ = ["--workflow", "standard-rag", "--data", args.data, "--retriever.kind", "bm25", "--topk", "2"]
    args_ += ["--rollout.llm-max-tokens", str(args.max_tokens), "--max-batch", str(args.team_batch)]
    args_ += ["--max-question-chars", str(args.max_question_chars)]
    for role in ("policy", "llm"):
        args_ += [f"--{role}.model", args.model, f"--{role}.threads", "1"]
    body = {"messages": [{"role": "user", "content": longest}]}
    return Target("team", "/v1/chat/completions", args_, args.team_batch, good, [("question", body)])


def check_limits(base: str, target: Target) -> None:
    """Each pathological request answered alone, and one a little over it, so the table's sizes are shown
    to be the largest the server accepts (printed; not a failure of the run)."""
    over = {
        "topk": lambda b: {**b, "topk": b["topk"] + 1},
        "question": lambda b: {"messages": [{"role": "user", "content": b["messages"][0]["content"] + "?"}]},
    }
    with httpx.Client(timeout=600) as c:
        for kind, body in target.pathological if target.name != "llm" else []:  # llm: timed when found
            t0 = time.perf_counter()
            r = c.post(base + target.route, json=body)
            shown = f"{kind}: alone HTTP {r.status_code} in {time.perf_counter() - t0:.1f} s"
            if kind in over:
                refused = c.post(base + target.route, json=over[kind](body))
                shown += f"; one more: HTTP {refused.status_code} {refused.text[:160]}"
            print(f"  {target.name} {shown}", file=sys.stderr)


@dataclass
class PhaseResult:
    server: str
    phase: str
    clients: int
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    pathological: Counter = field(default_factory=Counter)
    refusals: dict[str, str] = field(default_factory=dict)  # the first answer of each non-200 outcome
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    per_batch: float = 0.0
    alive: bool = True

    def pct(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")


async def run_phase(server: Server, target: Target, phase: str, args: argparse.Namespace) -> PhaseResult:
    """`--clients` good clients to the end of their requests; in the pathological phase, beside them,
    clients sending pathological requests back to back until the good ones are done."""
    requests = args.requests or REQUESTS[target.name]
    extra = max(1, args.clients // target.batch) if phase != "calm" else 0
    sent = target.huge if phase == "huge-prompt" else target.pathological
    result = PhaseResult(target.name, phase, args.clients + extra)
    base, done = server.url + target.route, asyncio.Event()

    async def good_client(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(timeout=args.timeout) as c:
            for _ in range(requests):
                body, check = target.good(rng)
                t0 = time.perf_counter()
                try:
                    why = check(await c.post(base, json=body))
                except Exception as e:  # noqa: BLE001 - a failed request is a finding of the run
                    why = f"{type(e).__name__}: {e}"
                result.latencies_ms.append((time.perf_counter() - t0) * 1000)
                if why:
                    result.failures.append(f"{why}  <- request {json.dumps(body)[:200]}")

    async def pathological_client(k: int) -> None:
        async with httpx.AsyncClient(timeout=args.timeout) as c:
            i = k
            while not done.is_set():
                kind, body = sent[i % len(sent)]
                i += 1
                try:
                    r = await c.post(base, json=body)
                    outcome, text = str(r.status_code), r.text
                except Exception as e:  # noqa: BLE001 - counted by its kind
                    outcome, text = type(e).__name__, str(e)
                result.pathological[f"{kind} {outcome}"] += 1
                if outcome != "200":
                    result.refusals.setdefault(f"{kind} {outcome}", text[:300])

    async def sampler() -> None:
        while not done.is_set():
            server.sample_rss()
            await asyncio.sleep(0.2)

    server.reset_peak()
    before = await asyncio.to_thread(health, server)
    t0 = time.perf_counter()
    side = [asyncio.create_task(pathological_client(k)) for k in range(extra)]
    side.append(asyncio.create_task(sampler()))
    await asyncio.gather(*(good_client(args.seed * 1000 + i) for i in range(args.clients)))
    result.seconds = time.perf_counter() - t0
    done.set()
    _, late = await asyncio.wait(side, timeout=args.timeout)  # the last pathological requests finish
    for task in late:
        task.cancel()
    result.requests = len(result.latencies_ms)
    result.alive = server.alive
    result.peak_rss_mb = server.peak_rss_mb()
    after = await asyncio.to_thread(health, server)
    batches = after.get("batches", after.get("runs", 0)) - before.get("batches", before.get("runs", 0))
    result.per_batch = (after.get("requests", 0) - before.get("requests", 0)) / max(1, batches)
    return result


def health(server: Server) -> dict:
    try:
        return httpx.get(server.url + "/health", timeout=30).json()
    except (httpx.HTTPError, ValueError):
        return {}


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


def abuse_phase(server: Server) -> list[str]:
    """Bad input to /retrieve: each must get its 4xx JSON answer; the server must serve a normal request
    after them. Returns the failures."""
    failures = []
    with httpx.Client(timeout=30) as c:
        for name, body, want in ABUSE:
            try:
                r = c.post(
                    server.url + "/retrieve", content=body, headers={"content-type": "application/json"}
                )
                got = _ok_json(r) or {}
                good, shown = r.status_code == want and "error" in got, f"HTTP {r.status_code} {r.text[:70]}"
            except Exception as e:  # noqa: BLE001 - any failure is a failed case
                good, shown = False, f"{type(e).__name__}: {e}"
            if not good:
                failures.append(f"{name}: {shown}")
        after = c.post(server.url + "/retrieve", json={"queries": ["Shirley Temple"], "topk": 2})
    if after.status_code != 200 or not server.alive:
        failures.append(f"after the bad input: HTTP {after.status_code}, alive={server.alive}")
    print(f"  retriever bad input: {len(ABUSE) - len(failures)}/{len(ABUSE)} got their 4xx", file=sys.stderr)
    return failures


def bench_server(target: Target, args: argparse.Namespace) -> tuple[list[PhaseResult], list[str]]:
    """Start the server, find its pathological sizes, run the calm then the pathological phase."""
    server = Server(target.name, target.args, args.mem_limit_mb)
    t0 = time.perf_counter()
    server.start()
    print(
        f"  {target.name}: listening after {time.perf_counter() - t0:.0f} s: {server.lines}", file=sys.stderr
    )
    problems: list[str] = []
    results: list[PhaseResult] = []
    try:
        if target.name == "llm":
            target.pathological = llm_pathological(server.url, args.max_tokens)
        check_limits(server.url, target)
        for phase in ("calm", "pathological", *(["huge-prompt"] if target.huge else [])):
            r = asyncio.run(run_phase(server, target, phase, args))
            results.append(r)
            print(f"  {target.name} {phase}: {r.requests} requests in {r.seconds:.0f} s", file=sys.stderr)
            if not r.alive:
                problems.append(f"{target.name} died in the {phase} phase (exit {server.proc.returncode})")
                break
        problems += huge_prompt_problems(results)
        if target.name == "retriever" and server.alive:
            problems += [f"retriever bad input: {f}" for f in abuse_phase(server)]
        if any(r.failures for r in results) or problems:
            problems.append(f"{target.name} server log (tail):\n{server.log_tail()}")
    finally:
        server.stop()
    return results, problems


def huge_prompt_problems(results: list[PhaseResult]) -> list[str]:
    """The huge-prompt phase's findings: a huge prompt answered other than 400, or good requests' p95 over
    `HUGE_P95_RATIO` times calm."""
    calm = next((r for r in results if r.phase == "calm"), None)
    problems = []
    for r in results:
        if r.phase != "huge-prompt" or calm is None:
            continue
        if other := [k for k in r.pathological if not k.endswith(" 400")]:
            problems.append(f"{r.server} huge-prompt: answered {', '.join(other)} (each must be a 400)")
        if r.pct(95) > HUGE_P95_RATIO * calm.pct(95):
            problems.append(
                f"{r.server} huge-prompt: good p95 {r.pct(95):,.0f} ms is over {HUGE_P95_RATIO:g}x calm's "
                f"{calm.pct(95):,.0f} ms"
            )
    return problems


def table(results: list[PhaseResult], bound_mb: float) -> str:
    rows = [
        "| server | phase | clients | good requests | good failed | good req/s | p50 ms | p95 ms | p95 / calm p95 | "
        "pathological requests: status x count | requests per batch | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    calm = {r.server: r.pct(95) for r in results if r.phase == "calm"}
    for r in results:
        ratio = f"{r.pct(95) / calm[r.server]:.2f}" if r.phase != "calm" and r.server in calm else "1"
        path = ", ".join(f"{k} x{v}" for k, v in sorted(r.pathological.items())) or "-"
        over = "" if r.peak_rss_mb <= bound_mb else " (over)"
        rows.append(
            f"| {r.server} | {r.phase} | {r.clients} | {r.requests} | {len(r.failures)} | "
            f"{r.requests / max(r.seconds, 1e-9):,.1f} | {r.pct(50):,.0f} | "
            f"{r.pct(95):,.0f} | {ratio} | {path} | {r.per_batch:.1f} | {r.peak_rss_mb:,.0f}{over} |"
        )
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", nargs="+", choices=SERVERS, default=list(SERVERS))
    ap.add_argument(
        "--model",
        default="tiny",
        help="`serve llm --model.model` and the team's models: tiny, smollm2 or a folder",
    )
    ap.add_argument(
        "--data", default=str(DEFAULT_DATA), help="questions to send; its paragraphs are the corpus"
    )
    ap.add_argument("--clients", type=int, default=64, help="concurrent clients sending good requests")
    ap.add_argument("--requests", type=int, help=f"good requests per client and phase (default {REQUESTS})")
    ap.add_argument("--max-tokens", type=int, default=8, help="completion tokens per LLM call")
    ap.add_argument("--llm-batch", type=int, default=32, help="`serve llm --model.max-batch-size`")
    ap.add_argument("--team-batch", type=int, default=32, help="`serve team --max-batch`")
    ap.add_argument("--index", help="`serve retriever`'s index folder (default: --data's paragraphs, BM25)")
    ap.add_argument("--kind", default="bm25", choices=["bm25", "dense", "hybrid"], help="retriever served")
    ap.add_argument("--max-topk", type=int, default=100, help="`serve retriever --max-topk`")
    ap.add_argument("--max-queries", type=int, default=256, help="`serve retriever --max-queries`")
    ap.add_argument("--max-query-chars", type=int, default=4096, help="`serve retriever --max-query-chars`")
    ap.add_argument("--max-question-chars", type=int, default=8000, help="`serve team --max-question-chars`")
    ap.add_argument(
        "--rss-bound-mb", type=float, default=3000, help="the stated bound on each server's peak RSS"
    )
    ap.add_argument(
        "--mem-limit-mb", type=int, default=6144, help="the server's address-space limit (RLIMIT_AS)"
    )
    ap.add_argument("--timeout", type=float, default=600, help="seconds one request may take")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()

    from ragteam.data.questions import read_questions

    questions = [q.question for q in read_questions(args.data).questions]
    code = subprocess.run(
        [sys.executable, "-c", "import ragteam; print(ragteam.__file__)"], capture_output=True, text=True
    ).stdout.strip()
    print(f"servers run {code}; load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    makers = {"retriever": retriever_target, "llm": llm_target, "team": team_target}
    results: list[PhaseResult] = []
    problems: list[str] = []
    t0 = time.perf_counter()
    for name in args.servers:
        got, found = bench_server(makers[name](args, questions), args)
        results += got
        problems += found
    print(table(results, args.rss_bound_mb))
    print(
        f"\n{time.perf_counter() - t0:.0f} s; peak RSS bound {args.rss_bound_mb:,.0f} MB (address space "
        f"limit {args.mem_limit_mb:,} MB); load average now {os.getloadavg()[0]:.1f}"
    )
    for r in results:
        for f in r.failures[:5]:
            print(f"FAILED good request ({r.server}, {r.phase}): {f}")
    for r in results:
        for outcome, text in r.refusals.items():
            print(f"pathological ({r.server}, {r.phase}) {outcome}: {text}")
    for p in problems:
        print(p)
    ok = (
        results
        and not problems
        and all(
            not r.failures and r.alive and r.requests and r.peak_rss_mb <= args.rss_bound_mb for r in results
        )
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps([{**r.__dict__, "p50_ms": r.pct(50), "p95_ms": r.pct(95)} for r in results], indent=1)
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
