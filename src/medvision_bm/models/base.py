"""The backend contract: requests in, results streamed out one by one as they land."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from medvision_bm.data.docs import RunDoc
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject

if TYPE_CHECKING:
    from PIL import Image


@dataclass(frozen=True)
class GenSettings:
    """Generation settings that change an answer; all of them enter the run signature."""

    max_new_tokens: int = 256
    temperature: float | None = 0.0
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] = ()
    repetition_penalty: float | None = None
    min_new_tokens: int | None = None
    seed: int | None = 0

    def to_json(self) -> JsonObject:
        d: JsonObject = asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass
class GenRequest:
    """One question for a backend. Backends read the images through ``get_images()``: the runner may pass a
    loader instead of rendered images so that only requests in flight hold pixels in memory."""

    key: str
    prompt: str
    rundoc: RunDoc
    gen: GenSettings
    system_prompt: str | None = None
    images: list[Image.Image] = field(default_factory=list)  # PIL RGB images as sent
    image_loader: Callable[[], list[Image.Image]] | None = None
    #: fields added to this request's OpenAI-protocol body (a judge's response schema for the server's guided
    #: decoding); the other wire formats have no such field and never receive it
    extra_body: JsonObject | None = None
    #: what the images stand in for the doc's slice, when they are not that slice (the image check's ``blank`` or
    #: ``shuffled`` picture): an image cache keyed on the slice keys on this too
    image_variant: str | None = None

    def get_images(self) -> list[Image.Image]:
        if not self.images and self.image_loader is not None:
            self.images = list(self.image_loader())
        return self.images

    def release_images(self) -> None:
        if self.image_loader is not None:
            self.images = []


@dataclass
class Usage:
    """Token counts of one answer; ``output_tokens`` includes reasoning tokens for every provider, and
    ``reasoning_tokens`` says how many of them were reasoning where the provider reports it."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return asdict(self)


@dataclass
class RequestError:
    """Why a request has no answer: kind is 'http', 'timeout', 'connection', 'malformed', 'too_large', 'backend'
    (an empty answer is an answer, not a failure)."""

    kind: str
    message: str
    status_code: int | None = None
    retryable: bool = False

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass
class GenResult:
    key: str
    text: str | None
    error: RequestError | None = None
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    latency_s: float = 0.0
    attempts: int = 1
    truncated_chars: int = 0  # characters cut from an over-long answer (limits.MAX_ANSWER_CHARS)

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None


ResultSink = Callable[[GenResult], None]


class Backend(Protocol):
    """Answers requests; calls ``on_result`` once per request as soon as its answer (or failure) is final."""

    name: str

    def generate(self, requests: Sequence[GenRequest], on_result: ResultSink) -> None: ...

    def close(self) -> None: ...


class SyncBackend:
    """A backend that answers one request at a time through ``answer``; failures become stored failures."""

    name = "sync"

    def answer(self, request: GenRequest) -> GenResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def generate(self, requests: Sequence[GenRequest], on_result: ResultSink) -> None:
        for req in requests:
            t0 = time.perf_counter()
            try:
                res = self.answer(req)
            except Exception as exc:  # a backend bug must not lose the other samples
                res = GenResult(req.key, None, RequestError("backend", f"{type(exc).__name__}: {exc}"))
            res.latency_s = res.latency_s or (time.perf_counter() - t0)
            on_result(res)

    def close(self) -> None:
        return None


class ModelRunSettings(Protocol):
    """What a backend builder reads of a run's resolved settings (the runner's ``RunConfig`` has them all; read
    only, so a frozen dataclass qualifies)."""

    @property
    def record(self) -> Any: ...  # the run's models.registry.ModelRecord
    @property
    def model_name(self) -> str: ...
    @property
    def weights(self) -> str | None: ...
    @property
    def revision(self) -> str | None: ...
    @property
    def lora_path(self) -> str | None: ...
    @property
    def dtype(self) -> str: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def gpu_memory_utilization(self) -> float | None: ...
    @property
    def gen(self) -> GenSettings: ...
    @property
    def model_flags(self) -> dict[str, Any]: ...
    @property
    def results_dir(self) -> Path: ...


def required_weights(cfg: ModelRunSettings) -> str:
    """The run's weights, for a backend that loads some (a UserError naming the flag when the run has none)."""
    if not cfg.weights:
        raise UserError(f"{cfg.record.display_name} needs weights: pass --model_hf_id HUB_ID_OR_FOLDER")
    return cfg.weights
