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
import os
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
        out: str | None = Field(
            None,
            description="also write the episode as JSON to this file (an existing file is replaced only if "
            "it is an episode `ragteam ask` wrote, or with --overwrite)",
        )
        overwrite: bool = Field(False, description="let --out replace a file that is not an episode of ask")
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


EPISODE_KEYS = frozenset({"workflow", "question", "status"})  # what marks a file as an episode ask wrote
MAX_OWN_BYTES = 64_000_000  # a larger file is no episode of one question: not read to find out


def check_out_file(out: str, overwrite: bool) -> None:
    """Refuse `--out FILE` when FILE exists and is not an episode `ragteam ask` wrote (as every folder-writing
    command refuses a foreign `--out`: `ragteam.outdir`), unless `overwrite`; a folder, a FIFO or a device
    is refused always. Why: `ask --out` replaced a run's episodes.jsonl without a word."""
    path = Path(out)
    if not path.exists():
        return
    if not path.is_file():
        raise ValueError(f"--out {out}: not a regular file (a folder, a pipe or a device); give a file name")
    if overwrite:
        return
    try:
        doc = json.loads(path.read_text(encoding="utf-8")) if path.stat().st_size <= MAX_OWN_BYTES else None
    except (OSError, ValueError, RecursionError):
        doc = None
    own = isinstance(doc, dict) and EPISODE_KEYS <= doc.keys()
    if not own:
        raise ValueError(
            f"--out {out}: the file exists and is not an episode `ragteam ask` wrote; choose another --out, "
            "or pass --overwrite to replace it"
        )


def write_episode(out: str, episode: dict) -> None:
    """Write `episode` to `out` through a temporary file beside it, so a crash never leaves half a file."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(episode, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def show_episodes(path: str, question_id: str | None = None, prompts: bool = False) -> list[str]:
    """The readable trace of each episode in the file `path` (of question `question_id` only, when given),
    in file order: a group of K rollouts of one question shows all K. ValueError when none matches."""
    from ragteam.rollout.traces import read_episodes

    shown = [
        f"== episode {ep.id}\n" + format_episode(ep, prompts=prompts)  # K rollouts of a question: <id>#<k>
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
    if cfg.out is None:
        return _ask(cfg)
    from ragteam.outdir import file_lock

    check_out_file(cfg.out, cfg.overwrite)  # before any model loads: a refused --out costs nothing
    with file_lock(cfg.out, "ask"):  # one writer per output (ragteam.outdir)
        return _ask(cfg)


def _ask(cfg: Config) -> int:
    """Ask the question and print (and write) its episode."""
    question, data, fmt = resolve_question(cfg)
    r = cfg.retriever
    if data is None and r.index is None and r.url is None and needs_retriever(cfg):
        demo = demo_data_path()
        if demo is not None:
            data, fmt = str(demo), None
            print(f"(corpus: the paragraphs of the bundled demo questions, {demo.name})", file=sys.stderr)
    # --corpus: a question of --data (--id) searches its own paragraphs under distractor; a free question
    # every paragraph of the file, as a server would (ragteam.assemble.corpus)
    from ragteam.assemble.corpus import choose_corpus

    own = [question] if cfg.id is not None else None
    built, _ = choose_corpus(cfg, data, fmt, needs_retriever(cfg), progress=True, questions=own)
    parts = build_team(built, data=data, fmt=fmt)
    from ragteam.metrics.rewards import answer_rewards

    reward = answer_rewards if question.golden_answers else None
    report = parts.engine.run(parts.workflow, [question], reward=reward)
    episode = report.episodes[0]
    if cfg.out:
        check_out_file(cfg.out, cfg.overwrite)  # again, under the lock: someone may have written it meanwhile
        write_episode(cfg.out, episode.to_dict())
    if cfg.json:
        print(json.dumps(episode.to_dict(), ensure_ascii=False, indent=2))
    else:
        print(format_episode(episode, prompts=cfg.prompts))
    return 1 if episode.status == "failed" else 0
