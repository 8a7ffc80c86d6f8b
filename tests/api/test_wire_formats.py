"""What each backend puts on the wire (path, headers, body fields) and how it reads each provider's answer."""

from __future__ import annotations

import base64
import io

from PIL import Image

from fakes.provider_server import Fault
from fakes.samples import KEYS, make_request, run
from medvision_bm.models.base import GenSettings


def body_of(fake, i: int = -1) -> dict:
    posts = [r for r in fake.received if r.method == "POST"]
    return posts[i].body


def header(fake, name: str, i: int = -1) -> str | None:
    posts = [r for r in fake.received if r.method == "POST"]
    return {k.lower(): v for k, v in posts[i].headers.items()}.get(name.lower())


def decoded_png(data_url_or_b64: str) -> Image.Image:
    b64 = data_url_or_b64.split(",", 1)[1] if data_url_or_b64.startswith("data:") else data_url_or_b64
    # google-genai writes inline bytes URL-safe and unpadded
    return Image.open(io.BytesIO(base64.b64decode(b64 + "=" * (-len(b64) % 4), altchars=b"-_")))


# ---------------------------------------------------------------- OpenAI-compatible servers (aiohttp)
def test_compatible_request_shape(backend, fake):
    b = backend("compatible")
    gen = GenSettings(max_new_tokens=48, temperature=0.0, seed=7, stop=("</answer>",))
    [res] = run(b, [make_request(0, gen=gen, system_prompt="You measure lesions.")])
    assert res.ok and res.usage.input_tokens == 11 and res.usage.output_tokens == 7
    assert res.usage.reasoning_tokens == 3 and res.finish_reason == "stop"
    req = [r for r in fake.received if r.method == "POST"][-1]
    assert req.path == "/v1/chat/completions"
    assert header(fake, "authorization") is None  # no key unless OPENAI_COMPATIBLE_API_KEY is set
    body = req.body
    assert body["model"] == "served-model"
    assert body["max_tokens"] == 48 and body["temperature"] == 0.0 and body["seed"] == 7
    assert body["stop"] == ["</answer>"]
    for absent in ("top_p", "top_k", "reasoning_effort", "chat_template_kwargs", "max_completion_tokens"):
        assert absent not in body
    system, user = body["messages"]
    assert system == {"role": "system", "content": "You measure lesions."}
    image_part, text_part = user["content"]
    assert image_part["type"] == "image_url" and "detail" not in image_part["image_url"]
    assert image_part["image_url"]["url"].startswith("data:image/png;base64,")
    assert decoded_png(image_part["image_url"]["url"]).size == (32, 24)
    assert text_part == {"type": "text", "text": "Question 0: how long are the lesion's axes?"}


def test_compatible_sends_extensions_thinking_and_key_only_when_set(backend, fake):
    env = {**KEYS, "OPENAI_COMPATIBLE_API_KEY": "local-server-key-123\n"}
    b = backend("compatible", env=env, thinking=False, reasoning_effort="low")
    gen = GenSettings(max_new_tokens=8, temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.1,
                      min_new_tokens=2, seed=None)
    run(b, [make_request(0, gen=gen)])
    body = body_of(fake)
    assert (body["top_k"], body["repetition_penalty"], body["min_tokens"], body["top_p"]) == (20, 1.1, 2, 0.9)
    assert "seed" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["reasoning_effort"] == "low"
    assert header(fake, "authorization") == "Bearer local-server-key-123"


def test_each_request_carries_its_own_task_max_tokens(backend, fake):
    b = backend("compatible")
    run(b, [make_request(0, gen=GenSettings(max_new_tokens=16, temperature=None)),
            make_request(1, gen=GenSettings(max_new_tokens=512, temperature=None))])
    assert sorted(body_of(fake, i)["max_tokens"] for i in (0, 1)) == [16, 512]


def test_reasoning_content_is_kept_in_a_think_block(backend, fake):
    b = backend("compatible")
    fake.push(Fault(text="<answer>3, 4</answer>", reasoning="the ruler says 3 and 4"))
    [res] = run(b, [make_request(0)])
    assert res.text == "<think>the ruler says 3 and 4</think>\n<answer>3, 4</answer>"


