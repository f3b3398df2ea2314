"""Benchmark: the rollout engine against bare batched generation and one-by-one generation (SmolLM2, CPU).

The same chat prompts are generated three ways in one run, all with greedy decoding and exactly
`--max-new-tokens` new tokens per prompt (end-of-turn is ignored), so generated tokens/s compare fairly:

  one-by-one  `model.generate` on one prompt at a time (the floor);
  bare        one left-padded `model.generate` call over the whole batch (the limit);
  engine      `Engine.run` with a one-act workflow, `max_concurrent` = batch size: the policy requests of all
              episodes go to `LocalChatModel.chat` as one batch (its own KV-cache decoding loop).

It prints tokens/s per batch size (8, 16, 32 by default) and the ratios engine/bare (the engine should keep
>= 0.90 of the limit) and engine/one-by-one (its advantage, which should grow with the batch size).

    .venv/bin/python bench/rollout.py --quick       # ~2 minutes on 2 cores
    .venv/bin/python bench/rollout.py --device cuda --batch-sizes 8 16 32 64

`--mode tree` measures instead what tree rollouts lean on: K sampled continuations of each of several long
prompts (HotpotQA paragraphs and a question, ~600 tokens; seeded, temperature 1, `--max-new-tokens` each,
EOS ignored), all in one `LocalChatModel.chat` batch, with shared prefill on (each prompt's forward pass runs
once, its KV cache copied to its K rows) and off (every row prefills its own copy). The two runs alternate
within each round, must give the same tokens, and the median times are compared. One torch thread keeps the
timings steady when other jobs share the cores (with two, a decode step waits on descheduled threads).

    OMP_NUM_THREADS=1 .venv/bin/python bench/rollout.py --mode tree   # ~3 minutes

`--mode prefix` measures the prefix cache (`llm/prefix_cache.py`) on real workloads, SmolLM2 as policy and LLM
(two models, so each one's counts are its own), BM25 over the questions' own paragraphs: an MMOA-RAG GRPO
iteration (Selector + Generator, `--grpo-questions` questions x `--group-size` 8 members, temperature 1, top-p
0.9; replies capped at `--grpo-max-tokens` 16, the length of the SFT policy's: the base model would ramble
where the trained one answers in a few words), a C-3PO tree (`--rollout.forks c3po`: the router's three strategies, then K=2 to depth 4) and a RAG-Gym
Re2Search episode (up to 10 steps; the actor's reasoning forced, its query sampled: `FormatFollowing`), in the
paper's layout (`gym`: the history before the question and the instructions) and with `--history-at end`
(`gym-end`: the history last, so each step's prompt extends the previous step's). Each runs under each of `--arms`: `off` (`--rollout.prefix-cache-mb 0`,
the engine before the cache: identical prompts of one batch still prefilled once), `on` (the cache), `none`
(no sharing at all: every prompt prefilled from scratch), each from an empty cache (a training iteration
starts with one: the weights changed), the same seeds, side by side: prompt tokens, prefilled tokens, the
share prefilled, wall time (the fastest of `--repeats` rounds, the arms' order alternating), episodes per
hour, and whether the sampled tokens were the same.

    OMP_NUM_THREADS=2 .venv/bin/python bench/rollout.py --mode prefix   # ~15 minutes on 2 busy cores
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOPICS = [
    "the water cycle",
    "photosynthesis",
    "the Roman Empire",
    "black holes",
    "the printing press",
    "volcanoes",
    "the human heart",
    "jazz music",
    "the Great Wall of China",
    "honey bees",
    "the internet",
    "glaciers",
    "the French Revolution",
    "electric cars",
    "coral reefs",
    "the Moon landing",
    "chess",
    "the Amazon rainforest",
    "vaccines",
    "the Olympic Games",
    "tea",
    "earthquakes",
    "the Renaissance",
    "solar panels",
    "whales",
    "the Silk Road",
    "rainbows",
    "the piano",
    "deserts",
    "the telescope",
    "bread making",
    "the Nile river",
    "penguins",
    "the steam engine",
    "lightning",
    "origami",
]


def prompts(n: int) -> list[list[dict[str, str]]]:
    """`n` chat prompts of similar length (one user message each)."""
    return [
        [{"role": "user", "content": f"Write a detailed paragraph about {TOPICS[i % len(TOPICS)]}."}]
        for i in range(n)
    ]


def parse_text(text: str):
    """The bench workflow's parser: the whole text is the answer."""
    from ragteam.types import Action

    return Action("answer", value=text)


