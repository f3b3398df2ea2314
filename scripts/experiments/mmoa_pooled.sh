#!/usr/bin/env bash
# MMOA-RAG under the pooled corpus: does the SFT warm start beat the untrained policy on held-out questions when
# retrieval searches every paragraph of the file (the papers retrieve from Wikipedia), not the question's own
# ten? The plan is docs/results.md "Pre-registered: MMOA-RAG under the pooled corpus", written before the run.
#
#   bash scripts/experiments/mmoa_pooled.sh                    # the CPU run (2 cores)
#   POLICY=tiny SFT_STEPS=2 EVAL_LIMIT=3 bash scripts/experiments/mmoa_pooled.sh   # a dry run
#
# Stages, each in its own folder under $WORK: the held-out file (heldout.sh), SFT data from MMOA-RAG's heuristic
# labels on HotpotQA-500 questions 0-399 retrieved from the pooled corpus, SFT, greedy evals of the untrained
# and the SFT policy (side by side) on the first EVAL_LIMIT held-out questions (pooled over the held-out file), the paired
# comparison. A stage whose output exists is not run again (resume after an interruption by re-running).
set -euo pipefail
cd "$(dirname "$0")/../.."
RT=${RAGTEAM:-.venv/bin/ragteam}
DATA_DIR=${DATA_DIR:-../shared/data}
D=$DATA_DIR/hotpotqa-dev-500.jsonl
W=${WORK:-runs/mmoa-pooled}
POLICY=${POLICY:-smollm2}
SFT_STEPS=${SFT_STEPS:-20}
EVAL_LIMIT=${EVAL_LIMIT:-500}
BATCH=${BATCH:-32}
H=$W/heldout-900.jsonl
M="--workflow mmoa --profile small --variant s-g --candidates 5 --selector-constrained --fill-from-question"
R="--corpus pooled --retriever.kind bm25 --topk 5"
E="$M $R --data $H --limit $EVAL_LIMIT --rollout.max-concurrent $BATCH --policy.max-batch-size $BATCH"
mkdir -p "$W"
t0=$SECONDS
stamp() { echo "[mmoa_pooled] $(date +%T) +$((SECONDS - t0))s $*"; }
[ -f "$H" ] || DATA_DIR=$DATA_DIR bash scripts/experiments/heldout.sh "$H"
if [ ! -f "$W/sft-data/sft.jsonl" ]; then
  stamp "SFT data (pooled corpus, questions 0-399)"
  $RT collect sft $M $R --data "$D" --limit 400 --out "$W/sft-data" --overwrite --no-progress >"$W/collect.log" 2>&1
fi
SFT="$W/sft/checkpoint-$SFT_STEPS"
if [ ! -d "$SFT" ]; then
  stamp "SFT ($SFT_STEPS steps)"
  $RT train sft --data "$W/sft-data/sft.jsonl" --out "$W/sft" --policy.model "$POLICY" --max-steps "$SFT_STEPS" \
    --batch-size 4 --save-steps "$SFT_STEPS" --max-length 2048 --no-progress >"$W/sft.log" 2>&1
fi
# Both arms side by side, one torch thread each (2 cores): an interruption leaves them at the same question, and
# a re-run resumes each eval's episodes.jsonl where it stopped.
pids=()
for arm in untrained sft; do
  model=$POLICY; [ $arm = sft ] && model=$SFT
  if [ ! -f "$W/eval-$arm/metrics.json" ]; then
    stamp "eval: $arm"
    /usr/bin/time -f "eval $arm: %e s wall" $RT eval $E --policy.model "$model" --policy.threads 1 \
      --out "$W/eval-$arm" --no-progress >>"$W/eval-$arm.log" 2>&1 &
    pids+=($!)
  fi
done
for p in "${pids[@]}"; do wait "$p"; done
stamp "paired comparison"
$RT compare "$W/eval-untrained" "$W/eval-sft" | tee "$W/compare.txt"
$RT compare "$W/eval-untrained" "$W/eval-sft" --json >"$W/compare.json"
stamp "done"
