"""What the engine keeps about episodes in flight: each live episode, its live branches (root-to-leaf paths
still running), and the report it returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from ragteam.depth import ACTS, DepthRule
from ragteam.protocol import EpisodeGenerator, Request
from ragteam.rollout.replay import Step
from ragteam.rollout.tree import Episode
from ragteam.types import Question


@dataclass
class RolloutReport:
    """What `Engine.run` returns: the episodes in question order, and how many failed and why.

    An episode fails only when none of its paths reached an answer; `failed_paths` counts the paths that
    failed inside episodes that still answered (their siblings' leaves are intact).
    """

    episodes: list[Episode]
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # reason -> count of failed episodes
    failed_paths: int = 0
    seconds: float = 0.0


@dataclass(eq=False)
class Branch:
    """One live root-to-leaf path: its generator, where its next node hangs, and what it has used."""

    gen: EpisodeGenerator | None
    parent: int | None = None
    depth: int = 0  # depth t of the path's last node, by the workflow's DepthRule (depth.py)
    tokens: int = 0  # generated tokens so far (policy and LLM)
    history: list[Step] = field(default_factory=list)  # requests and results, for replay into forks
    pending: Request | None = None
    throws: int = 0

    def close(self) -> None:
        if self.gen is not None:
            try:
                self.gen.close()
            except Exception:  # a workflow misbehaving on close changes nothing: the path is over
                pass


@dataclass(eq=False)
class LiveEpisode:
    """One episode in flight."""

    index: int
    question: Question
    episode: Episode
    started: float
    branches: list[Branch] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why branches failed, in order
    depth_rule: DepthRule = ACTS  # how the workflow counts depth (forks, the depth limit, node.depth)

    def finish(self, seconds: float) -> str | None:
        """Close the episode: its status from its leaves; the failure reason when no path answered."""
        self.episode.meta["seconds"] = round(seconds, 6)
        leaves = self.episode.leaves()
        failed = [leaf for leaf in leaves if leaf.status == "failed"]
        if not failed:
            return None
        if len(failed) == len(leaves):
            self.episode.status = "failed"
            self.episode.error = failed[0].error
            return self.reasons[0] if self.reasons else "failed"
        self.episode.status = "partial"
        self.episode.meta["failed_paths"] = len(failed)
        return None
