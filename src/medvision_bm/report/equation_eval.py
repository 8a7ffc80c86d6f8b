"""The equation a -CoT answer writes, rewritten into an expression and evaluated by a restricted walker (numbers,
``+ - * / **``, parentheses and a fixed list of functions; never Python's ``eval``).

Upstream's equation accuracy (YongchengYAO/MedVision ``script/analyze/equation-accuracy/
analyze_equation_accuracy_TL.py`` @28f6c67 and ``analyze_equation_accuracy_AD.py`` @286f632; described in
``skills/medvision/sub-skills/analysis/references/process-and-equation-accuracy.md`` @39dd6bf) takes the last
balanced ``sqrt(...)`` (distances) or ``arccos(...)`` (angles) of a step's reasoning, rewrites ``|x|`` as ``abs(x)``,
``a^b`` as ``(a)**b`` (a bare, possibly negative, number before ``^`` in parentheses, so ``-24.0^2`` is
``(-24.0)**2``), the remaining ``^`` as ``**`` and ``arccos``/``arcsin``/``arctan2``/``arctan``/``sqrt`` as their
``math`` names, wraps an angle in ``degrees(...)``, and evaluates it with every number as a float. The functions it
allows: sqrt, acos, asin, atan, atan2, degrees, abs. Anything else is refused with :class:`EquationError`.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable

#: The longest expression evaluated (characters); a longer one is refused (a step's formula is a line or two).
MAX_EXPRESSION_CHARS = 4000
#: Upstream's notation -> the function names the walker knows, replaced in this order (``arctan2`` before ``arctan``).
FUNCTION_REWRITES: tuple[tuple[str, str], ...] = (("arccos", "math.acos"), ("arcsin", "math.asin"),
                                                  ("arctan2", "math.atan2"), ("arctan", "math.atan"),
                                                  ("sqrt", "math.sqrt"))
FUNCTIONS: dict[str, Callable[..., float]] = {"sqrt": math.sqrt, "acos": math.acos, "asin": math.asin,
                                              "atan": math.atan, "atan2": math.atan2, "degrees": math.degrees,
                                              "abs": abs}
_BARE_BASE = re.compile(r"(-?\d+(?:\.\d+)?)\^")


class EquationError(ValueError):
    """An expression outside the walker's grammar, or one whose value cannot be computed (its message is the
    record's ``step<k>_eval_error``)."""


def last_call(text: str, name: str) -> str | None:
    """The last ``name(...)`` in ``text`` with its parentheses balanced (``None``: no such call, or it never
    closes)."""
    start = text.rfind(name + "(")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len(name), len(text)):
        ch = text[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return None


def _bars_to_abs(expr: str) -> str:
    """``|x|`` -> ``abs(x)``: bars alternate between opening and closing (one level, as upstream reads them)."""
    out, opened = [], False
    for ch in expr:
        if ch == "|":
            out.append(")" if opened else "abs(")
            opened = not opened
        else:
            out.append(ch)
    return "".join(out)


def to_expression(raw: str, degrees: bool = False) -> str:
    """A formula as the model wrote it -> the expression the walker evaluates (upstream's rewrites, in order)."""
    expr = _bars_to_abs(raw)
    expr = _BARE_BASE.sub(r"(\1)**", expr)
    expr = expr.replace("^", "**")
    for name, rewritten in FUNCTION_REWRITES:
        expr = expr.replace(name + "(", rewritten + "(")
    return f"math.degrees({expr})" if degrees else expr


def _function_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "math":
        return func.attr
    raise EquationError(f"Unsupported call: {ast.unparse(func)!r}")


def _walk(node: ast.expr) -> float:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise EquationError(f"Unsupported constant: {value!r}")
        return float(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _walk(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _walk(node.left), _walk(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            return left / right
        if isinstance(node.op, ast.Pow):
            return left ** right
        raise EquationError(f"Unsupported operator: {type(node.op).__name__}")
    if isinstance(node, ast.Call):
        name = _function_name(node.func)
        fn = FUNCTIONS.get(name)
        if fn is None:
            raise EquationError(f"Disallowed function: {name!r}")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise EquationError(f"Unsupported arguments to {name!r}")
        return float(fn(*[_walk(a) for a in node.args]))
    raise EquationError(f"Unsupported AST node: {type(node).__name__}")


def evaluate(expression: str) -> float:
    """The value of ``expression`` (the grammar above, every number a float). Raises :class:`EquationError` for
    anything outside the grammar and for a value that cannot be computed (division by zero, a math domain error,
    an overflow, a complex power), with the message the per-sample record keeps."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise EquationError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise EquationError(f"not an expression: {type(exc).__name__}") from None
    try:
        value = _walk(tree.body)
    except EquationError:
        raise
    except RecursionError:
        raise EquationError("expression nested too deeply") from None
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise EquationError(str(exc)) from None
    if isinstance(value, complex):  # a negative number to a fractional power
        raise EquationError("complex value")
    return value
