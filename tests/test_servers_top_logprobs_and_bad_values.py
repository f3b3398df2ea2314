"""What the three servers make of a request's values, as a client sends them (issue 23, items 3 and 4):
`top_logprobs` 1-20 over a real loopback `serve llm` (the official `openai` client, checked against a forward pass
of the tiny model); 4xx, never 5xx, for huge integers, NaN, wrong types and missing folders at the LLM, retriever
and team servers."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import torch
from conftest import TEST_DEVICE

from ragteam.llm.local import LocalChatModel
from ragteam.retrieval.bm25 import BM25Retriever
from ragteam.serve.llm import make_app as make_llm_app
from ragteam.serve.retriever import make_app as make_retriever_app
from ragteam.serve.team import make_app as make_team_app
from ragteam.serve.testing import BackgroundServer

BIG = "9" * 5000  # more digits than Python converts to an int (4300)
HI = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def tiny() -> LocalChatModel:
    return LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=16)


@pytest.fixture(scope="module")
def llm(tiny):
    app = make_llm_app(tiny, "tiny", batch_wait_ms=5.0, max_tokens_limit=64, allow_weight_updates=True)
    with BackgroundServer(app) as srv:
        yield srv


def _post(url: str, body: bytes | str, client: httpx.Client | None = None) -> httpx.Response:
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    send = client.post if client is not None else httpx.post
    return send(url, content=data, headers={"content-type": "application/json"}, timeout=120)


# ---- item 3: top_logprobs, as OpenAI and vLLM answer it ----------------------------------------------------


def _reference(tiny: LocalChatModel, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log p(. | prompt, completion[:t]) for every completion position t, by one plain forward pass."""
    with torch.inference_mode():
        ids = torch.tensor([prompt + completion], device=tiny.device)
        logp = tiny.model(input_ids=ids).logits[0].float().log_softmax(-1).cpu()
    return logp[len(prompt) - 1 : len(prompt) - 1 + len(completion)]


def _check_top(ref: torch.Tensor, ids: list[int], entries: list, k: int) -> None:
    """Each position lists the k most likely tokens of the forward pass, most likely first."""
    assert len(entries) == len(ids) == len(ref)
    for t, entry in enumerate(entries):
        top = entry.top_logprobs
        assert len(top) == k
        listed = [int(a.token.removeprefix("token_id:")) for a in top]
        values = [a.logprob for a in top]
        assert values == sorted(values, reverse=True)
        want = ref[t].topk(k).values
        assert torch.allclose(torch.tensor(values), want, atol=1e-4), (t, values, want)
        for token_id, lp in zip(listed, values):
            assert abs(float(ref[t][token_id]) - lp) < 1e-4
        # every token more likely than the k-th (beyond round-off) is listed
        assert {int(i) for i in (ref[t] > want[-1] + 1e-4).nonzero().flatten()} <= set(listed)
        if ids[t] in listed:  # the sampled token's own log-prob agrees with its entry
            assert abs(entry.logprob - values[listed.index(ids[t])]) < 1e-3


def test_top_logprobs_equal_a_forward_pass_through_the_openai_client(tiny, llm):
    client = openai.OpenAI(base_url=llm.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    extra = {"return_token_ids": True, "return_tokens_as_token_ids": True}
    r = client.chat.completions.create(
        model="tiny", messages=HI, max_tokens=6, temperature=1.0, seed=7, n=2, logprobs=True,
        top_logprobs=5, extra_body=extra,
    )  # fmt: skip
    prompt = r.model_extra["prompt_token_ids"]
    for choice in r.choices:
        ids = choice.model_extra["token_ids"]
        _check_top(_reference(tiny, prompt, ids), ids, choice.logprobs.content, 5)
    # a forced prefix: its positions are listed too (the reply is the prefix and what follows it)
    forced = client.chat.completions.create(
        model="tiny", messages=[*HI, {"role": "assistant", "content": "The answer is"}], max_tokens=3,
        temperature=0, logprobs=True, top_logprobs=20,
        extra_body={**extra, "continue_final_message": True, "add_generation_prompt": False},
    )  # fmt: skip
    [choice] = forced.choices
    ids = choice.model_extra["token_ids"]
    assert choice.model_extra["forced_tokens"] == len(tiny.prefix_ids("The answer is")) < len(ids)
    _check_top(
        _reference(tiny, forced.model_extra["prompt_token_ids"], ids), ids, choice.logprobs.content, 20
    )
    # token text and bytes, as OpenAI spells them: text of the token; UTF-8 bytes, null for part of a character
    plain = client.chat.completions.create(
        model="tiny", messages=HI, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3
    )
    for entry in plain.choices[0].logprobs.content:
        assert len(entry.top_logprobs) == 3
        for alt in entry.top_logprobs:
            assert not alt.token.startswith("token_id:")
            assert (alt.bytes is None and "\ufffd" in alt.token) or bytes(alt.bytes).decode() == alt.token
    client.close()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"top_logprobs": 21, "logprobs": True}, "less than or equal to 20"),
        ({"top_logprobs": 3}, "top_logprobs needs logprobs: true"),
        ({"top_logprobs": -1, "logprobs": True}, "greater than or equal to 0"),
    ],
)
def test_top_logprobs_out_of_range_is_a_400_naming_the_limit(llm, body, needle):
    r = httpx.post(
        f"{llm.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 2, **body}, timeout=60
    )
    assert r.status_code == 400 and needle in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "top_logprobs"
    huge = _post(f"{llm.url}/v1/chat/completions", f'{{"messages": {json.dumps(HI)}, "top_logprobs": {BIG}}}')
    assert huge.status_code == 400 and huge.json()["error"]["param"] == "top_logprobs"
    assert "5000 digits" in huge.json()["error"]["message"]