class OneAct:
    """A trivial workflow: the policy answers the prompt in one act (`max_tokens` tokens)."""

    name = "one-act"

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens

    def run(self, question):
        from ragteam.protocol import Act, Answer

        messages = [{"role": "user", "content": question.question}]
        out = yield Act("answer", messages, parse_text, max_tokens=self.max_tokens)
        return Answer(out.text)


def bare_generate(chat_model, batch: list[list[int]], max_new_tokens: int) -> int:
    """One left-padded greedy `model.generate` over `batch` (prompt ids); returns generated tokens."""
    import torch

    model, pad = chat_model.model, chat_model.pad_id
    width = max(len(p) for p in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    attn = torch.zeros((len(batch), width), dtype=torch.long)
    for i, p in enumerate(batch):
        ids[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) :] = 1
    dev = chat_model.device
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids.to(dev),
            attention_mask=attn.to(dev),
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,  # ignore end-of-turn: every row generates exactly max_new_tokens
            do_sample=False,
            pad_token_id=pad,
        )
    return int((out.shape[1] - width) * len(batch))


def engine_generate(chat_model, texts: list[str], max_new_tokens: int) -> tuple[int, dict]:
    """The engine over one-act episodes, all in flight at once: generated tokens and the call counts."""
    from ragteam.rollout.config import RolloutConfig
    from ragteam.rollout.engine import Engine
    from ragteam.types import Question

    questions = [Question(id=str(i), question=t, golden_answers=[]) for i, t in enumerate(texts)]
    cfg = RolloutConfig(max_concurrent=len(texts), max_tokens=max_new_tokens, temperature=0.0)
    engine = Engine(chat_model, None, None, cfg)
    report = engine.run(OneAct(max_new_tokens), questions)
    if report.failed:
        raise RuntimeError(f"engine episodes failed: {report.failures}")
    tokens = sum(n.completion.completion_tokens for ep in report.episodes for n in ep.policy_nodes())
    if engine.calls["policy_batches"] != 1:
        raise RuntimeError(f"expected one policy batch, got {dict(engine.calls)}")
    return tokens, dict(engine.calls)


def rag_chat(documents: str, question: str) -> list[dict[str, str]]:
    """A retrieval-style chat prompt: the documents, then the question."""
    return [{"role": "user", "content": f"Documents:\n{documents}\n\nQuestion: {question}\nAnswer:"}]


def hotpot_prompts(chat_model, path: Path, n: int, target_tokens: int) -> list[list[dict[str, str]]]:
    """`n` prompts of about `target_tokens` tokens: a HotpotQA question's paragraphs (cut to length in tokens),
    then the question."""
    chats = []
    for line in path.read_text(encoding="utf-8").splitlines()[:n]:
        record = json.loads(line)
        question = record["question_text"]
        docs = "\n".join(
            f"[{i + 1}] {c['title']}: {c['paragraph_text']}" for i, c in enumerate(record["contexts"])
        )
        budget = target_tokens - chat_model.count_tokens(rag_chat("", question))
        doc_ids = chat_model.tokenizer(docs, add_special_tokens=False)["input_ids"][:budget]
        chats.append(rag_chat(chat_model.tokenizer.decode(doc_ids), question))
    return chats


