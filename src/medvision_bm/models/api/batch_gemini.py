"""Gemini batch mode (google-genai ``batches``, inline requests): each request is the live call's contents and
config, submitted, polled and cancelled through the official SDK; each inline response becomes the
:class:`Completion` a live answer gives (the same parser), or the reason this sample is asked again."""

from __future__ import annotations

import json

from medvision_bm.models.api.batch import BatchResult, BatchState
from medvision_bm.models.api.gemini import GeminiClient, parse_response
from medvision_bm.models.api.images import EncodedImage
from medvision_bm.models.api.retry import AttemptError
from medvision_bm.models.api.wire import malformed, sdk_call
from medvision_bm.models.base import GenRequest

#: Google's limit on the inline requests of one batch (bytes; larger batches go through an uploaded file), and a
#: count far above what that many bytes of images hold.
MAX_BYTES = 20 * 1024 * 1024
MAX_REQUESTS = 50_000
#: Job states after which no item changes any more.
ENDED = frozenset({"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"})
#: The metadata field that carries an item's id through the batch (responses come back with their metadata).
ID_FIELD = "medvision_id"


def _state(job: object) -> str:
    state = getattr(job, "state", None)
    return str(getattr(state, "value", state) or "")


class GeminiBatches:
    """Batch mode of the Gemini API through the live client's SDK client (its URL, key and API version)."""

    name = "gemini"
    max_requests = MAX_REQUESTS
    max_bytes = MAX_BYTES

    def __init__(self, client: GeminiClient) -> None:
        self.live = client
        self.sdk = client.sdk

    def item(self, custom_id: str, request: GenRequest, images: list[EncodedImage]) -> bytes:
        """The inline request: the live call's contents and config (``GeminiClient.prepare``), with the item's id."""
        from google.genai import types

        contents, config = self.live.prepare(request, images)
        inline = types.InlinedRequest(contents=contents, config=config, metadata={ID_FIELD: custom_id})
        return json.dumps(inline.model_dump(mode="json", exclude_none=True), separators=(",", ":")).encode()

    async def submit(self, items: list[bytes], timeout_s: float) -> str:
        from google.genai import types

        src = [types.InlinedRequest.model_validate(json.loads(i)) for i in items]
        job = await sdk_call(self.sdk.aio.batches.create(model=self.live.model, src=src))
        return str(job.name)

    async def retrieve(self, batch_id: str, timeout_s: float) -> BatchState:
        job = await sdk_call(self.sdk.aio.batches.get(name=batch_id))
        state = _state(job)  # the Gemini API reports no counts while a batch runs
        return BatchState(state, state in ENDED)

    async def results(self, batch_id: str, timeout_s: float) -> list[BatchResult]:
        job = await sdk_call(self.sdk.aio.batches.get(name=batch_id))
        responses = getattr(getattr(job, "dest", None), "inlined_responses", None) or []
        out: list[BatchResult] = []
        for r in responses:
            cid = (r.metadata or {}).get(ID_FIELD)
            if not isinstance(cid, str):
                raise malformed("an inline batch response without its id in the metadata")
            if r.error is not None or r.response is None:
                err = r.error
                message = f"{getattr(err, 'code', None)}: {getattr(err, 'message', None) or 'no response'}"
                out.append(BatchResult(cid, None, AttemptError("backend", message)))
                continue
            try:
                out.append(BatchResult(cid, parse_response(r.response, self.live.json_output), None))
            except AttemptError as exc:
                out.append(BatchResult(cid, None, exc))
        return out

    async def cancel(self, batch_id: str, timeout_s: float) -> None:
        await sdk_call(self.sdk.aio.batches.cancel(name=batch_id))
