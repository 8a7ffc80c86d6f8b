"""The one retry policy of every API backend: what is retried, how long to wait, how many requests fly at once.

Every provider client turns a failed attempt into an :class:`AttemptError`; :func:`call_with_retries` decides,
from that error alone, whether to try again and after how long. Nothing else in the package retries, and the
SDKs' own retries are switched off, so the attempt counts we record are the attempts the server saw.

Policy (this table is the one place it is written down):

========================================  ==========  =========================================================
failure                                   retried     notes
========================================  ==========  =========================================================
HTTP 408, 409, 429, 500-599 (incl. 529)   yes         ``Retry-After`` / ``retry-after-ms`` waited, up to a cap
other HTTP 4xx (400, 401, 403, 404, 422)  no          recorded with the provider's message
timeout of one attempt                    yes         per-attempt timeout, never past the sample deadline
connection refused / reset / closed       yes
malformed body (not JSON, no choices)     yes         a proxy or server hiccup far more often than a model answer
empty answer (no text)                    no          an answer, scored at once as a parse failure, as upstream's
                                                      clients return it (``gemini__2_5_woTool.py`` @c221615)
body over MAX_BODY_BYTES (64 MiB)         no          kind ``too_large``; an answer text over limits.MAX_ANSWER_CHARS
                                                      is stored cut (head and tail) with ``truncated_chars``
anything else (a bug in our client code)  no          kind ``backend``
========================================  ==========  =========================================================

Waits: exponential backoff ``base * 2**(n-1)`` capped at ``backoff_max_s``, minus a random share of up to
``jitter`` of itself (so delays spread over ``[(1 - jitter) * d, d]``). A server-given ``Retry-After`` (seconds or
an HTTP date) or ``retry-after-ms`` replaces the backoff, capped at ``retry_after_cap_s``. A sample gives up when
``max_retries`` retries are spent or when the next attempt could not start before its deadline; its deadline runs
from the moment it is taken up, so waits of every kind (its own and the limiter's pauses) count against it.
The exponent is capped at MAX_BACKOFF_EXPONENT, so any number of failures keeps the wait at ``backoff_max_s``.

Concurrency: :class:`AdaptiveLimiter` is additive-increase / multiplicative-decrease. A 429 halves the number of
requests in flight (at most once per cool-down window, so one burst of 429s counts once) and pauses new attempts
for the server's ``Retry-After`` (capped as above: one 429 never holds the whole run longer than the cap); every
``limit`` successes in a row raise the limit by one, up to the maximum.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from medvision_bm.errors import UserError
from medvision_bm.models.base import RequestError

T = TypeVar("T")

#: HTTP statuses worth another attempt. 5xx is added by :func:`is_retryable_status`.
RETRY_STATUSES: frozenset[int] = frozenset({408, 409, 429})
#: Most requests one backend keeps in flight, whatever --batch_size asks (each holds a socket and encoded images);
#: the aiohttp client opens at most as many connections.
MAX_IN_FLIGHT = 256
#: Largest response body read from a server (bytes); a larger one fails the attempt (kind 'too_large', not retried).
MAX_BODY_BYTES = 64 * 2**20
#: Largest exponent of the back-off: 2**60 s is far past any cap, and 2.0 ** n overflows a float past n = 1023.
MAX_BACKOFF_EXPONENT = 60


def capped_backoff(base_s: float, cap_s: float, doublings: int) -> float:
    """``base_s`` doubled ``doublings`` times (0 for the first wait), never above ``cap_s``; the exponent is capped
    (MAX_BACKOFF_EXPONENT) so that no count of failures overflows a float."""
    return min(cap_s, base_s * 2.0 ** min(MAX_BACKOFF_EXPONENT, max(0, doublings)))
#: Failure kinds that are transient by nature.
RETRY_KINDS: frozenset[str] = frozenset({"timeout", "connection", "malformed"})


def is_retryable_status(status: int | None) -> bool:
    return status is not None and (status in RETRY_STATUSES or 500 <= status <= 599)


class AttemptError(Exception):
    """Why one attempt failed, in provider-neutral terms.

    ``kind`` is one of RequestError's kinds: 'http', 'timeout', 'connection', 'malformed', 'backend'.
    ``message`` must already be free of secrets (providers' messages are passed through ``redact``).
    """

    def __init__(self, kind: str, message: str, *, status_code: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status_code = status_code
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        if self.kind == "http":
            return is_retryable_status(self.status_code)
        return self.kind in RETRY_KINDS

    @property
    def throttled(self) -> bool:
        return self.kind == "http" and self.status_code == 429

    @property
    def reason(self) -> str:
        """A short label for counting: 'http503', 'timeout', 'connection'..."""
        return f"http{self.status_code}" if self.kind == "http" else self.kind

    def describe(self) -> str:
        return f"HTTP {self.status_code}: {self.message}" if self.status_code is not None else self.message


def retry_after_seconds(headers: Mapping[str, str] | None, now_epoch: float | None = None) -> float | None:
    """The wait a server asks for: ``retry-after-ms`` (milliseconds) wins over ``Retry-After`` (seconds or date).

    Header names are matched case-insensitively; an unreadable or negative value counts as absent.
    """
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
        return value if math.isfinite(value) and value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    now = time.time() if now_epoch is None else now_epoch
    return max(0.0, when.timestamp() - now)


@dataclass(frozen=True)
class RetryPolicy:
    """Retry settings; none of them changes an answer, so none enters the run signature."""

    max_retries: int = 6
    attempt_timeout_s: float = 120.0
    sample_deadline_s: float = 900.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    jitter: float = 0.5
    retry_after_cap_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise UserError(f"--max_retries must be 0 or more, got {self.max_retries}")
        if not self.attempt_timeout_s > 0:
            raise UserError(f"--request_timeout must be positive seconds, got {self.attempt_timeout_s}")
        if not self.sample_deadline_s > 0:
            raise UserError(f"--sample_deadline must be positive seconds, got {self.sample_deadline_s}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter}")
        if not 0.0 <= self.retry_after_cap_s < math.inf:
            raise ValueError(f"retry_after_cap_s must be finite seconds, got {self.retry_after_cap_s}")

    def backoff_s(self, retry_number: int, rng: random.Random) -> float:
        """The wait before retry ``retry_number`` (1 for the first retry) when the server names none."""
        full = capped_backoff(self.backoff_base_s, self.backoff_max_s, retry_number - 1)
        return full * (1.0 - self.jitter * rng.random())

    def capped_retry_after(self, retry_after_s: float | None) -> float | None:
        """A server's ``Retry-After`` as it is waited: never below 0, never above ``retry_after_cap_s``."""
        if retry_after_s is None:
            return None
        return min(self.retry_after_cap_s, max(0.0, retry_after_s))

    def delay_s(self, error: AttemptError, retry_number: int, rng: random.Random) -> float:
        capped = self.capped_retry_after(error.retry_after_s)
        if capped is not None:
            return capped
        return self.backoff_s(retry_number, rng)


class Clock(Protocol):
    """Time as the policy sees it; tests inject a fake one so that waits cost nothing."""

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class AdaptiveLimiter:
    """Requests in flight, bounded by a limit that halves on 429s and creeps back up while they stay away."""

    def __init__(self, max_limit: int, *, clock: Clock | None = None, min_limit: int = 1,
                 decrease_factor: float = 0.5, cooldown_s: float = 1.0) -> None:
        if max_limit < 1:
            raise UserError(f"--batch_size (requests in flight) must be at least 1, got {max_limit}")
        self.max_limit = max_limit
        self.min_limit = max(1, min(min_limit, max_limit))
        self.limit = max_limit
        self.in_flight = 0
        self.decrease_factor = decrease_factor
        self.cooldown_s = cooldown_s
        self.clock: Clock = clock or RealClock()
        self._successes = 0
        self._last_decrease = -math.inf
        self._paused_until = -math.inf
        self._cond: asyncio.Condition | None = None

    def rebind(self) -> None:
        """Forget loop-bound state: the next acquire may run on a new event loop."""
        self._cond = None
        self.in_flight = 0

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def acquire(self, deadline: float = math.inf) -> bool:
        """Take a slot; False, without waiting, when a throttle pause would last until ``deadline`` or later."""
        cond = self._condition()
        while True:
            wait = self._paused_until - self.clock.monotonic()
            if wait > 0:
                if self._paused_until >= deadline:
                    return False
                await self.clock.sleep(wait)
                continue
            async with cond:
                if self.in_flight < self.limit:
                    self.in_flight += 1
                    return True
                await cond.wait()

    async def release(self) -> None:
        cond = self._condition()
        async with cond:
            self.in_flight -= 1
            cond.notify(max(1, self.limit - self.in_flight))

    def on_success(self) -> None:
        self._successes += 1
        if self._successes >= self.limit and self.limit < self.max_limit:
            self.limit += 1
            self._successes = 0  # waiters see the higher limit at the release that follows every success

    def on_throttle(self, retry_after_s: float | None) -> None:
        """A 429: halve the limit and pause new attempts for ``retry_after_s``, already capped by the policy
        (RetryPolicy.capped_retry_after; call_with_retries passes it so)."""
        now = self.clock.monotonic()
        self._successes = 0
        if now - self._last_decrease >= max(self.cooldown_s, retry_after_s or 0.0):
            self.limit = max(self.min_limit, int(self.limit * self.decrease_factor))
            self._last_decrease = now
        if retry_after_s:
            self._paused_until = max(self._paused_until, now + retry_after_s)


@dataclass
class RetryOutcome(Generic[T]):
    """What came of one sample: the value, or the last error; attempts made and seconds from first send."""

    value: T | None
    error: RequestError | None
    attempts: int
    latency_s: float


@dataclass
class RetryCounters:
    """Counters the policy updates; the backend's stats read them."""

    retries: int = 0
    throttled: int = 0
    retry_after_capped: int = 0  # server waits above RetryPolicy.retry_after_cap_s (said once, at the first)
    failed_attempts: Counter[str] = field(default_factory=Counter)  # by AttemptError.reason


async def call_with_retries(attempt: Callable[[float], Awaitable[T]], policy: RetryPolicy, *,
                            limiter: AdaptiveLimiter, clock: Clock, rng: random.Random,
                            counters: RetryCounters | None = None,
                            note: Callable[[str], None] | None = None) -> RetryOutcome[T]:
    """Run ``attempt(timeout_s)`` until it returns, the error is final, retries run out or the deadline passes.

    The sample's deadline starts here, so the limiter's pause after another request's 429 counts against it: a
    sample whose deadline falls inside that pause ends at once, not sent (retryable: the next run asks it). A
    ``Retry-After`` above the policy's cap is waited for the cap, and the first one is said through ``note``.
    ``attempt`` raises :class:`AttemptError` for a failed attempt; any other exception is a bug in the client and
    ends the sample at once as kind 'backend'. Cancellation propagates.
    """
    counters = counters if counters is not None else RetryCounters()
    attempts = 0
    entered = clock.monotonic()
    started: float | None = None
    deadline = entered + policy.sample_deadline_s
    retry_number = 0
    spare = min(1.0, policy.attempt_timeout_s)  # the least time worth starting an attempt with
    while True:
        sent_ok = await limiter.acquire(deadline - spare)
        now = clock.monotonic()
        if sent_ok and deadline - now < spare:
            await limiter.release()
            sent_ok = False
        if not sent_ok:
            return RetryOutcome(None, _not_sent(policy, attempts), attempts,
                                0.0 if started is None else now - started)
        if started is None:
            started = now
        timeout = min(policy.attempt_timeout_s, deadline - now)
        attempts += 1
        error: AttemptError
        try:
            value = await attempt(timeout)
        except AttemptError as exc:
            error = exc
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in a client must end this sample, not the run
            error = AttemptError("backend", f"{type(exc).__name__}: {exc}")
        else:
            limiter.on_success()
            return RetryOutcome(value, None, attempts, clock.monotonic() - started)
        finally:
            await limiter.release()
        counters.failed_attempts[error.reason] += 1
        if error.retry_after_s is not None and error.retry_after_s > policy.retry_after_cap_s:
            counters.retry_after_capped += 1
            if counters.retry_after_capped == 1 and note is not None:
                note(f"the server asked to wait {error.retry_after_s:g} s (Retry-After); every wait is capped at "
                     f"{policy.retry_after_cap_s:g} s and counts against the sample deadline of "
                     f"{policy.sample_deadline_s:g} s")
        if error.throttled:
            counters.throttled += 1
            limiter.on_throttle(policy.capped_retry_after(error.retry_after_s))
        now = clock.monotonic()
        final = _final_reason(error, policy, retry_number, now, deadline)
        if final is not None:
            return RetryOutcome(None, _request_error(error, attempts, final), attempts, now - started)
        retry_number += 1
        counters.retries += 1
        await clock.sleep(policy.delay_s(error, retry_number, rng))


def _not_sent(policy: RetryPolicy, attempts: int) -> RequestError:
    """A sample held back by a throttle pause that outlasts its deadline: retryable, so the next run asks it."""
    after = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
    return RequestError(kind="http", status_code=429, retryable=True,
                        message=f"not sent{after}: the server's Retry-After pause (429) ends past the sample deadline "
                                f"of {policy.sample_deadline_s:g} s")


def _final_reason(error: AttemptError, policy: RetryPolicy, retries_done: int, now: float,
                  deadline: float) -> str | None:
    """None when the sample should be tried again, else why it stops here."""
    if not error.retryable:
        return "not retryable"
    if retries_done >= policy.max_retries:
        return "retries exhausted"
    # The caller draws the actual delay; its upper bound (no jitter) plus a little time for the next attempt must
    # fit before the deadline, so that a sample never sleeps past it or starts an attempt with no time left.
    capped = policy.capped_retry_after(error.retry_after_s)
    upper = capped if capped is not None else capped_backoff(policy.backoff_base_s, policy.backoff_max_s,
                                                             retries_done)
    if now + upper + min(1.0, policy.attempt_timeout_s) >= deadline:
        return f"sample deadline of {policy.sample_deadline_s:g} s reached"
    return None


def _request_error(error: AttemptError, attempts: int, final: str) -> RequestError:
    noun = "attempt" if attempts == 1 else "attempts"
    return RequestError(kind=error.kind, message=f"{error.describe()} ({final} after {attempts} {noun})",
                        status_code=error.status_code, retryable=error.retryable)
