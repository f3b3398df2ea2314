#!/usr/bin/env bash
# The held-out set every RL claim is judged on: HotpotQA-500 questions 400-499 (training uses 0-399) followed by
# all of hotpotqa-dev-800.jsonl (800 further dev questions, disjoint from the 500), 900 questions in
# hotpotqa-dev-500.jsonl's layout, written to $1. The same lines every time, so paired comparisons across runs
# and sessions pair the same questions; the file's sha256 is printed for the record.
#
#   bash scripts/experiments/heldout.sh runs/heldout-900.jsonl
set -euo pipefail
out=${1:?usage: heldout.sh OUT.jsonl}
data=${DATA_DIR:-$(dirname "$0")/../../../shared/data}
a=$data/hotpotqa-dev-500.jsonl
b=$data/hotpotqa-dev-800.jsonl
for f in "$a" "$b"; do [ -f "$f" ] || { echo "heldout.sh: $f: no such file (set DATA_DIR)" >&2; exit 2; }; done
mkdir -p "$(dirname "$out")"
{ sed -n '401,500p' "$a"; cat "$b"; } >"$out.tmp"
mv "$out.tmp" "$out"
echo "heldout.sh: $(wc -l <"$out") questions in $out, sha256 $(sha256sum <"$out" | cut -c1-16)"
