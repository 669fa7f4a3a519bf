"""Freed heap memory goes back to the system after a large listing is decoded."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# In a fresh interpreter, whose heap holds nothing else: a test worker's heap, shaped by the tests
# before, may have room for the bodies below its top, where glibc gives pages back by itself.
_SCRIPT = """
from pathlib import Path
from supervisor.base.memory import release_free_memory

def rss_kib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

threshold = bytes(16 << 20)
del threshold  # freeing it raised glibc's mmap threshold: what follows comes from the heap
bodies = [b"%d" % i * (1 << 19) for i in range(64)]  # 64 bodies of 1 MB or so
kept = bytes(200_000)  # allocated after them, on top: the heap cannot shrink beneath it
del bodies
before = rss_kib()
released = release_free_memory()
print(released, before, rss_kib(), len(kept))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_pages_in_the_middle_of_the_heap_are_returned() -> None:
    """Response bodies of a listing are megabytes each. Once glibc has freed one that large, it
    takes the next ones from its heap, and keeps their pages when they are freed in turn, beneath
    whatever was allocated after them: what the daemon's RSS kept after every relist."""
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True).stdout
    released, before, after, _ = out.split()
    assert released == "True"
    assert int(after) < int(before) - (32 << 10), f"at least half of the bodies' 64 MB went back: {out}"
