"""Answer parsing: drop thinking blocks, take the last answer tag's content, then its last k numbers.

Never raises on any text. A request-failure marker (ours or lmms-eval's) is a failure and is never read for numbers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

FAILURE_MARKERS = ("[LMMS_EVAL_REQUEST_FAILED", "[MEDVISION_REQUEST_FAILED")
OUR_FAILURE_MARKER = "[MEDVISION_REQUEST_FAILED]"

_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")

PARSER_VERSION = "parse-1"


@dataclass(frozen=True)
class ParseResult:
    status: str  # "ok" | "parse_failed" | "request_failed"
    values: tuple[float, ...] | None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def is_failure_marker(text: str) -> bool:
    return any(marker in text for marker in FAILURE_MARKERS)


def answer_region(text: str) -> str:
    """The part of an answer that holds the final numbers."""
    body = _THINK_BLOCK.sub(" ", text)
    opened = list(_THINK_OPEN.finditer(body))
    if opened:  # an unterminated thinking block: everything after it is thinking
        body = body[: opened[-1].start()]
    closes = list(_THINK_CLOSE.finditer(body))
    if closes:  # a stray closing tag (template opened the block): keep what follows it
        body = body[closes[-1].end():]
    blocks = _ANSWER_BLOCK.findall(body)
    if blocks:
        return blocks[-1]
    opens = list(_ANSWER_OPEN.finditer(body))
    if opens:  # an answer tag that was cut before it closed
        return body[opens[-1].end():]
    return body


def parse_answer(text: object, k: int) -> ParseResult:
    """Parse the last ``k`` finite numbers of an answer."""
    if not isinstance(text, str):
        return ParseResult("parse_failed", None, "answer is not text")
    if is_failure_marker(text):
        return ParseResult("request_failed", None, "request failure marker")
    region = answer_region(text)
    numbers: list[float] = []
    for match in _NUMBER.finditer(region):
        try:
            numbers.append(float(match.group()))
        except (ValueError, OverflowError):
            continue
    if len(numbers) < k:
        return ParseResult("parse_failed", None, f"found {len(numbers)} numbers, need {k}")
    values = tuple(numbers[-k:])
    if not all(math.isfinite(v) for v in values):
        return ParseResult("parse_failed", None, "non-finite number")
    return ParseResult("ok", values)
