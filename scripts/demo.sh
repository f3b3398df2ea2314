#!/usr/bin/env bash
# Set everything up, then run the demo on the bundled data (offline, CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# caches (the converted SmolLM2, indexes): $RAGTEAM_HOME, by default the per-user ~/.cache/ragteam
exec .venv/bin/ragteam demo "$@"
