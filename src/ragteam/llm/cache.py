"""Build-once model folders under RAGTEAM_HOME: an inter-process file lock and an atomic publish.

A folder is built into a temporary sibling and renamed into place only when complete, so a reader never sees
a half-written model; the lock makes a second process wait for the first build instead of repeating it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from ragteam.config import ragteam_home

COMPLETE_MARKER = ".ragteam-complete"


def models_dir() -> Path:
    """`$RAGTEAM_HOME/models`, created if missing."""
    path = ragteam_home() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `path` (created if missing) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def is_complete(folder: Path) -> bool:
    """True when `folder` was published by `build_once` (its completion marker exists)."""
    return (folder / COMPLETE_MARKER).is_file()


def build_once(folder: Path, build: Callable[[Path], None]) -> tuple[Path, bool]:
    """Return `(folder, built_now)`; run `build(tmp_dir)` and publish it as `folder` unless already there."""
    if is_complete(folder):
        return folder, False
    folder.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(folder.parent / f".{folder.name}.lock"):
        if is_complete(folder):  # another process built it while we waited
            return folder, False
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
        try:
            build(tmp)
            (tmp / COMPLETE_MARKER).write_text("ok\n", encoding="utf-8")
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return folder, True
