"""The answer parser: tags, thinking blocks, last-k numbers; never raises, never reads failure markers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from medvision_bm.tasks.parse import FAILURE_MARKERS, parse_answer


def test_last_answer_tag_wins_and_thinking_is_dropped():
    text = "<think>maybe 1, 2, 3, 4 or <answer>9,9,9,9</answer></think> draft <answer>0.1, 0.2, 0.3, 0.4</answer>"
    assert parse_answer(text, 4).values == (0.1, 0.2, 0.3, 0.4)
    text = "<answer>1 2</answer> then <answer>3 and 4</answer>"
    assert parse_answer(text, 2).values == (3.0, 4.0)


def test_last_k_numbers_without_tags():
    assert parse_answer("The major axis is 12.5 mm and the minor axis is 7 mm.", 2).values == (12.5, 7.0)
    assert parse_answer("angle: -3e1 degrees", 1).values == (-30.0,)


def test_unclosed_think_block_hides_everything_after_it():
    res = parse_answer("<think>the answer is 4.2", 1)
    assert res.status == "parse_failed" and res.values is None


def test_answer_cut_by_a_stop_string_still_parses():
    assert parse_answer("<think>x=1</think><answer>10.5, 3", 2).values == (10.5, 3.0)


def test_too_few_numbers_is_a_parse_failure():
    res = parse_answer("<answer>0.1, 0.2, 0.3</answer>", 4)
    assert res.status == "parse_failed" and not res.ok


def test_failure_markers_are_request_failures():
    for marker in ("[LMMS_EVAL_REQUEST_FAILED after 3 retries] 500 0.1 0.2", "[MEDVISION_REQUEST_FAILED] 1 2 3 4"):
        res = parse_answer(marker, 1)
        assert res.status == "request_failed" and res.values is None


def test_non_text_is_a_parse_failure():
    assert parse_answer(None, 1).status == "parse_failed"
    assert parse_answer(12, 1).status == "parse_failed"


@settings(max_examples=400, deadline=None)
@given(st.text(), st.integers(min_value=1, max_value=4))
def test_never_raises_and_returns_exactly_k_finite_numbers(text, k):
    res = parse_answer(text, k)
    assert res.status in ("ok", "parse_failed", "request_failed")
    if res.ok:
        assert len(res.values) == k
        assert all(v == v and abs(v) != float("inf") for v in res.values)
    else:
        assert res.values is None


@settings(max_examples=200, deadline=None)
@given(st.text(), st.sampled_from(FAILURE_MARKERS), st.text(), st.lists(st.floats(-1e6, 1e6), max_size=6))
def test_never_reads_numbers_from_a_failure_marker(prefix, marker, suffix, numbers):
    text = prefix + marker + " ".join(str(n) for n in numbers) + suffix
    res = parse_answer(text, 1)
    assert res.status == "request_failed" and res.values is None
