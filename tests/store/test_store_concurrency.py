"""Concurrent runs of one task share its samples: each sample is asked once, a killed run's claims are taken over."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.provider_server import FakeProviderServer, Fault
from medvision_bm.store.claims import Claims
from medvision_bm.store.samples import SampleStore
from mvtest_support import REPO, TEST_CONTRACT_ENV, phantom_list

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    env.update(TEST_CONTRACT_ENV)
    return env


def _run_args(fake_url: str, phantom_dir: Path, tl: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "medvision_bm.cli", "run", "--model", "openai-compatible", "--base_url",
            f"{fake_url}/v1", "--model_name", "served-x", "--data_dir", str(phantom_dir), "--tasks_list_json_path",
            str(tl), "--results_dir", str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup",
            "--max_retries", "0", "--batch_size", "2", "--no_progress", *extra]


def _stored_ok(res: Path) -> dict[str, int]:
    """Per task folder: the number of distinct samples with an ok record, and the total ok records."""
    out = {}
    for store in res.glob("served-x/*/*"):
        keys, total = set(), 0
        for seg in (store / "samples").glob("*.jsonl"):
            for line in seg.read_text().splitlines():
                rec = json.loads(line)
                if rec["status"] == "ok":
                    keys.add(rec["key"])
                    total += 1
        out[store.parent.name] = (len(keys), total)
    return out


def test_four_concurrent_runs_ask_every_sample_exactly_once(tmp_path, phantom_dir, phantom_lists):
    tasks = phantom_list(phantom_lists, "TL")  # 4 tasks, about 100 samples
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps(tasks))
    n = sum(tasks.values())
    with FakeProviderServer(latency=0.25, answer="<answer>31.5</answer>") as fake:
        procs = [subprocess.Popen(_run_args(fake.url, phantom_dir, tl, tmp_path), env=_env(), cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        outs = [p.communicate(timeout=600) for p in procs]
        asked = [r for r in fake.received if r.path.endswith("/chat/completions")]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    assert len(asked) == n, f"{len(asked)} requests for {n} samples: some sample was asked more than once"
    stored = _stored_ok(tmp_path / "res")
    assert stored == {t: (c, c) for t, c in tasks.items()}, "every sample stored once"
    for results in (tmp_path / "res").glob("served-x/*/*/results.json"):
        data = json.loads(results.read_text())
        assert data["complete"] and data["counts"]["answered"] == tasks[data["task"]]
    per_run = [sum(int(line.split()[1]) for line in err.splitlines() if " samples to answer" in line and
                   line.split()[1].isdigit()) for _, err in outs]
    assert sum(per_run) >= n  # the to-do lists overlapped; the asking did not
    for store in (tmp_path / "res").glob("served-x/*/*"):
        assert not list((store / "claims").glob("*")), "every run gave its claims back"


def test_a_killed_runs_claims_are_taken_over_by_the_next_run(tmp_path, phantom_dir, phantom_lists):
    task, n = next(iter(phantom_list(phantom_lists, "AD").items()))
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps({task: n}))
    with FakeProviderServer(answer="<answer>31.5</answer>") as fake:
        fake.push(*[Fault("hang", delay=600)] * 2)  # the first run's two requests never return
        first = subprocess.Popen(_run_args(fake.url, phantom_dir, tl, tmp_path), env=_env(), cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 300
        while time.time() < deadline and len(fake.received) < 2:
            time.sleep(0.2)
        assert len(fake.received) == 2, "the first run sent its requests"
        keys_files = list((tmp_path / "res").glob("served-x/*/*/claims/*.keys"))
        assert keys_files and keys_files[0].read_text().split(), "the first run holds claims"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        second = subprocess.run(_run_args(fake.url, phantom_dir, tl, tmp_path), env=_env(), cwd=REPO,
                                capture_output=True, text=True, timeout=600)
        assert second.returncode == 0, second.stderr[-3000:]
        asked_second = [r for r in fake.received[2:] if r.path.endswith("/chat/completions")]
    assert len(asked_second) == n, "the dead run's samples were asked again, each once"
    assert _stored_ok(tmp_path / "res") == {task: (n, n)}
    assert not list((tmp_path / "res").glob("served-x/*/*/claims/*")), "the dead run's claim files are gone"


def _hold_claims(folder: str, keys: list[str], ready: str) -> None:  # runs in a child process
    store = SampleStore(folder, "sig")
    claims = Claims(store, store.read(), "child")
    claims.take(keys, len(keys))
    Path(ready).write_text("ok")
    time.sleep(600)


@contextlib.contextmanager
def _a_live_run_holding(store: SampleStore, keys: list[str], ready: Path):
    """A child process that claims ``keys`` of the store and lives until the block ends (then it is killed)."""
    import multiprocessing

    child = multiprocessing.get_context("fork").Process(target=_hold_claims, args=(str(store.folder), keys, str(ready)))
    child.start()
    try:
        deadline = time.time() + 30
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.05)
        yield
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join()


def _store_with_keys(tmp_path: Path) -> tuple[SampleStore, list[str]]:
    store = SampleStore(tmp_path / "store", "sig")
    store.folder.mkdir()
    return store, [f"k{i}" for i in range(10)]


def _answer_as_a_dead_run(store: SampleStore, key: str) -> None:
    from medvision_bm.models.base import GenResult

    w = store.writer("dead")
    w.append(GenResult(key, "<answer>1</answer>"), index=0, doc_sha="s")
    w.close()


def test_claims_of_a_live_run_are_held_and_a_dead_runs_are_claimable(tmp_path):
    store, keys = _store_with_keys(tmp_path)
    with _a_live_run_holding(store, keys[:4], tmp_path / "ready"):
        mine = Claims(store, store.read(), "parent")
        claimed, elsewhere, held = mine.take(keys, 3)
        assert claimed == ["k4", "k5", "k6"] and elsewhere == [] and held == 4
        claimed, _, held = mine.take(keys[:4] + keys[7:], 10)
        assert claimed == ["k7", "k8", "k9"] and held == 4, "a live run's claims are never taken"
    # the child died holding k0..k3 and answered k0 before it died: k0 is done elsewhere, k1..k3 are claimable
    _answer_as_a_dead_run(store, "k0")
    claimed, elsewhere, held = mine.take(keys[:4], 10)
    assert (claimed, elsewhere, held) == (["k1", "k2", "k3"], ["k0"], 0)
    assert mine.taken_over == 4
    assert sorted(p.name for p in (store.folder / "claims").iterdir()) == ["parent.keys", "parent.lease"]
    mine.close()
    assert list((store.folder / "claims").iterdir()) == []


def test_a_claim_queue_gives_what_take_gives_and_waits_only_when_a_live_run_holds_the_rest(tmp_path):
    store, keys = _store_with_keys(tmp_path)
    with _a_live_run_holding(store, keys[:4], tmp_path / "ready"):
        mine = Claims(store, store.read(), "parent")
        queue = mine.queue(keys)
        assert queue.next(3) == (["k4", "k5", "k6"], [], False)
        assert queue.next(10) == (["k7", "k8", "k9"], [], False)
        assert queue.next(10) == ([], [], True) and len(queue) == 4, "a live run's claims are never taken"
    _answer_as_a_dead_run(store, "k0")  # the child answered k0 before it died: done elsewhere, k1..k3 claimable
    assert queue.next(10) == (["k1", "k2", "k3"], ["k0"], False)
    assert len(queue) == 0 and queue.next(10) == ([], [], False)
    assert (store.folder / "claims" / "parent.keys").read_text().split() == [f"k{i}" for i in (4, 5, 6, 7, 8, 9, 1, 2, 3)]
    mine.close()


class _CountingKeys(set):
    looks = 0

    def __contains__(self, key: object) -> bool:
        type(self).looks += 1
        return super().__contains__(key)


def test_a_claim_queue_looks_at_each_key_once_where_take_reads_the_whole_list_per_chunk(tmp_path, monkeypatch):
    """A to-do list of N keys claimed in chunks of c costs N look-ups with the queue; take, given the list that
    is left each time, costs about N*N/(2c): the quadratic pass of a from-scratch million-sample task."""
    store = SampleStore(tmp_path / "store", "sig")
    store.folder.mkdir()
    other = _CountingKeys({"held-by-another-run"})
    monkeypatch.setattr(Claims, "_scan", lambda self: [other])
    keys = [f"k{i}" for i in range(2000)]
    with Claims(store, store.read(), "queue") as claims:
        queue, got = claims.queue(keys), []
        while queue:
            mine, _, _ = queue.next(20)
            got += mine
    assert got == keys and _CountingKeys.looks == len(keys)
    _CountingKeys.looks = 0
    with Claims(store, store.read(), "take") as claims:
        left = list(keys)
        while left:
            mine, _, _ = claims.take(left, 20)
            left = left[len(mine):]
    assert _CountingKeys.looks == sum(range(20, 2001, 20))


def test_refresh_reads_only_what_was_appended_and_a_line_being_written_later(tmp_path, monkeypatch):
    from medvision_bm.models.base import GenResult
    from medvision_bm.store import samples as store_mod

    monkeypatch.setattr(store_mod, "_READ_BLOCK", 64)  # lines cross block boundaries
    store = SampleStore(tmp_path / "s", "sig")
    w = store.writer("a")
    for i in range(5):
        w.append(GenResult(f"k{i}", f"<answer>{i}</answer>"), index=i, doc_sha="x")
    state = store.read()
    assert len(state.ok) == 5 and state.answer("k3", "x").text == "<answer>3</answer>"
    seg = next(store.samples_dir.glob("*.jsonl"))
    with open(seg, "ab") as fh:  # another writer is half-way through a line
        fh.write(b'{"key": "k9", "answer_sig')
    assert store.refresh(state) == set() and state.bad_lines == 1
    assert store.refresh(state) == set() and state.bad_lines == 1, "an unfinished line is counted once"
    with open(seg, "ab") as fh:
        fh.write(b'nature": "sig", "status": "ok", "doc_sha": "x", "text": "late"}\n')
    w.append(GenResult("k5", "<answer>5</answer>"), index=5, doc_sha="x")
    assert store.refresh(state) == {"k9", "k5"} and state.bad_lines == 0
    assert state.answer("k9", "x").text == "late" and len(state.ok) == 7
    w.close()
