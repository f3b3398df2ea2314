"""`ragteam train ppo`'s settings: the run (workflow, models, retriever, rollout), the schedule, PPO's knobs.

Precedence: field defaults < the profile < the recipe (`--recipe c3po|mmoa|gym|gym-outcome|c3po-no-tree` or a
YAML file) < `--config FILE` < flags, resolved once (`ragteam.config.resolve`, `PPOConfig.layers`). Every packaged recipe names `profile: paper`, so `--recipe c3po` alone
runs its paper's lengths, candidates, top-k, fusion, last step and corpus (`workflows/profiles.py`); a flag,
`--profile small` included, wins over any of them. Recipes live in `ragteam/train/recipes/` and say where
each value comes from.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, field_validator, model_validator

from ragteam.assemble.config import JudgeConfig, TeamConfig
from ragteam.config import ConfigError
from ragteam.credit import credit_help
from ragteam.llm.config import ModelConfig
from ragteam.llm.prm import PRMConfig
from ragteam.metrics.rewards import reward_help
from ragteam.precedence import Layer, merge_layers
from ragteam.rollout.config import RolloutConfig
from ragteam.train.report import REPORT_TO_HELP, ReportTo
from ragteam.train.train_config import LoraFields
from ragteam.workflows import profiles


def advantage_help() -> str:
    """`--ppo.advantage`'s help, its names read from the registry (`register_advantage`) when the parser is
    built, each with what it needs: a critic, groups (--rollout.group-size K or forks), or neither."""
    from ragteam.train.advantages import ESTIMATORS

    def needs(name: str) -> str:
        e = ESTIMATORS[name]
        if e.value_model:
            return "a critic"
        return (
            f"groups: --rollout.group-size K{' or forks' if e.forks else ''}" if e.groups else "critic-free"
        )

    names = ", ".join(f"{name} ({needs(name)})" for name in ESTIMATORS)
    return f"advantage estimator (train/advantages.py; register your own with ragteam.register_advantage): {names}"


def reward_option_help() -> str:
    """`--ppo.reward`'s help, its names read from the registry when the parser is built: after the named
    team's module is imported, so a reward it registers is listed (`--workflow pkg.module:Team`)."""
    return reward_help() + (
        " (f1, em, cover_em against the gold answers; judge: 1/0 from the LLM judge at --judge.base-url, every "
        "answer leaf of an iteration judged in one batch)"
    )


def loss_help() -> str:
    """`--ppo.loss`'s help, its names read from the registry (`register_policy_loss`)."""
    from ragteam.train.losses import POLICY_LOSSES

    return f"policy loss (train/losses.py; register your own with ragteam.register_policy_loss): {', '.join(POLICY_LOSSES)}"


