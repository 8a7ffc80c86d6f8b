"""A table without a value is left out of the report (and of its Markdown) with one line saying why in its place:
a small detection run has no label group large enough for upstream's anatomy and tumor/lesion rows."""

from __future__ import annotations

import re
from pathlib import Path

from medvision_bm.report.views import View, markdown
from phantom_runs import run_baseline, run_cli


def test_a_small_runs_empty_detection_rows_are_left_out_with_their_reason(phantom_dir: Path, phantom_lists: Path,
                                                                         tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = run_baseline("oracle", "detect", phantom_dir, results / "MedVision-Phantom-detect", "--sample_limit", "8",
                       lists=phantom_lists)
    assert all(o.state == "done" for o in out)
    report = tmp_path / "report"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(report), "--no_plots",
                  "--n_boot", "100")
    assert res.returncode == 0, res.stderr
    html = (report / "index.html").read_text()
    for ident, row in (("leaderboard-detect-anatomy", "anatomy group"), ("leaderboard-detect-t-l",
                                                                         "tumor/lesion group")):
        assert f'<table id="{ident}"' not in html
        line = re.search(rf'<p class="muted left-out" id="{ident}"[^>]*>([^<]*)</p>', html)
        assert line, ident
        assert line.group(1).startswith("Left out: no label group of any run qualifies") and row in line.group(1)
    assert '<table id="leaderboard-detect-all-regions"' in html  # every region: the small run has values there
    # the terminal's rows say the same: one line for the empty table, no row of dashes
    lines = res.stdout.splitlines()
    empty = [ln for ln in lines if ln.startswith("Detection (bounding boxes): anatomy")]
    assert len(empty) == 1 and "Left out: no label group of any run qualifies" in empty[0], res.stdout
    assert not any(ln.startswith("  ") and ln.endswith("–") for ln in lines), res.stdout
    md = (report / "leaderboard_detect.md").read_text()
    anatomy = md.split("### Detection (bounding boxes): anatomy", 1)[1].split("###", 1)[0]
    assert "Left out: no label group" in anatomy and "|" not in anatomy


def test_a_table_without_rows_says_so_instead_of_a_bare_header() -> None:
    view = View("Per task: Detection (bounding boxes)", ["Task", "Run"], [])
    text = markdown(view)
    assert "Left out: no run has a row here." in text and "| Task |" not in text
