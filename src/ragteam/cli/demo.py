"""`ragteam demo`: from nothing to a trained team, offline, on the bundled HotpotQA questions.

The stages, each cached in `--out` so that a second run reuses what the first one finished:

1. index   paragraphs pooled from the bundled questions (BM25 + all-MiniLM-L6-v2), built once
2. search  one ranked list, to show the retriever
3. before  the baselines and the three teams (C-3PO, MMOA-RAG, Re2Search), untrained, on the held-out questions
4. sft     supervised warm start: MMOA-RAG's heuristic role labels on the training questions, then SFT
           (`--full` adds C-3PO rows rejection-sampled from the proxy's own trees)
5. ppo     a short multi-agent RL run (the MMOA-RAG recipe, critic-free GRPO) from the SFT model
6. after   the three teams again, with the trained policy
7. report  report.md and report.html: before/after table with intervals, training curves per role, C-3PO's
           strategy ratio and depth histogram, traces to click through

Held-out questions are the first `--questions` of the file; training uses questions from `TRAIN_OFFSET` on, so the
two never overlap whatever the preset. SmolLM2-135M plays every policy role and the answering LLM.
"""

from __future__ import annotations

import json
from pathlib import Path
from time import perf_counter
from typing import Any

from pydantic import Field, model_validator

from ragteam.config import Config as BaseConfig
from ragteam.llm.config import ModelConfig
from ragteam.retrieval.config import RetrieverConfig
from ragteam.workflows.registry import workflow_help

BASELINES = ["direct", "standard-rag"]
TEAMS = ["c3po", "mmoa", "gym:re2search"]
TRAIN_OFFSET = 20  # training questions start here; held-out questions are 0..questions-1 (at most 20)

# what the presets change; a flag given explicitly wins over its preset
PRESETS: dict[str, dict[str, Any]] = {
    "fast": {"questions": 4, "sft_steps": 4, "ppo_iterations": 1, "ppo_questions": 4},
    "default": {"questions": 8, "sft_steps": 8, "ppo_iterations": 2, "ppo_questions": 4},
    "full": {"questions": 20, "sft_steps": 30, "ppo_iterations": 4, "ppo_questions": 8, "c3po_sft": True},
}

# small-model settings every stage shares: 3 documents per act and short acts keep 2 CPU cores within budget
WORKFLOW_SETTINGS: dict[str, Any] = {
    "topk": 3,
    "candidates": 3,
    "variant": "s-g",
    "max_rounds": 3,
    "max_steps": 4,
}


def workflow_settings(workflow: str) -> dict[str, Any]:
    """`WORKFLOW_SETTINGS` that `workflow` reads: the options its Workflow declares (MMOA-RAG's `candidates`,
    C-3PO's `max_rounds`), as its config takes them."""
    from ragteam.workflows.registry import workflow_options

    fields = workflow_options(workflow).model_fields
    return {k: v for k, v in WORKFLOW_SETTINGS.items() if k in fields}


ROLLOUT_SETTINGS: dict[str, Any] = {"max_tokens": 96, "llm_max_tokens": 48}
# What the demo writes into --out (it has no config.yaml to recognise its folder by); see ragteam.outdir
DEMO_OWN = ("before", "after", "sft", "ppo", "summary.md", "report.md", "report.html", "*.png")


RENAMED = {"--model.": "--policy."}
"""The demo's former model group, named in the error (`ragteam.cli.main`): the model it trains is the policy."""


