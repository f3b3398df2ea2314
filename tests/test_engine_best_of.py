"""Keep-one-of-N on real parts: a RAG-Gym agent with the tiny model, BM25 over HotpotQA, and each scorer that
needs no trained weights (Monte Carlo rollouts, the LLM ranking candidates)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import TEST_DEVICE
from test_engine_integration import hotpot_questions, retriever_for

from ragteam.assemble.build import build_scorer
from ragteam.llm.local import LocalChatModel
from ragteam.metrics.answer import score_answer
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.scorers import LLMRankScorer, RolloutScorer
from ragteam.workflows.gym import GymAgent
from ragteam.workflows.gym.options import GymOptions


@pytest.fixture(scope="module")
def parts(shared_data, tmp_path_factory):
    tiny = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16)
    qs = hotpot_questions(shared_data, 2)
    return tiny, qs, retriever_for(qs, shared_data, tmp_path_factory.mktemp("best-of"))


def reward(q, a):
    return score_answer(a, q)


def check_kept_one_of_n(ep, n: int) -> int:
    """Every actor act recorded n scored siblings, the best one chosen and the only one continued."""
    groups = defaultdict(list)
    for node in ep.policy_nodes():
        groups[node.parent].append(node)
    for nodes in groups.values():
        assert len(nodes) == n and all(x.score is not None for x in nodes)
        chosen = [x for x in nodes if x.chosen]
        assert len(chosen) == 1 and chosen[0].score == max(x.score for x in nodes)
        assert all(ep.children(x.id) == [] for x in nodes if not x.chosen)
        assert ep.children(chosen[0].id)
    return len(groups)


def test_rollout_scorer_scores_candidates_by_their_rollouts_mean_reward(parts):
    tiny, qs, retriever = parts
    cfg = RolloutConfig(
        temperature=1.0, seed=3, max_tokens=12, best_of={"n": 3, "scorer": "rollout", "rollouts": 2}
    )
    scorer = build_scorer(cfg, tiny, tiny, retriever)
    assert isinstance(scorer, RolloutScorer)
    engine = Engine(tiny, tiny, retriever, cfg, scorer=scorer)
    report = engine.run(GymAgent(GymOptions(topk=2, max_steps=2), agent="react"), qs, reward=reward)
    acts = sum(check_kept_one_of_n(ep, 3) for ep in report.episodes)
    assert acts >= 2 and engine.calls["select_sets"] == acts
    # the probe engine ran 3 candidates x 2 rollouts per act, none of them recorded in the tree
    assert scorer.probes == acts * 3 * 2
    assert all(ep.status == "ok" for ep in report.episodes)
    for ep in report.episodes:
        for node in ep.policy_nodes():
            assert 0.0 <= node.score <= 1.0  # a mean of F1 rewards


def test_llm_rank_scorer_with_the_llm_server(parts):
    tiny, qs, retriever = parts
    cfg = RolloutConfig(temperature=1.0, seed=4, max_tokens=12, best_of={"n": 2, "scorer": "llm"})
    scorer = build_scorer(cfg, tiny, tiny, retriever)
    assert isinstance(scorer, LLMRankScorer)
    engine = Engine(tiny, tiny, retriever, cfg, scorer=scorer)
    report = engine.run(GymAgent(GymOptions(topk=2, max_steps=2), agent="react"), qs[:1], reward=reward)
    assert check_kept_one_of_n(report.episodes[0], 2) >= 1


def test_prm_scorer_needs_a_prm():
    with pytest.raises(ValueError, match="process reward model"):
        build_scorer(RolloutConfig(best_of={"n": 2}), None, None, None)


# ---------------------------------------------------------------------- RAG-Gym's Fig. 10 and Table 4 sources


def gym_candidates(texts_actions, notes=(("who directed Holocaust 2000?", "Alberto De Martino"),)):
    """One Re2Search act's candidate set with hand-made actions (state: one search and its summary)."""
    from ragteam.protocol import Acted
    from ragteam.rollout.scorers import Candidates
    from ragteam.types import Question
    from ragteam.workflows.gym.workflow import ACTOR

    act = ACTOR.act(
        agent="re2search", question="When did the director of Holocaust 2000 die?", docs=[],
        notes=list(notes), forced=False, mode="re2search", choices=None,
    )  # fmt: skip
    q = Question("q1", "When did the director of Holocaust 2000 die?", ["2 June 2015"])
    acted = [Acted(text, action, -1, act) for text, action in texts_actions]
    return Candidates(q, act, [t for t, _ in texts_actions], acted, [], GymAgent(agent="re2search"), None)


