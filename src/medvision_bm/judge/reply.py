"""Reading a judge's reply: decoding it tolerantly, checking it against the contract, verifying its span against
the response, and the strict-first decision (upstream's ``script/llm-parsing/`` @2f20f64, rules in
``medvision_bm.judge.run``'s docstring)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import NotRequired, TypedDict

import orjson

from medvision_bm.jsontypes import JsonMapping, JsonObject, JsonValue
from medvision_bm.judge import prompt as jp
from medvision_bm.limits import MAX_JSON_INT, json_depth_ok
from medvision_bm.tasks.upstream_parse import STRICT_NUMBER_RE

# ----------------------------------------------------------------------------------------------------------------
# decoding the judge's reply

_FINAL_MARKERS = ("<|channel|>final<|message|>", "assistantfinal")
_END_TOKENS = ("<|return|>", "<|end|>", "<|endoftext|>")
_MAX_STARTS = 64
_MAX_SCAN = 400_000
_SIMPLE_ESCAPES = set('"\\/bfnrt')
_HEX = set("0123456789abcdefABCDEF")


def final_channel(text: str | None) -> str:
    """The judge's final channel: the text after the last harmony final marker (if any), end tokens cut."""
    text = text or ""
    for marker in _FINAL_MARKERS:
        if marker in text:
            text = text.rsplit(marker, 1)[1]
            break
    for tok in _END_TOKENS:
        at = text.find(tok)
        if at >= 0:
            text = text[:at]
    return text.strip()


def _balanced_end(text: str, start: int, budget: int) -> tuple[int | None, int]:
    depth, in_str, esc = 0, False, False
    stop = min(len(text), start + budget)
    for i in range(start, stop):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1, i + 1 - start
    return None, stop - start


def json_candidates(text: str) -> Iterator[str]:
    """Every balanced ``{...}`` substring, one independent scan per opening brace (bounded)."""
    budget, starts, pos = _MAX_SCAN, 0, 0
    while starts < _MAX_STARTS and budget > 0:
        start = text.find("{", pos)
        if start < 0:
            return
        starts += 1
        end, used = _balanced_end(text, start, budget)
        budget -= used
        if end is not None:
            yield text[start:end]
        pos = start + 1


