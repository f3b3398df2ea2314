#!/usr/bin/env bash
# The training matrix of issue 30 on the 900 held-out questions (scripts/experiments/heldout.sh: HotpotQA-500
# 400-499 + hotpotqa-dev-800), each arm evaluated greedily on all of them, every setting fixed here before the
# run (docs/results.md "Pre-registered: the training matrix on 900 held-out questions"). Nothing is chosen on
# the held-out questions; the policy evaluated is each run's last. Training uses HotpotQA-500 0-399 only.
#
#   LEGS="mmoa c3po gym" bash scripts/experiments/matrix.sh     # the GPU run (one H100/H200; ~12 min in all)
#   LEGS=mmoa ... ; LEGS="c3po gym" ...                          # the same legs in two calls (600 s each)
#   FRESH=1 ...                                                  # start a leg over in a WORK that holds it
#   BUNDLE_ONLY=1 ...                                            # bundle legs a time limit stopped midway
#   LORA=1 ...                                                   # RL arms train LoRA adapters (not the
#                                                                # pre-registered setting): they come back
#   RESUME=1 ...                                                 # continue a leg an interruption stopped:
#                                                                # finished stages are skipped, the one
#                                                                # that was running resumes (CPU runs)
#   set -a; . scripts/experiments/matrix-cpu-c3po.env; set +a; LEGS=c3po ...   # the C-3PO leg on 2 CPU cores
#
# Legs (each in $WORK/<leg>, its bundle in $WORK/bundles):
#   mmoa  MMOA-RAG S-G, K = 5: heuristic-label SFT -> GRPO, the settings of the H200 run (mmoa_grpo.sh);
#         arms: sft, grpo; compare sft -> grpo.
#   c3po  C-3PO, small settings: SFT on the proxy's own rollouts (4 samples + C-3PO trees, rejection
#         sampled) -> tree (recipe c3po: forced strategies, K(t) forks, Tree-GRPO) vs chain (recipe
#         c3po-no-tree: single trajectories, GRPO over independent chains, outcome credit) at an equal budget
#         of generated policy tokens; arms: sft, tree, chain; compare tree vs chain and each vs sft.
#   gym   RAG-Gym Re2Search: process data (rollout-ranked candidates) -> SFT actor + PRM (train prm) ->
#         PPO of the actor with the PRM as process reward (recipe gym); arms: sft, ppo; compare sft -> ppo.
#
# Bundles (what a device call brings back: at most 8 files of 16 MiB, 64 MiB in all): <leg>.tar.gz (logs,
# configs, training log.jsonl, eval metrics/reports, episodes as .jsonl.gz, compare.txt/.json, SFT/process
# data, the stage timings), cut into 15 MiB parts <leg>.tar.gz.00, .01 ... when larger (cat them to
# unpack); with LORA=1 also <leg>-lora.tar.gz (each RL arm's adapter in bfloat16). Full-weight models
# (SmolLM2-135M: ~540 MB in float32) never fit: <leg>/weights-left-behind.txt lists them.
#
# Tiny dry run (tests/test_experiments.py, on_device.sh prepare): the sizes of matrix-tiny.env,
#   set -a; . scripts/experiments/matrix-tiny.env; set +a; WORK=/tmp/dry bash scripts/experiments/matrix.sh
set -Eeuo pipefail   # -E: the ERR trap below also fires inside the legs
cd "$(dirname "$0")/../.."
RT=${RAGTEAM:-.venv/bin/ragteam}
case "$RT" in
  *" -m ragteam.cli.main") PY=${PYTHON:-${RT% -m ragteam.cli.main}} ;;
  *) PY=${PYTHON:-.venv/bin/python} ;;
