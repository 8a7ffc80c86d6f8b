"""API keys: read from the usual variables, checked before any work, and never written anywhere."""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle

import pytest

from fakes.provider_server import Fault
from fakes.samples import KEYS, WIRES, make_request, run
from medvision_bm.errors import UserError
from medvision_bm.models.api import build_api_backend
from medvision_bm.models.api.keys import ApiKey, read_key
from medvision_bm.secrets import redact


@pytest.mark.parametrize("kind,options,variable", [
    ("openai", {"openai_model_code": "gpt-5"}, "OPENAI_API_KEY"),
    ("openai", {"openai_model_code": "openai/gpt-5", "api_provider": "openrouter"}, "OPENROUTER_API_KEY"),
    ("anthropic", {"anthropic_model_code": "claude-fake-1"}, "ANTHROPIC_API_KEY"),
    ("gemini", {"google_model_code": "gemini-2.5-pro"}, "GEMINI_API_KEY or GOOGLE_API_KEY"),
    ("kimi", {"kimi_model_code": "kimi-k2.5"}, "MOONSHOT_API_KEY"),
    ("minimax", {"minimax_model_code": "MiniMax-M3"}, "MINIMAX_API_KEY"),
])
@pytest.mark.parametrize("value", [None, "", "  \n"])
def test_a_missing_or_blank_key_fails_before_any_request(fake, kind, options, variable, value):
    env = {} if value is None else {v: value for v in variable.split(" or ")}
    with pytest.raises(UserError, match=f"set {variable}"):
        build_api_backend(kind, {**options, "base_url": [fake.url]}, environ=env)
    assert fake.received == []


def test_trailing_newline_and_spaces_are_stripped(backend, fake):
    env = {**KEYS, "OPENAI_API_KEY": KEYS["OPENAI_API_KEY"] + " \n"}
    run(backend("openai", env=env), [make_request(0)])
    assert fake.received[-1].headers["Authorization"] == f"Bearer {KEYS['OPENAI_API_KEY']}"


def test_gemini_key_prefers_gemini_then_google_variable():
    assert read_key("google", {"GEMINI_API_KEY": "g1-aaaa", "GOOGLE_API_KEY": "g2-bbbb"}).source == "GEMINI_API_KEY"
    key = read_key("google", {"GEMINI_API_KEY": " ", "GOOGLE_API_KEY": "g2-bbbb\n"})
    assert key.source == "GOOGLE_API_KEY" and key.reveal() == "g2-bbbb"


def test_a_key_never_prints_itself():
    key = ApiKey("sk-never-print-me-12345", "OPENAI_API_KEY")
    for text in (repr(key), str(key), f"{key}", repr([key]), repr({"k": key})):
        assert "sk-never-print-me-12345" not in text
    with pytest.raises(TypeError):
        pickle.dumps(key)
    assert redact("auth failed for sk-never-print-me-12345 (bad)") == "auth failed for *** (bad)"


def test_backend_description_holds_no_key(backend):
    for wire in WIRES:
        b = backend(wire)
        text = json.dumps(b.settings) + repr(b) + json.dumps(b.stats().to_json())
        assert not any(k in text for k in KEYS.values())


def test_planted_keys_reach_no_file_no_log_no_output(backend, fake, tmp_path, monkeypatch, capsys, caplog):
    """Run every wire format through failures that echo the credentials back, store everything the way the runner
    stores it, log everything at DEBUG, then scan it all for the keys."""
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    caplog.set_level(logging.DEBUG)
    store = tmp_path / "results" / "samples.jsonl"
    store.parent.mkdir(parents=True)
    try:
        with store.open("w") as out:
            for wire in ("compatible", "openai", "anthropic", "gemini"):
                fake.push(Fault("status", 401, message="invalid key", echo_auth=True),
                          Fault("status", 500, message="upstream broke", echo_auth=True),
                          Fault("status", 400, message="rejected", echo_auth=True))
                b = backend(wire, env=None, max_retries=2)
                for r in run(b, [make_request(i) for i in range(3)]):
                    out.write(json.dumps(dataclasses.asdict(r)) + "\n")
                    logging.getLogger("medvision_bm.test").info("result %s: %s", r.key, r.error)
                    print(r.error.message if r.error else r.text)
                (tmp_path / "results" / f"{wire}-backend.json").write_text(
                    json.dumps({"settings": b.settings, "stats": b.stats().to_json(), "repr": repr(b)}))
                b.close()
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(old_level)
    stored = store.read_text()
    assert "credentials received" in stored  # the echo really happened, so the scan below means something
    assert sum(1 for r in fake.received if "authorization" in {k.lower() for k in r.headers}
               or "x-goog-api-key" in {k.lower() for k in r.headers}) >= 9  # keys did go on the wire
    captured = capsys.readouterr()
    haystacks = {str(p): p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()}
    haystacks["stdout"] = captured.out
    haystacks["stderr"] = captured.err
    haystacks["caplog"] = caplog.text
    leaks = [(where, name) for where, text in haystacks.items() for name, key in KEYS.items() if key in text]
    assert leaks == []
