"""C-3PO's forced strategies recorded alike in process and behind an OpenAI-compatible server (issue 20, item 2).

The same forced C-3PO tree (the tiny model as proxy; the router's three strategies `[No Retrieval]`,
`[Retrieval]` + a sampled query, `[Planning]`; then K(t) = 2 to t = 4; greedy decoding) is rolled three ways:
the in-process backend, the same model behind `ragteam serve llm` (`make_app`, as the command runs it) on
loopback, and the same model behind a server that answers as vLLM does (the prefix counted as prompt, the
continuation only, `prompt_logprobs`, `allowed_token_ids` and `/tokenize`), both through the OpenAI client
backend. Node by node the recorded prompt ids, completion ids, forced counts and log-probs (1e-4) are equal,
and so are the packed training tensors (`samples_from_episodes` + `pack_samples`): the strategy's tokens are
trained, with the same mask, whichever backend sampled them.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import TEST_DEVICE
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from test_engine_integration import hotpot_questions, retriever_for

from ragteam.credit import get_credit
from ragteam.llm.base import ChatRequest, Sampling
from ragteam.llm.local import LocalChatModel
from ragteam.llm.openai_http import OpenAIChatModel
from ragteam.metrics.answer import score_answer
from ragteam.metrics.rewards import get_reward
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.serve.llm import make_app
from ragteam.serve.testing import BackgroundServer
from ragteam.train.experience import pack_samples, samples_from_episodes
from ragteam.workflows.c3po import C3PO
from ragteam.workflows.c3po.settings import TREE as C3PO_TREE
from ragteam.workflows.config import WorkflowConfig

PREFIXES = ["[No Retrieval]", "[Retrieval]", "[Planning]"]
BACKENDS = ("local", "serve-llm", "vllm")


def vllm_like_app(model: LocalChatModel, tokenize: bool = True, refuse: tuple[str, ...] = ()) -> FastAPI:
    """A server that answers as vLLM's OpenAI server does, computed on `model`.

    A final assistant message with `continue_final_message` is rendered into the prompt (the chat template,
    cut after that message's content): `prompt_token_ids` end with the prefix's tokens, `content`,
    `token_ids` and `logprobs` are the continuation's only; `sample_after_prefix` is not a vLLM field and is
    ignored; `allowed_token_ids` restricts the sampled token (one id and `max_tokens: 1` here), its log-prob
    the raw model's; `prompt_logprobs: k` returns each prompt token's own log-prob (None for the first),
    keyed by its id. `/tokenize` takes a prompt or messages (`tokenize=False`: no such route). The fields in
    `refuse` are answered 400 naming them. The request bodies are kept in `app.state.bodies`."""
    app = FastAPI()
    app.state.bodies = []
    tok = model.tokenizer

    def render(messages: list[dict], generation_prompt: bool, continue_final: bool) -> list[int]:
        text = tok.apply_chat_template(
            messages,
            add_generation_prompt=generation_prompt,
            continue_final_message=continue_final,
            tokenize=False,
        )
        return list(tok(text, add_special_tokens=False)["input_ids"])

    if tokenize:

        @app.post("/tokenize")
        def tokenize_route(body: dict[str, Any]) -> dict[str, Any]:
            if "messages" in body:
                ids = render(
                    body["messages"],
                    body.get("add_generation_prompt", True),
                    body.get("continue_final_message", False),
                )
            else:
                ids = list(
                    tok(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))["input_ids"]
                )
            return {"tokens": ids, "count": len(ids), "max_model_len": model.context_length}

    @app.post("/v1/chat/completions")
    def chat(body: dict[str, Any]) -> Any:
        app.state.bodies.append(body)
        named = [k for k in refuse if k in body]
        if named:
            return JSONResponse({"error": {"message": f"{named[0]} is not supported", "code": 400}}, 400)
        continue_final = bool(body.get("continue_final_message"))
        messages = body["messages"][:-1] if continue_final else body["messages"]
        prefix = body["messages"][-1]["content"] if continue_final else ""
        prompt = render(body["messages"], body.get("add_generation_prompt", True), continue_final)
        # the emulation samples on the local backend: the ids it runs on must be the ones vLLM would
        assert prompt == model.prompt_ids(messages) + model.prefix_ids(prefix)
        n = body.get("n", 1)
        sampling = Sampling(
            temperature=body.get("temperature", 1.0),
            top_p=body.get("top_p", 1.0),
            max_tokens=body["max_tokens"],
            stop=tuple(body.get("stop") or ()),
            n=n,
            seed=body.get("seed"),
        )
        allowed = body.get("allowed_token_ids")
        if allowed:
            assert len(allowed) == 1 and sampling.max_tokens == 1, "emulated: one allowed id, one token"
            [lp] = model.logprobs([prompt], [allowed])
            answers = [("", list(allowed), lp, "stop")] * n
        else:
            [result] = model.chat([ChatRequest(messages, sampling, prefix=prefix)])
            answers = [
                (
                    c.text[len(prefix) :],
                    c.completion_ids[c.forced_tokens :],
                    c.logprobs[c.forced_tokens :],
                    c.finish_reason,
                )
                for c in result
            ]
        as_ids = body.get("return_tokens_as_token_ids")
        choices = []
        for i, (content, ids, lps, finish) in enumerate(answers):
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
                "logprobs": None,
            }
            if body.get("logprobs"):
                spelled = [f"token_id:{t}" if as_ids else tok.decode([t]) for t in ids]
                choice["logprobs"] = {
                    "content": [
                        {"token": s, "logprob": lp, "top_logprobs": []} for s, lp in zip(spelled, lps)
                    ]
                }
            if body.get("return_token_ids"):
                choice["token_ids"] = ids
            choices.append(choice)
        out: dict[str, Any] = {
            "choices": choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": sum(len(a[1]) for a in answers)},
        }
        if body.get("return_token_ids"):
            out["prompt_token_ids"] = prompt
        if body.get("prompt_logprobs") is not None:
            [own] = model.logprobs([prompt[:1]], [prompt[1:]])
            out["prompt_logprobs"] = [None] + [
                {str(t): {"logprob": lp, "rank": 1, "decoded_token": tok.decode([t])}}
                for t, lp in zip(prompt[1:], own)
            ]
        return out

    return app


@pytest.fixture(scope="module")
def served() -> LocalChatModel:
    """The policy's weights in their own instance, behind the servers."""
    return LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16, name="proxy")


