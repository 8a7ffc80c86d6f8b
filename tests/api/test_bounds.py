"""The API side of the bounds: everything a user or a server controls is bounded, and secrets in use never
land in a stored answer or an error: requests in flight, the answer's size, the retry back-off, keys echoed back,
credentials in --base_url, a slice with no finite value."""

from __future__ import annotations

import asyncio
import json
import random

import numpy as np
import pytest

from fakes.clock import FakeClock
from fakes.provider_server import Fault
from fakes.samples import make_request, run
from medvision_bm.models.api import engine as engine_mod
from medvision_bm.models.api import retry as retry_mod
from medvision_bm.models.api.endpoints import EndpointPool
from medvision_bm.models.api.retry import AdaptiveLimiter, AttemptError, RetryPolicy, call_with_retries
from medvision_bm.models.base import GenResult, Usage

COMPATIBLE_KEY = "planted-compatible-key-0123456789"


def test_a_huge_batch_size_is_capped_in_flight_and_said_once(backend, fake, capsys):
    fake.app.latency = 0.3
    b = backend("compatible", batch_size=100_000)
    results = run(b, [make_request(i) for i in range(engine_mod.MAX_IN_FLIGHT + 60)])
    assert all(r.ok for r in results)
    assert fake.app.max_in_flight <= engine_mod.MAX_IN_FLIGHT, "one request (and socket) per sample"
    err = capsys.readouterr().err
    assert err.count(f"keeps at most {engine_mod.MAX_IN_FLIGHT}") == 1
    assert b.stats().max_concurrency == engine_mod.MAX_IN_FLIGHT


@pytest.mark.parametrize("wire", ["compatible", "openai"])
def test_an_over_long_answer_is_cut_head_and_tail_and_marked(backend, fake, monkeypatch, wire):
    monkeypatch.setattr(engine_mod, "MAX_ANSWER_CHARS", 10_000)
    text = "x" * 30_000 + "<answer>1, 2</answer>"
    fake.push(Fault(text=text))
    (r,) = run(backend(wire), [make_request(0)])
    assert r.ok and r.truncated_chars == len(text) - 10_000
    assert len(r.text) == 10_000 + len(engine_mod.ANSWER_CUT_MARK)
    assert r.text.endswith("<answer>1, 2</answer>"), "the tail (where the answer is) survives the cut"
    assert engine_mod.ANSWER_CUT_MARK in r.text


def test_a_cut_answer_says_so_in_its_sample_record(tmp_path):
    from medvision_bm.io import JsonlAppender
    from medvision_bm.store.samples import StoreWriter

    w = StoreWriter(JsonlAppender(tmp_path / "s.jsonl"), "sig")
    rec = w.append(GenResult("k", "text", None, "stop", Usage(), truncated_chars=123), index=0, doc_sha="d")
    plain = w.append(GenResult("k2", "text", None, "stop", Usage()), index=1, doc_sha="d")
    w.close()
    assert rec.truncated_chars == 123 and plain.truncated_chars == 0
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert lines[0]["truncated_chars"] == 123 and "truncated_chars" not in lines[1]


def test_the_default_answer_cap_holds_a_real_multi_megabyte_answer(backend, fake):
    text = "y" * (engine_mod.MAX_ANSWER_CHARS + 500_000)
    fake.push(Fault(text=text))
    (r,) = run(backend("compatible"), [make_request(0)])
    assert r.ok and r.truncated_chars == 500_000 and len(r.text) < engine_mod.MAX_ANSWER_CHARS + 200


def test_a_body_over_the_cap_fails_once_without_retries(backend, fake, monkeypatch):
    monkeypatch.setattr(retry_mod, "MAX_BODY_BYTES", 50_000)
    fake.push(Fault(text="z" * 200_000))
    (r,) = run(backend("compatible", max_retries=3), [make_request(0)])
    assert not r.ok and r.error.kind == "too_large" and r.attempts == 1
    assert len(fake.received) == 1


