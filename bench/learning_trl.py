"""TRL's own GRPOTrainer on MMOA-RAG's Generator alone: the external reference curve of bench/learning.py.

    .venv/bin/python bench/learning_trl.py --init smollm2 --questions 8 --group-size 2 --iterations 6 \\
        --max-tokens 48 --candidates 3 --lr 1e-5 --out runs/bench-learning/trl-grpo
    .venv/bin/python bench/learning.py ... --sides grpo trl-grpo        # the usual way: one side among others

The task is single-role: for each of the fixed training questions (`--data`, `--offset`, `--questions`, read
as `ragteam train ppo` reads them) the prompt is MMOA-RAG's Generator prompt, rendered by the workflow's own
`generator` Role (ragteam/workflows/mmoa: system message + "Answer the question using the documents below
..."), over the top `--candidates` documents that ragteam's default retriever returns for the question: the
same retriever `ragteam train ppo` builds (`assemble.build.build_retriever`: the default hybrid BM25 + dense
index of the data file's pooled paragraphs), merged exactly as the `s-g` variant builds its K candidates
(`gather_candidates` with the question as the only sub-question). The documents are therefore fixed per
question; there is no Selector: the Generator sees all K (in our `s-g` run it sees the Selector's subset).

The reward of a completion is ragteam's answer F1 (`metrics.answer.score_answer`) of the answer read by the
generator role's own parser (`parse_generator`: first line, `Answer:` label and quotes removed), against the
question's golden answers: the `f1` reward our PPO run logs. `--penalty` adds the Generator's MMOA penalty
(-0.5 for a reply of more than 20 words; our `mmoa` credit adds it to the Generator's reward) as a second
TRL reward function; the logged reward stays F1 alone.

Arrangement (one TRL process, CPU, no vLLM, no reference model): `num_generations` = `--group-size`,
`generation_batch_size` = questions x group size (each generation batch is every training question, each
`--group-size` times: one "iteration", as many completions as one iteration of our side), micro-batches of
`--group-size` completions accumulated into `--updates` optimizer steps per pass, `--epochs` passes over each
generation batch (TRL's `num_iterations`, mu; our PPO's `--ppo.epochs` is 2), so `max_steps` = iterations x
epochs x updates. Sampling: temperature 1.0, top_p 0.9 (the `mmoa` recipe's rollout), at most
min(`--max-tokens`, 64) new tokens (our engine caps the Generator's act at its role's 64). Loss, clipping and
advantage scaling are TRL's defaults (loss_type dapo, epsilon 0.2, scale_rewards group), beta 0, constant lr.

Written to OUT: `log.jsonl`, one row per iteration in the shape of our PPO log (`reward.f1`, `reward.em`,
`roles.generator.{length, invalid, reward}`, `groups.informative`, `seconds`) plus `trl` (TRL's own logged
metrics of that iteration's optimizer steps, e.g. its `reward`, `entropy`, `clip_ratio/region_mean`), and
`config.json`. A complete log of the same settings is kept: running again only re-reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "hotpotqa-dev-500.jsonl"


def build_tasks(data: Path, offset: int, questions: int, candidates: int) -> list[dict[str, Any]]:
    """One row per training question: the Generator's prompt (a list of messages) over the K candidates
    ragteam's default retriever returns, and what the reward needs (golden answers, choices, the fields)."""
    from ragteam.assemble.build import build_retriever
    from ragteam.assemble.config import TeamConfig
    from ragteam.assemble.folder import select_questions
    from ragteam.data.questions import read_questions
    from ragteam.workflows.answers import format_options
    from ragteam.workflows.mmoa.workflow import GENERATOR, gather_candidates

    qs = select_questions(read_questions(data).questions, offset, questions)
    if not qs:
        raise SystemExit(f"{data}: no questions at offset {offset}")
    cfg = TeamConfig(workflow="mmoa", variant="s-g", candidates=candidates)
    retriever = build_retriever(cfg, data=str(data))
    rows = []
    for q in qs:
        search = gather_candidates(q.question, [q.question], candidates, cfg.fill_from_question)
        request = next(search)
        try:
            search.send(retriever.search(request.queries, request.k))
            raise RuntimeError("gather_candidates asked for a second search")
        except StopIteration as done:
            docs = done.value
        options = format_options(q)
        rows.append(
            {
                "prompt": GENERATOR.render(
                    question=q.question, docs=docs, options=options, choices=q.choices
                ),
                "qid": q.id,
                "question": q.question,
                "golden_answers": list(q.golden_answers),
                "choices": json.dumps(q.choices) if q.choices else "",
                "doc_ids": [d.id for d in docs],
                "options": options,
            }
        )
    return rows


