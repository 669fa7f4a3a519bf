"""Giving freed heap memory back to the system after a listing.

A relist of 10,000 runners reads about 16 MB of response bodies and decodes them into about 60 MB
of objects, all freed once it is reconciled. glibc's allocator keeps the freed pages that lie
beneath memory still in use, so the daemon's RSS stayed near its high-water mark: 8 KB per runner
after adopting 10,000 (``scripts/bench_scale.py``), 5.4 KB with the pages given back by
``malloc_trim(0)``, which takes a fraction of a millisecond at that size. Elsewhere than on glibc it
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache

__all__ = ["release_free_memory"]


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # no C library to load, or not glibc's
        return None
    return trim


def release_free_memory() -> bool:
    """Return the heap's free pages to the system; False where the allocator cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
