"""Search-R1's agent (Jin et al., 2025, arXiv:2503.09516) as a ragteam team, written only against `ragteam`'s
public API: prompts.py (the prompt and the observation blocks), parsers.py (the reply's tags, never raising),
workflow.py (the turns), rewards.py (the format reward: credit `search_r1_format` and reward
`search_r1_format_em`, registered on import). Installed, it is `--workflow search-r1` (entry point in group
`ragteam.workflows`); on PYTHONPATH only, `--workflow search_r1.workflow:SearchR1`."""

from search_r1 import rewards  # noqa: F401  registers credit search_r1_format, reward search_r1_format_em
from search_r1.workflow import SearchR1

__all__ = ["SearchR1"]
