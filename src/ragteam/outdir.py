"""Whose `--out` folder is it: every command that writes a folder refuses one that holds someone else's files.

Why: `eval --out` into a folder holding another run's `config.yaml`, metrics or report replaced them
silently, and `train sft --out` into an eval run's folder mixed a model into its traces. A command writes
into `--out` when the folder

- does not exist, or is empty (`.DS_Store` aside);
- is its own: its `config.yaml` names this command (`command: eval`, `command: train sft`, as
  `config.save_resolved` and the trainers write it), or, for a command without a config file (`index`,
  `demo`), its own marker (an index's `manifest.json`) is there; resuming and extending go on as before;
- holds only what this command writes before its config file (`own`: a trainer's `log.jsonl` when it
  stopped between the two), so a run that failed at its start can be started again;

and otherwise stops with `OutDirError` naming what is there (the first few entries, and the command that
wrote the folder's `config.yaml`), unless `--overwrite`: then the command writes over the files of the same
names and leaves the others where they are.

One writer at a time: `run_lock(out, command)` holds an exclusive `flock` on `out/.ragteam.lock` (which
names the holder's pid and command) for as long as the command runs. Why: two identical `eval` commands on
one `--out` each resumed from the same episodes and both appended every question, all exiting 0. A second
command stops at once naming the holder's pid. The kernel drops the lock when its holder dies, kill -9
included, so a stale lock file is simply taken over: no pid guessing, no manual clean-up. `check_out_dir`
ignores the lock file.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import yaml

CONFIG_FILE = "config.yaml"
LOCK_FILE = ".ragteam.lock"
IGNORED = frozenset({".DS_Store", LOCK_FILE})  # what a file browser leaves; the run lock
SHOWN = 8  # entries named in the error


class OutDirError(ValueError):
    """An `--out` folder that holds files another command (or a person) wrote."""


def recorded_command(out: str | Path) -> str | None:
    """The `command` the folder's `config.yaml` names (`eval`, `train sft`, ...), without a leading `ragteam`;
    None when there is no such file, or it is not a ragteam config (unreadable, not YAML, no `command`)."""
    path = Path(out) / CONFIG_FILE
    try:
        if not path.is_file() or path.stat().st_size > 1_000_000:
            return None
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return None
    command = doc.get("command") if isinstance(doc, dict) else None
    return command.removeprefix("ragteam ").strip() if isinstance(command, str) else None


def check_out_dir(
    out: str | Path,
    command: str,
    overwrite: bool,
    own: Iterable[str] = (),
    marker: str | None = None,
    flag: str = "--overwrite",
) -> None:
    """Refuse `out` for `ragteam COMMAND` when it holds files that command did not write (module docstring).

    `own`: glob patterns of the entries the command may leave without its config file; `marker`: an entry
    that makes the folder the command's own (for commands that write no `config.yaml`). Raises OutDirError
    (a ValueError: the CLI prints it as one line) unless `overwrite`; a path that is a file is refused too."""
    path = Path(out)
    if not path.exists():
        return
    if not path.is_dir():
        raise OutDirError(f"--out {out}: is a file, not a folder; choose another --out")
    try:
        entries = sorted(e.name for e in path.iterdir() if e.name not in IGNORED)
    except OSError as e:
        raise OutDirError(f"--out {out}: cannot list the folder ({e.strerror or e})") from None
    if not entries or overwrite:
        return
    recorded = recorded_command(path)
    if marker is not None and marker in entries and (CONFIG_FILE not in entries or recorded == command):
        return
    if marker is None and recorded == command:
        return
    patterns = list(own)
    foreign = [
        name
        for name in entries
        if name == CONFIG_FILE or not any(fnmatch.fnmatchcase(name, p) for p in patterns)
    ]
    if not foreign:
        return
    named = [
        f"{name} (written by `ragteam {recorded}`)" if name == CONFIG_FILE and recorded else name
        for name in foreign[:SHOWN]
    ]
    more = f" and {len(foreign) - SHOWN} more" if len(foreign) > SHOWN else ""
    raise OutDirError(
        f"--out {out} holds files `ragteam {command}` did not write: {', '.join(named)}{more}; "
        f"choose another --out, or pass {flag} to write into it anyway (files of the same names are "
        "replaced, the others kept)"
    )


class RunLocked(OutDirError):
    """Another live process holds the run folder's lock."""


def _holder(fd: int) -> str:
    """What the lock file says about its holder (`pid 123, ragteam eval`), for the message."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or "another process (it has not written its pid yet)"


def _take(path: Path, command: str) -> int:
    """An open, exclusively locked descriptor of the lock file `path`; RunLocked when another process holds it.

    The descriptor is checked to still be the file at `path` after locking: a holder that just finished
    removes the file, and a lock on a removed file would lock nothing."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            what = path.parent if path.name == LOCK_FILE else path.name.removesuffix(LOCK_FILE)[1:]
            raise RunLocked(
                f"--out {what} is in use by {holder}; one command writes it at a time: wait for it to "
                "finish, or stop it (its lock goes with it)"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}, ragteam {command}\n".encode(), 0)
            return fd
        os.close(fd)  # the file was removed (or replaced) while we waited: lock the one there now


@contextlib.contextmanager
def file_lock(path: str | Path, command: str) -> Iterator[None]:
    """Hold the write lock of one output file (`ask --out FILE`): a `.NAME.ragteam.lock` beside it, taken and
    released as `run_lock` takes a folder's; RunLocked when another process writes that file now."""
    target = Path(path)
    lock = target.parent / f".{target.name}{LOCK_FILE}"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = _take(lock, command)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


SETUP_FILES = ("config.yaml", "skipped.jsonl")
"""What a command writes into its folder before its work starts (the resolved config, the data file's skipped
records): a folder that holds only these, and an empty trace or log, holds no result."""
LOGS = ("episodes.jsonl", "log.jsonl")
"""Files a command appends its results to (eval's and collect's trace, a trainer's log): empty, no result."""


def discard_setup(folder: Path) -> bool:
    """Remove the setup files of a folder that holds nothing else (empty `LOGS` at most), so a command that
    failed its checks (a bad workflow name, a missing corpus, a --policy.model that is not a model) leaves no
    run folder behind; True when removed. A folder with any result (an episode, a log row, a checkpoint, a file
    of the user's) is kept whole."""
    files = {p.name: p for p in folder.iterdir()}
    empty = {n for n in LOGS if n in files and files[n].is_file() and files[n].stat().st_size == 0}
    if set(files) - set(SETUP_FILES) - empty:
        return False
    for path in files.values():
        path.unlink()
    return True


@contextlib.contextmanager
def run_lock(out: str | Path, command: str) -> Iterator[None]:
    """Hold `out`'s run lock while the block runs (module docstring); RunLocked (an OutDirError, printed as
    one line) when another process holds it. A folder it had to create is removed again if the command left
    it empty, or failed with only its setup files in it (`discard_setup`); a path that is a file is left to
    `check_out_dir` to refuse."""
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        yield  # not a folder: the command's own check names it
        return
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = _take(path, command)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)  # closing releases the lock
        if created:
            if failed:
                discard_setup(folder)
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty
