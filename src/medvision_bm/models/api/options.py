"""The API backend's options (``ApiOptions``): one typed record of what ``build_api_backend`` reads, named as the
runner's flag destinations. Values are kept as given (a model_args string included): the factory checks and casts
each one, naming its flag on a bad value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from medvision_bm.models.base import GenSettings

#: The option naming the model to ask, per backend kind.
MODEL_OPTION: dict[str, str] = {"openai_compatible": "model_name", "openai": "openai_model_code",
                                "anthropic": "anthropic_model_code", "gemini": "google_model_code",
                                "kimi": "kimi_model_code", "minimax": "minimax_model_code"}


@dataclass(frozen=True, slots=True)
class ApiOptions:
    """What an API backend is built from (``build_api_backend``). None is unset: the factory's default.

    ==================  =====================================================================================
    option              meaning
    ==================  =====================================================================================
    api_provider        openai|openrouter (openai), anthropic|openrouter, google|openrouter (gemini),
                        moonshot|openrouter (kimi), minimax|openrouter (minimax); default: the first
    <x>_model_code      openai_model_code, anthropic_model_code, google_model_code, kimi_model_code,
                        minimax_model_code; for openai_compatible, ``model_name`` (the served model).
                        OpenRouter codes must name the vendor (``anthropic/claude-sonnet-4.5``).
    base_url            list of URLs (repeatable, comma-separated). openai_compatible: required, requests are
                        spread over them. Other kinds: one URL replacing the provider's.
    reasoning_effort    OpenAI/OpenRouter (and servers that take it); sent only when set
    thinking            True/False/None. Anthropic: adaptive thinking (or ``thinking_budget`` tokens);
                        OpenRouter: reasoning.enabled; openai_compatible: chat_template_kwargs.enable_thinking
    thinking_budget     Anthropic only: a fixed thinking budget (models before Claude 4.6)
    thinking_level      Gemini 3: minimal|low|medium|high (OpenRouter: reasoning.effort)
    thinkingBudget      Gemini 2.5: thinking tokens, -1 dynamic (the default there, as upstream), 0 off (OpenRouter:
                        reasoning.enabled / reasoning.max_tokens); refused for Gemini 3
    media_resolution    Gemini on Google: low|medium|high (default high); low/medium refused with OpenRouter
    use_tool            Gemini on Google: code execution tool
    json_output         Gemini on Google: JSON answer with Thought and Answer fields
    max_retries         retries per sample after the first attempt (default 6)
    request_timeout     seconds per attempt (default 120)
    sample_deadline     seconds per sample over all attempts (default 900)
    batch_size          requests in flight (the adaptive limit's maximum; default 16)
    image_format        png|jpeg (default png)
    gen                 GenSettings (the run default; each request carries its task's own)
    price_in/price_out  USD per 1M tokens; or price_table: YAML/JSON file, model code -> prices
    ==================  =====================================================================================
    """

    api_provider: str | None = None
    model_name: str | None = None
    openai_model_code: str | None = None
    anthropic_model_code: str | None = None
    google_model_code: str | None = None
    kimi_model_code: str | None = None
    minimax_model_code: str | None = None
    base_url: str | list[str] | None = None
    reasoning_effort: str | None = None
    thinking: bool | None = None
    thinking_budget: int | None = None
    thinking_level: str | None = None
    thinkingBudget: int | None = None
    media_resolution: str | None = None
    use_tool: bool | None = None
    json_output: bool | None = None
    max_retries: int | None = None
    request_timeout: float | None = None
    sample_deadline: float | None = None
    batch_size: int | None = None
    image_format: str | None = None
    gen: GenSettings | None = None
    price_in: float | None = None
    price_out: float | None = None
    price_table: str | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> ApiOptions:
        """The options among flag destinations (a run's model flags, lmms-eval's model_args): the keys it knows,
        values as given; a null is unset, and the keys of other backends' flags are left out. (``Any``: values are
        kept as given, a model_args text included, and the factory casts each one.)"""
        return cls(**{k: v for k, v in options.items() if k in _NAMES and v is not None})

    def model_code(self, kind: str) -> object:
        """The model ``kind`` asks (its ``MODEL_OPTION``), as given."""
        return getattr(self, MODEL_OPTION[kind])


_NAMES = frozenset(f.name for f in fields(ApiOptions))
