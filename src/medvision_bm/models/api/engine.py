"""The API backend engine: an asyncio loop on a private thread behind the runner's synchronous Backend contract.

``generate`` hands the requests to the loop, where ``batch_size`` workers take them in order; each request's
images are encoded once (cached per slice, encoded off the loop), then sent through the provider client under the
retry policy. Every final result crosses back to the caller's thread through a queue and is passed to
``on_result`` there, one at a time, as soon as it is known. Ctrl-C or an exception in ``on_result`` cancels what is
still in flight; nothing half-done is reported.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import os
import queue
import random
import sys
import threading
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from medvision_bm import limits
from medvision_bm.jsontypes import JsonMapping
from medvision_bm.models.api.images import EncodedImage, ImageCache
from medvision_bm.models.api.retry import (
    MAX_IN_FLIGHT,
    AdaptiveLimiter,
    AttemptError,
    Clock,
    RealClock,
    RetryCounters,
    RetryPolicy,
    call_with_retries,
)
from medvision_bm.models.api.wire import Completion
from medvision_bm.models.base import GenRequest, GenResult, RequestError, ResultSink, Usage
from medvision_bm.secrets import redact, redact_values

if TYPE_CHECKING:
    from medvision_bm.models.api.batch import BatchProvider
    from medvision_bm.models.api.pricing import Price

T = TypeVar("T")

#: The stored answer's bound (medvision_bm.limits, shared with the import path), named here for the engine's readers.
MAX_ANSWER_CHARS = limits.MAX_ANSWER_CHARS
ANSWER_CUT_MARK = limits.ANSWER_CUT_MARK


def cap_answer(text: str, limit: int | None = None) -> tuple[str, int]:
    """limits.cap_answer at this module's MAX_ANSWER_CHARS."""
    return limits.cap_answer(text, MAX_ANSWER_CHARS if limit is None else limit)


def answer_result(key: str, completion: Completion, *, latency_s: float = 0.0, attempts: int = 1) -> GenResult:
    """The result stored for a provider's answer, live or batched: its text (thinking in a <think> block, a key the
    server echoed redacted, an over-long answer cut), finish reason and usage."""
    text, cut = cap_answer(redact_values(completion.text()))  # a server that echoes the key in use never stores it
    return GenResult(key, text, None, completion.finish_reason, completion.usage, latency_s=latency_s,
                     attempts=attempts, truncated_chars=cut)


class BatchCallError(RuntimeError):
    """A call of a provider's batch interface that failed for good under the retry policy (message redacted)."""


class ProviderClient(Protocol):
    """One provider's wire format. Created on the engine's loop; ``send`` is one attempt, never retried inside."""

    def prepare(self, request: GenRequest, images: list[EncodedImage]) -> Any:
        """Build what ``send`` needs (once per request; retries reuse it). Its form is each client's own (JSON
        bytes, SDK keyword arguments, SDK objects), hence ``Any`` here and in ``send``."""
        ...

    async def send(self, prepared: Any, timeout_s: float) -> Completion:
        """One attempt; raises AttemptError on failure."""
        ...

    async def aclose(self) -> None: ...


@dataclass
class ApiStats:
    """Counters for the progress line and the run log. ``done`` counts results handed to ``on_result``."""

    total: int = 0
    done: int = 0
    ok: int = 0
    failures: int = 0
    retries: int = 0
    throttled: int = 0  # HTTP 429 answers
    in_flight: int = 0
    concurrency: int = 0  # current limit on requests in flight
    max_concurrency: int = 0
    length_cuts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    images_encoded: int = 0
    failed_attempts: dict[str, int] = dataclasses.field(default_factory=dict)  # 'http503': 2, 'timeout': 1...

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    # read like a mapping too (``stats()["retries"]``), for progress code written against plain dicts
    def __getitem__(self, name: str) -> object:
        if name not in self:
            raise KeyError(name)
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.__dataclass_fields__


