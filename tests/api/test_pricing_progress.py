"""Cost from usage and price tables; the progress line."""

from __future__ import annotations

import io
import json

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models.api.engine import ApiStats
from medvision_bm.models.api.pricing import Price, UsageTotals, cost_usd, load_price_table, resolve_price
from medvision_bm.models.api.progress import ProgressLine, format_progress
from medvision_bm.models.base import GenResult, RequestError, Usage


def test_totals_and_cost():
    results = [GenResult("a", "x", usage=Usage(1000, 200, 50), finish_reason="stop"),
               GenResult("b", "y", usage=Usage(3000, 800, None), finish_reason="length"),
               GenResult("c", None, RequestError("http", "down", 503, True)),
               GenResult("d", "z", usage=Usage(None, None, None))]
    totals = UsageTotals.of(results)
    assert (totals.samples, totals.samples_with_usage, totals.failures, totals.length_cuts) == (4, 2, 1, 1)
    assert (totals.input_tokens, totals.output_tokens, totals.reasoning_tokens) == (4000, 1000, 50)
    assert cost_usd(totals, Price(2.5, 10.0)) == pytest.approx((4000 * 2.5 + 1000 * 10.0) / 1e6)
    assert json.loads(json.dumps(totals.to_json()))["output_tokens"] == 1000


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
    with pytest.raises(UserError, match="cannot read it"):
        load_price_table(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match="must not be negative"):
        Price(-1, 2)


def test_progress_line_content():
    stats = ApiStats(total=200, done=50, ok=48, failures=2, retries=7, throttled=3, in_flight=16, concurrency=16,
                     max_concurrency=32, length_cuts=1)
    line = format_progress(stats, elapsed_s=10.0)
    assert line == "50/200 | 5.0/s | ETA 30s | in flight 16/16 | retries 7 | failed 2 | 429s 3 | cut 1"
    assert "ETA 0s" in format_progress(ApiStats(total=3, done=3), 1.0)
    assert "ETA ?" in format_progress(ApiStats(total=3, done=0), 1.0)
    assert "ETA 1h23m" in format_progress(ApiStats(total=5001, done=1), 1.0)


def test_stats_read_as_a_record_or_a_mapping():
    stats = ApiStats(done=3, retries=2, in_flight=1, failed_attempts={"http503": 2})
    assert stats["retries"] == 2 and "in_flight" in stats and "nope" not in stats
    assert {k: stats[k] for k in ("retries", "in_flight") if k in stats} == {"retries": 2, "in_flight": 1}
    with pytest.raises(KeyError):
        stats["nope"]
    assert stats.to_json()["failed_attempts"] == {"http503": 2}


def test_progress_line_prints_plain_lines_off_a_terminal():
    stats = ApiStats(total=10, done=0)
    stream = io.StringIO()
    with ProgressLine(lambda: stats, label="[gpt-5]", stream=stream, interval_s=0.02):
        stats.done = 4
        import time

        time.sleep(0.1)
        stats.done = 10
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("[gpt-5] ") for line in lines)
    assert lines[-1].startswith("[gpt-5] 10/10") and "\r" not in stream.getvalue()
