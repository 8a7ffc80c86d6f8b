"""Asking a backend for the samples a run claims, one chunk at a time through the store's claims, so that concurrent
runs of one task never ask one sample twice: the loop lmms-eval's model class and the direct harness share."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from medvision_bm.models.base import Backend, GenRequest, GenResult
from medvision_bm.tasks.upstream_parse import OUR_FAILURE_MARKER


class ClaimQueue(Protocol):
    """A queue of keys to claim (``store.claims.ClaimQueue``): truthy while keys are left."""

    def __len__(self) -> int: ...

    def next(self, n: int) -> tuple[list[str], list[str], bool]:
        """Up to ``n`` keys claimed for this run, keys another run answered, and whether to wait for the rest."""
        ...


class ClaimSource(Protocol):
    """A store's claims (``store.claims.Claims``, or its ``--max_cost`` capped form)."""

    def queue(self, keys: Iterable[str]) -> ClaimQueue: ...

    def wait(self) -> None: ...


def answer_text(res: GenResult) -> str:
    """What the harness gets for one result: the answer, or the failure marker with the failure's kind."""
    return res.text if res.ok and res.text is not None else f"{OUR_FAILURE_MARKER} {res.error.kind if res.error else ''}"


def ask_claimed(backend: Backend, pending: dict[str, GenRequest], on_result: Callable[[GenResult], None],
                claims: ClaimSource | None, chunk: int, texts: dict[str, str]) -> None:
    """Ask ``pending`` (key -> request, in asking order; emptied as it goes). With ``claims`` (a
    ``store.claims.Claims``), a chunk is claimed, answered, then the next; a sample another run answered, or one the
    claims no longer give (a spent ``--max_cost``), gets the failure marker in ``texts``, never an answer."""
    if claims is None:
        backend.generate(list(pending.values()), on_result)
        pending.clear()
        return
    queue = claims.queue(pending)
    while queue:
        mine, elsewhere, wait = queue.next(chunk)
        for key in elsewhere:
            texts[key] = f"{OUR_FAILURE_MARKER} answered_by_another_run"
            pending.pop(key).release_images()
        if mine:
            backend.generate([pending.pop(k) for k in mine], on_result)
        elif wait:
            claims.wait()
        elif not elsewhere:  # the claims give no more (a --max_cost budget spent): the rest is not asked
            break
    for key in list(pending):
        texts[key] = f"{OUR_FAILURE_MARKER} not_asked"
        pending.pop(key).release_images()