class PPOOptions(LoraFields):
    """PPO's knobs (`--ppo.*`). Defaults follow MMOA-RAG's Table 2 where it gives a value. With `--ppo.lora`
    the policy trains a LoRA adapter and the KL reference is the same model with the adapter switched off
    (no second copy in memory); a separate critic trains an adapter of its own."""

    credit: str = Field(
        "outcome",
        description=credit_help(),  # --help reads the registry again: a named team's credits too
        json_schema_extra={"help_from": "ragteam.credit:credit_help"},
    )
    advantage: str = Field(
        "gae",
        description="advantage estimator (train/advantages.py): gae, grpo, drgrpo, rloo, ... (--help lists them)",
        json_schema_extra={"help_from": "ragteam.train.ppo_config:advantage_help"},
    )
    loss: str = Field(
        "ppo",
        description="policy loss (train/losses.py): ppo, the clipped surrogate (--help lists them)",
        json_schema_extra={"help_from": "ragteam.train.ppo_config:loss_help"},
    )
    normalize: Literal["auto", "none", "global", "role"] = Field(
        "auto",
        description="whiten advantages over the iteration's trained tokens (global), over each role's own "
        "tokens (role: one shared policy, roles of different reward scales), or not at all (none); auto: "
        "global for gae, none for the others (group-normalised advantages are not whitened twice, as in "
        "verl and OpenRLHF; reinforce_pp whitens its own)",
    )
    kl_in: Literal["auto", "loss", "reward"] = Field(
        "auto",
        description="where the KL to the reference goes: reward (-beta * KL at every token, InstructGPT, "
        "both papers' PPO, REINFORCE++) or loss (beta * --ppo.kl-loss-estimator in the loss, DeepSeekMath's "
        "GRPO); auto: reward for gae and reinforce_pp, loss for the critic-free group estimators",
    )
    skip_uninformative: bool = Field(
        True,
        description="group estimators: leave out of the update the samples of a question group (and fork) "
        "that all scored alike, whose advantage is 0 (DAPO's dynamic-sampling filter, without resampling)",
    )
    train_roles: list[str] = Field(
        default_factory=list,
        description="roles whose acts are trained (empty: all); the others still act, and are left out of "
        "the update (MMOA-RAG's Table 4 'w/o agent i' ablation)",
    )
    reward: str = Field(
        "f1",
        description=reward_option_help(),
        json_schema_extra={"help_from": "ragteam.train.ppo_config:reward_option_help"},
    )
    process_reward: Literal["none", "prm"] = Field(
        "none",
        description="prm: every policy act's reward is the process reward model's score r(s, a) of its "
        "state and reply (--prm.model, one batched call per iteration), set as the node's score and "
        "credited by --ppo.credit process (RAG-Gym's PPO, section 2.2.2; the gym recipe); none: rewards "
        "come from the answer leaves (--ppo.reward)",
    )
    clip: float = Field(0.2, gt=0, description="policy ratio clip range epsilon")
    value_clip: float = Field(0.2, gt=0, description="value clip range around the old value")
    value_loss: Literal["clipped", "mse"] = Field(
        "clipped",
        description="the critic's loss: clipped (PPO2, MMOA-RAG eq. 17: max of the clipped and unclipped "
        "squared errors, --ppo.value-clip) or mse (C-3PO eq. 10: the plain squared error; the c3po recipe)",
    )
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount over an act's tokens")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda")
    vf_coef: float = Field(0.1, ge=0, description="value loss coefficient (MMOA-RAG's alpha)")
    ent_coef: float = Field(0.0, ge=0, description="entropy bonus coefficient")
    epochs: int = Field(2, ge=1, description="passes over each iteration's samples")
    minibatch_tokens: int = Field(4096, ge=64, description="tokens (prompt + completion) per optimizer step")
    micro_tokens: int = Field(
        2048, ge=64, description="tokens per forward/backward (gradient accumulation within a step)"
    )
    share_prefix: bool = Field(
        True,
        description="score the samples that share a prompt (a group's first acts under --rollout.group-size, "
        "a tree fork's siblings) with the prompt computed once: one packed segment, the prompt then each "
        "completion, under an attention mask that keeps each completion to the prompt and its own tokens; "
        "the numbers equal the unshared path's (within float tolerance), the compute of the prompt drops by "
        "about the group size (GRPO update on SmolLM2, groups of 4: 3.5x tokens/s, docs/results.md); sdpa or "
        "eager attention; a batch with no repeated prompt is packed as without it",
    )
    max_sample_tokens: int | None = Field(
        None,
        ge=32,
        description="longest prompt + completion trained on (longer acts are skipped, counted by reason); "
        "default: what the rollout itself allows, --rollout.max-prompt-tokens + --rollout.max-tokens, at "
        "most the policy's context (`sample_token_limit`), so no act the rollout made is left out for length",
    )
    kl_estimator: Literal["k1", "k2", "k3", "abs"] = Field(
        "k1", description="per-token KL(pi || ref) estimate in the reward (and the logged KL)"
    )
    kl_loss_estimator: Literal["k1", "k2", "k3", "abs"] = Field(
        "k3",
        description="per-token KL(pi || ref) estimate of the loss term (--ppo.kl-in loss; k3: DeepSeekMath)",
    )
    kl_beta: float = Field(0.05, ge=0, description="KL coefficient beta (initial value)")
    kl_beta_min: float = Field(0.0, ge=0, description="lower bound of beta")
    kl_beta_max: float = Field(1.0, ge=0, description="upper bound of beta")
    kl_target: float | None = Field(
        None, gt=0, description="adaptive beta: the KL per token to hold (Ziegler et al.)"
    )
    kl_horizon: int = Field(
        10, ge=1, description="adaptive beta: iterations to correct a 20 percent KL error"
    )
    kl_anneal_to: float | None = Field(
        None, ge=0, description="annealed beta: its value at the last iteration (linear)"
    )
    lr: float = Field(1e-6, gt=0, description="policy peak learning rate")
    value_lr: float = Field(1e-5, gt=0, description="value model (critic) peak learning rate")
    lr_schedule: Literal["cosine", "linear", "constant"] = Field(
        "cosine", description="learning-rate decay over iterations"
    )
    warmup_iterations: int = Field(0, ge=0, description="linear warm-up iterations")
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0, description="gradient norm clip")
    target_kl: float | None = Field(
        None,
        gt=0,
        description="stop an iteration's update before the step at which a minibatch's KL(old || current) "
        "per token passes 1.5 x this (none: every epoch runs)",
    )
    shared_value: bool = Field(
        False,
        description="value head on the policy's trunk (half the memory) instead of a separate value model",
    )
    gradient_checkpointing: bool = Field(False, description="recompute activations: less memory, slower")
    bf16: bool = Field(
        False,
        description="bfloat16 autocast in the trainer's forward passes (old, reference and updated log-probs, "
        "values): weights, optimizer state, log-softmax and losses stay float32; for GPUs with bf16 and CPUs "
        "with AMX or AVX512-BF16, where matrix products run several times faster",
    )
    parallel: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="under torchrun: ddp = every rank holds the whole model, gradients all-reduced; fsdp = "
        "parameters, gradients and optimizer state sharded over the ranks (docs/distributed.md)",
    )
    weight_sync: Literal["server", "vllm", "vllm-lora"] = Field(
        "server",
        description="how a served policy (--policy.backend openai) gets the trained weights before each "
        "rollout: server = `ragteam serve llm --allow-weight-updates` (/v1/load_weights); vllm = a vLLM "
        "server on --ppo.sync-folder, started with VLLM_SERVER_DEV_MODE=1 (reload_weights, then "
        "reset_prefix_cache); vllm-lora = with --ppo.lora, each version's adapter loaded by name on a vLLM "
        "server started with --enable-lora (docs/distributed.md). A LoRA policy pushed by server or vllm "
        "is pushed merged",
    )
    sync_folder: str | None = Field(
        None,
        description="where pushed weights are written (default OUT/sync; for vllm: the folder it serves)",
    )
    served_name: str | None = Field(
        None,
        description="with --policy.backend openai: the name the server serves the policy under (vLLM's "
        "--served-model-name, serve llm's --served-name); default: the --policy.model value",
    )

    @field_validator("train_roles", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        """`selector,generator` (one flag value) or a list, each item possibly comma-separated."""
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            return [part.strip() for v in value for part in str(v).split(",") if part.strip()]
        return value


class TrainedPolicy(ModelConfig):
    """The policy PPO trains (`--policy.*`): ModelConfig, whose `model` here is always the weights training
    starts from, served or not (a server's name for its copy is `--ppo.served-name`)."""

    model: str = Field(
        "smollm2",
        description="the policy to start from: 'smollm2' (packaged), 'tiny' (test model) or a model folder "
        "(an SFT model); also the frozen KL reference",
    )


class PPOConfig(TeamConfig):
    """Multi-agent PPO of one policy over a workflow's roles (`ragteam train ppo`)."""

    policy: TrainedPolicy = Field(
        default_factory=TrainedPolicy, description="the policy trained, playing every role of the workflow"
    )

    recipe: str | None = Field(
        None,
        description="c3po, mmoa, gym (needs --prm.model), gym-outcome, c3po-no-tree, or a YAML file of "
        "settings (flags override it)",
    )
    data: str = Field(description="training questions (any supported benchmark file)")
    format: str | None = Field(None, description="data format (default: detected)")
    offset: int = Field(0, ge=0, description="first training question")
    limit: int | None = Field(None, ge=1, description="training questions used (default: all from offset)")
    out: str = Field(description="output folder: final policy and critic, checkpoints, log.jsonl, curves")
    rollout: RolloutConfig = Field(
        default_factory=lambda: RolloutConfig(temperature=SAMPLING_TEMPERATURE),
        description="decoding, seeds, groups and forks of the training rollouts (temperature 1 by default "
        "here: PPO learns from sampled acts; the held-out evaluation is greedy)",
    )
    iterations: int = Field(10, ge=1, description="PPO iterations (rollout + update each)")
    questions_per_iteration: int = Field(8, ge=1, description="questions rolled out per iteration")
    budget_tokens: int | None = Field(
        None,
        ge=1,
        description="stop once the policy has generated this many tokens in all (equal-budget comparisons)",
    )
    budget_seconds: float | None = Field(
        None,
        gt=0,
        description="stop after the iteration that passes this many seconds of training wall time in all "
        "(a lease or a job's time limit; resumed runs count their earlier time); the run still ends "
        "with its last evaluation, checkpoint and final policy",
    )
    eval_data: str | None = Field(None, description="held-out questions evaluated greedily (default: none)")
    eval_offset: int = Field(0, ge=0)
    eval_limit: int | None = Field(None, ge=1)
    eval_every: int = Field(0, ge=0, description="evaluate every N iterations (0: only after the last)")
    save_every: int = Field(1, ge=1, description="checkpoint every N iterations")
    save_rollouts_every: int = Field(
        0,
        ge=0,
        description="keep the training episodes of every Nth iteration in OUT/rollouts/iteration-N.jsonl "
        "(eval's episodes format: `ragteam ask --episodes FILE` shows them, `ragteam compare` reads them); "
        "0: none",
    )
    save_total_limit: int | None = Field(2, ge=1, description="checkpoints kept (none: all)")
    resume: bool = Field(False, description="continue from the newest checkpoint in --out")
    seed: int = Field(0, description="seed of question order, rollout sampling and minibatch order")
    threads: int | None = Field(None, ge=1, description="torch intra-op threads")
    device: Literal["auto", "cpu", "cuda"] = Field("auto")
    tensorboard: bool = Field(True, description="write TensorBoard events to OUT/runs (when installed)")
    report_to: ReportTo = Field("none", description=REPORT_TO_HELP)
    progress: bool = Field(True, description="progress bars")
    ppo: PPOOptions = Field(default_factory=PPOOptions)
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="the judge of --ppo.reward judge")
    prm: PRMConfig = Field(
        default_factory=PRMConfig,
        description="the process reward model (from `ragteam train prm`) whose score of each act is its "
        "reward under --ppo.process-reward prm (--recipe gym); not the PPO value model (OUT/critic/)",
    )

    overwrite: bool = Field(
        False,
        description="write into a non-empty --out that holds files this command did not write (another "
        "command's run, someone's files); a folder holding this trainer's own checkpoints or model still "
        "needs --resume",
    )

    @classmethod
    def layers(cls, given: dict) -> list[Layer]:
        """Under the user's values: the recipe (`given`'s `recipe`), over the profile its workflow and profile
        name (the user's choice first), over the sampling temperature of training rollouts."""
        recipe = recipe_values(given["recipe"]) if given.get("recipe") is not None else {}
        chosen, _ = merge_layers([("recipe", recipe), ("given", given)])
        return [
            ("default", {"rollout": {"temperature": SAMPLING_TEMPERATURE}}),
            *super().layers(chosen),
            ("recipe", recipe),
        ]

    @model_validator(mode="after")
    def _needs(self) -> PPOConfig:
        if self.ppo.reward == "judge" and not self.judge.base_url:
            raise ValueError("ppo.reward=judge needs the judge's endpoint: --judge.base-url URL")
        if self.ppo.process_reward == "prm" and not self.prm.model:
            raise ValueError(
                "ppo.process_reward=prm (the gym recipe: RAG-Gym's PPO against a process reward model) "
                "needs the trained process reward model: --prm.model DIR (from `ragteam train prm`); "
                "--recipe gym-outcome trains on the answer's outcome reward without one"
            )
        if self.ppo.process_reward == "prm" and self.ppo.credit != "process":
            raise ValueError(
                f"ppo.process_reward=prm sets each act's score, which only --ppo.credit process reads "
                f"(got --ppo.credit {self.ppo.credit})"
            )
        return self

    def served_policy(self) -> ModelConfig:
        """The policy as the rollouts reach it: `--policy.*`, asked for by `--ppo.served-name` on a server.
        Why two names: `--policy.model` is the policy the trainer starts from (also the KL reference), and a
        server may serve its copy of those weights under another name."""
        if self.policy.backend == "local" or self.ppo.served_name is None:
            return self.policy
        return self.policy.model_copy(update={"model": self.ppo.served_name})