class ApiBackend:
    """A Backend answering through one provider client under the shared retry policy."""

    #: grey slices are handed over as ``L`` images (hooks.visual_gray): they are encoded single-channel anyway
    #: (models/api/images.py), so the three-channel copy and the channel check are spared
    takes_gray_slices = True

    def __init__(self, name: str, make_client: Callable[[], ProviderClient], *, policy: RetryPolicy,
                 concurrency: int, image_format: str | None = "png", clock: Clock | None = None,
                 rng: random.Random | None = None, settings: JsonMapping | None = None,
                 price: Price | None = None, make_batch: Callable[[Any], BatchProvider] | None = None) -> None:
        self.name = name
        self._make_batch = make_batch  # the provider's batch interface over the live client (None: it has none)
        self._batch: BatchProvider | None = None
        self.policy = policy
        self.settings = dict(settings or {})  # non-secret description of the backend (provider, model, URLs)
        self.price = price  # pricing.Price or None
        self._make_client = make_client
        self._clock: Clock = clock or RealClock()
        self._rng = rng or random.Random()
        if concurrency > MAX_IN_FLIGHT:
            print(f"note: --batch_size {concurrency} asks for {concurrency} API requests in flight; {name} keeps at "
                  f"most {MAX_IN_FLIGHT} (and as many connections)", file=sys.stderr)
            concurrency = MAX_IN_FLIGHT
        self._limiter = AdaptiveLimiter(concurrency, clock=self._clock)
        self._cache = ImageCache(image_format)
        self._counters = RetryCounters()
        self._stats = ApiStats(max_concurrency=concurrency)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: ProviderClient | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._encoding: dict[Hashable, asyncio.Future[list[EncodedImage]]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ Backend contract
    def generate(self, requests: Sequence[GenRequest], on_result: ResultSink) -> None:
        requests = list(requests)
        if not requests:
            return
        loop = self._ensure_loop()
        results: queue.SimpleQueue[GenResult] = queue.SimpleQueue()
        future = asyncio.run_coroutine_threadsafe(self._run(requests, results.put), loop)
        delivered = 0
        try:
            while delivered < len(requests):
                try:
                    batch = [results.get(timeout=0.1)]
                except queue.Empty:
                    if future.done() and results.empty():
                        future.result()  # re-raises what broke the loop side
                        raise RuntimeError(f"{self.name}: {len(requests) - delivered} requests got no result") from None
                    continue
                with contextlib.suppress(queue.Empty):  # take whatever else landed meanwhile: fewer wake-ups
                    while True:
                        batch.append(results.get_nowait())
                for item in batch:
                    on_result(item)
                    delivered += 1
            future.result()
        except BaseException:
            future.cancel()
            with _quiet():
                future.result(timeout=10)
            raise

    def close(self) -> None:
        with self._lock:
            loop, thread, client, pool = self._loop, self._thread, self._client, self._pool
            self._loop = self._thread = self._client = self._pool = None
            self._batch = None
        if loop is None:
            return
        if client is not None:
            with _quiet():
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=10)
        with _quiet():
            loop.close()
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ApiBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> ApiStats:
        s = dataclasses.replace(self._stats)
        s.retries = self._counters.retries
        s.throttled = self._counters.throttled
        s.in_flight = self._limiter.in_flight
        s.concurrency = self._limiter.limit
        s.images_encoded = self._cache.encoded
        s.failed_attempts = dict(self._counters.failed_attempts)
        return s

    # ------------------------------------------------------------------ loop side
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        """The backend's event loop, its thread, encoder pool and provider client, made once and published
        together under the lock: a second caller (another thread of the run asking at once) waits for all of
        them, never finds a loop whose client is not made yet."""
        with self._lock:
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            self._limiter.rebind()  # asyncio primitives bind to the loop they first wait on
            self._encoding.clear()
            thread = threading.Thread(target=loop.run_forever, name=f"medvision-api-{self.name}", daemon=True)
            thread.start()

            async def create() -> ProviderClient:
                return self._make_client()

            try:
                client = asyncio.run_coroutine_threadsafe(create(), loop).result()
            except BaseException:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)
                with _quiet():
                    loop.close()
                raise
            # rendering and PNG encoding release the GIL in numpy/scipy/zlib: one encoder thread per core
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2),
                                                               thread_name_prefix="medvision-encode")
            self._client, self._loop, self._thread = client, loop, thread
            return loop

    async def _run(self, requests: list[GenRequest], emit: Callable[[GenResult], None]) -> None:
        self._stats.total += len(requests)
        pending = iter(requests)

        async def worker() -> None:
            for request in pending:  # one shared iterator: workers take requests in order
                emit(await self._answer(request))

        tasks = [asyncio.create_task(worker()) for _ in range(min(self._limiter.max_limit, len(requests)))]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    async def _answer(self, request: GenRequest) -> GenResult:
        assert self._client is not None
        client = self._client
        try:
            images = await self._images(request)
            prepared = client.prepare(request, images)
        except Exception as exc:  # unreadable image or an unbuildable request: this sample fails, others go on
            return self._record(GenResult(request.key, None, RequestError(
                "backend", redact(f"could not build the request: {type(exc).__name__}: {exc}")), attempts=0))

        async def attempt(timeout_s: float) -> Completion:
            try:
                async with asyncio.timeout(timeout_s):
                    completion = await client.send(prepared, timeout_s)
            except TimeoutError:
                raise AttemptError("timeout", f"no answer within {timeout_s:.3g} s") from None
            return completion  # an empty answer is an answer (retry.py's table), never tried again

        outcome = await call_with_retries(attempt, self.policy, limiter=self._limiter, clock=self._clock,
                                          rng=self._rng, counters=self._counters, note=self._note)
        if outcome.value is None:
            error = outcome.error or RequestError("backend", "no answer and no error")
            error = dataclasses.replace(error, message=redact(error.message))
            return self._record(GenResult(request.key, None, error, latency_s=outcome.latency_s,
                                          attempts=outcome.attempts))
        return self._record(answer_result(request.key, outcome.value, latency_s=outcome.latency_s,
                                          attempts=outcome.attempts))

    # ------------------------------------------------------------------ the provider's batch interface
    @property
    def batch_interface(self) -> str | None:
        """The name of the provider's batch interface this backend can use, None when it has none."""
        return None if self._make_batch is None else self.name

    def batch_limits(self) -> tuple[int, int]:
        """The provider's limits on one batch: requests, and bytes of what is sent."""
        self._ensure_loop()
        provider = self._batch_provider()
        return int(provider.max_requests), int(provider.max_bytes)

    def batch_items(self, requests: Sequence[GenRequest], ids: Sequence[str]) -> tuple[list[bytes | None],
                                                                                        list[GenResult]]:
        """Each request's batch item, built from the body a live request sends with its images encoded as live;
        None where it cannot be built, that request's failed result in the second list (it is asked again later)."""
        loop = self._ensure_loop()
        return asyncio.run_coroutine_threadsafe(self._batch_items(list(requests), list(ids)), loop).result()

    async def _batch_items(self, requests: list[GenRequest], ids: list[str]) -> tuple[list[bytes | None],
                                                                                       list[GenResult]]:
        provider = self._batch_provider()
        items: list[bytes | None] = []
        failed: list[GenResult] = []
        for request, cid in zip(requests, ids, strict=True):
            try:
                items.append(provider.item(cid, request, await self._images(request)))
            except Exception as exc:  # an unreadable image: this sample fails, the others go on
                items.append(None)
                failed.append(self._record(GenResult(request.key, None, RequestError(
                    "backend", redact(f"could not build the request: {type(exc).__name__}: {exc}")), attempts=0)))
            finally:
                request.release_images()
        return items, failed

    def batch_call(self, what: str, op: Callable[[BatchProvider, float], Awaitable[T]]) -> T:
        """One call of the provider's batch interface (``op(provider, timeout_s)``) under the run's retry policy;
        raises BatchCallError naming ``what`` when it fails for good."""
        loop = self._ensure_loop()

        async def call() -> T:
            provider = self._batch_provider()

            async def attempt(timeout_s: float) -> T:
                try:
                    async with asyncio.timeout(timeout_s):
                        return await op(provider, timeout_s)
                except TimeoutError:
                    raise AttemptError("timeout", f"no answer within {timeout_s:.3g} s") from None

            outcome = await call_with_retries(attempt, self.policy, limiter=self._limiter, clock=self._clock,
                                              rng=self._rng, counters=self._counters, note=self._note)
            if outcome.error is not None:
                raise BatchCallError(redact(f"{self.name}: {what}: {outcome.error.message}"))
            return outcome.value  # type: ignore[return-value]  # None only where ``op`` returns None

        return asyncio.run_coroutine_threadsafe(call(), loop).result()

    def _batch_provider(self) -> BatchProvider:
        if self._make_batch is None:
            raise RuntimeError(f"{self.name} has no batch interface")
        if self._batch is None:
            assert self._client is not None
            self._batch = self._make_batch(self._client)
        return self._batch

    def batch_result(self, key: str, completion: Completion) -> GenResult:
        """A batch item's answer as the stored result (what a live answer gives), counted in the stats."""
        return self._record(answer_result(key, completion))

    def batch_failure(self, key: str, error: RequestError) -> GenResult:
        """A batch item without an answer (failed, expired, cancelled): a failed result, asked again later."""
        return self._record(GenResult(key, None, dataclasses.replace(error, message=redact(error.message)),
                                      attempts=1))

    def _note(self, message: str) -> None:
        print(f"note: {self.name}: {redact(message)}", file=sys.stderr, flush=True)

    async def _images(self, request: GenRequest) -> list[EncodedImage]:
        key = self._cache.key_for(request)
        cached = self._cache.lookup(key)
        if cached is not None:
            return cached
        loop = asyncio.get_running_loop()
        if key is None:
            return await loop.run_in_executor(self._pool, self._cache.encode, request, key)
        running = self._encoding.get(key)
        if running is not None:  # another request for the same slice is encoding it now
            return list(await asyncio.shield(running))
        future: asyncio.Future[list[EncodedImage]] = loop.create_future()
        self._encoding[key] = future
        try:
            images = await loop.run_in_executor(self._pool, self._cache.encode, request, key)
            future.set_result(images)
            return images
        except BaseException as exc:
            future.set_exception(exc if isinstance(exc, Exception) else RuntimeError("encoding cancelled"))
            future.exception()  # mark retrieved
            raise
        finally:
            self._encoding.pop(key, None)

    def _record(self, result: GenResult) -> GenResult:
        s = self._stats
        s.done += 1
        if result.ok:
            s.ok += 1
            if result.finish_reason == "length":
                s.length_cuts += 1
            u: Usage = result.usage
            s.input_tokens += u.input_tokens or 0
            s.output_tokens += u.output_tokens or 0
            s.reasoning_tokens += u.reasoning_tokens or 0
        else:
            s.failures += 1
        return result


def _quiet() -> contextlib.suppress:
    """Swallow everything: for cleanup paths only, where the original error (if any) is what matters."""
    return contextlib.suppress(BaseException)
