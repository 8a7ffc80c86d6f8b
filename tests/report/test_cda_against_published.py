"""The published clinical decision agreement of the 18 models (YongchengYAO/MedVision
``Paper-results-backup/CDA/CDA_REPORT_llm-parsed-gemma-4-31b.md`` @755a7bb) as published rows, listed by
`medvision-bm published`, and a run of a published model held against it in a real summarize."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from medvision_bm.report import published as P
from medvision_bm.report.published_cda import published_cda_rows, same_as_printed
from medvision_bm.report.summarize import SummaryOptions, summarize
from phantom_runs import run_cli

V0 = "MedVision-V0 (7B)"


def test_every_cell_of_the_three_tables_is_a_row() -> None:
    rows = published_cda_rows()
    assert len(rows) == 3 * 18 * 8
    assert {r.kind for r in rows} == {"cda"} and {r.split for r in rows} == {"main"}
    by = {(r.name, r.group, r.metric): r for r in rows}
    renal = "AJCC renal T category (greatest dimension)"
    assert by[(V0, renal, "CDA wkappa")].value == 0.726 and by[(V0, renal, "CDA wkappa")].n == 1025
    assert by[(V0, renal, "CDA wkappa CI lower")].value == 0.428
    assert by[(V0, renal, "CDA p(wkappa > 0)")].note.startswith("printed <0.001")
    assert by[("Gemma-4 (31B)", "SNA maxillary position", "CDA Nparsed")].value == 56
    assert by[("MedGemma (4B)", "SNB mandibular position", "CDA wkappa CI upper")].value == -0.026
    # each row is its model's published leaderboard run of that family (folder, record, protocol)
    assert by[(V0, renal, "CDA Acc")].model == \
        "MedVision__fullRFT__qwen25vl-7b-fullSFT__AD-TL-D__512x512__PRxAnswer_s250"
    assert by[(V0, renal, "CDA Acc")].family == "TL" and by[(V0, renal, "CDA Acc")].tl_filter is True
    assert by[("GLM-4.6V (106B)", "SNA maxillary position", "CDA Acc")].model == "GLM-4.6V-Budget16k"
    assert {r.parse for r in rows} == {"judged:gemma-4-31b"}


def test_same_as_printed_reads_the_printed_precision() -> None:
    by = {(r.name, r.group, r.metric): r for r in published_cda_rows()}
    acc = by[(V0, "SNA maxillary position", "CDA Acc")]
    assert same_as_printed(0.4583333333333333, acc) and not same_as_printed(0.4594, acc)
    p = by[(V0, "SNA maxillary position", "CDA p(wkappa > 0)")]
    assert same_as_printed(1 / 4001, p) and not same_as_printed(0.002, p)
    assert same_as_printed(None, acc) is None


def test_cli_lists_the_cda_beside_the_leaderboard() -> None:
    res = run_cli("published", "--model", V0, "--family", "AD", "--format", "json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    cda = [r for r in rows if r["kind"] == "cda"]
    assert {r["group"] for r in cda} == {"SNA maxillary position", "SNB mandibular position"} and len(cda) == 16
    assert any(r["kind"] == "aggregate" for r in rows)  # the leaderboard's rows are still there


def test_a_run_of_a_published_model_is_held_against_the_published_cda(results_copy: Path, phantom_dir: Path,
                                                                      tmp_path: Path) -> None:
    """The phantom oracle's A/D run filed under V0's name: its SNA (PhantomXR's L_2_5 angle) is set beside V0's
    published SNA, with the protocol check; its Acc (1.0) does not print as V0's 0.458."""
    (ref, *_) = [r for r in published_cda_rows() if r.name == V0 and r.family == "AD"]
    name = next(a for a in sorted(P.aliases(ref)) if " " not in a and "(" not in a)
    shutil.move(results_copy / "MedVision-Phantom-AD" / "oracle", results_copy / "MedVision-Phantom-AD" / name)
    res = summarize(results_copy, tmp_path / "out", SummaryOptions(plots=False, families=["AD"],
                                                                   data_dir=str(phantom_dir), n_boot=100))
    html = (res.output_dir / "index.html").read_text()
    assert "CDA against the published report" in html and "CDA protocol check" in html
    md = (res.output_dir / "summary.md").read_text()
    lines = [ln for ln in md.splitlines() if ln.startswith(f"| {name} | SNA maxillary position | Acc |")]
    assert lines == [f"| {name} | SNA maxillary position | Acc | 1.000 | 0.458 | no |  |"]
    assert any(ln.startswith(f"| {name} | SNA maxillary position | wkappa |") for ln in md.splitlines())


def test_the_listing_needs_no_report_extra() -> None:
    """`medvision-bm published` runs on a plain install: the CDA rows load without polars or matplotlib."""
    import subprocess
    import sys

    code = ("import sys\nsys.modules['polars'] = None\nsys.modules['matplotlib'] = None\n"
            "from medvision_bm.cli.published import published_main\n"
            "raise SystemExit(published_main(['--model', 'MedVision-V0 (7B)', '--format', 'csv']))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "SNA maxillary position" in res.stdout and ",cda," in res.stdout
