"""Typed request fields are strict at both OpenAI-shaped servers: `n: true`, `n: "2"` and `max_tokens: 1.0`
are 400s naming the field (pydantic's lax mode took them as 1, 2 and 1), and `serve team`, which ignores
sampling fields, still refuses a value no model could take (NaN temperature, top_p 7, a 5,000-digit
max_tokens), as docs/serving.md says. Before, `serve team` answered 200 to all three."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import TEST_DEVICE

from ragteam.llm.local import LocalChatModel
from ragteam.serve.llm import make_app as make_llm_app
from ragteam.serve.team import make_app as make_team_app
from ragteam.serve.testing import BackgroundServer

BIG = "9" * 5000
HI = json.dumps([{"role": "user", "content": "Who directed Kiss and Tell?"}])
STRICT = [
    ('"n": true', "n"),
    ('"n": "2"', "n"),
    ('"n": 1.0', "n"),
    ('"max_tokens": 1.0', "max_tokens"),
    ('"max_tokens": "4"', "max_tokens"),
    ('"max_completion_tokens": true', "max_completion_tokens"),
    ('"seed": "7"', "seed"),
]


def _post(url: str, fields: str) -> httpx.Response:
    body = f'{{"messages": {HI}, {fields}}}' if fields else f'{{"messages": {HI}}}'
    return httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=120)


@pytest.fixture(scope="module")
def llm():
    model = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=8)
    with BackgroundServer(make_llm_app(model, "tiny", max_tokens_limit=16)) as srv:
        yield srv


@pytest.fixture(scope="module")
def team(hotpot_small):
    from ragteam.assemble.build import build_team
    from ragteam.cli.serve_team import Config

    small = {"model": "tiny", "device": TEST_DEVICE, "threads": 1}
    cfg = Config(
        workflow="direct", data=str(hotpot_small), policy=small, llm=small, retriever={"kind": "bm25"},
        rollout={"max_tokens": 4, "llm_max_tokens": 4},
    )  # fmt: skip
    parts = build_team(cfg, data=str(hotpot_small))
    with BackgroundServer(make_team_app(parts.engine, parts.workflow, "direct", batch_wait_ms=5)) as srv:
        yield srv


@pytest.mark.parametrize("fields, param", STRICT)
def test_llm_integer_fields_are_strict(llm, fields, param):
    r = _post(f"{llm.url}/v1/chat/completions", fields)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["param"] == param


def test_llm_still_takes_well_typed_integers(llm):
    r = _post(f"{llm.url}/v1/chat/completions", '"n": 2, "max_tokens": 2, "seed": 3')
    assert r.status_code == 200 and len(r.json()["choices"]) == 2


@pytest.mark.parametrize(
    "fields, param",
    [
        ('"temperature": NaN', "temperature"),
        ('"temperature": 3', "temperature"),
        ('"top_p": 7', "top_p"),
        ('"top_p": 0', "top_p"),
        (f'"max_tokens": {BIG}', "max_tokens"),
        ('"max_tokens": 0', "max_tokens"),
        ('"max_completion_tokens": 1.5', "max_completion_tokens"),
        ('"n": true', "n"),
        ('"n": "1"', "n"),
        ('"seed": 1.5', "seed"),
    ],
)
def test_team_refuses_sampling_fields_no_model_could_take(team, fields, param):
    r = _post(f"{team.url}/v1/chat/completions", fields)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["param"] == param


def test_team_ignores_sampling_fields_that_are_valid(team):
    r = _post(
        f"{team.url}/v1/chat/completions", '"temperature": 0.2, "top_p": 0.9, "max_tokens": 3, "seed": 1'
    )
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
