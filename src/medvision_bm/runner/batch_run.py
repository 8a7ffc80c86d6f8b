"""`run --batch`: a task's samples asked through the provider's batch interface, one driver for every provider.

The run first re-attaches to the store's open batches that no live run is collecting (a killed or restarted run's),
then claims its to-do samples as a live run does, builds each one's request exactly as a live run sends it
(``harness.request_for``, the backend's image encoding and body), splits them at the provider's count and byte
limits, and for each batch records the samples in the store (``store.batches``: a claim) before it submits and the
provider's id after. It then polls every open batch at ``--batch_poll`` seconds (each call under the run's retry
policy) and, as each batch ends, stores every item's result as a live answer is stored. An item without an answer
(failed, expired, cancelled) is stored as a failed request: never scored, asked again by the next run. A batch's
record is removed once all its results are stored; a run that stops before that leaves it for the next run.

A run may do one phase only (``--batch_phase``, a cluster's pair of jobs): "submit" submits what the claims give and
ends, leaving its batches open (it takes over none); "collect" re-attaches to the open batches and collects them,
and submits nothing, so a collect run killed or out of time is re-attached by the next one, never resubmitted.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from medvision_bm.data.docs import RunDoc
from medvision_bm.models.api.batch import BatchProvider, BatchResult, BatchState, custom_id, split_items
from medvision_bm.models.api.engine import ApiBackend, BatchCallError
from medvision_bm.models.api.retry import AttemptError
from medvision_bm.models.base import GenResult, GenSettings, RequestError
from medvision_bm.runner.cost_cap import SampleClaims, SampleQueue
from medvision_bm.runner.harness import request_for
from medvision_bm.store.batches import (
    BatchHold,
    BatchItem,
    BatchRecord,
    age_text,
    batched_keys,
    new_local_id,
    open_batches,
)
from medvision_bm.store.layout import StoreLayout

#: Requests built (images encoded) at a time before they join a batch: the memory of a claim of 50,000 samples is
#: one batch's bytes and this many requests, not every request of the claim.
_BUILD_SLICE = 256

#: Where each result goes: (result, doc index, doc hash) -> stored.
StoreResult = Callable[[GenResult, int, str], None]


@dataclass
class OpenBatch:
    hold: BatchHold
    record: BatchRecord


class BatchRun:
    """One task's batch run over one store (the caller owns the writer and the claims)."""

    def __init__(self, backend: ApiBackend, layout: StoreLayout, claims: SampleClaims, store_result: StoreResult, *,
                 poll_s: float, task: str, phase: str = "all", sleep: Callable[[float], None] = time.sleep) -> None:
        self.backend = backend
        self.layout = layout
        self.claims = claims
        self.store_result = store_result
        self.poll_s = poll_s
        self.task = task
        self.phase = phase  # "all", "submit" or "collect" (--batch_phase)
        self.sleep = sleep
        self.open: list[OpenBatch] = []
        self.submitted = 0  # batches this run created
        self.reattached = 0
        self.attached_keys: set[str] = set()  # the samples of the batches this run re-attached to

    def run(self, todo: Sequence[RunDoc], gen: GenSettings, system_prompt: str | None, sha_of: dict[str, str]) -> None:
        """Re-attach, then submit and collect in rounds: a round submits what the claims give (everything, unless a
        --max_cost budget holds some back until the answers in flight have landed and been priced)."""
        try:
            self._reattach()
            by_key = {rd.doc.key: rd for rd in todo}
            if self.phase == "collect":
                self._collect()
                self._note_unbatched(by_key)
                return
            queue = self.claims.queue(by_key) if by_key else None
            while True:
                submitted = self._submit_claimed(queue, by_key, gen, system_prompt, sha_of) if queue else 0
                if self.phase == "submit":
                    self._say(f"{self.submitted} batch(es) submitted ({submitted} samples); the collect phase "
                              "(`--batch_phase collect`) stores their answers")
                    return
                self._collect()
                if not submitted:
                    break
            others = set(queue.batched) - self.attached_keys if queue is not None else set()
            if others:
                self._say(f"{len(others)} sample(s) are in another run's open batch; that run stores them")
        finally:
            for ob in self.open:  # stopped before these ended: the next run re-attaches to them
                ob.hold.close(finished=False)

    # ------------------------------------------------------------------ re-attach
    def _reattach(self) -> None:
        for path, rec in open_batches(self.layout):
            if rec is None:
                self._say(f"batch record {path} cannot be read: the samples it covers are not known, so they may be "
                          "asked again; move it away once its batch is collected or cancelled at the provider")
                continue
            if rec.interface != self.backend.name:
                continue  # another provider's batch (the same answers through another interface): its run collects it
            hold = BatchHold.take(self.layout, rec.local_id)
            if hold is None:
                continue  # a live run is collecting it
            if not path.exists():  # collected by another run since it was read: nothing left to take over
                hold.close(finished=True)
                continue
            if rec.batch_id is None:  # its run died before the provider answered the create call
                hold.close(finished=True)
                self._say(f"dropped batch record {rec.local_id}: its run stopped before the batch was created; its "
                          f"{len(rec.items)} samples are asked again")
                continue
            if self.phase == "submit":  # left open for the collect phase, which takes it over
                hold.close(finished=False)
                continue
            self.open.append(OpenBatch(hold, rec))
            self.reattached += 1
            self.attached_keys.update(rec.keys)
            self._say(f"re-attached to batch {rec.batch_id} ({len(rec.items)} samples, submitted "
                      f"{age_text(rec.submitted or rec.created)} ago)")

    def _note_unbatched(self, by_key: dict[str, RunDoc]) -> None:
        """The collect phase's line on the to-do samples it stored nothing for: in no open batch (the submit phase
        asks them), or in one another live run collects."""
        mine = self.attached_keys
        open_keys = batched_keys(self.layout) - mine
        elsewhere = sum(1 for k in by_key if k in open_keys)
        loose = sum(1 for k in by_key if k not in mine and k not in open_keys)
        if elsewhere:
            self._say(f"{elsewhere} sample(s) are in another run's open batch; that run stores them")
        if loose:
            self._say(f"{loose} sample(s) are in no open batch: the collect phase submits nothing; the submit phase "
                      "(`--batch_phase submit`, or a run without --batch_phase) asks them")

    # ------------------------------------------------------------------ submit
    def _submit_claimed(self, queue: SampleQueue, by_key: dict[str, RunDoc], gen: GenSettings, system_prompt: str | None,
                        sha_of: dict[str, str]) -> int:
        """Claim and submit until the claims give no more; the number of samples submitted."""
        provider_max = self.backend.batch_limits()[0]
        n = 0
        while True:
            mine, elsewhere, _wait = queue.next(provider_max)
            if mine:
                self._submit([by_key[k] for k in mine], gen, system_prompt, sha_of)
                n += len(mine)
            elif not elsewhere:  # all claimed, or the rest is another run's (live, or in its open batch)
                return n

    def _submit(self, rundocs: list[RunDoc], gen: GenSettings, system_prompt: str | None,
                sha_of: dict[str, str]) -> None:
        """Build the claimed samples' requests a slice at a time and create each batch as soon as it is full, so
        that no more than one batch's bytes (and one slice) are held, whatever the claim's size."""
        index_of = {rd.doc.key: rd.doc.index for rd in rundocs}
        max_requests, max_bytes = self.backend.batch_limits()
        meta_of: dict[int, BatchItem] = {}  # id of a built item -> its sample, while the item waits for its batch

        def built() -> Iterator[bytes]:
            for start in range(0, len(rundocs), _BUILD_SLICE):
                requests = [request_for(rd, gen, system_prompt, self.backend)
                            for rd in rundocs[start:start + _BUILD_SLICE]]
                ids = [custom_id(start + i) for i in range(len(requests))]
                items, failed = self.backend.batch_items(requests, ids)
                for res in failed:  # a request that could not be built: a failed request, as live
                    self.store_result(res, index_of[res.key], sha_of[res.key])
                for r, cid, item in zip(requests, ids, items, strict=True):
                    if item is not None and len(item) > max_bytes:  # no batch can carry it: failed, as live
                        error = RequestError("too_large", f"the request is {len(item)} bytes, over the {max_bytes}-"
                                             "byte batch limit; ask it live (without --batch)")
                        self.store_result(self.backend.batch_failure(r.key, error), index_of[r.key], sha_of[r.key])
                    elif item is not None:
                        meta_of[id(item)] = BatchItem(r.key, index_of[r.key], sha_of[r.key], cid)
                        yield item

        for chunk in split_items(built(), max_requests, max_bytes):
            self._create([meta_of.pop(id(item)) for item in chunk], chunk)

    def _create(self, metas: list[BatchItem], chunk: list[bytes]) -> None:
        local = new_local_id()
        hold = BatchHold.take(self.layout, local)
        assert hold is not None  # a new name: nobody else holds it
        record = BatchRecord(local, self.backend.name, tuple(metas), time.time(), host=socket.gethostname(),
                             pid=os.getpid())
        hold.write(record)  # the claim, before anything is sent
        try:
            batch_id = self.backend.batch_call("submit a batch", lambda p, t: p.submit(chunk, t))
        except BatchCallError as exc:
            hold.close(finished=True)
            self._say(f"could not submit a batch of {len(metas)} samples ({exc}); they are asked again next run")
            for meta in metas:
                self.store_result(self.backend.batch_failure(meta.key, RequestError("backend", str(exc),
                                                                                    retryable=True)),
                                  meta.index, meta.doc_sha)
            return
        record = dataclasses.replace(record, batch_id=str(batch_id), submitted=time.time())
        hold.write(record)
        self.submitted += 1
        self.open.append(OpenBatch(hold, record))
        self._say(f"submitted batch {batch_id} ({len(metas)} samples)")

    # ------------------------------------------------------------------ collect
    def _collect(self) -> None:
        while self.open:
            still: list[OpenBatch] = []
            for ob in self.open:
                batch_id = ob.record.batch_id
                assert batch_id is not None
                try:
                    state = self.backend.batch_call("poll a batch", functools.partial(_retrieve, batch_id))
                    if not state.ended:
                        still.append(ob)
                        continue
                    results = self.backend.batch_call("read a batch's results", functools.partial(_results, batch_id))
                except BatchCallError as exc:  # left open: the next run re-attaches to it
                    ob.hold.close(finished=False)
                    self._say(f"stopped following batch {batch_id} ({exc}); rerun to collect it")
                    continue
                self._store(ob, state, results)
            self.open = still
            if self.open:
                self.sleep(self.poll_s)

    def _store(self, ob: OpenBatch, state: BatchState, results: list[BatchResult]) -> None:
        by_id = {r.custom_id: r for r in results}
        ok = 0
        for meta in ob.record.items:
            got = by_id.get(meta.custom_id)
            if got is not None and got.completion is not None:
                res = self.backend.batch_result(meta.key, got.completion)
                ok += 1
            else:
                err = got.error if got is not None and got.error is not None else AttemptError(
                    "backend", f"batch {state.status}: no result for this request")
                res = self.backend.batch_failure(meta.key, RequestError(err.kind, f"batch item: {err.message}",
                                                                        err.status_code, retryable=True))
            self.store_result(res, meta.index, meta.doc_sha)
        ob.hold.close(finished=True)  # every result stored: the claim goes
        failed = len(ob.record.items) - ok
        self._say(f"batch {ob.record.batch_id} {state.status}: {ok} answer(s) stored"
                  + (f", {failed} without an answer (asked again next run)" if failed else ""))

    def _say(self, message: str) -> None:
        print(f"{self.task}: {message}", file=sys.stderr, flush=True)


async def _retrieve(batch_id: str, provider: BatchProvider, timeout_s: float) -> BatchState:
    return await provider.retrieve(batch_id, timeout_s)


async def _results(batch_id: str, provider: BatchProvider, timeout_s: float) -> list[BatchResult]:
    return await provider.results(batch_id, timeout_s)


