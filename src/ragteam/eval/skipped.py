"""Skipped records of an eval's data file (`--skip-bad`): counted in metrics.json and report.md, and listed
one per line, with line number and reason, in `skipped.jsonl` beside them.

Why a file: a count alone hides *which* questions are missing from the scores; the file says where to look
(and the reader keeps only the first messages in memory for the console).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ragteam.data.questions import QuestionSet

SKIPPED_FILE = "skipped.jsonl"


def write_skipped(qset: QuestionSet, out: str | Path) -> dict[str, Any]:
    """Write `out/skipped.jsonl` (`{"file", "line", "error"}` per skipped record; removed when none were
    skipped, so a stale list never sits beside a new report) and return metrics.json's `skipped` entry."""
    path = Path(out) / SKIPPED_FILE
    records = list(qset.skipped_records)
    if not qset.skipped:
        path.unlink(missing_ok=True)
        return {"records": 0, "file": None}
    with open(path, "w", encoding="utf-8") as f:
        for e in records:
            f.write(
                json.dumps({"file": e.path, "line": e.line, "error": e.message}, ensure_ascii=False) + "\n"
            )
    return {"records": qset.skipped, "file": SKIPPED_FILE}
