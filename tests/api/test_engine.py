"""The engine behind every API backend: streaming results, concurrency, the image cache, several servers,
interruption."""

from __future__ import annotations

import threading
import time

import pytest

from fakes.provider_server import FakeProviderServer, Fault
from fakes.samples import make_request, run
from medvision_bm.models.base import GenResult


def test_results_stream_out_as_they_land_once_per_request(backend, fake):
    b = backend("compatible", batch_size=4)
    fake.push(Fault(delay=2.0))  # whichever request arrives first answers two seconds late
    seen: list[tuple[str, float, str]] = []
    t0 = time.monotonic()
    b.generate([make_request(i) for i in range(4)],
               lambda r: seen.append((r.key, time.monotonic() - t0, threading.current_thread().name)))
    keys = [k for k, _, _ in seen]
    assert sorted(keys) == ["s0", "s1", "s2", "s3"]  # exactly once each
    times = [t for _, t, _ in seen]
    assert times[-1] >= 2.0 and max(times[:3]) < 1.5  # the fast ones were handed over before the slow one
    assert {name for _, _, name in seen} == {threading.current_thread().name}  # on the caller's thread


def test_requests_in_flight_never_exceed_batch_size(backend, fake):
    fake.app.latency = 0.05
    b = backend("compatible", batch_size=5)
    results = run(b, [make_request(i) for i in range(30)])
    assert len(results) == 30 and all(r.ok for r in results)
    assert fake.app.max_in_flight == 5
    stats = b.stats()
    assert (stats.done, stats.ok, stats.total, stats.in_flight) == (30, 30, 30, 0)


def test_each_slice_is_encoded_once_and_reused(backend, fake):
    b = backend("compatible", batch_size=8)
    requests = [make_request(i, slice_idx=i % 3) for i in range(12)]
    run(b, requests)
    assert b.stats().images_encoded == 3
    urls = {}
    for rec in fake.received:
        key = rec.body["messages"][-1]["content"][1]["text"]
        urls[key] = rec.body["messages"][-1]["content"][0]["image_url"]["url"]
    by_slice = {}
    for i in range(12):
        by_slice.setdefault(i % 3, set()).add(urls[f"Question {i}: how long are the lesion's axes?"])
    assert all(len(v) == 1 for v in by_slice.values()) and len({next(iter(v)) for v in by_slice.values()}) == 3


def test_images_load_lazily_once_per_slice_and_are_released(backend, fake):
    from PIL import Image

    calls: list[int] = []

    def loader_for(slice_idx: int):
        def load():
            calls.append(slice_idx)
            time.sleep(0.02)  # encoding overlaps between concurrent requests for one slice
            return [Image.new("RGB", (16, 16), (slice_idx, 0, 0))]
        return load

    requests = [make_request(i, slice_idx=i % 2, loader=loader_for(i % 2)) for i in range(10)]
    results = run(backend("compatible", batch_size=10), requests)
    assert all(r.ok for r in results)
    assert sorted(calls) == [0, 1]
    assert all(r.images == [] for r in requests)


def test_reshape_is_part_of_the_cache_key(backend, fake):
    b = backend("compatible")
    run(b, [make_request(0, slice_idx=5), make_request(1, slice_idx=5, reshape=(16, 16))])
    assert b.stats().images_encoded == 2


def test_jpeg_payloads(backend, fake):
    run(backend("compatible", image_format="jpeg"), [make_request(0)])
    assert fake.received[-1].body["messages"][-1]["content"][0]["image_url"]["url"].startswith(
        "data:image/jpeg;base64,")


def test_an_unreadable_image_fails_that_sample_only(backend, fake):
    def broken():
        raise OSError("slice file is truncated")

    results = {r.key: r for r in run(backend("compatible"), [make_request(0), make_request(1, loader=broken)])}
    assert results["s0"].ok
    bad = results["s1"]
    assert bad.text is None and bad.error.kind == "backend" and bad.attempts == 0
    assert "slice file is truncated" in bad.error.message
    assert len(fake.received) == 1


def test_repeated_429s_lower_the_limit_and_everything_still_lands(backend, fake):
    b = backend("compatible", batch_size=16, max_retries=6)
    fake.push(*[Fault("status", 429, message="rate limited")] * 12)
    results = run(b, [make_request(i) for i in range(24)])
    assert all(r.ok for r in results)
    stats = b.stats()
    assert stats.throttled == 12 and stats.concurrency < 16
    assert sum(r.attempts for r in results) == 24 + 12 == len(fake.received)


