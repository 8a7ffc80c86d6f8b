"""A task's selection held compactly (key, doc index and doc hash per sample); its RunDocs made again by position."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np

from medvision_bm.data.docs import RunDoc
from medvision_bm.store.packed import PackedTexts
from medvision_bm.store.records import DocRow, Selection
from medvision_bm.store.signature import doc_sha

if TYPE_CHECKING:
    from medvision_bm.store.samples import StoreState

#: Samples materialised at a time (their docs and views exist only while their chunk is walked).
CHUNK = 4096

#: Builds the RunDocs of the given doc indices (doc_ids), in the order given.
Materialise = Callable[[list[int]], list[RunDoc]]


def selection_holds(selection: Selection | None, indices: Sequence[int] | np.ndarray) -> bool:
    """Whether a recorded selection (results.json ``selection``: ``all``, ``limit`` or ``indices``; None, as an
    import or a legacy store writes it, is every sample of docs.jsonl) takes in every one of the doc ``indices``."""
    if not selection or selection.all is not None:
        return True
    wanted = np.asarray(indices, dtype=np.int64)
    if selection.limit is not None:
        return bool((wanted < selection.limit).all())
    if selection.indices is not None:
        return bool(np.isin(wanted, np.asarray(selection.indices, dtype=np.int64)).all())
    return False


class HexShas(Sequence[str]):
    """Doc hashes kept as 64-bit numbers, read as the 16 hex digits ``doc_sha`` gives."""

    def __init__(self, codes: np.ndarray) -> None:
        self.codes = codes

    def __len__(self) -> int:
        return len(self.codes)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [f"{v:016x}" for v in self.codes[i].tolist()]
        return f"{int(self.codes[i]):016x}"

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self.codes), CHUNK):
            yield from (f"{v:016x}" for v in self.codes[start:start + CHUNK].tolist())


class StreamedSelection:
    """The selected samples of a task in selection order, without their docs: per sample its key, doc index and doc
    hash; the RunDocs of any positions are built again from the data (``materialise``) when asked for. Implements
    what scoring reads (``score.follow.Selection``) and what the runner needs: the samples still to ask, the
    docs.jsonl digest and rows, and the first doc's metadata source."""

    def __init__(self, keys: Sequence[str], indices: np.ndarray, sha_codes: np.ndarray, protocol: str, variant: str,
                 materialise: Materialise, meta_source: str | None) -> None:
        self.keys = keys
        self.indices = indices
        self.shas = HexShas(sha_codes)
        self.protocol = protocol
        self.variant = variant
        self.materialise = materialise
        self.meta_source = meta_source
        self._held: dict[int, RunDoc] = {}
        #: ``docs_digest()`` once computed (or as saved with the selection: ``runner.selection_cache``)
        self.known_docs_digest: str | None = None

    @classmethod
    def walk(cls, indices: Sequence[int], materialise: Materialise, protocol: str, variant: str) -> StreamedSelection:
        """The selection of doc ``indices`` (in that order), their RunDocs built a chunk at a time and dropped."""
        n, chunk = len(indices), CHUNK
        idx = np.fromiter(indices, dtype=np.int64, count=n)
        keys = PackedTexts()  # a million keys in their bytes, not a million string objects
        codes = np.zeros(n, dtype=np.uint64)
        source = None
        for start in range(0, n, chunk):
            rundocs = materialise(idx[start:start + chunk].tolist())
            if start == 0 and rundocs:
                source = rundocs[0].doc.meta.get("source")
            for rd in rundocs:
                keys.append(rd.doc.key)
            codes[start:start + len(rundocs)] = [int(doc_sha(rd.doc, rd.view), 16) for rd in rundocs]
        return cls(keys, idx, codes, protocol, variant, materialise, source)

    @classmethod
    def of_rundocs(cls, rundocs: Sequence[RunDoc]) -> StreamedSelection:
        """A selection over RunDocs held already (benchmarks, tests): materialised by looking them up."""
        by_index = {rd.doc.index: rd for rd in rundocs}
        first = rundocs[0] if rundocs else None
        return cls.walk([rd.doc.index for rd in rundocs], lambda idx: [by_index[i] for i in idx],
                        first.protocol if first else "", first.variant if first else "")

    def __len__(self) -> int:
        return len(self.keys)

    def rundocs(self, positions: Sequence[int] | np.ndarray) -> Iterator[RunDoc]:
        """The RunDocs at ``positions`` (in the order given), built a chunk at a time (held ones reused)."""
        pos = np.asarray(positions, dtype=np.int64)
        for start in range(0, len(pos), CHUNK):
            part = pos[start:start + CHUNK].tolist()
            missing = [p for p in part if p not in self._held]
            built = dict(zip(missing, self.materialise(self.indices[missing].tolist()))) if missing else {}
            for p in part:
                yield self._held[p] if p in self._held else built[p]

    def all_rundocs(self) -> list[RunDoc]:
        """Every RunDoc of the selection (held together: for callers that need them all at once)."""
        return list(self.rundocs(np.arange(len(self))))

    def sorted_shas(self) -> list[str]:
        """The doc hashes of the distinct samples, sorted (a key is part of its doc's hash: one hash per key)."""
        return [f"{v:016x}" for v in np.unique(self.shas.codes).tolist()]

    def todo(self, state: StoreState, keep_failed: bool) -> list[int]:
        """Positions still to ask: not answered under this signature and doc (failed ones unless kept)."""
        answered, failed = state.answered, state.failed
        return [pos for pos, (key, sha) in enumerate(zip(self.keys, self.shas))
                if not answered(key, sha) and not (keep_failed and key in failed)]

    def hold(self, positions: Sequence[int], rundocs: Sequence[RunDoc]) -> None:
        """Keep these RunDocs (made for the asking) so that scoring them does not build them again."""
        self._held = dict(zip(positions, rundocs))

    def release(self) -> None:
        self._held = {}

    def docs_digest(self) -> str:
        """What the docs.jsonl rows of the selection hold: keys, indices, doc hashes (doc and view), protocol and
        variant (no doc is built; computed once)."""
        if self.known_docs_digest is not None:
            return self.known_docs_digest
        h = hashlib.blake2b(digest_size=16)
        tail = f"\0{self.protocol}\0{self.variant}\n"
        for key, index, sha in zip(self.keys, self.indices.tolist(), self.shas):
            h.update(f"{key}\0{index}\0{sha}{tail}".encode())
        self.known_docs_digest = h.hexdigest()
        return self.known_docs_digest

    def doc_rows(self) -> Iterator[DocRow]:
        """The docs.jsonl rows of the selection in order, built a chunk at a time."""
        for pos, rd in zip(range(len(self)), self.rundocs(np.arange(len(self)))):
            yield DocRow.of(rd, self.shas[pos])
