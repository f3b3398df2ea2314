#!/usr/bin/env bash
# Set everything up, then run the whole test suite (offline, CPU): what CI runs (.ci/run). Extra arguments go to
# pytest: `bash scripts/test.sh -m "not slow"` runs the fast tier (pyproject.toml's `slow` marker says what it leaves out).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The demo test opens its HTML report in a real browser: Debian's Chromium, installed here where we can (root, apt).
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "[test] installing Chromium (Debian) for the report's browser test"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || echo "[test] Chromium could not be installed: the browser test will report as skipped"
fi
exec .venv/bin/python -m pytest -q "$@"
