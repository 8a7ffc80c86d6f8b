"""Upstream MedVision's answer parsers (medvision_bm.tasks.upstream_parse).

Pins:
* strict-1: upstream ``src/medvision_bm/utils/parse_utils.py`` ``extract_last_k_nums_within_answer_tag`` and ``_NUM_RE``,
  @2f20f64 (newer generation; used by ``benchmark/parse_outputs.py`` @1f4cc6c), behaviour
  documented in ``skills/medvision/sub-skills/results-parsing-and-metrics/references/metrics.md`` @39dd6bf.
* lastk-1: upstream master c221615 ``src/medvision_bm/medvision_lmms-eval/lmms_eval/tasks/medvision/medvision_utils.py``
  ``parser_last_k_nums`` (l.1080) and ``src/medvision_bm/utils/parse_utils.py`` ``extract_last_k_nums`` (l.39).
* number reading: ``np.float32(part.strip())`` in every upstream ``cal_metrics*`` / ``process_results_*``.
Spec: docs/spec/parser-metrics.md section 1 and docs/spec/scoring-rules.md.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medvision_bm.tasks.upstream_parse import (
    K_PER_FAMILY,
    PARSER_VERSIONS,
    REQUEST_FAILED,
    parse_lastk,
    parse_strict,
    parse_upstream,
)


def f32(x: float) -> float:
    return float(np.float32(x))


# ----------------------------------------------------------------------------------------------- strict-1


def test_strict_reads_the_answer_block():
    r = parse_strict("<think>box at 1, 2, 3, 4</think><answer>0.25, 0.25, 0.75, 0.75</answer>", 4)
    assert r.ok and r.parser == "strict-1"
    assert r.values == (0.25, 0.25, 0.75, 0.75)
    assert r.tokens == ("0.25", "0.25", "0.75", "0.75")
    assert r.filtered_resps == "0.25,0.25,0.75,0.75"


def test_strict_takes_the_first_closed_block_not_the_last():
    r = parse_strict("<answer>1, 2</answer> on reflection <answer>3, 4</answer>", 2)
    assert r.values == (1.0, 2.0)


def test_strict_unclosed_or_missing_tag_is_a_failure():
    for text in ("<answer>0.1, 0.2, 0.5, 0.6", "The box is 0.1, 0.2, 0.5, 0.6", "<ANSWER>1,2,3,4</ANSWER>", ""):
        r = parse_strict(text, 4)
        assert r.status == "parse_failed" and r.values is None and r.filtered_resps == ""


def test_strict_answer_inside_think_counts_and_nested_open_tag():
    assert parse_strict("<think><answer>1</answer></think><answer>2</answer>", 1).values == (1.0,)
    # the block runs from the first <answer> to the first </answer>
    assert parse_strict("<answer>a <answer>7</answer>", 1).values == (7.0,)


def test_strict_last_k_numbers_of_the_block():
    r = parse_strict("<answer>12.5 mm x 8.2 mm (slice 42)</answer>", 2)  # metrics.md: wrong answer, not a failure
    assert r.values == (f32(8.2), 42.0) and r.tokens == ("8.2", "42")
    assert parse_strict("<answer>12.5</answer>", 2).status == "parse_failed"


def test_strict_thousands_separators():
    assert parse_strict("<answer>8,000.25</answer>", 1).values == (8000.25,)
    assert parse_strict("<answer>8,000.25</answer>", 1).tokens == ("8000.25",)
    assert parse_strict("<answer>12,345,678.9</answer>", 1).tokens == ("12345678.9",)
    # "1,2" is two numbers; "1,2345" is 1,234 then 5
    assert parse_strict("<answer>1,2</answer>", 2).values == (1.0, 2.0)
    assert parse_strict("<answer>1,2345</answer>", 2).tokens == ("1234", "5")
    # comma-joined 3-digit integers merge into one number: four pixel coordinates become one
    merged = parse_strict("<answer>100,200,300,400</answer>", 4)
    assert merged.status == "parse_failed"
    assert parse_strict("<answer>100,200,300,400</answer>", 1).values == (f32(100200300400),)
    assert parse_strict("<answer>0.100,0.200</answer>", 2).values == (f32(0.1), f32(0.2))


def test_strict_signs_exponents_and_leading_dot():
    assert parse_strict("<answer>-12.5</answer>", 1).values == (-12.5,)
    assert parse_strict("<answer>+3</answer>", 1).values == (3.0,)
    assert parse_strict("<answer>+3</answer>", 1).tokens == ("+3",)
    assert parse_strict("<answer>.5</answer>", 1).values == (5.0,)
    assert parse_strict("<answer>-.5</answer>", 1).values == (5.0,)
    assert parse_strict("<answer>5.</answer>", 1).tokens == ("5",)
    assert parse_strict("<answer>1.5e-3</answer>", 1).values == (f32(0.0015),)
    assert parse_strict("<answer>2E+2</answer>", 1).values == (200.0,)
    assert parse_strict("<answer>1,000e3</answer>", 1).values == (1e6,)
    assert parse_strict("<answer>3-5</answer>", 2).values == (3.0, -5.0)
    assert parse_strict("<answer>\u22125</answer>", 1).values == (5.0,)  # U+2212 minus is not a sign


def test_values_are_float32_rounded():
    r = parse_strict("<answer>0.1</answer>", 1)
    assert r.values == (f32(0.1),) and r.values[0] != 0.1
    assert r.tokens == ("0.1",)


def test_float32_overflow_is_inf_and_still_parsed():
    r = parse_strict("<answer>1e39</answer>", 1)
    assert r.ok and math.isinf(r.values[0])


def test_non_ascii_digits_are_read_like_numpy_reads_them():
    assert parse_strict("<answer>\u0663</answer>", 1).values == (3.0,)  # Arabic-Indic three
    assert parse_lastk("\uff13", 1).values == (3.0,)  # full-width three


# ----------------------------------------------------------------------------------------------- lastk-1


def test_lastk_reads_the_whole_text():
    r = parse_lastk("The box is 0.25, 0.25, 0.75, 0.75", 4)
    assert r.ok and r.parser == "lastk-1" and r.values == (0.25, 0.25, 0.75, 0.75)
    assert parse_lastk("<answer>1, 2</answer> on reflection <answer>3, 4</answer>", 2).values == (3.0, 4.0)
    assert parse_lastk("<answer>0.1, 0.2, 0.5, 0.75", 4).ok  # no tag needed


def test_lastk_regex_details():
    assert parse_lastk("8,000.25", 2).tokens == ("8", "000.25")
    assert parse_lastk("1e5", 2).values == (1.0, 5.0)
    assert parse_lastk("1.5E-3", 2).values == (1.5, -3.0)
    assert parse_lastk("+3", 1).tokens == ("3",)
    assert parse_lastk("5.", 1).tokens == ("5.",) and parse_lastk("5.", 1).values == (5.0,)
    assert parse_lastk(".5", 1).values == (5.0,)
    assert parse_lastk("date 2024-01-02", 2).values == (-1.0, -2.0)
    assert parse_lastk("only 1 number", 2).status == "parse_failed"


# ----------------------------------------------------------------------------------------------- both


@pytest.mark.parametrize("parse", [parse_strict, parse_lastk])
def test_request_failure_markers_are_never_read(parse):
    for text in ("[MEDVISION_REQUEST_FAILED] HTTP 429 <answer>1</answer>", "[LMMS_EVAL_REQUEST_FAILED: 500 503]"):
        r = parse(text, 1)
        assert r.status == REQUEST_FAILED and r.values is None and r.filtered_resps == ""


@pytest.mark.parametrize("parse", [parse_strict, parse_lastk])
def test_bad_inputs_fail_without_raising(parse):
    for text in (None, b"<answer>1</answer>", 5, ["<answer>1</answer>"]):
        assert parse(text, 1).status == "parse_failed"
    for k in (0, -1, True, 1.5, None, "1"):
        assert parse("<answer>1</answer>", k).status == "parse_failed"


def test_dispatch_and_versions():
    assert set(PARSER_VERSIONS) == {"strict-1", "lastk-1"}
    assert K_PER_FAMILY == {"detect": 4, "TL": 2, "AD": 1}
    assert parse_upstream("<answer>1</answer>", 1).parser == "strict-1"
    assert parse_upstream("1", 1, "lastk-1").values == (1.0,)
    assert parse_upstream("1", 1, "nope").status == "parse_failed"
    assert parse_upstream("1", 1, None).status == "parse_failed"


_FRAGMENTS = st.sampled_from(
    ["<answer>", "</answer>", "<think>", "</think>", "1,000", "-", "+", ".", "e5", "E-", " ", ",", "abc", "\uff13",
     "12.5", "0.25", "1e39", "9" * 50, "[MEDVISION_REQUEST_FAILED]", "\n", "<ANSWER>"]
)
_TEXTS = st.one_of(st.text(), st.lists(_FRAGMENTS, max_size=30).map("".join))
_KS = st.one_of(st.integers(min_value=-3, max_value=8), st.none(), st.floats(), st.booleans(), st.text(max_size=2))


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(_TEXTS, st.none(), st.integers(), st.binary()), k=_KS)
def test_parsers_never_raise(text, k):
    for parser in ("strict-1", "lastk-1"):
        r = parse_upstream(text, k, parser)
        assert r.status in ("ok", "parse_failed", "request_failed")
        if r.ok:
            assert len(r.values) == len(r.tokens) == k
            assert all(isinstance(v, float) and not math.isnan(v) for v in r.values)
            assert r.filtered_resps.count(",") == k - 1
        else:
            assert r.values is None and r.filtered_resps == ""
        if r.ok and parser == "strict-1":
            assert "</answer>" in text
