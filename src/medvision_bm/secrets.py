"""Keeping API keys out of files, logs and results: the variables that hold them and one redaction function."""

from __future__ import annotations

import os
import re

#: Environment variables that hold provider keys (DESIGN.md section 7).
KEY_ENV_VARS: tuple[str, ...] = ("OPENAI_API_KEY", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY",
                                 "GOOGLE_API_KEY", "MOONSHOT_API_KEY", "MINIMAX_API_KEY", "OPENAI_COMPATIBLE_API_KEY",
                                 "HF_TOKEN")
_PATTERNS = (
    re.compile(r"sk-[A-Za-z0-9_\-]{12,}"),
    re.compile(r"AIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{12,}"),
    re.compile(r"(?i)((?:api[_-]?key|x-api-key|x-goog-api-key|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]{8,}"),
)
REDACTED = "***"


def secret_values() -> list[str]:
    """The key values present in this process's environment (stripped), longest first."""
    vals = {os.environ.get(name, "").strip() for name in KEY_ENV_VARS}
    return sorted((v for v in vals if len(v) >= 6), key=len, reverse=True)


def redact(text: str) -> str:
    """Replace every known key value and anything shaped like a key with ***."""
    for value in secret_values():
        text = text.replace(value, REDACTED)
    for pat in _PATTERNS:
        text = pat.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
    return text


def redact_argv(argv: list[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if re.fullmatch(r"--?[\w-]*(key|token|secret|password)[\w-]*", arg, re.IGNORECASE):
            out.append(arg)
            hide_next = True
            continue
        if re.match(r"--?[\w-]*(key|token|secret|password)[\w-]*=", arg, re.IGNORECASE):
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            continue
        out.append(redact(arg))
    return out
