"""Prices (flags and tables) and cost; the stats the runner's progress bar reads."""

from __future__ import annotations

import json

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models.api.engine import ApiStats
from medvision_bm.models.api.pricing import Price, load_price_table, resolve_price


def test_cost_of_token_totals():
    assert Price(2.5, 10.0).cost_usd(4000, 1000) == pytest.approx((4000 * 2.5 + 1000 * 10.0) / 1e6)
    assert Price(0, 0).cost_usd(10**9, 10**9) == 0.0


def test_price_table_files(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps({"gpt-5": {"price_in": 1.25, "price_out": 10},
                                                 "gemini-2.5-pro": [1.25, 10]}))
    table = load_price_table(tmp_path / "p.json")
    assert table["gemini-2.5-pro"] == Price(1.25, 10.0)
    assert resolve_price("google/gemini-2.5-pro", table_path=tmp_path / "p.json") == Price(1.25, 10.0)
    assert resolve_price("gpt-5") is None
    (tmp_path / "bad.yaml").write_text("gpt-5: {price_in: 1}\n")
    with pytest.raises(UserError, match="entry 'gpt-5' must be"):
        load_price_table(tmp_path / "bad.yaml")
    (tmp_path / "broken.json").write_text("{nope")
    with pytest.raises(UserError, match="not valid json"):
        load_price_table(tmp_path / "broken.json")
    with pytest.raises(UserError, match=r"missing\.yaml does not exist"):
        load_price_table(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match="must not be negative"):
        Price(-1, 2)


def test_stats_read_as_a_record_or_a_mapping():
    """runner.loop.Progress reads ``s[k] for k in ("retries", "in_flight") if k in s``."""
    stats = ApiStats(done=3, retries=2, in_flight=1, failed_attempts={"http503": 2})
    assert stats["retries"] == 2 and "in_flight" in stats and "nope" not in stats
    assert {k: stats[k] for k in ("retries", "in_flight") if k in stats} == {"retries": 2, "in_flight": 1}
    with pytest.raises(KeyError):
        stats["nope"]
    assert stats.to_json()["failed_attempts"] == {"http503": 2}