SAMPLING_TEMPERATURE = 1.0
"""The training rollouts' temperature when neither a flag nor the recipe sets one: PPO's ratio is a policy
ratio only for acts sampled from the policy itself (greedy acts give it nothing to compare)."""


def sample_token_limit(cfg: PPOConfig, context: int | None) -> int:
    """The longest act the rollout can make, prompt and reply: `--rollout.max-prompt-tokens` (or, when
    prompts are bounded by the model's context only, that `context`) + `--rollout.max-tokens`, at most
    `context`. Why derived: a fixed limit below it (2048 before) skipped the later, longer acts of every
    episode under the papers' lengths, so they were never trained. Packing takes rows as wide as the
    longest sample of a batch, not this limit, so a higher limit costs memory only where such acts exist.
    `--ppo.max-sample-tokens` set explicitly wins."""
    if cfg.ppo.max_sample_tokens is not None:
        return cfg.ppo.max_sample_tokens
    r = cfg.rollout
    if r.max_prompt_tokens is None:
        if context is None:
            raise ValueError(
                "--ppo.max-sample-tokens: the policy's context length is unknown and prompts are unbounded "
                "(--rollout.max-prompt-tokens none): set one of them"
            )
        return context
    total = r.max_prompt_tokens + r.max_tokens  # a role's own cap is lower, never higher
    return min(total, context) if context is not None else total


