"""Google Gemini through google-genai: request config (thinking level or budget, media resolution, code tool, JSON
output) and the answer parser.

Facts this follows (google-genai 3.6.1, checked against our fake server): the key goes in ``x-goog-api-key``. With
``retry_options`` unset the client does not retry HTTP errors, BUT its aiohttp path (used whenever aiohttp is
installed) silently retries once after 1-10 s on a refused or dropped connection; ``HttpRetryOptions(attempts=1)``
turns that off too, so we set it. The API version is pinned to ``v1beta``
(the SDK's default would POST ``/v1/models/<m>:generateContent``; media resolution, thinking level and code
execution are v1beta features). Media resolution defaults to ``high`` on the Google API: unset, Gemini 2.5 sees a
single low-resolution thumbnail.

How an answer is turned into text: thought parts, code the model ran and the code's output go into a ``<think>``
block (so the answer parser never reads numbers from them); text parts form the answer. With JSON output the
``Thought`` field becomes the thinking block and ``Answer`` is wrapped in ``<answer>`` tags.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from medvision_bm.models.api.images import EncodedImage
from medvision_bm.models.api.keys import ApiKey
from medvision_bm.models.api.wire import Completion, as_int, malformed, sdk_call
from medvision_bm.models.base import GenRequest, Usage

if TYPE_CHECKING:
    from google import genai
    from google.genai import types

API_VERSION = "v1beta"
THINKING_LEVELS = ("minimal", "low", "medium", "high")
MEDIA_RESOLUTIONS = {"low": "MEDIA_RESOLUTION_LOW", "medium": "MEDIA_RESOLUTION_MEDIUM",
                     "high": "MEDIA_RESOLUTION_HIGH"}
FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
                  "RECITATION": "content_filter", "BLOCKLIST": "content_filter",
                  "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
                  "IMAGE_SAFETY": "content_filter"}
JSON_FIELDS = ("Thought", "Answer")


def generation_config(request: GenRequest, *, thinking_level: str | None, media_resolution: str | None,
                      use_tool: bool, json_output: bool, thinking_budget: int | None = None
                      ) -> types.GenerateContentConfig:
    from google.genai import types

    gen = request.gen
    # the fields set, and only those (``Any``: the config's constructor types each field its own way)
    config: dict[str, Any] = {"max_output_tokens": gen.max_new_tokens}
    for name, value in (("temperature", gen.temperature), ("top_p", gen.top_p), ("top_k", gen.top_k),
                        ("seed", gen.seed)):
        if value is not None:
            config[name] = value
    if gen.stop:
        config["stop_sequences"] = list(gen.stop)
    if request.system_prompt:
        config["system_instruction"] = request.system_prompt
    if thinking_level:
        config["thinking_config"] = types.ThinkingConfig(thinking_level=types.ThinkingLevel(thinking_level.upper()))
    elif thinking_budget is not None:  # Gemini 2.x (upstream's gemini.py @47210fb sends -1 when unset)
        config["thinking_config"] = types.ThinkingConfig(thinking_budget=int(thinking_budget))
    if media_resolution:
        config["media_resolution"] = MEDIA_RESOLUTIONS[media_resolution]
    if use_tool:
        config["tools"] = [types.Tool(code_execution=types.ToolCodeExecution())]
    if json_output:
        config["response_mime_type"] = "application/json"
        config["response_schema"] = {"type": "OBJECT",
                                     "properties": {name: {"type": "STRING"} for name in JSON_FIELDS},
                                     "required": list(JSON_FIELDS), "property_ordering": list(JSON_FIELDS)}
    return types.GenerateContentConfig(**config)


def parse_response(response: object, json_output: bool = False) -> Completion:
    """A GenerateContentResponse -> Completion. No candidate (a blocked prompt) gives an empty answer."""
    usage_meta = getattr(response, "usage_metadata", None)
    prompt = as_int(getattr(usage_meta, "prompt_token_count", None))
    visible = as_int(getattr(usage_meta, "candidates_token_count", None))
    thoughts = as_int(getattr(usage_meta, "thoughts_token_count", None))
    # Output counts every generated token, thinking included (as OpenAI and Anthropic count them).
    output = None if visible is None and thoughts is None else (visible or 0) + (thoughts or 0)
    usage = Usage(prompt, output, thoughts)
    candidates = getattr(response, "candidates", None)
    if candidates is None and getattr(response, "prompt_feedback", None) is None and usage_meta is None:
        raise malformed("no candidates, no prompt feedback and no usage in the body")
    if not candidates:
        return Completion("", "content_filter" if getattr(response, "prompt_feedback", None) else None, usage)
    cand = candidates[0]
    reason = getattr(cand, "finish_reason", None)
    reason_name = getattr(reason, "value", reason)
    finish = FINISH_REASONS.get(str(reason_name), str(reason_name).lower()) if reason_name else None
    answer: list[str] = []
    steps: list[str] = []
    parts = getattr(getattr(cand, "content", None), "parts", None) or []
    for part in parts:
        if getattr(part, "executable_code", None) is not None:
            steps.append(f"[code]\n{part.executable_code.code}")
        if getattr(part, "code_execution_result", None) is not None:
            steps.append(f"[code output]\n{part.code_execution_result.output}")
        text = getattr(part, "text", None)
        if text:
            (steps if getattr(part, "thought", None) else answer).append(text)
    completion = Completion("".join(answer), finish, usage, "\n".join(steps) or None)
    if json_output:
        completion = _from_json_answer(completion)
    return completion


def _from_json_answer(completion: Completion) -> Completion:
    try:
        data = json.loads(completion.answer)
    except ValueError:
        return completion  # kept verbatim: the parser still reads what it can
    if not isinstance(data, dict) or "Answer" not in data:
        return completion
    thought = str(data.get("Thought") or "")
    reasoning = "\n".join(x for x in (completion.reasoning, thought) if x) or None
    return Completion(f"<answer>{data['Answer']}</answer>", completion.finish_reason, completion.usage, reasoning)


@dataclass
class GeminiClient:
    api_key: ApiKey
    model: str
    base_url: str | None = None
    thinking_level: str | None = None
    media_resolution: str | None = "high"
    use_tool: bool = False
    json_output: bool = False
    default_timeout_s: float = 120.0
    thinking_budget: int | None = None

    def __post_init__(self) -> None:
        from google import genai
        from google.genai import types

        timeout_ms = int(self.default_timeout_s * 1000)
        retry_once = types.HttpRetryOptions(attempts=1)
        if self.base_url:
            options = types.HttpOptions(api_version=API_VERSION, timeout=timeout_ms, retry_options=retry_once,
                                       base_url=self.base_url)
        else:
            options = types.HttpOptions(api_version=API_VERSION, timeout=timeout_ms, retry_options=retry_once)
        self._client = genai.Client(api_key=self.api_key.reveal(), http_options=options)

    @property
    def sdk(self) -> genai.Client:
        """The SDK client itself (the batch interface uses its batches)."""
        return self._client

    def prepare(self, request: GenRequest, images: list[EncodedImage]
                ) -> tuple[list[types.PartUnion], types.GenerateContentConfig]:
        from google.genai import types

        contents: list[types.PartUnion] = [types.Part.from_bytes(data=img.raw(), mime_type=img.mime)
                                           for img in images]
        contents.append(request.prompt)
        config = generation_config(request, thinking_level=self.thinking_level,
                                   media_resolution=self.media_resolution, use_tool=self.use_tool,
                                   json_output=self.json_output, thinking_budget=self.thinking_budget)
        return contents, config

    async def send(self, prepared: tuple[list[types.PartUnion], types.GenerateContentConfig], timeout_s: float
                   ) -> Completion:
        contents, config = prepared
        response = await sdk_call(self._client.aio.models.generate_content(model=self.model, contents=contents,
                                                                           config=config))
        return parse_response(response, self.json_output)

    async def aclose(self) -> None:
        await self._client.aio.aclose()
