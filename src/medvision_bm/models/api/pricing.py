"""Prices of a model: USD per 1M input and output tokens, given on the command line or looked up in a small price
table (YAML or JSON: model code -> ``{price_in: X, price_out: Y}`` or ``[X, Y]``). Token totals are the runner's
(``score.follow.Followed.usage``); :meth:`Price.cost_usd` turns them into dollars.

Output tokens include reasoning tokens for every provider (our Usage normalisation), which is how all of them
bill thinking.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from medvision_bm import limits
from medvision_bm.errors import UserError


@dataclass(frozen=True)
class Price:
    """US dollars per 1M tokens."""

    input_per_m: float
    output_per_m: float

    def __post_init__(self) -> None:
        import math

        if not all(math.isfinite(v) and v >= 0 for v in (self.input_per_m, self.output_per_m)):
            raise UserError(f"prices must not be negative and must be finite, in USD per 1M tokens "
                            f"(got in={self.input_per_m}, out={self.output_per_m})")

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of a task's token totals (e.g. the runner's usage totals, which count results once each)."""
        return (input_tokens * self.input_per_m + output_tokens * self.output_per_m) / 1_000_000


def load_price_table(path: str | Path) -> dict[str, Price]:
    path = Path(path)
    try:
        text = limits.read_bytes(path, "--price_table", limits.MAX_JSON_FILE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--price_table {path}: not UTF-8 text (binary data?); give a YAML or JSON price table") from None
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


def _price_entry(path: Path, model: str, entry: object) -> Price:
    try:
        if isinstance(entry, dict):
            return Price(float(entry["price_in"]), float(entry["price_out"]))
        if isinstance(entry, list | tuple) and len(entry) == 2:
            return Price(float(entry[0]), float(entry[1]))
    except (KeyError, TypeError, ValueError, OverflowError):  # OverflowError: an integer of 400 digits
        pass
    except UserError as exc:
        raise UserError(f"--price_table {path}: entry {model!r}: {exc}") from None
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


@dataclass(frozen=True)
class PriceEntry:
    """A model code's prices live and through its provider's batch interface (None: no batch price known), with the
    date the figures were read and where from."""

    code: str
    live: Price
    batch: Price | None
    date: str | None
    source: str | None


def packaged_prices() -> dict[str, PriceEntry]:
    """The price table shipped with the suite (``models/api/prices.json``)."""
    from importlib import resources

    data = json.loads(resources.files("medvision_bm.models.api").joinpath("prices.json").read_text("utf-8"))
    out: dict[str, PriceEntry] = {}
    for code, e in data["models"].items():
        batch = Price(e["batch_input"], e["batch_output"]) if e.get("batch_input") is not None else None
        out[code] = PriceEntry(code, Price(e["input"], e["output"]), batch, e.get("date"), e.get("source"))
    return out


def price_entry(model_code: str | None, price_in: float | None = None, price_out: float | None = None,
                table_path: str | Path | None = None) -> PriceEntry | None:
    """The prices an estimate uses for a model code: the flags, else the user's table, else the packaged one (exact
    code, then without a vendor/ prefix); None when no price is known (nothing is estimated then)."""
    explicit = resolve_price(model_code, price_in, price_out, table_path)
    if explicit is not None:
        where = "--price_in/--price_out" if price_in is not None else f"--price_table {table_path}"
        return PriceEntry(model_code or "", explicit, None, None, where)
    if not model_code:
        return None
    table = packaged_prices()
    for code in (model_code, model_code.split("/", 1)[-1]):
        if code in table:
            return table[code]
    return None
