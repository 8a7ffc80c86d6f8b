"""Durable file I/O: atomic JSON writes, append-only JSON lines that tolerate a torn tail, and file locks.

Stdlib-only at import (orjson is imported where JSON lines are read), so the environment builder can use it
before any model environment exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def dumps(obj: Any) -> str:
    """Canonical compact JSON used for hashing and for JSON lines."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _umask_mode(mode: int = 0o644) -> int:
    current = os.umask(0)
    os.umask(current)
    return mode & ~current


def write_json_atomic(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> None:
    """Write JSON to a temp file in the same folder, fsync it, then rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=indent, sort_keys=True, ensure_ascii=False, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _umask_mode())  # mkstemp makes 0600; results are shared with other users and web servers
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write a text file through a temp file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


class JsonlAppender:
    """Appends one JSON object per line and flushes each line to the OS as soon as it is written.

    A line is written with a single ``write`` on a file opened with O_APPEND. If the file ends with a torn line
    (a crash mid-write), a newline is added first so the next record starts on a line of its own.
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size:
            with open(self.path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    os.write(self._fd, b"\n")

    def append(self, record: dict[str, Any]) -> None:
        data = (dumps(record) + "\n").encode("utf-8")
        os.write(self._fd, data)
        if self._fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_jsonl(path: str | os.PathLike, *, on_bad_line=None) -> Iterator[dict[str, Any]]:
    """Yield each well-formed JSON object line; torn or foreign lines go to ``on_bad_line(lineno, text)``."""
    import orjson  # imported here so the rest of this module stays stdlib-only (the env builder uses it)

    with open(path, "rb") as fh:
        data = fh.read()
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            if on_bad_line is not None:
                on_bad_line(lineno, raw[:200].decode("utf-8", "replace"))
            continue
        if not isinstance(obj, dict):
            if on_bad_line is not None:
                on_bad_line(lineno, raw[:200].decode("utf-8", "replace"))
            continue
        yield obj


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, *, shared: bool = False) -> Iterator[None]:
    """Hold an advisory ``flock`` on ``path`` (created if absent) for the duration of the block."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
