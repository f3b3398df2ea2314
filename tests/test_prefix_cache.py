"""The local engine's prefix cache (ragteam.llm.prefix_cache): the radix tree itself, then the engine with the
cache on against the same engine with it off, on the tiny model: the same tokens, the same log-probs (up to
float round-off), fewer prefilled tokens; and a weight change empties it."""

from __future__ import annotations

import pytest
import torch
from conftest import TEST_DEVICE

from ragteam.llm.base import ChatRequest, Sampling
from ragteam.llm.local import LocalChatModel
from ragteam.llm.prefix_cache import PrefixCache, shared_stems

# ---- the tree -----------------------------------------------------------------------------------------------


def _kv_for(ids: list[int]):
    """Fake KV whose value at each position is the token id there: a slice shows which tokens it covers."""

    def kv_of(a: int, b: int):
        t = torch.tensor(ids[a:b], dtype=torch.float32).view(1, -1, 1)
        return [(t.clone(), -t.clone()), (2 * t, -2 * t)]

    return kv_of


def _tokens(kv) -> list[int]:
    return [int(x) for x in kv[0][0].view(-1)]


def test_match_finds_the_longest_cached_prefix_across_splits():
    tree = PrefixCache(10**6)
    assert tree.insert([1, 2, 3, 4], _kv_for([1, 2, 3, 4])) == 4
    assert tree.insert([1, 2, 5], _kv_for([1, 2, 5])) == 1  # splits [1, 2, 3, 4] after two tokens
    assert tree.insert([1, 2, 3, 4], _kv_for([1, 2, 3, 4])) == 0
    assert tree.tokens == 5 and len(tree) == 3
    n, kv = tree.match([1, 2, 3, 9])
    assert n == 3 and _tokens(kv) == [1, 2, 3] and [int(x) for x in kv[1][1].view(-1)] == [-2, -4, -6]
    assert tree.match([1, 2, 5, 7])[0] == 3 and tree.match([7])[0] == 0
    assert tree.match([1, 2, 3, 4], limit=2)[0] == 2 and tree.matched([1, 2, 3, 4], limit=3) == 3


def test_eviction_drops_the_least_recently_used_leaf_first():
    per_token = 2 * 2 * 4  # two layers, keys and values, one float32 each
    tree = PrefixCache(7 * per_token)
    tree.insert([1, 2, 3], _kv_for([1, 2, 3]))
    tree.insert([4, 5, 6], _kv_for([4, 5, 6]))
    tree.match([1, 2, 3])  # [4, 5, 6] is now the older
    tree.insert([7, 8], _kv_for([7, 8]))  # 8 tokens > 7: one leaf must go
    assert tree.matched([4, 5, 6]) == 0 and tree.matched([1, 2, 3]) == 3 and tree.matched([7, 8]) == 2
    assert tree.nbytes == 5 * per_token and tree.evicted_tokens == 3


def test_a_new_weights_key_empties_the_tree():
    tree = PrefixCache(10**6)
    tree.validate("v1")
    tree.insert([1, 2], _kv_for([1, 2]))
    tree.validate("v1")
    assert tree.matched([1, 2]) == 2
    tree.validate("v2")
    assert tree.matched([1, 2]) == 0 and tree.nbytes == 0 and tree.clears == 1


def test_shared_stems_are_the_longest_prefixes_two_inputs_share_none_a_prefix_of_another():
    tree = PrefixCache(10**6)
    a, b, c, d = [1] * 20 + [2] * 5, [1] * 20 + [3] * 5, [1] * 18 + [4] * 9, [9] * 30
    assert shared_stems([a, b, c, d], [0, 0, 0, 0], tree) == [[1] * 20]  # [1]*18 is inside it
    assert shared_stems([a, b], [0, 6], tree) == [[1] * 20]  # b's own stem stops before its prefix: 19
    tree.insert([1] * 20, _kv_for([1] * 20))
    assert shared_stems([a, b], [0, 0], tree) == []  # the tree has it
    assert shared_stems([a + [1], a + [2]], [0, 0], tree, least=4) == [a]