# ---------------------------------------------------------------- OpenAI and OpenRouter (openai SDK)
def test_openai_direct_request_shape(backend, fake):
    b = backend("openai")
    run(b, [make_request(0, gen=GenSettings(max_new_tokens=32, temperature=None, seed=None))])
    assert [r.path for r in fake.received] == ["/v1/chat/completions"]
    assert header(fake, "authorization") == f"Bearer {KEYS['OPENAI_API_KEY']}"
    body = body_of(fake)
    assert body["max_completion_tokens"] == 32 and "max_tokens" not in body
    assert "temperature" not in body and "reasoning_effort" not in body
    assert body["messages"][0]["content"][0]["image_url"]["detail"] == "high"


def test_openai_reasoning_effort_sent_only_when_set(backend, fake):
    run(backend("openai", reasoning_effort="high"), [make_request(0)])
    assert body_of(fake)["reasoning_effort"] == "high"


def test_openrouter_uses_its_key_max_tokens_and_reasoning_object(backend, fake):
    b = backend("openai", api_provider="openrouter", openai_model_code="openai/gpt-5", reasoning_effort="low")
    run(b, [make_request(0, gen=GenSettings(max_new_tokens=20, temperature=None, top_k=5))])
    assert header(fake, "authorization") == f"Bearer {KEYS['OPENROUTER_API_KEY']}"
    body = body_of(fake)
    assert body["model"] == "openai/gpt-5" and body["max_tokens"] == 20 and body["top_k"] == 5
    assert body["reasoning"] == {"effort": "low"} and "reasoning_effort" not in body


def test_claude_and_gemini_through_openrouter(backend, fake):
    run(backend("anthropic", api_provider="openrouter", anthropic_model_code="anthropic/claude-sonnet-4.5",
                thinking=True), [make_request(0)])
    assert body_of(fake)["reasoning"] == {"enabled": True}
    assert fake.received[-1].path == "/v1/chat/completions"
    run(backend("anthropic", api_provider="openrouter", anthropic_model_code="anthropic/claude-sonnet-4.5",
                thinking=False), [make_request(1)])
    assert "reasoning" not in body_of(fake)
    run(backend("gemini", api_provider="openrouter", google_model_code="google/gemini-3-pro-preview",
                thinking_level="low"), [make_request(2)])
    assert body_of(fake)["reasoning"] == {"effort": "low"}


def test_kimi_and_minimax_endpoints_come_from_their_variables(fake, clock):
    from medvision_bm.models.api import build_api_backend

    env = {**KEYS, "MOONSHOT_BASE_URL": fake.url + "/v1", "MINIMAX_BASE_URL": fake.url}
    with build_api_backend("kimi", {"kimi_model_code": "kimi-k2.5", "max_retries": 0}, clock=clock,
                           environ=env) as kimi:
        [res] = run(kimi, [make_request(0)])
    assert res.ok and header(fake, "authorization") == f"Bearer {KEYS['MOONSHOT_API_KEY']}"
    assert body_of(fake)["model"] == "kimi-k2.5" and "max_tokens" in body_of(fake)
    with build_api_backend("minimax", {"minimax_model_code": "MiniMax-M3", "max_retries": 0}, clock=clock,
                           environ=env) as minimax:
        [res] = run(minimax, [make_request(1)])
    assert res.ok and header(fake, "authorization") == f"Bearer {KEYS['MINIMAX_API_KEY']}"
    assert body_of(fake)["max_completion_tokens"] == 64


