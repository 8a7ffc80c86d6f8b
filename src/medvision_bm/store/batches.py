"""A store's open provider batches: one record per batch (its provider id and the samples it covers), which is a
claim no run asks those samples under while the batch is open, and the lock of the run collecting it.

A run that submits a batch first takes the batch's lock (``batches/<id>.lock``, ``flock``: the kernel drops it when
the run dies, however it dies), then writes the record with the samples and no provider id, submits, and writes
the provider's id in. Until the record is removed (after every result is stored), no run claims those samples
(``claims.ClaimQueue`` leaves them out). A run that finds a record whose lock nobody holds re-attaches to it: it
takes the lock and collects the batch; a record without a provider id and without a live owner was never
submitted (the run died before the provider answered the create call), and is dropped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from medvision_bm import limits
from medvision_bm.io import finite_or_none, lock_held, read_json, write_json_atomic
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.layout import BATCH_SUFFIX, BATCHES, StoreLayout
from medvision_bm.store.records import NO_EXTRA, NewerRecord, RecordError


@dataclass(frozen=True)
class BatchItem:
    """One sample of a batch: its key, doc index and doc hash when it was submitted (the answer is stored so), and
    the id its request carries in the batch."""

    key: str
    index: int
    doc_sha: str
    custom_id: str


@dataclass(frozen=True)
class BatchRecord:
    """``batches/<local_id>.json``: a batch of one store's samples at one provider's batch interface."""

    VERSION: ClassVar[int] = 1

    local_id: str
    interface: str  # the backend that submitted it ("openai:openai"): only a run of the same one collects it
    items: tuple[BatchItem, ...]
    created: float
    batch_id: str | None = None  # the provider's id; None until the create call returned
    submitted: float | None = None
    host: str = ""
    pid: int = 0
    schema: int = VERSION
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)

    def to_json(self) -> JsonObject:
        out: JsonObject = {"local_id": self.local_id, "interface": self.interface, "batch_id": self.batch_id,
               "created": self.created, "submitted": self.submitted, "host": self.host, "pid": self.pid,
               "schema": self.schema, "items": [[i.key, i.index, i.doc_sha, i.custom_id] for i in self.items]}
        return {**self.extra, **out}

    @classmethod
    def from_json(cls, obj: JsonValue) -> BatchRecord:
        if not isinstance(obj, dict):
            raise RecordError("a batch record is not a JSON object")
        schema, batch_id = obj.get("schema"), obj.get("batch_id")
        if isinstance(schema, int) and schema > cls.VERSION:
            raise NewerRecord(f"batch record of version {schema}; this version of medvision-bm reads up to "
                              f"{cls.VERSION}: update medvision-bm to read it")
        try:
            items = tuple(_item(entry) for entry in _list(obj["items"], "items"))
            known = {"local_id", "interface", "batch_id", "created", "submitted", "host", "pid", "schema", "items"}
            return cls(str(obj["local_id"]), str(obj["interface"]), items, _float(obj["created"]),
                       batch_id if isinstance(batch_id, str) else None,
                       finite_or_none(obj.get("submitted")), str(obj.get("host") or ""),
                       _int(obj.get("pid") or 0), _int(schema or cls.VERSION),
                       {k: v for k, v in obj.items() if k not in known})
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordError(f"a batch record without its fields ({type(exc).__name__}: {exc})") from None

    @classmethod
    def read(cls, path: Path) -> BatchRecord:
        try:
            return cls.from_json(limits.finite_only(read_json(path)))
        except NewerRecord as exc:
            raise NewerRecord(f"{path}: {exc}") from None

    def write(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    @property
    def keys(self) -> list[str]:
        return [i.key for i in self.items]


def _list(value: JsonValue, what: str) -> list[JsonValue]:
    if not isinstance(value, list):
        raise TypeError(f"{what} is {limits.shown(value)}, not a list")
    return value


def _int(value: JsonValue) -> int:
    """``int(value)`` of a record's field: a list, an object or null refused (TypeError), as ``int()`` does."""
    if not isinstance(value, str | int | float):
        raise TypeError(f"int() argument is {limits.shown(value)}, not a number")
    return int(value)


