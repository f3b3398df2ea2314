"""Whatever the policy and the LLM write, every registered workflow ends with an answer within its bounds
(hypothesis draws each role's output, from free text to near-misses of the papers' formats)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scripted import drive, question

from ragteam.protocol import Answer
from ragteam.workflows.registry import WORKFLOWS, build_workflow, workflow_options

NEAR_MISSES = [
    "[No Retrieval]",
    "[Retrieval] who?",
    "[Retrieval]",
    "[Planning]",
    "Thought: x\nAction: [LLM]",
    "Thought: x\nAction: [Retrieval] more",
    "Action: [1, 2, 99]",
    "Action: []",
    "Document0,Document0",
    "Document1,Document3",
    "1. a?\n2. b?\n3. c?\n4. d?\n5. e?\n6. f?",
    '```json\n{"generated_query": "more"}\n```',
    '```json\n{"predicted_answer": "x", "generated_query": "None"}\n```',
    '{"predicted_answer": "B"}',
    "",
]
outputs = st.one_of(st.sampled_from(NEAR_MISSES), st.text(max_size=200))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    name=st.sampled_from(WORKFLOWS),
    strategy=st.sampled_from(["auto", "no_retrieval", "retrieval", "planning"]),
    variant=st.sampled_from(["qr-s-g", "s-g", "qr-g"]),
    mc=st.booleans(),
)
def test_every_workflow_answers_whatever_the_models_write(data, name, strategy, variant, mc):
    own = {
        "topk": 3,
        "candidates": 4,
        "max_rounds": 3,
        "max_steps": 4,
        "strategy": strategy,
        "variant": variant,
    }
    options = workflow_options(name)  # each workflow takes its own options
    cfg = options(**{k: v for k, v in own.items() if k in options.model_fields})
    q = question(choices={"A": "yes", "B": "no"} if mc else None)
    workflow = build_workflow(name, cfg)
    t = drive(
        workflow,
        q,
        policy={
            role: (lambda act: data.draw(outputs))
            for role in ("router", "filter", "decider", "rewriter", "selector", "generator", "actor")
        },
        llm=lambda ask: data.draw(outputs),
        max_steps=60,
    )
    assert isinstance(t.answer, Answer) and isinstance(t.answer.text, str)
    # the workflow declared every role it played and every part it called
    assert {r.role for r, _ in t.acts()} <= {role.name for role in workflow.roles}
    assert not t.acts() or "policy" in workflow.needs
    assert not t.asks() or "llm" in workflow.needs
    assert not t.searches() or "retriever" in workflow.needs
    acts = len(t.acts())
    if name == "c3po":
        assert acts <= 1 + 2 * cfg.max_rounds
    elif name == "mmoa":
        assert acts <= 3
    elif name.startswith("gym:"):
        assert acts <= cfg.max_steps and t.answer.info["steps"] == acts
    else:
        assert acts == 0