def test_two_thousand_failures_keep_backing_off_at_the_cap():
    """2.0 ** n overflows past n = 1023: every later failure used to end as an OverflowError."""
    clock = FakeClock()
    n = 2000
    fails = iter([AttemptError("connection", "refused")] * (n + 1))

    async def attempt(timeout: float):
        raise next(fails)

    policy = RetryPolicy(max_retries=n, sample_deadline_s=1e12, jitter=0.0, backoff_max_s=60.0)
    outcome = asyncio.run(call_with_retries(attempt, policy, limiter=AdaptiveLimiter(1, clock=clock), clock=clock,
                                            rng=random.Random(0)))
    assert outcome.attempts == n + 1 and f"retries exhausted after {n + 1} attempts" in outcome.error.message
    assert clock.sleeps[-1] == 60.0 and len(clock.sleeps) == n
    assert policy.backoff_s(10**6, random.Random(0)) == 60.0


def test_a_server_taken_out_two_thousand_times_keeps_a_capped_cool_down():
    clock = FakeClock()
    pool = EndpointPool(["http://127.0.0.1:9/v1"], clock=clock)
    ep = pool.endpoints[0]
    for _ in range(2000):
        pool.start(ep)
        pool.finish(ep, AttemptError("connection", "refused"))
    assert ep.out_until - clock.monotonic() <= pool.max_cooldown_s


def test_a_key_the_server_echoes_in_an_answer_is_not_stored(backend, fake):
    fake.push(Fault(text=f"<answer>3</answer> (called with {COMPATIBLE_KEY})",
                    reasoning=f"the header said Bearer {COMPATIBLE_KEY}"))
    (r,) = run(backend("compatible", env={"OPENAI_COMPATIBLE_API_KEY": COMPATIBLE_KEY}), [make_request(0)])
    assert r.ok and COMPATIBLE_KEY not in r.text and "<answer>3</answer> (called with ***)" in r.text


def test_text_that_only_looks_like_a_key_stays_in_an_answer(backend, fake):
    answer = "<answer>1</answer> sk-thisisnotakeyatall0123 api_key=whatever12345"
    fake.push(Fault(text=answer))
    (r,) = run(backend("compatible"), [make_request(0)])
    assert r.text == answer


def test_credentials_in_the_base_url_reach_no_error_and_no_description(backend, fake):
    url = fake.url.replace("http://", "http://alice:S3cretPassw0rd@")
    fake.push(Fault(kind="status", status=400, message=f"bad request for {url}/chat/completions"))
    b = backend("compatible", base_url=[url])
    (r,) = run(b, [make_request(0)])
    assert not r.ok and "S3cretPassw0rd" not in r.error.message
    assert "alice:***@" in r.error.message
    from medvision_bm.secrets import redact

    assert "S3cretPassw0rd" not in redact(str(b.settings))


def test_a_slice_without_finite_values_fails_that_sample_and_is_never_sent(backend, fake, tmp_path):
    nib = pytest.importorskip("nibabel")
    from fakes.samples import make_doc, make_view
    from medvision_bm.data.docs import RunDoc
    from medvision_bm.tasks import hooks

    doc = make_doc(0, slice_idx=1, image="nan.nii.gz")
    folder = tmp_path / "Datasets" / doc.dataset_name / "Images"
    folder.mkdir(parents=True)
    vol = np.full((24, 32, 4), np.nan, dtype=np.float32)
    nib.save(nib.Nifti1Image(vol, np.diag([0.8, 0.8, 2.0, 1.0])), folder / "nan.nii.gz")
    rd = RunDoc(doc, make_view(doc), protocol="paper", data_root=str(tmp_path))  # paper: min-max, no CT window
    bad = make_request(0, loader=lambda: [hooks.visual(rd)])
    good = make_request(1)
    results = {r.key: r for r in run(backend("compatible"), [bad, good])}
    assert results[good.key].ok
    failed = results[bad.key]
    assert not failed.ok and "no finite value" in failed.error.message and failed.attempts == 0
    assert len(fake.received) == 1, "the corrupt slice was never sent"


def test_a_temperature_anthropic_rejects_is_refused_before_any_request(backend, fake):
    from medvision_bm.errors import UserError
    from medvision_bm.models.base import GenSettings

    with pytest.raises(UserError, match="Anthropic's API accepts 0 to 1"):
        backend("anthropic", gen=GenSettings(max_new_tokens=8, temperature=1.5))
    assert fake.received == []