def _float(value: JsonValue) -> float:
    """``float(value)`` of a record's field: a list, an object or null refused (TypeError), as ``float()`` does."""
    if not isinstance(value, str | int | float):
        raise TypeError(f"float() argument is {limits.shown(value)}, not a number")
    return float(value)


def _item(entry: JsonValue) -> BatchItem:
    """A batch item of its record's ``items``: [key, doc index, doc hash, custom id]."""
    if not isinstance(entry, list) or len(entry) != 4:
        raise ValueError(f"an item is {limits.shown(entry)}, not [key, index, doc_sha, custom_id]")
    k, i, s, c = entry
    return BatchItem(str(k), _int(i), str(s), str(c))


class BatchHold:
    """The lock of one open batch, held by the run that collects it (released when the run ends or dies)."""

    def __init__(self, layout: StoreLayout, local_id: str, fd: int) -> None:
        self.layout, self.local_id, self._fd = layout, local_id, fd

    @classmethod
    def take(cls, layout: StoreLayout, local_id: str) -> BatchHold | None:
        """The lock of ``local_id`` if no live run holds it, else None."""
        layout.batches.mkdir(parents=True, exist_ok=True)
        fd = os.open(layout.batch_lock(local_id), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return cls(layout, local_id, fd)

    def write(self, record: BatchRecord) -> None:
        record.write(self.layout.batch(self.local_id))

    def close(self, *, finished: bool) -> None:
        """Let go of the batch; ``finished``: every result is stored, so its record (the claim) is removed."""
        if self._fd < 0:
            return
        if finished:
            for path in (self.layout.batch(self.local_id), self.layout.batch_lock(self.local_id)):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        os.close(self._fd)
        self._fd = -1


def new_local_id() -> str:
    """A batch's name in its store, unique to its writer (host, pid and time)."""
    return f"{socket.gethostname()}-{os.getpid()}-{time.time_ns()}"


def open_batches(layout: StoreLayout) -> list[tuple[Path, BatchRecord | None]]:
    """Every open batch record of a store (None for one that cannot be read: the samples it covers cannot be known,
    and a run that finds it says so)."""
    out: list[tuple[Path, BatchRecord | None]] = []
    for path in layout.batch_records():
        try:
            out.append((path, BatchRecord.read(path)))
        except FileNotFoundError:
            continue  # collected meanwhile
        except (OSError, ValueError):
            out.append((path, None))
    return out


def batched_keys(layout: StoreLayout) -> set[str]:
    """The samples covered by the store's open batches: claimed, asked by no run until the batch is collected."""
    return {k for _, rec in open_batches(layout) if rec is not None for k in rec.keys}


def is_held(layout: StoreLayout, local_id: str) -> bool:
    """Whether a live run holds this batch's lock (it is collecting it); creates no file."""
    return lock_held(layout.batch_lock(local_id)) is True


def age_text(since: float, now: float | None = None) -> str:
    """How long ago ``since`` (epoch seconds) was, for people: 42 s, 17 min, 3.5 h."""
    s = max(0.0, (time.time() if now is None else now) - since)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


@dataclass(frozen=True)
class OpenBatchRow:
    """One open batch as `medvision-bm status` shows it (read from the store alone: no provider is asked)."""

    store: Path
    local_id: str
    interface: str
    batch_id: str | None
    samples: int
    since: float  # when it was submitted (or recorded, before the provider answered)
    collecting: bool  # a live run holds it now


def open_batch_rows(results_dir: Path) -> list[OpenBatchRow]:
    """Every open batch of the stores below ``results_dir``, oldest first (an unreadable record is shown with no
    samples: it is named, so it can be looked at)."""
    rows: list[OpenBatchRow] = []
    for folder in sorted({p.parent.parent for p in results_dir.rglob(f"{BATCHES}/*{BATCH_SUFFIX}")}):
        layout = StoreLayout(folder)
        for path, rec in open_batches(layout):
            local_id = path.name[: -len(BATCH_SUFFIX)]
            if rec is None:
                rows.append(OpenBatchRow(folder, local_id, "?", None, 0, path.stat().st_mtime, False))
                continue
            rows.append(OpenBatchRow(folder, local_id, rec.interface, rec.batch_id, len(rec.items),
                                     rec.submitted or rec.created, is_held(layout, local_id)))
    return sorted(rows, key=lambda r: r.since)
