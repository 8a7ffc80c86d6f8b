"""Anthropic Messages API through the official SDK (``max_retries=0``): body, thinking switch, answer parser.

Facts this follows (anthropic 2.14, checked against our fake server): ``messages.create`` POSTs ``/v1/messages``,
sends the key as ``Authorization: Bearer`` (this SDK version does so for ``api_key`` too, never ``x-api-key``),
and takes no ``temperature``/``top_p``/``top_k`` arguments, so sampling settings
that are set travel in ``extra_body`` (the Claude records leave them unset: newer Claude models reject them).
Thinking on sends ``{"type": "adaptive"}`` (Claude 4.6 and later), or ``{"type": "enabled", "budget_tokens": N}``
when a budget is given (older models); thinking off sends nothing, since some models reject an explicit
``disabled``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.models.api.images import EncodedImage
from medvision_bm.models.api.keys import ApiKey
from medvision_bm.models.api.wire import Completion, as_int, decode_json, malformed, mapping_at, sdk_call
from medvision_bm.models.base import GenRequest, Usage

if TYPE_CHECKING:
    import anthropic

#: Anthropic stop reasons -> the suite's finish reasons.
STOP_REASONS: dict[str, str] = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                                "model_context_window_exceeded": "length", "refusal": "content_filter",
                                "tool_use": "tool_calls", "pause_turn": "pause"}


def messages_kwargs(model: str, request: GenRequest, images: list[EncodedImage], thinking: bool | None,
                    thinking_budget: int | None) -> JsonObject:
    gen = request.gen
    content: list[JsonValue] = [
        {"type": "image", "source": {"type": "base64", "media_type": img.mime, "data": img.b64}} for img in images]
    content.append({"type": "text", "text": request.prompt})
    kwargs: JsonObject = {"model": model, "max_tokens": gen.max_new_tokens,
                          "messages": [{"role": "user", "content": content}]}
    if request.system_prompt:
        kwargs["system"] = request.system_prompt
    if gen.stop:
        kwargs["stop_sequences"] = list(gen.stop)
    if thinking:
        kwargs["thinking"] = ({"type": "enabled", "budget_tokens": int(thinking_budget)} if thinking_budget
                              else {"type": "adaptive"})
    sampling: JsonObject = {name: value for name, value in (("temperature", gen.temperature), ("top_p", gen.top_p),
                                                            ("top_k", gen.top_k)) if value is not None}
    if sampling:
        kwargs["extra_body"] = sampling
    return kwargs


def parse_message(data: object) -> Completion:
    if not isinstance(data, Mapping):
        raise malformed(f"expected a JSON object, got {type(data).__name__}")
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise malformed("no content blocks in the body")
    answer: list[str] = []
    thinking: list[str] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text":
            answer.append(str(block.get("text") or ""))
        elif block.get("type") == "thinking" and block.get("thinking"):
            thinking.append(str(block["thinking"]))
    usage = mapping_at(data, "usage")
    inputs = [as_int(usage.get(k)) for k in ("input_tokens", "cache_creation_input_tokens",
                                             "cache_read_input_tokens")]
    known = [v for v in inputs if v is not None]
    reason = data.get("stop_reason")
    return Completion(
        answer="".join(answer),
        finish_reason=STOP_REASONS.get(reason, reason) if isinstance(reason, str) else None,
        usage=Usage(sum(known) if known else None, as_int(usage.get("output_tokens")), None),
        reasoning="\n".join(thinking) or None,
    )


@dataclass
class AnthropicClient:
    api_key: ApiKey
    model: str
    base_url: str | None = None
    thinking: bool | None = None
    thinking_budget: int | None = None
    default_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        import anthropic

        self._client = anthropic.AsyncAnthropic(api_key=self.api_key.reveal(), base_url=self.base_url,
                                                max_retries=0, timeout=self.default_timeout_s)

    @property
    def sdk(self) -> anthropic.AsyncAnthropic:
        """The SDK client itself (the batch interface uses its message batches)."""
        return self._client

    def prepare(self, request: GenRequest, images: list[EncodedImage]) -> dict[str, Any]:
        """The SDK's keyword arguments (``Any``: ``create`` types each parameter its own way)."""
        return messages_kwargs(self.model, request, images, self.thinking, self.thinking_budget)

    async def send(self, prepared: dict[str, Any], timeout_s: float) -> Completion:
        response = await sdk_call(self._client.messages.with_raw_response.create(**prepared, timeout=timeout_s))
        return parse_message(decode_json(response.http_response.content))

    async def aclose(self) -> None:
        await self._client.close()
