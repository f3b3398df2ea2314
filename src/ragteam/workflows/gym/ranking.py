"""RAG-Gym's ranking prompt (paper, Fig. 10), registered as the prompt of the keep-one-of-N `llm` scorer.

The `llm` scorer (`rollout/scorers.py`, `--rollout.best-of.scorer llm`, `collect process --ranker llm`) asks
the LLM server to rank each act's candidate actions; it looks its prompt up by its own name
(`scorers.registered_prompt("llm")`), so the rollout names no paper. The package registers it on load.
"""

from __future__ import annotations

from ragteam.protocol import register_ranking_prompt

RANKING_PROMPT = """You evaluate decisions. Rank the proposed actions below from the most appropriate to the least \
appropriate next step of a step-by-step process that works toward answering the original question.

### Original Question:
{question}

### Information-Seeking History:
{history}

### Proposed Next Actions:
{actions}

### Important Assumption
The agent knows nothing about the subject beyond the information-seeking history above and must answer from \
it alone. An assumption that the history does not support must not influence the ranking.

### Evaluation Criteria for Appropriateness
1. **Sufficiency Check**:
- Decide whether the information available is enough to answer the original question directly. If it is \
not, an action that answers is inappropriate.
- Prefer queries that gather a specific piece of missing information the question depends on.
- If the history already holds everything needed, answering is the most appropriate action, and the correct \
answer ranks highest.
2. **Utility Check**:
- A query must be precise, actionable and directly relevant to answering the question.
- Prefer foundational queries that establish the context or general knowledge that more specific follow-ups \
need.
- Rank lower a query that is too narrow or specific too early, presuming knowledge that is not available yet.
- Avoid irrelevant queries that do nothing toward answering the original question.
3. **Redundancy Check**:
- Rank lower a query that repeats an earlier query or asks for information the history already covers.
- An action must add value to the process: it seeks new information or clarifies what is missing.

### Expected Output Format
- Output the indices of the ranked actions as JSON: ```json{{"ranked_indices": [list of indices]}}```.
- Order them from the most appropriate to the least appropriate by the criteria above.
- Give no explanation or reasoning."""
"""RAG-Gym's ranking prompt (Fig. 10) in ragteam's words: its role, assumption, three criteria and output
format. Actions are listed `[0] Query: ...` / `[1] Answer: ...` and ranked by those 0-based indices."""

CRITERIA = ("Sufficiency Check", "Utility Check", "Redundancy Check")
"""Fig. 10's three criteria, each a heading of the prompt."""

register_ranking_prompt("llm", RANKING_PROMPT)
