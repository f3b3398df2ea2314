"""`ragteam demo`: the main job on the bundled data, end to end, offline.

1. Index the paragraphs pooled from the bundled HotpotQA questions (BM25 + all-MiniLM-L6-v2; cached).
2. Search it with the first question and print the top passages.
3. Evaluate several workflows on the first questions with SmolLM2-135M-Instruct as both the policy and
   the answering LLM, and print one table (EM, F1, cover-EM, seconds).

Each workflow's traces, metrics and report land in `--out/<workflow>/`; the table in `--out/summary.md`.
Running the demo again resumes: finished questions are not rolled out twice.
"""

from __future__ import annotations

from pathlib import Path
from time import perf_counter

from pydantic import Field

from ragteam.config import Config as BaseConfig
from ragteam.llm.config import ModelConfig
from ragteam.retrieval.config import RetrieverConfig

DEMO_WORKFLOWS = ["direct", "standard-rag", "c3po", "mmoa", "gym:react"]


class Config(BaseConfig):
    """Settings of `ragteam demo`."""

    out: str = Field("runs/demo", description="output folder: one sub-folder per workflow and summary.md")
    questions: int = Field(5, ge=1, le=50, description="how many bundled questions each workflow answers")
    workflows: list[str] = Field(
        default_factory=lambda: list(DEMO_WORKFLOWS), description="workflows to evaluate, in this order"
    )
    model: ModelConfig = Field(
        default_factory=ModelConfig, description="the model that plays the policy and the answering LLM"
    )
    retriever: RetrieverConfig = Field(
        default_factory=RetrieverConfig, description="the demo corpus' retriever"
    )
    k: int = Field(3, ge=1, description="passages shown for the demo search")
    overwrite: bool = Field(False, description="discard earlier demo episodes instead of resuming them")


def _folder_name(workflow: str) -> str:
    return workflow.replace(":", "-")


def run(cfg: Config) -> int:
    from ragteam.cli.search import format_hits
    from ragteam.data.questions import read_questions
    from ragteam.eval.report import table
    from ragteam.eval.run import EvalConfig, run_eval
    from ragteam.eval.setup import demo_data_path
    from ragteam.retrieval.factory import KIND_NEEDS, dataset_index, retriever_from_index

    data = demo_data_path()
    if data is None:
        raise FileNotFoundError("the bundled demo data (ragteam/demo/) is missing from this install")
    questions = read_questions(data).questions
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)

    print(f"== 1. index: paragraphs pooled from {len(questions)} HotpotQA questions ({data.name})")
    t0 = perf_counter()
    kinds = KIND_NEEDS.get(cfg.retriever.kind, ("bm25", "dense"))
    folder = dataset_index(data, kinds=kinds, questions=questions, progress=False)
    print(
        f"   {len(folder.docs)} passages, indexes {', '.join(folder.kinds)} in {folder.path} "
        f"({perf_counter() - t0:.1f} s)"
    )

    print("\n== 2. search")
    retriever = retriever_from_index(folder, cfg.retriever)
    query = questions[0].question
    print(format_hits(query, cfg.retriever.kind, retriever.search([query], cfg.k)[0]))

    print(
        f"\n== 3. evaluate {len(cfg.workflows)} workflows on {cfg.questions} questions "
        f"(policy and LLM: {cfg.model.model}, {cfg.model.backend})"
    )
    rows = []
    for workflow in cfg.workflows:
        print(f"\n-- {workflow}")
        t0 = perf_counter()
        summary = run_eval(
            EvalConfig(
                workflow=workflow,
                data=str(data),
                out=str(out / _folder_name(workflow)),
                limit=cfg.questions,
                policy=cfg.model,
                llm=cfg.model,
                retriever=cfg.retriever.model_copy(update={"index": str(folder.path)}),
                overwrite=cfg.overwrite,
                progress=False,
            ),
            log=lambda _msg: None,
        )
        m = summary["metrics"]
        calls = summary["stats"]["per_question"]["calls"]
        rows.append(
            [
                workflow,
                summary["n"],
                *(f"{100 * m[k]:.1f}" for k in ("em", "f1", "cover_em")),
                f"{calls['policy']:.1f}",
                f"{calls['llm']:.1f}",
                f"{calls['retrieve']:.1f}",
                summary["failed"],
                f"{perf_counter() - t0:.0f}",
            ]
        )
        print(f"   F1 {100 * m['f1']:.1f}, cover-EM {100 * m['cover_em']:.1f} ({perf_counter() - t0:.0f} s)")

    result = table(
        [
            "workflow",
            "n",
            "EM",
            "F1",
            "cover-EM",
            "policy calls/q",
            "LLM calls/q",
            "searches/q",
            "failed",
            "seconds",
        ],
        rows,
    )
    note = (
        f"Demo: {cfg.questions} bundled HotpotQA questions, retriever {cfg.retriever.kind}, policy and LLM "
        f"{cfg.model.model} (untrained). Traces and reports: one folder per workflow beside this file.\n\n"
    )
    (out / "summary.md").write_text(note + result + "\n", encoding="utf-8")
    print("\n" + result)
    print(f"\nwrote {out}/summary.md and one folder per workflow (episodes.jsonl, metrics.json, report.md)")
    return 0
