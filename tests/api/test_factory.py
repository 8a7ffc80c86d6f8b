"""The factory's contract: option names, defaults, and a one-line UserError for every bad input."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from fakes.samples import KEYS
from medvision_bm.errors import UserError
from medvision_bm.models.api import API_KINDS, MODEL_OPTION, PROVIDERS, build_api_backend
from medvision_bm.models.api.endpoints import EndpointPool, normalize_base_url, split_urls
from medvision_bm.models.base import GenSettings


def build(kind: str, **options):
    return build_api_backend(kind, options, environ=KEYS)


@pytest.mark.parametrize("kind,options,message", [
    ("nope", {}, "unknown API backend 'nope'"),
    ("openai", {}, "needs --openai_model_code"),
    ("openai_compatible", {"model_name": "m"}, "needs --base_url"),
    ("openai_compatible", {"base_url": ["http://h:1"]}, "needs --model_name"),
    ("openai", {"openai_model_code": "gpt-5", "api_provider": "anthropic"}, "--api_provider 'anthropic' is not"),
    ("anthropic", {"anthropic_model_code": "claude-x", "api_provider": "openrouter"}, "name the vendor"),
    ("openai", {"openai_model_code": "gpt-5", "base_url": ["http://a:1", "http://b:2"]}, "takes one --base_url"),
    ("openai", {"openai_model_code": "gpt-5", "base_url": ["ftp://x"]}, "is not an http\\(s\\) URL"),
    ("gemini", {"google_model_code": "google/gemini-2.5-pro", "api_provider": "openrouter",
                "use_tool": True}, "--use_tool works with --api_provider google only"),
    ("gemini", {"google_model_code": "gemini-2.5-pro", "thinking_level": "high"}, "Gemini 3 setting"),
    ("gemini", {"google_model_code": "gemini-3.1-pro-preview", "thinkingBudget": 1024},
     "--thinkingBudget is a Gemini 2.5 setting; gemini-3.1-pro-preview takes --thinking_level"),
    ("gemini", {"google_model_code": "google/gemini-3.1-pro-preview", "api_provider": "openrouter",
                "thinkingBudget": 1024}, "--thinkingBudget is a Gemini 2.5 setting"),
    ("gemini", {"google_model_code": "gemini-2.5-flash", "thinkingBudget": -2}, "--thinkingBudget -2"),
    ("gemini", {"google_model_code": "gemini-3-pro-preview", "thinking_level": "max"}, "--thinking_level 'max'"),
    ("gemini", {"google_model_code": "gemini-3-pro-preview", "media_resolution": "ultra"}, "--media_resolution"),
    ("gemini", {"google_model_code": "gemini-2.5-flash", "use_tool": True, "json_output": True}, "cannot be combined"),
    ("anthropic", {"anthropic_model_code": "claude-x", "thinking": True, "thinking_budget": 100}, "at least 1024"),
    ("openai", {"openai_model_code": "gpt-5", "gen": GenSettings(top_k=5)}, "--top_k is not supported by openai"),
    ("kimi", {"kimi_model_code": "kimi-k2.5", "reasoning_effort": "high"}, "--reasoning_effort is not supported"),
    ("openai", {"openai_model_code": "gpt-5", "image_format": "webp"}, "--image_format 'webp'"),
    ("openai", {"openai_model_code": "gpt-5", "max_retries": -1}, "--max_retries"),
    ("openai", {"openai_model_code": "gpt-5", "batch_size": 0}, "--batch_size"),
    ("openai", {"openai_model_code": "gpt-5", "price_in": 1.0}, "both --price_in and --price_out"),
    # lmms-eval model_args arrive as text
    ("openai", {"openai_model_code": "gpt-5", "max_retries": "three"}, "--max_retries 'three' is not a number"),
    ("openai", {"openai_model_code": "gpt-5", "request_timeout": "2m"}, "--request_timeout '2m' is not a number"),
    ("openai", {"openai_model_code": "gpt-5", "price_in": "$2", "price_out": 8}, "--price_in '[$]2' is not a number"),
    ("anthropic", {"anthropic_model_code": "claude-x", "thinking_budget": "lots"}, "--thinking_budget 'lots'"),
    ("gemini", {"google_model_code": "google/gemini-3-pro-preview", "api_provider": "openrouter",
                "media_resolution": "low"}, "--media_resolution works with --api_provider google only"),
])
def test_bad_options_are_user_errors(kind, options, message):
    with pytest.raises(UserError, match=message) as info:
        build(kind, **options)
    assert "\n" not in str(info.value)


def test_options_use_the_runner_flag_names_and_defaults():
    b = build("openai", openai_model_code="gpt-5", reasoning_effort=None, thinking=None)
    assert (b.policy.max_retries, b.policy.attempt_timeout_s, b.policy.sample_deadline_s) == (6, 120.0, 900.0)
    assert b.settings == {"kind": "openai", "provider": "openai", "model": "gpt-5", "image_format": "png",
                          "base_urls": ["https://api.openai.com/v1"], "reasoning_effort": None, "thinking": None,
                          "thinking_level": None}
    b = build("openai_compatible", model_name="m", base_url=["http://h:1/v1,http://h:2"], batch_size=3,
              max_retries=2, request_timeout=9, sample_deadline=99, image_format="JPG")
    assert b.settings["base_urls"] == ["http://h:1/v1", "http://h:2/v1"]
    assert (b.policy.max_retries, b.policy.attempt_timeout_s, b.policy.sample_deadline_s) == (2, 9.0, 99.0)
    assert b.stats().max_concurrency == 3 and b.settings["image_format"] == "jpeg"
    b = build("kimi", kimi_model_code="moonshotai/kimi-k2.5", api_provider="openrouter")
    assert b.settings["base_urls"] == ["https://openrouter.ai/api/v1"]
    b = build("gemini", google_model_code="gemini-3-pro-preview")
    assert b.settings["media_resolution"] == "high" and b.settings["base_urls"] == []


def test_every_api_record_builds_from_its_flag_defaults():
    """The runner passes every record flag with its default (media_resolution=high, thinking_budget=None...):
    each API record must build with them, for each provider it offers."""
    from medvision_bm.models.registry import REGISTRY
    from medvision_bm.runner.args import build_parser
    from medvision_bm.runner.backends import api_options

    records = [r for r in REGISTRY.values() if r.is_api and r.backend != "openai_compatible"]
    assert {r.backend for r in records} == set(API_KINDS) - {"openai_compatible"}
    built = 0
    for record in records:
        choice = next((f.choices for f in record.flags if f.name == "--api_provider"), None)
        for provider in choice or (None,):
            argv = ["--tasks_list_json_path", "tasks.json"]
            if provider == "openrouter":
                argv += ["--api_provider", provider, f"--{MODEL_OPTION[record.backend]}", "vendor/model"]
            ns = build_parser(record, "x").parse_args(argv)
            flags = {f.dest: getattr(ns, f.dest, f.default) for f in record.flags}
            cfg = SimpleNamespace(model_flags=flags, gen=record.gen, batch_size=record.batch_size,
                                  model_name=record.name, record=record)
            b = build_api_backend(record.backend, api_options(cfg), environ=KEYS)
            assert b.settings["provider"] == (provider or PROVIDERS[record.backend][0])
            b.close()
            built += 1
    assert built == 11  # openai, openai_pro, claude, gemini, kimi: own API and OpenRouter; minimax: own API


def test_every_kind_builds_with_its_defaults():
    models = {"openai_compatible": {"model_name": "m", "base_url": ["http://127.0.0.1:9"]},
              "openai": {"openai_model_code": "gpt-5"}, "anthropic": {"anthropic_model_code": "claude-x"},
              "gemini": {"google_model_code": "gemini-2.5-pro"}, "kimi": {"kimi_model_code": "kimi-k2.5"},
              "minimax": {"minimax_model_code": "MiniMax-M3"}}
    assert set(models) == set(API_KINDS)
    for kind, opts in models.items():
        b = build(kind, **opts)
        assert b.name.startswith(kind.replace("-", "_"))
        b.close()


def test_prices_come_from_flags_or_the_table(tmp_path):
    table = tmp_path / "prices.yaml"
    table.write_text("gpt-5: {price_in: 1.25, price_out: 10}\nclaude-x: [3, 15]\n")
    assert build("openai", openai_model_code="gpt-5", price_table=str(table)).price.output_per_m == 10
    assert build("openai", openai_model_code="openai/gpt-5", api_provider="openrouter",
                 price_table=str(table)).price.input_per_m == 1.25
    assert build("openai", openai_model_code="gpt-5", price_in=2, price_out=8, price_table=str(table)).price.input_per_m == 2
    assert build("openai", openai_model_code="gpt-4o", price_table=str(table)).price is None


def test_base_url_forms():
    assert normalize_base_url("http://h:8000") == "http://h:8000/v1"
    assert normalize_base_url(" http://h:8000/ ") == "http://h:8000/v1"
    assert normalize_base_url("https://openrouter.ai/api/v1/") == "https://openrouter.ai/api/v1"
    assert split_urls(["http://a:1,http://b:2", "http://a:1/v1", " "]) == ["http://a:1/v1", "http://b:2/v1"]
    assert split_urls("http://a:1", openai_style=False) == ["http://a:1"]


def test_endpoint_pool_takes_a_failing_server_out_and_probes_it_later():
    from fakes.clock import FakeClock
    from medvision_bm.models.api.retry import AttemptError

    clock = FakeClock()
    pool = EndpointPool(["http://a/v1", "http://b/v1"], clock=clock, max_failures=2, cooldown_s=5)
    a, b = pool.endpoints
    down = AttemptError("connection", "refused")
    for _ in range(2):
        pool.start(a)
        pool.finish(a, down)
    assert pool.live_count() == 1 and all(pool.pick() is b for _ in range(5))
    pool.start(b)
    pool.finish(b, AttemptError("http", "bad request", status_code=400))  # answers: alive
    assert pool.live_count() == 1
    clock.advance(5.1)
    assert pool.live_count() == 2
    pool.start(a)  # the probe
    assert pool.pick() is b  # one probe at a time
    pool.finish(a, down)  # a failed probe sends it out again, for twice as long
    clock.advance(6)
    assert pool.live_count() == 1
    clock.advance(5)
    pool.start(a)
    pool.finish(a, None)
    assert pool.live_count() == 2 and a.times_out == 0
    pool.start(a)
    pool.finish(a, AttemptError("http", "slow", status_code=429))
    assert pool.live_count() == 2  # throttling is not a dead server


def test_importing_the_package_stays_light():
    code = ("import sys, medvision_bm.models.api as a, medvision_bm.models.api.serve, "
            "medvision_bm.models.api.pricing; "
            "heavy = [m for m in ('openai', 'anthropic', 'google.genai', 'aiohttp', 'httpx', 'torch', "
            "'lmms_eval', 'PIL') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
