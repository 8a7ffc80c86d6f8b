"""Durable file I/O: atomic JSON writes, append-only JSON lines that tolerate a torn tail, and file locks.

Stdlib-only at import (orjson is imported where JSON lines are read), so the environment builder can use it
before any model environment exists.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import math
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, SupportsFloat, SupportsIndex

from medvision_bm import limits
from medvision_bm.jsontypes import JsonMapping


def dumps(obj: object) -> str:
    """Canonical compact JSON used for hashing and for JSON lines."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def finite_or_none(value: object) -> float | None:
    """A number as a record keeps it: None, NaN and the infinities become None (JSON has no such number, and
    upstream leaves a non-finite value out of every mean), anything else a float. The one rule for numbers."""
    if type(value) is float:  # (the common case first: a protocol check costs microseconds)
        return value if math.isfinite(value) else None
    if value is None:
        return None
    if isinstance(value, (float | int | str | bytes | bytearray, SupportsFloat | SupportsIndex)):  # (cheap ones first)
        x = float(value)
    else:
        raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")
    return x if math.isfinite(x) else None


def jsonable(obj: object) -> Any:
    """Foreign data (lmms-eval's per-sample log, upstream's result files) as ``dumps`` accepts it: keys as text,
    tuples as lists, a non-finite float as its text (``"nan"``, ``"inf"``, ``"-inf"``: kept, never turned into a
    number or dropped), other numbers (numpy scalars) as floats, anything else as its text. The one rule for data
    that is not ours; numbers of our own records go through ``finite_or_none``."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if not isinstance(obj, float):
        if not isinstance(obj, SupportsFloat | SupportsIndex | bytes | bytearray | memoryview):
            return str(obj)  # what float() refuses with a TypeError
        try:
            obj = float(obj)
        except (TypeError, ValueError):
            return str(obj)
    return obj if math.isfinite(obj) else str(obj)


def _umask_mode(mode: int = 0o644) -> int:
    current = os.umask(0)
    os.umask(current)
    return mode & ~current


#: Temp files of atomic writes: ``.<target name>.<host>.<pid>.<random>.tmp`` in the target's folder. The host and
#: pid let a later writer tell a killed writer's leftover (removed) from a live writer's file in progress (kept).
TMP_SUFFIX = ".tmp"
_HOST = socket.gethostname().replace(".", "_") or "host"


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}.{_HOST}.{os.getpid()}."


def _stale_tmp(name: str, now: float, st_mtime: float) -> bool:
    """A temp file of an atomic write whose writer is gone (dead pid on this host; a day old from another host)."""
    parts = name[1:-len(TMP_SUFFIX)].rsplit(".", 3)
    if len(parts) != 4 or not parts[2].isdigit():
        return False
    host, pid = parts[1], int(parts[2])
    if host != _HOST:
        return now - st_mtime > 86400
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive under another user
        return False
    return False


def clean_stale_temps(folder: str | os.PathLike[str], name: str | None = None) -> int:
    """Remove the temp files that killed atomic writes left in ``folder`` (only ``name``'s when given)."""
    folder = Path(folder)
    pattern = f".{glob.escape(name)}.*{TMP_SUFFIX}" if name else f".*{TMP_SUFFIX}"
    now = time.time()
    removed = 0
    try:
        candidates = list(folder.glob(pattern))
    except OSError:
        return 0
    for tmp in candidates:
        try:
            if _stale_tmp(tmp.name, now, tmp.stat().st_mtime):
                tmp.unlink()
                removed += 1
        except OSError:  # gone meanwhile, or not ours to remove
            continue
    return removed


#: The errors of a disk (or a quota) that is full.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def _naming(exc: BaseException, path: Path) -> BaseException:
    """A disk-full error of a write to ``path`` that names ``path`` (``write`` and ``fsync`` errors name no file, and
    a temp file's name is not the one to tell a user); any other error as it is."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS and exc.filename != str(path):
        return OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path))
    return exc


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, fsync: bool = False) -> Iterator[Path]:
    """Yield a temp path beside ``path``; when the block ends without error the temp file replaces ``path``.

    For writers that take a path (``savefig``, ``Image.save``: pass the format, the temp name ends in .tmp). A reader
    sees the old file or the new one, never a partial one; a failed or killed write leaves no file under ``path``,
    and a killed one's temp file is removed by the next atomic write of the same file (``clean_stale_temps``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(path.parent, path.name)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=TMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise _naming(exc, path) from exc
    os.close(fd)
    try:
        yield Path(tmp)
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, _umask_mode())  # mkstemp makes 0600; results are shared with other users and web servers
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        named = _naming(exc, path)
        if named is not exc:
            raise named from exc
        raise


