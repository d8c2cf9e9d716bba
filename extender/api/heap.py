"""glibc's malloc told to keep the memory of large request bodies for the next request.

A full-Node filter (``nodeCacheCapable: false``) moves several 3 MB buffers per call: the
chunks and their join, each node's text, the reply. glibc serves blocks over its mmap
threshold (128 KiB at first) with fresh mappings, and gives the top of the heap back once
more than the trim threshold is free, so every call faulted its buffers in anew: a perf
profile put page faults at a seventh of the server's CPU (docs/performance.md). Blocks up to
32 MiB from the heap and 64 MiB kept free lower a 500-node filter's server CPU by 2 ms.
"""

from __future__ import annotations

import ctypes
import os
import sys

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest on 64 bits
TRIM_THRESHOLD = 64 * 1024 * 1024
# The settings an operator may give instead, read by glibc at start-up.
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def keep_freed_memory() -> bool:
    """Set the thresholds above unless the environment sets either; whether they were set.

    Without glibc (musl, macOS) there is no mallopt, and nothing changes.
    """
    if not sys.platform.startswith("linux") or any(name in os.environ for name in _ENV):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
