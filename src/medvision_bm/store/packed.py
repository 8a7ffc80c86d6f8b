"""Many short texts (a task's sample keys and doc hashes) packed in one buffer: a read-only sequence of str that
costs their UTF-8 bytes and 8 bytes each, not a Python string object each (about 60 bytes over their length)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np


class PackedTexts(Sequence[str]):
    """Texts held as one bytes buffer and their end offsets; each is decoded when it is read. Built at once from an
    iterable, or one text at a time (``append``) while its source is read."""

    def __init__(self, texts: Iterable[str] = ()) -> None:
        self._buf = bytearray()
        self._ends: array[int] = array("q")
        for text in texts:
            self.append(text)

    def append(self, text: str) -> None:
        self._buf += text.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._buf))

    def __len__(self) -> int:
        return len(self._ends)

    def _span(self, i: int) -> tuple[int, int]:
        return (self._ends[i - 1] if i else 0), self._ends[i]

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self._ends)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        start, end = self._span(i)
        return self._buf[start:end].decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        start, buf = 0, self._buf
        for end in self._ends:
            yield buf[start:end].decode("utf-8", "surrogatepass")
            start = end

    def take(self, positions: Sequence[int] | np.ndarray) -> PackedTexts:
        """The texts at ``positions``, in that order (all of them, in order: this very sequence)."""
        at = np.asarray(positions, dtype=np.int64)
        if len(at) == len(self) and (len(at) == 0 or bool((at == np.arange(len(at))).all())):
            return self
        out = PackedTexts()
        for i in at.tolist():
            start, end = self._span(i)
            out._buf += self._buf[start:end]
            out._ends.append(len(out._buf))
        return out

    def buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """The texts' UTF-8 bytes and end offsets as arrays (copies), as ``of_buffers`` takes them back."""
        return np.frombuffer(bytes(self._buf), dtype=np.uint8), np.frombuffer(self._ends, dtype=np.int64).copy()

    @classmethod
    def of_buffers(cls, buf: np.ndarray, ends: np.ndarray) -> PackedTexts:
        """The texts of ``buffers()``; a ValueError when the offsets do not describe the buffer."""
        ends = np.asarray(ends, dtype=np.int64)
        if len(ends) and (int(ends[0]) < 0 or int(ends[-1]) != len(buf) or bool((np.diff(ends) < 0).any())):
            raise ValueError("packed texts: the end offsets do not fit the buffer")
        if not len(ends) and len(buf):
            raise ValueError("packed texts: bytes without texts")
        out = cls()
        out._buf = bytearray(np.asarray(buf, dtype=np.uint8).tobytes())
        out._ends.frombytes(ends.tobytes())
        return out

    @property
    def nbytes(self) -> int:
        """What the texts take in memory (their buffer and offsets)."""
        return len(self._buf) + self._ends.itemsize * len(self._ends)