class Config(BaseConfig):
    """Settings of `ragteam demo`."""

    out: str = Field(
        "runs/demo", description="output folder: one sub-folder per stage, report.md, report.html"
    )
    fast: bool = Field(False, description="the fast preset: fewer questions, fewer training steps")
    full: bool = Field(
        False, description="the full preset: 20 held-out questions, longer training, C-3PO SFT"
    )
    questions: int = Field(8, ge=1, le=TRAIN_OFFSET, description="held-out questions each workflow answers")
    workflows: list[str] = Field(
        default_factory=lambda: BASELINES + TEAMS,
        description=workflow_help("workflows evaluated before training"),
    )
    teams: list[str] = Field(
        default_factory=lambda: list(TEAMS), description="workflows evaluated again after training"
    )
    train: bool = Field(True, description="run the training stages (--no-train: evaluate only)")
    sft_steps: int = Field(8, ge=1, description="SFT optimizer steps (batch 4)")
    c3po_sft: bool = Field(False, description="add C-3PO rows rejection-sampled from tree rollouts to SFT")
    ppo_iterations: int = Field(2, ge=0, description="PPO iterations after SFT (0: none)")
    ppo_questions: int = Field(4, ge=1, description="training questions rolled out per PPO iteration")
    policy: ModelConfig = Field(
        default_factory=ModelConfig,
        description="the policy, trained by the demo; its start model also plays the answering LLM",
    )
    retriever: RetrieverConfig = Field(
        default_factory=RetrieverConfig, description="the demo corpus' retriever"
    )
    corpus: str | None = Field(
        None,
        description="what every stage retrieves from: distractor (default: the paragraphs of the bundled "
        "demo questions), pooled+FILE[+FILE] (joined with passage files, e.g. a Wikipedia sample), an index "
        "folder or a passage FILE (the --corpus of eval and train ppo)",
    )
    k: int = Field(3, ge=1, description="passages shown for the demo search")
    overwrite: bool = Field(
        False,
        description="discard earlier demo results instead of reusing them (and write into an --out that "
        "holds files the demo did not write)",
    )
    progress: bool = Field(True, description="progress bars")

    @model_validator(mode="after")
    def _preset(self) -> Config:
        if self.fast and self.full:
            raise ValueError("--fast and --full are two presets: choose one")
        preset = PRESETS["fast" if self.fast else "full" if self.full else "default"]
        for name, value in preset.items():
            if name not in self.model_fields_set:
                object.__setattr__(self, name, value)
        return self

    @property
    def preset(self) -> str:
        return "fast" if self.fast else "full" if self.full else "default"


def _folder_name(workflow: str) -> str:
    return workflow.replace(":", "-")


def run(cfg: Config) -> int:
    from ragteam.assemble.config import demo_data_path
    from ragteam.assemble.corpus import open_corpus, parse_corpus
    from ragteam.demo.report import write_report
    from ragteam.retrieval.factory import KIND_NEEDS, retriever_from_index

    data = demo_data_path()
    if data is None:
        raise FileNotFoundError("the bundled demo data (ragteam/demo/) is missing from this install")
    from ragteam.data.questions import read_questions

    questions = read_questions(data).questions
    out = Path(cfg.out)
    from ragteam.outdir import check_out_dir

    check_out_dir(out, "demo", cfg.overwrite, own=DEMO_OWN)  # another command's or a person's files: refused
    out.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t_all = perf_counter()

    t0 = perf_counter()
    kinds = KIND_NEEDS.get(cfg.retriever.kind, ("bm25", "dense"))
    spec = parse_corpus(cfg.corpus)  # every stage searches it; distractor: all the demo questions
    chosen = open_corpus(spec, str(data), None, None, kinds, progress=False)
    folder = chosen.index
    print(f"== 1. index: {chosen.name} ({data.name})")
    print(f"   {len(folder.docs)} passages, indexes {', '.join(folder.kinds)} in {folder.path}")
    retriever_cfg = cfg.retriever.model_copy(update={"index": str(folder.path)})
    seconds["index"] = perf_counter() - t0

    print("\n== 2. search")
    from ragteam.cli.search import format_hits

    retriever = retriever_from_index(folder, cfg.retriever)
    query = questions[0].question
    print(format_hits(query, cfg.retriever.kind, retriever.search([query], cfg.k)[0]))

    held_out = f"questions 0-{cfg.questions - 1}"
    print(f"\n== 3. before training: {len(cfg.workflows)} workflows on {cfg.questions} held-out {held_out}")
    t0 = perf_counter()
    before = {wf: evaluate(cfg, data, retriever_cfg, wf, out / "before", cfg.policy) for wf in cfg.workflows}
    seconds["before"] = perf_counter() - t0

    after: dict[str, dict] = {}
    training: dict[str, Any] = {}
    if cfg.train:
        print(f"\n== 4. supervised warm start (training questions from {TRAIN_OFFSET} on)")
        t0 = perf_counter()
        sft_dir, training["sft"] = warm_start(cfg, data, retriever_cfg, out / "sft")
        seconds["sft"] = perf_counter() - t0
        policy_dir = sft_dir

        if cfg.ppo_iterations:
            print(f"\n== 5. multi-agent PPO: {cfg.ppo_iterations} x {cfg.ppo_questions} questions")
            t0 = perf_counter()
            policy_dir, training["ppo"] = ppo(cfg, data, retriever_cfg, sft_dir, out / "ppo")
            seconds["ppo"] = perf_counter() - t0

        print(f"\n== 6. after training: {len(cfg.teams)} teams with the trained policy ({policy_dir})")
        t0 = perf_counter()
        trained = cfg.policy.model_copy(update={"model": str(policy_dir)})
        after = {
            wf: evaluate(cfg, data, retriever_cfg, wf, out / "after", trained, llm=cfg.policy)
            for wf in cfg.teams
        }
        seconds["after"] = perf_counter() - t0

    seconds["total"] = perf_counter() - t_all
    print("\n== 7. report")
    settings = {
        "preset": cfg.preset,
        "held_out": held_out,
        "train": f"questions {TRAIN_OFFSET}-{len(questions) - 1}",
        "passages": len(folder.docs),
        "retriever": cfg.retriever.kind,
        "model": cfg.policy.model,
        "roles_trained": "MMOA-RAG's Selector and Generator"
        + (" and C-3PO's three roles" if cfg.c3po_sft else ""),
        "workflow": WORKFLOW_SETTINGS,
        "rollout": ROLLOUT_SETTINGS,
    }
    paths = write_report(out, settings, before, after, training, seconds)
    print((out / "summary.md").read_text(encoding="utf-8"))
    print(f"wrote {', '.join(str(p) for p in paths)} ({seconds['total']:.0f} s in all)")
    return 0


