"""Clinical decision agreement in a real summarize of the phantom baselines: the stored answers of the PhantomXR
angle task with SNA's and SNB's metric keys enter those proxies (upstream's ``summarize_CDA_task.py`` @2beef50 routes
angle files by metric key alone), the report shows the section and its confusion matrices, and upstream's CDA files
are written beside the other upstream summaries. The oracle answers every target exactly, so its categories agree
with the ground truth's on every sample; the values file's records are checked against docs.jsonl's targets."""

from __future__ import annotations

import json
from pathlib import Path

from medvision_bm.report import cda


def test_section_pictures_and_files(report_dir: Path) -> None:
    html = (report_dir / "index.html").read_text()
    assert 'id="cda"' in html and "CDA: SNA maxillary position" in html
    assert 'src="plots/cda_SNA.png"' in html and (report_dir / "plots" / "cda_SNA.png").stat().st_size > 1000
    up = report_dir / "upstream" / "AD"
    canonical = (up / "summary_CDA_task_canonical.txt").read_text()
    assert "### Leaderboard (config order): SNA maxillary position" in canonical
    unc = json.loads((up / "summary_CDA_uncertainty.json").read_text())
    assert (unc["n_boot"], unc["seed"]) == (4000, 1024)
    assert (report_dir / "upstream" / "CDA" / "CDA_REPORT.md").is_file()
    summary = json.loads((report_dir / "summary.json").read_text())
    rows = {(r["model"], r["proxy"]): r for r in summary["cda"]}
    oracle = rows[("oracle", "SNA maxillary position")]
    assert oracle["accuracy"] == 1.0 and oracle["n_parsed"] == oracle["n_total"] > 0
    assert not any(r["proxy"].startswith("AJCC") for r in summary["cda"])  # no KiTS23/KiPA22 in the phantom


def test_values_file_holds_every_proxy_sample_of_the_store(report_dir: Path, phantom_results: Path) -> None:
    values = json.loads((report_dir / "upstream" / "AD" / "oracle" / "parsed" / "summary_values_CDA_Task.json")
                        .read_text())
    docs = []
    for path in phantom_results.glob("MedVision-Phantom-AD/oracle/*BiometricsFromLandmarks_Angle*/*/docs.jsonl"):
        docs += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    wanted = [d["doc"] for d in docs if d["doc"]["biometric_profile"]["metric_key"] in ("A-L_1_2-L_2_5",
                                                                                           "A-L_1_2-L_2_6")]
    assert len(values) == len(wanted) > 0
    images = {Path(d["image_file"]).name for d in wanted}
    for rec in values:
        proxy = next(p for p in cda.proxies() if p.name == rec["proxy"])
        assert rec["gt_category"] == proxy.labels[proxy.category(rec["gt_value"])]
        assert rec["pred_value"] == rec["gt_value"]  # the oracle
        assert rec["image_file"] in images and rec["dataset"] == "PhantomXR" and rec["slice_dim"] == 0
