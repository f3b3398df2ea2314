"""Keep one of N: scorers that rank an act's candidate replies, so the engine continues the best one.

The engine samples N candidates for an act (`RolloutConfig.best_of`), records all N as sibling nodes with
their scores, marks the best `chosen` and continues only it. This is RAG-Gym's critic-guided inference
(Algorithm 1) and its process-data collection, and it gives every workflow best-of-N. Three scorers:

- `CriticScorer`: a trained critic (process reward model, `ragteam.llm.critic.CriticModel`) scores each
  (state, candidate) pair;
- `LLMRankScorer`: the LLM server ranks the candidates with a rubric; the score is N - rank;
- `RolloutScorer`: Monte Carlo rollouts from each candidate to an answer; the score is the mean reward.

A scorer gets all candidate sets of one engine tick at once, so it can batch.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ragteam.llm.base import ChatModel, ChatRequest, ModelError, Sampling
from ragteam.protocol import Act, Acted, Answer, Episodic, Workflow
from ragteam.rollout.replay import Step, replay, send
from ragteam.types import Question


@dataclass
class Candidates:
    """The N candidate replies of one act, with what a scorer may need to judge them."""

    question: Question
    act: Act  # as sent (after fitting)
    texts: list[str]
    acted: list[Acted]  # the candidates as the workflow would receive them
    history: list[Step]  # the path before the act (for rollouts)
    workflow: Workflow
    reward: Callable[[Question, str], dict[str, float]] | None


class Scorer(Protocol):
    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        """One score per candidate of each set; higher is better."""
        ...


class CriticScorer:
    """Scores candidates with a critic model: `critic.score([(messages, candidate)]) -> [float]`."""

    def __init__(self, critic: Any) -> None:
        self.critic = critic

    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        items = [(c.act.messages, text) for c in batch for text in c.texts]
        flat = list(self.critic.score(items)) if items else []
        out, start = [], 0
        for c in batch:
            out.append([float(s) for s in flat[start : start + len(c.texts)]])
            start += len(c.texts)
        return out


RUBRIC = """You are judging candidate next steps of an assistant that answers a question with a search engine.

A good step moves toward a correct answer: a search query asks for the one fact that is still missing, is
specific and does not repeat earlier searches; an answer is given only when the information shown supports
it, and it is short and exact. A step that is malformed, off-topic, or repeats itself is bad.

The assistant's instructions and state:
{state}

Candidate steps:
{candidates}

