"""OpenAI Batch API files: the JSONL request lines built from the live request body, split at the provider's limits,
and the output/error file lines read back into the same :class:`Completion` a live answer gives."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from medvision_bm.models.api.openai_chat import parse_chat
from medvision_bm.models.api.retry import AttemptError
from medvision_bm.models.api.wire import Completion, as_int, malformed

#: The endpoint every line targets: the live path of SdkChatClient.
CHAT_URL = "/v1/chat/completions"
#: OpenAI's per-file limits (requests, bytes of the uploaded JSONL).
MAX_REQUESTS = 50_000
MAX_BYTES = 200 * 1024 * 1024


def request_line(custom_id: str, body: Mapping[str, Any]) -> bytes:
    """One JSONL line: ``body`` is exactly the JSON a live request sends (``chat_body``), so answers carry one signature."""
    line = {"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": dict(body)}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def split_files(lines: Iterable[bytes], max_requests: int = MAX_REQUESTS,
                max_bytes: int = MAX_BYTES) -> Iterator[list[bytes]]:
    """Group request lines into files that each stay within the count and byte limits; a line alone over the byte
    limit cannot be sent in a batch and is refused."""
    chunk: list[bytes] = []
    size = 0
    for line in lines:
        if len(line) > max_bytes:
            raise ValueError(f"one batch request is {len(line)} bytes, over the {max_bytes}-byte file limit")
        if chunk and (len(chunk) >= max_requests or size + len(line) > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(line)
        size += len(line)
    if chunk:
        yield chunk


@dataclass(frozen=True)
class BatchResult:
    """One line of a batch output or error file: the answer, or why this sample must be asked again."""

    custom_id: str
    completion: Completion | None
    error: AttemptError | None


def parse_result_line(data: Any) -> BatchResult:
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
    """Every non-blank line of an output or error file."""
    return [parse_result_line(json.loads(line)) for line in text.splitlines() if line.strip()]
