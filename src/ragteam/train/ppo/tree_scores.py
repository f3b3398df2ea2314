"""PPO's reward sources besides the answer metrics: the LLM judge's verdicts (`--ppo.reward judge`) and the
process reward model's scores (`--ppo.process-reward prm`).

Both are written onto the episode trees (a leaf's `judge` reward, an act's `score`) before the `credit` phase
runs, because a credit function is a pure function of a tree: it reads rewards and scores where the engine
puts the answer metrics, and does not know which model produced them. Each is one batched call per iteration,
and each model is built on first use (`run.judge`, `run.prm`), so a run that uses neither never loads
one; their modules are imported lazily for the same reason. Which leaf reward credit then reads is the
registered reward `--ppo.reward` names (`ragteam.metrics.rewards`; `judge` reads the verdicts put here).
"""

from __future__ import annotations

from ragteam.rollout.tree import Episode
from ragteam.train.ppo.run import Run

__all__ = ["judge_leaves", "score_acts", "unscorable"]


def judge_leaves(run: Run, episodes: list[Episode]) -> None:
    """`--ppo.reward judge`: the LLM judge's verdict (1/0) on every answered leaf, as its `judge` reward, in
    one batched call per iteration; failed and truncated leaves stay unjudged (worth 0 in credit)."""
    from ragteam.metrics.judge import LLMJudge

    if run.judge is None:
        run.judge = LLMJudge(run.cfg.judge.chat_model())
    leaves = [(ep, lf) for ep in episodes for lf in ep.leaves() if lf.status == "ok"]
    verdicts = run.judge.judge([ep.question for ep, _ in leaves], [lf.answer or "" for _, lf in leaves])
    for (_, leaf), v in zip(leaves, verdicts):
        leaf.rewards["judge"] = v


def score_acts(run: Run, episodes: list[Episode]) -> None:
    """`--ppo.process-reward prm` (the gym recipe, RAG-Gym's PPO, section 2.2.2): every policy act's
    `score` becomes the process reward model's r(s, a) of its state (the prompt as sent) and its reply, as
    the PRM scores candidates at inference (`PRMScorer`), in one batched call per iteration; the
    `process` credit then gives each act its own score.

    One reward scale per run: every act is scored by the model, or the iteration fails. An act without its
    prompt (`messages`) cannot be scored, and the `process` credit would give it the answer's F1 instead, on
    another scale than the model's logits: it is refused, naming the act (`unscorable`)."""
    from ragteam.llm.prm import ProcessRewardModel

    missing = unscorable(episodes)
    if missing:
        raise ValueError(
            f"--ppo.process-reward prm scores every act by its prompt and reply; {len(missing)} acts have "
            f"no prompt recorded ({', '.join(missing[:5])}), and crediting them by the answer's reward would "
            "mix two scales in one run"
        )
    if run.prm is None:
        run.prm = ProcessRewardModel.from_config(run.cfg.prm)
    acts = [n for ep in episodes for n in ep.policy_nodes()]
    scores = run.prm.score([(n.messages, n.text or "") for n in acts]) if acts else []
    for node, value in zip(acts, scores):
        node.score = float(value)


def unscorable(episodes: list[Episode]) -> list[str]:
    """The policy acts a process reward model cannot score (no prompt recorded), as `episode/node (role)`."""
    return [f"{ep.id}/{n.id} ({n.role})" for ep in episodes for n in ep.policy_nodes() if n.messages is None]
