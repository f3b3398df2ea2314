"""Benchmark: update tokens/s and peak memory, ours against TRL: PPO (`ragteam.train.ppo.Learner.update`, separate or
shared critic) against TRL 1.12's PPO, and critic-free GRPO (`--ppo.advantage grpo`) against TRL's GRPOTrainer.

TRL dropped its PPO trainer after 1.12 (`trl.experimental.ppo.PPOTrainer` there), so the TRL PPO side runs in a
separate virtual environment, `.venv-trl112/` at the repository root, created on first use (about a minute:
torch==2.13.0 from the local CPU wheel first, then trl==1.12.0 with torch pinned by a constraint, so pip
never swaps torch for a multi-GB CUDA build). The TRL GRPO side runs the TRL installed with ragteam (this
interpreter's). Each side runs in a fresh process of its own, so its peak memory is its own: `--side ours`
with this interpreter, `--side trl` with the TRL 1.12 environment's.

Sides (--sides, default all six): ours, ours-shared, trl (PPO with a critic); ours-grpo, ours-grpo-prefix,
trl-grpo (GRPO).

The PPO sides train on the same batch: --samples synthetic acts (seeded: prompt lengths uniform in
--prompt-tokens, completion lengths uniform in --completion-tokens, random token ids, a random reward in
[0, 1]), built from --seed on each side and checked equal by a fingerprint. Same model (policy, a critic
initialised from the policy's weights, a frozen reference copy), float32, no gradient checkpointing, AdamW,
--epochs passes of shuffled minibatches of --minibatch samples, one optimizer step per minibatch (the table
shows the steps counted on each side's optimizer). The GRPO sides train on a batch of the same size and
lengths made in groups, as a GRPO batch is: --samples / --group-size prompts, each with --group-size
completions (own lengths, ids and rewards) that share its prompt ids (a fingerprint of its own, checked equal
across the two GRPO sides). GRPO holds no critic and, with beta 0 (no KL term), no reference model: the policy
alone.

Timed on each side is one update, the median of --repeats after --warmup untimed ones (the first pays the
optimizer's state allocation); the advantage pass that precedes it is not timed:

  ours  `Learner.update(exp, iteration)` of the learner `train ppo` builds (`Learner.create`): per minibatch, micro-batches of about
        --micro-tokens tokens grouped by length, rows no wider than their longest sample (short samples
        share a row), policy and separate critic trunks over the rows (`ours-shared`: the value head on the
        policy's backbone, as MMOA-RAG's LLaMA-Factory PPO and `--ppo.shared-value`), vocabulary
        head and value head on completion positions only, clipped policy + value losses and entropy,
        backward, grad-norm clip, AdamW step; per-role statistics; the scheduler step. One substitution:
        its token-budgeted minibatch split (`minibatches(..., minibatch_tokens, generator)`) is replaced
        by fixed --minibatch-sample chunks of the same seeded shuffle, so both sides take the same steps.
        `exp` comes from `Learner.score(samples)` (old/reference log-probs, values, GAE).
  ours-grpo  the same `Learner.update`, on a learner built as `--ppo.advantage grpo --ppo.normalize none
        --ppo.kl-beta 0` builds it: `ActorCritic.from_policy(policy, value_model=False)` (no value head, no
        critic trunk, no value loss), AdamW over the policy alone; `exp` from `Learner.score`, whose
        estimator reads the samples' question groups (`Sample.group`, via `train/groups.group_ids`): (reward
        - group mean) / group std, the same for every token of a completion, not whitened again (TRL does
        not). With beta 0 the reference log-probs are the policy's own (the learner's `ref` is the policy: KL 0,
        no second copy in memory, as TRL holds none at beta 0); `ragteam train ppo` itself still loads a
        frozen reference copy at kl_beta 0, one model's weights more than measured here.
  ours-grpo-prefix  ours-grpo with `--ppo.share-prefix`: the completions of one prompt are packed as one
        segment, the prompt once (`pack_samples(share_prefix=True)`: a 4D attention mask keeps each completion
        to the prompt and its own tokens; the scores equal the unshared ones). Its minibatches are --minibatch
        samples of a seeded shuffle of the prompt groups (whole groups, as `minibatches(share_prefix=True)`
        keeps them) rather than of the samples, so a group lands in one forward. tokens/s counts the same
        tokens as every side (each sample's prompt and completion); "computed" counts what its forward
        passes ran on, each group's prompt once per micro-batch (counted over the timed updates).
  trl   the update part of `PPOTrainer.train()` of trl 1.12.0, copied statement for statement (below, with
        the source's variable names) and run on the trainer's own objects: `PolicyAndValueWrapper`
        (policy + `AutoModelForSequenceClassification` value model) prepared by its `Accelerator`, its
        optimizer (Trainer default: fused AdamW), its `forward`, `selective_log_softmax`, `masked_mean`.
        Per PPO epoch: `np.random.permutation`, minibatches, micro-batches of --micro-batch samples under
        `accelerator.accumulate`: forward of value backbone and policy on the full padded sequences (all
        positions' logits), slicing to the responses, losses, `accelerator.backward`, `optimizer.step`,
        no-grad statistics (entropy over the vocabulary); then the scheduler step. Its rollout tensors are
        as `train()` builds them: queries left-padded to the batch's longest prompt (its collator), responses
        right-padded to the longest completion; old log-probs, reference log-probs, values, rewards and
        GAE from `train()`'s no-grad code, with one forward of the policy in place of `generate()`'s scores.
  trl-grpo  `trl.GRPOTrainer` (the installed trl, 1.16 when written) driven through its own training code,
        without generation: the trainer is built as usual (policy instance, tokenizer, a reward function
        that is never called, beta 0, so no reference model), and `Trainer._prepare_for_training` prepares
        model, optimizer (Trainer default: fused AdamW) and scheduler as `train()` does. Its
        `_generate_and_score_completions` is replaced by one that returns the dict the original returns
        after generating, built before timing with the original's code: prompts left-padded and
        completions right-padded (`trl.trainer.utils.pad`), masks, `num_items_in_batch`, the old per-token
        log-probs from its `_get_per_token_logps_and_entropies` (only where the original computes them:
        when a generation batch spans several optimizer steps), and its group advantages ((reward - group
        mean) / (group std + 1e-4), `scale_rewards="group"`). Timed, per update: the inner loop of
        `Trainer._run_epoch` over one generation batch x num_iterations (= --epochs): `training_step`
        (which runs `_prepare_inputs`: shuffle, split into --micro-batch chunks, buffering; then
        `compute_loss` -> `_compute_loss`: the policy forward with TRL's fused, chunked LM head giving
        per-token log-probs and entropies without the full logits tensor (off CUDA/XPU it projects every
        position of the padded rows, prompts included, onto the vocabulary: its label-only scoring is for
        Triton devices), the clipped loss of its default loss_type (dapo), `accelerator.backward`),
        and on every --minibatch / --micro-batch micro-batches `_clip_grad_norm`, `optimizer.step`,
        `lr_scheduler.step`, `zero_grad`. GRPOConfig: per_device_train_batch_size=--micro-batch,
        gradient_accumulation_steps=minibatch/micro, steps_per_generation=samples/micro (generation batch =
        --samples), num_generations=--group-size, num_iterations=--epochs, beta=0, bf16=False, constant LR.

TRL 1.12 PPO configuration: per_device_train_batch_size=--micro-batch, gradient_accumulation_steps=samples/micro,
num_mini_batches=samples/minibatch (rollout batch = --samples), bf16=False (its default bf16=True would not
reach its own Accelerator anyway), temperature 1.0 as ours. Two adjustments, both so that it does the same
work as ours: (1) trl 1.12 leaves its Accelerator accumulating over gradient_accumulation_steps
micro-batches, which with num_mini_batches > 1 steps the optimizer once per rollout batch rather than once
per minibatch (and, on a dataloader's last batch, once per micro-batch); the bench sets the accumulation to
minibatch/micro, the intended one step per minibatch. (2) The reward model TRL requires is the value model
object (its rewards are not used: both sides take the same synthetic rewards), so both sides hold the same
three networks: policy, critic, reference. The untimed advantage pass runs in micro-batch chunks on both
sides (TRL's `local_rollout_forward_batch_size` = --micro-batch) so that it does not set the peak.

tokens/s counts the real (unpadded) prompt + completion tokens of one update (samples x epochs) over its
median seconds; "computed" is what the forward passes run on (TRL: padded rows). Peak RSS is the child's
resident peak over its whole life (loading, advantage pass, updates: ru_maxrss); "update peak" is its
resident high-water mark over the updates alone (reset through /proc/self/clear_refs just before them; the
models, the batch and the rest already resident count, the advantage pass's transients do not). Target: ours
>= 1.5x TRL's tokens/s (ours / trl for PPO, ours-grpo / trl-grpo and ours-grpo-prefix / trl-grpo for GRPO: each
pair side by side in one run).

    # smoke: ~15 s (+ ~1 minute the first time, to create .venv-trl112/)
    .venv/bin/python bench/ppo.py --model tiny --samples 8 --prompt-tokens 50 90 --completion-tokens 8 16 --micro-tokens 256
    # smoke, GRPO sides only (no TRL 1.12 environment needed): seconds
    .venv/bin/python bench/ppo.py --model tiny --sides ours-grpo ours-grpo-prefix trl-grpo --samples 4 --group-size 2 --minibatch 2 --micro-batch 1 --prompt-tokens 20 30 --completion-tokens 4 8 --micro-tokens 128 --repeats 1 --warmup 0
    # SmolLM2, PPO sides, small: ~10 minutes on 2 busy cores (~80 s per update and side, 11-12 GB peak)
    .venv/bin/python bench/ppo.py --sides ours ours-shared trl --samples 4 --minibatch 2 --repeats 2
    # SmolLM2, GRPO sides: 8 samples = 2 prompts x 4 completions, minibatches of 4 (2 optimizer steps)
    .venv/bin/python bench/ppo.py --sides ours-grpo trl-grpo --samples 8 --minibatch 4 --repeats 1 --warmup 1
    # SmolLM2, the default batch (16 samples = 4 prompts x 4 completions for GRPO, minibatches of 4), all sides
    .venv/bin/python bench/ppo.py --json ppo-bench.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRL_VERSION = "1.12.0"
TORCH_VERSION = "2.13.0"
DEFAULT_VENV = ROOT / ".venv-trl112"
LOWEST_ID = 100  # random token ids start here: above every special token (pad, eos, chat markers)
SIDES = ("ours", "ours-shared", "trl", "ours-grpo", "ours-grpo-prefix", "trl-grpo")
GRPO_SIDES = ("ours-grpo", "ours-grpo-prefix", "trl-grpo")
PAIRS = (
    ("ours", "trl"),
    ("ours-shared", "trl"),
    ("ours-grpo", "trl-grpo"),
    ("ours-grpo-prefix", "trl-grpo"),
)  # compared, first / second


# ---- the shared batch (standard library only: both environments build it) -------------------------------


def make_samples(args: argparse.Namespace, vocab_size: int, group_size: int = 1) -> list[dict]:
    """--samples acts: random prompt and completion ids of seeded lengths, and a reward in [0, 1].

    group_size > 1 (the GRPO sides): --samples / group_size groups, consecutive, each of group_size acts that
    share one prompt (its ids drawn once) and differ in completion ids, lengths and rewards; each act's
    "group" is its group's number. group_size 1 draws the PPO batch (every act its own prompt) unchanged."""
    rng = random.Random(args.seed)
    out = []
    if group_size == 1:
        for _ in range(args.samples):
            p = rng.randint(*args.prompt_tokens)
            c = rng.randint(*args.completion_tokens)
            out.append(
                {
                    "prompt": [rng.randrange(LOWEST_ID, vocab_size) for _ in range(p)],
                    "completion": [rng.randrange(LOWEST_ID, vocab_size) for _ in range(c)],
                    "reward": rng.random(),
                }
            )
        return out
    for g in range(args.samples // group_size):
        p = rng.randint(*args.prompt_tokens)
        prompt = [rng.randrange(LOWEST_ID, vocab_size) for _ in range(p)]
        for _ in range(group_size):
            c = rng.randint(*args.completion_tokens)
            out.append(
                {
                    "prompt": prompt,
                    "completion": [rng.randrange(LOWEST_ID, vocab_size) for _ in range(c)],
                    "reward": rng.random(),
                    "group": g,
                }
            )
    return out


def group_size_of(side: str, args: argparse.Namespace) -> int:
    """The batch a side trains on: grouped (--group-size) for the GRPO sides, one act per prompt otherwise."""
    return args.group_size if side in GRPO_SIDES else 1


def fingerprint(samples: list[dict]) -> str:
    h = hashlib.sha256()
    for s in samples:
        h.update(json.dumps([s["prompt"], s["completion"], round(s["reward"], 9)]).encode())
    return h.hexdigest()[:12]


def vocab_size(model_path: str) -> int:
    return int(json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))["vocab_size"])


