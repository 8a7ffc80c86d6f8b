"""The page cache of a file, for the benchmarks' disk-cold figures: drop a file's clean pages (best-effort,
``posix_fadvise(POSIX_FADV_DONTNEED)``, no root needed) and tell what fraction of its pages is resident (``mincore``,
Linux)."""

from __future__ import annotations

import os
import sys

import numpy as np


def drop_page_cache(path: str) -> None:
    """Ask the kernel to drop the file's clean pages from the page cache (best-effort; no root needed)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages are not dropped: a file just written must reach the disk first
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_fraction(path: str) -> float:
    """The fraction of the file's pages in the page cache (``mmap`` + ``mincore``; -1.0 where it cannot be told)."""
    import ctypes
    import mmap

    size = os.path.getsize(path)
    if not sys.platform.startswith("linux") or size == 0:
        return -1.0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return -1.0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            return -1.0
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                return -1.0
            return float(np.count_nonzero(np.frombuffer(vec, np.uint8) & 1)) / pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)
