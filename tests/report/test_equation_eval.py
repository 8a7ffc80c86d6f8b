"""The restricted evaluator of the models' formulas: upstream's rewrites (YongchengYAO/MedVision
script/analyze/equation-accuracy/analyze_equation_accuracy_TL.py @28f6c67, analyze_equation_accuracy_AD.py @286f632:
``_to_python_expr``, ``_extract_func_call``, ``_compute_expr``) and its refusal of anything outside its grammar."""

from __future__ import annotations

import math

import pytest

from medvision_bm.report.equation_eval import (
    MAX_EXPRESSION_CHARS,
    EquationError,
    evaluate,
    last_call,
    to_expression,
)


@pytest.mark.parametrize(("raw", "expected"), [
    # a bare (negative) number before ^ is the base: -24.0^2 is (-24.0)**2 = 576, not -576
    ("sqrt(-24.0^2 + 7^2)", 25.0),
    ("sqrt((0.5 - 0.2)^2 + (0.1 - 0.5)^2)", 0.5),
    ("sqrt(|3 - 6|^2 + |8 - 4|^2)", 5.0),  # |x| -> abs(x)
    ("sqrt(2*(1.5)^2 * 2)", 3.0),
])
def test_distance_formulas_as_upstream_reads_them(raw: str, expected: float) -> None:
    assert evaluate(to_expression(raw)) == pytest.approx(expected, rel=1e-12)


def test_rewrites_are_upstreams() -> None:
    assert to_expression("sqrt(-24.0^2 + 7^2)") == "math.sqrt((-24.0)**2 + (7)**2)"
    assert to_expression("arccos(|a|)", degrees=True) == "math.degrees(math.acos(abs(a)))"
    assert to_expression("arctan2(1, 1) + arctan(1)") == "math.atan2(1, 1) + math.atan(1)"


def test_angles_are_read_in_degrees() -> None:
    assert evaluate(to_expression("arccos(0.5)", degrees=True)) == pytest.approx(60.0)
    assert evaluate(to_expression("arccos((3*0 + 4*4) / (5 * 4))", degrees=True)) == pytest.approx(
        math.degrees(math.acos(0.8)))


def test_the_last_balanced_call_is_taken() -> None:
    text = "first sqrt(1 + 1) then L = sqrt((3)^2 + (4)^2) = 5"
    assert last_call(text, "sqrt") == "sqrt((3)^2 + (4)^2)"
    assert last_call("sqrt(1 + (2", "sqrt") is None  # never closes
    assert last_call("no formula", "sqrt") is None


@pytest.mark.parametrize("expr", [
    "log(10)",  # a function outside the list
    "__import__('os').system('true')",
    "os.system('true')",  # an attribute of anything but math
    "math.log(2)",
    "x + 1",  # a name
    "(1).real",
    "[1, 2][0]",
    "'12'",
    "True + 1",
    "1 if 1 else 2",
    "1 < 2",
    "3 ^ 1",  # bitwise operators (upstream's ^ is rewritten before evaluation)
    "7 // 2",
    "7 % 2",
    "(lambda: 1)()",
    "sqrt(x=4)",
    "sqrt(*[4])",
    "sum(i for i in [1])",
    "1; 2",
    "",
])
def test_everything_outside_the_grammar_is_refused(expr: str) -> None:
    with pytest.raises(EquationError):
        evaluate(expr)


def test_the_refusal_names_the_function() -> None:
    with pytest.raises(EquationError, match="Disallowed function: 'log'"):
        evaluate("log(3)")


@pytest.mark.parametrize("expr", ["1 / 0", "math.acos(1.5)", "math.sqrt(-1)", "10.0 ** 400", "(-8) ** 0.5",
                                  "1e400 * 0 + 10 ** 1000"])
def test_values_that_cannot_be_computed_are_errors_not_crashes(expr: str) -> None:
    with pytest.raises(EquationError):
        evaluate(expr)


def test_size_and_depth_are_bounded() -> None:
    with pytest.raises(EquationError, match="longer than"):
        evaluate("1+" * MAX_EXPRESSION_CHARS + "1")
    with pytest.raises(EquationError):
        evaluate("(" * 1500 + "1" + ")" * 1500)
    assert evaluate("-(+(-2)) * 3 ** 2 / 4 - 1") == pytest.approx(3.5)
