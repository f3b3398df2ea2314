#!/usr/bin/env bash
# Set everything up, then run the demo on the bundled data (offline, CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAGTEAM_HOME="${RAGTEAM_HOME:-$PWD/.ragteam}"
exec .venv/bin/ragteam demo "$@"
