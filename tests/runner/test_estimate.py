"""`run --estimate`: the cost of a run before any request, from the images as sent and the providers' published
image rules, checked against what a live run of the same flags sends to a local OpenAI-wire server."""

from __future__ import annotations

import base64
import io
import json
import math
import re
from pathlib import Path

import pytest

from fakes.provider_server import FakeProviderServer
from medvision_bm.models.api.image_tokens import AnthropicArea, GeminiTiles, OpenAITiles, image_tokens
from medvision_bm.models.api.pricing import price_entry
from mvtest_support import phantom_list, run_cli

pytestmark = pytest.mark.slow
PLANTED = "sk-planted-estimate-0123456789abcdefghij"


@pytest.mark.parametrize(("rule", "size", "tokens"), [
    (OpenAITiles("4o", base=85, per_tile=170), (1024, 1024), 765),  # OpenAI's worked examples (GPT-4o figures)
    (OpenAITiles("4o", base=85, per_tile=170), (2048, 4096), 1105),
    (OpenAITiles("gpt-5"), (512, 512), 210),
    (AnthropicArea("a"), (1000, 1000), 1334),  # Anthropic's table: 1000x1000 about 1,334 tokens
    (AnthropicArea("a"), (1092, 1092), 1590),  # and 1092x1092 about 1,590
    (GeminiTiles("g"), (384, 384), 258),
    (GeminiTiles("g"), (385, 200), 258 * 2),
])
def test_each_providers_image_rule_gives_its_documented_figures(rule, size, tokens) -> None:
    assert rule.tokens(*size) == pytest.approx(tokens, abs=1)


def test_a_price_comes_from_the_flags_then_a_users_table_then_the_shipped_one(tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"gpt-5.5": {"price_in": 1.0, "price_out": 2.0}}))
    assert price_entry("gpt-5.5", 3.0, 4.0, table).live.input_per_m == 3.0
    assert price_entry("gpt-5.5", None, None, table).live.output_per_m == 2.0
    shipped = price_entry("openai/gpt-5.5")
    assert shipped.live.input_per_m == 5.0 and shipped.batch.input_per_m == 2.5 and shipped.date
    assert price_entry("no-such-model") is None


def _sent_input_tokens(fake: FakeProviderServer) -> int:
    """What the server was sent, counted as the estimate counts: text at 4 characters a token, each image decoded
    and priced by OpenAI's rule."""
    from PIL import Image

    total = 0
    for r in fake.received:
        for m in r.body.get("messages", []):
            content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
            for part in content:
                if part["type"] == "text":
                    total += math.ceil(len(part["text"]) / 4)
                elif part["type"] == "image_url":
                    img = Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1])))
                    total += image_tokens("openai", *img.size)
    return total


def _table_total(out: str, column: int) -> int:
    rows = [ln.split() for ln in out.splitlines() if re.match(r"Phantom\S+\s+\d", ln)]
    return sum(int(r[column].replace(",", "")) for r in rows)


def test_the_estimate_counts_what_a_live_run_sends_within_five_percent_and_then_leaves_it_out(
        tmp_path: Path, phantom_dir: Path, phantom_lists: Path) -> None:
    task, _ = next(iter(phantom_list(phantom_lists, "detect").items()))
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps({task: 4}))
    with FakeProviderServer(answer="<answer>[1, 2, 3, 4]</answer>") as fake:
        args = ["run", "--model", "openai", "--base_url", f"{fake.url}/v1", "--data_dir", str(phantom_dir),
                "--tasks_list_json_path", str(tl), "--results_dir", str(tmp_path / "res"), "--skip_update_status",
                "--skip_env_setup", "--sample_limit", "4", "--no_progress"]
        env = {"OPENAI_API_KEY": PLANTED}
        est = run_cli(*args, "--estimate", env=env)
        assert est.returncode == 0, est.stderr[-2000:]
        assert fake.received == [] and not (tmp_path / "res").exists(), "an estimate asks and writes nothing"
        assert "4 sample(s) to ask" in est.stdout and "live: " in est.stdout and "batch: " in est.stdout
        live = run_cli(*args, env=env)
        assert live.returncode == 0, live.stderr[-2000:]
        sent = _sent_input_tokens(fake)
        assert len(fake.received) == 4
    estimated = _table_total(est.stdout, 2)
    assert abs(estimated - sent) <= 0.05 * sent, (estimated, sent)
    again = run_cli(*args, "--estimate", env=env)
    assert again.returncode == 0 and "0 sample(s) to ask" in again.stdout, again.stdout
    assert PLANTED not in est.stdout + est.stderr + again.stdout


