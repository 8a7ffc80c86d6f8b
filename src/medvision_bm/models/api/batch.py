"""The provider-neutral side of batch runs: what a provider's batch interface must offer (:class:`BatchProvider`),
the state of a submitted batch and one item's result. Each provider module only translates: a live request into
its batch item, its batch objects and result lines into these records."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from medvision_bm.models.api.images import EncodedImage
from medvision_bm.models.api.retry import AttemptError
from medvision_bm.models.api.wire import Completion
from medvision_bm.models.base import GenRequest


@dataclass(frozen=True)
class BatchResult:
    """One item of a finished batch: the answer, or why this sample must be asked again."""

    custom_id: str
    completion: Completion | None
    error: AttemptError | None


@dataclass(frozen=True)
class BatchState:
    """A submitted batch as its provider reports it: ``ended`` once no item will change any more (completed,
    failed, expired or cancelled: the results of the items that finished can then be read)."""

    status: str
    ended: bool
    total: int | None = None
    done: int | None = None
    failed: int | None = None


class BatchProvider(Protocol):
    """One provider's batch interface. ``item`` builds the batch item of a live request from exactly the body a live
    request sends; every other method is one attempt of one call (the caller retries it under the suite's policy)
    and raises AttemptError on failure."""

    name: str
    #: a provider's limits on one batch: requests, and bytes of what is sent
    max_requests: int
    max_bytes: int

    def item(self, custom_id: str, request: GenRequest, images: list[EncodedImage]) -> bytes: ...

    async def submit(self, items: list[bytes], timeout_s: float) -> str: ...

    async def retrieve(self, batch_id: str, timeout_s: float) -> BatchState: ...

    async def results(self, batch_id: str, timeout_s: float) -> list[BatchResult]: ...

    async def cancel(self, batch_id: str, timeout_s: float) -> None: ...


def split_items(items: Iterable[bytes], max_requests: int, max_bytes: int) -> Iterator[list[bytes]]:
    """Group items into batches that each stay within the count and byte limits; an item alone over the byte
    limit cannot be sent in a batch and is refused."""
    chunk: list[bytes] = []
    size = 0
    for item in items:
        if len(item) > max_bytes:
            raise ValueError(f"one batch request is {len(item)} bytes, over the {max_bytes}-byte batch limit")
        if chunk and (len(chunk) >= max_requests or size + len(item) > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(item)
        size += len(item)
    if chunk:
        yield chunk


def custom_id(position: int) -> str:
    """The id of a batch's ``position``-th item: every provider's id rules allow it (Anthropic: 1-64 of
    ``[A-Za-z0-9_-]``); the store's batch record maps it back to the sample."""
    return f"s{position}"

