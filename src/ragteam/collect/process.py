"""RAG-Gym's process data: ranked candidate actions on trajectories that end correct become preference pairs.

The rollout samples N candidate actions at every act, a ranker scores them (the LLM server with a rubric, or
Monte Carlo rollouts, or a process reward model) and the best one is continued (`RolloutConfig.best_of`); every candidate
stays in the tree as a sibling with its `score`, the continued one `chosen`. As in RAG-Gym (appendix E),
only trajectories whose final answer is correct are kept. For every keep-one-of-N group on a kept path, the
chosen action is preferred over each sibling that scored strictly lower; ties carry no preference and are
skipped, and so are siblings whose text equals the chosen one or is empty (no pair to learn from). The state
of a pair is the chosen node's prompt, which all siblings share.

Pure: an episode and a leaf predicate in, pair rows and counts out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ragteam.collect.rows import PairRow, dedupe
from ragteam.collect.sft import correct_leaves
from ragteam.rollout.tree import Episode, Node


def sibling_groups(episode: Episode) -> list[list[Node]]:
    """The keep-one-of-N groups of a tree: scored policy siblings under one parent, in id order."""
    groups: dict[int | None, list[Node]] = {}
    for n in episode.policy_nodes():
        if n.score is not None:
            groups.setdefault(n.parent, []).append(n)
    return [g for g in groups.values() if len(g) > 1]


def on_correct_paths(episode: Episode, accept: Callable[[Node], bool]) -> set[int]:
    """Ids of every node on a root-to-leaf path whose leaf is correct."""
    return {n.id for leaf in correct_leaves(episode, accept) for n in episode.path(leaf.id)}


def process_pairs(
    episode: Episode, accept: Callable[[Node], bool], keep_invalid: bool = False
) -> tuple[list[PairRow], Counter]:
    """Pairs (chosen over each strictly lower-scored sibling) of the groups whose chosen node is on a correct
    path; counts of groups and of the siblings skipped (ties, identical or empty text, duplicates). A chosen
    reply that did not parse (the workflow fell back) makes no pairs unless `keep_invalid`: the same rule as
    the SFT rows, so DPO never learns to prefer a reply that SFT would not imitate. A rejected reply that did
    not parse is a fine negative."""
    counts: Counter = Counter()
    path_ids = on_correct_paths(episode, accept)
    rows: list[PairRow] = []
    for group in sibling_groups(episode):
        counts["groups"] += 1
        chosen = [n for n in group if n.chosen]
        if len(chosen) != 1 or chosen[0].id not in path_ids:
            continue
        best = chosen[0]
        counts["groups_on_correct_paths"] += 1
        assert best.score is not None
        if best.messages is None or not (best.text or "").strip():
            counts["chosen_empty"] += 1
            continue
        if best.action is not None and not best.action.valid and not keep_invalid:
            counts["chosen_invalid"] += 1
            continue
        for other in group:
            if other is best:
                continue
            assert other.score is not None
            text = other.text or ""
            if other.score == best.score:
                counts["ties"] += 1
            elif other.score > best.score:  # not from the engine (it continues the best); never a pair
                counts["scored_above_chosen"] += 1
            elif not text.strip():
                counts["empty_rejected"] += 1
            elif text.strip() == (best.text or "").strip():
                counts["identical"] += 1
            else:
                rows.append(
                    PairRow(
                        role=best.role,
                        messages=list(best.messages),
                        chosen=best.text or "",
                        rejected=text,
                        scores={"chosen": float(best.score), "rejected": float(other.score)},
                        question_id=episode.question.id,
                    )
                )
    rows, dropped = dedupe(rows)
    if dropped:
        counts["duplicates"] += dropped
    return rows, counts
