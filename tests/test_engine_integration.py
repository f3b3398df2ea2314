"""The rollout engine against real parts: the tiny local model, a BM25 index over HotpotQA paragraphs, and an
OpenAI-compatible server (`ragteam serve llm`) on loopback that is killed mid-run."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from conftest import TEST_DEVICE

from ragteam.llm.local import LocalChatModel
from ragteam.llm.openai_http import OpenAIChatModel
from ragteam.llm.tiny import tiny_model_dir
from ragteam.protocol import Act, Answer, EpisodeGenerator, Workflow
from ragteam.retrieval.base import Retriever
from ragteam.retrieval.config import RetrieverConfig
from ragteam.retrieval.factory import open_retriever
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.traces import read_episodes, write_episodes
from ragteam.rollout.tree import Episode
from ragteam.serve.testing import ServerProcess
from ragteam.types import Action, Doc, Question, doc_id
from ragteam.workflows.baselines import Direct, StandardRAG
from ragteam.workflows.config import WorkflowConfig

# ---------------------------------------------------------------------- real parts


def hotpot_questions(shared_data: Path, n: int) -> list[Question]:
    """The first `n` HotpotQA dev records (IRCoT format) with their paragraphs."""
    out = []
    with open(shared_data / "hotpotqa-dev-500.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            context = [
                Doc(doc_id(c["title"], c["paragraph_text"]), c["title"], c["paragraph_text"])
                for c in r["contexts"]
            ]
            answers = [s for a in r["answers_objects"] for s in a["spans"]]
            out.append(
                Question(
                    id=r["question_id"],
                    question=r["question_text"],
                    golden_answers=answers,
                    context=context,
                    supporting_ids=[
                        d.id for d, c in zip(context, r["contexts"], strict=True) if c["is_supporting"]
                    ],
                )
            )
            if len(out) == n:
                break
    return out


def retriever_for(questions: list[Question], shared_data: Path, tmp_path: Path) -> Retriever:
    """ragteam's BM25 index over the paragraphs pooled from a file holding these HotpotQA records."""
    wanted = {q.id for q in questions}
    subset = tmp_path / "hotpotqa-subset.jsonl"
    with open(shared_data / "hotpotqa-dev-500.jsonl", encoding="utf-8") as f, open(subset, "w") as out:
        out.writelines(line for line in f if json.loads(line)["question_id"] in wanted)
    return open_retriever(RetrieverConfig(kind="bm25"), data=str(subset))


@pytest.fixture(scope="module")
def tiny() -> LocalChatModel:
    return LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16)


def strip_seconds(ep: Episode) -> dict:
    d = ep.to_dict()
    d["meta"].pop("seconds", None)
    for n in d["nodes"]:
        n.pop("seconds", None)
    return d


def parse_plain(text: str) -> Action:
    return Action("answer", value=text, valid=bool(text.strip()))


class ActTwice(Workflow):
    """Two policy acts; the second sees the first's output."""

    name = "act-twice"

    def run(self, question: Question) -> EpisodeGenerator:
        first = yield Act(
            "draft", [{"role": "user", "content": question.question}], parse_plain, max_tokens=6
        )
        second = yield Act(
            "final",
            [
                {"role": "user", "content": question.question},
                {"role": "assistant", "content": first.text},
                {"role": "user", "content": "Answer in a few words."},
            ],
            parse_plain,
            max_tokens=6,
        )
        return Answer(second.text)


# ---------------------------------------------------------------------- tests


def test_standard_rag_end_to_end_with_tiny_model_and_bm25(shared_data, tiny, tmp_path):
    qs = hotpot_questions(shared_data, 4)
    retriever = retriever_for(qs, shared_data, tmp_path)
    assert type(retriever).__name__ == "BM25Retriever"
    engine = Engine(None, tiny, retriever, RolloutConfig(llm_max_tokens=8))
    report = engine.run(StandardRAG(WorkflowConfig(topk=3)), qs, reward=lambda q, a: {"len": float(len(a))})
    assert report.failed == 0 and [ep.id for ep in report.episodes] == [q.id for q in qs]
    assert engine.calls["retrieve_batches"] == 1 and engine.calls["retrieve_queries"] == 4
    assert engine.calls["llm_batches"] == 1 and engine.calls["llm_requests"] == 4
    for q, ep in zip(qs, report.episodes, strict=True):
        kinds = [n.kind for n in ep.nodes]
        assert kinds == ["retrieve", "llm", "answer"]
        retrieve, llm, leaf = ep.nodes
        assert len(retrieve.hits[0]) == 3 and retrieve.queries == [q.question]
        # BM25 with the question itself ranks one of its own paragraphs first
        assert retrieve.hits[0][0].doc.id in {d.id for d in q.context}
        assert retrieve.hits[0][0].doc.text in llm.messages[-1]["content"]
        assert (
            llm.completion.completion_ids and len(llm.completion.logprobs) == llm.completion.completion_tokens
        )
        assert leaf.status == "ok" and leaf.rewards == {"len": float(len(leaf.answer))}
        assert leaf.info["doc_ids"] == [h.doc.id for h in retrieve.hits[0]]


