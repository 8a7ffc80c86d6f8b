"""OpenAI Batch API: each line carries the live request body, files split at the limits, results parse into answers
only for 2xx items; upload, create, poll, results and cancel through the real SDK against a local server speaking
the Files and Batches wire format, each call under the run's retry policy."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from fakes.batch_server import FakeBatches
from fakes.clock import FakeClock
from fakes.provider_server import FakeProviderServer
from fakes.samples import KEYS, WIRES, make_request, run
from medvision_bm.models.api import build_api_backend
from medvision_bm.models.api.batch import custom_id
from medvision_bm.models.api.batch_openai import CHAT_URL, parse_result_file, request_line, split_files
from medvision_bm.models.api.engine import ApiBackend, BatchCallError
from medvision_bm.models.api.images import encode_image
from medvision_bm.models.api.keys import ApiKey
from medvision_bm.models.api.openai_chat import OPENAI, SdkChatClient, chat_body
from medvision_bm.models.base import GenRequest


def test_line_body_is_the_live_request_body() -> None:
    req = make_request(3)
    images = [encode_image(img) for img in req.images]
    live = SdkChatClient("http://127.0.0.1:9/v1", ApiKey("sk-test", "TEST_KEY"), "gpt-x", OPENAI).prepare(req, images)
    line = json.loads(request_line(req.key, chat_body("gpt-x", req, images, OPENAI)))
    assert line["custom_id"] == req.key and line["method"] == "POST" and line["url"] == CHAT_URL
    assert line["body"] == live  # no extra_body here: the SDK kwargs are the wire body itself


def test_files_split_at_count_and_byte_limits() -> None:
    lines = [request_line(f"k{i}", {"model": "m", "n": i}) for i in range(7)]
    by_count = list(split_files(lines, max_requests=3))
    assert [len(c) for c in by_count] == [3, 3, 1]
    assert [ln for c in by_count for ln in c] == lines
    cap = len(lines[0]) * 2 + 1
    by_bytes = list(split_files(lines, max_bytes=cap))
    assert all(sum(map(len, c)) <= cap for c in by_bytes) and sum(map(len, by_bytes)) == 7
    with pytest.raises(ValueError, match="over the"):
        list(split_files(lines, max_bytes=5))


def test_only_2xx_items_become_answers() -> None:
    ok = {"custom_id": "a", "response": {"status_code": 200, "body": {
        "choices": [{"message": {"content": "3.5"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2}}}, "error": None}
    http = {"custom_id": "b", "response": {"status_code": 400, "body": {"error": {"message": "bad"}}}, "error": None}
    expired = {"custom_id": "c", "response": None,
               "error": {"code": "batch_expired", "message": "This request could not be executed before expiry."}}
    res = {r.custom_id: r for r in parse_result_file("\n".join(json.dumps(x) for x in (ok, http, expired)) + "\n")}
    assert res["a"].completion is not None and res["a"].completion.answer == "3.5" and res["a"].error is None
    assert res["a"].completion.usage.input_tokens == 10
    for key in ("b", "c"):
        assert res[key].completion is None and res[key].error is not None
    assert res["b"].error is not None and res["b"].error.status_code == 400
    assert res["c"].error is not None and "batch_expired" in res["c"].error.message


@pytest.fixture()
def stub() -> Iterator[tuple[FakeProviderServer, FakeBatches]]:
    server = FakeProviderServer()
    server.app.answer_fn = lambda body: f"<answer>{len(json.dumps(body, sort_keys=True))}</answer>"
    batches = FakeBatches(server)
    with server:
        yield server, batches


@pytest.fixture()
def openai_backend(stub: tuple[FakeProviderServer, FakeBatches]) -> Iterator[ApiBackend]:
    b = build_api_backend("openai", {**WIRES["openai"][1], "base_url": [stub[0].url], "max_retries": 3,
                                     "request_timeout": 5.0}, clock=FakeClock(), environ=KEYS)
    yield b
    b.close()


def _submit(b: ApiBackend, n: int) -> tuple[list[GenRequest], str]:
    reqs = [make_request(i) for i in range(n)]
    items, failed = b.batch_items(reqs, [custom_id(i) for i in range(n)])
    assert failed == [] and all(items)
    return reqs, b.batch_call("submit", lambda p, t: p.submit([i for i in items if i], t))


def test_a_batch_through_the_sdk_answers_as_the_live_requests_do(stub, openai_backend: ApiBackend) -> None:
    fake, batches = stub
    reqs, batch_id = _submit(openai_backend, 3)
    upload = next(r for r in fake.received if r.path == "/v1/files")
    assert upload.body["purpose"] == "batch" and batches.created == 1
    state = openai_backend.batch_call("poll", lambda p, t: p.retrieve(batch_id, t))
    assert state.ended and state.status == "completed" and state.total == 3 and state.done == 3
    got = {r.custom_id: r for r in openai_backend.batch_call("results", lambda p, t: p.results(batch_id, t))}
    live = run(openai_backend, [make_request(i) for i in range(3)])
    for i, req in enumerate(reqs):
        completion = got[custom_id(i)].completion
        assert completion is not None
        batched = openai_backend.batch_result(req.key, completion)
        twin = next(r for r in live if r.key == req.key)
        assert (batched.text, batched.finish_reason, batched.usage) == (twin.text, twin.finish_reason, twin.usage)


def test_a_cancelled_batch_ends_and_its_items_come_back_as_failures(stub, openai_backend: ApiBackend) -> None:
    _, batches = stub
    batches.hold = True
    _, batch_id = _submit(openai_backend, 2)
    assert not openai_backend.batch_call("poll", lambda p, t: p.retrieve(batch_id, t)).ended
    openai_backend.batch_call("cancel", lambda p, t: p.cancel(batch_id, t))
    state = openai_backend.batch_call("poll", lambda p, t: p.retrieve(batch_id, t))
    assert state.ended and state.status == "cancelled"
    results = openai_backend.batch_call("results", lambda p, t: p.results(batch_id, t))
    assert len(results) == 2 and all(r.completion is None and r.error is not None for r in results)
    assert all("batch_cancelled" in r.error.message for r in results if r.error)


def test_batch_calls_retry_under_the_run_policy_and_fail_for_good_in_one_redacted_line(
        stub, openai_backend: ApiBackend) -> None:
    fake, batches = stub
    batches.faults.extend([503, 503])
    _, batch_id = _submit(openai_backend, 1)
    assert batches.created == 1 and openai_backend.stats().retries == 2
    batches.faults.append(400)
    with pytest.raises(BatchCallError) as err:
        openai_backend.batch_call("poll a batch", lambda p, t: p.retrieve(batch_id, t))
    assert "poll a batch" in str(err.value) and "scripted failure" in str(err.value)
    assert KEYS["OPENAI_API_KEY"] not in str(err.value)
    assert any(KEYS["OPENAI_API_KEY"] in r.headers.get("Authorization", "") for r in fake.received)
