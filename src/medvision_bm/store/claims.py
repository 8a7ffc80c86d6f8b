"""Claims on the samples of one store, so that concurrent runs of a task never ask one sample twice: a lease per
live run, the keys it claimed, and the queue a run takes its chunks from (the store's answers and open batches
looked at as they land)."""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from medvision_bm.io import dumps, file_lock, lock_held
from medvision_bm.store import layout as names
from medvision_bm.store.batches import batched_keys
from medvision_bm.store.layout import StoreLayout

#: What a store's ``refresh`` is given: the state it was read in (a samples.StoreState, or None for a judged folder)
_State = TypeVar("_State")
_StateIn = TypeVar("_StateIn", contravariant=True)


class ClaimedStore(Protocol[_StateIn]):
    """What :class:`Claims` reads of a store: where its claims live (``layout``) and the keys that landed in it
    since ``state`` was read (``refresh``): a SampleStore, or a judged folder."""

    @property
    def layout(self) -> StoreLayout: ...

    def refresh(self, state: _StateIn) -> set[str]: ...


class Claims(Generic[_State]):
    """Claims on the samples of one store, so that concurrent runs of a task never ask the same sample twice.

    Each run that answers samples of the store holds a lease, ``claims/<name>.lease``, locked (``flock``) for as
    long as the run lives: the kernel drops the lock when the process dies, however it dies. The keys the run claimed
    are appended to ``claims/<name>.keys``. A run claims a chunk of its to-do list under the store's
    ``.claims.lock``: keys held by a live lease or answered (or failed) by another run since this one read the store
    are skipped. A dead run's lease and keys are removed by the next run that claims, and the keys it did not answer
    become claimable again; what it answered is in its store segment. Leases need locks that work across the
    machines that share the results folder (local disks do; NFS with lockd does).
    """

    #: seconds between looks at the store while every remaining sample is held by another live run
    POLL_S = 0.5

    def __init__(self, store: ClaimedStore[_State], state: _State, name: str) -> None:
        self.store = store
        self.state = state
        self.name = name
        self.dir = store.layout.claims
        self.dir.mkdir(parents=True, exist_ok=True)
        self._others: dict[str, tuple[int, set[str]]] = {}  # live lease name -> (bytes of its keys read, keys)
        self.taken_over = 0  # keys a dead run had claimed and this run claimed again
        self._lease_fd = -1
        with file_lock(store.layout.claims_lock):
            fd = os.open(self.dir / (name + names.LEASE_SUFFIX), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new file, unique name: never held by another
            os.write(fd, dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}).encode())
            self._lease_fd = fd
        self._keys_fd = os.open(self.dir / (name + names.KEYS_SUFFIX), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _scan(self) -> list[set[str]]:
        """The key sets of live runs (one per run: never merged, so a look-up costs the number of runs, not their
        keys); removes dead runs' claim files (caller holds ``.claims.lock``)."""
        held: list[set[str]] = []
        for lease in self.dir.glob("*" + names.LEASE_SUFFIX):
            other = lease.name[: -len(names.LEASE_SUFFIX)]
            if other == self.name:
                continue
            alive = lease_alive(lease)
            if alive is None:
                self._others.pop(other, None)
            elif alive:
                held.append(self._read_keys(other)[1])
            else:
                if other in self._others or (self.dir / (other + names.KEYS_SUFFIX)).exists():
                    self.taken_over += len(self._read_keys(other)[1])
                _remove_claim_files(self.dir, other)
                self._others.pop(other, None)
        for gone in set(self._others) - {p.name[: -len(names.LEASE_SUFFIX)] for p in self.dir.glob("*" + names.LEASE_SUFFIX)}:
            self._others.pop(gone, None)
        return held

    def _read_keys(self, other: str) -> tuple[int, set[str]]:
        offset, keys = self._others.get(other, (0, set()))
        try:
            with open(self.dir / (other + names.KEYS_SUFFIX), "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n") + 1
        keys.update(k.decode("utf-8", "replace") for k in data[:end].split(b"\n") if k)
        self._others[other] = (offset + end, keys)
        return self._others[other]

    def take(self, wanted: list[str], n: int) -> tuple[list[str], list[str], int]:
        """Claim up to ``n`` of ``wanted`` (in order): returns (claimed, done elsewhere, held by live runs). Every key
        of ``wanted`` is looked at: for a long to-do list claimed chunk by chunk use :class:`ClaimQueue`."""
        with file_lock(self.store.layout.claims_lock):
            held = self._scan()
            landed = self.store.refresh(self.state)  # after the scan: a dead run's last answers are seen
            claimed: list[str] = []
            elsewhere: list[str] = []
            n_held = 0
            for key in wanted:
                if key in landed:
                    elsewhere.append(key)
                elif any(key in keys for keys in held):
                    n_held += 1
                elif len(claimed) < n:
                    claimed.append(key)
            self._record(claimed)
        return claimed, elsewhere, n_held

    def _record(self, claimed: list[str]) -> None:
        if claimed:
            os.write(self._keys_fd, "".join(k + "\n" for k in claimed).encode("utf-8"))

    def queue(self, keys: Iterable[str]) -> ClaimQueue[_State]:
        """A to-do list to claim chunk by chunk (:class:`ClaimQueue`), in order."""
        return ClaimQueue(self, keys)

    def wait(self) -> None:
        time.sleep(self.POLL_S)

    def close(self) -> None:
        """Give up every claim of this run (its answers are stored; what it did not answer is claimable again)."""
        if self._lease_fd < 0:
            return
        with file_lock(self.store.layout.claims_lock):
            for suffix in (names.KEYS_SUFFIX, names.LEASE_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    (self.dir / (self.name + suffix)).unlink()
            os.close(self._keys_fd)
            os.close(self._lease_fd)
            self._lease_fd = self._keys_fd = -1

    def __enter__(self) -> Claims[_State]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ClaimQueue(Generic[_State]):
    """A run's to-do list claimed chunk by chunk at a cost per key, not per chunk: each key leaves the queue once
    (claimed, answered by another run, or set aside while a live run holds it), the answers that land are matched
    against the keys still pending as they are read, and the keys set aside are looked at again only once the queue
    is empty. :meth:`next` gives what :meth:`Claims.take` gives for the whole list, without reading it each time."""

    def __init__(self, claims: Claims[_State], keys: Iterable[str]) -> None:
        self.claims = claims
        self.queue = collections.deque(dict.fromkeys(keys))
        self.pending = set(self.queue)
        self.held: list[str] = []
        self.batched: set[str] = set()  # keys in an open provider batch: left to the run that collects it

    def __len__(self) -> int:
        return len(self.pending)

    def next(self, n: int) -> tuple[list[str], list[str], bool]:
        """Claim up to ``n`` pending keys in order: (claimed, answered elsewhere since the last call, whether every
        key left is held by another live run, so the caller waits before asking again)."""
        c = self.claims
        with file_lock(c.store.layout.claims_lock):
            live = c._scan()
            landed = c.store.refresh(c.state)  # after the scan: a dead run's last answers are seen
            elsewhere = [k for k in landed if k in self.pending]
            self.pending.difference_update(elsewhere)
            batched = batched_keys(c.store.layout) & self.pending
            self.pending -= batched
            self.batched |= batched
            if not self.queue:
                self.queue, self.held = collections.deque(self.held), []
            claimed: list[str] = []
            while self.queue and len(claimed) < n:
                key = self.queue.popleft()
                if key not in self.pending:
                    continue  # answered elsewhere while it waited in the queue
                if any(key in keys for keys in live):
                    self.held.append(key)
                    continue
                claimed.append(key)
                self.pending.discard(key)
            c._record(claimed)
        return claimed, elsewhere, not claimed and not elsewhere and bool(self.pending)


def lease_alive(lease: Path) -> bool | None:
    """Whether the run holding this lease lives (``io.lock_held``); None when the lease is gone."""
    return lock_held(lease)


def _remove_claim_files(folder: Path, name: str) -> None:
    for suffix in (names.KEYS_SUFFIX, names.LEASE_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            (folder / (name + suffix)).unlink()


def sweep_dead_claims(layout: StoreLayout) -> int:
    """Remove the claim files of runs that died (their leases are no longer locked); returns how many runs."""
    if not layout.claims.is_dir():
        return 0
    dead = 0
    with file_lock(layout.claims_lock):  # a run claiming takes this lock too: no lease is made or read meanwhile
        for lease in layout.claims.glob("*" + names.LEASE_SUFFIX):
            if lease_alive(lease) is False:
                dead += 1
                _remove_claim_files(layout.claims, lease.name[: -len(names.LEASE_SUFFIX)])
    return dead


def live_writers(layout: StoreLayout) -> set[str]:
    """The writers whose run is alive (``lease_alive``)."""
    if not layout.claims.is_dir():
        return set()
    return {lease.name[: -len(names.LEASE_SUFFIX)] for lease in layout.claims.glob("*" + names.LEASE_SUFFIX)
            if lease_alive(lease)}


def prune_score_files(layout: StoreLayout, keep: Iterable[str] = ()) -> int:
    """Remove the persisted scores (``scores/<writer>.jsonl``) of writers no live run holds, once parsed.jsonl holds
    their rows (called after a task's scoring wrote it); a live run's file stays (its answers are still landing), and
    so do ``keep``'s (the finishing run's own, removed by the next run's finish: a store keeps at most the last
    finished run's scores besides the live ones). Returns how many files were removed."""
    if not layout.scores.is_dir():
        return 0
    live = live_writers(layout) | set(keep)
    removed = 0
    for path in layout.scores.glob("*" + names.SEGMENT_SUFFIX):
        if path.name[: -len(names.SEGMENT_SUFFIX)] not in live:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed
