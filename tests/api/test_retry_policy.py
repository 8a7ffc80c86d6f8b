"""The retry policy on an injected clock: what is retried, the waits, the deadline, the adaptive limit."""

from __future__ import annotations

import asyncio
import email.utils
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes.clock import FakeClock
from medvision_bm.errors import UserError
from medvision_bm.models.api.retry import (
    AdaptiveLimiter,
    AttemptError,
    RetryCounters,
    RetryPolicy,
    call_with_retries,
    is_retryable_status,
    retry_after_seconds,
)

NO_JITTER = dict(jitter=0.0, backoff_base_s=1.0, backoff_max_s=60.0)


def script(*steps: object):
    """An attempt function that plays the steps in order: an AttemptError/exception is raised, else returned."""
    seen: list[float] = []
    steps_left = list(steps)

    async def attempt(timeout: float) -> object:
        seen.append(timeout)
        step = steps_left.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    attempt.seen = seen  # type: ignore[attr-defined]
    return attempt


def go(attempt, policy: RetryPolicy, clock: FakeClock | None = None, limit: int = 4, counters=None):
    clock = clock or FakeClock()
    limiter = AdaptiveLimiter(limit, clock=clock)
    return asyncio.run(call_with_retries(attempt, policy, limiter=limiter, clock=clock, rng=random.Random(0),
                                         counters=counters)), clock


@pytest.mark.parametrize("status,retry", [(408, True), (409, True), (429, True), (500, True), (502, True),
                                          (503, True), (504, True), (529, True), (400, False), (401, False),
                                          (403, False), (404, False), (422, False), (None, False)])
def test_which_statuses_are_retried(status, retry):
    assert is_retryable_status(status) is retry
    assert AttemptError("http", "x", status_code=status).retryable is retry


@pytest.mark.parametrize("kind,retry", [("timeout", True), ("connection", True), ("malformed", True),
                                        ("backend", False)])
def test_which_kinds_are_retried(kind, retry):
    assert AttemptError(kind, "x").retryable is retry