# ---- the engine with the cache on and off -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def models() -> tuple[LocalChatModel, LocalChatModel]:
    on = LocalChatModel("tiny", device=TEST_DEVICE, max_batch_size=8)
    off = LocalChatModel.from_model(on.model, on.tokenizer, max_batch_size=8, prefix_cache_mb=0)
    assert on.prefix_cache is not None and off.prefix_cache is None
    return on, off


def _chat(text: str, system: str = "You answer questions about documents. " * 6) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def _same(model_on, model_off, requests: list[ChatRequest]):
    """Ask both; assert the same tokens and log-probs; return the completions and the cache's stats delta."""
    before = dict(model_on.stats)
    got = model_on.chat(requests)
    delta = {k: model_on.stats[k] - before[k] for k in before}
    ref = model_off.chat(requests)
    for g, r in zip(got, ref, strict=True):
        assert isinstance(g, list) and isinstance(r, list), (g, r)
        for c, d in zip(g, r, strict=True):
            assert c.completion_ids == d.completion_ids and c.prompt_ids == d.prompt_ids
            assert max((abs(x - y) for x, y in zip(c.logprobs, d.logprobs)), default=0) < 1e-4
    return got, delta


def test_a_group_prefills_its_prompt_once_then_reads_it_from_the_tree(models):
    on, off = models
    on.prefix_cache.clear()
    group = [
        ChatRequest(_chat("Who wrote Hamlet?"), Sampling(temperature=1.0, max_tokens=8, seed=k))
        for k in range(4)
    ]
    n = len(on.prompt_ids(group[0].messages))
    _, first = _same(on, off, group)
    assert first["prompt_tokens"] == 4 * n and first["prefill_tokens"] == n  # shared prefill, as before
    _, again = _same(on, off, group)  # the next iteration's group: all but the last token from the tree
    assert again["prefill_tokens"] == 1 and again["cached_tokens"] == n - 1


def test_a_tree_of_forks_and_forced_prefixes_matches_the_engine_without_cache(models):
    on, off = models
    on.prefix_cache.clear()
    messages = _chat("Which river flows through Paris, and how long is it?")
    reqs = [
        ChatRequest(messages, Sampling(temperature=1.0, max_tokens=6, n=2, seed=3)),
        ChatRequest(messages, Sampling(temperature=1.0, max_tokens=6, seed=4), prefix="[Retrieval]"),
        ChatRequest(messages, Sampling(max_tokens=6), prefix="[Planning] first"),
        ChatRequest(messages, Sampling(max_tokens=1), prefix="[No Retrieval]", sample_after_prefix=False),
    ]
    n = len(on.prompt_ids(messages))
    _, delta = _same(on, off, reqs)
    # the prompt's stem (all but its last token) once, then each distinct input its own last token + prefix
    assert delta["prefill_tokens"] < 2 * n
    children = [
        ChatRequest(
            [*messages, {"role": "assistant", "content": "[Retrieval] Seine length"}], Sampling(seed=k)
        )
        for k in range(2)
    ]
    _same(on, off, children)


def test_a_multi_turn_episode_prefills_only_each_turn_s_new_tokens(models):
    on, off = models
    on.prefix_cache.clear()
    messages = _chat("Find the birth year of the author of Dune.")
    total = prefilled = previous = 0
    for turn in range(4):
        req = ChatRequest(messages, Sampling(temperature=0.7, max_tokens=10, seed=turn))
        [[c]], delta = _same(on, off, [req])
        total, prefilled = total + delta["prompt_tokens"], prefilled + delta["prefill_tokens"]
        if turn:
            assert delta["cached_tokens"] >= previous  # the whole previous prompt came from the tree
        previous = len(c.prompt_ids)
        messages = [
            *messages,
            {"role": "assistant", "content": c.text or "Search[Dune]"},
            {"role": "user", "content": f"Observation {turn}: Frank Herbert wrote Dune in 1965."},
        ]
    assert prefilled < 0.6 * total