# ---------------------------------------------------------------- Anthropic (anthropic SDK)
def test_anthropic_request_shape(backend, fake):
    b = backend("anthropic")
    gen = GenSettings(max_new_tokens=100, temperature=None, seed=3, stop=("STOP",))
    [res] = run(b, [make_request(0, gen=gen, system_prompt="Be exact.")])
    req = fake.received[-1]
    assert req.path == "/v1/messages"
    headers = {k.lower(): v for k, v in req.headers.items()}
    # anthropic 2.14 sends api_key as a bearer token, not x-api-key (measured; this pins it)
    assert headers["authorization"] == f"Bearer {KEYS['ANTHROPIC_API_KEY']}" and "x-api-key" not in headers
    assert "anthropic-version" in headers
    body = req.body
    assert body["model"] == "claude-fake-1" and body["max_tokens"] == 100
    assert body["system"] == "Be exact." and body["stop_sequences"] == ["STOP"]
    for absent in ("temperature", "top_p", "top_k", "thinking", "seed"):
        assert absent not in body
    image, text = body["messages"][0]["content"]
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    assert decoded_png(image["source"]["data"]).size == (32, 24)
    assert text["text"].startswith("Question 0")
    assert res.text == "<think>looking at the image</think>\n<answer>12.5, 7.25</answer>"
    assert (res.usage.input_tokens, res.usage.output_tokens, res.finish_reason) == (11, 7, "stop")