def tree_bench(args: argparse.Namespace) -> int:
    """K seeded samples of each long prompt in one batch, shared prefill on vs off (see the module docstring)."""
    import statistics

    import torch

    from ragteam.llm.base import ChatRequest, Sampling
    from ragteam.llm.local import LocalChatModel

    n, k = args.tree_prompts, args.tree_k
    max_new = args.max_new_tokens or 24
    t0 = time.perf_counter()
    chat_model = LocalChatModel(args.model, device=args.device, max_batch_size=n * k)
    load_s = time.perf_counter() - t0
    chat_model.eos_ids = frozenset()  # every sample generates exactly max_new tokens: the same work both ways
    chats = hotpot_prompts(chat_model, args.data, n, args.tree_prompt_tokens)
    lengths = [chat_model.count_tokens(c) for c in chats]
    requests = [
        ChatRequest(c, Sampling(temperature=1.0, max_tokens=max_new, n=k, seed=i))
        for i, c in enumerate(chats)
    ]
    print(
        f"model {chat_model.name} on {chat_model.device} ({torch.get_num_threads()} threads), loaded in "
        f"{load_s:.1f} s; {n} prompts of {min(lengths)}-{max(lengths)} tokens (HotpotQA paragraphs), K={k} "
        f"samples each (seeded, temperature 1), {max_new} new tokens per sample (EOS ignored); one batch of "
        f"{n * k} rows",
        flush=True,
    )

    def run(share: bool, reqs: list[ChatRequest]) -> tuple[list[list[list[int]]], float, dict[str, int]]:
        chat_model.share_prefill = share
        before = dict(chat_model.stats)
        t0 = time.perf_counter()
        results = chat_model.chat(reqs)
        seconds = time.perf_counter() - t0
        failed = [str(r) for r in results if not isinstance(r, list)]
        if failed:
            raise RuntimeError(f"requests failed: {failed}")
        ids = [[c.completion_ids for c in r] for r in results]
        return ids, seconds, {key: chat_model.stats[key] - before[key] for key in before}

    run(True, requests[:2])  # warm up both paths
    run(False, requests[:2])
    times: dict[bool, list[float]] = {True: [], False: []}
    counts: dict[bool, dict[str, int]] = {}
    mismatched = 0
    for rep in range(max(1, args.repeats)):
        got = {}
        for share in (True, False) if rep % 2 == 0 else (False, True):
            got[share], seconds, counts[share] = run(share, requests)
            times[share].append(seconds)
        mismatched += sum(a != b for on, off in zip(got[True], got[False]) for a, b in zip(on, off))
        print(f"round {rep + 1}/{args.repeats} done", flush=True)

    tokens = n * k * max_new
    rows = []
    for share in (False, True):
        median = statistics.median(times[share])
        rows.append(
            {
                "share_prefill": share,
                "median_s": median,
                "tokens_per_s": tokens / median,
                "prefill_rows": counts[share]["prefill_rows"],
                "prefill_tokens": counts[share]["prefill_tokens"],
                "times_s": times[share],
            }
        )
    speedup = rows[0]["median_s"] / rows[1]["median_s"]
    print()
    print("| shared prefill | prefill rows | prefill tokens | median s | generated tok/s |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {'on' if r['share_prefill'] else 'off'} | {r['prefill_rows']} | {r['prefill_tokens']} | "
            f"{r['median_s']:.2f} | {r['tokens_per_s']:.1f} |"
        )
    for r in rows:
        runs = ", ".join(f"{t:.2f}" for t in r["times_s"])
        print(f"shared prefill {'on' if r['share_prefill'] else 'off'}: {runs} s per round")
    total = n * k * max(1, args.repeats)
    print(f"\nsame tokens with and without sharing: {total - mismatched}/{total} completions identical")
    print(f"shared prefill is {speedup:.2f}x faster (target >= 1.8x)")
    if args.json is not None:
        meta = {
            "mode": "tree",
            "model": chat_model.name,
            "device": str(chat_model.device),
            "prompts": n,
            "k": k,
            "prompt_tokens": lengths,
            "max_new_tokens": max_new,
            "repeats": args.repeats,
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
        }
        out = {"meta": meta, "rows": rows, "speedup": speedup, "mismatched": mismatched}
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 1 if mismatched else 0


