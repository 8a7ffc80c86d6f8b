"""A least-recently-used cache of numpy arrays bounded by their total bytes (the image reader's volume and slice
caches)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np


class ByteLRU:
    """Least-recently-used cache of numpy arrays, bounded by the sum of their ``nbytes``. Thread-safe."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.nbytes = 0
        self._items: OrderedDict[Hashable, tuple[np.ndarray, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> np.ndarray | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def fits(self, nbytes: int) -> bool:
        return 0 < nbytes <= self.max_bytes

    def put(self, key: Hashable, value: np.ndarray, nbytes: int) -> None:
        if not self.fits(nbytes):
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.nbytes -= old[1]
            self._items[key] = (value, nbytes)
            self.nbytes += nbytes
            while self.nbytes > self.max_bytes:
                _, (_, size) = self._items.popitem(last=False)
                self.nbytes -= size

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.nbytes = 0

    def __len__(self) -> int:
        return len(self._items)
