"""Large request bodies reuse the heap instead of fresh mappings (extender/api/heap.py)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter (the thresholds are process-wide): allocate a buffer the size of a big
# filter body, free another, and report glibc's own accounting (mallinfo2).
PROBE = """
import ctypes, sys
from extender.api.heap import keep_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
was_set = keep_freed_memory() if sys.argv[1] == "set" else False
body = bytes(8 * 1024 * 1024)
mapped = libc.mallinfo2().hblkhd
freed = bytearray(16 * 1024 * 1024)
del freed
print(was_set, mapped, libc.mallinfo2().fordblks)
"""

MB = 1024 * 1024
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="glibc only",
)


def _probe(mode: str, **env: str) -> tuple[bool, int, int]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        cwd=ROOT,
        env={**environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0] == "True", int(out[1]), int(out[2])


def test_a_large_body_comes_from_the_heap_and_its_memory_stays_for_the_next():
    assert _probe("default")[1] >= 8 * MB  # glibc's default: a mapping of its own
    was_set, mapped, kept = _probe("set")
    assert was_set and mapped < 8 * MB and kept >= 16 * MB


def test_an_operator_s_malloc_settings_are_left_alone():
    was_set, mapped, _ = _probe("set", MALLOC_TRIM_THRESHOLD_="131072")
    assert not was_set and mapped >= 8 * MB