def prefix_workloads(args: argparse.Namespace) -> list[tuple[str, dict, int]]:
    """(name, TeamConfig fields, questions) of each workload `--workloads` names (module docstring)."""
    common = {"retriever": {"kind": "bm25"}, "corpus": "distractor"}
    table = {
        "grpo": (
            "MMOA-RAG GRPO iteration",
            {
                "workflow": "mmoa",
                "variant": "s-g",
                "candidates": 5,
                "topk": 5,
                "selector_constrained": True,
                "rollout": {
                    "temperature": 1.0,
                    "top_p": 0.9,
                    "group_size": args.group_size,
                    "max_tokens": args.grpo_max_tokens,
                },
            },
            args.grpo_questions,
        ),
        "tree": (
            "C-3PO tree",
            {
                "workflow": "c3po",
                "rollout": {"temperature": 1.0, "forks": "c3po", "max_depth": 13},
            },
            args.tree_questions,
        ),
        "gym": (
            "RAG-Gym Re2Search episode",
            {"workflow": "gym:re2search", "max_steps": 10, "rollout": {"temperature": 1.0}},
            args.gym_questions,
        ),
        "gym-end": (
            "RAG-Gym Re2Search episode, history at end",
            {
                "workflow": "gym:re2search",
                "max_steps": 10,
                "history_at": "end",
                "rollout": {"temperature": 1.0},
            },
            args.gym_questions,
        ),
    }
    out = []
    for name in args.workloads:
        title, fields, n = table[name]
        rollout = {
            "max_tokens": args.policy_max_tokens,
            "llm_max_tokens": args.llm_max_tokens,
            "max_concurrent": 64,
            "seed": 0,
            **fields.pop("rollout"),
        }
        out.append((title, {**common, **fields, "rollout": rollout}, n))
    return out


class FormatFollowing:
    """The policy as a trained Re2Search actor would reply: a fixed reasoning, then the structured output whose
    query the model writes itself (a forced prefix, sampled up to the closing quote). The base SmolLM2 does not
    follow Re2Search's format, so its first reply ends the episode; this keeps the workflow's prompts (what
    the prefix cache sees: the history growing by a query and its summary each step) for up to 10 steps."""

    FORCED = (
        "### Step-by-step Reasoning\n- The history does not settle the question yet.\n"
        "### Unverified Claim Identification\n- The next fact to look up is below.\n"
        '### Structured Output\n```json\n{"predicted_answer": "unknown", "generated_query": "'
    )

    def __init__(self, model) -> None:
        self.model = model

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def chat(self, requests):
        import dataclasses

        from ragteam.workflows.gym.prompts import ACTOR_SYSTEM

        def actor(r) -> bool:
            return not r.prefix and r.messages and r.messages[0].get("content") == ACTOR_SYSTEM

        asked = [
            dataclasses.replace(
                r,
                prefix=self.FORCED,
                sampling=dataclasses.replace(
                    r.sampling, stop=['"'], max_tokens=min(r.sampling.max_tokens, 24)
                ),
            )
            if actor(r)
            else r
            for r in requests
        ]
        out = self.model.chat(asked)
        for r, result in zip(requests, out):
            if actor(r) and isinstance(result, list):
                for c in result:
                    c.text += '"}\n```'  # the closing the stop string cut
        return out


ARMS = {  # name: (share_prefill, prefix cache on)
    "none": (False, False),  # every prompt prefilled from scratch, even a group's identical ones
    "off": (True, False),  # today's engine before the cache: identical prompts of one batch prefilled once
    "on": (True, True),  # the prefix cache
}