class Recorder:
    """What each generation batch scored (filled by the reward function, one call per batch), and TRL's logs."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self.logs: list[dict[str, float]] = []


def f1_reward(recorder: Recorder):
    """The TRL reward function: F1 of the answer the generator role's parser reads from each completion."""
    import numpy as np

    from ragteam.metrics.answer import score_answer
    from ragteam.types import Question
    from ragteam.workflows.mmoa.workflow import GENERATOR

    def reward(
        prompts, completions, completion_ids, qid, question, golden_answers, choices, **_
    ) -> list[float]:
        f1s, ems, invalid, penalties = [], [], [], []
        for c, i, q, golds, ch in zip(completions, qid, question, golden_answers, choices, strict=True):
            text = c[-1]["content"] if isinstance(c, list) else str(c)
            parsed_choices = json.loads(ch) if ch else None
            action = GENERATOR.parse(text, question=q, docs=[], choices=parsed_choices)
            scores = score_answer(
                str(action.value or ""), Question(i, q, list(golds), choices=parsed_choices)
            )
            f1s.append(scores["f1"])
            ems.append(scores["em"])
            invalid.append(0.0 if action.valid else 1.0)
            penalties.append(action.penalty)
        groups: dict[str, list[float]] = {}
        for i, f in zip(qid, f1s, strict=True):
            groups.setdefault(i, []).append(f)
        multi = [v for v in groups.values() if len(v) > 1]
        recorder.batches.append(
            {
                "time": time.perf_counter(),
                "n": len(f1s),
                "f1": float(np.mean(f1s)),
                "em": float(np.mean(ems)),
                "invalid": float(np.mean(invalid)),
                "penalty": float(np.mean(penalties)),
                "length": float(np.mean([len(ids) for ids in completion_ids])),
                "informative": sum(max(v) > min(v) for v in multi) / len(multi) if multi else 0.0,
                "groups": len(groups),
                "sample": [(c[-1]["content"] if isinstance(c, list) else str(c)) for c in completions[:2]],
            }
        )
        return f1s

    reward.__name__ = "f1"
    return reward


def penalty_reward(prompts, completions, choices, **_) -> list[float]:
    """The Generator's MMOA penalty (-0.5 for an over-long reply), a second TRL reward function (`--penalty`)."""
    from ragteam.workflows.mmoa.parsers import parse_generator

    return [
        parse_generator(
            c[-1]["content"] if isinstance(c, list) else str(c), json.loads(ch) if ch else None
        ).penalty
        for c, ch in zip(completions, choices, strict=True)
    ]


def settings(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "data",
        "offset",
        "questions",
        "group_size",
        "iterations",
        "init",
        "candidates",
        "max_tokens",
        "lr",
    )
    return {k: str(getattr(args, k)) for k in keys} | {
        "epochs": args.epochs,
        "updates": args.updates,
        "penalty": args.penalty,
        "seed": args.seed,
    }


def complete(out: Path, args: argparse.Namespace) -> bool:
    """Whether OUT already holds a finished run of the same settings."""
    try:
        done = json.loads((out / "config.json").read_text())
        rows = (out / "log.jsonl").read_text().splitlines()
    except (OSError, ValueError):
        return False
    return done.get("settings") == settings(args) and done.get("finished") and len(rows) >= args.iterations