esac
DATA_DIR=${DATA_DIR:-../shared/data}
D=$DATA_DIR/hotpotqa-dev-500.jsonl        # training questions: 0-399 only
W=${WORK:-runs/matrix}
LEGS=${LEGS:-mmoa c3po gym}
POLICY=${POLICY:-smollm2}                 # the policy every leg starts from
LLM=${LLM:-smollm2}                       # the fixed LLM (C-3PO's answers, RAG-Gym's summaries)
EVAL_LIMIT=${EVAL_LIMIT:-900}             # held-out questions evaluated (all 900; fewer only in dry runs)
EVAL_BATCH=${EVAL_BATCH:-256}             # sequences decoded together and episodes in flight, in evals
BATCH=${BATCH:-128}                       # the same in training rollouts (the H200 run's)
EVAL_DTYPE=${EVAL_DTYPE:-float32}         # the evals' weights, policy and LLM alike (training stays float32)
MB_TOKENS=${MB_TOKENS:-32768}             # tokens per optimizer step
MICRO_TOKENS=${MICRO_TOKENS:-$MB_TOKENS}  # tokens per forward (fewer: the same step by accumulation, less memory)
RESUME=${RESUME:-0}                       # 1: skip the stages timings.tsv lists as done, resume the rest
OVERWRITE=--overwrite; [ "$RESUME" = 1 ] && OVERWRITE=--no-overwrite  # collect: start over or resume
UNINFORMATIVE=${UNINFORMATIVE:-skip}      # groups that all scored alike: skip (DAPO's filter) or keep (dry runs)
LORA=${LORA:-0}
PART_BYTES=${PART_BYTES:-15728640}       # bundles are cut into parts of 15 MiB (a device call returns 16 MiB)
HELDOUT_SHA=${HELDOUT_SHA:-efd8e77d6434d4ec}  # heldout.sh's 900 questions; "" skips the check (other data)

# mmoa: mmoa_grpo.sh's H200 run
MMOA_SFT_Q=${MMOA_SFT_Q:-400}; MMOA_SFT_STEPS=${MMOA_SFT_STEPS:-20}; MMOA_QPI=${MMOA_QPI:-64}
MMOA_GROUP=${MMOA_GROUP:-8}; MMOA_ITERS=${MMOA_ITERS:-60}; MMOA_BUDGET_S=${MMOA_BUDGET_S:-270}
MMOA_LR=${MMOA_LR:-2e-6}
# c3po: SFT data from questions 0..C3_SAMPLES_Q+C3_TREE_Q-1, RL on the rest of 0-399
C3_SAMPLES_Q=${C3_SAMPLES_Q:-64}; C3_TREE_Q=${C3_TREE_Q:-32}; C3_ACCEPT=${C3_ACCEPT:-cover_em}
C3_SFT_EPOCHS=${C3_SFT_EPOCHS:-2}; C3_TOKENS=${C3_TOKENS:-24000}; C3_SAFETY_S=${C3_SAFETY_S:-45}
C3_ITERS=${C3_ITERS:-1000}; C3_LR=${C3_LR:-2e-6}
C3_TREE_QPI=${C3_TREE_QPI:-8}; C3_TREE_GROUP=${C3_TREE_GROUP:-2}
C3_CHAIN_QPI=${C3_CHAIN_QPI:-32}; C3_CHAIN_GROUP=${C3_CHAIN_GROUP:-4}
# gym: process data from questions 0..GYM_Q-1, PPO on the rest of 0-399
GYM_Q=${GYM_Q:-120}; GYM_CANDIDATES=${GYM_CANDIDATES:-4}; GYM_RANKER=${GYM_RANKER:-rollout}
GYM_ACCEPT=${GYM_ACCEPT:-f1>=0.1}; GYM_SFT_EPOCHS=${GYM_SFT_EPOCHS:-3}; GYM_PRM_EPOCHS=${GYM_PRM_EPOCHS:-2}
GYM_QPI=${GYM_QPI:-32}; GYM_ITERS=${GYM_ITERS:-1000}; GYM_BUDGET_S=${GYM_BUDGET_S:-45}; GYM_LR=${GYM_LR:-2e-6}

