"""`medvision-bm import` of upstream's per-sample files: MedVision-V0-7B's published ``summary_values_*.json``
(an excerpt of YongchengYAO/MedVision ``Paper-results-backup/{TL,AD}/MedVision-V0-7B/llm-parsed_gemma-4-31b/``
@755a7bb, tests/report/fixtures/v0_values/README.md) become stores with a judged parse; the import compares their
numbers with the ``summary_metrics_*.json`` beside them, and ``summarize --parse judged`` writes upstream's files
back byte for byte (its metrics from upstream's rule: ``summarize_TL_task.py`` @28f6c67 and ``summarize_AD_task.py``
@286f632 read the doc meta's ``nmae_precomputed``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mvtest_support import run_cli

V0 = Path(__file__).parents[1] / "report" / "fixtures" / "v0_values"
DIR = "MedVision-V0-7B/llm-parsed_gemma-4-31b"
TL_VALUES = f"TL/{DIR}/summary_values_TL_Task_filtered__llm-parsed_gemma-4-31b.json"
TL_METRICS = f"TL/{DIR}/summary_metrics_TL_Task_filtered__llm-parsed_gemma-4-31b.json"
AD_VALUES = f"AD/{DIR}/summary_values_AD_Task.json"
AD_METRICS = f"AD/{DIR}/summary_metrics_AD_Task.json"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("v0")
    res = run_cli("import", "--upstream_results", str(V0), "--results_dir", str(root / "results"))
    assert res.returncode == 0, res.stderr
    return root, res.stdout


def test_import_compares_every_number_with_the_metrics_beside(imported: tuple[Path, str]) -> None:
    root, out = imported
    lines = out.strip().splitlines()
    assert f"{DIR}/summary_values_TL_Task_filtered__llm-parsed_gemma-4-31b.json: 63 sample(s) into 1 store(s); " \
           "15 numbers compared, all equal" in lines
    assert f"{DIR}/summary_values_AD_Task.json: 20 sample(s) into 1 store(s); 15 numbers compared, all equal" in lines
    stores = sorted(p.parent.parent.name for p in (root / "results").glob("*/*/*/signature.json"))
    assert stores == ["FeTA24_BiometricsFromLandmarks_Task01_Coronal", "HNTSMRG24_TumorLesionSize_Task02_Axial"]


def test_summarize_reads_the_import_as_a_judged_parse_and_gives_upstreams_files_back(
        imported: tuple[Path, str]) -> None:
    """The judged summary's per-group numbers are the published ones to the last bit, and upstream's files are
    written back byte for byte (the T/L names without ``_filtered``: no removed-samples lists at hand, the values
    are the filtered ones already)."""
    root, _ = imported
    out = root / "report"
    res = run_cli("summarize", "--results_dir", str(root / "results"), "--output_dir", str(out), "--parse", "judged",
                  "--no_plots", "--n_boot", "100", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    for fam, metrics in (("TL", TL_METRICS), ("AD", AD_METRICS)):
        published = json.loads((V0 / metrics).read_text())
        ours = summary["families"][fam]["upstream"]["MedVision-V0-7B"]["groups"]
        assert ours.keys() == published.keys()
        for g, d in published.items():
            assert all(ours[g][k] == v for k, v in d.items()), g
    up = out / "upstream"
    pairs = ((f"TL/{DIR}/summary_values_TL_Task__llm-parsed_gemma-4-31b.json", TL_VALUES),
             (f"TL/{DIR}/summary_metrics_TL_Task__llm-parsed_gemma-4-31b.json", TL_METRICS),
             (AD_VALUES, AD_VALUES), (AD_METRICS, AD_METRICS))
    for written, published_file in pairs:
        assert (up / written).read_bytes() == (V0 / published_file).read_bytes(), written


def test_a_number_that_differs_is_counted(tmp_path: Path) -> None:
    src = tmp_path / "up"
    shutil.copytree(V0 / "AD", src / "AD")
    metrics = src / AD_METRICS
    data = json.loads(metrics.read_text())
    data["FeTA24_distance_L-9-10"]["avgMAE"] = 5.538256263732911  # the published value, one digit longer
    metrics.write_text(json.dumps(data, indent=2))
    res = run_cli("import", "--upstream_results", str(src), "--results_dir", str(tmp_path / "results"))
    assert res.returncode == 0, res.stderr
    assert "15 numbers compared, 1 differ" in res.stdout
    assert "differs: FeTA24_distance_L-9-10 avgMAE: ours 5.53825626373291, upstream's 5.538256263732911" in res.stdout


@pytest.mark.parametrize("content", ['{"a group": {"targets": ["[1.0, 2.0]"], "responses": []}}', "[1, 2",
                                     '[{"label": "x"}]'])
def test_a_malformed_values_file_is_one_line_naming_it(tmp_path: Path, content: str) -> None:
    folder = tmp_path / "up" / "M" / "parsed"
    folder.mkdir(parents=True)
    name = "summary_values_TL_Task.json" if content.startswith("{") else "summary_values_AD_Task.json"
    (folder / name).write_text(content)
    res = run_cli("import", "--upstream_results", str(tmp_path / "up"), "--results_dir", str(tmp_path / "results"))
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and str(folder / name) in err[0] and "Traceback" not in res.stderr, res.stderr


def test_a_group_of_several_tasks_is_summed_in_the_files_order(tmp_path: Path) -> None:
    """A T/L group whose samples come from two tasks, the later-named one first in the file (upstream adds its files
    in the order the file system lists them): summarize sums the group in the file's order, so its means are the
    metrics upstream wrote, to the last bit, where the tasks' name order gives another last bit."""
    import math

    import numpy as np

    from medvision_bm.tasks import upstream_metrics as um

    group = "kidney tumor @ CT (A)"
    responses = ["21.5,13.25", "18.125,12.0", "", "26.0,14.75"]
    scored = [um.tl_sample([float(v) for v in r.split(",")], [20.0, 12.5]) if r else None for r in responses]
    rng = np.random.default_rng(3)
    for _ in range(1000):  # nMAEs whose running sum depends on the order of the two tasks
        nmae = [float(v) for v in rng.random(4)]
        samples = [um.MeasureSample(s.success, s.MAE, s.MRE, v, True) if s else
                   um.MeasureSample(False, math.nan, math.nan, v, True) for s, v in zip(scored, nmae)]
        file_order = um.aggregate_tl(samples)
        name_order = um.aggregate_tl(samples[3:] + samples[:3])  # AlphaDS's sample first
        assert file_order is not None and name_order is not None
        if file_order["avgNMAE"] != name_order["avgNMAE"]:
            break
    else:
        pytest.fail("no order-dependent nMAEs found")
    metas = [{"image_file": f"Data/Datasets/{ds}/Images/case_{i}.nii.gz", "slice_dim": 2, "slice_idx": 7,
              "image_size_2d": [64, 64], "scale_mode": None, "nmae_precomputed": {"NMAE": nmae[i], "success": True},
              "taskID": tid, "label": 1, "pixel_size_scale": None}
             for i, (ds, tid) in enumerate((("ZetaDS", "03"),) * 3 + (("AlphaDS", "01"),))]
    values = {group: {"targets": ["[20.0, 12.5]"] * 4, "responses": responses, "doc_metas": metas}}
    folder = tmp_path / "up" / "M" / "llm-parsed_judge"
    folder.mkdir(parents=True)
    (folder / "summary_values_TL_Task__llm-parsed_judge.json").write_text(json.dumps(values, indent=2))
    expected = file_order
    (folder / "summary_metrics_TL_Task__llm-parsed_judge.json").write_text(json.dumps({group: expected}, indent=2))
    res = run_cli("import", "--upstream_results", str(tmp_path / "up"), "--results_dir", str(tmp_path / "results"))
    assert res.returncode == 0, res.stderr
    assert "4 sample(s) into 2 store(s); 15 numbers compared, all equal" in res.stdout, res.stdout
    res = run_cli("summarize", "--results_dir", str(tmp_path / "results"), "--output_dir", str(tmp_path / "report"),
                  "--parse", "judged", "--no_plots", "--n_boot", "100", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    ours = json.loads((tmp_path / "report" / "summary.json").read_text())["families"]["TL"]["upstream"]["M"]
    got = ours["groups"][group]
    assert all(got[k] == v or (isinstance(v, float) and math.isnan(v) and math.isnan(got[k]))
               for k, v in expected.items()), (got, expected)
    assert got["avgNMAE"] != name_order["avgNMAE"]
    written = tmp_path / "report" / "upstream" / "TL" / "M" / "llm-parsed_judge"
    assert (written / "summary_values_TL_Task__llm-parsed_judge.json").read_text() == json.dumps(values, indent=2)


def test_a_detection_values_file_is_named_as_not_imported(tmp_path: Path) -> None:
    shutil.copytree(V0 / "AD", tmp_path / "up" / "AD")
    det = tmp_path / "up" / "Detect" / DIR / "summary_values_detect_Task.json"
    det.parent.mkdir(parents=True)
    det.write_text(json.dumps({"Liver @ CT (A)": {"targets": ["[0.1, 0.1, 0.2, 0.2]"], "responses": [""]}}))
    res = run_cli("import", "--upstream_results", str(tmp_path / "up"), "--results_dir", str(tmp_path / "results"))
    assert res.returncode == 0, res.stderr
    assert f"note: {det.resolve()}: detection's per-sample file holds no doc metas" in res.stderr
    assert "15 numbers compared, all equal" in res.stdout


def test_a_values_file_beside_raw_samples_files_is_left_to_them(tmp_path: Path) -> None:
    """Upstream's summarizers write summary_values_* into the parsed folder of a model whose raw samples files the
    plain import reads: those answers are imported, the per-sample file is not imported a second time."""
    shutil.copytree(V0 / "AD", tmp_path / "up" / "AD")
    model = tmp_path / "up" / "AD" / "MedVision-V0-7B"
    (model / "20250101_000000_samples_FeTA24_BiometricsFromLandmarks_Task01_Coronal.jsonl").write_text("")
    res = run_cli("import", "--upstream_results", str(tmp_path / "up"), "--results_dir", str(tmp_path / "results"))
    assert "holds upstream's raw samples files, imported as answers; the per-sample file is not imported" in res.stderr
    assert "numbers compared" not in res.stdout
    assert not list((tmp_path / "results").glob("*/*/*/signature.json"))
