"""Hand freed host memory back to the system, so that a long CPU run's resident size follows what it holds.

Why: glibc's malloc serves a block above its mmap threshold (128 KB at start) with its own mapping, which
`free` unmaps. But each time such a block is freed, glibc raises the threshold to that block's size (up to
32 MB), and from then on blocks of that size come from the heap, where a freed block stays with the process
while any smaller live block sits above it. Rollouts and updates allocate and free tensors of a few MB by the
thousand (KV caches, attention scores, logits), interleaved with small ones that live on, so the heap only
grows. Measured on this project's 2-core machine: the C-3PO tree trainer's rollouts held 17-18.6 GB resident,
and its second iteration was killed for memory on 24 GB; with the threshold fixed at 1 MB the same rollouts
held 4-5 GB (docs/results.md, the C-3PO CPU leg's second deviation; `bench/memory.py` measures it). The
price is time: a large block is mapped and zeroed afresh at each allocation, 1.2-1.4x on CPU decoding
(docs/training.md, "Host memory on the CPU"). An OOM kill loses a run; a slower one finishes.

`return_freed_memory()` fixes the mmap threshold (which stops its growth) and the trim threshold at 1 MB, as
`MALLOC_MMAP_THRESHOLD_=1048576 MALLOC_TRIM_THRESHOLD_=1048576` would. The command and the Python API call it
once at start. It does nothing where the user chose: either variable set, or `RAGTEAM_MALLOC=default` (glibc's
own behaviour), and nothing off glibc (macOS, musl), whose allocators do not have this growth.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

THRESHOLD = 1 << 20
"""Blocks of this size and more are mapped on their own and unmapped when freed (1 MB: a KV-cache row or an
attention block of a small model is larger; Python's own objects are far smaller and stay on the heap)."""

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_USER_CHOICE = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def return_freed_memory(threshold: int = THRESHOLD) -> bool:
    """Fix glibc's mmap and trim thresholds at `threshold` bytes; True when set, False when left to the user
    (an environment variable says so) or to a C library other than glibc."""
    if os.environ.get("RAGTEAM_MALLOC") == "default" or any(v in os.environ for v in _USER_CHOICE):
        return False
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, threshold)
    )


def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (it exports `gnu_get_libc_version`), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None