bundle() {  # bundle LEG: $W/bundles/LEG.tar.gz (+ parts), LEG-lora.tar.gz with LORA=1
  local leg=$1 dir=$W/$leg b=$W/bundles
  find "$dir" -name episodes.jsonl -exec gzip -9f {} \;    # compare reads .jsonl.gz as well
  find "$dir" \( -name '*.safetensors' -o -name '*.bin' -o -name '*.pt' \) -not -path '*/checkpoint-*' \
    -not -path '*/adapter/*' -printf '%s\t%p\n' | sort -k2 >"$dir/weights-left-behind.txt"
  tar -C "$W" -czf "$b/$leg.tar.gz" --exclude='checkpoint-*' --exclude='*.safetensors' --exclude='*.bin' \
    --exclude='*.pt' --exclude='tokenizer*' --exclude='vocab.json' --exclude='merges.txt' \
    --exclude='special_tokens_map.json' --exclude='adapter' --exclude='runs' --exclude='*.gguf' "$leg"
  if [ "$LORA" = 1 ]; then
    local tmp=$W/bundles/.lora-$leg
    rm -rf "$tmp"
    for a in "$dir"/*/adapter; do
      [ -d "$a" ] || continue
      local arm; arm=$(basename "$(dirname "$a")")
      mkdir -p "$tmp/$leg/$arm"
      cp "$a"/*.json "$tmp/$leg/$arm/"
      $PY - "$a/adapter_model.safetensors" "$tmp/$leg/$arm/adapter_model.safetensors" <<'PY'
import sys
import torch
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1])
save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in w.items()}, sys.argv[2])
PY
    done
    [ -d "$tmp/$leg" ] && tar -C "$tmp" -czf "$b/$leg-lora.tar.gz" "$leg"
    rm -rf "$tmp"
  fi
  local f
  for f in "$b/$leg.tar.gz" "$b/$leg-lora.tar.gz"; do  # a device call returns files of 16 MiB at most
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -gt "$PART_BYTES" ]; then
      split -b "$PART_BYTES" -d "$f" "$f." && rm "$f"
    fi
  done
  ls -l "$b" | grep -- " $leg" || true
}
if [ "${BUNDLE_ONLY:-0}" = 1 ]; then  # legs stopped from outside (a device call's limit): bundled as they are
  mkdir -p "$W/bundles"
  for leg in $LEGS; do
    if [ -d "$W/$leg" ] && ! ls "$W/bundles/$leg".tar.gz* >/dev/null 2>&1; then bundle "$leg"; fi
  done
  exit 0
fi
for leg in $LEGS; do
  case $leg in mmoa | c3po | gym) ;; *) echo "matrix.sh: unknown leg $leg (mmoa, c3po, gym)" >&2; exit 2 ;; esac
done
for leg in $LEGS; do  # the trainers never overwrite their checkpoints; neither does this script a leg
  if [ -e "$W/$leg" ] && [ "$RESUME" = 1 ]; then  # an eval a bundle gzipped mid-leg resumes from its episodes
    find "$W/$leg" -name episodes.jsonl.gz -exec sh -c '[ -e "${1%.gz}" ] || gunzip "$1"' _ {} \;
  elif [ -e "$W/$leg" ]; then
    [ "${FRESH:-0}" = 1 ] ||
      { echo "$W/$leg already holds a run: RESUME=1 continues it, FRESH=1 starts it over, or set WORK"; exit 2; }
    rm -rf "${W:?}/$leg" "$W/bundles/$leg".tar.gz* "$W/bundles/$leg"-lora.tar.gz*
  fi
done
mkdir -p "$W/bundles"
H=$W/heldout-900.jsonl
[ -f "$H" ] || DATA_DIR=$DATA_DIR bash scripts/experiments/heldout.sh "$H"
sha=$(sha256sum <"$H" | cut -c1-16)
[ -z "$HELDOUT_SHA" ] || [ "$sha" = "$HELDOUT_SHA" ] || {
  echo "matrix.sh: $H has sha256 $sha, not the pre-registered $HELDOUT_SHA" >&2; exit 3; }

$RT train ppo --help >/dev/null 2>&1 || { $RT train ppo --help 2>&1 | tail -5; exit 4; }  # it runs at all
# The corpora, as explicit BM25 index folders (what a corpus name means changes; a folder does not): training
# retrieves from every paragraph of HotpotQA-500 (4,858 passages, the H200 run's corpus), the held-out evals
# from every paragraph of the 900 held-out questions. Gold paragraphs are in both (HotpotQA's distractor
# setting), and neither holds the other's questions' paragraphs.
index() {  # index DATA DIR: build once
  [ -f "$2/manifest.json" ] ||
    $RT index --data "$1" --out "$2" --kinds bm25 --overwrite --no-progress >"$2.log" 2>&1
  grep -o '"num_docs": [0-9]*' "$2/manifest.json" | grep -o '[0-9]*'
}
N_TRAIN=$(index "$D" "$W/index-train")
N_HELD=$(index "$H" "$W/index-heldout")
TRAIN_CORPUS="--corpus $W/index-train"    # collect and train ppo
EVAL_CORPUS="--corpus $W/index-heldout"
TREE_ADV=${TREE_ADV:-tree_grpo}           # Tree-GRPO (issue 29)
LORA_FLAG=""; [ "$LORA" = 1 ] && LORA_FLAG="--ppo.lora"
EV="--data $H --offset 0 --limit $EVAL_LIMIT $EVAL_CORPUS --rollout.temperature 0
  --rollout.max-concurrent $EVAL_BATCH --policy.max-batch-size $EVAL_BATCH
  --policy.dtype $EVAL_DTYPE --llm.model $LLM --llm.dtype $EVAL_DTYPE --llm.max-batch-size $EVAL_BATCH --no-progress"
PPO_COMMON="--data $D --seed 0 --rollout.seed 0 --policy.dtype float32 --no-ppo.bf16 --ppo.epochs 2
  --ppo.clip 0.2 --ppo.lr-schedule constant --ppo.warmup-iterations 0
  --$([ "$UNINFORMATIVE" = skip ] || echo no-)ppo.skip-uninformative
  --ppo.minibatch-tokens $MB_TOKENS --ppo.micro-tokens $MICRO_TOKENS --rollout.max-concurrent $BATCH
  --policy.max-batch-size $BATCH --llm.model $LLM --llm.max-batch-size $BATCH --save-total-limit 1
  --no-progress $TRAIN_CORPUS $LORA_FLAG"

t0=$SECONDS
log=""
trap '[ -n "$log" ] && [ -f "$log" ] && tail -n 40 "$log"' ERR  # a failed stage shows the end of its log
stage() {  # stage LEG NAME CMD...: run CMD with its output in LEG/NAME.log, timed into timings.tsv
  local leg=$1 name=$2; shift 2
  local s=$SECONDS
  if [ "$RESUME" = 1 ] && grep -q "^$leg	$name	" "$W/$leg/timings.tsv" 2>/dev/null; then
    echo "[matrix] $(date +%T) +$((SECONDS - t0))s $leg: $name (done before)"
    return 0
  fi
  if [ "$RESUME" = 1 ] && [ -f "$W/$leg/$name.log" ]; then  # an interrupted attempt's log is kept beside
    mv "$W/$leg/$name.log" "$W/$leg/$name.$(date +%s).log"
  fi
  echo "[matrix] $(date +%T) +$((SECONDS - t0))s $leg: $name"
  log="$W/$leg/$name.log"
  { printf '+'; printf ' %q' "$@"; echo; } >"$log"   # the exact command heads its log
  "$@" >>"$log" 2>&1
  printf '%s\t%s\t%s\n' "$leg" "$name" "$((SECONDS - s))" >>"$W/$leg/timings.tsv"
  log=""
}
again() {  # again LEG NAME DIR, with RESUME=1: --resume for a training stage an interruption stopped after a
  # checkpoint, an empty DIR for one stopped before its first (a trainer refuses a folder of partial files)
  [ "$RESUME" = 1 ] || return 0
  grep -q "^$1	$2	" "$W/$1/timings.tsv" 2>/dev/null && return 0
  if compgen -G "$3/checkpoint-*" >/dev/null; then echo --resume; else rm -rf "$3"; fi
}
compare() {  # compare LEG NAME A B: the paired comparison of two evals, as text and JSON
  local leg=$1 name=$2
  echo "+ $RT compare $W/$leg/$3 $W/$leg/$4" >>"$W/$leg/commands.txt"
  $RT compare "$W/$leg/$3" "$W/$leg/$4" >"$W/$leg/$name.txt"
  $RT compare "$W/$leg/$3" "$W/$leg/$4" --json >"$W/$leg/$name.json"
  cat "$W/$leg/$name.txt"
}

leg_mmoa() {
  local w=$W/mmoa
  local R="--retriever.kind bm25 --topk 5 --profile small"
  local M="--workflow mmoa --variant s-g --candidates 5 --selector-constrained --fill-from-question
    --rollout.max-tokens 256"
  stage mmoa collect $RT collect sft $M $R $TRAIN_CORPUS --data "$D" --limit "$MMOA_SFT_Q" \
    --out "$w/sft-data" $OVERWRITE --no-progress
  stage mmoa sft $RT train sft --data "$w/sft-data/sft.jsonl" --out "$w/sft" --policy.model "$POLICY" \
    $(again mmoa sft "$w/sft") \
    --max-steps "$MMOA_SFT_STEPS" --batch-size 4 --lr 2e-5 --lr-schedule linear --seed 0 \
    --save-steps "$MMOA_SFT_STEPS" --max-length 2048 --no-progress
  local sft=$w/sft/checkpoint-$MMOA_SFT_STEPS
  stage mmoa eval-sft $RT eval $M $R $EV --policy.model "$sft" --out "$w/eval-sft"
  # mmoa_grpo.sh's GRPO; the advantage whitening and the KL placement of that run pinned (beta 0: no KL)
  stage mmoa grpo $RT train ppo --recipe mmoa $M $R $PPO_COMMON --limit 400 --policy.model "$sft" --out "$w/grpo" \
    $(again mmoa grpo "$w/grpo") \
    --iterations "$MMOA_ITERS" --budget-seconds "$MMOA_BUDGET_S" --questions-per-iteration "$MMOA_QPI" \
    --rollout.group-size "$MMOA_GROUP" --rollout.temperature 1.0 --rollout.top-p 0.9 \
    --ppo.advantage grpo --ppo.credit mmoa --ppo.reward f1 --ppo.normalize global \
    --ppo.kl-in reward --ppo.train-roles selector,generator \
    --ppo.lr "$MMOA_LR" --ppo.target-kl 0.1 --ppo.kl-beta 0 --ppo.kl-anneal-to 0 --ppo.kl-beta-min 0 \
    --ppo.max-sample-tokens 2048
  stage mmoa eval-grpo $RT eval $M $R $EV --policy.model "$w/grpo" --out "$w/eval-grpo"
  compare mmoa compare eval-sft eval-grpo
}

leg_c3po() {
  local w=$W/c3po
  local S="--workflow c3po --profile small --retriever.kind bm25 --topk 3 --max-rounds 3 --rollout.max-depth 16
    --rollout.max-tokens 96 --rollout.llm-max-tokens 48 --role-caps --strategy auto"
  local n=$((C3_SAMPLES_Q + C3_TREE_Q))
  stage c3po collect-samples $RT collect sft $S $TRAIN_CORPUS --tree samples --samples 4 --data "$D" \
    --offset 0 --limit "$C3_SAMPLES_Q" --rollout.temperature 1.0 --accept "$C3_ACCEPT" --relabel-invalid \
    --rollout.max-concurrent "$BATCH" --policy.model "$POLICY" --policy.max-batch-size "$BATCH" \
    --llm.model "$LLM" --llm.max-batch-size "$BATCH" --out "$w/sft-samples" $OVERWRITE --no-progress
  stage c3po collect-trees $RT collect sft $S $TRAIN_CORPUS --tree c3po --data "$D" --offset "$C3_SAMPLES_Q" \
    --limit "$C3_TREE_Q" --rollout.temperature 1.0 --accept "$C3_ACCEPT" --relabel-invalid \
    --rollout.max-concurrent "$BATCH" --policy.model "$POLICY" --policy.max-batch-size "$BATCH" \
    --llm.model "$LLM" --llm.max-batch-size "$BATCH" --out "$w/sft-trees" $OVERWRITE --no-progress
  mkdir -p "$w/sft-data"
  cat "$w/sft-samples/sft.jsonl" "$w/sft-trees/sft.jsonl" >"$w/sft-data/sft.jsonl"
  [ -s "$w/sft-data/sft.jsonl" ] || { echo "matrix.sh: c3po: no SFT rows were accepted" >&2; return 5; }
  stage c3po sft $RT train sft --data "$w/sft-data/sft.jsonl" --out "$w/sft" --policy.model "$POLICY" \
    $(again c3po sft "$w/sft") \
    --epochs "$C3_SFT_EPOCHS" --batch-size 4 --lr 2e-5 --lr-schedule linear --seed 0 --max-length 2048 \
    --no-progress
  stage c3po eval-sft $RT eval $S $EV --policy.model "$w/sft" --out "$w/eval-sft"
  # both arms: the same start, questions, step size, KL (none), reward and token budget
  local P="$S $PPO_COMMON --offset $n --limit $((400 - n)) --policy.model $w/sft --iterations $C3_ITERS
    --budget-tokens $C3_TOKENS --budget-seconds $C3_SAFETY_S --rollout.temperature 1.0 --rollout.top-p 1.0
    --ppo.reward cover_em --ppo.normalize none --ppo.kl-in loss --ppo.lr $C3_LR
    --ppo.target-kl 0.1 --ppo.kl-beta 0 --ppo.kl-anneal-to 0 --ppo.kl-beta-min 0 --ppo.max-sample-tokens 4096"
  stage c3po tree $RT train ppo --recipe c3po $P --out "$w/tree" $(again c3po tree "$w/tree") --rollout.forks c3po \
    --ppo.advantage "$TREE_ADV" --ppo.credit tree_mc --rollout.group-size "$C3_TREE_GROUP" \
    --questions-per-iteration "$C3_TREE_QPI"
  stage c3po chain $RT train ppo --recipe c3po-no-tree $P --out "$w/chain" $(again c3po chain "$w/chain") \
    --ppo.advantage grpo --ppo.credit outcome --rollout.group-size "$C3_CHAIN_GROUP" \
    --questions-per-iteration "$C3_CHAIN_QPI"
  stage c3po eval-tree $RT eval $S $EV --policy.model "$w/tree" --out "$w/eval-tree"
  stage c3po eval-chain $RT eval $S $EV --policy.model "$w/chain" --out "$w/eval-chain"
  compare c3po compare-tree-chain eval-chain eval-tree
  compare c3po compare-sft-tree eval-sft eval-tree
  compare c3po compare-sft-chain eval-sft eval-chain
}

leg_gym() {
  local w=$W/gym
  local G="--workflow gym:re2search --profile small --retriever.kind bm25 --topk 5 --max-steps 10
    --last-step answer --role-caps --rollout.max-tokens 256 --rollout.llm-max-tokens 128"
  stage gym collect $RT collect process $G $TRAIN_CORPUS --data "$D" --offset 0 --limit "$GYM_Q" \
    --candidates "$GYM_CANDIDATES" --ranker "$GYM_RANKER" --rollout.best-of.rollouts 2 \
    --rollout.best-of.metric f1 --rollout.temperature 0.7 --accept "$GYM_ACCEPT" --keep-invalid \
    --rollout.max-concurrent "$BATCH" --policy.model "$POLICY" --policy.max-batch-size "$BATCH" \
    --llm.model "$LLM" --llm.max-batch-size "$BATCH" --out "$w/process" $OVERWRITE --no-progress
  for f in sft.jsonl pairs.jsonl; do
    [ -s "$w/process/$f" ] || { echo "matrix.sh: gym: collect process wrote no $f rows" >&2; return 5; }
  done
  stage gym sft $RT train sft --data "$w/process/sft.jsonl" --out "$w/sft" --policy.model "$POLICY" \
    $(again gym sft "$w/sft") \
    --epochs "$GYM_SFT_EPOCHS" --batch-size 4 --lr 2e-5 --lr-schedule linear --seed 0 --max-length 1024 \
    --no-progress
  stage gym prm $RT train prm --data "$w/process/pairs.jsonl" --out "$w/prm" --prm.model "$POLICY" \
    $(again gym prm "$w/prm") \
    --epochs "$GYM_PRM_EPOCHS" --batch-size 4 --lr 1e-5 --lr-schedule linear --seed 0 --max-length 1024 \
    --no-progress
  stage gym eval-sft $RT eval $G $EV --policy.model "$w/sft" --out "$w/eval-sft"
  stage gym ppo $RT train ppo --recipe gym $G $PPO_COMMON --offset "$GYM_Q" --limit $((400 - GYM_Q)) \
    --policy.model "$w/sft" --prm.model "$w/prm" --prm.max-batch-size "$BATCH" --out "$w/ppo" \
    $(again gym ppo "$w/ppo") \
    --iterations "$GYM_ITERS" --budget-seconds "$GYM_BUDGET_S" --questions-per-iteration "$GYM_QPI" \
    --rollout.group-size 1 --rollout.temperature 1.0 --rollout.top-p 1.0 \
    --ppo.advantage gae --ppo.credit process --ppo.process-reward prm --ppo.reward f1 \
    --ppo.normalize global --ppo.kl-in reward --no-ppo.shared-value \
    --ppo.gamma 1.0 --ppo.lam 0.95 --ppo.vf-coef 0.1 --ppo.lr "$GYM_LR" --ppo.value-lr 1e-5 \
    --ppo.kl-estimator k1 --ppo.kl-beta 0.05 --ppo.kl-beta-min 0.05 --ppo.kl-beta-max 0.05 --ppo.target-kl 0.1 \
    --ppo.max-sample-tokens 4096
  stage gym eval-ppo $RT eval $G $EV --policy.model "$w/ppo" --out "$w/eval-ppo"
  compare gym compare eval-sft eval-ppo
}

{
  echo "heldout: $H ($(wc -l <"$H") questions, sha256 $sha), evaluated: $EVAL_LIMIT"
  echo "legs: $LEGS | policy $POLICY | llm $LLM | tree estimator $TREE_ADV | lora $LORA"
  echo "corpus: BM25, training $N_TRAIN passages (HotpotQA-500's), evals $N_HELD (the held-out questions')"
  echo "code: git $(git rev-parse --short HEAD 2>/dev/null || echo none), src sha256" \
    "$(find src -name '*.py' | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)"
} | tee "$W/settings.txt"
failed=""
for leg in $LEGS; do
  mkdir -p "$W/$leg"
  cp "$W/settings.txt" "$W/$leg/settings.txt"
  s=$SECONDS
  set +e   # a failed leg still bundles what it wrote, and the next leg runs (not under ||: -e would be off)
  (set -e; leg_"$leg")
  rc=$?
  set -e
  printf '%s\t%s\t%s\n' "$leg" total "$((SECONDS - s))" >>"$W/$leg/timings.tsv"
  [ "$rc" = 0 ] || { echo "[matrix] leg $leg failed (exit $rc)"; failed="$failed $leg"; }
  bundle "$leg"
done
echo "[matrix] $(date +%T) +$((SECONDS - t0))s done${failed:+; failed:$failed}"
[ -z "$failed" ]
