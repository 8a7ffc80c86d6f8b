"""Cost of a run from token usage: a price per 1M input and output tokens, given on the command line or looked up
in a small price table (YAML or JSON: model code -> ``{price_in: X, price_out: Y}`` or ``[X, Y]``).

Output tokens include reasoning tokens for every provider (our Usage normalisation), which is how all of them
bill thinking.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from medvision_bm.errors import UserError
from medvision_bm.models.base import GenResult, Usage


@dataclass(frozen=True)
class Price:
    """US dollars per 1M tokens."""

    input_per_m: float
    output_per_m: float

    def __post_init__(self) -> None:
        if self.input_per_m < 0 or self.output_per_m < 0:
            raise UserError(f"prices must not be negative (got in={self.input_per_m}, out={self.output_per_m})")


@dataclass
class UsageTotals:
    """Token totals over a set of results, with how many results reported usage at all."""

    samples: int = 0
    samples_with_usage: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    length_cuts: int = 0
    failures: int = 0

    def add_usage(self, usage: Usage) -> None:
        if usage.input_tokens is not None or usage.output_tokens is not None:
            self.samples_with_usage += 1
        self.input_tokens += usage.input_tokens or 0
        self.output_tokens += usage.output_tokens or 0
        self.reasoning_tokens += usage.reasoning_tokens or 0

    def add(self, result: GenResult) -> None:
        self.samples += 1
        if not result.ok:
            self.failures += 1
            return
        if result.finish_reason == "length":
            self.length_cuts += 1
        self.add_usage(result.usage)

    @classmethod
    def of(cls, results: Iterable[GenResult]) -> UsageTotals:
        totals = cls()
        for r in results:
            totals.add(r)
        return totals

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def cost_usd(totals: UsageTotals, price: Price) -> float:
    return (totals.input_tokens * price.input_per_m + totals.output_tokens * price.output_per_m) / 1_000_000


def load_price_table(path: str | Path) -> dict[str, Price]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--price_table {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:
        raise UserError(f"--price_table {path}: not valid {path.suffix.lstrip('.') or 'JSON'} ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"--price_table {path}: expected a mapping of model code -> prices")
    table: dict[str, Price] = {}
    for model, entry in data.items():
        table[str(model)] = _price_entry(path, str(model), entry)
    return table


def _price_entry(path: Path, model: str, entry: Any) -> Price:
    try:
        if isinstance(entry, dict):
            return Price(float(entry["price_in"]), float(entry["price_out"]))
        if isinstance(entry, list | tuple) and len(entry) == 2:
            return Price(float(entry[0]), float(entry[1]))
    except (KeyError, TypeError, ValueError):
        pass
    raise UserError(f"--price_table {path}: entry {model!r} must be {{price_in: X, price_out: Y}} or [X, Y]")


def resolve_price(model_code: str | None, price_in: float | None = None, price_out: float | None = None,
                  table_path: str | Path | None = None) -> Price | None:
    """Explicit prices win; else the table's entry for the model code (exact, then without a vendor/ prefix)."""
    if (price_in is None) != (price_out is None):
        raise UserError("give both --price_in and --price_out (USD per 1M tokens), or neither")
    if price_in is not None and price_out is not None:
        return Price(float(price_in), float(price_out))
    if table_path is None or not model_code:
        return None
    table = load_price_table(table_path)
    for code in (model_code, model_code.split("/", 1)[-1]):
        if code in table:
            return table[code]
    return None
