"""The registry: every pinned name builds its workflow from a WorkflowConfig; unknown names are refused."""

from __future__ import annotations

import pickle

import pytest

from ragteam.workflows.baselines import Direct, StandardRAG
from ragteam.workflows.c3po import C3PO
from ragteam.workflows.config import WorkflowConfig
from ragteam.workflows.gym import GymAgent
from ragteam.workflows.mmoa import MMOA
from ragteam.workflows.registry import WORKFLOWS, build_workflow, workflow_options


def test_pinned_names_in_order():
    assert WORKFLOWS == [
        "direct",
        "standard-rag",
        "c3po",
        "mmoa",
        "gym:direct",
        "gym:cot",
        "gym:rag",
        "gym:react",
        "gym:search-o1",
        "gym:re2search",
    ]


@pytest.mark.parametrize("name", WORKFLOWS)
def test_each_name_builds_a_picklable_workflow_of_that_name(name):
    options = workflow_options(name)  # the workflow's own options class: another's fields are not its own
    own = {"topk": 7, "variant": "s-g", "strategy": "planning", "max_steps": 3}
    cfg = options(**{k: v for k, v in own.items() if k in options.model_fields})
    assert len(cfg.model_fields_set) == (1 if name in ("direct", "standard-rag") else 2)
    wf = build_workflow(name, cfg)
    assert wf.name == name and wf.cfg == cfg
    expected = {"direct": Direct, "standard-rag": StandardRAG, "c3po": C3PO, "mmoa": MMOA}.get(name, GymAgent)
    assert isinstance(wf, expected)
    again = pickle.loads(pickle.dumps(wf))  # rollout workers may run in other processes
    assert again.name == name and again.cfg == cfg


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="gym:re2search") as err:
        build_workflow("gym:reflexion", WorkflowConfig())
    assert "c3po" in str(err.value) and "standard-rag" in str(err.value)
