"""`ragteam.allocator`: freed blocks of a MB and more go back to the system, in a fresh process each time (the
setting is process-wide and glibc reads the environment once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# The pattern that grew the C-3PO trainer's heap: a 4 MB block freed (glibc raises its mmap threshold to it),
# then 64 blocks of 4 MB, each followed by a 256 KB block that lives on (too large for the holes of Python's
# heap, so it lands above its big block), then the big ones freed. Prints the resident bytes they still hold.
PATTERN = """
import ctypes, json, os, sys
from ragteam.allocator import return_freed_memory
applied = return_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
MB4 = 4 << 20
libc.free(libc.malloc(MB4))
base = rss()
big, small = [], []
for _ in range(64):
    b = libc.malloc(MB4)
    ctypes.memset(b, 1, MB4)
    big.append(b)
    small.append(libc.malloc(256 << 10))
for b in big:
    libc.free(b)
print(json.dumps({"applied": applied, "kept": rss() - base}))
"""


def _run(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "RAGTEAM_MALLOC"}
    clean.update(env, PYTHONPATH=str(SRC))
    out = subprocess.run(
        [sys.executable, "-c", PATTERN], env=clean, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_freed_blocks_go_back_to_the_system() -> None:
    got = _run()
    assert got["applied"] is True
    assert got["kept"] < 16 << 20, f"{got['kept'] >> 20} MB of freed blocks still resident"


def test_glibc_default_keeps_them_which_is_why_the_setting_exists() -> None:
    """The control: with glibc's own behaviour the same pattern keeps most of the 256 MB it freed."""
    got = _run(RAGTEAM_MALLOC="default")
    assert got["applied"] is False
    assert got["kept"] > 200 << 20, f"only {got['kept'] >> 20} MB kept: glibc's default no longer grows"


def test_a_users_own_malloc_setting_is_left_alone() -> None:
    got = _run(MALLOC_MMAP_THRESHOLD_="33554432")
    assert got["applied"] is False
    assert got["kept"] > 200 << 20  # the user's 32 MB threshold keeps 4 MB blocks on the heap, as asked
