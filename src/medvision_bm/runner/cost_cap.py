"""`run --max_cost USD`: the claims of an API run held to a budget. Before each chunk is claimed, what the run spent
(each landed answer at its provider's usage and the run's price) plus what it has in flight (each claimed sample not
yet answered at the dearest answer so far, or before any lands at the max tokens and a generous input) must leave
room for the samples it takes; once it does not, no new sample is claimed (before any answer lands, one sample
is let through where the bound leaves no room, to learn the real cost). The samples left are not asked (the
store never holds an answer for them), so the run ends incomplete and a rerun, with a larger cap, goes on."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol

from medvision_bm.errors import UserError
from medvision_bm.models.api import MODEL_OPTION
from medvision_bm.models.api.pricing import Price, price_entry
from medvision_bm.models.base import GenResult
from medvision_bm.runner.config import RunConfig

#: Input tokens assumed per sample before any answer has landed (a 2048 px square image at OpenAI's or Anthropic's
#: rule is under 1,600 tokens, the prompts a few hundred).
FIRST_INPUT_GUESS = 2000


class CostCap:
    """A run's budget: spent, in flight, and how many samples it may still start."""

    def __init__(self, cap_usd: float, price: Price, max_new_tokens: int) -> None:
        self.cap = cap_usd
        self.price = price
        self.per_sample = price.cost_usd(FIRST_INPUT_GUESS, max_new_tokens)
        self.spent = 0.0
        self.in_flight = 0
        self.dearest = 0.0  # the dearest answer so far
        self.reached = False
        self._lock = threading.Lock()

    def landed(self, result: GenResult) -> None:
        """Count an answer (or failed request) of a sample this run claimed."""
        u = result.usage
        cost = self.price.cost_usd(u.input_tokens or 0, u.output_tokens or 0)
        with self._lock:
            self.spent += cost
            self.in_flight = max(0, self.in_flight - 1)
            self.dearest = max(self.dearest, cost)
            if self.dearest > 0:
                self.per_sample = self.dearest

    def allow(self, n: int) -> int:
        """How many of ``n`` samples may be claimed now (0 once the cap is reached)."""
        with self._lock:
            room = self.cap - self.spent - self.in_flight * self.per_sample
            k = min(n, int(room // self.per_sample)) if self.per_sample > 0 else n
            if k <= 0 and self.dearest == 0 and self.in_flight == 0 and self.spent < self.cap:
                k = min(n, 1)  # nothing landed yet and the bound leaves no room: one sample tells the real cost
            if k <= 0:
                self.reached = True
                return 0
            self.in_flight += k
            return k


    def unclaimed(self, n: int) -> None:
        """Give back ``n`` of the samples :meth:`allow` let through that the claims did not give."""
        with self._lock:
            self.in_flight -= n


class SampleQueue(Protocol):
    """What a run claims its samples from, a chunk at a time (``store.claims.ClaimQueue`` or one held to a budget)."""

    @property
    def batched(self) -> set[str]: ...

    def __len__(self) -> int: ...

    def next(self, n: int) -> tuple[list[str], list[str], bool]: ...


class SampleClaims(Protocol):
    """A store's claims as a run uses them (``store.claims.Claims`` or :class:`CappedClaims`)."""

    @property
    def taken_over(self) -> int: ...

    def queue(self, keys: Iterable[str]) -> SampleQueue: ...

    def wait(self) -> None: ...

    def close(self) -> None: ...


class _CappedQueue:
    def __init__(self, queue: SampleQueue, cap: CostCap) -> None:
        self.queue, self.cap = queue, cap

    def __len__(self) -> int:
        return len(self.queue)

    @property
    def batched(self) -> set[str]:
        return set(self.queue.batched)

    def next(self, n: int) -> tuple[list[str], list[str], bool]:
        k = self.cap.allow(n)
        if k == 0:
            return [], [], False
        mine, elsewhere, wait = self.queue.next(k)
        self.cap.unclaimed(k - len(mine))
        return mine, elsewhere, wait


class CappedClaims:
    """A store's claims (``store.claims.Claims``) whose queues claim only what the budget allows."""

    def __init__(self, claims: SampleClaims, cap: CostCap) -> None:
        self.claims, self.cap = claims, cap

    def queue(self, keys: Iterable[str]) -> _CappedQueue:
        return _CappedQueue(self.claims.queue(keys), self.cap)

    @property
    def taken_over(self) -> int:
        return int(self.claims.taken_over)

    def wait(self) -> None:
        self.claims.wait()

    def close(self) -> None:
        self.claims.close()


def run_price(cfg: RunConfig) -> tuple[str, Price | None]:
    """The model code and the price this run's requests are billed at: the batch price with --batch where one is
    known (else the live one), as --estimate prices them."""
    f = cfg.model_flags
    code = f.get(MODEL_OPTION.get(cfg.record.backend, ""))
    entry = price_entry(str(code) if code else None, f.get("price_in"), f.get("price_out"), f.get("price_table"))
    if entry is None:
        return str(code or cfg.record.name), None
    return entry.code, (entry.batch or entry.live) if cfg.batch else entry.live


def cost_cap_of(cfg: RunConfig) -> CostCap | None:
    """The run's --max_cost budget, priced as --estimate prices it (a UserError when no price is known)."""
    if cfg.max_cost is None:
        return None
    code, price = run_price(cfg)
    if price is None:
        raise UserError(f"--max_cost needs a price: none is known for {code}; give --price_in "
                        "and --price_out (USD per 1M tokens) or --price_table")
    return CostCap(cfg.max_cost, price, cfg.gen.max_new_tokens)
