"""OpenAI Batch API files: each line carries the live request body, files split at the limits, results parse into
answers only for 2xx items."""

from __future__ import annotations

import json

import pytest

from fakes.samples import make_request
from medvision_bm.models.api.batch_openai import CHAT_URL, parse_result_file, request_line, split_files
from medvision_bm.models.api.images import encode_image
from medvision_bm.models.api.keys import ApiKey
from medvision_bm.models.api.openai_chat import OPENAI, SdkChatClient, chat_body


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

