"""Anthropic Message Batches: each request's ``params`` is the body a live ``messages.create`` sends, submitted,
polled, read back and cancelled through the official SDK; each result line becomes the :class:`Completion` a live
answer gives, or the reason this sample is asked again."""

from __future__ import annotations

import json
from collections.abc import Mapping

from medvision_bm.models.api.anthropic_messages import AnthropicClient, parse_message
from medvision_bm.models.api.batch import BatchResult, BatchState
from medvision_bm.models.api.images import EncodedImage
from medvision_bm.models.api.retry import AttemptError
from medvision_bm.models.api.wire import malformed, mapping_at, provider_message, sdk_call
from medvision_bm.models.base import GenRequest

#: Anthropic's limits on one batch: requests, and bytes of the create call.
MAX_REQUESTS = 100_000
MAX_BYTES = 256 * 1024 * 1024


def batch_request(custom_id: str, kwargs: Mapping[str, object]) -> bytes:
    """One request of a batch: the live call's keyword arguments as the wire body (``extra_body`` merged in, as the
    SDK merges it into a live request's JSON)."""
    params = {k: v for k, v in kwargs.items() if k != "extra_body"}
    extra = kwargs.get("extra_body")  # a dict, where messages_kwargs sets one
    if isinstance(extra, Mapping):
        params.update(extra)
    return json.dumps({"custom_id": custom_id, "params": params}, ensure_ascii=False,
                      separators=(",", ":")).encode()


def parse_result(data: object) -> BatchResult:
    """A results line -> BatchResult: ``succeeded`` carries the message; ``errored``, ``canceled`` and ``expired``
    carry none (the sample is asked again)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("custom_id"), str):
        raise malformed("batch result without a custom_id")
    result = mapping_at(data, "result")  # a result that is no object has no type: {}
    kind = result.get("type")
    if kind == "succeeded":
        try:
            return BatchResult(data["custom_id"], parse_message(result.get("message")), None)
        except AttemptError as exc:
            return BatchResult(data["custom_id"], None, exc)
    if kind == "errored":
        error = AttemptError("backend", f"errored: {provider_message(result.get('error'))}")
    else:
        error = AttemptError("backend", f"{kind or 'no result'}: the request was not processed")
    return BatchResult(data["custom_id"], None, error)


class AnthropicBatches:
    """The Message Batches interface through the live client's SDK client (its URL and key)."""

    name = "anthropic"
    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES

    def __init__(self, client: AnthropicClient) -> None:
        self.live = client
        self.sdk = client.sdk

    def item(self, custom_id: str, request: GenRequest, images: list[EncodedImage]) -> bytes:
        return batch_request(custom_id, self.live.prepare(request, images))

    async def submit(self, items: list[bytes], timeout_s: float) -> str:
        batch = await sdk_call(self.sdk.messages.batches.create(requests=[json.loads(i) for i in items],
                                                                timeout=timeout_s))
        return str(batch.id)

    async def retrieve(self, batch_id: str, timeout_s: float) -> BatchState:
        batch = await sdk_call(self.sdk.messages.batches.retrieve(batch_id, timeout=timeout_s))
        c = batch.request_counts
        failed = c.errored + c.canceled + c.expired
        return BatchState(str(batch.processing_status), batch.processing_status == "ended",
                          c.processing + c.succeeded + failed, c.succeeded + failed, failed)

    async def results(self, batch_id: str, timeout_s: float) -> list[BatchResult]:
        async def read() -> list[BatchResult]:
            lines = await self.sdk.messages.batches.results(batch_id, timeout=timeout_s)
            return [parse_result(line.to_dict()) async for line in lines]

        return await sdk_call(read())

    async def cancel(self, batch_id: str, timeout_s: float) -> None:
        await sdk_call(self.sdk.messages.batches.cancel(batch_id, timeout=timeout_s))