class Scripted:
    """A chat model answering each request with the next scripted reply (recording the prompts)."""

    def __init__(self, replies) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def chat(self, requests):
        from ragteam.llm.base import Completion, ModelError

        out = []
        for r in requests:
            self.prompts.append(r.messages[-1]["content"])
            reply = self.replies.pop(0)
            out.append(reply if isinstance(reply, ModelError) else [Completion(text=reply)])
        return out


def test_llm_ranking_prompt_is_fig_10_and_its_json_is_parsed_robustly():
    from ragteam.llm.base import ModelError
    from ragteam.rollout.scorers import parse_ranking, ranking_prompt, registered_prompt
    from ragteam.types import Action
    from ragteam.workflows.gym.ranking import CRITERIA, RANKING_PROMPT

    c = gym_candidates(
        [
            ("...search text", Action("search", "date of death of Alberto De Martino")),
            ("...answer text", Action("answer", "1990")),
            ("garbled", Action("answer", "", valid=False, error="no JSON")),
        ]
    )
    prompt = ranking_prompt(c)
    # the llm scorer's prompt is the one RAG-Gym's package registers under the scorer's name
    assert registered_prompt("llm") is RANKING_PROMPT
    assert prompt.startswith(RANKING_PROMPT.partition("{question}")[0])
    # the role, the assumption, the three criteria with their rules, the JSON output format
    for part in (*CRITERIA, "Important Assumption", "ranked_indices", "no explanation"):
        assert part in prompt
    assert (
        prompt.index("Sufficiency Check") < prompt.index("Utility Check") < prompt.index("Redundancy Check")
    )
    assert "### Original Question:\nWhen did the director of Holocaust 2000 die?" in prompt
    assert '"query": "who directed Holocaust 2000?"' in prompt and '"answer": "Alberto De Martino"' in prompt
    assert "[0] Query: date of death of Alberto De Martino\n[1] Answer: 1990\n[2] garbled" in prompt

    # parsing: fenced or bare JSON, 0-based indices, best first scores N - rank; never raises
    clean = parse_ranking('```json\n{"ranked_indices": [2, 0, 1]}\n```', 3)
    assert (clean.scores, clean.order, clean.problem) == ([2.0, 1.0, 3.0], [2, 0, 1], None)
    assert parse_ranking('Sure. {"ranked_indices": [1, 0, 2]}', 3).order == [1, 0, 2]
    cases = {
        "I prefer the first one.": ([0.0, 0.0, 0.0], "no_ranked_indices"),
        '{"ranked_indices": [1, 0, 2': ([0.0, 0.0, 0.0], "no_ranked_indices"),
        "ranked_indices: [1, 0, 2]": ([2.0, 3.0, 1.0], "not_json"),
        '{"ranked_indices": "1, 0"}': ([0.0, 0.0, 0.0], "not_a_list"),
        '{"ranked_indices": [7, 1, 1, true, "0"]}': ([2.0, 3.0, 0.0], "bad_index"),
        '{"ranked_indices": [2]}': ([0.0, 0.0, 3.0], "incomplete"),
        '{"ranked_indices": []}': ([0.0, 0.0, 0.0], "empty"),
        "": ([0.0, 0.0, 0.0], "no_ranked_indices"),
    }
    for reply, (scores, problem) in cases.items():
        got = parse_ranking(reply, 3)
        assert (got.scores, got.problem) == (scores, problem), reply

    # the scorer: one call per set, malformed replies fall back to a tie and are counted, never raised
    llm = Scripted(
        ['{"ranked_indices": [1, 0, 2]}', "no idea", ModelError("down"), '{"ranked_indices": [2]}']
    )
    scorer = LLMRankScorer(llm)
    assert scorer.scores([c, c, c, c]) == [[2.0, 3.0, 1.0], [0.0] * 3, [0.0] * 3, [0.0, 0.0, 3.0]]
    assert llm.prompts[0] == prompt
    assert scorer.counts == {
        "sets": 4, "ranked": 1, "malformed": 2, "malformed_no_ranked_indices": 1, "malformed_incomplete": 1,
        "no_reply": 1,
    }  # fmt: skip