@pytest.fixture(scope="module")
def trees(shared_data, tmp_path_factory, served):
    policy = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16, name="proxy")
    llm = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16, name="llm")
    qs = hotpot_questions(shared_data, 2)
    retriever = retriever_for(qs, shared_data, tmp_path_factory.mktemp("forced-http"))
    cfg = RolloutConfig(**C3PO_TREE, temperature=0.0, seed=11, max_tokens=8, llm_max_tokens=4)

    def roll(model) -> list:
        report = Engine(model, llm, retriever, cfg).run(
            C3PO(WorkflowConfig(topk=3)), qs, reward=lambda q, a: score_answer(a, q)
        )
        assert all(ep.status == "ok" for ep in report.episodes)
        return report.episodes

    out = {"local": roll(policy)}
    for name, app in (
        ("serve-llm", make_app(served, "tiny-served", batch_wait_ms=5.0)),
        ("vllm", vllm_like_app(served)),
    ):
        with BackgroundServer(app) as srv:
            client = OpenAIChatModel(srv.url, "tiny-served", concurrency=8, timeout=120, retries=0)
            try:
                out[name] = roll(client)
            finally:
                client.close()
            if name == "vllm":
                out["vllm-bodies"] = list(app.state.bodies)
    return policy, out


def _roots(ep) -> list:
    return [n for n in ep.policy_nodes() if n.parent is None]


def test_the_forced_strategies_are_completion_tokens_on_every_backend(trees):
    policy, out = trees
    for name in BACKENDS:
        for ep in out[name]:
            roots = _roots(ep)
            assert [n.sampling["prefix"] for n in roots] == PREFIXES, name
            for node, prefix in zip(roots, PREFIXES, strict=True):
                c = node.completion
                ids = policy.prefix_ids(prefix)
                assert c.forced_tokens == len(ids) > 0 and c.completion_ids[: len(ids)] == ids, name
                assert c.text.startswith(prefix) and c.prompt_ids == policy.prompt_ids(node.messages), name
                assert len(c.logprobs) == len(c.completion_ids) == c.completion_tokens, name
            # the closed strategies are the prefix and end-of-turn, nothing sampled; [Retrieval] sampled on
            for closed in (roots[0], roots[2]):
                prefix = closed.sampling["prefix"]
                assert closed.completion.completion_ids == policy.prefix_ids(prefix) + [policy.eot_id], name
                assert closed.completion.text == prefix and closed.completion.finish_reason == "stop", name
            assert len(roots[1].completion.completion_ids) > roots[1].completion.forced_tokens, name
            assert [n.action.kind for n in roots] == ["no_retrieval", "retrieval", "planning"], name
    # how the vLLM-shaped server was asked: the prefix as a continued assistant message, its log-probs as
    # prompt log-probs, a closed strategy's one token restricted to end-of-turn
    bodies = [b for b in out["vllm-bodies"] if b.get("continue_final_message")]
    assert {b["messages"][-1]["content"] for b in bodies} == set(PREFIXES)
    assert all(b["add_generation_prompt"] is False and b["prompt_logprobs"] == 0 for b in bodies)
    closed = [b for b in bodies if b["messages"][-1]["content"] != "[Retrieval]"]
    assert closed and all(b["allowed_token_ids"] == [policy.eot_id] and b["max_tokens"] == 1 for b in closed)


