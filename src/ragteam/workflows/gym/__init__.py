"""RAG-Gym: six agent designs (Direct, CoT, RAG, ReAct, Search-o1, Re2Search) on the search-or-answer process."""

from ragteam.workflows.gym.workflow import AGENTS, GymAgent

__all__ = ["AGENTS", "GymAgent"]
