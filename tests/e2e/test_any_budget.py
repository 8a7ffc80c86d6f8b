"""The package names ``typing.Any`` fewer than 10 times per 1,000 source lines: a JSON value is a ``JsonValue``, a
decoded one is narrowed by the typed readers of ``limits``, a pass-through value is ``object``, a third-party object
is named by its class. Counted on the syntax tree (a name or attribute ``Any`` in code, not in text or comments)."""

from __future__ import annotations

import ast

from mvtest_support import REPO

PACKAGE = REPO / "src" / "medvision_bm"
PER_THOUSAND_LIMIT = 10.0


def any_uses(source: str) -> int:
    """How many times ``Any`` is named in the code of one module (its import not counted)."""
    return sum(1 for node in ast.walk(ast.parse(source))
               if (isinstance(node, ast.Name) and node.id == "Any")
               or (isinstance(node, ast.Attribute) and node.attr == "Any"))


def test_the_counter_counts_names_and_attributes_not_texts() -> None:
    source = ('"""Any text that says Any."""\n'
              "import typing\nfrom typing import Any\n"
              "def f(x: Any, y: typing.Any) -> dict[str, Any]:  # Any here is a comment\n"
              "    return {'Any': x}\n")
    assert any_uses(source) == 3


def test_any_stays_under_ten_per_thousand_lines() -> None:
    per_file = {p: p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}
    lines = sum(text.count("\n") for text in per_file.values())
    uses = {p.relative_to(PACKAGE).as_posix(): any_uses(text) for p, text in per_file.items()}
    total = sum(uses.values())
    worst = sorted(((n, name) for name, n in uses.items() if n), reverse=True)[:8]
    assert lines > 10_000
    assert total * 1000 / lines < PER_THOUSAND_LIMIT, (
        f"{total} uses of Any in {lines} lines ({total * 1000 / lines:.1f} per 1,000); most in {worst}")
