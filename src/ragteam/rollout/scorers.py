"""Keep one of N: scorers that rank an act's candidate replies, so the engine continues the best one.

The engine samples N candidates for an act (`RolloutConfig.best_of`), records all N as sibling nodes with
their scores, marks the best `chosen` and continues only it. This is RAG-Gym's critic-guided inference
(Algorithm 1) and its process-data collection, and it gives every workflow best-of-N. The scorers, one per
reward source of RAG-Gym's Table 4 (`--rollout.best-of.scorer`, `collect process --ranker`):

- `PRMScorer` (`prm`): a trained process reward model (or an outcome reward model,
  `ragteam.llm.prm.ProcessRewardModel`) scores each (state, candidate) pair;
- `LLMRankScorer` (`llm`): the LLM server ranks the candidates with Fig. 10's criteria (sufficiency, utility,
  redundancy) and answers `{"ranked_indices": [...]}`; the score is N - rank (PRM (GPT-4o / Llama) data);
- `RolloutScorer` (`rollout`): Monte Carlo rollouts from each candidate to an answer; the score is their mean
  reward (PRM (Rollout), Math-Shepherd's estimate);
- `RandomScorer` (`random`): a seeded uniform draw per candidate (PRM (Random), the baseline);
- `OutcomeScorer` (`outcome`): the outcome alone, the high-level MDP's reward (§2.1): a candidate that ends the
  episode scores its answer's reward against the gold answers, one after which the episode goes on scores 0
  (ORM: outcome source "Truth", no process source; a PRM trained on its pairs is the outcome reward model).

A scorer gets all candidate sets of one engine tick at once, so it can batch. `assemble.build.build_scorer`
builds the one a run's `RolloutConfig.best_of` names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ragteam.llm.base import ChatModel, ChatRequest, ModelError, Sampling
from ragteam.protocol import RANKING_PROMPTS, Act, Acted, Answer, EpisodeGenerator, Workflow
from ragteam.rollout.replay import Step, replay, send
from ragteam.types import Action, Question


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


class PRMScorer:
    """Scores candidates with a process reward model: `prm.score([(messages, candidate)]) -> [float]`."""

    def __init__(self, prm: Any) -> None:
        self.prm = prm

    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        items = [(c.act.messages, text) for c in batch for text in c.texts]
        flat = list(self.prm.score(items)) if items else []
        out, start = [], 0
        for c in batch:
            out.append([float(s) for s in flat[start : start + len(c.texts)]])
            start += len(c.texts)
        return out


# ---------------------------------------------------------------------------- the LLM ranking (Fig. 10)


def registered_prompt(scorer: str) -> str:
    """The prompt registered for ranking scorer `scorer` (`protocol.register_ranking_prompt`): the `llm`
    scorer's is RAG-Gym's Fig. 10, which its package states (`workflows/gym/ranking.py`), so this module
    names no paper. ValueError naming the registered ones when there is none."""
    import ragteam.workflows.registry  # noqa: F401  (loads the built-in teams, which register their prompts)

    if scorer not in RANKING_PROMPTS:
        raise ValueError(
            f"no ranking prompt is registered for scorer {scorer!r}: known {sorted(RANKING_PROMPTS)}"
        )
    return RANKING_PROMPTS[scorer]


@dataclass(frozen=True)
class Ranking:
    """A parsed ranking reply: `order` holds the valid indices ranked, best first; the k-th of them scores
    n - k, every candidate left out 0. `problem` says what was wrong with the reply (None: a complete, clean
    `{"ranked_indices": [...]}`); a reply with no usable index scores all 0 (a tie: the first is kept, no
    pairs come from it)."""

    scores: list[float]
    order: list[int]
    problem: str | None = None


_OBJECT = re.compile(r"\{[^{}]*\}")
_FIELD = re.compile(r"ranked_indices\W{0,4}\[([^\]]*)\]", re.IGNORECASE)
_INT = re.compile(r"-?\d+")


def _index(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value.strip())
    return None


def parse_ranking(text: str, n: int) -> Ranking:
    """Fig. 10's `{"ranked_indices": [...]}` read from a reply (in a ```json fence or not), never raising.

    The last JSON object with a `ranked_indices` key counts; without one, a `ranked_indices: [...]` list
    written loosely is read (`problem="not_json"`). Out-of-range, repeated or non-integer entries are skipped
    (`bad_index`), a list that leaves candidates out is used as far as it goes (`incomplete`); with no list at
    all (`no_ranked_indices`), not a list (`not_a_list`) or no usable index (`empty`) every candidate scores 0.
    """
    zeros = [0.0] * n
    values: Any = None
    found = False
    for m in _OBJECT.finditer(text or ""):
        try:
            obj = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(obj, dict) and "ranked_indices" in obj:
            values, found = obj["ranked_indices"], True
    problem: str | None = None
    if not found:
        loose = _FIELD.findall(text or "")
        if not loose:
            return Ranking(zeros, [], "no_ranked_indices")
        values, problem = _INT.findall(loose[-1]), "not_json"
    if not isinstance(values, list):
        return Ranking(zeros, [], "not_a_list")
    order: list[int] = []
    for value in values:
        i = _index(value)
        if i is None or not 0 <= i < n or i in order:
            problem = problem or "bad_index"
            continue
        order.append(i)
    if not order:
        return Ranking(zeros, [], problem or "empty")
    if len(order) < n:
        problem = problem or "incomplete"
    scores = list(zeros)
    for rank, i in enumerate(order):
        scores[i] = float(n - rank)
    return Ranking(scores, order, problem)


def _is_steps(value: Any) -> bool:
    """A list of (query, x) pairs: RAG-Gym's information-seeking history as its workflows hold it."""
    return isinstance(value, list) and all(
        isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], str) for x in value
    )