def test_the_trees_are_equal_node_by_node(trees):
    _, out = trees
    local = out["local"]
    for name in ("serve-llm", "vllm"):
        assert [ep.id for ep in out[name]] == [ep.id for ep in local]
        for ep, ref in zip(out[name], local, strict=True):
            assert [(n.id, n.kind, n.role, n.parent, n.depth) for n in ep.nodes] == [
                (n.id, n.kind, n.role, n.parent, n.depth) for n in ref.nodes
            ], name
            for node, twin in zip(ep.policy_nodes(), ref.policy_nodes(), strict=True):
                c, lc = node.completion, twin.completion
                where = (name, ep.id, node.id, node.role)
                assert c.text == lc.text and c.finish_reason == lc.finish_reason, where
                assert c.prompt_ids == lc.prompt_ids and c.completion_ids == lc.completion_ids, where
                assert c.forced_tokens == lc.forced_tokens and c.completion_tokens == lc.completion_tokens, (
                    where
                )
                assert c.prompt_tokens == lc.prompt_tokens, where
                assert c.logprobs == pytest.approx(lc.logprobs, abs=1e-4), where


def test_the_packed_training_tensors_are_equal(trees, served):
    _, out = trees
    packed, samples_of = {}, {}
    for name in BACKENDS:
        samples, skipped = samples_from_episodes(out[name], get_credit("tree_mc"), get_reward("f1"))
        assert "no_token_ids" not in skipped, (name, skipped)
        samples_of[name], packed[name] = samples, pack_samples(samples, pad_id=served.pad_id)
    ref, ref_samples = packed["local"], samples_of["local"]
    for name in ("serve-llm", "vllm"):
        p, samples = packed[name], samples_of[name]
        assert [(s.episode, s.node, s.role, s.kind, s.reward) for s in samples] == [
            (s.episode, s.node, s.role, s.kind, s.reward) for s in ref_samples
        ], name
        for field in ("input_ids", "position_ids", "rows", "cols", "mask", "completion_ids", "temperature"):
            assert torch.equal(getattr(p, field), getattr(ref, field)), (name, field)
        for s, r in zip(samples, ref_samples, strict=True):
            assert s.rollout_logprobs == pytest.approx(r.rollout_logprobs, abs=1e-4), (
                name,
                s.episode,
                s.node,
            )
    # the router's strategy tokens are trained: its forced samples' masks cover the prefix, end-of-turn included
    forced = {(ep.id, n.id): n.completion.forced_tokens for ep in out["local"] for n in _roots(ep)}
    routers = [b for b, s in enumerate(ref_samples) if (s.episode, s.node) in forced]
    assert len(routers) == 3 * len(out["local"])
    for b in routers:
        s = ref_samples[b]
        f = forced[(s.episode, s.node)]
        assert ref.mask[b, : len(s.completion_ids)].all() and f < len(s.completion_ids)
        assert ref.completion_ids[b, :f].tolist() == s.completion_ids[:f]


# ---- the client against a vLLM-shaped server without all it asks for -----------------------------------


def test_without_tokenize_a_forced_reply_keeps_its_text_but_no_ids(served):
    """A server that counts the prefix as prompt but cannot tokenize it: the exact record cannot be made, so
    the completion carries no ids (a trainer skips it) instead of training the prefix as prompt."""
    msgs = [{"role": "user", "content": "Which city is the capital of France?"}]
    reqs = [
        ChatRequest(msgs, Sampling(max_tokens=4), prefix="[Retrieval]"),
        ChatRequest(msgs, Sampling(max_tokens=4), prefix="[Planning]", sample_after_prefix=False),
        ChatRequest(msgs, Sampling(max_tokens=4)),
    ]
    app = vllm_like_app(served, tokenize=False)
    with BackgroundServer(app) as srv:
        client = OpenAIChatModel(srv.url, "tiny-served", retries=0)
        [[sampled], [closed], [free]] = client.chat(reqs)
        client.close()
    local = served.chat(reqs)
    assert sampled.text == local[0][0].text and closed.text == "[Planning]" == local[1][0].text
    for c in (sampled, closed):
        assert (
            c.completion_ids is None and c.prompt_ids is None and c.logprobs is None and c.forced_tokens == 0
        )
    assert free.completion_ids == local[2][0].completion_ids  # no prefix: ids as before
    closed_body = next(b for b in app.state.bodies if b.get("sample_after_prefix") is False)
    assert "allowed_token_ids" not in closed_body  # end-of-turn unknown: not asked for


def test_a_server_refusing_prompt_logprobs_is_asked_without_them(served):
    """The prefix's ids are still exact; its log-probs are unknown, so the completion's are None."""
    msgs = [{"role": "user", "content": "hi"}]
    req = ChatRequest(msgs, Sampling(max_tokens=4), prefix="[Retrieval]")
    app = vllm_like_app(served, refuse=("prompt_logprobs",))
    with BackgroundServer(app) as srv:
        client = OpenAIChatModel(srv.url, "tiny-served", retries=0)
        [[first]] = client.chat([req])
        [[second]] = client.chat([req])
        client.close()
    [[local]] = served.chat([req])
    for c in (first, second):
        assert c.completion_ids == local.completion_ids and c.forced_tokens == local.forced_tokens > 0
        assert c.prompt_ids == local.prompt_ids and c.logprobs is None
    bodies = app.state.bodies
    assert len(bodies) == 3 and "prompt_logprobs" in bodies[0] and "prompt_logprobs" not in bodies[2]
