"""Upstream MedVision's two answer parsers, as pure functions (spec: docs/spec/scoring-rules.md).

``strict-1``  the newer parser (upstream ``utils/parse_utils.py`` ``extract_last_k_nums_within_answer_tag``
              @2f20f64; used by ``parse_outputs`` @1f4cc6c for every family): the content of the FIRST closed
              ``<answer>...</answer>`` block (case-sensitive), no block -> failure; inside it every number matched by
              ``STRICT_NUMBER_RE`` (optional sign, thousands separators, decimals, exponent) with the separators
              removed; the last k of them.
``lastk-1``   the paper-era parser (master c221615 ``medvision_utils.parser_last_k_nums`` and
              ``parse_utils.extract_last_k_nums``): every match of ``LASTK_NUMBER_RE`` in the whole text; the last k.

Both then read each selected number the way upstream scores it: ``numpy.float32(token)`` (a prediction is rounded to
float32 before any metric). A token numpy cannot read makes the sample a failure, as upstream's ``try/except`` does;
a float32 overflow gives ``inf`` and stays a success, as upstream.

Ours on top (not upstream): a response carrying a request-failure marker (ours or lmms-eval's) is a request failure and
is never read for numbers. Nothing here raises, whatever the input.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np


class Parser(StrEnum):
    """The parser names recorded with parsed results (a name changes whenever its parser's behaviour does)."""

    STRICT = "strict-1"
    LASTK = "lastk-1"


class SampleStatus(StrEnum):
    """What became of one selected sample: scored (``ok``), an answer with no numbers upstream's parser reads
    (``parse_failed``), a request that failed (``request_failed``), or no answer yet (``missing``)."""

    OK = "ok"
    PARSE_FAILED = "parse_failed"
    REQUEST_FAILED = "request_failed"
    MISSING = "missing"

    @property
    def answered(self) -> bool:
        """An answer is stored (parsed or not)."""
        return self in (SampleStatus.OK, SampleStatus.PARSE_FAILED)


#: Parser names recorded with parsed results, and what each one is.
PARSER_VERSIONS: dict[str, str] = {
    Parser.STRICT.value: "upstream strict parser: first closed <answer> block, last k numbers with thousands separators and "
    "exponents (parse_utils.extract_last_k_nums_within_answer_tag @2f20f64)",
    Parser.LASTK.value: "upstream paper-era parser: last k numbers of the whole text, regex -?\\d+\\.?\\d* "
    "(master c221615 medvision_utils.parser_last_k_nums / parse_utils.extract_last_k_nums)",
}
DEFAULT_PARSER = Parser.STRICT

#: How many numbers an answer of each family holds (upstream parse_outputs: AD 1, TL 2, Detection 4).
K_PER_FAMILY: dict[str, int] = {"detect": 4, "TL": 2, "AD": 1}

#: The text our model classes hand lmms-eval for a sample whose request failed (never a model answer).
OUR_FAILURE_MARKER = "[MEDVISION_REQUEST_FAILED]"
#: Request-failure markers: ours and lmms-eval's.
REQUEST_FAILURE_MARKERS: tuple[str, ...] = ("[MEDVISION_REQUEST_FAILED", "[LMMS_EVAL_REQUEST_FAILED")

#: The first closed answer block (upstream: re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)).
ANSWER_BLOCK_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
#: Upstream parse_utils._NUM_RE (newer generation).
STRICT_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
#: Upstream paper-era number pattern.
LASTK_NUMBER_RE = re.compile(r"-?\d+\.?\d*")

OK = SampleStatus.OK
PARSE_FAILED = SampleStatus.PARSE_FAILED
REQUEST_FAILED = SampleStatus.REQUEST_FAILED


@dataclass(frozen=True)
class UpstreamParse:
    """What one parser made of one answer.

    ``tokens`` are the selected number strings as upstream stores them (thousands separators removed);
    ``values`` are those tokens read as float32 and widened to Python floats (what upstream scores with).
    """

    status: SampleStatus  # ok, parse_failed or request_failed
    parser: str
    values: tuple[float, ...] | None = None
    tokens: tuple[str, ...] | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def filtered_resps(self) -> str:
        """Upstream's ``filtered_resps[0]``: the tokens joined by commas, or "" when the answer did not parse."""
        return ",".join(self.tokens) if self.ok and self.tokens is not None else ""


def is_request_failure(text: str) -> bool:
    """Whether a response is a request-failure marker rather than a model answer."""
    return any(marker in text for marker in REQUEST_FAILURE_MARKERS)


def _failed(parser: str, reason: str, status: SampleStatus = PARSE_FAILED) -> UpstreamParse:
    return UpstreamParse(status=status, parser=parser, reason=reason)


def _valid_k(k: object) -> bool:
    return isinstance(k, int) and not isinstance(k, bool) and k >= 1


def _read_tokens(parser: str, tokens: list[str], k: int) -> UpstreamParse:
    """The last k tokens read as float32, or a failure when there are fewer or numpy cannot read one."""
    if len(tokens) < k:
        return _failed(parser, f"found {len(tokens)} numbers, need {k}")
    chosen = tuple(tokens[-k:])
    values: list[float] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float32 overflow -> inf with a RuntimeWarning, as upstream
        for token in chosen:
            try:
                values.append(float(np.float32(token)))
            except (ValueError, TypeError, OverflowError):
                return _failed(parser, f"number {token!r} is not readable")
    return UpstreamParse(status=OK, parser=parser, values=tuple(values), tokens=chosen)


def _strict_tokens(text: str) -> list[str] | str:
    block = ANSWER_BLOCK_RE.search(text)
    if block is None:
        return "no closed <answer>...</answer> block"
    return [m.replace(",", "") for m in STRICT_NUMBER_RE.findall(block.group(1))]


def _lastk_tokens(text: str) -> list[str] | str:
    return LASTK_NUMBER_RE.findall(text)


def _parse(parser: str, tokens_of: Callable[[str], list[str] | str], text: object, k: int) -> UpstreamParse:
    """The checks both parsers share, then their own token selection (a str from ``tokens_of`` is a failure)."""
    try:
        if not isinstance(text, str):
            return _failed(parser, "answer is not text")
        if not _valid_k(k):
            return _failed(parser, f"k must be a positive integer, got {k!r}")
        if is_request_failure(text):
            return _failed(parser, "request failure marker", REQUEST_FAILED)
        tokens = tokens_of(text)
        return _failed(parser, tokens) if isinstance(tokens, str) else _read_tokens(parser, tokens, k)
    except Exception as exc:  # pragma: no cover - defensive: the parser never raises
        return _failed(parser, f"internal error: {type(exc).__name__}")


def parse_strict(text: object, k: int) -> UpstreamParse:
    """``strict-1``: the last k numbers inside the first closed ``<answer>...</answer>`` block."""
    return _parse(Parser.STRICT, _strict_tokens, text, k)


def parse_lastk(text: object, k: int) -> UpstreamParse:
    """``lastk-1``: the last k numbers of the whole text (paper era)."""
    return _parse(Parser.LASTK, _lastk_tokens, text, k)


_PARSERS: dict[str, Callable[[object, int], UpstreamParse]] = {Parser.STRICT: parse_strict, Parser.LASTK: parse_lastk}


def parse_upstream(text: object, k: int, parser: str = DEFAULT_PARSER) -> UpstreamParse:
    """Parse with the named parser (a key of ``PARSER_VERSIONS``); an unknown name is a parse failure."""
    fn = _PARSERS.get(parser) if isinstance(parser, str) else None
    if fn is None:
        name = parser if isinstance(parser, str) else "?"
        return _failed(name, f"unknown parser {name!r}; known: {', '.join(PARSER_VERSIONS)}")
    return fn(text, k)
