"""Planning one tick: how each pending request of a live branch is sent to its backend.

A `Plan` holds the request as it will be sent (cut to the model's context, `fit.py`), the chat requests whose
completions answer it, and what to do with the samples: `fork` (every sample is a child branch), `select`
(keep one of N, scored by the engine's scorer) or `call` (one result, the branch goes on). The engine
looks the planner up by request type (`engine._KINDS`); every planner takes (rollout config, the backend,
the live episode, the branch, the nodes already planned for each episode this tick).

Seeds come from the run seed, the question and the request's place in the tree (`derive_seed`), never from
the batch or the process, so a request samples the same tokens whatever else shares its batch.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from ragteam.llm.base import ChatModel, ChatRequest, Sampling, TokenCounter
from ragteam.protocol import Act, AskLLM
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.fit import fit_request
from ragteam.rollout.state import Branch, LiveEpisode


@dataclass
class Plan:
    """How one pending request is sent this tick: the (fitted) request, its chat requests, and what to do
    with the samples (`fork`: every sample is a child; `select`: keep one of them; `call`: one result)."""

    live: LiveEpisode
    branch: Branch
    request: Any
    chat: list[Any]  # ChatRequests whose completions are concatenated
    mode: str = "fork"
    fit: dict[str, Any] | None = None
    scores: list[float] | None = None  # `select`: the scorer's score of each sample, set after sampling


def derive_seed(base: int | None, question_id: str, parent: int | None, kind: str) -> int | None:
    """A request's seed from the run seed, its question and its place in the tree (not from the batch)."""
    if base is None:
        return None
    return zlib.crc32(f"{base}|{question_id}|{parent}|{kind}".encode()) & 0x7FFFFFFF


def fit_to(
    model: Any, request: Act | AskLLM, max_tokens: int, max_prompt: int | None = None
) -> tuple[Any, int, Any]:
    """The request cut to the model's context (and to `max_prompt` tokens) when the model can count
    tokens (else as it is), with the reply's token cap and what was cut (`Node.fit`)."""
    if not isinstance(model, TokenCounter):
        return request, max_tokens, None
    try:
        context = int(model.context_length)
        return fit_request(request, max_tokens, context, model.count_tokens, max_prompt=max_prompt)
    except Exception as e:  # counting failed: send it as it is; the backend answers with an error value
        return request, max_tokens, {"error": f"{type(e).__name__}: {e}"}


def plan_act(
    cfg: RolloutConfig, policy: ChatModel, live: LiveEpisode, branch: Branch, planned: Counter
) -> Plan:
    """A policy act: k samples or one per forced prefix when the fork schedule matches (and the episode has
    room for the nodes), N candidates under keep-one-of-N, else one sample."""
    act = branch.pending
    assert isinstance(act, Act)
    max_tokens = max(1, min(act.max_tokens or cfg.max_tokens, cfg.max_tokens_per_episode - branch.tokens))
    act, max_tokens, fit = fit_to(policy, act, max_tokens, cfg.max_prompt_tokens)
    seed = derive_seed(cfg.seed, live.question.id, branch.parent, "policy")
    base = Sampling(cfg.temperature, cfg.top_p, max_tokens, tuple(act.stop), 1, seed)
    room = len(live.episode.nodes) + planned[id(live)] < cfg.max_nodes
    rule = cfg.fork_at(act.role, branch.depth) if act.branch and room else None
    prefix = act.prefix  # the act's own forced prefix replaces a rule's forced ones (k still applies)
    mode = "fork"
    if act.branch and cfg.best_of.applies(act.role):
        mode = "select"
        chat = [
            ChatRequest(act.messages, base.with_(n=cfg.best_of.n), prefix=prefix, constraint=act.constraint)
        ]
    elif rule is not None and rule.forced and not prefix:
        chat = [
            ChatRequest(
                act.messages,
                base.with_(seed=None if seed is None else seed + i),
                prefix=f.text,
                sample_after_prefix=f.sample,
                constraint=act.constraint,
            )
            for i, f in enumerate(rule.forced)
        ]
    else:
        n = rule.k if rule else 1
        chat = [ChatRequest(act.messages, base.with_(n=n), prefix=prefix, constraint=act.constraint)]
    planned[id(live)] += sum(r.sampling.n for r in chat)
    return Plan(live, branch, act, chat, mode, fit)


def plan_llm(cfg: RolloutConfig, llm: ChatModel, live: LiveEpisode, branch: Branch, planned: Counter) -> Plan:
    """A call to the fixed LLM server: one sample at the LLM's own temperature."""
    ask = branch.pending
    assert isinstance(ask, AskLLM)
    ask, max_tokens, fit = fit_to(llm, ask, ask.max_tokens or cfg.llm_max_tokens)
    seed = derive_seed(cfg.seed, live.question.id, branch.parent, "llm")
    sampling = Sampling(cfg.llm_temperature, 1.0, max_tokens, tuple(ask.stop), 1, seed)
    return Plan(live, branch, ask, [ChatRequest(ask.messages, sampling)], "call", fit)


def plan_retrieve(
    cfg: RolloutConfig, retriever: Any, live: LiveEpisode, branch: Branch, planned: Counter
) -> Plan:
    """A search: sent as it is (all of a tick's searches go in one batch, `backends.search`)."""
    return Plan(live, branch, branch.pending, [], "call")


def sampling_record(request: ChatRequest) -> dict[str, Any]:
    """The sampling settings of a node's call, as traces store them."""
    d = asdict(request.sampling)
    d["stop"] = list(d["stop"])
    if request.prefix:
        d["prefix"] = request.prefix
        d["sample_after_prefix"] = request.sample_after_prefix
    return d