# ---- measurement helpers -----------------------------------------------------------------------------------


def reset_peak() -> bool:
    """Reset the process's resident high-water mark (VmHWM) to its current RSS; False where not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_mb() -> float | None:
    """VmHWM of this process in MB (None off Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def time_updates(name: str, update, args: argparse.Namespace) -> tuple[list[float], float, float | None]:
    """--warmup untimed then --repeats timed calls of `update()`: (seconds of each timed call, the process's
    peak RSS in MB, the peak over the updates alone or None). Resetting VmHWM resets ru_maxrss too, so the
    process's peak so far is read first."""
    before = ru_maxrss_mb()
    can_reset = reset_peak()
    times = []
    for i in range(args.warmup + args.repeats):
        t0 = time.perf_counter()
        update(i)
        seconds = time.perf_counter() - t0
        warm = i < args.warmup
        if not warm:
            times.append(seconds)
        what = "warm-up" if warm else f"repeat {i - args.warmup + 1}/{args.repeats}"
        print(f"  {name}: {what} {seconds:.2f} s", file=sys.stderr, flush=True)
    return times, max(before, ru_maxrss_mb()), (peak_mb() if can_reset else None)


def ru_maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def result(name: str, samples: list[dict], args, measured, steps, computed, extra) -> dict:
    times, process_peak, update_peak = measured
    tokens = sum(len(s["prompt"]) + len(s["completion"]) for s in samples) * args.epochs
    median = statistics.median(times)
    import torch

    return {
        "side": name,
        "fingerprint": fingerprint(samples),
        "tokens_per_update": tokens,
        "computed_tokens_per_update": computed * args.epochs,
        "median_s": median,
        "times_s": times,
        "tokens_per_s": tokens / median,
        "optimizer_steps_per_update": steps,
        "peak_rss_mb": process_peak,
        "update_peak_mb": update_peak,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        **extra,
    }


# ---- ours --------------------------------------------------------------------------------------------------


def side_ours(args: argparse.Namespace) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragteam.train.actor_critic import ActorCritic
    from ragteam.train.experience import Sample, packed_tokens, prompt_groups
    from ragteam.train.ppo import learner as learner_module
    from ragteam.train.ppo.learner import Learner
    from ragteam.train.ppo_config import PPOOptions

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    grpo = args.side in ("ours-grpo", "ours-grpo-prefix")
    prefix = args.side == "ours-grpo-prefix"  # --ppo.share-prefix
    raw = make_samples(args, vocab_size(args.model_path), group_size_of(args.side, args))
    longest = max(len(s["prompt"]) + len(s["completion"]) for s in raw)
    if longest > args.micro_tokens:
        raise SystemExit(f"--micro-tokens {args.micro_tokens} < the longest sample ({longest} tokens)")

    # The models as `ppo.run.build` loads them, less the engine, workflow, data and output folder; the learner
    # is the one `train ppo` builds (`Learner.create`: its optimizer, schedule and KL controller).
    policy = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32)
    if grpo:  # beta 0, as TRL's GRPO side: no reference copy (the policy scores the KL term's ref: KL 0)
        ref = policy
    else:
        ref = AutoModelForCausalLM.from_pretrained(args.model_path, dtype=torch.float32)
        ref.eval().requires_grad_(False)
    # critic-free for GRPO: no value head, no critic trunk, no value pass or loss
    ac = ActorCritic.from_policy(policy, shared=args.side == "ours-shared", value_model=not grpo)
    ac.eval()
    critic_free = {"advantage": "grpo", "normalize": "none", "kl_beta": 0.0} if grpo else {}
    opts = PPOOptions(
        epochs=args.epochs,
        minibatch_tokens=args.minibatch * longest,  # unused: the split is by sample count (see below)
        micro_tokens=args.micro_tokens,
        max_sample_tokens=max(32, longest),
        share_prefix=prefix,
        bf16=args.bf16,
        lr_schedule="constant",  # every timed update at the same learning rate
        **critic_free,
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model_path)
    learner = Learner.create(
        ac, ref, tokenizer, opts, torch.device("cpu"), iterations=1, seed=args.seed, share_prefix=prefix
    )
    # GRPO: one question group per shared prompt (`train/groups.group_ids` reads `group`); PPO: all in one
    samples = [
        Sample(
            f"bench-{i}",
            0,
            "generator",
            s["prompt"],
            s["completion"],
            s["reward"],
            group=f"q{s.get('group', 0)}",
        )
        for i, s in enumerate(raw)
    ]

    # The same number of optimizer steps as TRL: minibatches of --minibatch samples of the update's seeded
    # shuffle, in place of its token-budgeted split (ours-grpo-prefix: a shuffle of whole prompt groups, as
    # `minibatches(share_prefix=True)` draws it).
    def sample_split(items, max_tokens, generator=None, share_prefix=False):
        if share_prefix:
            groups = prompt_groups(items, range(len(items)))
            order = [i for g in torch.randperm(len(groups), generator=generator).tolist() for i in groups[g]]
        else:
            order = torch.randperm(len(items), generator=generator).tolist()
        return [order[i : i + args.minibatch] for i in range(0, len(order), args.minibatch)]

    learner_module.minibatches = sample_split
    t0 = time.perf_counter()
    exp = learner.score(samples)
    print(
        f"  {args.side}: advantage pass {time.perf_counter() - t0:.2f} s (not timed)",
        file=sys.stderr,
        flush=True,
    )
    steps = [0]
    learner.optimizer.register_step_post_hook(lambda *a: steps.__setitem__(0, steps[0] + 1))
    ran = [0]  # ours-grpo-prefix: the real tokens its packed batches held, over every update
    if prefix:
        pack = learner_module.pack_samples

        def counted(batch, *a, **kw):
            ran[0] += packed_tokens(batch, kw.get("share_prefix", False))
            return pack(batch, *a, **kw)

        learner_module.pack_samples = counted

    measured = time_updates(args.side, lambda i: learner.update(exp, i), args)
    per_update = steps[0] // (args.warmup + args.repeats)
    computed = sum(len(s["prompt"]) + len(s["completion"]) for s in raw)
    if prefix:  # per epoch, as `result` scales it
        computed = ran[0] // ((args.warmup + args.repeats) * args.epochs)
        unshared = sum(s.length for s in samples)
        print(
            f"  {args.side}: computed {computed} tokens per epoch (unshared: {unshared})",
            file=sys.stderr,
            flush=True,
        )
    extra = {
        "transformers": transformers.__version__,
        "optimizer": "AdamW (" + ("fused" if learner.optimizer.defaults.get("fused") else "foreach") + ")",
        "attention": policy.config._attn_implementation,
        "precision": "bf16 autocast" if opts.bf16 else "float32",
    }
    if grpo:
        extra["advantage"] = (
            f"{opts.advantage} (normalize {opts.normalize}, kl_beta {opts.kl_beta}, critic none"
            + (", share_prefix)" if prefix else ")")
        )
    return result(args.side, raw, args, measured, per_update, computed, extra)


