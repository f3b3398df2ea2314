"""MMOA-RAG's settings, stated once: its rows of the `small` and `paper` profiles (K = 10 candidates, where
they come from, the Selector's constrained action space). The profiles (`workflows/profiles.py`) and the
`mmoa` recipe read them from here. This module imports no workflow code, so the profiles can load it while
configs are being defined.
"""

from __future__ import annotations

from ragteam.workflows.setting import PACKAGED_ENCODER, Setting

SMALL: tuple[Setting, ...] = (
    Setting("candidates", 10, "MMOA-RAG §5.1.3: K = 10"),
    Setting("fill_from_question", True, "ragteam: free slots filled from the question's own hits"),
    Setting("selector_constrained", False, "ragteam: the Selector writes free text, its parser reads it"),
    Setting("rollout.max_tokens", 256, "ragteam: policy tokens per act (the roles cap their own)"),
    Setting("rollout.max_prompt_tokens", None, "ragteam: prompts bounded by the model's context only"),
    Setting("retriever.dense_model", None, PACKAGED_ENCODER),
)
"""MMOA-RAG's rows of the `small` profile (the field defaults)."""

PAPER: tuple[Setting, ...] = (
    Setting("candidates", 10, "MMOA-RAG §5.1.3: K = 10"),
    Setting(
        "fill_from_question",
        False,
        "MMOA-RAG §5.1.3: the K candidates come from the sub-questions' searches (2 -> top 5 of each)",
    ),
    Setting(
        "selector_constrained",
        True,
        "MMOA-RAG §4.2.2 eq. 5: the Selector's action space is `Document`, the ids 0..K-1 and `,`",
    ),
    Setting("rollout.max_tokens", 256, "not stated; the roles cap their own (rewriter 128, others 64)"),
    Setting("rollout.max_prompt_tokens", None, "not stated"),
    Setting(
        "retriever.dense_model",
        None,
        "MMOA-RAG §5.1.3: Contriever (not packaged; offline the index's encoder, all-MiniLM-L6-v2 by "
        "default). The paper's: `--retriever.dense-model DIR --retriever.pooling mean "
        "--no-retriever.normalize` on a Contriever folder (contriever-msmarco, as C-3PO)",
    ),
)
"""MMOA-RAG's rows of the `paper` profile, each with its source."""
