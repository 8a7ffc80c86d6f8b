"""OpenAI Batch API: the JSONL request lines built from the live request body, the file upload and batch calls
through the official SDK, and the output/error file lines read back into the same :class:`Completion` a live
answer gives."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from medvision_bm.jsontypes import JsonValue
from medvision_bm.models.api.batch import BatchResult, BatchState, split_items
from medvision_bm.models.api.images import EncodedImage
from medvision_bm.models.api.openai_chat import SdkChatClient, chat_body, parse_chat
from medvision_bm.models.api.retry import AttemptError
from medvision_bm.models.api.wire import as_int, malformed, sdk_call
from medvision_bm.models.base import GenRequest

__all__ = ["CHAT_URL", "MAX_BYTES", "MAX_REQUESTS", "BatchResult", "OpenAIBatches", "parse_result_file",
           "parse_result_line", "request_line", "split_files"]

#: The endpoint every line targets: the live path of SdkChatClient.
CHAT_URL: Final = "/v1/chat/completions"
#: OpenAI's per-file limits (requests, bytes of the uploaded JSONL).
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024
#: Batch statuses after which no item changes any more.
ENDED = frozenset({"completed", "failed", "expired", "cancelled"})


def request_line(custom_id: str, body: Mapping[str, JsonValue]) -> bytes:
    """One JSONL line: ``body`` is exactly the JSON a live request sends (``chat_body``), so answers carry one signature."""
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": dict(body)}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def split_files(lines: Iterable[bytes], max_requests: int = MAX_REQUESTS,
                max_bytes: int = MAX_BYTES) -> Iterator[list[bytes]]:
    """Group request lines into files that each stay within OpenAI's count and byte limits."""
    return split_items(lines, max_requests, max_bytes)


def parse_result_line(data: object) -> BatchResult:
    """An output/error file line -> BatchResult; a non-2xx response or an ``error`` object is a failure, never an answer."""
    if not isinstance(data, Mapping) or not isinstance(data.get("custom_id"), str):
        raise malformed("batch result line without a custom_id")
    custom_id = data["custom_id"]
    err = data.get("error")
    response = data.get("response")
    if isinstance(err, Mapping):
        return BatchResult(custom_id, None, AttemptError("backend", f"{err.get('code')}: {err.get('message')}"))
    if not isinstance(response, Mapping):
        return BatchResult(custom_id, None, malformed("batch result line without a response"))
    status = as_int(response.get("status_code"))
    if status is None or not 200 <= status <= 299:
        return BatchResult(custom_id, None, AttemptError("http", f"batch item status {status}", status_code=status))
    try:
        return BatchResult(custom_id, parse_chat(response.get("body")), None)
    except AttemptError as exc:
        return BatchResult(custom_id, None, exc)


def parse_result_file(text: str) -> list[BatchResult]:
    """Every non-blank line of an output or error file (a line that is not JSON is an unreadable file)."""
    out = []
    for line in text.splitlines():
        if line.strip():
            try:
                data = json.loads(line)
            except ValueError:
                raise malformed("a batch result line is not JSON") from None
            out.append(parse_result_line(data))
    return out


class OpenAIBatches:
    """The Batch API of the live client's provider, through the same SDK client (its URL, key and headers)."""

    name = "openai"
    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES

    def __init__(self, client: SdkChatClient) -> None:
        self.live = client
        self.sdk = client.sdk

    def item(self, custom_id: str, request: GenRequest, images: list[EncodedImage]) -> bytes:
        live = self.live
        return request_line(custom_id, chat_body(live.model, request, images, live.dialect, live.extra_body))

    async def submit(self, items: list[bytes], timeout_s: float) -> str:
        upload = await sdk_call(self.sdk.files.create(file=("batch.jsonl", b"".join(items)), purpose="batch",
                                                      timeout=timeout_s))
        batch = await sdk_call(self.sdk.batches.create(input_file_id=upload.id, endpoint=CHAT_URL,
                                                       completion_window="24h", timeout=timeout_s))
        return str(batch.id)

    async def retrieve(self, batch_id: str, timeout_s: float) -> BatchState:
        batch = await sdk_call(self.sdk.batches.retrieve(batch_id, timeout=timeout_s))
        counts = batch.request_counts
        return BatchState(str(batch.status), batch.status in ENDED, getattr(counts, "total", None),
                          getattr(counts, "completed", None), getattr(counts, "failed", None))

    async def results(self, batch_id: str, timeout_s: float) -> list[BatchResult]:
        batch = await sdk_call(self.sdk.batches.retrieve(batch_id, timeout=timeout_s))
        out: list[BatchResult] = []
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                content = await sdk_call(self.sdk.files.content(file_id, timeout=timeout_s))
                out += parse_result_file(content.text)
        return out

    async def cancel(self, batch_id: str, timeout_s: float) -> None:
        await sdk_call(self.sdk.batches.cancel(batch_id, timeout=timeout_s))
