"""MMOA-RAG's Selector action space (eq. 5: `Document`, the ids 0..K-1, `,`): declared on the role, enforced by
a logits mask in process, scored under the same mask by PPO, sent as the server's structured-output field over
HTTP, and honoured by `ragteam serve llm`."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

import httpx
import pytest
import torch
from conftest import TEST_DEVICE
from fastapi import FastAPI, Request
from scripted import drive, hits_for, make_doc, question

from ragteam.assemble.config import TeamConfig
from ragteam.credit import get_credit
from ragteam.llm.base import ChatRequest, Completion, Sampling
from ragteam.llm.constraint import Constraint, UnsupportedRegex, whitelist_texts
from ragteam.llm.local import LocalChatModel
from ragteam.llm.openai_http import OpenAIChatModel
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.engine import Engine
from ragteam.rollout.tree import Episode
from ragteam.serve.llm import make_app
from ragteam.serve.testing import BackgroundServer, ServerProcess
from ragteam.train.experience import pack_samples, samples_from_episodes
from ragteam.train.ppo_config import PPOConfig
from ragteam.types import Hit
from ragteam.workflows.mmoa import MMOA
from ragteam.workflows.mmoa.options import MMOAOptions
from ragteam.workflows.mmoa.workflow import SELECTOR, selector_constraint

Q = question("What is the date of death of the director of film Holocaust 2000?")
PROMPT = [{"role": "user", "content": "Select the relevant documents by their ids: Document0 ... Document4."}]


@pytest.fixture(scope="module")
def tiny() -> LocalChatModel:
    return LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=32)


# ---- the declaration -----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 5, 10, 12])
def test_the_selector_declares_its_action_space_for_k_candidates(k: int) -> None:
    c = selector_constraint(k)
    assert c.name == "selector"
    assert {"Document", ",", *(str(i) for i in range(k))} <= set(c.texts)
    assert {f"Document{i}" for i in range(k)} | {f",Document{i}" for i in range(k)} <= set(c.texts)
    assert re.fullmatch(c.regex, ",".join(f"Document{i}" for i in range(k)))
    assert not re.fullmatch(c.regex, f"Document{k}") and not re.fullmatch(c.regex, "Document0, Document0")
    assert set(whitelist_texts(c.regex)) == set(c.texts)  # a server maps the regex back to the same texts
    if k == 5:
        assert c.regex == "Document[0-4](,Document[0-4])*"


def test_the_act_carries_it_a_cut_prompt_redeclares_it_and_a_dropped_one_stays_dropped() -> None:
    docs = [make_doc(f"doc {i}") for i in range(5)]
    act = SELECTOR.act(question=Q.question, docs=docs)
    assert act.constraint == selector_constraint(5)
    cut = SELECTOR.rebuild(act, docs=docs[:3])  # how fitting drops documents
    assert cut.constraint == selector_constraint(3)
    dropped = dataclasses.replace(act, constraint=None)
    assert SELECTOR.rebuild(dropped, docs=docs[:3]).constraint is None


def test_the_workflow_option_switches_it_and_profiles_and_the_recipe_turn_it_on() -> None:
    good = {"selector": "Document0,Document2", "generator": "2 June 2015"}
    on = drive(MMOA(MMOAOptions(variant="s-g", candidates=4, selector_constrained=True)), Q, policy=good)
    [(sel, _)] = on.acts("selector")
    assert sel.constraint == selector_constraint(4)
    assert all(a.constraint is None for a, _ in on.acts("generator"))  # free text: the answer
    off = drive(MMOA(MMOAOptions(variant="s-g", candidates=4)), Q, policy=good)
    assert off.acts("selector")[0][0].constraint is None
    assert on.answer.info == off.answer.info  # what it selects is read the same way
    assert TeamConfig(workflow="mmoa").selector_constrained is False  # small: as before
    assert TeamConfig(workflow="mmoa", profile="paper").selector_constrained is True
    recipe = PPOConfig(recipe="mmoa", data="d", out="o")
    assert recipe.selector_constrained is True and recipe.workflow_config().selector_constrained is True
    flag = PPOConfig(recipe="mmoa", data="d", out="o", selector_constrained=False)
    assert flag.selector_constrained is False


@pytest.mark.parametrize("regex", ["a.b", "[^0-4]", "Document\\w", "(?=a)b", "(a)\\1", ""])
def test_a_regex_that_is_not_a_whitelist_of_texts_is_refused(regex: str) -> None:
    with pytest.raises(UnsupportedRegex):
        whitelist_texts(regex)


# ---- in process: the logits mask --------------------------------------------------------------------------


def test_constrained_sampling_at_temperature_1_5_never_leaves_the_whitelist(tiny) -> None:
    c = selector_constraint(5)
    allowed = set(tiny.allowed_ids(c))
    assert tiny.eot_id in allowed and len(allowed) < 40
    free = ChatRequest(PROMPT, Sampling(temperature=1.5, max_tokens=24, n=3, seed=3))
    requests = [
        ChatRequest(PROMPT, Sampling(temperature=1.5, max_tokens=32, n=24, seed=s), constraint=c)
        for s in (1, 2)
    ]
    requests.append(
        ChatRequest(PROMPT, Sampling(temperature=1.5, top_p=0.9, max_tokens=32, n=8), constraint=c)
    )
    requests.append(ChatRequest(PROMPT, Sampling(max_tokens=16), constraint=c))  # greedy
    *constrained, mixed = tiny.chat([*requests, free])
    completions = [x for result in constrained for x in result]
    assert len(completions) == 24 + 24 + 8 + 1
    for x in completions:
        assert set(x.completion_ids) <= allowed, x.text
        assert x.constraint == {
            "name": "selector",
            "regex": c.regex,
            "by": "logits_mask",
            "enforced": True,
            "allowed_ids": sorted(allowed),
        }
        assert all(math.isfinite(lp) and lp <= 0 for lp in x.logprobs)
        assert set(x.text) <= set("Document01234,"), x.text  # pieces of the words of eq. 5 only
    assert len({tuple(x.completion_ids) for x in completions}) > 20  # it still samples
    assert sum(x.finish_reason == "stop" for x in completions) > 0  # end-of-turn stays reachable
    # a row without a constraint decodes as it would alone
    [alone] = tiny.chat([free])
    assert [x.completion_ids for x in mixed] == [x.completion_ids for x in alone]
    assert all(x.constraint is None for x in mixed)
    assert any(set(x.completion_ids) - allowed for x in mixed)
    assert "constraint" not in mixed[0].to_dict()  # traces of free acts unchanged
    again = Completion.from_dict(completions[0].to_dict())
    assert again.constraint == completions[0].constraint


def test_recorded_log_probs_are_the_masked_distributions(tiny) -> None:
    c = selector_constraint(3)
    reqs = [
        ChatRequest(PROMPT, Sampling(temperature=1.0, max_tokens=12, n=2, seed=5), constraint=c),
        ChatRequest(PROMPT, Sampling(temperature=1.0, max_tokens=6, seed=5), prefix="Document", constraint=c),
    ]
    done = [x for result in tiny.chat(reqs) for x in result]
    prompts, comps = [x.prompt_ids for x in done], [x.completion_ids for x in done]
    masked = tiny.logprobs(prompts, comps, allowed=[x.constraint["allowed_ids"] for x in done])
    plain = tiny.logprobs(prompts, comps)
    for x, m, p in zip(done, masked, plain):
        assert max(abs(a - b) for a, b in zip(x.logprobs, m)) < 1e-4
        assert all(a > b for a, b in zip(m, p))  # renormalized over the whitelist: every token more likely
    assert done[2].forced_tokens > 0 and done[2].text.startswith("Document")


# ---- PPO: the trainer scores a constrained act under the same mask ----------------------------------------


class _Hits:
    name = "scripted"

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        return [hits_for(q, k) for q in queries]


def test_packed_scoring_of_a_constrained_act_equals_the_rollout_log_probs(tiny) -> None:
    from ragteam.train.actor_critic import completion_logprobs

    workflow = MMOA(MMOAOptions(variant="s-g", candidates=3, selector_constrained=True))
    cfg = RolloutConfig(temperature=1.0, seed=4, max_tokens=24)
    qs = [question(f"Which film came first, number {i} or the other?") for i in range(3)]
    episodes = Engine(tiny, None, _Hits(), cfg).run(workflow, qs).episodes
    episodes = [Episode.from_dict(ep.to_dict()) for ep in episodes]  # as a trainer reads them from traces
    samples, skipped = samples_from_episodes(episodes, get_credit("outcome"), lambda leaf, question: 1.0)
    assert not skipped
    selector = [s for s in samples if s.role == "selector"]
    generator = [s for s in samples if s.role == "generator"]
    assert len(selector) == len(generator) == 3
    assert all(s.allowed_ids and set(s.completion_ids) <= set(s.allowed_ids) for s in selector)
    assert all(s.allowed_ids is None for s in generator)
    batch = pack_samples(samples, max_tokens=max(s.length for s in samples) * 2)
    assert batch.allowed is not None and batch.input_ids.shape[0] < len(samples)  # packed, mixed rows
    with torch.no_grad():
        logp, _, _ = completion_logprobs(tiny.model, batch)
        unmasked, _, _ = completion_logprobs(tiny.model, dataclasses.replace(batch, allowed=None))
    for b, s in enumerate(samples):
        n = len(s.completion_ids)
        assert torch.allclose(logp[b, :n], torch.tensor(s.rollout_logprobs), atol=1e-4), s.role
        if s.role == "selector":
            assert torch.all(logp[b, :n] > unmasked[b, :n] + 1e-3)  # the mask changes every token's score
        else:
            assert torch.equal(logp[b, :n], unmasked[b, :n])  # free acts: the same numbers as before


# ---- over HTTP: the structured-output field ---------------------------------------------------------------


def _recording_app() -> FastAPI:
    """A server that records each request body and answers `ok`."""
    app = FastAPI()
    app.state.bodies = []

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        app.state.bodies.append(await request.json())
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "Document1"},
            "finish_reason": "stop",
        }
        return {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}

    return app


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ("vllm", {"structured_outputs": {"regex": "Document[0-4](,Document[0-4])*"}}),
        ("vllm-guided", {"guided_regex": "Document[0-4](,Document[0-4])*"}),
        ("sglang", {"regex": "Document[0-4](,Document[0-4])*"}),
        ("none", {}),
    ],
)
def test_the_configured_structured_output_field_is_sent(form: str, field: dict) -> None:
    c = selector_constraint(5)
    keys = {"structured_outputs", "guided_regex", "regex"}
    with BackgroundServer(_recording_app()) as srv:
        model = OpenAIChatModel(srv.url, "m", retries=0, structured_output=form)
        [[constrained], [free]] = model.chat(
            [ChatRequest(PROMPT, Sampling(), constraint=c), ChatRequest(PROMPT, Sampling())]
        )
        bodies = srv.app.state.bodies
        assert len(bodies) == 2
        sent = [{k: b[k] for k in keys & set(b)} for b in bodies]
        if field:  # the constrained request carries the field, the free one nothing
            assert sorted(sent, key=len) == [{}, field]
        else:  # with none, nothing extra goes out
            assert sent == [{}, {}]
    assert constrained.text == "Document1" and free.constraint is None
    assert constrained.constraint == {
        "name": "selector",
        "regex": c.regex,
        "by": form,
        "enforced": form != "none",
    }


def test_an_unknown_structured_output_form_is_refused() -> None:
    with pytest.raises(ValueError, match="vllm-guided"):
        OpenAIChatModel("http://127.0.0.1:9/v1", "m", structured_output="outlines")


# ---- `ragteam serve llm` honours a constrained request ----------------------------------------------------


@pytest.mark.slow  # serve llm in a process of its own
def test_serve_llm_honours_a_structured_outputs_regex(tiny) -> None:
    c = selector_constraint(5)
    allowed = set(tiny.allowed_ids(Constraint.from_regex(c.regex)))
    assert allowed == set(tiny.allowed_ids(c))  # the server's whitelist is the role's
    with ServerProcess(
        ["llm", "--model.model", "tiny", "--model.device", TEST_DEVICE, "--served-name", "tiny-cli"],
        timeout=60,
    ) as srv:
        for form in ("vllm", "vllm-guided", "sglang"):
            client = OpenAIChatModel(srv.url, "tiny-cli", retries=0, structured_output=form)
            req = ChatRequest(PROMPT, Sampling(temperature=1.5, max_tokens=24, n=8, seed=2), constraint=c)
            [got] = client.chat([req])
            assert len(got) == 8
            for x in got:
                assert set(x.completion_ids) <= allowed, (form, x.text)
                assert x.constraint["by"] == form and x.constraint["allowed_ids"] == sorted(allowed)
            # the server's log-probs are the masked distribution's, as the local model records them
            local = tiny.logprobs(
                [x.prompt_ids for x in got],
                [x.completion_ids for x in got],
                allowed=[x.constraint["allowed_ids"] for x in got],
            )
            for x, lp in zip(got, local):
                assert max(abs(a - b) for a, b in zip(x.logprobs, lp)) < 1e-4
        free = OpenAIChatModel(srv.url, "tiny-cli", retries=0, structured_output="none")
        [[plain]] = free.chat(
            [ChatRequest(PROMPT, Sampling(temperature=1.5, max_tokens=24, seed=2), constraint=c)]
        )
        assert plain.constraint["enforced"] is False and "allowed_ids" not in plain.constraint


class _Bare:
    """A ChatModel that cannot mask logits."""

    name = "bare"
    max_batch_size = 4

    def chat(self, requests):
        return [[Completion(text="Document0")] for _ in requests]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"guided_json": {"type": "object"}}, "guided_json"),
        ({"guided_choice": ["a", "b"]}, "guided_choice"),
        ({"structured_outputs": {"json": {"type": "object"}}}, "structured_outputs.json"),
        ({"structured_outputs": {"regex": "Document.*"}}, "structured_outputs.regex"),
        ({"guided_regex": "[^,]+"}, "guided_regex"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"guided_regex": "Document[0-1]", "regex": "Document[0-2]"}, "guided_regex"),
        ({"regex": "(" * 3000 + "a" + ")" * 3000}, "regex"),  # hostile: a 400, never a crash
        ({"structured_outputs": {"regex": 7}}, "structured_outputs.regex"),
    ],
)
def test_serve_llm_refuses_what_it_cannot_honour_naming_the_field(tiny, extra: dict, param: str) -> None:
    with BackgroundServer(make_app(tiny, "tiny", batch_wait_ms=0)) as srv:
        resp = httpx.post(
            srv.url + "/v1/chat/completions", json={"messages": PROMPT, "max_tokens": 2, **extra}
        )
        assert resp.status_code == 400
        err = resp.json()["error"]
        assert err["param"] == param and param.split(".")[-1] in err["message"]
        ok = httpx.post(
            srv.url + "/v1/chat/completions",
            json={"messages": PROMPT, "max_tokens": 2, "response_format": {"type": "text"}},
        )
        assert ok.status_code == 200  # a text response format is what it does anyway


def test_serve_llm_refuses_a_regex_its_model_cannot_enforce() -> None:
    with BackgroundServer(make_app(_Bare(), "bare", batch_wait_ms=0)) as srv:
        body = {"messages": PROMPT, "structured_outputs": {"regex": "Document[0-4]"}}
        resp = httpx.post(srv.url + "/v1/chat/completions", json=body)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "structured_outputs.regex"