def evaluate(
    cfg: Config,
    data: Path,
    retriever: RetrieverConfig,
    workflow: str,
    root: Path,
    policy: ModelConfig,
    llm: ModelConfig | None = None,
) -> dict[str, Any]:
    """Evaluate one workflow on the held-out questions (resumed if it ran before); return its summary."""
    from ragteam.eval.run import EvalConfig, run_eval
    from ragteam.rollout.config import RolloutConfig

    t0 = perf_counter()
    summary = run_eval(
        EvalConfig(
            workflow=workflow,
            data=str(data),
            out=str(root / _folder_name(workflow)),
            limit=cfg.questions,
            policy=policy,
            llm=llm or policy,
            retriever=retriever,
            rollout=RolloutConfig(**ROLLOUT_SETTINGS),
            overwrite=cfg.overwrite,
            progress=cfg.progress,
            **workflow_settings(workflow),
        ),
        log=lambda _msg: None,
    )
    m, ci = summary["metrics"], summary["ci95"]
    print(
        f"   {workflow:<14} F1 {100 * m['f1']:5.1f} [{100 * ci['f1'][0]:.1f}-{100 * ci['f1'][1]:.1f}]  "
        f"cover-EM {100 * m['cover_em']:5.1f}  ({perf_counter() - t0:.0f} s)"
    )
    summary["folder"] = str(root / _folder_name(workflow))
    return summary


