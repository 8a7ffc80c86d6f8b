"""Every injected fault, on every wire format, ends as the policy says: a retried success or a stored failure,
with the attempt count the server actually saw (the SDKs' own retries are off)."""

from __future__ import annotations

import pytest

from fakes.provider_server import Fault
from fakes.samples import WIRES, make_request, run

ALL_WIRES = sorted(WIRES)


def served(fake) -> int:
    return sum(1 for r in fake.received if r.method == "POST")


@pytest.mark.parametrize("wire", ALL_WIRES)
@pytest.mark.parametrize("fault,reason", [
    (Fault("status", 500), "http500"), (Fault("status", 502), "http502"), (Fault("status", 503), "http503"),
    (Fault("status", 529), "http529"), (Fault("status", 408), "http408"), (Fault("status", 409), "http409"),
    (Fault("reset"), "connection"), (Fault("malformed"), "malformed"),
], ids=lambda v: v if isinstance(v, str) else v.kind)
def test_transient_fault_is_retried_to_success(backend, fake, wire, fault, reason):
    b = backend(wire)
    fake.push(fault)
    [res] = run(b, [make_request(0)])
    assert res.ok, res.error
    assert res.text.endswith("<answer>12.5, 7.25</answer>")
    assert res.attempts == 2 == served(fake)
    stats = b.stats()
    assert stats.retries == 1 and stats.failures == 0
    assert stats.failed_attempts == {reason: 1}


@pytest.mark.parametrize("wire", ALL_WIRES)
def test_429_retry_after_is_waited_and_lowers_concurrency(backend, fake, clock, wire):
    b = backend(wire, batch_size=8)
    fake.push(Fault("status", 429, headers={"Retry-After": "3"}))
    [res] = run(b, [make_request(0)])
    assert res.ok and res.attempts == 2 == served(fake)
    assert 3.0 in clock.sleeps  # the sample waited what the server asked
    stats = b.stats()
    assert stats.throttled == 1 and stats.concurrency < 8


@pytest.mark.parametrize("wire", ["compatible", "anthropic"])
def test_retry_after_ms_wins(backend, fake, clock, wire):
    b = backend(wire)
    fake.push(Fault("status", 429, headers={"retry-after-ms": "250", "Retry-After": "30"}))
    [res] = run(b, [make_request(0)])
    assert res.ok and 0.25 in clock.sleeps and 30.0 not in clock.sleeps


@pytest.mark.parametrize("wire", ALL_WIRES)
def test_hang_past_the_attempt_timeout_is_retried(backend, fake, wire):
    b = backend(wire, request_timeout=0.6)
    fake.push(Fault("hang", delay=10))
    [res] = run(b, [make_request(0)])
    assert res.ok and res.attempts == 2 == served(fake)
    assert b.stats().failed_attempts == {"timeout": 1}


@pytest.mark.parametrize("wire", ALL_WIRES)
def test_length_cut_is_an_answer_flagged_not_retried(backend, fake, wire):
    b = backend(wire)
    fake.push(Fault("length", text="<answer>12.5, 7"))
    [res] = run(b, [make_request(0)])
    assert res.ok and res.finish_reason == "length" and res.attempts == 1 == served(fake)
    assert res.text.endswith("<answer>12.5, 7")
    assert b.stats().length_cuts == 1


@pytest.mark.parametrize("wire", ALL_WIRES)
def test_empty_answer_is_an_answer_never_retried(backend, fake, wire):
    # upstream's API clients hand an empty text back as the answer and retry only on a raised error
    # (YongchengYAO/MedVision src/medvision_bm/medvision_lmms-eval/lmms_eval/models/gemini__2_5_woTool.py @c221615:
    # ``response.text if response.text is not None else ""`` inside the backoff-wrapped call); the parse then fails
    b = backend(wire)
    fake.push(Fault("empty"))
    [res] = run(b, [make_request(0)])
    assert res.ok and res.attempts == 1 == served(fake)
    assert "<answer>" not in res.text  # nothing but the provider's thinking block, where it sends one
    stats = b.stats()
    assert stats.retries == 0 and stats.failures == 0 and stats.failed_attempts == {}


@pytest.mark.parametrize("wire", ALL_WIRES)
def test_empty_length_cut_is_kept_as_an_empty_answer(backend, fake, wire):
    b = backend(wire)
    fake.push(Fault("length", text=""))
    [res] = run(b, [make_request(0)])
    assert res.error is None and res.finish_reason == "length" and res.attempts == 1


@pytest.mark.parametrize("wire", ALL_WIRES)
@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_error_is_stored_at_once_with_the_providers_message(backend, fake, wire, status):
    b = backend(wire)
    fake.push(Fault("status", status, message=f"scripted {status}: bad request field"))
    [res] = run(b, [make_request(0)])
    assert res.text is None and not res.ok
    assert res.attempts == 1 == served(fake)
    err = res.error
    assert err.kind == "http" and err.status_code == status and err.retryable is False
    assert f"scripted {status}: bad request field" in err.message


@pytest.mark.parametrize("wire", ALL_WIRES)
def test_exhausted_retries_store_a_failure_not_an_answer(backend, fake, wire):
    b = backend(wire, max_retries=2)
    fake.push(*[Fault("status", 503, message="still down")] * 3)
    [res] = run(b, [make_request(0)])
    assert res.text is None and res.error is not None
    assert res.attempts == 3 == served(fake)  # max_retries + 1, and not one more from inside the SDK
    assert res.error.retryable and res.error.status_code == 503 and "still down" in res.error.message
    assert b.stats().failures == 1 and b.stats().retries == 2


@pytest.mark.parametrize("wire", ["openai", "compatible"])
def test_the_sdk_never_retries_on_its_own(backend, fake, wire):
    b = backend(wire, max_retries=0)
    fake.push(Fault("status", 503), Fault("status", 503))
    [res] = run(b, [make_request(0)])
    assert res.attempts == 1 == served(fake)
    if wire == "openai":
        assert fake.received[0].headers.get("x-stainless-retry-count") == "0"


@pytest.mark.parametrize("wire", ALL_WIRES)
def test_connection_refused_is_retried_then_stored(backend, fake, wire, clock):
    b = backend(wire, max_retries=2)
    fake.stop()  # nothing listens on the port any more
    [res] = run(b, [make_request(0)])
    assert res.text is None and res.error.kind == "connection" and res.attempts == 3
    assert res.error.retryable and b.stats().failed_attempts == {"connection": 3}