def test_rows_with_different_cached_lengths_share_one_batch(models):
    on, off = models
    on.prefix_cache.clear()
    long_system = "Read the documents and answer. " * 12
    on.chat([ChatRequest(_chat("Doc one.", long_system), Sampling(max_tokens=2))])  # cached: a long prefix
    reqs = [
        ChatRequest(_chat("Doc one. And two?", long_system), Sampling(max_tokens=12)),  # long hit
        ChatRequest(
            _chat("Something else entirely, longer than the others by far.", "x"), Sampling(max_tokens=12)
        ),
        ChatRequest(_chat("Doc one.", long_system), Sampling(temperature=1.0, max_tokens=12, seed=5)),
    ]
    seen = []
    on.batch_hook = seen.append
    try:
        _, delta = _same(on, off, reqs)
    finally:
        on.batch_hook = None
    assert len(seen) == 1 and delta["cached_tokens"] > 0


def test_a_weight_update_on_the_shared_module_empties_the_cache(models):
    on, _ = models
    req = ChatRequest(_chat("What is the capital of Peru?"), Sampling(max_tokens=4))
    on.chat([req])
    assert on.prefix_cache.tokens > 0
    model = on.model
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.tensor([on.prompt_ids(req.messages)], device=on.device)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()  # in place, as the trainer's step on the module it rolls out with
    opt.zero_grad()
    try:
        fresh = LocalChatModel.from_model(model, on.tokenizer, prefix_cache_mb=0)
        before = dict(on.stats)
        [[c]] = on.chat([req])
        assert on.stats["cached_tokens"] == before["cached_tokens"]  # nothing stale was read
        [[d]] = fresh.chat([req])
        assert c.completion_ids == d.completion_ids
        assert max(abs(x - y) for x, y in zip(c.logprobs, d.logprobs)) < 1e-5
    finally:
        with torch.no_grad():
            model.load_state_dict(saved)
    assert on.prefix_cache.clears >= 1


def test_load_weights_empties_the_cache_and_a_zero_budget_turns_it_off(models, tmp_path):
    on, _ = models
    on.chat([ChatRequest(_chat("Hello?"), Sampling(max_tokens=2))])
    assert on.prefix_cache.tokens > 0
    on.model.save_pretrained(tmp_path)
    on.load_weights(tmp_path)
    assert on.prefix_cache.tokens == 0
    on.set_prefix_cache(0)
    assert on.prefix_cache is None
    on.set_prefix_cache(64)
    assert on.prefix_cache is not None and on.prefix_cache.budget_bytes == 64 * 2**20
    with pytest.raises(ValueError, match="0 MB"):
        on.set_prefix_cache(-1)


def test_a_fused_step_is_invisible_to_the_weights_key_so_a_push_clears_the_cache(models):
    """The PPO trainer's fused AdamW step bumps no version counter: the cache cannot notice it, so the trainer
    clears it at every push (Engine.clear_prefix_cache, train/ppo.py push)."""
    from ragteam.llm.prefix_cache import weights_key
    from ragteam.rollout.engine import Engine

    on, off = models
    on.chat([ChatRequest(_chat("What is the capital of Chile?"), Sampling(max_tokens=2))])
    assert on.prefix_cache.tokens > 0
    layer = torch.nn.Linear(2, 2)
    key = weights_key(layer)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-2, fused=True)
    layer(torch.ones(1, 2)).sum().backward()
    opt.step()
    assert weights_key(layer) == key  # moved weights, the same key
    Engine(on, off, None).clear_prefix_cache()  # the LLM without a cache is skipped
    assert on.prefix_cache.tokens == 0 and on.prefix_cache.nbytes == 0


# ---- through the rollout engine -----------------------------------------------------------------------------------


def _parse(text: str):
    from ragteam.types import Action

    return Action("answer", value=text)


