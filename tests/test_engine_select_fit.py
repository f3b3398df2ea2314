"""Keep-one-of-N and prompt fitting: the engine logic with scripted parts, and the pure fitting policy."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from test_engine import CountingModel, TwoActs, questions

from ragteam.llm.base import ChatRequest, ChatResult
from ragteam.protocol import Answer, EpisodeGenerator, Role, Workflow
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.fit import fit_request
from ragteam.rollout.scorers import Candidates, parse_ranking
from ragteam.types import Action, Doc, Question


class LengthScorer:
    """Scores a candidate by a fixed table of its sample index (the text ends in /<index>)."""

    def __init__(self, by_index: dict[int, float]) -> None:
        self.by_index = by_index
        self.seen: list[Candidates] = []

    def scores(self, batch: Sequence[Candidates]) -> list[list[float]]:
        self.seen.extend(batch)
        return [[self.by_index[int(t.rsplit("/", 1)[1])] for t in c.texts] for c in batch]


def test_keep_one_of_n_records_n_scored_siblings_and_continues_the_best():
    scorer = LengthScorer({0: 0.1, 1: 0.9, 2: 0.5})
    cfg = RolloutConfig(best_of={"n": 3, "roles": ["first"]})
    policy = CountingModel()
    engine = Engine(policy, None, None, cfg, scorer=scorer)
    (ep,) = engine.run(TwoActs(), questions("q")).episodes
    first = [n for n in ep.policy_nodes() if n.role == "first"]
    assert [n.score for n in first] == [0.1, 0.9, 0.5]
    assert [n.chosen for n in first] == [False, True, False]
    # only the chosen one has a child; the others are childless siblings
    assert [len(ep.children(n.id)) for n in first] == [0, 1, 0]
    (second,) = [n for n in ep.policy_nodes() if n.role == "second"]
    assert second.parent == first[1].id and second.messages[-1]["content"] == "q/1"
    assert second.score is None and second.chosen is None  # "second" is not under keep-one-of-N
    (leaf,) = ep.leaves()
    assert leaf.answer == "q/1/0" and ep.status == "ok"
    # the scorer saw the act's prompt and the three texts; 3 + 1 samples were drawn
    assert scorer.seen[0].texts == ["q/0", "q/1", "q/2"] and engine.calls["policy_samples"] == 4


def test_keep_one_of_n_needs_a_scorer_and_a_failing_scorer_keeps_the_first():
    with pytest.raises(ValueError, match="needs a scorer"):
        Engine(CountingModel(), None, None, RolloutConfig(best_of={"n": 2}))

    class Broken:
        def scores(self, batch):
            raise RuntimeError("critic down")

    engine = Engine(CountingModel(), None, None, RolloutConfig(best_of={"n": 2}), scorer=Broken())
    (ep,) = engine.run(TwoActs(), questions("q")).episodes
    assert ep.status == "ok" and ep.answer == "q/0/0"
    assert "critic down" in ep.meta["scorer_errors"][0]


def test_parse_ranking_never_raises_and_scores_n_minus_rank():
    """Fig. 10's JSON (0-based indices); more cases in test_engine_best_of.py."""
    assert parse_ranking('{"ranked_indices": [1, 0, 2]}', 3).scores == [2.0, 3.0, 1.0]
    assert parse_ranking('I think 2 is best. {"ranked_indices": [2, 2, 9, 0]}', 3).scores == [2.0, 0.0, 3.0]
    assert parse_ranking("no idea", 2).scores == [0.0, 0.0]


# ---------------------------------------------------------------------- fitting to the context


def _docs(n: int, words: int = 40) -> list[Doc]:
    return [Doc(f"d{i}", f"T{i}", " ".join(f"w{i}x{j}" for j in range(words))) for i in range(n)]


def _render(question: str, docs: list) -> list:
    body = "\n".join(f"[{i}] {d.text}" for i, d in enumerate(docs, 1))
    return [{"role": "user", "content": f"{question}\n{body}"}]


def _parse(text: str, question: str, docs: list) -> Action:
    return Action("select", value=len(docs))


READER = Role("reader", _render, _parse, docs="docs")


def _words(messages) -> int:
    return sum(len(m["content"].split()) for m in messages)


