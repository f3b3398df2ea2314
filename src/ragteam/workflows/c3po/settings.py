"""C-3PO's settings, stated once: the router's tags, its retrieval depth, its depth limit and tree rollout,
and its rows of the `small` and `paper` profiles. The workflow, its parsers, the profiles
(`workflows/profiles.py`), the `c3po` recipe, the rollout's `forks: c3po` shorthand and `collect --tree c3po`
read them from here. This module imports no workflow code, so the profiles can load it while configs are
being defined.
"""

from __future__ import annotations

from typing import Any

from ragteam.workflows.setting import LONG_EPISODE, PACKAGED_ENCODER, Setting

ROUTER_TAGS: dict[str, str] = {
    "no_retrieval": "[No Retrieval]",
    "retrieval": "[Retrieval]",
    "planning": "[Planning]",
}
"""The Reasoning Router's three strategies (paper §4.1) as it writes them: the action kind -> its tag."""

TOPK = 10
"""Documents per search: the authors' released code (Chen-GX/C-3PO arguments.py: retrieve_top_k =
max_documents = 10)."""

MAX_DEPTH = 13
"""Table 7 and §6.1: no node deeper than 13 in the RL phase's rollouts (depth t as the workflow counts it,
`tree.DEPTH`): the `c3po` recipe's depth limit."""

TEST_MAX_DEPTH = 15
"""Where the authors test: Figure 6's test-set depth distribution reaches depth 15 (HotpotQA and 2Wiki peak
at 9-15), past the training limit 13: the `paper` profile's depth limit, so eval runs as they test."""

MAX_LEN = 2048
"""Table 7: generate max len 2048, for every act and LLM call."""

PROMPT_MAX_LEN = 4096
"""Table 7: prompt max len 4096."""

TREE: dict[str, Any] = {
    "forks": [
        {
            "role": "router",
            "forced": [
                {"text": ROUTER_TAGS["no_retrieval"]},
                {"text": ROUTER_TAGS["retrieval"], "sample": True},
                {"text": ROUTER_TAGS["planning"]},
            ],
        },
        {"depth_from": 1, "depth_to": 4, "k": 2},
        {"k": 1},
    ],
    "max_depth": MAX_DEPTH,
}
"""C-3PO's tree-structured rollout (paper, section 5.1 and Table 7), as `RolloutConfig` fields, with depth t
as the `c3po` workflow counts it: the router's three strategies at t = 0, then K(t)=2 for 1 <= t <= 4 and 1
deeper, no node deeper than 13. Under another workflow's depth rule (policy acts) the numbers fork other acts."""

SMALL: tuple[Setting, ...] = (
    Setting("topk", 5, "ragteam: a short prompt for a small proxy"),
    Setting("max_rounds", 5, "ragteam: planning rounds bounded below the depth limit"),
    Setting("rollout.max_depth", 16, "ragteam: the engine's default depth limit"),
    Setting("rollout.max_tokens", 256, "ragteam: policy tokens per act"),
    Setting("role_caps", True, "ragteam: the router's own cap of 64 tokens (a tag and a short query)"),
    Setting("rollout.llm_max_tokens", 128, "ragteam: LLM-server tokens per call (roadmap, answer)"),
    Setting("rollout.max_prompt_tokens", None, "ragteam: prompts bounded by the model's context only"),
    Setting("rollout.max_tokens_per_episode", 16384, "ragteam: the engine's default"),
    Setting("retriever.dense_model", None, PACKAGED_ENCODER),
)
"""C-3PO's rows of the `small` profile (the field defaults)."""

PAPER: tuple[Setting, ...] = (
    Setting(
        "topk",
        TOPK,
        "C-3PO authors' released code (Chen-GX/C-3PO arguments.py: retrieve_top_k = max_documents = 10)",
    ),
    Setting(
        "max_rounds",
        MAX_DEPTH,
        "C-3PO A.4 Algorithm 1: planning loops until [LLM], bounded only by the depth limit (13 never binds)",
    ),
    Setting(
        "rollout.max_depth",
        TEST_MAX_DEPTH,
        "C-3PO Figure 6: test-set depths reach 15 (training's limit is 13: §6.1, Table 7; the c3po recipe)",
    ),
    Setting("rollout.max_tokens", MAX_LEN, "C-3PO Table 7: generate max len 2048"),
    Setting(
        "role_caps",
        False,
        "C-3PO Table 7: generate max len 2048 for every act, the router's included (no 64-token cap)",
    ),
    Setting(
        "rollout.llm_max_tokens",
        MAX_LEN,
        "C-3PO Table 7: generate max len 2048, for the LLM's roadmap and answer too (no silent cut)",
    ),
    Setting("rollout.max_prompt_tokens", PROMPT_MAX_LEN, "C-3PO Table 7: prompt max len 4096"),
    Setting("rollout.max_tokens_per_episode", LONG_EPISODE, "ragteam: never binds before the depth limit"),
    Setting(
        "retriever.dense_model",
        None,
        "C-3PO §6.1, A.2: contriever-msmarco (not packaged; offline the index's encoder, all-MiniLM-L6-v2 "
        "by default). The paper's: `--retriever.dense-model DIR --retriever.pooling mean "
        "--no-retriever.normalize` on a contriever-msmarco folder (or `ragteam index --dense.model DIR "
        "--dense.pooling mean --no-dense.normalize`)",
    ),
)
"""C-3PO's rows of the `paper` profile, each with its source."""