def _finished(folder: Path) -> bool:
    """A trainer's output folder holds a final model (not only checkpoints)."""
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def warm_start(
    cfg: Config, data: Path, retriever: RetrieverConfig, root: Path
) -> tuple[Path, dict[str, Any]]:
    """Collect role rows on the training questions and fine-tune the policy on them; return (model dir, info)."""
    from ragteam.collect.config import CollectConfig
    from ragteam.collect.run import run_collect
    from ragteam.rollout.config import RolloutConfig
    from ragteam.train.sft import SFTConfig, train_sft

    rows_file = root / "sft.jsonl"
    model_dir = root / "model"
    info: dict[str, Any] = {"collect": {}}
    quiet = lambda _msg: None  # noqa: E731
    common = dict(
        data=str(data),
        offset=TRAIN_OFFSET,
        llm=cfg.policy,
        retriever=retriever,
        overwrite=cfg.overwrite,
        progress=cfg.progress,
    )
    collected = [
        run_collect(
            CollectConfig(
                what="sft",
                workflow="mmoa",
                out=str(root / "mmoa-rows"),
                **common,
                **workflow_settings("mmoa"),
            ),
            log=quiet,
        )
    ]
    info["collect"]["mmoa"] = collected[-1]
    if cfg.c3po_sft:
        c3po = CollectConfig(
            what="sft",
            workflow="c3po",
            out=str(root / "c3po-rows"),
            limit=12,
            policy=cfg.policy,
            tree="samples",
            samples=4,
            relabel_invalid=True,
            rollout=RolloutConfig(**ROLLOUT_SETTINGS, temperature=1.0),
            **common,
            **workflow_settings("c3po"),
        )
        collected.append(run_collect(c3po, log=quiet))
        info["collect"]["c3po"] = collected[-1]
    lines = []
    for name in ("mmoa-rows", "c3po-rows"):
        path = root / name / "sft.jsonl"
        if path.is_file():
            lines += [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    info["rows"] = len(lines)
    per_source = ", ".join(f"{name}: {summary.get('rows', 0)}" for name, summary in info["collect"].items())
    print(f"   {len(lines)} role rows ({per_source})")

    if not _finished(model_dir) or cfg.overwrite:
        resume = any(model_dir.glob("checkpoint-*")) and not cfg.overwrite
        train_sft(
            SFTConfig(
                data=str(rows_file),
                out=str(model_dir),
                policy={"model": cfg.policy.model},
                max_steps=cfg.sft_steps,
                batch_size=4,
                max_length=1024,
                save_steps=max(1, cfg.sft_steps // 2),
                resume=resume,
                progress=cfg.progress,
                threads=cfg.policy.threads,
                overwrite=cfg.overwrite,
            )
        )
    info["log"] = _read_jsonl(model_dir / "log.jsonl")
    print(f"   SFT: {cfg.sft_steps} steps -> {model_dir}")
    return model_dir, info


def ppo_or_warn(cfg: Any) -> None:
    """`train_ppo(cfg)`; a run whose every iteration trained no act (`NothingTrained`, an error for `ragteam
    train ppo`) is a WARNING line here: its log, curves and policy are written, and the demo goes on so that
    its report shows the run as it went."""
    from ragteam.train.ppo import NothingTrained, train_ppo

    try:
        train_ppo(cfg)
    except NothingTrained as e:
        print(f"   PPO: WARNING {e}", flush=True)


def ppo(
    cfg: Config, data: Path, retriever: RetrieverConfig, init: Path, out: Path
) -> tuple[Path, dict[str, Any]]:
    """A short MMOA-RAG PPO run from the SFT model (resumed if interrupted); return (policy dir, info).

    Critic-free GRPO over groups of 2 episodes per question, on the same `ppo_questions` training questions
    every iteration (so the training-reward panel shows what the policy learned, not which questions were
    drawn), with the held-out questions evaluated after every iteration (the report's held-out panel):
    the settings bench/learning.py and docs/results.md measured to raise the training reward on CPU."""
    from ragteam.train.ppo_config import PPOConfig

    log = out / "log.jsonl"
    done = _read_jsonl(log)
    if (
        not (done and done[-1].get("iteration", -1) + 1 >= cfg.ppo_iterations and _finished(out))
        or cfg.overwrite
    ):
        ppo_or_warn(
            PPOConfig(
                recipe="mmoa",
                data=str(data),
                offset=TRAIN_OFFSET,
                out=str(out),
                policy={"model": str(init)},
                limit=cfg.ppo_questions,
                iterations=cfg.ppo_iterations,
                questions_per_iteration=cfg.ppo_questions,
                eval_data=str(data),
                eval_limit=cfg.questions,
                eval_every=1,
                resume=any(out.glob("checkpoint-*")) and not cfg.overwrite,
                llm=cfg.policy,
                retriever=retriever,
                threads=cfg.policy.threads,
                progress=cfg.progress,
                rollout={**ROLLOUT_SETTINGS, "group_size": 2, "temperature": 1.0, "top_p": 0.9},
                profile="small",  # the recipe's paper profile otherwise: as the demo's evaluations run
                selector_constrained=False,  # as the demo's evaluations run the Selector
                ppo={
                    "advantage": "grpo",
                    "lr": 1e-5,
                    "kl_beta": 0.0,
                    "kl_anneal_to": 0.0,
                    "kl_beta_min": 0.0,
                },
                **workflow_settings("mmoa"),
            )
        )
    print(f"   PPO: {cfg.ppo_iterations} iterations -> {out}")
    return out, {"log": _read_jsonl(log), "folder": str(out)}


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
