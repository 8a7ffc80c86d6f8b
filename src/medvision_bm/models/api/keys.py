"""API keys: read from each provider's usual variable, checked before any work, and never shown anywhere.

A key lives in an :class:`ApiKey`, whose ``repr``/``str`` print ``***``; only the code that builds a client calls
``reveal()``. Scrubbing keys from text is :func:`medvision_bm.secrets.redact`'s job (the same variables, plus key
shapes), used as is by this package.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from medvision_bm.errors import UserError
from medvision_bm.secrets import register_secret

#: Provider -> the variables that may hold its key, in the order they are tried.
KEY_VARS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "moonshot": ("MOONSHOT_API_KEY",),
    "minimax": ("MINIMAX_API_KEY",),
}
#: Optional key for a self-hosted OpenAI-compatible server started with ``--api-key`` (vLLM, SGLang).
COMPATIBLE_KEY_VAR = "OPENAI_COMPATIBLE_API_KEY"


class ApiKey:
    """A secret string that does not print itself."""

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str) -> None:
        register_secret(value)  # a key in use is redacted wherever it shows up, answers included
        self._value = value
        self.source = source  # the variable it came from (safe to show)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"ApiKey(from {self.source}: ***)"

    __str__ = __repr__

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("an ApiKey is never pickled")


def read_key(provider: str, environ: Mapping[str, str] | None = None) -> ApiKey:
    """The key for ``provider``; a missing or blank key is a :class:`UserError` naming the variable to set."""
    env = os.environ if environ is None else environ
    names = KEY_VARS.get(provider)
    if names is None:
        raise UserError(f"unknown API provider {provider!r}; expected one of {', '.join(sorted(KEY_VARS))}")
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return ApiKey(_checked_key(value, name), name)
    wanted = " or ".join(names)
    raise UserError(f"provider {provider} needs an API key: set {wanted} (missing or empty in the environment)")


def read_optional_key(name: str, environ: Mapping[str, str] | None = None) -> ApiKey | None:
    env = os.environ if environ is None else environ
    value = env.get(name, "").strip()
    return ApiKey(_checked_key(value, name), name) if value else None


def _checked_key(value: str, name: str) -> str:
    """A key with a line break, another control character or a non-ASCII character inside cannot go into an HTTP
    header (the request would fail as if the server were unreachable, and be retried): a bad key, said at once."""
    bad = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F or ord(c) > 0x7E), None)
    if bad is not None:
        what = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab"}.get(bad, f"the character U+{ord(bad):04X}")
        raise UserError(f"the API key in {name} contains {what}; it is not a valid key (was a file with several "
                        f"lines pasted in?): set {name} to the key alone")
    return value

