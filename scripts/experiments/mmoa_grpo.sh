#!/usr/bin/env bash
# MMOA-RAG (S-G, K = 5), SFT -> critic-free GRPO on Selector and Generator, evaluated on held-out questions.
# The run behind docs/results.md "MMOA-RAG: SFT -> GRPO at GPU scale". Every setting is fixed here, before the
# run; nothing is chosen on the held-out questions (400-499 of HotpotQA-500; training uses 0-399).
#
#   bash scripts/experiments/mmoa_grpo.sh                          # the GPU run (one H100/H200, ~10 min)
#   POLICY=tiny SFT_STEPS=2 QPI=2 GROUP=2 ITERS=2 EVAL_LIMIT=2 \
#     bash scripts/experiments/mmoa_grpo.sh                        # a CPU dry run of the same pipeline
#   FRESH=1 ...                                                    # start over in a WORK that holds a run
#
# Stages (each writes its own folder under $WORK): SFT data from MMOA-RAG's heuristic labels, SFT (the CPU
# pilots' 20 steps), greedy eval of the SFT start, GRPO until its time budget, greedy eval of the result,
# and the paired comparison (bootstrap on F1 / cover-EM, McNemar on EM, sign test on invalid acts).
set -euo pipefail
cd "$(dirname "$0")/../.."
RT=${RAGTEAM:-.venv/bin/ragteam}
D=${DATA:-../shared/data/hotpotqa-dev-500.jsonl}
W=${WORK:-runs/mmoa-grpo}
POLICY=${POLICY:-smollm2}
SFT_STEPS=${SFT_STEPS:-20}
QPI=${QPI:-64}              # questions per iteration (the paper's buffer is 128)
GROUP=${GROUP:-8}           # episodes per question: the GRPO group
ITERS=${ITERS:-60}          # an upper bound: the time budget ends the run first
BUDGET_S=${BUDGET_S:-240}   # GRPO wall seconds (checked after each rollout)
LR=${LR:-2e-6}              # chosen on training questions (docs/results.md, "Why ... diverged")
EVAL_LIMIT=${EVAL_LIMIT:-100}
BATCH=${BATCH:-128}         # sequences decoded together, episodes in flight
MB_TOKENS=${MB_TOKENS:-32768}

R="--retriever.kind bm25 --topk 5"
M="--workflow mmoa --variant s-g --candidates 5 --selector-constrained"
E="$M $R --data $D --offset 400 --limit $EVAL_LIMIT --rollout.max-concurrent $BATCH --policy.max-batch-size $BATCH"
if [ -e "$W/sft" ] || [ -e "$W/grpo" ]; then  # trainers never overwrite their own checkpoints
  [ "${FRESH:-0}" = 1 ] || { echo "$W already holds a run: FRESH=1 starts it over, or set WORK"; exit 2; }
  rm -rf "$W/sft" "$W/grpo"
fi
mkdir -p "$W"
t0=$SECONDS
stamp() { echo "[mmoa_grpo] $(date +%T) +$((SECONDS - t0))s $*"; }
log=""
trap '[ -n "$log" ] && tail -n 40 "$log"' ERR   # a failed stage shows the end of its log

stamp "SFT data"; log="$W/collect.log"
$RT collect sft $M $R --data "$D" --limit 400 --out "$W/sft-data" --overwrite --no-progress >"$W/collect.log" 2>&1
stamp "SFT ($SFT_STEPS steps)"; log="$W/sft.log"
$RT train sft --data "$W/sft-data/sft.jsonl" --out "$W/sft" --policy.model "$POLICY" --max-steps "$SFT_STEPS" \
  --batch-size 4 --save-steps "$SFT_STEPS" --max-length 2048 --no-progress >"$W/sft.log" 2>&1
SFT="$W/sft/checkpoint-$SFT_STEPS"
stamp "eval of the SFT start"; log="$W/eval-sft.log"
$RT eval $E --policy.model "$SFT" --out "$W/eval-sft" --overwrite --no-progress >"$W/eval-sft.log" 2>&1
stamp "GRPO (budget ${BUDGET_S}s)"; log="$W/grpo.log"
$RT train ppo --recipe mmoa $M $R --data "$D" --limit 400 --policy.model "$SFT" --out "$W/grpo" \
  --iterations "$ITERS" --budget-seconds "$BUDGET_S" --questions-per-iteration "$QPI" \
  --rollout.group-size "$GROUP" --ppo.advantage grpo --ppo.train-roles selector,generator \
  --ppo.lr "$LR" --ppo.lr-schedule constant --ppo.target-kl 0.1 \
  --ppo.kl-beta 0 --ppo.kl-anneal-to 0 --ppo.kl-beta-min 0 \
  --ppo.minibatch-tokens "$MB_TOKENS" --ppo.micro-tokens "$MB_TOKENS" \
  --rollout.max-concurrent "$BATCH" --policy.max-batch-size "$BATCH" --no-progress >"$W/grpo.log" 2>&1
stamp "eval of the GRPO policy"; log="$W/eval-grpo.log"
$RT eval $E --policy.model "$W/grpo" --out "$W/eval-grpo" --overwrite --no-progress >"$W/eval-grpo.log" 2>&1
stamp "paired comparison"; log=""
$RT compare "$W/eval-sft" "$W/eval-grpo" | tee "$W/compare.txt"
$RT compare "$W/eval-sft" "$W/eval-grpo" --json >"$W/compare.json"
stamp "done"