def _keep_latex(blob: str) -> str:
    """``\\b`` and ``\\f`` are legal JSON escapes but in a quoted response they are LaTeX (``\\boxed``, ``\\frac``)."""
    out, i = [], 0
    while i < len(blob):
        ch = blob[i]
        nxt = blob[i + 1] if i + 1 < len(blob) else ""
        if ch == "\\" and nxt == "\\":
            out.append("\\\\")
            i += 2
        elif ch == "\\" and nxt in "bf" and nxt:
            out.append("\\\\" + nxt)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _repair_escapes(blob: str) -> tuple[str, bool]:
    out, i, changed = [], 0, False
    while i < len(blob):
        ch = blob[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = blob[i + 1] if i + 1 < len(blob) else ""
        if nxt in _SIMPLE_ESCAPES and nxt:
            out.append(ch + nxt)
            i += 2
        elif nxt == "u" and len(blob) >= i + 6 and all(c in _HEX for c in blob[i + 2:i + 6]):
            out.append(blob[i:i + 6])
            i += 6
        else:
            out.append("\\\\")
            changed = True
            i += 1
    return "".join(out), changed


class NonFinite(str):
    """A JSON number that is not finite (``NaN``, ``Infinity``, ``-Infinity``, an overflowing ``1e999``), kept as its
    text so that a reply record stays a strict JSON line; it is still a number of the reply. Upstream's decoder
    (``json.loads``) reads these as float NaN / inf, and its shape check counts them as numbers, so the reply is
    recorded ok and only the span check refuses the values (judge_decode.py ``_is_number_list``, judge_verify.py
    ``_close`` @2f20f64). ``float()`` of the text gives the value back."""


def _finite_or_text(token: str) -> float | str:
    """A JSON number as a float when finite, else its text marked :class:`NonFinite`."""
    value = float(token)
    return value if math.isfinite(value) else NonFinite(token)


def _int_or_text(token: str) -> int | str:
    """A JSON integer when it is one a stored line can hold (``limits.MAX_JSON_INT``: orjson reads the judge's
    answers back); a longer one stays its text, so the reply is invalid (non_numeric_values) and still stored."""
    if len(token) > 20:
        return token
    value = int(token)
    return value if -MAX_JSON_INT <= value <= MAX_JSON_INT else token


def _loads(blob: str) -> JsonValue:
    """The reply's JSON, of the types its stored record can hold: a text that is not UTF-8 (a lone surrogate from
    ``\\ud800``) is no reply."""
    value: JsonValue = json.loads(blob, parse_float=_finite_or_text, parse_int=_int_or_text, parse_constant=NonFinite)
    if not json_depth_ok(value):
        raise ValueError("nested too deep")
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        raise ValueError("holds a value no stored line can hold") from None
    return value


def _load(blob: str) -> JsonValue:
    blob = _keep_latex(blob)
    try:
        return _loads(blob)
    except (ValueError, RecursionError):  # not JSON, or nested past what a reply can be
        pass
    repaired, changed = _repair_escapes(blob)
    if not changed:
        return None
    try:
        return _loads(repaired)
    except (ValueError, RecursionError):
        return None


def decode_reply(raw: str | None) -> tuple[JsonObject | None, str]:
    """The judge's object from its reply, or (None, why)."""
    text = final_channel(raw)
    if not text:
        return None, "empty_output"
    fallback: JsonObject | None = None
    seen = False
    for blob in json_candidates(text):
        seen = True
        obj = _load(blob)
        if not isinstance(obj, dict):
            continue
        if "final_answer" in obj:
            return obj, "ok"
        if fallback is None:
            fallback = obj
    if fallback is not None:
        if "index" not in fallback and "status" in fallback and ("span" in fallback or "values" in fallback):
            return {"final_answer": fallback}, "ok"  # the body of a final_answer whose outer object was cut
        return fallback, "ok"
    return None, "json_decode_error" if seen else "no_json_object"


def _numbers_list(values: object) -> bool:
    """Every element a JSON number (not a bool, not a string), non-finite ones included as upstream counts them."""
    return isinstance(values, list) and all(
        isinstance(v, (int, float, NonFinite)) and not isinstance(v, bool) for v in values)


def validate_reply(obj: JsonMapping, expects_steps: bool) -> tuple[bool, str]:
    """The contract's shape (not its plausibility: the span check settles that)."""
    fa = obj.get("final_answer")
    if not isinstance(fa, dict):
        return False, "missing_final_answer"
    status = fa.get("status")
    if status not in jp.FINAL_ANSWER_STATUSES:
        return False, "bad_status"
    values = fa.get("values")
    if status == "present":
        if not isinstance(fa.get("span"), str) or not fa["span"].strip():
            return False, "missing_span"
        if not isinstance(values, list) or not values:
            return False, "missing_values"
        if not _numbers_list(values):
            return False, "non_numeric_values"
    elif values and not (_numbers_list(values) and all(v == 0 for v in values)):
        return False, "values_with_non_present_status"
    if expects_steps and obj.get("steps") is not None and not isinstance(obj.get("steps"), list):
        return False, "bad_steps"
    return True, "ok"


# ----------------------------------------------------------------------------------------------------------------
# span verification

_WS = re.compile(r"\s+")
_TRAILING_TAG = re.compile(r"\s*</[A-Za-z][\w-]*>\s*$")
_QUOTES = (('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("`", "`"))
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_DELIMS = (("\\[", "["), ("\\]", "]"), ("\\(", "("), ("\\)", ")"))
_CTRL = (("\x08", "\\b"), ("\x0c", "\\f"))


def find_numbers(text: str | None) -> list[str]:
    return [m.replace(",", "") for m in STRICT_NUMBER_RE.findall(text or "")]


def _close(a: float, b: float) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _run_at(found: list[float], want: list[float]) -> int:
    """Start of ``want`` as a contiguous run in ``found``, searching from the end; -1 when absent."""
    n, k = len(found), len(want)
    for start in range(n - k, -1, -1) if 0 < k <= n else ():
        if all(_close(found[start + j], want[j]) for j in range(k)):
            return start
    return -1


def _floats(tokens: list[str]) -> list[float] | None:
    try:
        return [float(t) for t in tokens]
    except ValueError:
        return None


def _uncontrol(text: str) -> str:
    for ctrl, lit in _CTRL:
        text = text.replace(ctrl, lit)
    return text


def _key(text: str) -> str:
    text = _BOXED.sub(r"\1", _uncontrol(str(text)))
    for a, b in _DELIMS:
        text = text.replace(a, b)
    return _WS.sub("", text).casefold()


def _span_variants(span: str) -> list[str]:
    base = _uncontrol(str(span)).strip()
    unquoted = base
    for a, b in _QUOTES:
        if len(unquoted) >= 2 and unquoted.startswith(a) and unquoted.endswith(b):
            unquoted = unquoted[1:-1].strip()
            break
    out: list[str] = []
    for c in (base, unquoted, _TRAILING_TAG.sub("", base).strip(), _TRAILING_TAG.sub("", unquoted).strip()):
        if c and c not in out:
            out.append(c)
    return out


class SpanCheck(TypedDict):
    """What :func:`verify_span` found: whether the values are in the text, why not, the tier that found them
    (``exact`` | ``normalized`` | ``value_anchor``, only when found) and the numbers as the text writes them."""

    ok: bool
    reason: str
    tier: NotRequired[str]
    numbers: list[str]


def verify_span(response: str, span: object, values: object, arity: int) -> SpanCheck:
    """Whether the judge's values are in its quoted span (or, failing that, in the response); the numbers to score
    are transcribed from the text. Returns {ok, reason, tier?, numbers}."""
    def fail(why: str) -> SpanCheck:
        return {"ok": False, "reason": why, "numbers": []}

    if not isinstance(span, str) or not span.strip():
        return fail("empty_span")
    if not isinstance(values, list) or len(values) != arity:
        return fail(f"arity_mismatch:{len(values) if isinstance(values, list) else 0}!={arity}")
    try:
        want = [float(v) for v in values]
    except (TypeError, ValueError, OverflowError):  # an integer past a float's range is no value either
        return fail("non_numeric")

    def accept(source: str, tier: str) -> SpanCheck:
        tokens = find_numbers(source)
        found = _floats(tokens)
        if not tokens or found is None:
            return fail("no_numbers_in_span")
        at = _run_at(found, want)
        if at < 0:
            return fail("values_not_in_span")
        return {"ok": True, "reason": "ok", "tier": tier, "numbers": tokens[at:at + len(want)]}

    located = False
    if _WS.sub(" ", span).strip() in _WS.sub(" ", response).strip():
        exact = accept(span, "exact")
        if exact["ok"]:
            return exact
        located = True
    resp_key = _key(response)
    resp_numbers = _floats(find_numbers(response)) or []
    for variant in _span_variants(span):
        if _key(variant) in resp_key:
            got = accept(variant, "normalized")
            if got["ok"]:
                nums = _floats(got["numbers"]) or []
                return got if _run_at(resp_numbers, nums) >= 0 else fail("normalized_values_not_in_response")
            located = True
            break
    if all(v == 0 for v in want):
        return fail("all_zero_value_anchor")
    anchored = accept(response, "value_anchor")
    if anchored["ok"]:
        return anchored
    return fail("values_not_in_span" if located else "span_not_found")


def _answer_status(rec: JsonMapping) -> object:
    """The status of a judge record's final answer (None without one)."""
    fa = rec.get("final_answer") or {}
    return fa.get("status") if isinstance(fa, dict) else None


def decide(strict_ok: bool, rec: JsonMapping | None, verified: SpanCheck | None) -> tuple[str, str]:
    """(answer mode, reason) by upstream's decision table: strict first; then only a verified judge answer."""
    if rec is None:
        reason = "no_judge_record"
    elif rec.get("status") != "ok":
        reason = f"judge_invalid:{rec.get('reason') or 'unknown'}"
    elif _answer_status(rec) == "no_conclusion":
        reason = "judge_no_conclusion"
    elif verified is None:
        reason = "span_not_checked"
    else:
        reason = "ok" if verified.get("ok") else f"span_{verified.get('reason') or 'unverified'}"
    if strict_ok:
        return "conclusion_in_format", reason
    if rec is None or rec.get("status") != "ok":
        return "undetermined", reason
    if _answer_status(rec) == "no_conclusion":
        return "no_conclusion", reason
    if verified is not None and verified.get("ok"):
        return "conclusion_off_format", reason
    return "undetermined", reason
