"""A store's open provider batches: a claim no run asks their samples under (live or batched, while the batch's
run lives and after it died), held by the run collecting it, refused when a newer version wrote it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from medvision_bm.errors import UserError
from medvision_bm.store.batches import BatchHold, BatchItem, BatchRecord, batched_keys, is_held, open_batches
from medvision_bm.store.claims import Claims
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.samples import SampleStore

KEYS = [f"k{i}" for i in range(6)]


def _store(tmp_path: Path) -> SampleStore:
    store = SampleStore(tmp_path / "store", "sig0000000000000")
    store.init({"model": "m"})
    return store


def _record(keys: list[str], batch_id: str | None = "batch_1") -> BatchRecord:
    items = tuple(BatchItem(k, i, f"sha{i}", f"s{i}") for i, k in enumerate(keys))
    return BatchRecord("local-1", "openai:openai", items, time.time(), batch_id=batch_id, host="h", pid=1)


def test_a_live_runs_claims_leave_out_the_samples_of_an_open_batch_until_it_is_collected(tmp_path: Path) -> None:
    store = _store(tmp_path)
    layout = StoreLayout(store.folder)
    hold = BatchHold.take(layout, "local-1")
    assert hold is not None
    hold.write(_record(KEYS[:3]))
    with Claims(store, store.read(), "live-run") as claims:
        queue = claims.queue(KEYS)
        mine, elsewhere, wait = queue.next(10)
        assert mine == KEYS[3:] and elsewhere == [] and not wait
        assert queue.batched == set(KEYS[:3])
        assert queue.next(10) == ([], [], False), "nothing left to claim: the batch's samples are not waited for"
    hold.close(finished=False)  # its run stops (or dies): the record stays, and so does the claim
    assert batched_keys(layout) == set(KEYS[:3]) and not is_held(layout, "local-1")
    with Claims(store, store.read(), "live-run-2") as claims:
        assert claims.queue(KEYS[:3]).next(10)[0] == []
    again = BatchHold.take(layout, "local-1")
    assert again is not None
    again.close(finished=True)  # collected: every result stored
    assert batched_keys(layout) == set() and open_batches(layout) == []
    with Claims(store, store.read(), "live-run-3") as claims:
        assert claims.queue(KEYS[:3]).next(10)[0] == KEYS[:3]


def test_a_batch_is_held_by_one_live_run_at_a_time_and_freed_when_it_dies(tmp_path: Path) -> None:
    layout = StoreLayout(_store(tmp_path).folder)
    script = ("import sys, time\nfrom pathlib import Path\nfrom medvision_bm.store.batches import BatchHold\n"
              "from medvision_bm.store.layout import StoreLayout\n"
              f"h = BatchHold.take(StoreLayout(Path({str(layout.folder)!r})), 'local-1')\n"
              "print('held' if h else 'busy', flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        assert is_held(layout, "local-1") and BatchHold.take(layout, "local-1") is None
    finally:
        child.kill()
        child.wait()
    hold = BatchHold.take(layout, "local-1")
    assert hold is not None, "the kernel drops a dead run's lock"
    hold.close(finished=False)


def test_a_batch_record_reads_back_and_a_newer_one_is_refused(tmp_path: Path) -> None:
    layout = StoreLayout(_store(tmp_path).folder)
    rec = _record(KEYS[:2])
    hold = BatchHold.take(layout, rec.local_id)
    assert hold is not None
    hold.write(rec)
    ((path, back),) = open_batches(layout)
    assert back == rec and path == layout.batch(rec.local_id)
    data = json.loads(path.read_text())
    data["schema"] = BatchRecord.VERSION + 1
    path.write_text(json.dumps(data))
    with pytest.raises(UserError, match="update medvision-bm"):
        BatchRecord.read(path)
    path.write_text("{not json")
    ((_, damaged),) = open_batches(layout)
    assert damaged is None
    hold.close(finished=True)