def test_fit_drops_the_lowest_ranked_documents_first_and_rebinds_the_parser():
    act = READER.act(question="q", docs=_docs(5))
    before = _words(act.messages)  # 1 + 5 * 41
    fitted, max_tokens, record = fit_request(act, 10, 10 + 130, _words)
    kept = fitted.fields["docs"]
    assert [d.id for d in kept] == ["d0", "d1", "d2"]  # 3 docs = 1 + 3*41 = 124 words <= 130
    assert record["docs_dropped"] == 2 and record["passages_shortened"] == 0
    assert record["prompt_tokens"] == before and record["prompt_tokens_after"] == _words(fitted.messages)
    assert fitted.parse("anything").value == 3 and max_tokens == 10  # the parser sees the kept documents


def test_fit_shortens_passages_once_one_document_is_left_then_the_reply():
    act = READER.act(question="q", docs=_docs(2, words=200))
    fitted, max_tokens, record = fit_request(act, 8, 8 + 60, _words)
    (doc,) = fitted.fields["docs"]
    assert record["docs_dropped"] == 1 and record["passages_shortened"] >= 2
    assert _words(fitted.messages) <= 60 and doc.text.endswith("...")
    # nothing to cut: a prompt that fits is returned as it is, without a record
    same, n, none = fit_request(act, 8, 10_000, _words)
    assert same is act and n == 8 and none is None


def test_fit_cuts_plain_text_when_there_are_no_documents_to_drop():
    class Plain(Workflow):
        def run(self, question: Question) -> EpisodeGenerator:
            yield from ()
            return Answer("")

    from ragteam.protocol import AskLLM

    ask = AskLLM("answer", [{"role": "user", "content": " ".join(["word"] * 500)}], max_tokens=50)
    fitted, max_tokens, record = fit_request(ask, 50, 300, _words)
    assert record["text_cut"] and _words(fitted.messages) + max_tokens <= 300
    assert "[...]" in fitted.messages[0]["content"]


def test_fit_of_grouped_documents_drops_from_the_largest_group():
    groups = [("a", _docs(1)), ("b", _docs(3))]
    role = Role("actor", lambda docs: _render("q", [d for _, g in docs for d in g]), docs="docs")
    ask = role.ask(docs=groups)
    fitted, _, record = fit_request(ask, 0, 1 + 3 * 41, _words)
    assert [len(g) for _, g in fitted.fields["docs"]] == [1, 2] and record["docs_dropped"] == 1


class SmallContext(CountingModel):
    """A counting model with a context of `context_length` tokens (one token per word)."""

    def __init__(self, context_length: int) -> None:
        super().__init__()
        self.context_length = context_length

    def count_tokens(self, messages) -> int:
        return _words(messages)

    def chat(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        for r in requests:
            assert _words(r.messages) + r.sampling.max_tokens <= self.context_length
        return super().chat(requests)


class Reads(Workflow):
    name = "reads"

    def run(self, question: Question) -> EpisodeGenerator:
        acted = yield READER.act(question=question.question, docs=_docs(6))
        return Answer(str(len(acted.act.fields["docs"])))


def test_an_overlong_prompt_is_cut_and_the_cut_recorded_never_a_failed_episode():
    engine = Engine(SmallContext(200), None, None, RolloutConfig(max_tokens=20))
    (ep,) = engine.run(Reads(), questions("q")).episodes
    (node,) = ep.policy_nodes()
    assert ep.status == "ok" and node.fit["docs_dropped"] == 2 and ep.answer == "4"
    assert node.sampling["max_tokens"] == 20 and _words(node.messages) <= 180


def test_a_raising_parser_under_keep_one_of_n_fails_its_path_not_the_run():
    from ragteam.protocol import Act

    def boom(text: str) -> Action:
        raise RuntimeError("parser bug")

    class Raising(Workflow):
        name = "raising"

        def run(self, question: Question) -> EpisodeGenerator:
            yield Act("first", [{"role": "user", "content": question.question}], boom)
            return Answer("never")

    engine = Engine(
        CountingModel(), None, None, RolloutConfig(best_of={"n": 2}), scorer=LengthScorer({0: 1, 1: 2})
    )
    report = engine.run(Raising(), questions("q", "r"))
    assert [ep.status for ep in report.episodes] == ["failed", "failed"]
    assert all("parser bug" in ep.error for ep in report.episodes)
