"""Names a user or a results folder controls are written inert: CSV cells a spreadsheet would run as a formula get
OWASP's leading apostrophe (numbers stay numbers), Markdown cells show HTML, pipes, code and links as text; and the
sample browser finds answers in store files written with any JSON spacing."""

from __future__ import annotations

import csv
import html
import json
import os
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from medvision_bm.report.tables import csv_text
from medvision_bm.report.views import View, markdown
from phantom_runs import run_baseline, run_cli

pytestmark = pytest.mark.slow

#: Run names (model folders) that are formulas, HTML, a Markdown link, a pipe; and one that is a plain name.
NAMES = ("=1+2", "@SUM(1)", "+cmd", "-2+3", "\tlead", "<img src=x onerror=alert(1)>", "[click](javascript:alert(1))",
         "a|b", "plain")
DANGER = ("=", "+", "-", "@", "\t", "\r")


def test_csv_cells_that_start_a_formula_get_an_apostrophe_and_numbers_stay_numbers() -> None:
    frame = pl.DataFrame({"label": ["=1+2", "-0.5", "-", "@x", "\tx", "\rx", "+3", "1e-3", "-2+3", "ok", None],
                          "value": [-0.5, 1.0, -2.0, 0.0, 3.5, 1e-9, -1e6, None, 2.0, -0.25, 0.0]})
    rows = list(csv.reader(csv_text(frame).splitlines(keepends=True)))
    assert rows[0] == ["label", "value"]
    got = {r[0] for r in rows[1:]}
    assert {"'=1+2", "'@x", "'\tx", "'\rx", "'-2+3"} <= got
    assert {"-0.5", "-", "+3", "1e-3", "ok"} <= got  # plain numbers and our "none" mark stay as they are
    assert [r[1] for r in rows[1:4]] == ["-0.5", "1.0", "-2.0"]  # numeric columns are untouched


def test_markdown_cells_show_html_pipes_code_and_links_as_text() -> None:
    view = View("Runs <b>x</b>", ["Run", "N"], [["<script>alert(1)</script>", "1"], ["a|b`c`*d*", "2"],
                                                ["[x](javascript:alert(1))", "3"], ["two\nlines", "4"]],
                caption="<i>caption</i>")
    md = markdown(view)
    assert "<script>" not in md and "&lt;script&gt;" in md and "<b>" not in md and "<i>" not in md
    assert "a\\|b\\`c\\`\\*d\\*" in md
    assert "](javascript" not in md
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert len(lines) == 2 + 4 and all(ln.count(" | ") == 1 for ln in lines[2:]), "every row stays one row"


@pytest.fixture(scope="module")
def named_results(phantom_dir: Path, phantom_lists: Path, tmp_path_factory) -> Path:
    """The oracle on A/D (3 samples per task), copied under every name of NAMES as its model folder."""
    root = tmp_path_factory.mktemp("names")
    run_baseline("oracle", "AD", phantom_dir, root, "--sample_limit", "3", lists=phantom_lists)
    for name in NAMES:
        shutil.copytree(root / "oracle", root / name)
    shutil.rmtree(root / "oracle")
    return root


@pytest.fixture(scope="module")
def named_report(named_results: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("names-report") / "out"
    res = run_cli("summarize", "--results_dir", str(named_results), "--output_dir", str(out), "--n_boot", "100")
    assert res.returncode == 0, res.stderr
    return out


def test_report_csv_files_hold_no_live_formula(named_report: Path) -> None:
    labels = set()
    for path in named_report.glob("*.csv"):
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            for col, cell in row.items():
                if cell and cell.startswith(DANGER):
                    assert re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|-", cell), (path.name, col, cell)
            if "label" in row:
                labels.add(row["label"])
    assert {"'=1+2", "'@SUM(1)", "'+cmd", "'-2+3", "'\tlead", "plain", "a|b"} <= labels


def test_report_markdown_shows_names_as_text(named_report: Path) -> None:
    for path in [*named_report.glob("*.md")]:
        md = path.read_text()
        assert "<img" not in md and "](javascript" not in md, path.name
    board = (named_report / "leaderboard_AD.md").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in board and "a\\|b" in board and "\\[click\\]" not in board
    for table in board.split("### ")[1:]:
        rows = [ln for ln in table.splitlines() if ln.startswith("| ")]
        cells = [len(re.split(r"(?<!\\)\|", ln)) for ln in rows]
        assert len(rows) == 2 + len(NAMES) and len(set(cells)) == 1, "a pipe in a name never adds a column"
    page = (named_report / "index.html").read_text()
    assert "<img src=x onerror" not in page


@pytest.mark.parametrize("separators", [(", ", ": "), (" , ", " :  ")])
def test_the_sample_browser_finds_answers_in_files_with_any_json_spacing(phantom_dir: Path, phantom_lists: Path,
                                                                         tmp_path: Path, separators) -> None:
    root = tmp_path / "res"
    run_baseline("oracle", "AD", phantom_dir, root, "--sample_limit", "2", lists=phantom_lists)
    store = next(p.parent for p in root.rglob("parsed.jsonl"))
    texts = {}
    for path in [store / "docs.jsonl", *sorted((store / "samples").glob("*.jsonl"))]:
        recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        path.write_text("".join(json.dumps(r, separators=separators) + "\n" for r in recs))
        texts.update({r["key"]: r["text"] for r in recs if r.get("status") == "ok"})
    later = max(os.path.getmtime(p) for p in store.rglob("*.jsonl")) + 1
    os.utime(store / "parsed.jsonl", (later, later))  # still current: only the spacing changed
    key = sorted(texts)[0]
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(root), "--output_dir", str(out), "--n_boot", "100",
                  "--sample_keys", key, "--browse_per_task", "0", "--no_plots")
    assert res.returncode == 0, res.stderr
    page = (out / "index.html").read_text()
    assert html.escape(texts[key], quote=False) in page
    assert "(no answer stored)" not in page


def test_a_table_writes_each_cell_alike_whatever_its_rows_hold() -> None:
    from medvision_bm.report.html import table

    def body(rows: list[list[object]]) -> str:
        return table(View("t", ["Run", "Value"], rows, numeric=[False, True], row_classes=["x<y", ""]))  # type: ignore[arg-type]

    text = body([["a_b & <c>", "0.5 [0.4, 0.6]"], ["d", "5"]])
    assert ('<tr class="x&lt;y"><td>a_<wbr>b &amp; &lt;c&gt;</td><td class="num">0.5<br><span class="ci">'
            '[0.4, 0.6]</span></td></tr><tr><td>d</td><td class="num">5</td></tr>') in text
    # a cell that is no text is written as its text; a short row has only its own cells
    assert body([["a_b & <c>", "0.5 [0.4, 0.6]"], ["d", 5]]) == text
    assert body([["a_b & <c>", "0.5 [0.4, 0.6]"], ["d"]]).endswith(
        '<tr><td>d</td></tr></tbody></table></div>')