def test_a_model_without_a_known_price_is_estimated_in_tokens_with_a_note(
        tmp_path: Path, phantom_dir: Path, phantom_lists: Path) -> None:
    task, _ = next(iter(phantom_list(phantom_lists, "TL").items()))
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps({task: 2}))
    res = run_cli("run", "--model", "kimi", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
                  "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--sample_limit", "2", "--estimate",
                  env={"MOONSHOT_API_KEY": PLANTED})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "no price known for kimi-k2.6; cost not estimated" in res.stdout
    assert "$" not in res.stdout


def test_max_cost_stops_asking_at_the_cap_and_a_rerun_with_more_goes_on(
        tmp_path: Path, phantom_dir: Path, phantom_lists: Path) -> None:
    """Each stub answer bills 11 input and 7 output tokens; at 1e6/18 USD per 1M tokens each costs $1, so a $5 cap
    lets 5 of the task's samples be asked (one request in flight at a time), then the run stops incomplete."""
    task, n = next(iter(phantom_list(phantom_lists, "detect").items()))
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps({task: n}))
    price = str(1e6 / 18)
    with FakeProviderServer(answer="<answer>[1, 2, 3, 4]</answer>") as fake:
        args = ["run", "--model", "openai", "--base_url", f"{fake.url}/v1", "--data_dir", str(phantom_dir),
                "--tasks_list_json_path", str(tl), "--results_dir", str(tmp_path / "res"), "--skip_update_status",
                "--skip_env_setup", "--no_progress", "--batch_size", "1", "--max_new_tokens", "64",
                "--price_in", price, "--price_out", price]
        env = {"OPENAI_API_KEY": PLANTED}
        capped = run_cli(*args, "--max_cost", "5", env=env)
        asked = len(fake.received)
        assert capped.returncode == 3, capped.stderr[-2000:]
        assert "--max_cost $5.00 reached (this run spent $5.00)" in capped.stderr
        assert asked == 5 < n
        results = json.loads(next((tmp_path / "res").glob("*/*/*/results.json")).read_text())
        assert results["counts"]["answered"] == 5 and results["counts"]["pending"] == n - 5
        assert results["cost_usd"] == pytest.approx(5.0)
        rest = run_cli(*args, "--max_cost", "1000", env=env)
        assert rest.returncode == 0, rest.stderr[-2000:]
        assert len(fake.received) == n, "the rerun asks only what the cap left"
    bad = run_cli("run", "--model", "kimi", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
                  "--results_dir", str(tmp_path / "r2"), "--skip_env_setup", "--max_cost", "5",
                  env={"MOONSHOT_API_KEY": PLANTED})
    assert bad.returncode == 2 and "--max_cost needs a price: none is known for kimi-k2.6" in bad.stderr


def test_submit_estimate_prices_each_api_models_runs_and_names_the_others(tmp_path: Path, phantom_dir: Path,
                                                                         phantom_lists: Path) -> None:
    """`submit --estimate`: the same figures `run --estimate` gives for each API model and family of the plan, a
    total per model, the other records named; nothing written, nothing submitted, no key printed."""
    common = ["--data_dir", str(phantom_dir), "--tasks_list_dir", str(phantom_lists), "--results_root",
              str(tmp_path / "res"), "--status_dir", str(tmp_path / "st"), "--submit_dir", str(tmp_path / "sub"),
              "--python", "python3"]
    env = {"OPENAI_API_KEY": PLANTED}
    res = run_cli("submit", "--models", "openai,oracle", "--families", "TL", "--estimate", *common,
                  "--", "--sample_limit", "3", env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "== oracle (TL): a baseline record; its cost is compute time, not tokens" in res.stdout
    one = run_cli("run", "--model", "openai", "--data_dir", str(phantom_dir), "--tasks_list_json_path",
                  str(phantom_lists / "tasks_MedVision-Phantom-TL.json"), "--results_dir", str(tmp_path / "r1"),
                  "--skip_env_setup", "--sample_limit", "3", "--estimate", env=env)
    assert one.returncode == 0, one.stderr[-2000:]
    section = res.stdout.split("== openai (TL)\n", 1)[1].split("== ", 1)[0].split("total openai", 1)[0]
    assert section.strip() == one.stdout.strip()  # the run's own estimate, task by task
    live = re.search(r"live: at most \$([\d,.]+)", one.stdout)
    total = re.search(r"total openai: at most \$([\d,.]+) live, \$([\d,.]+) batched", res.stdout)
    assert live and total and total.group(1) == live.group(1), res.stdout
    assert not (tmp_path / "sub").exists() and not (tmp_path / "res").exists()
    assert PLANTED not in res.stdout + res.stderr
