"""Keeping API keys out of files, logs and results: the variables that hold them and one redaction function."""

from __future__ import annotations

import argparse
import os
import re
from typing import NoReturn

#: Environment variables that hold provider keys (each provider's usual variable).
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


#: Words that make a flag secret when its name (split at '-' and '_', lower-cased) contains one of them whole:
#: --api_key, --hf_token, --password ... but not --max_new_tokens, --keep_failed or --sample_keys.
SECRET_FLAG_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential",
                               "credentials", "auth", "authorization", "cookie"})
#: URL query (or fragment) parameters whose value is a secret: a name with one of SECRET_FLAG_WORDS or these as a
#: word (``?token=``, ``api-key=``, ``sig=``), or holding one of _SECRET_NAME_PARTS (``accessToken``, ``apiKey``).
_SECRET_QUERY_WORDS = SECRET_FLAG_WORDS | {"sig", "signature", "pwd", "pass", "jwt", "sas", "session", "sessionid",
                                           "code", "otp", "nonce", "ticket"}
_SECRET_NAME_PARTS = ("token", "secret", "passw", "apikey", "signature", "credential")
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s\"'<>`,]+")
#: A URL path segment or parameter value that looks like a key: 20+ characters of letters, digits and _-+=~%,
#: at least 4 of them digits and 4 letters (``/v1/ab12cd34ef56gh78ij90``); model names (``Qwen2.5-VL-7B``) are not.
_KEY_LIKE = re.compile(r"[A-Za-z0-9_\-+=~%]{20,}")
#: A URL path segment or parameter value that is kept as written: a plain word or a version, i.e. parts joined by
#: ``-_.:;,`` each of which is a word (letters, at most two changes of case: ``openai``, ``Instruct``, ``iPhone``),
#: a short number (``2024``, ``01``), a word and a number (``v1``, ``Qwen2``, ``7B``) or a version (``v1beta``).
#: Anything else (``k9XzQwErTy``, ``tok3n``, a percent-encoded text, a 9-digit number) is written as ***.
_PART_SPLIT = re.compile(r"[-_.:;,]")
_WORD_PART = re.compile(r"[A-Za-z]{1,24}|[0-9]{1,8}|[A-Za-z]{1,12}[0-9]{1,4}|[0-9]{1,4}[A-Za-z]{1,12}"
                        r"|v[0-9]{1,4}(?:alpha|beta|rc|preview)[0-9]{0,4}")
_CASE_CHANGE = re.compile(r"(?<=[a-z])[A-Z]|(?<=[A-Z])[a-z]")
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


def _key_like(text: str) -> bool:
    return bool(_KEY_LIKE.fullmatch(text)) and sum(c.isdigit() for c in text) >= 4 \
        and sum(c.isalpha() for c in text) >= 4


def _plain(text: str) -> bool:
    """Whether a path segment or parameter value is a plain word or a version (``_WORD_PART``), kept as written."""
    if not text or len(text) > 64:
        return not text
    return all(_WORD_PART.fullmatch(part) and len(_CASE_CHANGE.findall(part)) <= 2
               for part in _PART_SPLIT.split(text) if part)


def _secret_param(name: str) -> bool:
    low = name.lower()
    return any(w in _SECRET_QUERY_WORDS for w in re.split(r"[-_.]+", low)) or any(p in low for p in _SECRET_NAME_PARTS)


def _split_url(url: str) -> tuple[str, str, str, str, str, str]:
    """scheme://, userinfo (without its @), host[:port], path, ?query, #fragment: text only, never an error."""
    scheme, _, rest = url.partition("://")
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    userinfo, at, host = authority.rpartition("@")
    tail, hash_, fragment = tail.partition("#")
    path, q, query = tail.partition("?")
    return scheme + "://", userinfo if at else "", host, path, q + query, hash_ + fragment


def _params(text: str, parts: list[str] | None) -> str:
    """``?a=1&token=x`` with every value that is named like a secret or is not a plain word or version as *** (the
    secret-named and key-shaped values appended to ``parts`` when given)."""
    if len(text) <= 1:
        return text
    out = []
    for item in re.split(r"([&;])", text[1:]):
        name, eq, value = item.partition("=")
        if item in ("&", ";") or not value:
            out.append(item if _plain(item) or item in ("&", ";") else REDACTED)
            if _key_like(item) and parts is not None:
                parts.append(item)
            continue
        if (_secret_param(name) or _key_like(value)) and parts is not None:
            parts.append(value)
        hide = _secret_param(name) or not _plain(value)
        out.append(f"{name}{eq}{REDACTED}" if hide else item)
    return text[0] + "".join(out)


def _url_parts(url: str, parts: list[str] | None = None) -> str:
    scheme, userinfo, host, path, query, fragment = _split_url(url)
    if userinfo:
        user, sep, password = userinfo.partition(":")
        if parts is not None:
            parts.append(password if sep else user)
        userinfo = f"{user}:{REDACTED}@" if sep else f"{REDACTED}@"
    if scheme.lower() != "file://":  # local paths are never keys; a web path segment may be
        segments = path.split("/")
        for i, seg in enumerate(segments):
            if _key_like(seg) and parts is not None:
                parts.append(seg)
            if not _plain(seg):
                segments[i] = REDACTED
        path = "/".join(segments)
        query, fragment = _params(query, parts), _params(fragment, parts)
    return f"{scheme}{userinfo}{host}{path}{query}{fragment}"


def redact_url(url: str) -> str:
    """The one rule for URLs, applied to every URL written (results, logs, reports, job scripts, messages): the
    password of the userinfo (or the whole userinfo without one), every query and fragment value named like a
    secret, and every path segment and value that is not a plain word or a version (``_plain``: a token with a
    single digit is none) become ***; the scheme, host, port and plain parts are kept, so the URL still says where
    it points (``http://127.0.0.1:8000/v1``, ``https://h/v1beta/models/Qwen2.5-VL-7B-Instruct?revision=main``)."""
    return _url_parts(url)


def url_secrets(url: str) -> list[str]:
    """The parts of ``url`` that are secrets beyond doubt (its userinfo, values named like a secret, key-shaped
    segments and values), to register as secrets in use and hide wherever they show; :func:`redact_url` also hides
    the URL's other parts that are not plain words, without hiding that text elsewhere."""
    parts: list[str] = []
    _url_parts(url, parts)
    return [p for p in parts if p]


def register_url(url: str | None) -> None:
    """Remember the secret parts of a URL in use (a --base_url, a package index), so they are hidden everywhere."""
    for part in url_secrets(url or ""):
        register_secret(part)


def redact(text: str) -> str:
    """Replace every known key value, anything shaped like a key and the secret parts of URLs with ***."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
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

    def error(self, message: str) -> NoReturn:
        super().error(redact_message(message))