def prefix_run(engine, workflow, questions, models, arm: str, mb: float) -> dict:
    """One rollout of `arm` (`ARMS`) from an empty prefix cache: seconds, episodes, every model's prefill
    counts, and the sampled tokens (to compare with the other arms)."""
    share, cached = ARMS[arm]
    for m in models:
        m.set_prefix_cache(0)  # empty, as after a weight update
        m.share_prefill = share
    engine.config = engine.config.model_copy(update={"prefix_cache_mb": mb if cached else 0})
    t0 = time.perf_counter()
    report = engine.run(workflow, questions)
    seconds = time.perf_counter() - t0
    tokens = [
        [n.completion.completion_ids for n in ep.nodes if n.completion is not None] for ep in report.episodes
    ]
    steps = [len(ep.policy_nodes()) for ep in report.episodes]
    return {
        "arm": arm,
        "seconds": seconds,
        "episodes": len(report.episodes),
        "episodes_per_hour": len(report.episodes) / seconds * 3600,
        "failed": report.failed,
        "acts": sum(steps),
        "max_acts": max(steps, default=0),
        "prefill": engine.prefill,
        "tokens": tokens,
    }


def fastest(runs: list[dict]) -> dict:
    """An arm's fastest run (other jobs on the cores only ever slow one down), its seconds all listed; the
    runs must agree on their tokens (the same seeds from an empty cache)."""
    best = min(runs, key=lambda r: r["seconds"])
    same = all(r["tokens"] == best["tokens"] for r in runs)
    return {**best, "times_s": [round(r["seconds"], 1) for r in runs], "repeatable": same}


