"""Episode trace files (`episodes.jsonl`, one JSON line per episode tree): the one reader and writer.

`read_episodes` streams a file (a bad line is an error naming file and line); `write_episodes` writes a
batch; `TraceWriter` appends as episodes finish, one flushed line each (what eval and collect use).

Each finished episode is appended as one JSON line and flushed at once, so an interrupted eval loses at most
the line being written. On restart `load_trace` reads what is there (the last record of a question wins),
cuts off a truncated final line, and the eval runs only the questions without a finished episode.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Self

from ragteam.rollout.tree import Episode


def _parse(line: bytes, path: Path, lineno: int) -> Episode:
    try:
        return Episode.from_dict(json.loads(line.decode("utf-8")))
    except (KeyError, ValueError, TypeError) as e:
        raise ValueError(f"{path}:{lineno}: not an episode record ({e!r})") from None


def read_episodes(path: str | Path) -> Iterator[Episode]:
    """Every episode of a trace file, in file order (blank lines skipped)."""
    path = Path(path)
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield _parse(line, path, lineno)


def write_episodes(path: str | Path, episodes: Iterable[Episode], append: bool = False) -> None:
    """Write (or append) episodes, one JSON line each."""
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        for ep in episodes:
            f.write(ep.to_json() + "\n")


def load_trace(path: str | Path, repair: bool = True) -> dict[str, Episode]:
    """Episodes of a trace file by question id (last record wins); {} if the file does not exist.

    A final line without its newline is an interrupted write: if it does not parse it is cut off the file
    (`repair=True`) or ignored, if it parses its newline is added. A bad line anywhere else is an error
    naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        return {}
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    episodes: dict[str, Episode] = {}
    for lineno, line in enumerate(lines, 1):
        if line.strip():
            ep = _parse(line, path, lineno)
            episodes[ep.question.id] = ep
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
