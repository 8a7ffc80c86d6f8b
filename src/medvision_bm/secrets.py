"""Keeping API keys out of files, logs and results: the variables that hold them and one redaction function."""

from __future__ import annotations

import argparse
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


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/?#@\"'<>]+)@")
#: Words that make a flag secret when its name (split at '-' and '_', lower-cased) contains one of them whole:
#: --api_key, --hf_token, --password ... but not --max_new_tokens, --keep_failed or --sample_keys.
SECRET_FLAG_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential",
                               "credentials", "auth", "authorization", "cookie"})
_registered: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret in use in this process (a key read from the environment, a password in a URL), so that
    :func:`redact` and :func:`redact_values` hide it wherever it shows up."""
    if value and len(value.strip()) >= 6:
        _registered.add(value.strip())


def secret_values() -> list[str]:
    """The key values present in this process's environment (stripped) and those registered, longest first."""
    vals = {os.environ.get(name, "").strip() for name in KEY_ENV_VARS} | _registered
    return sorted((v for v in vals if len(v) >= 6), key=len, reverse=True)


def redact_values(text: str) -> str:
    """Replace the exact values of the secrets in use, nothing else: for model answers, which must keep any text
    that only looks like a key."""
    for value in secret_values():
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _userinfo(m: re.Match[str]) -> str:
    user, sep, _password = m.group(2).partition(":")
    return f"{m.group(1)}{user}:{REDACTED}@" if sep else f"{m.group(1)}{REDACTED}@"


def redact(text: str) -> str:
    """Replace every known key value, anything shaped like a key and the credentials in URLs with ***."""
    text = _URL_USERINFO.sub(_userinfo, text)
    for pat in _PATTERNS:
        text = pat.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, text)
    return redact_values(text)


def is_secret_flag(name: str) -> bool:
    """Whether a command-line flag (``--api_key``, ``--hf-token``) carries a secret value."""
    words = re.split(r"[-_]+", name.lstrip("-").lower())
    return any(w in SECRET_FLAG_WORDS for w in words)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line fit to store or print: values of secret flags hidden (and remembered as secrets), URL
    credentials and key-shaped text redacted; every other argument kept as given, so the command reproduces the run."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("-"):
                register_secret(arg)
                out.append(REDACTED)
                continue
        flag, eq, value = arg.partition("=")
        if flag.startswith("-") and re.fullmatch(r"--?[A-Za-z][\w-]*", flag) and is_secret_flag(flag):
            if eq:
                register_secret(value)
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact(arg))
    return out


def redact_message(message: str) -> str:
    """An error message that may echo command-line arguments (argparse's "unrecognized arguments: ...")."""
    head, sep, rest = message.partition("unrecognized arguments: ")
    if sep:
        message = head + sep + " ".join(redact_argv(rest.split(" ")))
    return redact(message)


class SafeArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose error messages never echo a secret (its sub-parsers are of the same class)."""

    def error(self, message: str):  # type: ignore[override]
        super().error(redact_message(message))