def run(args: argparse.Namespace, out: Path) -> Path:
    """Train with TRL's GRPOTrainer and write OUT/log.jsonl (one row per iteration); returns the log's path."""
    from ragteam.config import setup_caches

    setup_caches()
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "log.jsonl"
    if complete(out, args):
        print(f"[trl-grpo] {log_path}: finished with the same settings, kept", file=sys.stderr)
        return log_path

    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ragteam.train.run_folder import resolve_init
    from ragteam.workflows.mmoa.workflow import GENERATOR

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    tasks = build_tasks(args.data, args.offset, args.questions, args.candidates)
    q, g = len(tasks), args.group_size
    if q % args.updates:
        raise SystemExit(
            f"--updates {args.updates} must divide the {q} questions (micro-batches of one group)"
        )
    init = resolve_init(args.init)
    tokenizer = AutoTokenizer.from_pretrained(init)
    model = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)

    per_iteration = args.epochs * args.updates  # optimizer steps per generation batch
    config = GRPOConfig(
        output_dir=str(out / "trainer"),
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=args.seed,
        data_seed=args.seed,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        num_generations=g,
        per_device_train_batch_size=g,  # g completions per micro-batch (shuffled across questions)
        steps_per_generation=q,  # generation batch = q x g completions: every question, g times
        gradient_accumulation_steps=q // args.updates,
        num_iterations=args.epochs,
        max_steps=args.iterations * per_iteration,
        max_completion_length=min(args.max_tokens, GENERATOR.max_tokens or args.max_tokens),
        temperature=1.0,
        top_p=0.9,
        use_vllm=False,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )
    recorder = Recorder()
    rows: list[dict[str, Any]] = []
    state = {"start": 0.0, "setup": 0.0}

    class IterationLog(TrainerCallback):
        """After the log of an iteration's last optimizer step: append the iteration's row to log.jsonl."""

        def on_log(self, _args, st, _control, logs=None, **_):
            if not logs or "loss" not in logs:  # the run's closing summary has no loss
                return
            recorder.logs.append({k: v for k, v in logs.items() if isinstance(v, (int, float))})
            i, rest = divmod(st.global_step, per_iteration)
            if rest or i <= len(rows):
                return
            if len(recorder.batches) < i:
                raise RuntimeError(f"iteration {i}: {len(recorder.batches)} generation batches scored")
            b = recorder.batches[i - 1]
            now = time.perf_counter()
            steps = recorder.logs[-per_iteration:]
            row = {
                "iteration": i,
                "episodes": b["n"],
                "reward": {"em": b["em"], "f1": b["f1"]},
                "roles": {
                    "generator": {
                        "reward": b["f1"] + (b["penalty"] if args.penalty else 0.0),
                        "length": b["length"],
                        "invalid": b["invalid"],
                        "penalty": b["penalty"],
                        "n": b["n"],
                    }
                },
                "groups": {"n": b["groups"], "multi": b["groups"], "informative": b["informative"]},
                "seconds": {  # generation + scoring, then TRL's old log-probs and the optimizer steps
                    **({"setup": state["setup"]} if i == 1 else {}),
                    "rollout": b["time"] - state["start"],
                    "update": now - b["time"],
                },
                "trl": {
                    key: sum(s[key] for s in steps if key in s) / sum(1 for s in steps if key in s)
                    for key in sorted({k for s in steps for k in s})
                },
                "sample": b["sample"],
            }
            rows.append(row)
            with log_path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(
                f"[trl-grpo] iteration {i}: F1 {b['f1']:.3f}  invalid {b['invalid']:.2f}  "
                f"length {b['length']:.1f}  {sum(row['seconds'].values()):.0f}s",
                file=sys.stderr,
            )
            state["start"] = time.perf_counter()

    log_path.write_text("")
    (out / "config.json").write_text(
        json.dumps(
            {
                "settings": settings(args),
                "finished": False,
                "trl": trl.__version__,
                "init_path": str(init),
                "grpo_config": {
                    k: getattr(config, k)
                    for k in (
                        "num_generations",
                        "generation_batch_size",
                        "steps_per_generation",
                        "per_device_train_batch_size",
                        "gradient_accumulation_steps",
                        "num_iterations",
                        "max_steps",
                        "max_completion_length",
                        "temperature",
                        "top_p",
                        "beta",
                        "loss_type",
                        "scale_rewards",
                        "epsilon",
                        "learning_rate",
                        "lr_scheduler_type",
                    )
                },  # fmt: skip
                "tasks": [{k: t[k] for k in ("qid", "question", "golden_answers", "doc_ids")} for t in tasks],
            },
            indent=2,
        )
    )
    funcs = [f1_reward(recorder)] + ([penalty_reward] if args.penalty else [])
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=config,
        train_dataset=Dataset.from_list(tasks),
        processing_class=tokenizer,
        callbacks=[IterationLog()],
    )
    state["start"] = time.perf_counter()
    state["setup"] = state["start"] - t0
    trainer.remove_callback(
        PrinterCallback
    )  # TRL's metrics go to log.jsonl (`trl`), one line per iteration here
    trainer.train()
    if len(rows) != args.iterations:
        raise RuntimeError(f"{len(rows)} iterations logged, {args.iterations} expected")
    done = json.loads((out / "config.json").read_text()) | {"finished": True}
    (out / "config.json").write_text(json.dumps(done, indent=2))
    return log_path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options shared with bench/learning.py (same names, same defaults) and the TRL side's own."""
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--offset", type=int, default=0, help="first training question")
    p.add_argument("--questions", type=int, default=8, help="the fixed training questions")
    p.add_argument("--group-size", type=int, default=2, help="completions per question and iteration")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--init", default="smollm2", help="the start: smollm2 (untrained) or an SFT model folder")
    p.add_argument("--candidates", type=int, default=3, help="documents the Generator sees")
    p.add_argument("--max-tokens", type=int, default=48, help="tokens per completion")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--threads", type=int, default=1)


def add_trl_arguments(p: argparse.ArgumentParser, prefix: str = "") -> None:
    p.add_argument(f"--{prefix}epochs", type=int, default=2, help="TRL num_iterations: passes per batch")
    p.add_argument(
        f"--{prefix}updates", type=int, default=1, help="optimizer steps per pass (must divide --questions)"
    )
    p.add_argument(f"--{prefix}penalty", action="store_true", help="add the Generator's over-long penalty")
    p.add_argument(f"--{prefix}seed", type=int, default=0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    add_trl_arguments(p)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench-learning" / "trl-grpo")
    args = p.parse_args()
    print(f"[trl-grpo] log: {run(args, args.out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