def test_branching_with_the_tiny_model_records_tokens_and_logprobs(tiny):
    qs = [Question(id="a", question="Which city is the capital of France?", golden_answers=["Paris"])]
    cfg = RolloutConfig(forks=[2, 2], temperature=1.0, seed=5)
    engine = Engine(tiny, None, None, cfg)
    (ep,) = engine.run(ActTwice(), qs).episodes
    assert len(ep.leaves()) == 4 and engine.calls["policy_samples"] == 6
    for node in ep.policy_nodes():
        c = node.completion
        assert c.prompt_ids and c.completion_ids and len(c.logprobs) == len(c.completion_ids) <= 6
        assert all(lp <= 0.0 for lp in c.logprobs)
    # the forward-pass log-probs of a recorded node match what generation recorded
    node = ep.policy_nodes()[-1]
    (again,) = tiny.logprobs([node.completion.prompt_ids], [node.completion.completion_ids])
    assert again == pytest.approx(node.completion.logprobs, abs=1e-4)

    # seeded sampling is reproducible; greedy decoding gives identical trees (the same tokens; the log-probs
    # bit for bit from the same prefix-cache state, else up to float round-off: tests/test_prefix_cache.py)
    def fresh(config: RolloutConfig):
        tiny.prefix_cache.clear()
        return Engine(tiny, None, None, config).run(ActTwice(), qs).episodes[0]

    assert strip_seconds(fresh(cfg)) == strip_seconds(fresh(cfg))
    greedy = RolloutConfig(temperature=0.0)
    assert strip_seconds(fresh(greedy)) == strip_seconds(fresh(greedy))


def test_tree_from_a_real_run_round_trips_through_jsonl(shared_data, tiny, tmp_path):
    qs = hotpot_questions(shared_data, 2)
    engine = Engine(
        tiny,
        tiny,
        retriever_for(qs, shared_data, tmp_path),
        RolloutConfig(forks=[2], temperature=1.0, llm_max_tokens=4),
    )
    report = engine.run(StandardRAG(WorkflowConfig(topk=2)), qs)
    report2 = engine.run(ActTwice(), qs)
    episodes = report.episodes + report2.episodes
    path = tmp_path / "trees.jsonl"
    write_episodes(path, episodes)
    loaded = list(read_episodes(path))
    assert [e.to_dict() for e in loaded] == [e.to_dict() for e in episodes]
    for a, b in zip(loaded, episodes, strict=True):
        assert a.nodes == b.nodes  # every node loads back equal (hits, completions, log-probs, timing)


@pytest.mark.slow  # serve llm in a process of its own
def test_server_killed_mid_run_fails_the_later_episodes_and_keeps_the_earlier(shared_data):
    tiny_model_dir()  # build the tiny model here (once), not in the server process
    server = ServerProcess(
        ["llm", "--model.model", "tiny", "--model.device", TEST_DEVICE], timeout=90
    ).start()
    try:
        llm = OpenAIChatModel(server.url + "/v1", "tiny", retries=1, backoff=0.05, timeout=10)
        qs = hotpot_questions(shared_data, 8)
        done_before_kill: list[str] = []
        finished: list[tuple[str, str]] = []  # (id, status) in the order episodes finished

        def on_episode(ep: Episode) -> None:
            finished.append((ep.id, ep.status))
            if server.proc.poll() is None:
                done_before_kill.append(ep.id)
                if len(done_before_kill) == 3:
                    server.proc.send_signal(signal.SIGKILL)
                    server.proc.wait(timeout=10)

        engine = Engine(None, llm, None, RolloutConfig(max_concurrent=2, llm_max_tokens=4))
        report = engine.run(Direct(WorkflowConfig()), qs, on_episode=on_episode)
    finally:
        server.stop()

    ok = [ep.id for ep in report.episodes if ep.status == "ok"]
    failed = [ep for ep in report.episodes if ep.status == "failed"]
    # the 3 episodes answered before the kill (and at most one more answered in the same tick, as 2 were in
    # flight) completed; every episode that asked the server after the kill failed
    assert set(done_before_kill) <= set(ok) and 3 <= len(ok) <= 4
    statuses = [status for _, status in finished]
    assert statuses == ["ok"] * len(ok) + ["failed"] * len(failed) and len(failed) >= len(qs) - 4
    assert report.failed == len(failed) and len(ok) + len(failed) == len(qs)
    endpoint = server.url + "/v1/chat/completions"
    assert report.failures == {f"llm error ({endpoint})": len(failed)}
    for ep in failed:
        (leaf,) = ep.leaves()
        assert leaf.status == "failed" and endpoint in ep.error and "failed after 2 attempts" in ep.error
    for ep in report.episodes:
        if ep.status == "ok":
            assert ep.leaves()[0].status == "ok" and ep.nodes[0].completion.text is not None
