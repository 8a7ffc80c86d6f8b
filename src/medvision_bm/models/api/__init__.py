"""API and server backends: one factory from (backend kind, runner options) to a Backend.

``build_api_backend(kind, options)`` reads the key, checks every option (``ApiOptions``, the runner's flag
destinations: ``models/api/options.py`` lists them) and fails with a UserError before any request is sent.

This module imports no SDK; each client imports its own when the backend starts.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.api.anthropic_messages import AnthropicClient
from medvision_bm.models.api.endpoints import EndpointPool, normalize_base_url, split_urls, url_credentials
from medvision_bm.models.api.engine import ApiBackend
from medvision_bm.models.api.gemini import MEDIA_RESOLUTIONS, THINKING_LEVELS, GeminiClient
from medvision_bm.models.api.images import check_format
from medvision_bm.models.api.keys import COMPATIBLE_KEY_VAR, read_key, read_optional_key
from medvision_bm.models.api.openai_chat import COMPATIBLE, AiohttpChatClient, check_gen
from medvision_bm.models.api.options import MODEL_OPTION, ApiOptions
from medvision_bm.models.api.pricing import resolve_price
from medvision_bm.models.api.retry import RealClock, RetryPolicy
from medvision_bm.models.base import GenSettings
from medvision_bm.secrets import redact_url

if TYPE_CHECKING:
    from medvision_bm.models.api.batch import BatchProvider
    from medvision_bm.models.api.engine import ApiBackend, ProviderClient
    from medvision_bm.models.api.retry import Clock

API_KINDS: tuple[str, ...] = ("openai_compatible", "openai", "anthropic", "gemini", "kimi", "minimax")
PROVIDERS: dict[str, tuple[str, ...]] = {"openai_compatible": ("server",), "openai": ("openai", "openrouter"),
                                         "anthropic": ("anthropic", "openrouter"),
                                         "gemini": ("google", "openrouter"), "kimi": ("moonshot", "openrouter"),
                                         "minimax": ("minimax", "openrouter")}
#: Default endpoints of OpenAI-style providers (Anthropic and Google use their SDK's own default).
DEFAULT_URLS: dict[str, str] = {"openai": "https://api.openai.com/v1", "openrouter": "https://openrouter.ai/api/v1",
                                "moonshot": "https://api.moonshot.ai/v1", "minimax": "https://api.minimax.io/v1"}
#: Variables that move a provider's endpoint (e.g. Moonshot's China endpoint https://api.moonshot.cn/v1).
URL_ENV: dict[str, str] = {"moonshot": "MOONSHOT_BASE_URL", "minimax": "MINIMAX_BASE_URL"}

T = TypeVar("T")

DEFAULTS: dict[str, int | float] = {"max_retries": 6, "request_timeout": 120.0, "sample_deadline": 900.0,
                                    "batch_size": 16}
#: Gemini's media resolution on the Google API unless told otherwise (unset, Gemini 2.5 sees a thumbnail).
DEFAULT_MEDIA_RESOLUTION = "high"


def build_api_backend(kind: str, options: ApiOptions | Mapping[str, object], *, clock: Clock | None = None,
                      rng: random.Random | None = None, environ: Mapping[str, str] | None = None) -> ApiBackend:
    """A ready-to-use backend for ``kind`` (``options`` may be flag destinations: ``ApiOptions.of``); raises
    UserError (naming the flag or variable) on any bad input."""
    env = os.environ if environ is None else environ
    kind = (kind or "").replace("-", "_")
    if kind not in API_KINDS:
        raise UserError(f"unknown API backend {kind!r}; expected one of {', '.join(API_KINDS)}")
    opts = options if isinstance(options, ApiOptions) else ApiOptions.of(options)
    gen: GenSettings = opts.gen or GenSettings()
    provider = str(opts.api_provider or PROVIDERS[kind][0])
    if kind == "openai_compatible":
        provider = "server"
    if provider not in PROVIDERS[kind]:
        raise UserError(f"--api_provider {provider!r} is not available for {kind}; use "
                        f"{' or '.join(PROVIDERS[kind])}")
    model_option = MODEL_OPTION[kind]
    model = str(opts.model_code(kind) or "").strip()
    if not model:
        raise UserError(f"{kind} needs --{model_option} (the model to ask)")
    if provider == "openrouter" and "/" not in model:
        raise UserError(f"--{model_option} {model!r}: OpenRouter model codes name the vendor, e.g. "
                        "openai/gpt-5, anthropic/claude-sonnet-4.5, google/gemini-2.5-pro")
    policy = RetryPolicy(max_retries=_setting(opts.max_retries, "max_retries", int),
                         attempt_timeout_s=_setting(opts.request_timeout, "request_timeout", float),
                         sample_deadline_s=_setting(opts.sample_deadline, "sample_deadline", float))
    concurrency = _setting(opts.batch_size, "batch_size", int)
    image_format = check_format(opts.image_format)
    native = provider in ("anthropic", "google")  # their SDKs add the API path themselves
    if provider == "anthropic" and gen.temperature is not None and gen.temperature > 1:
        raise UserError(f"--temperature {gen.temperature:g}: Anthropic's API accepts 0 to 1")
    urls = split_urls(opts.base_url, openai_style=not native)
    clock = clock or RealClock()

    settings: JsonObject = {"kind": kind, "provider": provider, "model": model, "image_format": image_format}
    make_client: Callable[[], ProviderClient]
    make_batch = batch_interface(provider)
    if kind == "openai_compatible":
        make_client = _compatible_client(opts, gen, model, urls, clock, env, settings)
    elif native:
        make_client = _native_client(kind, provider, opts, model, urls, policy.attempt_timeout_s, env, settings)
    else:
        make_client = _sdk_chat_client(kind, provider, opts, gen, model, urls, policy.attempt_timeout_s, env,
                                       settings)
    price = resolve_price(model, _number(opts.price_in, "price_in", float), _number(opts.price_out, "price_out", float),
                          opts.price_table)
    return ApiBackend(f"{kind}:{provider}", make_client, policy=policy, concurrency=concurrency,
                      image_format=image_format, clock=clock, rng=rng, settings=settings, price=price,
                      make_batch=make_batch)


#: Providers with a batch interface the suite drives (``run --batch``). OpenRouter has none: it forwards live
#: requests only.
BATCH_PROVIDERS: tuple[str, ...] = ("openai", "anthropic", "google")


def batch_interface(provider: str) -> Callable[[Any], BatchProvider] | None:
    """How to make the provider's batch interface from its live client (None: the provider has none). Each takes
    its own provider's client (``Any`` in the signature: the engine hands over the client it holds)."""
    if provider == "openai":
        from medvision_bm.models.api.batch_openai import OpenAIBatches  # deferred: imports openai_chat

        return OpenAIBatches
    if provider == "anthropic":
        from medvision_bm.models.api.batch_anthropic import AnthropicBatches

        return AnthropicBatches
    if provider == "google":
        from medvision_bm.models.api.batch_gemini import GeminiBatches

        return GeminiBatches
    return None


