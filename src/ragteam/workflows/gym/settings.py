"""RAG-Gym's settings, stated once: its rows of the `small` and `paper` profiles (32 documents per query,
at most 10 iterations, RRF fusion, the untuned summarizer), for every `gym:*` agent. The profiles
(`workflows/profiles.py`) and the `gym` recipes read them from here. This module imports no workflow code, so
the profiles can load it while configs are being defined.
"""

from __future__ import annotations

from ragteam.workflows.c3po.settings import MAX_LEN
from ragteam.workflows.setting import LONG_EPISODE, PACKAGED_ENCODER, Setting

SMALL: tuple[Setting, ...] = (
    Setting("topk", 5, "ragteam: a short history for a small actor"),
    Setting("max_steps", 10, "RAG-Gym Appendix F: at most 10 iterations"),
    Setting("last_step", "answer", "ragteam: the last step may only answer (answer-only template)"),
    Setting("retriever.fusion", "convex", "ragteam: the hybrid retriever's default fusion"),
    Setting("retriever.dense_weight", 0.4, "ragteam: the hybrid retriever's default weight"),
    Setting("rollout.max_tokens", 256, "ragteam: policy tokens per act"),
    Setting("role_caps", True, "ragteam: the direct agent's own cap of 64 tokens"),
    Setting("rollout.llm_max_tokens", 128, "ragteam: LLM-server tokens per summary"),
    Setting("rollout.max_prompt_tokens", None, "ragteam: prompts bounded by the model's context only"),
    Setting("rollout.max_tokens_per_episode", 16384, "ragteam: the engine's default"),
    Setting("retriever.dense_model", None, PACKAGED_ENCODER),
)
"""RAG-Gym's rows of the `small` profile (the field defaults)."""

PAPER: tuple[Setting, ...] = (
    Setting("topk", 32, "RAG-Gym Appendix E.1: 32 documents per search query"),
    Setting("max_steps", 10, "RAG-Gym Appendix F (Table 5): at most 10 iterations per question"),
    Setting(
        "last_step",
        "same",
        "RAG-Gym Appendix E.3, Algorithm 1: every step is the agent's own; no last-step template",
    ),
    Setting("retriever.fusion", "rrf", "RAG-Gym Appendix E.1: BM25 and dense merged by reciprocal rank"),
    Setting("retriever.dense_weight", 0.5, "RAG-Gym Appendix E.1: plain RRF, both lists weighted alike"),
    Setting(
        "llm.backend",
        "local",
        "RAG-Gym Appendix E.2: the summarizer is the untuned base model (only the actor is tuned)",
    ),
    Setting("llm.model", "smollm2", "RAG-Gym Appendix E.2: the untuned base model (ragteam's: SmolLM2)"),
    Setting("rollout.max_tokens", MAX_LEN, "not stated; C-3PO's Table 7 value, room for the three sections"),
    Setting(
        "role_caps",
        False,
        "not stated; the direct agent's answer gets rollout.max_tokens like the others",
    ),
    Setting(
        "rollout.llm_max_tokens",
        MAX_LEN,
        "not stated; C-3PO's Table 7 value, so a summary (Fig. 8) is not cut",
    ),
    Setting("rollout.max_prompt_tokens", None, "not stated (Llama-3.1-8B, 128k context: no cut)"),
    Setting("rollout.max_tokens_per_episode", LONG_EPISODE, "ragteam: never binds before the step limit"),
    Setting(
        "retriever.dense_model",
        None,
        "RAG-Gym E.1: BGE-Base beside BM25 (not packaged; offline the index's encoder, all-MiniLM-L6-v2 by "
        "default). The paper's: `--retriever.dense-model DIR` on a bge-base-en(-v1.5) sentence-transformers "
        "folder (cls pooling, normalised, read from it) with `--retriever.query-prefix 'Represent this "
        "sentence for searching relevant passages: '`",
    ),
)
"""RAG-Gym's rows of the `paper` profile, each with its source."""