def test_an_exception_in_on_result_stops_the_run_and_the_backend_stays_usable(backend, fake):
    b = backend("compatible", batch_size=2)
    got: list[GenResult] = []

    def sink(r: GenResult) -> None:
        got.append(r)
        if len(got) == 2:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        b.generate([make_request(i) for i in range(10)], sink)
    assert len(got) == 2
    assert [r.ok for r in run(b, [make_request(20), make_request(21)])] == [True, True]


def test_interrupt_cancels_requests_in_flight_promptly(backend, fake):
    b = backend("compatible", batch_size=4, request_timeout=60)
    fake.push(Fault(), *[Fault("hang", delay=30)] * 3)

    def sink(r: GenResult) -> None:
        raise KeyboardInterrupt

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        b.generate([make_request(i) for i in range(4)], sink)
    assert time.monotonic() - t0 < 5
    b.close()
    b.close()  # idempotent


def test_generate_can_be_called_again_and_after_close(backend, fake):
    fake.app.latency = 0.01
    b = backend("compatible", batch_size=4)
    assert run(b, []) == []
    fake.push(*[Fault("status", 429)] * 4)  # the limit drops below the worker count: workers queue on it
    assert all(r.ok for r in run(b, [make_request(i) for i in range(8)]))
    b.close()
    b._limiter.limit = 1  # as after throttling: workers of the next run wait on the limiter again
    # a fresh loop: the limiter must not stay bound to the old one
    assert all(r.ok for r in run(b, [make_request(i) for i in range(10, 26)]))
    assert b.stats().done == 24


def test_requests_spread_over_servers_and_a_dead_one_is_taken_out(backend, fake):
    with FakeProviderServer() as second, FakeProviderServer() as third:
        dead_url = third.url
        third.stop()
        fake.app.latency = second.app.latency = 0.01
        b = backend("compatible", base_url=[f"{fake.url},{second.url}", dead_url], batch_size=6, max_retries=4)
        results = run(b, [make_request(i) for i in range(60)])
        assert all(r.ok for r in results)
        a, c = len(fake.received), len(second.received)
        assert a > 15 and c > 15 and a + c == 60
        retries = b.stats().retries
        assert 1 <= retries <= 4  # the dead server cost a couple of attempts, then sat out
        assert b.stats().failed_attempts == {"connection": retries}


def test_image_cache_keys_follow_what_changes_the_pixels():
    """One key per rendered slice: the label name (CT window) and the protocol change pixels, the key doesn't."""
    import dataclasses

    from fakes.samples import make_rundoc
    from medvision_bm.models.api.images import ImageCache
    from medvision_bm.models.base import GenRequest, GenSettings

    cache = ImageCache()

    def key(rd):
        return cache.key_for(GenRequest(rd.doc.key, "q", rd, GenSettings()))

    base = make_rundoc(0, data_root="/d")
    assert key(base) == key(make_rundoc(1, slice_idx=0, data_root="/d"))  # another sample of the same slice
    other_label = dataclasses.replace(base, doc=dataclasses.replace(base.doc, meta={**base.doc.meta,
                                                                                  "label_name": "cyst"}))
    variants = [make_rundoc(0, slice_idx=1, data_root="/d"), make_rundoc(0, data_root="/e"),
                make_rundoc(0, data_root="/d", reshape=(32, 32)), dataclasses.replace(base, protocol="paper"),
                other_label]
    keys = [key(rd) for rd in variants]
    assert key(base) not in keys and len(set(keys)) == len(keys)


def test_two_threads_starting_a_fresh_backend_both_find_its_client(backend, fake):
    """Two threads of a run may call generate at once on a backend whose loop is not made:
    the one that does not make it waits for the client too (it used to find a loop without one and fail)."""
    b = backend("compatible", batch_size=2)
    real = b._make_client

    def slow_client():  # the window in which the second caller used to slip through
        time.sleep(0.3)
        return real()

    b._make_client = slow_client
    out: dict[int, list] = {}
    errors: list[BaseException] = []

    def ask(n: int) -> None:
        try:
            out[n] = run(b, [make_request(100 * n + i) for i in range(3)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert sorted(out) == [0, 1] and all(r.ok for rs in out.values() for r in rs)