def _cast(value: object, name: str, cast: Callable[[Any], T]) -> T:
    """``cast(value)`` (``cast`` is int or float and takes whatever the option was given, hence ``Any``); anything
    unreadable is a UserError naming the flag."""
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise UserError(f"--{name} {value!r} is not a number") from None


def _number(value: object, name: str, cast: Callable[[Any], T]) -> T | None:
    """An option's ``value`` (None: its default, if it has one) as ``cast``."""
    value = DEFAULTS.get(name) if value is None else value
    return None if value is None else _cast(value, name, cast)


def _setting(value: object, name: str, cast: Callable[[Any], T]) -> T:
    """An option that has a default in DEFAULTS (None: that default) as ``cast``."""
    return _cast(DEFAULTS[name] if value is None else value, name, cast)


def _one_url(urls: list[str], kind: str) -> str | None:
    if len(urls) > 1:
        raise UserError(f"{kind} takes one --base_url (got {len(urls)}); several URLs are for openai-compatible")
    return urls[0] if urls else None


def _compatible_client(opts: ApiOptions, gen: GenSettings, model: str, urls: list[str], clock: Clock,
                       env: Mapping[str, str], settings: JsonObject) -> Callable[[], ProviderClient]:
    """Self-hosted OpenAI-compatible servers through aiohttp, spread over every --base_url."""
    if not urls:
        raise UserError("openai-compatible needs --base_url URL (repeatable or comma-separated)")
    check_gen(gen, COMPATIBLE)
    key = read_optional_key(COMPATIBLE_KEY_VAR, env)
    extra: JsonObject = {}
    if opts.thinking is not None:
        extra["chat_template_kwargs"] = {"enable_thinking": bool(opts.thinking)}
    if opts.reasoning_effort:
        extra["reasoning_effort"] = str(opts.reasoning_effort)
    settings.update(base_urls=[redact_url(u) for u in urls], thinking=opts.thinking,
                    reasoning_effort=opts.reasoning_effort)
    with_userinfo = [u for u in urls if url_credentials(u)[1]]
    if key is not None and with_userinfo:
        print(f"note: --base_url {redact_url(with_userinfo[0])} carries user:password: requests to "
              f"{'it' if len(with_userinfo) == 1 else 'such URLs'} send them as HTTP Basic auth in the Authorization "
              f"header, in place of the {COMPATIBLE_KEY_VAR} bearer key", file=sys.stderr)
    return lambda: AiohttpChatClient(EndpointPool(list(urls), clock=clock), model, COMPATIBLE, key, extra)