def prefix_bench(args: argparse.Namespace) -> int:
    """Each workload under each arm (module docstring); prints the table, exits 1 when an arm's sampled tokens
    differ from the first arm's."""
    import torch

    from ragteam.assemble.build import build_team
    from ragteam.assemble.config import TeamConfig
    from ragteam.assemble.folder import read_selected
    from ragteam.llm.local import LocalChatModel

    _, questions = read_selected(str(args.data), None, 0, max(args.grpo_questions, args.tree_questions, 8))
    policy = LocalChatModel(args.model, device=args.device, max_batch_size=64)
    print(f"model {policy.name} on {policy.device} ({torch.get_num_threads()} threads)", flush=True)
    rows, mismatched = [], 0
    for title, fields, n in prefix_workloads(args):
        cfg = TeamConfig(**fields, policy={"model": args.model, "max_batch_size": 64},
                         llm={"model": args.model, "max_batch_size": 64})  # fmt: skip
        acting = FormatFollowing(policy) if cfg.workflow == "gym:re2search" else policy
        team = build_team(cfg, data=str(args.data), policy=acting)
        models = [m for m in (policy, team.llm) if m is not None]
        by_arm: dict[str, list[dict]] = {arm: [] for arm in args.arms}
        for rep in range(max(1, args.repeats)):  # the arms alternate their order: neither always runs first
            for arm in args.arms if rep % 2 == 0 else args.arms[::-1]:
                run = prefix_run(team.engine, team.workflow, questions[:n], models, arm, args.prefix_cache_mb)
                by_arm[arm].append(run)
                print(f"{title}, {arm}: {run['seconds']:.1f} s", flush=True)
        runs = [fastest(by_arm[arm]) for arm in args.arms]
        for run in runs:
            same = run["tokens"] == runs[0]["tokens"] and run["repeatable"]
            mismatched += not same
            rows.append(
                {
                    "workload": title,
                    "questions": n,
                    "same_tokens": same,
                    "speedup": runs[0]["seconds"] / run["seconds"],
                }
                | {k: v for k, v in run.items() if k != "tokens"}
            )
    print()
    print(
        f"| workload | arm | episodes (acts) | model | prompt tokens | prefilled | share prefilled | s | "
        f"episodes/h | x {args.arms[0]} | same tokens |"
    )
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        for model, p in r["prefill"].items():
            print(
                f"| {r['workload']} | {r['arm']} | {r['episodes']} ({r['acts']}) | {model} | {p['prompt_tokens']} | "
                f"{p['prefill_tokens']} | {p['prefilled']:.2f} | {r['seconds']:.1f} | {r['episodes_per_hour']:.0f} | "
                f"{r['speedup']:.2f} | {'yes' if r['same_tokens'] else 'no'} |"
            )
    if args.json is not None:
        meta = {
            "mode": "prefix",
            "model": policy.name,
            "device": str(policy.device),
            "threads": torch.get_num_threads(),
            "prefix_cache_mb": args.prefix_cache_mb,
            "grpo_max_tokens": args.grpo_max_tokens,
            "policy_max_tokens": args.policy_max_tokens,
            "llm_max_tokens": args.llm_max_tokens,
            "group_size": args.group_size,
            "arms": args.arms,
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2), encoding="utf-8")
    return 1 if mismatched else 0


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--mode", choices=["flat", "tree", "prefix"], default="flat", help="what to measure (see above)"
    )
    ap.add_argument("--quick", action="store_true", help="fewer tokens and one-by-one prompts (~2 minutes)")
    ap.add_argument("--model", default="smollm2", help="smollm2, tiny or a Hugging Face folder")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument(
        "--max-new-tokens", type=int, default=None, help="tokens per prompt (default 48; quick 24; tree 24)"
    )
    ap.add_argument(
        "--one-by-one", type=int, default=None, help="prompts timed one by one (default 8; quick 4)"
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="rounds; the fastest run of each is kept (tree: the median)"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    ap.add_argument("--tree-prompts", type=int, default=4, help="tree mode: prompts in the batch")
    ap.add_argument("--tree-k", type=int, default=4, help="tree mode: samples per prompt")
    ap.add_argument("--tree-prompt-tokens", type=int, default=600, help="tree mode: tokens per prompt, about")
    ap.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("RAGTEAM_SHARED_DATA", ROOT.parent / "shared" / "data"))
        / "hotpotqa-dev-500.jsonl",
        help="tree mode: the HotpotQA file whose paragraphs make the prompts",
    )
    ap.add_argument(
        "--workloads",
        nargs="+",
        choices=["grpo", "tree", "gym", "gym-end"],
        default=["grpo", "tree", "gym", "gym-end"],
    )
    ap.add_argument(
        "--arms", nargs="+", choices=list(ARMS), default=["off", "on"], help="prefix mode: what to compare"
    )
    ap.add_argument("--group-size", type=int, default=8, help="prefix mode: GRPO group size")
    ap.add_argument(
        "--grpo-questions", type=int, default=2, help="prefix mode: questions of the GRPO iteration"
    )
    ap.add_argument("--tree-questions", type=int, default=1, help="prefix mode: C-3PO trees")
    ap.add_argument("--gym-questions", type=int, default=1, help="prefix mode: Re2Search episodes")
    ap.add_argument(
        "--grpo-max-tokens",
        type=int,
        default=16,
        help="prefix mode: MMOA policy tokens per act (the SFT policy's replies: Selector 15, Generator <= 11)",
    )
    ap.add_argument(
        "--policy-max-tokens", type=int, default=48, help="prefix mode: C-3PO / Re2Search act cap"
    )
    ap.add_argument("--llm-max-tokens", type=int, default=48, help="prefix mode: LLM tokens per call")
    ap.add_argument("--prefix-cache-mb", type=float, default=512, help="prefix mode: the cache's budget")
    args = ap.parse_args(argv)
    max_new = args.max_new_tokens or (24 if args.quick else 48)
    n_single = args.one_by_one or (4 if args.quick else 8)
    repeats = max(1, args.repeats)

    from ragteam.config import setup_caches

    setup_caches()
    if args.mode == "tree":
        return tree_bench(args)
    if args.mode == "prefix":
        return prefix_bench(args)
    import torch

    from ragteam.llm.local import LocalChatModel

    t0 = time.perf_counter()
    chat_model = LocalChatModel(args.model, device=args.device, max_batch_size=max(args.batch_sizes))
    load_s = time.perf_counter() - t0
    # Ignore end-of-turn in the engine's backend too, so it generates exactly max_new tokens per prompt.
    chat_model.eos_ids = frozenset()
    n_max = max(args.batch_sizes)
    chats = prompts(n_max)
    ids = [chat_model.prompt_ids(c) for c in chats]
    texts = [c[0]["content"] for c in chats]
    print(
        f"model {chat_model.name} on {chat_model.device} ({torch.get_num_threads()} threads), loaded in "
        f"{load_s:.1f} s; {max_new} new tokens per prompt (EOS ignored), greedy; prompts of "
        f"{min(map(len, ids))}-{max(map(len, ids))} tokens",
        flush=True,
    )

    bare_generate(chat_model, ids[:2], 4)  # warm up both paths
    engine_generate(chat_model, texts[:2], 4)

    # Each measurement is repeated and the fastest run kept (the machine may be shared); bare and engine
    # alternate which goes first in each round so that neither always runs on a warmer or quieter machine.
    best: dict[tuple[str, int], float] = {}
    tokens: dict[tuple[str, int], int] = {}

    def measure(key: tuple[str, int], fn, *fn_args) -> None:
        got, seconds = timed(fn, *fn_args)
        if isinstance(got, tuple):
            got = got[0]
        tokens[key] = got
        best[key] = min(seconds, best.get(key, float("inf")))

    def single(prompt_ids: list[list[int]]) -> int:
        return sum(bare_generate(chat_model, [p], max_new) for p in prompt_ids)

    for rep in range(repeats):
        measure(("one", 1), single, ids[:n_single])
        for b in args.batch_sizes:
            order = [("bare", bare_generate, ids[:b]), ("engine", engine_generate, texts[:b])]
            for name, fn, inputs in order if rep % 2 == 0 else order[::-1]:
                measure((name, b), fn, chat_model, inputs, max_new)
            if tokens[("engine", b)] != tokens[("bare", b)]:
                raise RuntimeError(
                    f"batch {b}: engine generated {tokens[('engine', b)]} tokens, bare {tokens[('bare', b)]}"
                )
        print(f"round {rep + 1}/{repeats} done", flush=True)

    single_tps = tokens[("one", 1)] / best[("one", 1)]
    print(f"one-by-one over {n_single} prompts: {single_tps:.1f} tokens/s", flush=True)
    rows = []
    for b in args.batch_sizes:
        row = {
            "batch": b,
            "tokens": tokens[("bare", b)],
            "one_by_one_tps": single_tps,
            "bare_tps": tokens[("bare", b)] / best[("bare", b)],
            "engine_tps": tokens[("engine", b)] / best[("engine", b)],
            "bare_s": best[("bare", b)],
            "engine_s": best[("engine", b)],
        }
        row["engine_over_bare"] = row["engine_tps"] / row["bare_tps"]
        row["engine_over_one_by_one"] = row["engine_tps"] / single_tps
        row["bare_over_one_by_one"] = row["bare_tps"] / single_tps
        rows.append(row)

    print()
    print(
        "| batch | one-by-one tok/s | bare generate tok/s | engine tok/s "
        "| bare/one-by-one | engine/bare | engine/one-by-one |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['batch']} | {r['one_by_one_tps']:.1f} | {r['bare_tps']:.1f} | {r['engine_tps']:.1f} | "
            f"{r['bare_over_one_by_one']:.2f} | "
            f"{r['engine_over_bare']:.2f} | {r['engine_over_one_by_one']:.2f} |"
        )
    worst = min(r["engine_over_bare"] for r in rows)
    print(f"\nengine keeps {worst:.0%} of bare batched generation at worst (target >= 90%)")
    if args.json is not None:
        meta = {
            "repeats": repeats,
            "one_by_one_prompts": n_single,
            "model": chat_model.name,
            "device": str(chat_model.device),
            "max_new_tokens": max_new,
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