def write_json_atomic(path: str | os.PathLike[str], obj: object, *, indent: int | None = 2,
                      encode: Callable[[object], str] | None = None) -> None:
    """Write JSON to a temp file in the same folder, fsync it, then rename over the target. ``encode``: an encoder
    of ``obj`` giving the text ``json.dumps`` gives with these settings (a faster one for a large structure)."""
    # dumps, not dump: json.dump always takes the pure-Python encoder; dumps takes the C one when indent is None
    text = encode(obj) if encode is not None else json.dumps(obj, indent=indent, sort_keys=True, ensure_ascii=False,
                                                             allow_nan=False)
    with atomic_path(path, fsync=True) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.write("\n")


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a text file through a temp file and a rename."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_lines_atomic(path: str | os.PathLike[str], lines: Iterable[str | bytes]) -> None:
    """Write lines (each ending in a newline) streamed from an iterable, through a temp file and a rename."""
    with atomic_path(path) as tmp, open(tmp, "wb", buffering=1 << 20) as fh:
        for line in lines:
            fh.write(line.encode("utf-8") if isinstance(line, str) else line)


def read_json(path: str | os.PathLike[str], finite: bool = False) -> Any:
    """A JSON file of ours read whole, within the bounds of every outside input (``limits``): a file over
    ``limits.MAX_JSON_FILE_BYTES``, nested past ``limits.MAX_JSON_DEPTH`` or not UTF-8 JSON is a ValueError naming
    it, as any damaged file is to the callers; a missing one FileNotFoundError, a folder or FIFO an OSError (nothing
    blocks on a pipe). Strict JSON is decoded by orjson (``limits.loads_quick``), anything else by ``json``, to the
    same values; ``finite``: every NaN and infinity as None (``limits.finite_only``)."""
    st = os.stat(path)
    why = limits.non_regular_problem(st.st_mode)
    if why:
        raise OSError(errno.EINVAL, f"the JSON file {why}", str(path))
    cap = limits.MAX_JSON_FILE_BYTES
    if st.st_size > cap:
        raise ValueError(f"JSON file {path} has {limits.size_text(st.st_size)}, over the {limits.size_text(cap)} "
                         "this suite reads of it")
    with open(path, "rb") as fh:
        # a buffer of the file's size (one more byte tells a file grown since): a read of ``cap + 1`` bytes would
        # allocate the whole cap for every small file
        data = fh.read(st.st_size + 1)
        if len(data) > st.st_size:
            data += fh.read(cap + 1 - len(data))
    if len(data) > cap:
        raise ValueError(f"JSON file {path} grew past the {limits.size_text(cap)} this suite reads of it")
    value = limits.loads_quick(data)
    # each level of nesting takes two bytes at least: a small file cannot nest past the bound
    if value is not limits.QUICK_MISS and (len(data) <= 2 * limits.MAX_JSON_DEPTH or limits.json_depth_ok(value)):
        return value  # strict JSON: no NaN or infinity in it
    value = limits.loads_json(data.decode("utf-8"), f"JSON file {path}")
    return limits.finite_only(value) if finite else value


class JsonlAppender:
    """Appends one JSON object per line and flushes each line to the OS as soon as it is written.

    A line is written with a single ``write`` on a file opened with O_APPEND. If the file ends with a torn line
    (a crash mid-write), a newline is added first so the next record starts on a line of its own.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
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

    def append(self, record: JsonMapping) -> None:
        data = (dumps(record) + "\n").encode("utf-8")
        try:
            os.write(self._fd, data)
            if self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            named = _naming(exc, self.path)
            if named is not exc:
                raise named from exc
            raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_jsonl(path: str | os.PathLike[str], *, on_bad_line: Callable[[int, str], None] | None = None
               ) -> Iterator[dict[str, Any]]:
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


def lock_held(path: str | os.PathLike[str]) -> bool | None:
    """Whether a live process holds the ``flock`` on ``path`` (a dead one's went with it); None when there is no
    such file. The probe takes the lock for an instant and creates nothing."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str], *, shared: bool = False) -> Iterator[None]:
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


def run_tmpdir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temp folder ``<prefix><host>.<pid>.<random>`` in the system temp dir; first removes the folders of this
    prefix that killed processes of this host left behind (a live process's folder is kept)."""
    import shutil

    base = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for old in base.glob(f"{glob.escape(prefix)}*"):
            name = old.name[len(prefix):]
            parts = name.split(".")
            if len(parts) != 3 or parts[0] != _HOST or not parts[1].isdigit() or not old.is_dir():
                continue
            if _stale_tmp(f".x.{_HOST}.{parts[1]}.r{TMP_SUFFIX}", time.time(), old.stat().st_mtime):
                shutil.rmtree(old, ignore_errors=True)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{_HOST}.{os.getpid()}.")
