"""Each provider's batch interface through its real SDK against a local server speaking its batch wire format:
submit, poll, results and cancel, each call under the run's retry policy; a batch item answers as the same live
request does."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import pytest

from fakes.batch_server import FakeBatches
from fakes.clock import FakeClock
from fakes.provider_server import FakeProviderServer
from fakes.samples import KEYS, WIRES, make_request, run
from medvision_bm.models.api import build_api_backend
from medvision_bm.models.api.batch import custom_id
from medvision_bm.models.api.engine import ApiBackend, BatchCallError
from medvision_bm.models.base import GenRequest

KEY_VAR = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}



@pytest.fixture()
def stub() -> Iterator[tuple[FakeProviderServer, FakeBatches]]:
    server = FakeProviderServer()
    server.app.answer_fn = lambda body: hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    batches = FakeBatches(server)
    with server:
        yield server, batches


@pytest.fixture(params=sorted(KEY_VAR))
def wire(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture()
def batch_backend(stub: tuple[FakeProviderServer, FakeBatches], wire: str) -> Iterator[ApiBackend]:
    kind, opts = WIRES[wire]
    b = build_api_backend(kind, {**opts, "base_url": [stub[0].url], "max_retries": 3, "request_timeout": 5.0},
                          clock=FakeClock(), environ=KEYS)
    yield b
    b.close()


def _submit(b: ApiBackend, n: int) -> tuple[list[GenRequest], str]:
    reqs = [make_request(i) for i in range(n)]
    items, failed = b.batch_items(reqs, [custom_id(i) for i in range(n)])
    assert failed == [] and all(items)
    return reqs, b.batch_call("submit", lambda p, t: p.submit([i for i in items if i], t))


def test_a_batch_through_the_sdk_answers_as_the_live_requests_do(stub, batch_backend: ApiBackend) -> None:
    _, batches = stub
    reqs, batch_id = _submit(batch_backend, 3)
    assert batches.created == 1
    state = batch_backend.batch_call("poll", lambda p, t: p.retrieve(batch_id, t))
    assert state.ended and state.failed in (0, None) and state.done in (3, None)  # Gemini reports no counts
    got = {r.custom_id: r for r in batch_backend.batch_call("results", lambda p, t: p.results(batch_id, t))}
    live = run(batch_backend, [make_request(i) for i in range(3)])
    for i, req in enumerate(reqs):
        completion = got[custom_id(i)].completion
        assert completion is not None
        batched = batch_backend.batch_result(req.key, completion)
        twin = next(r for r in live if r.key == req.key)
        assert (batched.text, batched.finish_reason, batched.usage) == (twin.text, twin.finish_reason, twin.usage)


def test_a_cancelled_batch_ends_and_its_items_come_back_as_failures(stub, batch_backend: ApiBackend) -> None:
    _, batches = stub
    batches.hold = True
    _, batch_id = _submit(batch_backend, 2)
    assert not batch_backend.batch_call("poll", lambda p, t: p.retrieve(batch_id, t)).ended
    batch_backend.batch_call("cancel", lambda p, t: p.cancel(batch_id, t))
    state = batch_backend.batch_call("poll", lambda p, t: p.retrieve(batch_id, t))
    assert state.ended and state.failed in (2, None)
    results = batch_backend.batch_call("results", lambda p, t: p.results(batch_id, t))
    assert len(results) == 2 and all(r.completion is None and r.error is not None for r in results)
    assert all("cancel" in r.error.message for r in results if r.error)


def test_batch_calls_retry_under_the_run_policy_and_fail_for_good_in_one_redacted_line(
        stub, batch_backend: ApiBackend, wire: str) -> None:
    fake, batches = stub
    batches.faults.extend([503, 503])
    _, batch_id = _submit(batch_backend, 1)
    assert batches.created == 1 and batch_backend.stats().retries == 2
    batches.faults.append(400)
    with pytest.raises(BatchCallError) as err:
        batch_backend.batch_call("poll a batch", lambda p, t: p.retrieve(batch_id, t))
    assert "poll a batch" in str(err.value) and "scripted failure" in str(err.value)
    key = KEYS[KEY_VAR[wire]]
    assert key not in str(err.value)
    assert any(key in r.headers.get("Authorization", "") + r.headers.get("x-api-key", "")
               + r.headers.get("x-goog-api-key", "") for r in fake.received)
