"""`ragteam ask`: run one question through a workflow and print its trace.

    ragteam ask "Who directed the film that ...?" --workflow c3po
    ragteam ask --data hotpotqa-dev-500.jsonl --id 5a8c7595554299585d9e36b6 --workflow mmoa --json

The trace shows each role's output and parsed action, the documents retrieved (title and first words), the
LLM calls (C-3PO's roadmap, the answer) and the final answer; `--json` prints the whole episode tree instead.
Without --retriever.index / --retriever.url the corpus is the pooled paragraphs of --data, or of the bundled
demo questions when no --data is given.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from pydantic import Field

from ragteam.assemble.build import build_team, needs_retriever
from ragteam.assemble.config import TeamConfig, demo_data_path
from ragteam.eval.trace_view import format_episode
from ragteam.types import Question

ASK_ID = "ask"
"""Question id of a question given on the command line (seeds derive from it, so runs repeat)."""

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "json"')

    class Config(TeamConfig):
        """Run one question through a workflow and print its trace."""

        question: str | None = Field(
            None,
            description="the question to ask (or --id with --data)",
            json_schema_extra={"positional": True},
        )
        data: str | None = Field(
            None,
            description="dataset whose paragraphs are the corpus, and where --id looks (default: the "
            "bundled demo questions)",
        )
        format: str | None = Field(
            None, description="reader format of --data (default: detected from the file)"
        )
        id: str | None = Field(
            None, description="ask the question with this id in --data (and score the answer)"
        )
        gold: list[str] = Field(default_factory=list, description="gold answers to score the answer against")
        json: bool = Field(
            False, description="print the full episode tree as JSON instead of the readable trace"
        )
        prompts: bool = Field(False, description="also print every prompt sent to the policy and the LLM")
        out: str | None = Field(None, description="also write the episode as JSON to this file")
        episodes: str | None = Field(
            None,
            description="show the traces of a file of episodes instead of asking (an eval's episodes.jsonl, "
            "train ppo's OUT/rollouts/iteration-N.jsonl or OUT/eval/iteration-N.jsonl); with --id, only "
            "that question's",
        )


def resolve_question(cfg: Config) -> tuple[Question, str | None, str | None]:
    """The question to ask, and the dataset (and its format) whose paragraphs are the default corpus."""
    if cfg.id is not None:
        if cfg.question:
            raise ValueError("give either a question or --id (with --data), not both")
        if cfg.data is None:
            raise ValueError("--id needs --data FILE, the dataset that holds the question")
        from ragteam.data.questions import read_questions

        qset = read_questions(cfg.data, cfg.format)
        for q in qset.questions:
            if q.id == cfg.id:
                if cfg.gold:
                    q.golden_answers = list(cfg.gold)
                return q, cfg.data, qset.format
        raise ValueError(
            f"{cfg.data}: no question with id {cfg.id!r} (it has {len(qset.questions)} questions)"
        )
    if not cfg.question or not cfg.question.strip():
        raise ValueError(
            'give a question, e.g. ragteam ask "Who wrote Hamlet?" --workflow c3po (or --id with --data)'
        )
    question = Question(id=ASK_ID, question=cfg.question.strip(), golden_answers=list(cfg.gold))
    return question, cfg.data, cfg.format


def show_episodes(path: str, question_id: str | None = None, prompts: bool = False) -> list[str]:
    """The readable trace of each episode in the file `path` (of question `question_id` only, when given),
    in file order: a group of K rollouts of one question shows all K. ValueError when none matches."""
    from ragteam.rollout.traces import read_episodes

    shown = [
        format_episode(ep, prompts=prompts)
        for ep in read_episodes(path)
        if question_id is None or ep.question.id == question_id
    ]
    if not shown:
        raise ValueError(f"{path}: no episode" + (f" of question {question_id!r}" if question_id else ""))
    return shown


def run(cfg: Config) -> int:
    if cfg.episodes is not None:
        print("\n\n".join(show_episodes(cfg.episodes, cfg.id, cfg.prompts)))
        return 0
    question, data, fmt = resolve_question(cfg)
    r = cfg.retriever
    if data is None and r.index is None and r.url is None and needs_retriever(cfg):
        demo = demo_data_path()
        if demo is not None:
            data, fmt = str(demo), None
            print(f"(corpus: the paragraphs of the bundled demo questions, {demo.name})", file=sys.stderr)
    # --corpus: a question of --data (--id) searches its own paragraphs under distractor; a free question
    # every paragraph of the file, as a server would (ragteam.eval.corpus)
    from ragteam.eval.corpus import choose_corpus

    own = [question] if cfg.id is not None else None
    built, _ = choose_corpus(cfg, data, fmt, needs_retriever(cfg), progress=True, questions=own)
    parts = build_team(built, data=data, fmt=fmt)
    reward = None
    if question.golden_answers:
        from ragteam.metrics.answer import score_answer

        def reward(q: Question, prediction: str) -> dict[str, float]:
            return score_answer(prediction, q)

    report = parts.engine.run(parts.workflow, [question], reward=reward)
    episode = report.episodes[0]
    if cfg.out:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(
            json.dumps(episode.to_dict(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
        )
    if cfg.json:
        print(json.dumps(episode.to_dict(), ensure_ascii=False, indent=2))
    else:
        print(format_episode(episode, prompts=cfg.prompts))
    return 1 if episode.status == "failed" else 0