class TwoTurns:
    """A two-act workflow: the second prompt is the first, the policy's reply and a new user message."""

    name = "two-turns"

    def run(self, question):
        from ragteam.protocol import Act, Answer

        messages = _chat(question.question)
        first = yield Act("policy", messages, _parse, max_tokens=6)
        messages = [
            *messages,
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": "Shorter?"},
        ]
        second = yield Act("policy", messages, _parse, max_tokens=6)
        return Answer(second.text)


def test_the_engine_sets_the_budget_and_counts_each_run_s_prefill(models):
    from ragteam.rollout.config import RolloutConfig
    from ragteam.rollout.engine import Engine
    from ragteam.types import Question

    on, _ = models
    questions = [Question(id=str(i), question=q, golden_answers=[]) for i, q in enumerate(["Who?", "Where?"])]
    runs = {}
    for mb in (64, 0):
        cfg = RolloutConfig(group_size=4, temperature=1.0, seed=7, prefix_cache_mb=mb)
        engine = Engine(on, None, None, cfg)
        report = engine.run(TwoTurns(), questions)
        assert (on.prefix_cache is None) == (mb == 0)
        runs[mb] = (report, engine)
    (with_cache, engine), (without, engine_off) = runs[64], runs[0]
    ids = [[n.completion.completion_ids for n in ep.policy_nodes()] for ep in with_cache.episodes]
    assert ids == [[n.completion.completion_ids for n in ep.policy_nodes()] for ep in without.episodes]
    policy, policy_off = engine.prefill["policy"], engine_off.prefill["policy"]
    assert policy["prompt_tokens"] == policy_off["prompt_tokens"] == engine.calls["policy_prompt_tokens"]
    assert policy["prefill_tokens"] < policy_off["prefill_tokens"] and policy["cached_tokens"] > 0
    assert policy["prefilled"] == round(policy["prefill_tokens"] / policy["prompt_tokens"], 4)
    assert policy["hit_rate"] == round(1 - policy["prefilled"], 4) > 0
    on.set_prefix_cache(64)


def test_the_ppo_line_says_the_share_of_prompt_tokens_prefilled():
    from ragteam.train.ppo.log import act_counts, iteration_line

    row = {
        "iteration": 1,
        "acts": act_counts(4, {}),
        "reward": {"f1": 0.4, "cover_em": 0.5},
        "kl_beta": 0.05,
        "prefill": {
            "policy": {
                "prompt_tokens": 8000,
                "prefill_tokens": 2000,
                "cached_tokens": 5000,
                "prefilled": 0.25,
            }
        },
    }
    assert "prefilled 0.25 of 8000 prompt tokens" in iteration_line(row, "outcome", "f1")
    assert "prefilled" not in iteration_line({**row, "prefill": {}}, "outcome", "f1")


def test_a_budget_smaller_than_the_batch_evicts_and_changes_no_token(models):
    on, off = models
    reqs = [
        ChatRequest(_chat("Which documents mention the river?", f"Reader {i}. " * 8), Sampling(max_tokens=6))
        for i in range(6)
    ]
    c = on.model.config
    per_token = c.num_hidden_layers * 2 * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4
    room = 2 * len(on.prompt_ids(reqs[0].messages)) * per_token  # two of the six (they differ from the start)
    small = LocalChatModel.from_model(on.model, on.tokenizer, max_batch_size=8, prefix_cache_mb=room / 2**20)
    _same(small, off, reqs)
    _same(small, off, reqs)  # what is left of the first call is read, the rest computed again
    tree = small.prefix_cache
    assert tree.evicted_tokens > 0 and 0 < tree.nbytes <= tree.budget_bytes


def test_prefill_passes_bound_the_padding_by_suffix_length(models):
    on, off = models
    assert on._prefill_passes([600, 1, 300, 290, 1]) == [[0, 2], [3], [1, 4]]  # each pass: shortest >= half
    assert off._prefill_passes([600, 1, 300]) == [[0, 1, 2]]  # without a cache: one pass, as before
