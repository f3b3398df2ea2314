"""Multi-agent PPO on episode trees: one policy playing every role of a workflow, with a critic or a group
baseline.

    ragteam train ppo --recipe mmoa --data hotpotqa.jsonl --limit 400 --policy.model runs/sft --out runs/ppo
    ragteam train ppo --recipe mmoa ... --ppo.advantage grpo --rollout.group-size 4   # critic-free

Each iteration runs six named, timed phases, top to bottom in `train_ppo` (`loop.py`):

1. rollout     - `phases.play`: the engine plays the workflow on this iteration's questions with the current
                 weights, sampling at the recipe's temperature: K episodes per question
                 (`--rollout.group-size`), C-3PO's tree where the recipe forks; every act's prompt ids,
                 completion ids, log-probs;
2. credit      - `phases.credit_samples`: a registered credit function (`ragteam.credit`: outcome, tree_mc,
                 tree_mean, mmoa, process) turns each tree into one reward per policy node from the leaves'
                 registered reward (`--ppo.reward`; with `--ppo.process-reward prm`, the gym recipe, each act
                 is first scored by the process reward model `--prm.model`: RAG-Gym's r(s, a)); each
                 credited node of a trained role (`--ppo.train-roles`) becomes a `Sample`;
3. advantages  - `Learner.score`, one pass without gradients: old log-probs (and values, with a critic) under
                 the current weights, reference log-probs under the frozen start, all at the sampling
                 temperature; the node's reward at its last token, minus beta * KL at every token where the
                 KL goes in the reward (`--ppo.kl-in`: gae, reinforce_pp; the group estimators pay it in the
                 loss); then the registered estimator (`--ppo.advantage`: gae, grpo, drgrpo, rloo,
                 reinforce_pp, tree_grpo, sibling; `train/advantages.py`) with each sample's question group,
                 episode, fork and leaf trajectories, and the normalisation (`--ppo.normalize`: auto,
                 global, role, none);
4. update      - `Learner.update`, `ppo.epochs` passes of shuffled token-budgeted minibatches: the registered
                 policy loss (`--ppo.loss`) + vf_coef * clipped value loss (with a critic) - ent_coef *
                 entropy, over the trained completion tokens (prompts, and so observations, are never
                 trained); gradient norm clipped and logged; one optimizer step per minibatch;
5. evaluate    - `phases.held_out`: greedy rollouts on held-out questions (`--eval-data`), every
                 `--eval-every` iterations and after the last;
6. checkpoint  - every `--save-every` iterations (`checkpoint.py`); `--resume` continues after the
                 newest one, losing and repeating no update.

The package: `learner.py`, the `Learner` (policy, value model, reference, optimizer, schedule, KL
controller) with the advantage and update phases, and nothing of rollouts (bench/ppo.py times the same
update); `run.py`, the `Run` around it (engine, workflow, questions, weight sync, output folder) and how
`build` assembles both; `phases.py`, the phases that feed the learner; `tree_scores.py`, the judge's and the
process reward model's scores, put on the trees before credit; `log.py`, the log row and the guards that
watch it (entropy, KL and reply length running away, per role; a run that trained nothing); `stats.py`, the
statistics the learner measures for it; `checkpoint.py`, checkpoints and kept rollouts. The leaf reward
credit reads is a registered reward (`--ppo.reward`, `ragteam.metrics.rewards`). Output in `--out`: the
final policy (a model folder), its value model (`OUT/critic/`, when there is one), `log.jsonl`, `runs/`
(TensorBoard), `wandb/` (--report-to wandb), `curves.png`, `checkpoint-N/`, `config.yaml`.
"""

from ragteam.train.ppo.learner import Experience, Learner
from ragteam.train.ppo.log import NothingTrained
from ragteam.train.ppo.loop import PHASES, budget_spent, start, train_ppo
from ragteam.train.ppo.run import Run, build
from ragteam.train.ppo_config import PPOConfig

__all__ = [
    "PHASES",
    "Experience",
    "Learner",
    "NothingTrained",
    "PPOConfig",
    "Run",
    "budget_spent",
    "build",
    "start",
    "train_ppo",
]