# ---- item 4: 4xx where a 4xx belongs, at all three servers ----------------------------------------------


@pytest.mark.parametrize("field", ["seed", "max_tokens", "max_completion_tokens", "n", "top_logprobs"])
def test_llm_a_5000_digit_integer_is_a_400_naming_its_field(llm, field):
    r = _post(f"{llm.url}/v1/chat/completions", f'{{"messages": {json.dumps(HI)}, "{field}": {BIG}}}')
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == field and "5000 digits" in error["message"]


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        ('"temperature": NaN', "temperature"),
        ('"temperature": Infinity', "temperature"),
        ('"top_p": NaN', "top_p"),
        ('"max_tokens": 1e400', "max_tokens"),
        ('"n": -3', "n"),
        ('"stop": [1]', "stop.str"),
        ('"logprobs": "yes"', "logprobs"),
    ],
)
def test_llm_nan_inf_negative_and_wrong_types_are_400(llm, raw, param):
    with httpx.Client(timeout=60) as c:
        r = _post(f"{llm.url}/v1/chat/completions", f'{{"messages": {json.dumps(HI)}, {raw}}}', c)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        ok = c.post(f"{llm.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 2})
        assert ok.status_code == 200  # on the same connection: the server kept it and keeps serving


def test_load_weights_names_the_folder_that_is_not_there(llm, tmp_path):
    url = f"{llm.url}/v1/load_weights"
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "model.safetensors").write_bytes(b"not a safetensors file")
    (tmp_path / "a-file").write_text("x")
    cases = [
        (str(tmp_path / "no-such-folder"), "does not exist"),
        (str(tmp_path / "a-file"), "is not a folder"),
        (str(tmp_path), "no *.safetensors"),
        (str(damaged), "not readable safetensors"),
        ("x" * 5000, "does not exist"),  # a name longer than the file system takes
        ("a\u0000b", "does not exist"),
    ]
    for path, needle in cases:
        r = httpx.post(url, json={"path": path}, timeout=60)
        assert r.status_code == 400, (path[:40], r.text[:300])
        assert needle in r.json()["error"]["message"] and r.json()["error"]["param"] == "path"
        if len(path) < 200:
            assert path.replace("\u0000", "\\x00") in r.json()["error"]["message"]
    # text no file name can hold (a lone surrogate): a 400 whose message is still valid UTF-8 JSON
    r = _post(url, '{"path": "\\ud800"}')
    assert r.status_code == 400 and "\\ud800" in r.json()["error"]["message"]
    for body in (f'{{"path": {BIG}}}', "[1]", '{"path": ""}', "{nope"):
        assert _post(url, body).status_code == 400
    ok = httpx.post(f"{llm.url}/v1/chat/completions", json={"messages": HI, "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200


@pytest.fixture(scope="module")
def retriever(hotpot_small_index):
    bm25 = BM25Retriever(hotpot_small_index.path, hotpot_small_index.docs)
    with BackgroundServer(make_retriever_app(bm25, batch_window_ms=2)) as srv:
        yield srv


@pytest.mark.parametrize(
    ("raw", "field", "needle"),
    [
        (f'"topk": {BIG}', "topk", "5000 digits"),
        (f'"topk": -{BIG}', "topk", "5000 digits"),
        ('"topk": NaN', "topk", "integer"),
        ('"topk": Infinity', "topk", "integer"),
        ('"topk": 1e400', "topk", "integer"),
        ('"topk": -1', "topk", "between 1 and 100"),
        ('"topk": 2.5', "topk", "integer"),
        ('"topk": "3"', "topk", "integer"),
        ('"topk": true', "topk", "integer"),
        (f'"return_scores": {BIG}', "return_scores", "5000 digits"),
        (f'"return_scores": [{BIG}]', "return_scores", "true or false"),
        ('"return_scores": NaN', "return_scores", "true or false"),
        (f'"queries": [{BIG}]', "queries[0]", "string"),
    ],
)
def test_retriever_huge_nan_and_wrong_typed_fields_are_422(retriever, raw, field, needle):
    body = (
        ("{" + raw + "}") if raw.startswith('"queries"') else '{"queries": ["Shirley Temple"], ' + raw + "}"
    )
    with httpx.Client(timeout=60) as c:
        r = _post(f"{retriever.url}/retrieve", body, c)
        assert r.status_code == 422, r.text
        assert r.json()["field"] == field and needle in r.json()["error"]
        ok = c.post(f"{retriever.url}/retrieve", json={"queries": ["Shirley Temple"], "topk": 2})
        assert ok.status_code == 200 and len(ok.json()["result"][0]) == 2  # same connection, still served


def test_retriever_an_unknown_5000_digit_field_is_ignored_and_a_failure_keeps_the_connection(retriever):
    r = _post(f"{retriever.url}/retrieve", f'{{"queries": ["Shirley Temple"], "topk": 1, "x": {BIG}}}')
    assert r.status_code == 200 and len(r.json()["result"][0]) == 1

    class Breaks:
        name = "breaks"

        def search(self, queries, k):
            raise RuntimeError("index exploded")

    with BackgroundServer(make_retriever_app(Breaks())) as srv, httpx.Client(timeout=30) as c:
        for _ in range(2):  # a 500 answered by the route: the same connection serves the next request
            failed = c.post(srv.url + "/retrieve", json={"queries": ["q"]})
            assert failed.status_code == 500 and "index exploded" in failed.json()["error"]
        assert c.post(srv.url + "/retrieve", json={"queries": ["q"], "topk": BIG[:50]}).status_code == 422


@pytest.fixture(scope="module")
def team(hotpot_small):
    from ragteam.assemble.build import build_team
    from ragteam.cli.serve_team import Config

    small = {"model": "tiny", "device": TEST_DEVICE, "threads": 1}
    cfg = Config(
        workflow="direct", data=str(hotpot_small), policy=small, llm=small, retriever={"kind": "bm25"},
        rollout={"max_tokens": 8, "llm_max_tokens": 8},
    )  # fmt: skip
    parts = build_team(cfg, data=str(hotpot_small))
    with BackgroundServer(make_team_app(parts.engine, parts.workflow, "direct", batch_wait_ms=5)) as srv:
        yield srv


def test_team_server_refuses_huge_nan_and_wrong_types_with_4xx(team):
    url = f"{team.url}/v1/chat/completions"
    m = json.dumps([{"role": "user", "content": "Who directed Kiss and Tell?"}])
    cases = [
        (f'{{"messages": {m}, "n": {BIG}}}', 400, "n"),
        (f'{{"messages": {m}, "n": NaN}}', 400, "n"),
        (f'{{"messages": {m}, "stream": {BIG}}}', 400, "stream"),
        (f'{{"messages": {m}, "ragteam": {{"trace": {BIG}}}}}', 400, "ragteam.trace"),
        (f'{{"messages": [{{"role": "user", "content": {BIG}}}]}}', 400, "messages.0.content.str"),
        (f'{{"model": "\\ud800", "messages": {m}}}', 404, "model"),
        (json.dumps({"model": "m" * 500_000, "messages": json.loads(m)}), 404, "model"),
    ]
    with httpx.Client(timeout=120) as c:
        for body, status, param in cases:
            r = _post(url, body, c)
            assert r.status_code == status, (body[:80], r.text[:300])
            assert r.json()["error"]["param"] == param and len(r.text) < 2000
        # an ignored field holding a 5,000-digit number does not stop the question (`temperature` is checked
        # now, as docs/serving.md says: tests/test_option_numbers.py)
        ok = _post(url, f'{{"messages": {m}, "frequency_penalty": {BIG}}}', c)
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["role"] == "assistant"
