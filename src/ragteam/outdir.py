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
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from pathlib import Path

import yaml

CONFIG_FILE = "config.yaml"
IGNORED = frozenset({".DS_Store"})  # what a file browser leaves in any folder
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