# ---- both TRL sides ---------------------------------------------------------------------------------------


def quiet_trl() -> None:
    """Silence the notices trl's import prints on every run (known, beside the point): call it before `import
    trl`. Both TRL sides, whichever trl (1.12 in its own environment, or the one installed with ragteam)."""
    import warnings

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # "trl.experimental is unstable": known
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5's renames, met in trl


def trl_start(bench: argparse.Namespace, group_size: int = 1) -> tuple[list[dict], Any, Any]:
    """What both TRL sides do first: transformers' logging quiet, torch's threads and seed, the synthetic
    batch (`make_samples`, in groups of `group_size`), and, as TRL's example scripts load them, a tokenizer
    that pads on the left (its pad id must be below the random ids) and the policy in float32.
    (batch, tokenizer, policy)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(bench.threads)
    torch.manual_seed(bench.seed)
    raw = make_samples(bench, vocab_size(bench.model_path), group_size)
    tokenizer = AutoTokenizer.from_pretrained(bench.model_path, padding_side="left")
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id >= LOWEST_ID:
        raise SystemExit(f"pad token id {tokenizer.pad_token_id}: not below {LOWEST_ID}, as the bench needs")
    policy = AutoModelForCausalLM.from_pretrained(bench.model_path, dtype=torch.float32)
    return raw, tokenizer, policy


# ---- TRL 1.12 ----------------------------------------------------------------------------------------------


def side_trl(bench: argparse.Namespace) -> dict:
    quiet_trl()
    import numpy as np
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl.experimental.ppo.ppo_trainer import INVALID_LOGPROB, forward, masked_mean, masked_whiten
    from trl.experimental.utils import empty_cache, first_true_indices, get_reward
    from trl.trainer.utils import pad, selective_log_softmax

    if trl.__version__ != TRL_VERSION:
        raise SystemExit(f"trl {trl.__version__} in {sys.executable}; this side needs trl {TRL_VERSION}")
    np.random.seed(bench.seed)
    # As TRL's PPO example script loads them: a left-padding tokenizer, the policy (trl_start), its
    # reference, and a sequence-classification value model (its score head new) from the same weights.
    raw, tokenizer, policy = trl_start(bench)
    n, m, micro = bench.samples, bench.minibatch, bench.micro_batch
    ref_policy = AutoModelForCausalLM.from_pretrained(bench.model_path, dtype=torch.float32)
    value_model = AutoModelForSequenceClassification.from_pretrained(
        bench.model_path, num_labels=1, dtype=torch.float32
    )
    dataset = Dataset.from_dict({"input_ids": [s["prompt"] for s in raw]})
    with tempfile.TemporaryDirectory(prefix="bench-ppo-trl-") as tmp:
        config = PPOConfig(
            output_dir=tmp,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=n // micro,
            num_mini_batches=n // m,
            num_ppo_epochs=bench.epochs,
            total_episodes=n,
            local_rollout_forward_batch_size=micro,
            temperature=1.0,
            bf16=bench.bf16,
            use_cpu=True,
            seed=bench.seed,
            report_to="none",
            disable_tqdm=True,
            num_sample_generations=0,
            save_strategy="no",
        )
        # trl 1.12 builds its Accelerator without the config's bf16: the environment reaches it
        if bench.bf16:
            os.environ["ACCELERATE_MIXED_PRECISION"] = "bf16"
        trainer = PPOTrainer(
            args=config,
            processing_class=tokenizer,
            model=policy,
            ref_model=ref_policy,
            reward_model=value_model,  # not used here: both sides take the same synthetic rewards
            train_dataset=dataset,
            value_model=value_model,
            eval_dataset=dataset,
        )
    # TRL leaves accumulation at gradient_accumulation_steps (n / micro); one step per minibatch instead.
    trainer.accelerator.gradient_accumulation_steps = m // micro

    args, accelerator, optimizer, model = trainer.args, trainer.accelerator, trainer.optimizer, trainer.model
    processing_class, ref_policy, device = trainer.processing_class, trainer.ref_model, accelerator.device
    steps = [0]
    optimizer.optimizer.register_step_post_hook(lambda *a: steps.__setitem__(0, steps[0] + 1))

    # ---- rollout tensors, as train() builds them (its collator; generate() padding), then its no-grad part
    t0 = time.perf_counter()
    data = trainer.data_collator([{"input_ids": s["prompt"]} for s in raw])
    queries = data["input_ids"].to(device)
    context_length = queries.shape[1]
    gen = [torch.tensor(s["completion"], device=device) for s in raw]
    query_responses = torch.cat((queries, pad(gen, processing_class.pad_token_id, "right")), 1)
    model.train()
    with torch.no_grad():
        responses, postprocessed_responses, logprobs, ref_logprobs = [], [], [], []
        sequence_lengths, values = [], []
        for i in range(0, queries.shape[0], args.local_rollout_forward_batch_size):
            query_response = query_responses[i : i + args.local_rollout_forward_batch_size]
            response = query_response[:, context_length:]
            # train() takes these from generate()'s scores; one forward of the policy gives the same
            output = forward(
                accelerator.unwrap_model(model).policy, query_response, processing_class.pad_token_id
            )
            logits = output.logits[:, context_length - 1 : -1]
            logits /= args.temperature + 1e-7
            logprob = selective_log_softmax(logits, response)
            del output, logits
            ref_output = forward(ref_policy, query_response, processing_class.pad_token_id)
            ref_logits = ref_output.logits[:, context_length - 1 : -1]
            ref_logits /= args.temperature + 1e-7
            ref_logprob = selective_log_softmax(ref_logits, response)
            del ref_output, ref_logits
            postprocessed_response = response  # stop_token_id None: no truncation
            sequence_length = first_true_indices(postprocessed_response == processing_class.pad_token_id) - 1
            unwrapped_value_model = accelerator.unwrap_model(model).value_model
            full_value, _, _ = get_reward(
                unwrapped_value_model, query_response, processing_class.pad_token_id, context_length
            )
            value = full_value[:, context_length - 1 : -1].squeeze(-1)
            responses.append(response)
            postprocessed_responses.append(postprocessed_response)
            logprobs.append(logprob)
            ref_logprobs.append(ref_logprob)
            sequence_lengths.append(sequence_length)
            values.append(value)
        responses = torch.cat(responses, 0)
        postprocessed_responses = torch.cat(postprocessed_responses, 0)
        logprobs = torch.cat(logprobs, 0)
        ref_logprobs = torch.cat(ref_logprobs, 0)
        sequence_lengths = torch.cat(sequence_lengths, 0)
        scores = torch.tensor([s["reward"] for s in raw], device=device)
        values = torch.cat(values, 0)
        response_idxs = torch.arange(responses.shape[1], device=responses.device).repeat(
            responses.shape[0], 1
        )
        padding_mask = response_idxs > sequence_lengths.unsqueeze(1)
        logprobs = torch.masked_fill(logprobs, padding_mask, INVALID_LOGPROB)
        ref_logprobs = torch.masked_fill(ref_logprobs, padding_mask, INVALID_LOGPROB)
        sequence_lengths_p1 = sequence_lengths + 1
        padding_mask_p1 = response_idxs > (sequence_lengths_p1.unsqueeze(1))
        values = torch.masked_fill(values, padding_mask_p1, 0)
        logr = ref_logprobs - logprobs
        kl = -logr if args.kl_estimator == "k1" else (logr.exp() - 1) - logr
        non_score_reward = -args.kl_coef * kl
        rewards = non_score_reward.clone()
        actual_start = torch.arange(rewards.size(0), device=rewards.device)
        actual_end = torch.where(sequence_lengths_p1 < rewards.size(1), sequence_lengths_p1, sequence_lengths)
        rewards[actual_start, actual_end] += scores
        lastgaelam = 0
        advantages_reversed = []
        gen_length = responses.shape[1]
        for t in reversed(range(gen_length)):
            nextvalues = values[:, t + 1] if t < gen_length - 1 else 0.0
            delta = rewards[:, t] + args.gamma * nextvalues - values[:, t]
            lastgaelam = delta + args.gamma * args.lam * lastgaelam
            advantages_reversed.append(lastgaelam)
        advantages = torch.stack(advantages_reversed[::-1], axis=1)
        returns = advantages + values
        advantages = masked_whiten(advantages, ~padding_mask)
        advantages = torch.masked_fill(advantages, padding_mask, 0)
    print(f"  trl: advantage pass {time.perf_counter() - t0:.2f} s (not timed)", file=sys.stderr, flush=True)

    stats_shape = (args.num_ppo_epochs, args.num_mini_batches, args.gradient_accumulation_steps)
    approxkl_stats = torch.zeros(stats_shape, device=device)
    pg_clipfrac_stats = torch.zeros(stats_shape, device=device)
    pg_loss_stats = torch.zeros(stats_shape, device=device)
    vf_loss_stats = torch.zeros(stats_shape, device=device)
    vf_clipfrac_stats = torch.zeros(stats_shape, device=device)
    entropy_stats = torch.zeros(stats_shape, device=device)
    ratio_stats = torch.zeros(stats_shape, device=device)

    def update(_: int) -> None:
        # ---- trl 1.12.0 PPOTrainer.train(), "Do multiple epochs of PPO training", statement for statement
        for ppo_epoch_idx in range(args.num_ppo_epochs):
            b_inds = np.random.permutation(args.local_batch_size)
            minibatch_idx = 0
            for mini_batch_start in range(0, args.local_batch_size, args.local_mini_batch_size):
                mini_batch_end = mini_batch_start + args.local_mini_batch_size
                mini_batch_inds = b_inds[mini_batch_start:mini_batch_end]
                gradient_accumulation_idx = 0
                for micro_batch_start in range(
                    0, args.local_mini_batch_size, args.per_device_train_batch_size
                ):
                    with accelerator.accumulate(model):
                        micro_batch_end = micro_batch_start + args.per_device_train_batch_size
                        micro_batch_inds = mini_batch_inds[micro_batch_start:micro_batch_end]
                        mb_advantage = advantages[micro_batch_inds]
                        mb_responses = responses[micro_batch_inds]
                        mb_query_responses = query_responses[micro_batch_inds]
                        mb_logprobs = logprobs[micro_batch_inds]
                        mb_return = returns[micro_batch_inds]
                        mb_values = values[micro_batch_inds]

                        output, vpred_temp = forward(model, mb_query_responses, processing_class.pad_token_id)
                        logits = output.logits[:, context_length - 1 : -1]
                        logits /= args.temperature + 1e-7
                        new_logprobs = selective_log_softmax(logits, mb_responses)
                        new_logprobs = torch.masked_fill(
                            new_logprobs, padding_mask[micro_batch_inds], INVALID_LOGPROB
                        )
                        vpred = vpred_temp[:, context_length - 1 : -1].squeeze(-1)
                        vpred = torch.masked_fill(vpred, padding_mask_p1[micro_batch_inds], 0)
                        vpredclipped = torch.clamp(
                            vpred,
                            mb_values - args.cliprange_value,
                            mb_values + args.cliprange_value,
                        )
                        vf_losses1 = torch.square(vpred - mb_return)
                        vf_losses2 = torch.square(vpredclipped - mb_return)
                        vf_loss_max = torch.max(vf_losses1, vf_losses2)
                        vf_loss = 0.5 * masked_mean(vf_loss_max, ~padding_mask_p1[micro_batch_inds])
                        vf_clipfrac = masked_mean(
                            (vf_losses2 > vf_losses1).float(), ~padding_mask_p1[micro_batch_inds]
                        )
                        logprobs_diff = new_logprobs - mb_logprobs
                        ratio = torch.exp(logprobs_diff)
                        pg_losses = -mb_advantage * ratio
                        pg_losses2 = -mb_advantage * torch.clamp(
                            ratio, 1.0 - args.cliprange, 1.0 + args.cliprange
                        )
                        pg_loss_max = torch.max(pg_losses, pg_losses2)
                        pg_loss = masked_mean(pg_loss_max, ~padding_mask[micro_batch_inds])
                        loss = pg_loss + args.vf_coef * vf_loss
                        accelerator.backward(loss)
                        optimizer.step()
                        optimizer.zero_grad()
                        with torch.no_grad():
                            pg_clipfrac = masked_mean(
                                (pg_losses2 > pg_losses).float(), ~padding_mask[micro_batch_inds]
                            )
                            prob_dist = torch.nn.functional.softmax(logits, dim=-1)
                            entropy = torch.logsumexp(logits, dim=-1) - torch.sum(prob_dist * logits, dim=-1)
                            approxkl = 0.5 * (logprobs_diff**2).mean()
                            at = ppo_epoch_idx, minibatch_idx, gradient_accumulation_idx
                            approxkl_stats[at] = approxkl
                            pg_clipfrac_stats[at] = pg_clipfrac
                            pg_loss_stats[at] = pg_loss
                            vf_loss_stats[at] = vf_loss
                            vf_clipfrac_stats[at] = vf_clipfrac
                            entropy_stats[at] = entropy.mean()
                            ratio_stats[at] = ratio.mean()
                    gradient_accumulation_idx += 1
                minibatch_idx += 1
                # del everything and empty cache
                del (
                    output, vpred_temp, logits, new_logprobs, vpred, vpredclipped,
                    vf_losses1, vf_losses2, vf_loss, vf_clipfrac, logprobs_diff, ratio, pg_losses, pg_losses2,
                    pg_loss_max, pg_loss, loss, pg_clipfrac, prob_dist, entropy, approxkl, mb_return,
                    mb_advantage, mb_values, mb_responses, mb_query_responses, mb_logprobs,
                )  # fmt: skip
                empty_cache()
        trainer.lr_scheduler.step()

    measured = time_updates("trl", update, bench)
    per_update = steps[0] // (bench.warmup + bench.repeats)
    computed = query_responses.numel()
    inner = optimizer.optimizer
    impl = (
        "fused" if inner.defaults.get("fused") else "foreach" if inner.defaults.get("foreach") else "default"
    )
    extra = {
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "optimizer": f"{type(inner).__name__} ({impl}; Trainer optim={getattr(args.optim, 'value', args.optim)})",
        "attention": policy.config._attn_implementation,
        "precision": _precision(accelerator.mixed_precision),
        "padded_width": int(query_responses.shape[1]),
    }
    return result("trl", raw, bench, measured, per_update, computed, extra)


# ---- TRL's GRPOTrainer (the installed trl) ------------------------------------------------------------------


def side_trl_grpo(bench: argparse.Namespace) -> dict:
    """GRPOTrainer's own training step on pre-generated completions (see the module docstring, trl-grpo)."""
    import contextlib
    import functools
    import warnings

    quiet_trl()
    warnings.filterwarnings("ignore", category=UserWarning, module="trl")  # its advice on GRPOConfig values
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import nanstd, pad

    g = bench.group_size
    raw, tokenizer, policy = trl_start(bench, g)
    n, m, micro = bench.samples, bench.minibatch, bench.micro_batch

    def never_called(prompts, completions, **_):  # rewards come from the synthetic batch
        raise RuntimeError("bench: the reward function is not called (no generation)")

    # one row per prompt, as GRPO's dataset is; its sampler repeats each num_generations times (not used here:
    # the generation batch is the synthetic one)
    dataset = Dataset.from_dict({"prompt": [f"bench prompt {k}" for k in range(n // g)]})
    steps_per_update = bench.epochs * n // m
    with tempfile.TemporaryDirectory(prefix="bench-grpo-trl-") as tmp:
        config = GRPOConfig(
            output_dir=tmp,
            per_device_train_batch_size=micro,
            gradient_accumulation_steps=m // micro,  # one optimizer step per --minibatch samples
            steps_per_generation=n // micro,  # generation batch = --samples
            num_generations=g,
            num_iterations=bench.epochs,  # passes over each generation batch
            max_completion_length=bench.completion_tokens[1],
            temperature=1.0,
            beta=0.0,  # no KL term, no reference model
            learning_rate=1e-6,  # ours' lr (PPOOptions.lr); TRL's default too
            lr_scheduler_type="constant",  # ours: a constant LambdaLR
            max_steps=steps_per_update * (bench.warmup + bench.repeats),
            bf16=bench.bf16,
            use_cpu=True,
            seed=bench.seed,
            report_to="none",
            disable_tqdm=True,
            save_strategy="no",
            logging_strategy="no",
        )
        trainer = GRPOTrainer(
            model=policy,
            reward_funcs=never_called,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
    torch.set_num_threads(bench.threads)  # whatever the trainer's setup did
    if trainer.ref_model is not None:
        raise SystemExit("trl-grpo: the trainer holds a reference model at beta 0; the bench assumes none")
    # What `Trainer.train()` does before its loop: the optimizer, `accelerator.prepare`, the scheduler.
    model, _ = trainer._prepare_for_training(config.max_steps, None, None)
    args, accelerator = trainer.args, trainer.accelerator
    device = accelerator.device
    steps = [0]
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # AcceleratedOptimizer wraps it
    inner.register_step_post_hook(lambda *a: steps.__setitem__(0, steps[0] + 1))

    # ---- the dict `_generate_and_score_completions` returns, built with its code (not timed) --------------
    t0 = time.perf_counter()
    model.train()  # as when `training_step` calls `_prepare_inputs`
    prompt_ids = [torch.tensor(s["prompt"]) for s in raw]
    prompt_mask = [torch.ones_like(ids, dtype=torch.long) for ids in prompt_ids]
    pad_id, multiple = trainer._tokenizer.pad_token_id, trainer.pad_to_multiple_of
    prompt_ids = pad(prompt_ids, padding_value=pad_id, padding_side="left", pad_to_multiple_of=multiple)
    prompt_mask = pad(prompt_mask, padding_value=0, padding_side="left", pad_to_multiple_of=multiple)
    completion_ids = [torch.tensor(s["completion"]) for s in raw]
    completion_mask = [torch.ones_like(ids, dtype=torch.long) for ids in completion_ids]
    completion_ids = pad(
        completion_ids, padding_value=pad_id, padding_side="right", pad_to_multiple_of=multiple
    )
    completion_mask = pad(completion_mask, padding_value=0, padding_side="right", pad_to_multiple_of=multiple)
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
    completion_ids, completion_mask = completion_ids.to(device), completion_mask.to(device)
    num_items_in_batch = accelerator.gather(completion_mask.sum()).sum()
    prompt_completion_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
    logits_to_keep = completion_ids.size(1)
    generate_every = args.steps_per_generation * trainer.num_iterations
    with torch.no_grad():
        # the original's condition: a generation batch that spans optimizer steps needs the old log-probs
        if args.gradient_accumulation_steps % generate_every != 0:
            old_per_token_logps, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                prompt_completion_ids,
                attention_mask,
                logits_to_keep,
                batch_size=args.per_device_train_batch_size,
            )
        else:
            old_per_token_logps = None
    # one reward function of weight 1, multi_objective_aggregation="sum_then_normalize", scale_rewards="group"
    rewards = torch.tensor([s["reward"] for s in raw], dtype=torch.float32, device=device)
    if trainer.scale_rewards != "group" or trainer.multi_objective_aggregation != "sum_then_normalize":
        raise SystemExit(f"trl-grpo: scale_rewards={trainer.scale_rewards!r}: the bench mirrors 'group' only")
    mean_grouped = torch.nanmean(rewards.view(-1, g), dim=1).repeat_interleave(g, dim=0)
    std_grouped = nanstd(rewards.view(-1, g), dim=1).repeat_interleave(g, dim=0)
    advantages = (rewards - mean_grouped) / (std_grouped + 1e-4)
    generated = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
        "num_items_in_batch": num_items_in_batch,
    }
    if old_per_token_logps is not None:
        generated["old_per_token_logps"] = old_per_token_logps
    # The trainer's `_prepare_inputs` calls this at the start of every generation batch, then shuffles the
    # result, splits it into steps_per_generation micro-batches and buffers them, as after a real generation.
    trainer._generate_and_score_completions = lambda inputs: dict(generated)
    generation_batch = [{"prompt": f"bench prompt {i // g}"} for i in range(n)]  # what the dataloader yields
    print(
        f"  trl-grpo: advantage pass {time.perf_counter() - t0:.2f} s (not timed)",
        file=sys.stderr,
        flush=True,
    )

    accum = args.gradient_accumulation_steps
    micro_steps = args.steps_per_generation * trainer.num_iterations  # one generation batch, all its passes
    trainer.current_gradient_accumulation_steps = accum
    model.zero_grad()

    def update(_: int) -> None:
        # ---- transformers' `Trainer._run_epoch` inner loop, for one generation batch x num_iterations
        for step in range(micro_steps):
            last = (step + 1) % accum == 0  # do_sync_step: the last micro-batch of an optimizer step
            accelerator.gradient_state._set_sync_gradients(last)
            sync = contextlib.nullcontext if last else functools.partial(accelerator.no_sync, model=model)
            with sync():
                trainer.training_step(model, generation_batch, None)
            if last:
                if args.max_grad_norm > 0:
                    trainer._clip_grad_norm(model)
                trainer.optimizer.step()
                if not accelerator.optimizer_step_was_skipped:
                    trainer.lr_scheduler.step()
                model.zero_grad()

    measured = time_updates("trl-grpo", update, bench)
    per_update = steps[0] // (bench.warmup + bench.repeats)
    computed = prompt_completion_ids.numel()
    impl = (
        "fused" if inner.defaults.get("fused") else "foreach" if inner.defaults.get("foreach") else "default"
    )
    extra = {
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "optimizer": f"{type(inner).__name__} ({impl}; Trainer optim={getattr(args.optim, 'value', args.optim)})",
        "attention": policy.config._attn_implementation,
        "precision": _precision(accelerator.mixed_precision),
        "padded_width": int(prompt_completion_ids.shape[1]),
        "advantage": f"GRPOTrainer group advantages (scale_rewards {trainer.scale_rewards}, beta {trainer.beta})",
        "loss_type": trainer.loss_type,
        "old_logps": "computed"
        if old_per_token_logps is not None
        else "per_token_logps.detach() (TRL's shortcut)",
    }
    return result("trl-grpo", raw, bench, measured, per_update, computed, extra)


# ---- the parent: environment, children, table -------------------------------------------------------------


def ensure_trl_venv(venv: Path) -> tuple[Path, float | None]:
    """The TRL 1.12 environment's python, created or repaired when missing; (python, seconds spent or None)."""
    python = venv / "bin" / "python"
    if _trl_versions(python) == (TORCH_VERSION, TRL_VERSION):
        return python, None
    print(
        f"creating {venv} (torch=={TORCH_VERSION} CPU, trl=={TRL_VERSION}; about a minute)",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    constraints = venv / "bench-constraints.txt"  # torch stays the local CPU wheel whatever trl asks for
    constraints.write_text(f"torch=={TORCH_VERSION}\n", encoding="utf-8")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--constraint", str(constraints)]
    for spec in (f"torch=={TORCH_VERSION}", f"trl=={TRL_VERSION}"):  # torch first, then trl against it
        proc = subprocess.run([*pip, spec], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(
                f"pip install {spec} into {venv} failed:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
            )
    got = _trl_versions(python)
    if got != (TORCH_VERSION, TRL_VERSION):
        raise SystemExit(f"{venv}: torch/trl {got}, expected {(TORCH_VERSION, TRL_VERSION)}")
    seconds = time.perf_counter() - t0
    print(f"created {venv} in {seconds:.0f} s", file=sys.stderr, flush=True)
    return python, seconds


def _trl_versions(python: Path) -> tuple[str, str] | None:
    if not python.exists():
        return None
    code = "import torch, trl; print(torch.__version__.split('+')[0], trl.__version__)"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    parts = proc.stdout.split()
    return (parts[0], parts[1]) if proc.returncode == 0 and len(parts) == 2 else None


def run_side(side: str, python: Path, args: argparse.Namespace) -> dict:
    """One side in a fresh process (its progress lines pass through to stderr); its RESULT."""
    cmd = [str(python), str(Path(__file__).resolve()), "--side", side, *_forwarded(args)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    env["TOKENIZERS_PARALLELISM"] = "false"
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"side {side} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    return json.loads(line[len("RESULT ") :]) | {"wall_s": time.perf_counter() - start}


def _forwarded(args: argparse.Namespace) -> list[str]:
    out = ["--model", args.model, "--model-path", args.model_path, "--seed", str(args.seed)]
    out += ["--samples", str(args.samples), "--minibatch", str(args.minibatch)]
    out += ["--prompt-tokens", *map(str, args.prompt_tokens)]
    out += ["--completion-tokens", *map(str, args.completion_tokens)]
    out += ["--micro-batch", str(args.micro_batch), "--micro-tokens", str(args.micro_tokens)]
    out += ["--epochs", str(args.epochs), "--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    out += ["--threads", str(args.threads), "--group-size", str(args.group_size)]
    return out + (["--bf16"] if args.bf16 else [])


def _precision(mixed: str) -> str:
    """An Accelerator's mixed_precision as the report names it."""
    return "float32" if mixed == "no" else f"{mixed} autocast"


def _mb(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f}"


def report(args: argparse.Namespace, results: list[dict], venv_s: float | None) -> None:
    by = {r["side"]: r for r in results}
    ppo = next((r for r in results if r["side"] not in GRPO_SIDES), None)
    grpo = next((r for r in results if r["side"] in GRPO_SIDES), None)
    batches = []
    if ppo is not None:
        batches.append(
            f"PPO batch (ours, ours-shared, trl): one prompt per act, fingerprint {ppo['fingerprint']}, "
            f"{ppo['tokens_per_update']} tokens per update"
        )
    if grpo is not None:
        batches.append(
            f"GRPO batch (ours-grpo, ours-grpo-prefix, trl-grpo): {args.samples // args.group_size} prompts x {args.group_size} "
            f"completions, fingerprint {grpo['fingerprint']}, {grpo['tokens_per_update']} tokens per update"
        )
    print(
        f"\nPolicy update on {args.model} ({args.model_path}), CPU, {args.threads} thread(s), "
        f"{platform.machine()} ({os.cpu_count()} CPUs)\n"
        f"batch: {args.samples} samples (prompts {args.prompt_tokens[0]}-{args.prompt_tokens[1]}, completions "
        f"{args.completion_tokens[0]}-{args.completion_tokens[1]} tokens, seed {args.seed}) x {args.epochs} "
        f"epoch(s); minibatches of {args.minibatch} samples; micro-batches: ours <= {args.micro_tokens} packed "
        f"tokens, TRL {args.micro_batch} padded samples; median of {args.repeats} update(s) after {args.warmup} "
        f"warm-up, best of {args.rounds} round(s)\n" + "".join(f"{b}\n" for b in batches)
    )
    head = f"{'side':<16} {'s/update':>9} {'tokens/update':>14} {'computed/update':>16} {'tokens/s':>9}"
    print(f"{head} {'steps':>6} {'peak RSS MB':>12} {'update peak MB':>15}")
    for r in results:
        cells = f"{r['median_s']:>9.2f} {r['tokens_per_update']:>14} {r['computed_tokens_per_update']:>16}"
        cells += f" {r['tokens_per_s']:>9.1f} {r['optimizer_steps_per_update']:>6}"
        print(f"{r['side']:<16} {cells} {r['peak_rss_mb']:>12.0f} {_mb(r['update_peak_mb']):>15}")
    print()
    for r in results:
        times = ", ".join(f"{t:.2f}" for t in r["times_s"])
        versions = f"torch {r['torch']}, transformers {r['transformers']}" + (
            f", trl {r['trl']}" if "trl" in r else ""
        )
        line = f"{r['side']}: updates {times} s; {versions}; {r['optimizer']}; attention {r['attention']}"
        line += f"; {r['precision']}"
        if "advantage" in r:
            line += f"; {r['advantage']}"
        if "loss_type" in r:
            line += f"; loss_type {r['loss_type']}, old log-probs {r['old_logps']}"
        print(line)
    if venv_s is not None:
        print(f"TRL environment created in {venv_s:.0f} s")
    for ours, theirs in PAIRS:
        if ours in by and theirs in by:
            compare(ours, by[ours], theirs, by[theirs])


def compare(name: str, ours: dict, other: str, trl: dict) -> None:
    problems = []
    if ours["fingerprint"] != trl["fingerprint"]:
        problems.append(f"different batches ({ours['fingerprint']} vs {trl['fingerprint']})")
    if ours["optimizer_steps_per_update"] != trl["optimizer_steps_per_update"]:
        problems.append("different numbers of optimizer steps")
    ratio = ours["tokens_per_s"] / trl["tokens_per_s"]
    verdict = "ok" if ratio >= 1.5 else "below the 1.5x target"
    memory = f"peak RSS {ours['peak_rss_mb'] / trl['peak_rss_mb']:.2f}x"
    if ours["update_peak_mb"] and trl["update_peak_mb"]:
        memory += f", update peak {ours['update_peak_mb'] / trl['update_peak_mb']:.2f}x"
    print(f"{name} / {other}: {ratio:.2f}x tokens/s ({verdict}); {memory}")
    for p in problems:
        print(f"WARNING: {name} / {other}: {p}: the comparison is not like for like")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2", help="smollm2, tiny or a Hugging Face model folder")
    p.add_argument("--samples", type=int, default=16, help="acts in the batch (TRL: its rollout batch)")
    p.add_argument("--prompt-tokens", type=int, nargs=2, default=[500, 900], metavar=("MIN", "MAX"))
    p.add_argument("--completion-tokens", type=int, nargs=2, default=[16, 48], metavar=("MIN", "MAX"))
    p.add_argument("--minibatch", type=int, default=4, help="samples per optimizer step (every side)")
    p.add_argument("--micro-batch", type=int, default=2, help="TRL: samples per forward/backward")
    p.add_argument("--micro-tokens", type=int, default=2048, help="ours: tokens per packed forward/backward")
    p.add_argument(
        "--epochs", type=int, default=1, help="passes over the batch per update (trl-grpo: num_iterations)"
    )
    p.add_argument(
        "--group-size",
        type=int,
        default=4,
        help="GRPO sides: completions per prompt (TRL's num_generations); --samples must be a multiple",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed updates per side (the median is reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed updates first")
    p.add_argument("--rounds", type=int, default=1, help="run every side this many times; keep each's best")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads on each side")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--bf16",
        action="store_true",
        help="every side under bfloat16 autocast, weights float32: ours --ppo.bf16, TRL its Accelerator's "
        "mixed_precision bf16 (CPUs with AMX or AVX512-BF16, GPUs)",
    )
    p.add_argument(
        "--sides",
        nargs="+",
        default=list(SIDES),
        choices=SIDES,
        help="PPO: ours, ours-shared (value head on the policy's trunk), trl (TRL 1.12's PPO); critic-free "
        "GRPO: ours-grpo, ours-grpo-prefix (--ppo.share-prefix), trl-grpo (TRL's GRPOTrainer); default all",
    )
    p.add_argument(
        "--trl-venv", type=Path, default=DEFAULT_VENV, help="TRL 1.12 environment (made if missing)"
    )
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    p.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # child process: measure one side
    p.add_argument("--model-path", help=argparse.SUPPRESS)  # child process: the resolved model folder
    args = p.parse_args(argv)
    if args.samples % args.minibatch or args.minibatch % args.micro_batch:
        p.error("--samples must be a multiple of --minibatch, and --minibatch of --micro-batch (TRL's sizes)")
    for lo, hi in (args.prompt_tokens, args.completion_tokens):
        if not 1 <= lo <= hi:
            p.error("token ranges are MIN MAX with 1 <= MIN <= MAX")
    if min(args.repeats, args.threads, args.epochs, args.rounds) < 1 or args.warmup < 0:
        p.error("--repeats, --threads, --epochs and --rounds must be >= 1, --warmup >= 0")
    if set(args.sides if args.side is None else [args.side]) & set(GRPO_SIDES):
        if args.group_size < 2 or args.samples % args.group_size:
            p.error(
                "the GRPO sides need --group-size >= 2 and --samples a multiple of it "
                "(or leave them out: --sides ours ours-shared trl)"
            )

    if args.side:
        fn = {"trl": side_trl, "trl-grpo": side_trl_grpo}.get(args.side, side_ours)
        print("RESULT " + json.dumps(fn(args)), flush=True)
        return 0

    os.environ.setdefault("RAGTEAM_HOME", str(ROOT / ".ragteam"))
    from ragteam.config import setup_caches
    from ragteam.llm.local import resolve_model_path

    setup_caches()  # offline Hugging Face, caches under RAGTEAM_HOME: inherited by every child
    args.model_path = str(resolve_model_path(args.model))
    # every side but trl runs with this interpreter (trl-grpo: the trl installed with ragteam)
    pythons = {side: Path(sys.executable) for side in SIDES if side != "trl"}
    venv_s = None
    if "trl" in args.sides:
        pythons["trl"], venv_s = ensure_trl_venv(args.trl_venv)

    best: dict[str, dict] = {}
    for round_ in range(args.rounds):
        order = args.sides if round_ % 2 == 0 else args.sides[::-1]
        for side in order:
            print(f"round {round_ + 1}/{args.rounds}: {side}", file=sys.stderr, flush=True)
            r = run_side(side, pythons[side], args) | {"round": round_}
            if side not in best or r["tokens_per_s"] > best[side]["tokens_per_s"]:
                best[side] = r
    results = [best[side] for side in SIDES if side in best]
    report(args, results, venv_s)
    if args.json:
        out = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
        out |= {"results": results, "venv_seconds": venv_s}
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