def _sdk_chat_client(kind: str, provider: str, opts: ApiOptions, gen: GenSettings, model: str, urls: list[str],
                     timeout_s: float, env: Mapping[str, str], settings: JsonObject) -> Callable[[], ProviderClient]:
    """OpenAI-protocol providers through the openai SDK: OpenAI, OpenRouter (any vendor), Moonshot, MiniMax."""
    from medvision_bm.models.api import openai_chat as oc  # deferred: openai_chat imports this package

    dialect = {"openai": oc.OPENAI, "openrouter": oc.OPENROUTER, "moonshot": oc.MOONSHOT,
               "minimax": oc.MINIMAX}[provider]
    oc.check_gen(gen, dialect)
    if kind == "gemini":
        asked = {"media_resolution": opts.media_resolution not in (None, DEFAULT_MEDIA_RESOLUTION),
                 "use_tool": bool(opts.use_tool), "json_output": bool(opts.json_output)}
        for flag, wanted in asked.items():
            if wanted:
                raise UserError(f"--{flag} works with --api_provider google only (OpenRouter cannot pass it)")
    key = read_key(provider, env)
    url = _one_url(urls, kind) or (normalize_base_url(env[URL_ENV[provider]]) if env.get(URL_ENV.get(provider, ""))
                                   else DEFAULT_URLS[provider])
    extra: JsonObject = {}
    effort = opts.reasoning_effort
    if kind == "gemini":
        effort = opts.thinking_level
        budget = gemini_thinking_budget(model, opts)
        if budget == -1:  # upstream's gemini.py @47210fb: dynamic thinking -> reasoning enabled, 0 -> not sent
            extra["reasoning"] = {"enabled": True}
        elif budget:
            extra["reasoning"] = {"max_tokens": budget}
        settings["thinkingBudget"] = budget
    if effort and provider == "openai":
        extra["reasoning_effort"] = str(effort)
    elif effort and provider == "openrouter":
        extra["reasoning"] = {"effort": str(effort)}
    elif effort:
        raise UserError(f"--reasoning_effort is not supported by {provider}; drop it")
    if kind == "anthropic" and opts.thinking:
        extra["reasoning"] = {"enabled": True}
    settings.update(base_urls=[redact_url(url)], reasoning_effort=opts.reasoning_effort, thinking=opts.thinking,
                    thinking_level=opts.thinking_level)
    return lambda: oc.SdkChatClient(url, key, model, dialect, extra, default_timeout_s=timeout_s)


def _native_client(kind: str, provider: str, opts: ApiOptions, model: str, urls: list[str], timeout_s: float,
                   env: Mapping[str, str], settings: JsonObject) -> Callable[[], ProviderClient]:
    """Anthropic's and Google's own APIs through their SDKs."""
    url = _one_url(urls, kind)
    key = read_key(provider, env)
    settings["base_urls"] = [redact_url(url)] if url else []
    if provider == "anthropic":
        budget = _number(opts.thinking_budget, "thinking_budget", int)
        thinking = opts.thinking
        if budget is not None and budget < 1024:
            raise UserError(f"--thinking_budget {budget}: Anthropic needs at least 1024 tokens")
        settings.update(thinking=thinking, thinking_budget=budget)
        return lambda: AnthropicClient(key, model, url, thinking, budget, default_timeout_s=timeout_s)


    level = opts.thinking_level
    if level is not None and level not in THINKING_LEVELS:
        raise UserError(f"--thinking_level {level!r}: use one of {', '.join(THINKING_LEVELS)}")
    if level is not None and model.startswith("gemini-2"):
        raise UserError(f"--thinking_level is a Gemini 3 setting; {model} (Gemini 2.x) takes no thinking level")
    media = opts.media_resolution or DEFAULT_MEDIA_RESOLUTION
    if media not in MEDIA_RESOLUTIONS:
        raise UserError(f"--media_resolution {media!r}: use one of {', '.join(MEDIA_RESOLUTIONS)}")
    use_tool, json_output = bool(opts.use_tool), bool(opts.json_output)
    if use_tool and json_output and model.startswith("gemini-2"):
        raise UserError("--use_tool and --json_output cannot be combined on Gemini 2.x; choose one")
    budget = gemini_thinking_budget(model, opts)
    settings.update(thinking_level=level, media_resolution=media, use_tool=use_tool, json_output=json_output,
                    thinkingBudget=budget)
    return lambda: GeminiClient(key, model, url, level, media, use_tool, json_output, default_timeout_s=timeout_s,
                                thinking_budget=budget)


def gemini_thinking_budget(model: str, opts: ApiOptions) -> int | None:
    """``--thinkingBudget`` as upstream's Gemini class reads it (gemini.py @47210fb): a Gemini 2.x setting (-1 when
    unset: dynamic thinking; 0: off, on Flash/Flash-Lite); refused for Gemini 3, which takes --thinking_level."""
    budget = _number(opts.thinkingBudget, "thinkingBudget", int)
    series_2 = model.split("/")[-1].startswith("gemini-2")
    if not series_2:
        if budget is not None:
            raise UserError(f"--thinkingBudget is a Gemini 2.5 setting; {model} takes --thinking_level instead")
        return None
    if budget is None:
        return -1
    if budget < -1:
        raise UserError(f"--thinkingBudget {budget}: use -1 (dynamic), 0 (off) or a number of tokens")
    return budget
