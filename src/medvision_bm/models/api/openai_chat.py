"""OpenAI chat completions: the request body, the answer parser, and two transports that share them.

- :class:`AiohttpChatClient` speaks to self-hosted servers (vLLM, SGLang, ``transformers serve``) directly with
  aiohttp: the hot path of a local evaluation, where the official SDK costs about 2 ms of CPU per request. It
  spreads requests over several base URLs (:mod:`endpoints`).
- :class:`SdkChatClient` uses the official ``openai`` SDK (``max_retries=0``) for hosted providers: OpenAI,
  OpenRouter, Moonshot (Kimi), MiniMax.

A :class:`ChatDialect` records how each provider differs: the max-tokens field, image detail, which sampling
extensions it accepts. Gen settings a provider cannot take are refused up front (:func:`check_gen`).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl

from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.models.api import retry
from medvision_bm.models.api.endpoints import EndpointPool, url_credentials
from medvision_bm.models.api.images import EncodedImage
from medvision_bm.models.api.keys import ApiKey
from medvision_bm.models.api.retry import MAX_IN_FLIGHT, AttemptError
from medvision_bm.models.api.wire import (
    Completion,
    as_int,
    decode_json,
    from_exception,
    http_error,
    malformed,
    mapping_at,
    provider_message,
    sdk_call,
)
from medvision_bm.models.base import GenRequest, GenSettings, Usage

if TYPE_CHECKING:
    import aiohttp
    import openai

#: GenSettings fields outside the OpenAI schema, and the body field each becomes where a server accepts it.
EXTENSION_FIELDS: dict[str, str] = {"top_k": "top_k", "repetition_penalty": "repetition_penalty",
                                    "min_new_tokens": "min_tokens"}


@dataclass(frozen=True)
class ChatDialect:
    name: str
    max_tokens_field: str = "max_tokens"
    image_detail: str | None = None  # "high" pins OpenAI's image processing so the stated pixel size holds
    extensions: frozenset[str] = frozenset()  # GenSettings fields from EXTENSION_FIELDS this provider takes


COMPATIBLE = ChatDialect("openai-compatible", extensions=frozenset(EXTENSION_FIELDS))
OPENAI = ChatDialect("openai", max_tokens_field="max_completion_tokens", image_detail="high")
OPENROUTER = ChatDialect("openrouter", extensions=frozenset({"top_k", "repetition_penalty"}))
MOONSHOT = ChatDialect("moonshot")
MINIMAX = ChatDialect("minimax", max_tokens_field="max_completion_tokens")


def check_gen(gen: GenSettings, dialect: ChatDialect) -> None:
    """Refuse gen settings the provider would reject, naming the flag."""
    for name in EXTENSION_FIELDS:
        if getattr(gen, name) is not None and name not in dialect.extensions:
            raise UserError(f"--{name} is not supported by {dialect.name}; drop it (it is not sent anywhere)")


class ImageSource(Protocol):
    """What a request body takes of an image: its data URL (an EncodedImage, or a stand-in while encoding)."""

    @property
    def data_url(self) -> str: ...


def user_content(request: GenRequest, images: Sequence[ImageSource], detail: str | None) -> list[JsonValue]:
    parts: list[JsonValue] = []
    for img in images:
        url: JsonObject = {"url": img.data_url}
        if detail:
            url["detail"] = detail
        parts.append({"type": "image_url", "image_url": url})
    parts.append({"type": "text", "text": request.prompt})
    return parts


def chat_body(model: str, request: GenRequest, images: Sequence[ImageSource], dialect: ChatDialect,
              extra: Mapping[str, JsonValue] | None = None) -> JsonObject:
    """The JSON body of one chat completion request; unset settings are left out, never sent as null."""
    gen = request.gen
    messages: list[JsonValue] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    messages.append({"role": "user", "content": user_content(request, images, dialect.image_detail)})
    body: JsonObject = {"model": model, "messages": messages, dialect.max_tokens_field: gen.max_new_tokens}
    if gen.temperature is not None:
        body["temperature"] = gen.temperature
    if gen.top_p is not None:
        body["top_p"] = gen.top_p
    if gen.stop:
        body["stop"] = list(gen.stop)
    if gen.seed is not None:
        body["seed"] = gen.seed
    for name, wire_name in EXTENSION_FIELDS.items():
        value = getattr(gen, name)
        if value is not None and name in dialect.extensions:
            body[wire_name] = value
    if extra:
        body.update(extra)
    if request.extra_body:
        body.update(request.extra_body)
    return body


def _text_of(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers return content parts
        return "".join(p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content)
    raise malformed(f"message content of type {type(content).__name__}")


def parse_chat(data: object) -> Completion:
    """A chat completion JSON object -> Completion; a body without an answer raises AttemptError."""
    if not isinstance(data, Mapping):
        raise malformed(f"expected a JSON object, got {type(data).__name__}")
    choices = data.get("choices")
    if not choices:
        err = data.get("error")
        if isinstance(err, Mapping):  # some gateways report failures inside a 200 body
            status = as_int(err.get("code"))
            if status is not None and 400 <= status <= 599:
                raise AttemptError("http", provider_message(data), status_code=status)
            raise malformed(f"error without a status: {provider_message(data)}")
        raise malformed("no choices in the body")
    first = choices[0]
    if not isinstance(first, Mapping) or not isinstance(first.get("message"), Mapping):
        raise malformed("choice without a message")
    message = first["message"]
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    usage = mapping_at(data, "usage")
    details = mapping_at(usage, "completion_tokens_details")
    return Completion(
        answer=_text_of(message.get("content")),
        finish_reason=first.get("finish_reason"),
        usage=Usage(as_int(usage.get("prompt_tokens")), as_int(usage.get("completion_tokens")),
                    as_int(details.get("reasoning_tokens"))),
        reasoning=reasoning if isinstance(reasoning, str) else None,
    )


@dataclass(frozen=True)
class _Placeholder:
    """Stands in for an image while the rest of the body is JSON-encoded."""

    data_url: str
    image: EncodedImage


async def read_capped(resp: aiohttp.ClientResponse, limit: int | None = None) -> bytes:
    """An aiohttp response body, read in chunks and never past ``limit`` bytes (a larger one fails the attempt)."""
    limit = retry.MAX_BODY_BYTES if limit is None else limit
    too_large = AttemptError("too_large", f"the server's answer is over {limit // 2**20} MiB "
                             "(models.api.retry.MAX_BODY_BYTES); not read", status_code=None)
    declared = resp.content_length
    if declared is not None and declared > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(1 << 20):
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass
class AiohttpChatClient:
    """Chat completions over aiohttp against one or more base URLs (each ending in /v1)."""

    pool: EndpointPool
    model: str
    dialect: ChatDialect = COMPATIBLE
    api_key: ApiKey | None = None
    extra_body: JsonObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Content-Type": "application/json"}
        if self.api_key is not None:
            self._headers["Authorization"] = f"Bearer {self.api_key.reveal()}"
        # a server whose URL carried user:password gets HTTP Basic auth in the Authorization header instead
        self._by_endpoint = {id(ep): {**self._headers, "Authorization": ep.auth}
                             for ep in self.pool.endpoints if ep.auth}

    def prepare(self, request: GenRequest, images: list[EncodedImage]) -> bytes:
        """The JSON body as bytes. Image data URLs are spliced in as cached bytes instead of being re-encoded
        by ``json.dumps`` for every request (the dominant client CPU cost at high request rates)."""
        marks = [_Placeholder(f"@medvision-image-{i}-{id(self)}@", img) for i, img in enumerate(images)]
        text = json.dumps(chat_body(self.model, request, marks, self.dialect, self.extra_body),
                          ensure_ascii=False)
        chunks: list[bytes] = []
        for mark in marks:
            head, sep, text = text.partition(f'"{mark.data_url}"')
            if not sep:  # cannot happen unless a prompt contains the marker: fall back to plain encoding
                return json.dumps(chat_body(self.model, request, images, self.dialect, self.extra_body),
                                  ensure_ascii=False).encode("utf-8")
            chunks += [head.encode("utf-8"), b'"', mark.image.data_url_bytes, b'"']
        chunks.append(text.encode("utf-8"))
        return b"".join(chunks)

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=MAX_IN_FLIGHT, ttl_dns_cache=300, keepalive_timeout=60)
            # trust_env off: these servers are ours (often on 127.0.0.1); a cluster's HTTP proxy must not see them.
            # No aiohttp timeout: the engine bounds every attempt (one timer per request instead of two).
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False,
                                                  timeout=aiohttp.ClientTimeout(total=None))
        return self._session

    async def send(self, prepared: bytes, timeout_s: float) -> Completion:
        """One POST; the engine cancels it at ``timeout_s`` (counted as a timeout of this server)."""
        session = self._ensure_session()
        ep = self.pool.pick()
        self.pool.start(ep)
        error: AttemptError | None = None
        try:
            headers = self._by_endpoint.get(id(ep), self._headers)
            async with session.post(ep.chat_url, data=prepared, headers=headers) as resp:
                raw = await read_capped(resp)
                if resp.status != 200:
                    raise http_error(resp.status, resp.headers, raw)
            return parse_chat(decode_json(raw))
        except AttemptError as exc:
            error = exc
            raise
        except BaseException as exc:
            if not isinstance(exc, Exception):  # cancelled (the engine's timeout, or Ctrl-C)
                error = AttemptError("timeout", "attempt cancelled")
                raise
            error = from_exception(exc)
            raise error from None
        finally:
            self.pool.finish(ep, error)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass
class SdkChatClient:
    """Chat completions through the official openai SDK, its own retries off; the body is parsed by parse_chat."""

    base_url: str
    api_key: ApiKey
    model: str
    dialect: ChatDialect
    extra_body: JsonObject = field(default_factory=dict)
    default_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        import openai

        url, auth = url_credentials(self.base_url)
        url, _, query = url.partition("?")  # the SDK appends paths to the base URL's text: a ?query goes separately
        self._client = openai.AsyncOpenAI(api_key=self.api_key.reveal(), base_url=url, max_retries=0,
                                          timeout=self.default_timeout_s,
                                          default_headers={"Authorization": auth} if auth else None,
                                          default_query=dict(parse_qsl(query)) if query else None)
        params = inspect.signature(self._client.chat.completions.create).parameters
        self._known = {name for name in params if name not in ("self", "extra_body", "extra_headers",
                                                                "extra_query", "timeout")}

    def prepare(self, request: GenRequest, images: list[EncodedImage]) -> dict[str, Any]:
        """The SDK's keyword arguments (``Any``: ``create`` types each of its many parameters, and the body's
        fields are the provider's to define); fields the SDK does not name travel in ``extra_body``."""
        body = chat_body(self.model, request, images, self.dialect, self.extra_body)
        kwargs = {k: v for k, v in body.items() if k in self._known}
        extra = {k: v for k, v in body.items() if k not in self._known}
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    @property
    def sdk(self) -> openai.AsyncOpenAI:
        """The SDK client itself (the batch interface uses its files and batches)."""
        return self._client

    async def send(self, prepared: dict[str, Any], timeout_s: float) -> Completion:
        response = await sdk_call(self._client.chat.completions.with_raw_response.create(**prepared,
                                                                                         timeout=timeout_s))
        return parse_chat(decode_json(response.http_response.content))

    async def aclose(self) -> None:
        await self._client.close()