def test_random_scorer_is_seeded_order_free_and_uniform():
    from ragteam.rollout.scorers import RandomScorer, argmax
    from ragteam.types import Action

    sets = [
        gym_candidates([(f"t{i}", Action("search", f"query {i}")) for i in range(4)], notes=[(f"s{k}", "x")])
        for k in range(1500)
    ]
    a = RandomScorer(seed=7).scores(sets)
    assert a == RandomScorer(seed=7).scores(sets)  # seeded
    assert RandomScorer(seed=7).scores(sets[::-1]) == a[::-1]  # a function of the set, not of the batch
    assert a != RandomScorer(seed=8).scores(sets)
    flat = [x for row in a for x in row]
    assert all(0.0 <= x < 1.0 for x in flat)
    assert sum(flat) / len(flat) == pytest.approx(0.5, abs=0.02)
    for lo in (0.0, 0.25, 0.5, 0.75):  # each quarter of [0, 1) holds a quarter of the draws
        assert sum(lo <= x < lo + 0.25 for x in flat) / len(flat) == pytest.approx(0.25, abs=0.02)
    wins = [argmax(row) for row in a]
    assert all(wins.count(i) / len(wins) == pytest.approx(0.25, abs=0.04) for i in range(4))
    cfg = RolloutConfig(seed=7, best_of={"n": 4, "scorer": "random"})
    built = build_scorer(cfg, None, None, None)
    assert isinstance(built, RandomScorer) and built.scores(sets[:5]) == a[:5]


def test_outcome_scorer_scores_an_answer_by_its_reward_and_a_search_by_zero():
    """Table 4's ORM source: the candidate's own outcome (the MDP's reward): an answer that ends the episode
    scores its F1 against the gold answers, a search (the episode goes on) scores 0."""
    import dataclasses

    from ragteam.rollout.scorers import OutcomeScorer
    from ragteam.types import Action

    c = gym_candidates(
        [
            ('{"predicted_answer": "x", "generated_query": "his death"}', Action("search", "his death")),
            ('{"predicted_answer": "2 June 2015"}', Action("answer", "2 June 2015")),
            ('{"predicted_answer": "1990"}', Action("answer", "1990")),
            ('{"predicted_answer": "June 2015"}', Action("answer", "June 2015")),
        ],
        notes=[],
    )
    c = dataclasses.replace(c, reward=reward)
    scorer = build_scorer(
        RolloutConfig(best_of={"n": 4, "scorer": "outcome", "metric": "f1"}), None, None, None
    )
    assert isinstance(scorer, OutcomeScorer)
    (scores,) = scorer.scores([c])
    assert scores == [0.0, 1.0, 0.0, pytest.approx(0.8)]
    assert scorer.counts == {"goes_on": 1, "answers": 3}
    with pytest.raises(ValueError, match="gold answers"):
        OutcomeScorer().scores([dataclasses.replace(c, reward=None)])


def test_outcome_and_random_scorers_in_the_engine(parts):
    """On real rollouts: a continued candidate that ended its episode scored its leaf's F1, one whose path
    went on scored 0; the random scorer's tree is the same twice with one seed."""
    tiny, qs, retriever = parts
    cfg = RolloutConfig(temperature=1.0, seed=5, max_tokens=12, best_of={"n": 3, "scorer": "outcome"})
    engine = Engine(tiny, tiny, retriever, cfg, scorer=build_scorer(cfg, tiny, tiny, retriever))
    workflow = GymAgent(GymOptions(topk=2, max_steps=2), agent="react")
    report = engine.run(workflow, qs, reward=reward)
    for ep in report.episodes:
        check_kept_one_of_n(ep, 3)
        for node in ep.policy_nodes():
            kids = ep.children(node.id)
            if node.chosen and kids and kids[0].kind == "answer" and node.action.kind == "answer":
                assert node.score == pytest.approx(kids[0].rewards["f1"])
            elif node.chosen and kids and kids[0].kind != "answer":
                assert node.score == 0.0

    def random_tree():
        rcfg = cfg.model_copy(update={"best_of": cfg.best_of.model_copy(update={"scorer": "random"})})
        eng = Engine(tiny, tiny, retriever, rcfg, scorer=build_scorer(rcfg, tiny, tiny, retriever))
        (ep,) = eng.run(workflow, qs[:1], reward=reward).episodes
        return [(n.text, n.score, n.chosen) for n in ep.policy_nodes()]

    first = random_tree()
    assert first == random_tree() and all(0.0 <= s < 1.0 for _, s, _ in first)
