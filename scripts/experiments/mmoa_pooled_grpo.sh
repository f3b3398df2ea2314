#!/usr/bin/env bash
# MMOA-RAG under the pooled corpus on the 2 CPU cores: does critic-free GRPO from the SFT start of
# mmoa_pooled.sh beat that start on 500 held-out questions? The plan is docs/results.md "Pre-registered: MMOA-RAG
# SFT -> GRPO under the pooled corpus (CPU)", written before the run. Run mmoa_pooled.sh first (its SFT start and
# its 100-question SFT eval are reused).
#
#   bash scripts/experiments/mmoa_pooled_grpo.sh        # the CPU run; re-run it to resume after an interruption
#
# Stages under $WORK: the SFT eval extended from 100 to $EVAL_LIMIT held-out questions (its first 100 episodes
# are mmoa_pooled.sh's, made with the same settings) side by side with GRPO (one torch thread each), then the
# GRPO eval on the same questions, then the paired comparison. A stage whose output exists is not run again;
# `train ppo --resume` and eval's own resume continue an interrupted stage.
set -euo pipefail
cd "$(dirname "$0")/../.."
RT=${RAGTEAM:-.venv/bin/ragteam}
DATA_DIR=${DATA_DIR:-../shared/data}
D=$DATA_DIR/hotpotqa-dev-500.jsonl
W=${WORK:-runs/mmoa-pooled}
SFT=${SFT:-$W/sft/checkpoint-20}
EVAL_LIMIT=${EVAL_LIMIT:-500}
ITERS=${ITERS:-8}            # 8 x 8 questions x group 8 = 512 GRPO episodes (one H200 iteration's worth)
QPI=${QPI:-8}
GROUP=${GROUP:-8}
BUDGET_S=${BUDGET_S:-20000}  # a safety cap (5,400 s until a deviation: docs/results.md); the iterations end the run
BATCH=${BATCH:-32}
H=$W/heldout-900.jsonl
M="--workflow mmoa --profile small --variant s-g --candidates 5 --selector-constrained --fill-from-question"
R="--corpus pooled --retriever.kind bm25 --topk 5"
E="$M $R --data $H --limit $EVAL_LIMIT --rollout.max-concurrent $BATCH --policy.max-batch-size $BATCH"
[ -d "$SFT" ] && [ -f "$H" ] || { echo "no SFT start at $SFT or no $H: run scripts/experiments/mmoa_pooled.sh first"; exit 2; }
t0=$SECONDS
stamp() { echo "[mmoa_pooled_grpo] $(date +%T) +$((SECONDS - t0))s $*"; }

# The SFT arm: mmoa_pooled.sh's eval of the first 100 held-out questions, resumed to EVAL_LIMIT (the only
# setting that differs is --limit, so the copied config.yaml gets the new limit and eval resumes it).
S=$W/eval-sft-$EVAL_LIMIT
if [ ! -d "$S" ]; then
  mkdir -p "$S"
  cp "$W/eval-sft/episodes.jsonl" "$S/"
  sed "s/^  limit: 100$/  limit: $EVAL_LIMIT/; s#out: $W/eval-sft\$#out: $S#" "$W/eval-sft/config.yaml" >"$S/config.yaml"
fi
pids=()
if [ ! -f "$S/metrics.json" ]; then
  stamp "eval: SFT start, $EVAL_LIMIT questions (resumed)"
  /usr/bin/time -f "eval sft: %e s wall" $RT eval $E --policy.model "$SFT" --policy.threads 1 --out "$S" \
    --no-progress >>"$W/eval-sft-$EVAL_LIMIT.log" 2>&1 &
  pids+=($!)
fi
G=$W/grpo
if [ ! -f "$G/model.safetensors" ]; then
  stamp "GRPO: $ITERS iterations of $QPI questions x $GROUP"
  resume=""; compgen -G "$G/checkpoint-*" >/dev/null && resume=--resume
  /usr/bin/time -f "grpo: %e s wall" $RT train ppo --recipe mmoa $M $R --data "$D" --limit 400 --policy.model "$SFT" \
    --out "$G" $resume --iterations "$ITERS" --budget-seconds "$BUDGET_S" --questions-per-iteration "$QPI" \
    --rollout.group-size "$GROUP" --ppo.advantage grpo --ppo.train-roles selector,generator \
    --ppo.lr 2e-6 --ppo.lr-schedule constant --ppo.target-kl 0.1 \
    --ppo.kl-beta 0 --ppo.kl-anneal-to 0 --ppo.kl-beta-min 0 --ppo.normalize global \
    --ppo.minibatch-tokens 32768 --ppo.micro-tokens 4096 --threads 1 --policy.threads 1 \
    --rollout.max-concurrent 64 --policy.max-batch-size 64 --no-progress >>"$W/grpo.log" 2>&1 &
  pids+=($!)
fi
for p in "${pids[@]}"; do wait "$p"; done
if [ ! -f "$W/eval-grpo-$EVAL_LIMIT/metrics.json" ]; then
  stamp "eval: GRPO policy, $EVAL_LIMIT questions"
  /usr/bin/time -f "eval grpo: %e s wall" $RT eval $E --policy.model "$G" --policy.threads 2 \
    --out "$W/eval-grpo-$EVAL_LIMIT" --no-progress >>"$W/eval-grpo-$EVAL_LIMIT.log" 2>&1
fi
stamp "paired comparison"
$RT compare "$S" "$W/eval-grpo-$EVAL_LIMIT" | tee "$W/compare-grpo.txt"
$RT compare "$S" "$W/eval-grpo-$EVAL_LIMIT" --json >"$W/compare-grpo.json"
stamp "done"