def test_retry_after_forms():
    assert retry_after_seconds({"Retry-After": "7"}) == 7.0
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5  # ms wins
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert retry_after_seconds({"Retry-After": date}, now_epoch=now) == pytest.approx(30.0, abs=1.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert retry_after_seconds({"Retry-After": past}, now_epoch=now) == 0.0
    for bad in ({"Retry-After": "soon"}, {"Retry-After": "-3"}, {"retry-after-ms": "nan"}, {}, None):
        assert retry_after_seconds(bad) is None


def test_backoff_doubles_up_to_the_cap_and_jitter_only_shortens():
    p = RetryPolicy(**{**NO_JITTER, "backoff_max_s": 10.0})
    rng = random.Random(1)
    assert [p.backoff_s(n, rng) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    jittered = RetryPolicy(jitter=0.5, backoff_base_s=1.0, backoff_max_s=60.0)
    draws = [jittered.backoff_s(3, rng) for _ in range(200)]
    assert all(2.0 <= d <= 4.0 for d in draws)
    assert max(draws) - min(draws) > 1.0  # it really spreads


def test_first_try_success_makes_one_attempt_and_no_wait():
    outcome, clock = go(script("answer"), RetryPolicy(**NO_JITTER))
    assert (outcome.value, outcome.error, outcome.attempts) == ("answer", None, 1)
    assert clock.sleeps == []


def test_server_errors_are_retried_with_backoff_then_succeed():
    counters = RetryCounters()
    attempt = script(AttemptError("http", "busy", status_code=503), AttemptError("http", "x", status_code=529),
                     AttemptError("timeout", "slow"), "answer")
    outcome, clock = go(attempt, RetryPolicy(**NO_JITTER), counters=counters)
    assert outcome.value == "answer" and outcome.attempts == 4
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert counters.retries == 3
    assert outcome.latency_s == pytest.approx(7.0)


def test_retry_after_is_waited_exactly_and_capped():
    attempt = script(AttemptError("http", "slow down", status_code=429, retry_after_s=7.0),
                     AttemptError("http", "slow down", status_code=429, retry_after_s=5000.0), "answer")
    counters = RetryCounters()
    outcome, clock = go(attempt, RetryPolicy(**NO_JITTER, retry_after_cap_s=90.0, sample_deadline_s=10_000),
                        counters=counters)
    assert outcome.value == "answer"
    # the limiter pauses new attempts for the same Retry-After; the sample itself sleeps it too
    assert 7.0 in clock.sleeps and 90.0 in clock.sleeps
    assert all(s <= 5000.0 for s in clock.sleeps)
    assert counters.throttled == 2


def test_client_errors_are_final_and_keep_the_provider_message():
    outcome, clock = go(script(AttemptError("http", "model 'gpt-9' does not exist", status_code=404)),
                        RetryPolicy(**NO_JITTER))
    assert outcome.value is None and outcome.attempts == 1 and clock.sleeps == []
    err = outcome.error
    assert (err.kind, err.status_code, err.retryable) == ("http", 404, False)
    assert "model 'gpt-9' does not exist" in err.message and "not retryable after 1 attempt" in err.message


def test_retries_exhausted_makes_max_retries_plus_one_attempts():
    policy = RetryPolicy(**NO_JITTER, max_retries=3)
    outcome, clock = go(script(*[AttemptError("connection", "reset")] * 4), policy)
    assert outcome.attempts == 4 and len(clock.sleeps) == 3
    assert outcome.error.kind == "connection" and outcome.error.retryable
    assert "retries exhausted after 4 attempts" in outcome.error.message


def test_zero_retries_means_one_attempt():
    outcome, _ = go(script(AttemptError("http", "x", status_code=500)), RetryPolicy(**NO_JITTER, max_retries=0))
    assert outcome.attempts == 1 and outcome.error.status_code == 500


def test_deadline_stops_retries_before_sleeping_past_it():
    policy = RetryPolicy(**NO_JITTER, max_retries=50, sample_deadline_s=20.0, attempt_timeout_s=5.0)
    outcome, clock = go(script(*[AttemptError("http", "x", status_code=503)] * 50), policy)
    assert outcome.error is not None and "sample deadline of 20 s reached" in outcome.error.message
    # waits 1, 2, 4, 8 end at 15 s; 16 more would pass the deadline, so the 5th failure is final
    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0] and outcome.attempts == 5


def test_attempt_timeout_shrinks_to_what_the_deadline_leaves():
    policy = RetryPolicy(**NO_JITTER, sample_deadline_s=12.0, attempt_timeout_s=8.0)
    clock = FakeClock()
    attempt = script(AttemptError("timeout", "t"), "answer")

    async def slow_attempt(timeout: float):
        clock.advance(timeout if not attempt.seen else 0)  # the first attempt uses its whole timeout
        return await attempt(timeout)

    outcome, _ = go(slow_attempt, policy, clock=clock)
    assert outcome.value == "answer"
    assert attempt.seen[0] == 8.0 and attempt.seen[1] == pytest.approx(3.0)  # 12 - 8 - 1 s of backoff


def test_a_bug_in_the_client_ends_the_sample_without_retry():
    outcome, clock = go(script(KeyError("choices")), RetryPolicy(**NO_JITTER))
    assert outcome.error.kind == "backend" and outcome.attempts == 1 and clock.sleeps == []
    assert "KeyError" in outcome.error.message


def test_cancellation_propagates():
    with pytest.raises(asyncio.CancelledError):
        go(script(asyncio.CancelledError()), RetryPolicy(**NO_JITTER))


def test_policy_rejects_nonsense():
    with pytest.raises(UserError, match="--max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(UserError, match="--request_timeout"):
        RetryPolicy(attempt_timeout_s=0)
    with pytest.raises(UserError, match="--sample_deadline"):
        RetryPolicy(sample_deadline_s=-5)


failures = st.sampled_from([AttemptError("http", "x", status_code=s) for s in (400, 429, 500, 503, 529)]
                           + [AttemptError(k, "x") for k in ("timeout", "connection", "malformed")])


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(failures, max_size=12), ends_ok=st.booleans(), max_retries=st.integers(0, 8),
       deadline=st.floats(5.0, 400.0))
def test_policy_invariants(steps, ends_ok, max_retries, deadline):
    policy = RetryPolicy(max_retries=max_retries, sample_deadline_s=deadline, attempt_timeout_s=3.0,
                         backoff_base_s=0.5, backoff_max_s=30.0, retry_after_cap_s=20.0)
    plan = [*steps, "answer"] if ends_ok else [*steps, AttemptError("http", "x", status_code=503)]
    plan += [AttemptError("http", "x", status_code=503)] * 60
    outcome, clock = go(script(*plan), policy)
    assert 1 <= outcome.attempts <= max_retries + 1
    assert sum(s for s in clock.sleeps) < deadline
    first_final = next((i for i, s in enumerate(plan) if isinstance(s, AttemptError) and not s.retryable), None)
    if outcome.value is not None:
        assert outcome.attempts == len(steps) + 1 and ends_ok
        assert first_final is None or first_final >= len(steps)
    elif first_final is not None and first_final < outcome.attempts:
        assert outcome.attempts == first_final + 1 and outcome.error.retryable is False


def test_limiter_caps_in_flight_and_halves_on_throttle():
    clock = FakeClock()
    limiter = AdaptiveLimiter(8, clock=clock, cooldown_s=1.0)
    peak = 0

    async def worker(n: int) -> None:
        nonlocal peak
        await limiter.acquire()
        peak = max(peak, limiter.in_flight)
        await asyncio.sleep(0)
        await limiter.release()

    async def main() -> None:
        await asyncio.gather(*(worker(i) for i in range(40)))

    asyncio.run(main())
    assert peak == 8 and limiter.in_flight == 0
    limiter.on_throttle(None)
    limiter.on_throttle(None)  # same burst: counts once
    assert limiter.limit == 4
    clock.advance(1.5)
    limiter.on_throttle(None)
    assert limiter.limit == 2
    for _ in range(3):
        limiter.on_throttle(None)
        clock.advance(2)
    assert limiter.limit == 1  # never below the minimum


def test_limiter_grows_back_one_step_per_full_round_of_successes():
    limiter = AdaptiveLimiter(6, clock=FakeClock())
    limiter.limit = 2
    for _ in range(2):
        limiter.on_success()
    assert limiter.limit == 3
    for _ in range(3):
        limiter.on_success()
    assert limiter.limit == 4
    for _ in range(100):
        limiter.on_success()
    assert limiter.limit == 6  # capped at the maximum


def test_limiter_pauses_new_attempts_for_retry_after():
    clock = FakeClock()
    limiter = AdaptiveLimiter(4, clock=clock)
    limiter.on_throttle(12.0)

    async def main() -> float:
        start = clock.monotonic()
        await limiter.acquire()
        return clock.monotonic() - start

    assert asyncio.run(main()) == pytest.approx(12.0)


def test_limiter_needs_at_least_one_slot():
    with pytest.raises(UserError, match="--batch_size"):
        AdaptiveLimiter(0)
