"""Turning what came back over the wire (a status and body, or an SDK's exception) into an AttemptError.

All providers' error bodies carry the human message at ``error.message`` (OpenAI, Anthropic, Gemini) or at
``message``/``detail`` (proxies, FastAPI servers); :func:`provider_message` finds it. Messages pass through
``redact`` and are cut to a readable length, since they end up in stored results.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Protocol, SupportsIndex, SupportsInt, TypeVar

from medvision_bm.jsontypes import JsonMapping, JsonValue
from medvision_bm.models.api.retry import AttemptError, retry_after_seconds
from medvision_bm.models.base import Usage
from medvision_bm.secrets import redact

T = TypeVar("T")

MAX_MESSAGE = 500


@dataclass
class Completion:
    """One provider answer in neutral terms. ``answer`` is the visible text, ``reasoning`` the thinking, if any."""

    answer: str
    finish_reason: str | None
    usage: Usage
    reasoning: str | None = None

    def text(self) -> str:
        """The stored answer text: thinking (if the provider returned it) in a <think> block, then the answer."""
        if self.reasoning and self.reasoning.strip():
            return f"<think>{self.reasoning}</think>\n{self.answer}"
        return self.answer


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    text = " ".join(str(text).split())
    return redact(text if len(text) <= limit else text[: limit - 3] + "...")


def provider_message(body: object) -> str:
    """The human-readable message in an error body (bytes, text or parsed JSON)."""
    if isinstance(body, bytes | bytearray):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        text = body
        try:
            body = json.loads(text)
        except ValueError:
            return clip(text) if text.strip() else "(empty body)"
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    if isinstance(body, Mapping):
        err = body.get("error")
        if isinstance(err, Mapping) and err.get("message"):
            return clip(str(err["message"]))
        if isinstance(err, str) and err:
            return clip(err)
        for field in ("message", "detail"):
            if body.get(field):
                value = body[field]
                return clip(value if isinstance(value, str) else json.dumps(value))
    return clip(json.dumps(body) if not isinstance(body, str) else body)


def http_error(status: int, headers: Mapping[str, str] | None, body: object) -> AttemptError:
    return AttemptError("http", provider_message(body), status_code=int(status),
                        retry_after_s=retry_after_seconds(headers))


def malformed(detail: str) -> AttemptError:
    return AttemptError("malformed", f"malformed response body: {clip(detail, 200)}")


def decode_json(raw: bytes) -> JsonValue:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        snippet = raw[:80].decode("utf-8", errors="replace")
        raise malformed(f"not JSON ({exc.__class__.__name__}): {snippet!r}") from None


def from_exception(exc: BaseException) -> AttemptError:
    """Map an exception raised by an SDK or HTTP library during one attempt.

    Covers the openai and anthropic SDKs (same error classes), google-genai's APIError, aiohttp and httpx, by
    class and attribute rather than by import, so no SDK is imported here.
    """
    if isinstance(exc, AttemptError):
        return exc
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, TimeoutError | asyncio.TimeoutError) or names & {"APITimeoutError", "TimeoutException",
                                                                        "ServerTimeoutError", "ReadTimeout",
                                                                        "ConnectTimeout"}:
        return AttemptError("timeout", f"no answer in time ({type(exc).__name__})")
    status, code = getattr(exc, "status_code", None), getattr(exc, "code", None)
    if "APIStatusError" in names and isinstance(status, int):  # openai / anthropic (an int status_code, always)
        response = getattr(exc, "response", None)
        body = getattr(exc, "body", None)
        if body is None and response is not None:
            body = _safe_text(response)
        return http_error(int(status), getattr(response, "headers", None), body if body is not None else str(exc))
    if "APIError" in names and isinstance(code, int):  # google-genai
        response = getattr(exc, "response", None)
        message = getattr(exc, "message", None) or str(exc)
        return AttemptError("http", clip(str(message)), status_code=int(code),
                            retry_after_s=retry_after_seconds(getattr(response, "headers", None)))
    if "APIResponseValidationError" in names or isinstance(exc, json.JSONDecodeError | UnicodeDecodeError):
        return malformed(f"{type(exc).__name__}: {exc}")
    if names & {"APIConnectionError", "ClientConnectionError", "ClientOSError", "ServerDisconnectedError",
                "ClientPayloadError", "TransportError", "ConnectError", "RemoteProtocolError", "ReadError",
                "ConnectionError", "ClientConnectorError"} or isinstance(exc, ConnectionError | OSError):
        return AttemptError("connection", f"connection failed: {clip(f'{type(exc).__name__}: {exc}', 200)}")
    return AttemptError("backend", clip(f"{type(exc).__name__}: {exc}"))


async def sdk_call(call: Awaitable[T]) -> T:
    """Await one SDK call (one attempt); whatever it raises comes out as an AttemptError. Cancellation passes."""
    try:
        return await call
    except Exception as exc:
        raise from_exception(exc) from None


class _TextResponse(Protocol):
    """What an SDK's HTTP response offers for its body: ``text`` (httpx and requests alike)."""

    @property
    def text(self) -> object: ...


def _safe_text(response: _TextResponse) -> str | None:
    try:
        return str(response.text)
    except Exception:  # a response whose body cannot be read has no message to give
        return None


def mapping_at(obj: JsonMapping, key: str) -> JsonMapping:
    """``obj[key]`` when it is a mapping (a body's ``usage`` and the like), else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def as_int(value: object) -> int | None:
    """``int(value)``, or None where that fails (None, a list, a text that is no integer, NaN)."""
    if not isinstance(value, str | bytes | bytearray | SupportsInt | SupportsIndex):
        return None  # what int() refuses with a TypeError
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