def ranking_history(c: Candidates) -> str:
    """The information-seeking history the ranker reads: for a `gym:*` act (fields `notes` and `docs`), the
    queries with the answers written from their documents (Search-o1, Re2Search) or with the documents, as
    JSON; for any other workflow, the act's prompt, which holds its state."""
    fields = c.act.fields or {}
    notes, docs = fields.get("notes"), fields.get("docs")
    if "notes" in fields and _is_steps(notes) and _is_steps(docs):
        if notes:
            items: list[dict[str, Any]] = [{"query": q, "answer": a} for q, a in notes]
        else:
            items = [
                {"query": q, "documents": [getattr(d, "contents", str(d)) for d in ds]} for q, ds in docs
            ]
        return json.dumps(items, indent=2, ensure_ascii=False)
    return "\n\n".join(m["content"] for m in c.act.messages)


def ranking_action(acted: Acted, text: str, chars: int = 1000) -> str:
    """One proposed action as the ranker reads it: `Query: ...` or `Answer: ...` for a parsed search or
    answer (RAG-Gym's rendering), the reply itself (on one line) for anything else."""
    action = acted.action
    if action.valid and action.kind == "answer":
        return f"Answer: {action.value}"
    if action.valid and action.kind in ("search", "retrieval") and action.value:
        return f"Query: {action.value}"
    one_line = " ".join((text or "").split())
    return one_line[:chars] or "(empty reply)"


def ranking_prompt(c: Candidates, state_chars: int = 6000) -> str:
    """Fig. 10's prompt for one candidate set; the history keeps its last `state_chars` characters."""
    history = ranking_history(c)
    if len(history) > state_chars:
        history = "..." + history[-state_chars:]
    actions = "\n".join(f"[{i}] {ranking_action(a, t)}" for i, (a, t) in enumerate(zip(c.acted, c.texts)))
    template = registered_prompt("llm")
    return template.format(question=c.question.question, history=history or "[]", actions=actions)


class LLMRankScorer:
    """The LLM server ranks each candidate set with Fig. 10's prompt (one greedy call per set, batched).

    `counts` tallies this scorer's calls: `sets`, `ranked` (a clean ranking), `malformed` and
    `malformed_<problem>` (see `parse_ranking`), `no_reply` (the server failed: a tie, the first is kept)."""

    def __init__(self, llm: ChatModel, max_tokens: int | None = None, state_chars: int = 6000) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.state_chars = state_chars
        self.counts: Counter = Counter()

    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        requests = []
        for c in batch:
            budget = self.max_tokens or 32 + 4 * len(c.texts)  # a JSON list of N indices, with its fence
            requests.append(
                ChatRequest(
                    [{"role": "user", "content": ranking_prompt(c, self.state_chars)}],
                    Sampling(temperature=0.0, max_tokens=budget),
                )
            )
        results = self.llm.chat(requests)
        out = []
        for c, result in zip(batch, results):
            self.counts["sets"] += 1
            if isinstance(result, ModelError) or not result:
                self.counts["no_reply"] += 1
                out.append([0.0] * len(c.texts))  # no ranking: a tie, the first candidate is kept
                continue
            ranking = parse_ranking(result[0].text, len(c.texts))
            if ranking.problem is None:
                self.counts["ranked"] += 1
            else:
                self.counts["malformed"] += 1
                self.counts[f"malformed_{ranking.problem}"] += 1
            out.append(list(ranking.scores))
        return out


# ---------------------------------------------------------------------------- Table 4's other sources


