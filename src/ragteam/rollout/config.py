"""Settings of the rollout engine: decoding, the branching schedule and the per-episode budget."""

from __future__ import annotations

from pydantic import Field, field_validator

from ragteam.config import Config


class RolloutConfig(Config):
    """How the engine samples, branches and bounds episodes. Picklable; holds no live objects."""

    temperature: float = Field(0.0, ge=0.0, le=5.0, description="policy sampling temperature (0 = greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="policy nucleus sampling mass")
    max_tokens: int = Field(256, ge=1, description="policy tokens per act, unless the act sets its own")
    seed: int | None = Field(
        0,
        description="base seed; each request gets a seed derived from it, its question and its tree position",
    )
    llm_temperature: float = Field(0.0, ge=0.0, le=5.0, description="LLM-server sampling temperature")
    llm_max_tokens: int = Field(
        128, ge=1, description="LLM-server tokens per call, unless the call sets its own"
    )
    branching: list[int] = Field(
        default_factory=lambda: [1],
        description="samples per policy act by policy depth (0, 1, ...); the last value repeats",
    )
    max_depth: int = Field(16, ge=1, description="policy acts on one root-to-leaf path")
    max_nodes: int = Field(512, ge=1, description="nodes per episode tree; once reached, no more branching")
    max_tokens_per_episode: int = Field(
        16384, ge=1, description="generated tokens (policy and LLM) on one root-to-leaf path"
    )
    max_concurrent: int = Field(32, ge=1, description="episodes in flight at once")

    @field_validator("branching")
    @classmethod
    def _check_branching(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("branching needs at least one value (e.g. [1])")
        if any(k < 1 for k in value):
            raise ValueError(f"branching factors must be >= 1, got {value}")
        return value

    def branches_at(self, depth: int) -> int:
        """Samples to draw at a policy act whose path already holds `depth` policy acts."""
        return self.branching[min(depth, len(self.branching) - 1)]
