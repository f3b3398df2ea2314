"""Weighted running means for training logs, overall and per role, plus the per-iteration timer.

Why weighted: PPO statistics are token means, and a minibatch's tokens are split over micro-batches and
roles of very different lengths (a router act is a dozen tokens, a generator's answer a few, a filter's id
list more); averaging per-call means would over-weight the short ones.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class Meter:
    """`add(name, value, weight)` many times; `means()` gives each name's weighted mean."""

    def __init__(self) -> None:
        self._sum: dict[str, float] = defaultdict(float)
        self._weight: dict[str, float] = defaultdict(float)

    def add(self, name: str, value: float, weight: float = 1.0) -> None:
        if weight > 0:
            self._sum[name] += float(value) * weight
            self._weight[name] += weight

    def means(self) -> dict[str, float]:
        return {k: self._sum[k] / self._weight[k] for k in sorted(self._sum) if self._weight[k] > 0}


class RoleMeters:
    """One `Meter` for the whole batch (`all`) and one per role."""

    def __init__(self) -> None:
        self.all = Meter()
        self.roles: dict[str, Meter] = defaultdict(Meter)

    def add(self, role: str | None, name: str, value: float, weight: float = 1.0) -> None:
        if role is None:
            self.all.add(name, value, weight)
        else:
            self.roles[role].add(name, value, weight)

    def means(self) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        return self.all.means(), {r: m.means() for r, m in sorted(self.roles.items())}


class PhaseTimer:
    """Wall seconds of each named phase of one iteration: `with timer("rollout"): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0
