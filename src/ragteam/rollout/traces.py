"""Episode trace files (`episodes.jsonl`, one JSON line per episode tree): the one reader and writer.

`read_episodes` streams a file (a bad line is an error naming file and line); `write_episodes` writes a
batch; `TraceWriter` appends as episodes finish, one flushed line each (what eval and collect use).

Each finished episode is appended as one JSON line and flushed at once, so an interrupted eval loses at most
the line being written. On restart `load_trace` reads what is there (the last record of a question wins),
cuts off a truncated final line, and the eval runs only the questions without a finished episode.

A bad line in the middle (a disk that filled up, two writers, an edited file) is not an interrupted write:
`load_trace` stops with a `TraceError` naming the lines and saying how to recover, instead of guessing.
With `drop_bad=True` (`ragteam eval --repair`) it keeps every intact episode, moves the bad lines to
`episodes.jsonl.torn` (for inspection), and rewrites the trace without them, so that their questions run
again.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Self

from ragteam.rollout.tree import Episode


class TraceError(ValueError):
    """A trace file with bad lines before its end; the message names them and how to recover."""


def _parse(line: bytes, path: Path, lineno: int) -> Episode:
    try:
        return Episode.from_dict(json.loads(line.decode("utf-8")))
    except (KeyError, ValueError, TypeError, AttributeError, RecursionError) as e:
        raise ValueError(f"{path}:{lineno}: not an episode record ({repr(e)[:200]})") from None


def read_episodes(path: str | Path) -> Iterator[Episode]:
    """Every episode of a trace file, in file order (blank lines skipped); a `.gz` file is read through gzip
    (an archived run's episodes shrink about 7x)."""
    path = Path(path)
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield _parse(line, path, lineno)


def write_episodes(path: str | Path, episodes: Iterable[Episode], append: bool = False) -> None:
    """Write (or append) episodes, one JSON line each."""
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(ep.to_json() + "\n")


def load_trace(path: str | Path, repair: bool = True, drop_bad: bool = False) -> dict[str, Episode]:
    """Episodes of a trace file by question id (last record wins); {} if the file does not exist.

    A final line without its newline is an interrupted write: if it does not parse it is cut off the file
    (`repair=True`) or ignored, if it parses its newline is added. A bad line anywhere else raises
    `TraceError` naming the file, its bad lines and the way out, unless `drop_bad`: then the bad lines are
    appended to `<trace>.torn` and the trace is rewritten with the intact ones (module docstring).
    """
    path = Path(path)
    if not path.exists():
        return {}
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    episodes: dict[str, Episode] = {}
    bad: list[tuple[int, str]] = []
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            try:
                ep = _parse(line, path, lineno)
            except ValueError as e:
                bad.append((lineno, str(e)))
                continue
            episodes[ep.question.id] = ep
    if bad:
        if not drop_bad:
            where = ", ".join(str(n) for n, _ in bad[:10]) + (", ..." if len(bad) > 10 else "")
            raise TraceError(
                f"{bad[0][1]}\n{path}: {len(bad)} bad line(s) before the end of the file (line {where}); "
                f"the file was damaged, not just interrupted. To recover, run the same command with --repair: "
                f"it keeps the {len(episodes)} intact episodes, moves the bad lines to {path.name}.torn and runs "
                "their questions again (or pass --overwrite to start over)"
            )
        _drop_lines(path, data, {n for n, _ in bad})
        return load_trace(path, repair=repair)
    if tail.strip():
        try:
            ep = _parse(tail, path, len(lines) + 1)
        except ValueError:
            if repair:
                with open(path, "r+b") as f:
                    f.truncate(len(data) - len(tail))
        else:
            episodes[ep.question.id] = ep
            if repair:
                with open(path, "ab") as f:
                    f.write(b"\n")
    return episodes


def _drop_lines(path: Path, data: bytes, bad: set[int]) -> None:
    """Rewrite `path` without the lines numbered in `bad` (1-based), appending those to `<path>.torn`."""
    lines = data.split(b"\n")
    with open(path.with_name(path.name + ".torn"), "ab") as torn:
        torn.writelines(lines[n - 1] + b"\n" for n in sorted(bad))
    kept = b"\n".join(line for n, line in enumerate(lines, 1) if n not in bad)
    tmp = path.with_name(path.name + ".repairing")
    tmp.write_bytes(kept)
    os.replace(tmp, path)  # atomic: an interrupted repair leaves the old file, never half of it


def finished_ids(episodes: dict[str, Episode]) -> set[str]:
    """Question ids not to run again: those whose last episode did not fail (failed ones are retried)."""
    return {qid for qid, ep in episodes.items() if ep.status != "failed"}


class TraceWriter:
    """Appends episodes to a JSONL file, one flushed line each; safe to call from several threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self._lock = threading.Lock()
        self.written = 0

    def write(self, ep: Episode) -> None:
        line = ep.to_json() + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()
            self.written += 1

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