class RandomScorer:
    """RAG-Gym's "PRM (Random)" (Table 4): every candidate scores a uniform draw on [0, 1). Seeded and
    order-free: the draw is a function of the seed, the question, the act's prompt and the candidate's
    position, so a batch, a resumed run or another worker gives the same scores. `seed=None`: a fresh seed."""

    def __init__(self, seed: int | None = 0) -> None:
        self.seed = seed if seed is not None else random.SystemRandom().getrandbits(63)

    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        out = []
        for c in batch:
            key = json.dumps(["random-prm", self.seed, c.question.id, c.act.messages], ensure_ascii=False)
            rng = random.Random(int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest(), "big"))
            out.append([rng.random() for _ in c.texts])
        return out


def final_answer(c: Candidates, acted: Acted) -> str | None:
    """The episode's answer when the workflow ends right after receiving `acted` at `c.act` (replayed over
    the recorded path, no model called); None when it asks for anything more (a search goes on)."""
    gen = replay(c.workflow, c.question, c.history, c.act)
    try:
        send(gen, acted)
    except StopIteration as stop:
        value = stop.value
        return value.text if isinstance(value, Answer) else str(value or "")
    finally:
        gen.close()
    return None


class OutcomeScorer:
    """The outcome reward of each candidate alone (Table 4's ORM: outcome source "Truth", no process source).

    The high-level MDP's reward (§2.1): 0 for an action after which the episode goes on (a search), the
    answer's reward against the gold answers (`metric`, e.g. F1; RAG-Gym's EM for MedQA) for one that ends it.
    Ranked by it, `collect process` keeps a correct answer over a wrong one or a search and ties the rest, so a
    PRM trained on those pairs (`ragteam train prm`) models the final answer's correctness: the outcome
    reward model, used like any PRM (`--rollout.best-of.scorer prm --prm.model DIR`). Used directly
    at inference it reads the gold answers: an oracle, not a model.

    `counts`: `answers` (candidates that end the episode), `goes_on`, `errors` (a replay that failed: 0)."""

    def __init__(self, metric: str = "f1") -> None:
        self.metric = metric
        self.counts: Counter = Counter()

    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        out = []
        for c in batch:
            if c.reward is None:
                raise ValueError("the outcome scorer needs the run's reward function (the gold answers)")
            row = []
            for acted in c.acted:
                try:
                    answer = final_answer(c, acted)
                except Exception:  # a workflow that raises on this reply: it earns nothing
                    self.counts["errors"] += 1
                    row.append(0.0)
                    continue
                if answer is None:
                    self.counts["goes_on"] += 1
                    row.append(0.0)
                else:
                    self.counts["answers"] += 1
                    row.append(float(c.reward(c.question, answer).get(self.metric, 0.0)))
            out.append(row)
        return out


# ---------------------------------------------------------------------------- Monte Carlo rollouts


class _Continue(Workflow):
    """Continues a recorded path after one candidate: replays `history`, sends the candidate, goes on."""

    def __init__(self, starts: dict[str, tuple[Workflow, list[Step], Act, Acted]]) -> None:
        self.starts = starts
        self.name = "rollout-scorer"

    def run(self, question: Question) -> EpisodeGenerator:
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


def score_candidates(
    scorer: Scorer, workflow: Workflow, pairs: list[tuple[Any, Any]], reward: Any, counts: Counter
) -> dict[int, list[float]]:
    """The scores of every keep-one-of-N act's candidates of one engine tick, by id(branch), in one scorer
    call. `pairs` are (plan, completions) as the engine planned and sampled them (`plan.Plan`); a failed
    scorer keeps the first candidate of each set, and says so on the episode (`scorer_errors`)."""
    ok = [(p, r) for p, r in pairs if isinstance(r, list) and r]
    if not ok:
        return {}
    batch = [
        Candidates(
            question=p.live.question,
            act=p.request,
            texts=[c.text for c in r],
            acted=[Acted(c.text, parse_or_invalid(p.request, c.text), -1, p.request) for c in r],
            history=list(p.branch.history),
            workflow=workflow,
            reward=reward,
        )
        for p, r in ok
    ]
    counts["select_sets"] += len(batch)
    try:
        scores = scorer.scores(batch)
    except Exception as e:
        counts["select_errors"] += 1
        scores = [[0.0] * len(c.texts) for c in batch]
        for p, _ in ok:
            p.live.episode.meta.setdefault("scorer_errors", []).append(f"{type(e).__name__}: {e}")
    return {id(p.branch): s for (p, _), s in zip(ok, scores)}


def parse_or_invalid(act: Act, text: str) -> Action:
    """The act's parse of `text` for a scorer; a raising parser gives an invalid action here (the branch
    fails with the parser's traceback when the engine applies the result)."""
    try:
        return act.parse(text)
    except Exception as e:
        return Action("invalid", valid=False, error=f"parser raised {type(e).__name__}: {e}")