def test_anthropic_sampling_goes_through_extra_body_and_thinking_switches(backend, fake):
    run(backend("anthropic", thinking=True), [make_request(0, gen=GenSettings(temperature=0.2, top_p=0.8))])
    body = body_of(fake)
    assert body["temperature"] == 0.2 and body["top_p"] == 0.8
    assert body["thinking"] == {"type": "adaptive"}
    run(backend("anthropic", thinking=True, thinking_budget=2048), [make_request(1)])
    assert body_of(fake)["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    run(backend("anthropic", thinking=False), [make_request(2)])
    assert "thinking" not in body_of(fake)  # off means not sent: some models reject "disabled"


def test_anthropic_temperature_is_not_an_sdk_argument():
    import inspect

    from anthropic.resources.messages import AsyncMessages

    assert "temperature" not in inspect.signature(AsyncMessages.create).parameters


# ---------------------------------------------------------------- Gemini (google-genai)
def test_gemini_request_shape(backend, fake):
    b = backend("gemini")
    gen = GenSettings(max_new_tokens=77, temperature=0.0, seed=5)
    [res] = run(b, [make_request(0, gen=gen, system_prompt="Answer in mm.")])
    req = fake.received[-1]
    assert req.path == "/v1beta/models/gemini-3-pro-preview:generateContent"
    headers = {k.lower(): v for k, v in req.headers.items()}
    assert headers["x-goog-api-key"] == KEYS["GEMINI_API_KEY"] and "authorization" not in headers
    cfg = req.body["generationConfig"]
    assert cfg["maxOutputTokens"] == 77 and cfg["temperature"] == 0.0 and cfg["seed"] == 5
    assert cfg["mediaResolution"] == "MEDIA_RESOLUTION_HIGH"  # pinned: unset means a thumbnail on 2.5
    assert "thinkingConfig" not in cfg and "tools" not in req.body
    assert req.body["systemInstruction"]["parts"][0]["text"] == "Answer in mm."
    image, text = req.body["contents"][0]["parts"]
    assert image["inlineData"]["mime_type"] == "image/png"  # google-genai 3.6.1 writes this key in snake case
    assert decoded_png(image["inlineData"]["data"]).size == (32, 24)
    assert text["text"].startswith("Question 0")
    # output tokens count thinking too (7 visible + 3 thoughts), as the other providers count them
    assert (res.usage.input_tokens, res.usage.output_tokens, res.usage.reasoning_tokens) == (11, 10, 3)


def test_gemini_options_reach_the_wire(backend, fake):
    b = backend("gemini", thinking_level="low", media_resolution="medium", use_tool=True)
    run(b, [make_request(0)])
    body = body_of(fake)
    # the SDK passes this nested object through in snake case; Google's JSON parser accepts both spellings
    assert body["generationConfig"]["thinkingConfig"] in ({"thinkingLevel": "LOW"}, {"thinking_level": "LOW"})
    assert body["generationConfig"]["mediaResolution"] == "MEDIA_RESOLUTION_MEDIUM"
    assert body["tools"] == [{"codeExecution": {}}]


def test_gemini_thinking_budget_reaches_the_wire_as_upstreams_gemini_class_sends_it(backend, fake):
    """upstream lmms_eval/models/gemini.py @47210fb: Gemini 2.5 gets ThinkingConfig(thinking_budget=...), -1 when
    --thinkingBudget is unset; Gemini 3 gets none unless --thinking_level; OpenRouter maps -1 to reasoning.enabled,
    N > 0 to reasoning.max_tokens and sends nothing for 0."""
    def thinking(**opts):
        run(backend("gemini", **opts), [make_request(0)])
        return body_of(fake)["generationConfig"].get("thinkingConfig")

    budget = ({"thinkingBudget": -1}, {"thinking_budget": -1})  # the SDK passes the nested object in snake case
    assert thinking(google_model_code="gemini-2.5-flash") in budget
    assert thinking(google_model_code="gemini-2.5-flash", thinkingBudget=0) in ({"thinkingBudget": 0},
                                                                                {"thinking_budget": 0})
    assert thinking(google_model_code="gemini-3.1-pro-preview") is None

    def reasoning(budget):
        run(backend("gemini", api_provider="openrouter", google_model_code="google/gemini-2.5-pro",
                    thinkingBudget=budget), [make_request(1)])
        return body_of(fake).get("reasoning")

    assert reasoning(None) == {"enabled": True}
    assert reasoning(512) == {"max_tokens": 512}
    assert reasoning(0) is None


def test_gemini_json_output_becomes_thinking_and_answer_tags(backend, fake):
    b = backend("gemini", json_output=True)
    fake.push(Fault(text='{"Thought": "the lesion spans 25 pixels", "Answer": "12.5, 7.25"}'))
    [res] = run(b, [make_request(0)])
    cfg = body_of(fake)["generationConfig"]
    assert cfg["responseMimeType"] == "application/json"
    assert set(cfg["responseSchema"]["properties"]) == {"Thought", "Answer"}
    assert res.text == "<think>the lesion spans 25 pixels</think>\n<answer>12.5, 7.25</answer>"


def test_gemini_code_tool_output_never_reaches_the_answer_region():
    from types import SimpleNamespace as NS

    from medvision_bm.models.api.gemini import parse_response
    from medvision_bm.tasks.upstream_parse import parse_upstream

    parts = [NS(text="Let me measure.", thought=None, executable_code=None, code_execution_result=None),
             NS(text=None, thought=None, executable_code=NS(code="print(25 * 0.5, 99)"), code_execution_result=None),
             NS(text=None, thought=None, executable_code=None, code_execution_result=NS(output="12.5 99")),
             NS(text="The axes are 12.5 and 7.25 mm.", thought=None, executable_code=None,
                code_execution_result=None)]
    response = NS(candidates=[NS(finish_reason=NS(value="STOP"), content=NS(parts=parts))],
                  usage_metadata=NS(prompt_token_count=5, candidates_token_count=9, thoughts_token_count=None),
                  prompt_feedback=None)
    completion = parse_response(response)
    assert "print(25 * 0.5, 99)" in completion.text() and completion.finish_reason == "stop"
    assert "99" not in completion.answer and "12.5 99" in (completion.reasoning or "")  # code: thinking only
    # the paper-era parser reads the last two numbers of the whole stored text: the answer's, never the code's
    assert parse_upstream(completion.text(), 2, "lastk-1").values == (12.5, 7.25)


def test_gemini_blocked_prompt_is_an_empty_answer_and_a_bodiless_response_is_malformed():
    from types import SimpleNamespace as NS

    import pytest

    from medvision_bm.models.api.gemini import parse_response
    from medvision_bm.models.api.retry import AttemptError

    blocked = parse_response(NS(candidates=None, prompt_feedback=NS(block_reason="SAFETY"), usage_metadata=None))
    assert blocked.answer == "" and blocked.finish_reason == "content_filter"  # the engine retries it as 'empty'
    with pytest.raises(AttemptError) as info:
        parse_response(NS(candidates=None, prompt_feedback=None, usage_metadata=None))
    assert info.value.kind == "malformed" and info.value.retryable