Rank the candidates from best to worst. Reply with their numbers only, best first, e.g. "Ranking: 2, 1, 3"."""

_NUMBER = re.compile(r"\d+")


def parse_ranking(text: str, n: int) -> list[float]:
    """Scores from a ranking reply: the k-th ranked candidate scores n - k; unranked ones score 0.

    Never raises: numbers out of range or repeated are ignored (after "Ranking:" when the reply has it)."""
    at = text.lower().rfind("ranking")
    numbers = [int(m) for m in _NUMBER.findall(text[at:] if at >= 0 else text)]
    scores = [0.0] * n
    rank = 0
    for i in numbers:
        if 1 <= i <= n and scores[i - 1] == 0.0:
            scores[i - 1] = float(n - rank)
            rank += 1
    return scores


class LLMRankScorer:
    """The LLM server ranks each candidate set with `RUBRIC` (one greedy call per set, batched)."""

    def __init__(self, llm: ChatModel, max_tokens: int = 32, state_chars: int = 6000) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.state_chars = state_chars

    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        requests = []
        for c in batch:
            state = "\n\n".join(m["content"] for m in c.act.messages)[-self.state_chars :]
            listed = "\n".join(f"{i}. {t.strip()}" for i, t in enumerate(c.texts, 1))
            prompt = RUBRIC.format(state=state, candidates=listed)
            requests.append(
                ChatRequest(
                    [{"role": "user", "content": prompt}],
                    Sampling(temperature=0.0, max_tokens=self.max_tokens),
                )
            )
        results = self.llm.chat(requests)
        out = []
        for c, result in zip(batch, results):
            if isinstance(result, ModelError) or not result:
                out.append([0.0] * len(c.texts))  # no ranking: a tie, the first candidate is kept
            else:
                out.append(parse_ranking(result[0].text, len(c.texts)))
        return out


class _Continue(Workflow):
    """Continues a recorded path after one candidate: replays `history`, sends the candidate, goes on."""

    def __init__(self, starts: dict[str, tuple[Workflow, list[Step], Act, Acted]]) -> None:
        self.starts = starts
        self.name = "rollout-scorer"

    def run(self, question: Question) -> Episodic:
        workflow, history, act, acted = self.starts[question.id]
        gen = replay(workflow, question, history, act)
        try:
            request = send(gen, acted)
            while True:
                result = yield request
                request = send(gen, result)
        except StopIteration as stop:
            value = stop.value
            return value if isinstance(value, Answer) else Answer(str(value or ""))


class RolloutScorer:
    """Monte Carlo: `rollouts` sampled continuations from each candidate; its score is their mean reward.

    `engine` is an `Engine` over the same policy, LLM and retriever, configured without forks or
    keep-one-of-N (its rollouts are probes, not part of the recorded tree)."""

    def __init__(self, engine: Any, rollouts: int = 2, metric: str = "f1") -> None:
        self.engine = engine
        self.rollouts = rollouts
        self.metric = metric
        self.probes = 0  # rollouts run so far

    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        starts: dict[str, tuple[Workflow, list[Step], Act, Acted]] = {}
        questions: list[Question] = []
        keys: list[tuple[int, int]] = []
        for b, c in enumerate(batch):
            for i, acted in enumerate(c.acted):
                for r in range(self.rollouts):
                    qid = f"{c.question.id}#candidate{b}.{i}.{r}"
                    starts[qid] = (c.workflow, c.history, c.act, acted)
                    questions.append(_renamed(c.question, qid))
                    keys.append((b, i))
        reward = next((c.reward for c in batch if c.reward is not None), None)
        if reward is None:
            raise ValueError("the rollout scorer needs the run's reward function")
        report = self.engine.run(_Continue(starts), questions, reward=reward)
        self.probes += len(questions)
        sums = [[0.0] * len(c.texts) for c in batch]
        for (b, i), ep in zip(keys, report.episodes):
            leaves = [leaf for leaf in ep.leaves() if leaf.status != "failed"]
            if leaves:
                sums[b][i] += sum(leaf.rewards.get(self.metric, 0.0) for leaf in leaves) / len(leaves)
        return [[s / self.rollouts for s in row] for row in sums]


def _renamed(question: Question, qid: str) -> Question:
    return dataclasses.replace(question, id=qid)


def argmax(scores: list[float]) -> int:
    """The index of the best score (the first among ties)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def build_scorer(config: Any, policy: Any, llm: Any, retriever: Any, critic: Any = None) -> Scorer | None:
    """The scorer `config.best_of` asks for (None when keep-one-of-N is off).

    `config` is the run's RolloutConfig; the rollout scorer gets its own engine over the same parts, with
    forks and keep-one-of-N off."""
    best = config.best_of
    if best.n <= 1:
        return None
    if best.scorer == "critic":
        if critic is None:
            raise ValueError("best_of.scorer=critic needs a critic model: pass --critic.model DIR")
        return CriticScorer(critic)
    if best.scorer == "llm":
        if llm is None:
            raise ValueError("best_of.scorer=llm needs the LLM server (--llm.*)")
        return LLMRankScorer(llm)
    from ragteam.rollout.engine import Engine

    probe = config.model_copy(update={"forks": [], "best_of": type(best)()})
    return RolloutScorer(Engine(policy, llm, retriever, probe), rollouts=best.rollouts, metric=best.metric)
