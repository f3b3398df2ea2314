"""C-3PO's tree: how it counts depth t, and its tree rollout registered under its name.

`DEPTH` counts the steps of C-3PO's tree (paper, section 5.1 and Fig. 6; the argument is in
docs/workflows.md, *Depth t*): every act of the proxy, every call to the LLM server (roadmap, answer) and the
answer leaf. A search is part of the transition to the filter's state (the paper's appendix B.2), not a step.
Direct answering ends at depth 3 (router, answer call, answer), single pass at 4 (router, filter, answer call,
answer), planning with R retrieval-filter rounds at 2R + 5 (router, roadmap, R deciders and R filters, the
decider's [LLM], answer call, answer). The workflow declares it (`C3PO.depth_rule`); the engine's fork
schedule, its depth limit and the depth statistics read it from there.

`TREE` (`settings.TREE`, section 5.1 and Table 7) is registered as `c3po` (`ragteam.depth.register_tree`)
when this package loads, so `--rollout.forks c3po` and `collect sft --tree c3po` find it by name.
"""

from __future__ import annotations

from ragteam.depth import DepthRule, register_tree
from ragteam.workflows.c3po.settings import TREE

DEPTH = DepthRule("c3po", frozenset({"policy", "llm", "answer"}), tail=2)
"""C-3PO's depth t: proxy acts, LLM calls and the answer leaf are steps; every path ends with the LLM's answer
call and the answer leaf (tail 2), so an act at depth t runs only if t + 3 <= max_depth."""

register_tree("c3po", TREE, "C-3PO's router")
