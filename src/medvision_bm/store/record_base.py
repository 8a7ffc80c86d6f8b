"""What every record of a store's files shares: the errors a record raises (``RecordError``, ``NewerRecord``),
a JSON file's reading and writing (``JsonFile``), a JSON line's version and unknown fields, and the readers of a
JSON-lines file (``iter_lines``, ``refuse_newer_lines``). The records themselves are in the modules ``records``
names."""

from __future__ import annotations

import mmap
import os
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import ClassVar

import orjson

from medvision_bm.errors import UserError
from medvision_bm.io import read_json, write_json_atomic
from medvision_bm.jsontypes import JsonMapping, JsonObject, JsonValue

NO_EXTRA: Mapping[str, JsonValue] = MappingProxyType({})

#: The longest name a row of a store holds (a task, dataset, label name, parser, metric key).
MAX_NAME = 1000


class RecordError(ValueError):
    """A line or file that is not the record it should be (the message says why)."""


class NewerRecord(UserError):
    """A record written by a newer version of the suite than this one: refused, never half read or overwritten (a
    user error, not a damaged file: no reader skips it as a bad line)."""


def newer(what: str, version: object, known: object) -> NewerRecord:
    return NewerRecord(f"{what} of version {version}; this version of medvision-bm reads up to {known}: update "
                       "medvision-bm to read it")


def at_path(path: str | Path, exc: NewerRecord) -> NewerRecord:
    return NewerRecord(f"{path}: {exc}")


class JsonFile:
    """Reading and writing of a record kept as one JSON file: ``from_json`` and ``to_json`` are the record's own."""

    __slots__ = ()

    @classmethod
    def from_json(cls, obj: JsonValue) -> typing.Self:  # pragma: no cover - every record defines its own
        raise NotImplementedError

    def to_json(self) -> JsonObject:  # pragma: no cover - every record defines its own
        raise NotImplementedError

    @classmethod
    def read(cls, path: Path) -> typing.Self:
        """The record in the file at ``path`` (OSError when missing; ValueError, RecordError included, when
        unreadable; ``NewerRecord``, naming the file, when a newer version wrote it). A non-finite number in it (NaN,
        Infinity: never written by this suite, whose files hold none) reads as null, the one rule for numbers
        (``io.finite_or_none``), so a file read can always be written again."""
        return read_file(cls, path)

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())


_R = typing.TypeVar("_R", bound=JsonFile)
_T = typing.TypeVar("_T")


def read_file(cls: type[_R], path: str | Path) -> _R:
    """``cls.read`` of the file at ``path`` (a path or its text)."""
    try:
        return cls.from_json(read_json(path, finite=True))
    except NewerRecord as exc:
        raise at_path(path, exc) from None


class Versioned(typing.Protocol):
    """A record class whose lines carry a version (``v``) up to its own."""

    VERSION: ClassVar[int]


def line_version(cls: type[Versioned], obj: JsonMapping) -> None:
    v = obj.get("v", 1)
    if type(v) is not int:
        raise RecordError(f"a {cls.__name__} line with version {v!r}")
    if v > cls.VERSION:
        raise newer(f"a {cls.__name__} line", v, cls.VERSION)


def extra_of(obj: Mapping[str, JsonValue], known: frozenset[str]) -> Mapping[str, JsonValue]:
    if obj.keys() <= known:  # the common case, tested without a loop
        return NO_EXTRA
    unknown = {k: v for k, v in obj.items() if k not in known}
    return unknown or NO_EXTRA


def field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if f.name != "extra")



def refuse_newer_line(cls: type[Versioned], obj: JsonValue, path: Path) -> None:
    """Raise ``NewerRecord`` naming ``path`` when ``obj`` (a decoded line of that file) is a ``cls`` line of a newer
    version; any other line passes (a damaged one is each reader's to skip)."""
    if type(obj) is dict:
        try:
            line_version(cls, obj)
        except RecordError:
            pass
        except NewerRecord as exc:
            raise at_path(path, exc) from None


def refuse_newer_lines(path: Path, cls: type[Versioned]) -> None:
    """Raise ``NewerRecord`` naming ``path`` when any line of that JSON-lines file is a ``cls`` line of a newer
    version, before a writer rewrites it. Only the lines that hold a ``"v"`` key are decoded (a line without one is
    version 1): a file of a million lines is searched, not parsed. A missing or empty file passes."""
    if not path.is_file():  # missing, or not a regular file (a FIFO is never opened)
        return
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if not size:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            refuse_newer_in(mm, path, cls)


def refuse_newer_in(data: bytes | mmap.mmap, path: Path, cls: type[Versioned]) -> None:
    """``refuse_newer_lines`` on the bytes of the file ``path`` read already (``data``)."""
    size = len(data)
    at = data.find(b'"v"')
    while at >= 0:
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = size if end < 0 else end
        try:
            obj = orjson.loads(data[start:end])
        except orjson.JSONDecodeError:
            obj = None
        refuse_newer_line(cls, obj, path)
        at = data.find(b'"v"', end)


def iter_lines(path: Path, record: Callable[[JsonValue], _T],
               on_bad: Callable[[], None] | None = None) -> Iterator[_T]:
    """The records of a JSON-lines file in file order (``record``: a ``from_json``); a line that is not JSON or not
    such a record is skipped and counted through ``on_bad``."""
    for _, rec in iter_lines_with(path, record, on_bad):
        yield rec


def iter_lines_with(path: Path, record: Callable[[JsonValue], _T],
                    on_bad: Callable[[], None] | None = None) -> Iterator[tuple[bytes, _T]]:
    """``iter_lines`` with each record's line (stripped), as the file holds it."""
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            try:
                rec = record(orjson.loads(line))
            except (orjson.JSONDecodeError, RecordError):
                if on_bad is not None:
                    on_bad()
                continue
            except NewerRecord as exc:
                raise at_path(path, exc) from None
            yield line, rec



def schema_version(schema: object, prefix: str) -> int | None:
    """N of a ``prefix/N`` schema (None for another schema or none)."""
    if isinstance(schema, str) and schema.startswith(prefix + "/"):
        tail = schema[len(prefix) + 1:]
        return int(tail) if tail.isdigit() else None
    return None

