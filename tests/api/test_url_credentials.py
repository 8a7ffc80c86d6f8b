"""Credentials inside a --base_url are taken out of the URL and sent as an HTTP Basic Authorization
header, so the `http://user:PASS@host/v1` form works beside a key, and the URL's secret parts are never shown."""

from __future__ import annotations

import base64
import json

import pytest

from fakes.samples import KEYS, make_request, run
from medvision_bm.models.api import build_api_backend
from medvision_bm.secrets import redact, redact_url, url_secrets

USER, PASSWORD = "svc-runner", "Basic-Pw-7781-zz"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize("kind,options,key_var", [
    ("openai_compatible", {"model_name": "served-model"}, "OPENAI_COMPATIBLE_API_KEY"),
    ("openai", {"openai_model_code": "gpt-5"}, "OPENAI_API_KEY"),
])
def test_a_url_with_user_and_password_works_beside_a_key(fake, clock, capsys, kind, options, key_var):
    """Before the fix aiohttp refused every request (`Cannot combine AUTHORIZATION header with ... credentials
    encoded in URL`), so every sample failed; now the request carries the URL's credentials as Basic auth."""
    url = fake.url.replace("http://", f"http://{USER}:{PASSWORD}@") + "/v1"
    env = {**KEYS, key_var: "sk-compatible-planted-0123456789"}
    backend = build_api_backend(kind, {**options, "base_url": [url], "max_retries": 1, "request_timeout": 5.0},
                                clock=clock, environ=env)
    try:
        results = run(backend, [make_request(0), make_request(1)])
    finally:
        backend.close()
    assert [r.error for r in results] == [None, None], [r.error for r in results]
    assert all(r.text for r in results)
    sent = fake.received[-1]
    assert sent.headers["Authorization"] == _basic(USER, PASSWORD)
    assert sent.path == "/v1/chat/completions"
    shown = json.dumps(backend.settings) + capsys.readouterr().err
    assert PASSWORD not in shown and f"{USER}:***@" in json.dumps(backend.settings)


def test_without_credentials_the_key_is_the_bearer(fake, clock):
    env = {"OPENAI_COMPATIBLE_API_KEY": "sk-compatible-planted-0123456789"}
    backend = build_api_backend("openai_compatible", {"model_name": "m", "base_url": [fake.url + "/v1"]},
                                clock=clock, environ=env)
    try:
        run(backend, [make_request(0)])
    finally:
        backend.close()
    assert fake.received[-1].headers["Authorization"] == "Bearer sk-compatible-planted-0123456789"


@pytest.mark.parametrize("url,secrets", [
    ("https://gw.example/v1?access_token=tk-0042-aaaa&region=eu", ["tk-0042-aaaa"]),
    ("https://gw.example/v1?apiKey=QQ77&x=1#frag", ["QQ77"]),
    ("https://gw.example/u/7f3a9c2e41b84d06a5e1c9f2/v1", ["7f3a9c2e41b84d06a5e1c9f2"]),
    ("https://ops:hunter-22-pw@gw.example:8443/v1;rev?sig=abcdef", ["hunter-22-pw", "abcdef"]),
    ("http://tokenonly0000111@h/v1", ["tokenonly0000111"]),
])
def test_one_url_rule_hides_userinfo_query_tokens_and_key_like_segments(url, secrets):
    shown = redact(f"connecting to {url} failed")
    for secret in secrets:
        assert secret not in shown, shown
    assert "gw.example" in shown or "@h/v1" in shown  # where it points stays readable
    assert sorted(url_secrets(url)) == sorted(secrets)


@pytest.mark.parametrize("url", ["https://download.pytorch.org/whl/cpu", "http://127.0.0.1:8000/v1",
                                 "https://h/v1/models/Qwen2.5-VL-7B-Instruct?revision=main",
                                 "file:///srv/wheels/cache-2025-01-01-0000abcd1234/"])
def test_urls_without_secrets_are_kept_as_given(url):
    assert redact_url(url) == url and url_secrets(url) == []


@pytest.mark.parametrize("url,hidden", [
    ("https://gw.example/k/x9QmWzTrLp/v1", "x9QmWzTrLp"),  # one digit: no key shape, still no word
    ("https://gw.example/v1?code=4hT9w", "4hT9w"),  # named like a one-time code
    ("https://gw.example/v1?id=aZ3rT0pQ", "aZ3rT0pQ"),  # any value that is no plain word
    ("https://gw.example/v1?acct=123456789012", "123456789012"),  # a number longer than a version
    ("https://gw.example/v1#state=QwErTyUiOpAs", "QwErTyUiOpAs"),  # mixed case without end
    ("https://gw.example/%7Eab%2Fcd/v1", "%7Eab%2Fcd"),  # percent-encoded
])
def test_every_segment_and_value_that_is_no_plain_word_or_version_is_hidden(url, hidden):
    shown = redact(f"see {url} now")
    assert hidden not in shown and "gw.example" in shown and "***" in shown, shown


@pytest.mark.parametrize("url", ["https://generativelanguage.googleapis.com/v1beta/openai/",
                                 "https://x.example/openai/deployments/my-deploy/chat/completions?api-version=2024-02-01",
                                 "https://x.example/v1/models/gemini-2.0-flash:generateContent",
                                 "https://x.example/api/v1?region=eu-west-1&stream=true"])
def test_plain_words_and_versions_are_kept(url):
    assert redact_url(url) == url