RECIPES = ("c3po", "mmoa", "gym", "gym-outcome", "c3po-no-tree")


def recipe_path(recipe: str) -> Path:
    """A packaged recipe by name, or a YAML file path."""
    if recipe in RECIPES:
        return Path(str(resources.files("ragteam.train") / "recipes" / f"{recipe}.yaml"))
    path = Path(recipe)
    if not path.is_file():
        raise ConfigError(f"--recipe {recipe!r}: not a packaged recipe ({', '.join(RECIPES)}) nor a file")
    return path


def recipe_values(recipe: str, _seen: tuple[str, ...] = ()) -> dict:
    """The settings a recipe file holds (a mapping of field names, nested for groups). A recipe may name a
    base (`recipe: c3po`): its values are the base's, overridden by its own. It may list settings it takes
    from its workflow's paper profile (`paper: [topk, rollout.max_depth]`), each stated once in the
    workflow's package (`workflows/<family>/settings.py`); its own values win over them."""
    if recipe in _seen:
        raise ConfigError(f"recipe {recipe!r} includes itself ({' -> '.join((*_seen, recipe))})")
    path = recipe_path(recipe)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a mapping of settings")
    base = data.pop("recipe", None)
    data = _merge(_paper_values(path, data), data)
    return _merge(recipe_values(base, (*_seen, recipe)), data) if base else data


def _paper_values(path: Path, data: dict) -> dict:
    """The values a recipe's `paper:` list names, from its workflow's paper profile (popped from `data`)."""
    keys = data.pop("paper", None)
    if keys is None:
        return {}
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ConfigError(f"{path}: paper: is a list of setting names (topk, rollout.max_depth, ...)")
    if not isinstance(data.get("workflow"), str):
        raise ConfigError(
            f"{path}: paper: takes values from a workflow's profile: the recipe names no workflow"
        )
    try:
        return profiles.values("paper", data["workflow"], keys)
    except KeyError as e:
        raise ConfigError(f"{path}: paper: {e.args[0]}") from None


def _merge(base: dict, top: dict) -> dict:
    return merge_layers([("recipe", base), ("recipe", top)])[0]
