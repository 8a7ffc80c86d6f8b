"""Upstream's summary texts written by summarize: the scripted model's stored answers, summarized, give exactly the
hand-made golden files (fixtures/upstream_summaries/README.md works every number out from upstream's
summarize_TL_task.py @28f6c67, summarize_AD_task.py @286f632 and summarize_detection_task.py print code)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medvision_bm.report import upstream_summaries as us
from phantom_runs import run_baseline, run_cli
from scripted import LIMIT, MODEL, TASKS, scripted_factory

GOLDEN = Path(__file__).parent / "fixtures" / "upstream_summaries"
FILES = {"TL": "TL/summary_TL_task_filtered.txt", "AD": "AD/summary_AD_task.txt",
         "detect": "Detect/summary_detection_task.txt"}


@pytest.fixture(scope="module")
def scripted_report(phantom_dir: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scripted")
    for fam, tasks in TASKS.items():
        lists = root / "lists"
        lists.mkdir(exist_ok=True)
        (lists / f"tasks_{fam}.json").write_text(json.dumps(tasks))
        out = run_baseline("oracle", fam, phantom_dir, root / "results", "--model_name", MODEL, "--sample_limit",
                           str(LIMIT[fam]), lists=lists, backend=scripted_factory,
                           tasks_json=lists / f"tasks_{fam}.json")
        assert all(o.state == "done" for o in out), out
    report = root / "report"
    res = run_cli("summarize", "--results_dir", str(root / "results"), "--output_dir", str(report), "--data_dir",
                  str(phantom_dir), "--no_plots", "--n_boot", "100", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    return report


@pytest.mark.parametrize("family", ["TL", "AD", "detect"])
def test_texts_equal_the_golden_files(scripted_report: Path, family: str) -> None:
    ours = (scripted_report / "upstream" / FILES[family]).read_text()
    golden = (GOLDEN / Path(FILES[family]).name).read_text()
    assert ours == golden


def test_per_model_jsons_are_upstreams(scripted_report: Path) -> None:
    """The per-group JSONs upstream writes beside the texts: its key order, NaN spelled NaN, its file names."""
    base = scripted_report / "upstream"
    tl = json.loads((base / "TL" / MODEL / "parsed" / "summary_metrics_TL_Task_filtered.json").read_text())
    kid = tl["kidney tumor @ CT (A)"]
    assert list(kid)[:5] == ["avgMAE", "avgMRE", "SuccessRate", "avgNMAE", "num_samples"]
    assert (kid["num_samples"], kid["SuccessRate"], kid["avgMAE"]) == (5, 0.8, 0.5)
    ad_text = (base / "AD" / MODEL / "parsed" / "summary_metrics_AD_Task.json").read_text()
    ad = json.loads(ad_text)
    assert list(ad["PhantomXR_angle_A-L_1_2-L_3_4"])[:5] == ["avgMAE", "avgMRE", "avgNMAE", "SuccessRate",
                                                               "num_samples"]
    assert '"avgNMAE": NaN' in ad_text and math.isnan(ad["PhantomXR_angle_A-L_1_2-L_3_4"]["avgNMAE"])
    grouped = json.loads((base / "Detect" / MODEL / "parsed" /
                          "summary_metrics_anatomy_vs_lesion_detect_Task.json").read_text())
    assert grouped["anatomy"]["mean_metrics"]["total_samples"] == 65 and grouped["T/L"]["mean_metrics"] == {}
    assert list(grouped["anatomy"]) == ["mean_metrics", "regions", "detailed_data"]
    everyone = json.loads((base / "Detect" / "summary_metrics_all_models_detect_Task.json").read_text())
    assert everyone[MODEL]["anatomy"]["num_regions"] == 1 and everyone[MODEL]["T/L"]["total_samples"] == 0


def test_texts_read_back_to_the_report_numbers(scripted_report: Path) -> None:
    """Our reader of upstream's texts (the generator of the published numbers uses it) gets the leaderboard's
    numbers back at the printed precision."""
    summary = json.loads((scripted_report / "summary.json").read_text())
    tl = us.read_tl_text((scripted_report / "upstream" / FILES["TL"]).read_text())[MODEL]
    board = {r["aggregate"]: r for r in summary["families"]["TL"]["leaderboard"] if r["label"] == MODEL}
    assert tl["overall"]["Samples"] == board["overall"]["n"] == 14
    for col, stat in (("MAE", "avgMAE"), ("MRE", "avgMRE"), ("SR", "SuccessRate"), ("nMAE", "avgNMAE")):
        assert abs(tl["overall"][col] - board["overall"][stat]) <= 5e-5
    det = us.read_detection_text((scripted_report / "upstream" / FILES["detect"]).read_text())[MODEL]
    assert (det["anatomy"]["regions"], det["anatomy"]["samples"]) == (1, 65) and math.isnan(det["T/L"]["IoU"])


def test_names_of_upstreams_files() -> None:
    """docs/spec/upstream-summary-files.md: the judged suffix and the T/L filter marker."""
    assert us.judged_dir("google/gemma-4-31B-it") == "llm-parsed_gemma-4-31b"  # Paper-results-backup @755a7bb
    judged = us.file_names("TL", "llm-parsed_gemma-4-31b", filtered=True)
    assert judged == {"text": "summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt",
                      "metrics": "summary_metrics_TL_Task_filtered__llm-parsed_gemma-4-31b.json",
                      "values": "summary_values_TL_Task_filtered__llm-parsed_gemma-4-31b.json"}
    assert us.file_names("AD", "llm-parsed_gemma-4-31b")["text"] == "summary_AD_task__llm-parsed_gemma-4-31b.txt"
    assert us.file_names("AD", "llm-parsed_gemma-4-31b")["metrics"] == "summary_metrics_AD_Task.json"
    assert us.file_names("AD", "llm-parsed_gemma-4-31b")["values"] == "summary_values_AD_Task.json"
    det = us.file_names("detect")
    assert (det["text"], det["all_models"]) == ("summary_detection_task.txt",
                                                "summary_metrics_all_models_detect_Task.json")


# --------------------------------------------------------------------------------------------- per-sample files

V0 = Path(__file__).parent / "fixtures" / "v0_values"
V0_DIR = "MedVision-V0-7B/llm-parsed_gemma-4-31b"
V0_FILES = {"TL": ("summary_values_TL_Task_filtered__llm-parsed_gemma-4-31b.json",
                   "summary_metrics_TL_Task_filtered__llm-parsed_gemma-4-31b.json"),
            "AD": ("summary_values_AD_Task.json", "summary_metrics_AD_Task.json")}


def _upstream_sample(family: str, target: str, response: str, meta: dict | None) -> tuple[float, float, bool, float,
                                                                                           bool]:
    """One sample as upstream's summarizers score it (``cal_metrics_TL_task`` / ``cal_metrics_AD_task``,
    YongchengYAO/MedVision src/medvision_bm/benchmark/summarize_TL_task.py @28f6c67, summarize_AD_task.py @286f632):
    the response split on commas into float32, the target literal, errors in float64, nMAE as precomputed."""
    import ast

    import numpy as np

    gt = np.array(ast.literal_eval(target), dtype=np.float64).reshape(-1)
    try:
        pred = np.array([np.float32(p.strip()) for p in response.strip().split(",")])
        if len(pred) != len(gt):
            raise ValueError
        err = np.abs(pred - gt)
        mae, mre, ok = float(np.mean(err)), float(np.mean(err / (gt + 1e-15))), True
    except ValueError:
        mae, mre, ok = math.nan, math.nan, False
    pre = (meta or {}).get("nmae_precomputed") or {}
    nmae = math.nan if pre.get("NMAE") is None else float(pre["NMAE"])
    return mae, mre, ok, nmae, bool(pre.get("success")) and math.isfinite(nmae)


def _upstream_group(family: str, samples: list[tuple[str, str, dict | None]]) -> dict:
    """One group's dict as upstream's counters form it: running sums from 0 in file order, MRE buckets
    ``min(int(v * 10), 9)``, SuccessRate and MRE<k over every sample (``_calculate_final_metrics_*``)."""
    sums = {"MAE": 0.0, "MRE": 0.0, "NMAE": 0.0}
    counts = {"MAE": 0, "MRE": 0, "NMAE": 0}
    buckets, ok_n = [0] * 10, 0
    for target, response, meta in samples:
        mae, mre, ok, nmae, nmae_ok = _upstream_sample(family, target, response, meta)
        for name, v in (("MAE", mae), ("MRE", mre)):
            if math.isfinite(v):
                sums[name] += v
                counts[name] += 1
        if math.isfinite(mre):
            buckets[min(int(mre * 10), 9)] += 1
        if nmae_ok:
            sums["NMAE"] += nmae
            counts["NMAE"] += 1
        ok_n += ok
    n = len(samples)
    mean = {k: sums[k] / counts[k] if counts[k] else math.nan for k in sums}
    head = ({"avgMAE": mean["MAE"], "avgMRE": mean["MRE"], "SuccessRate": ok_n / n, "avgNMAE": mean["NMAE"]}
            if family == "TL" else
            {"avgMAE": mean["MAE"], "avgMRE": mean["MRE"], "avgNMAE": mean["NMAE"], "SuccessRate": ok_n / n})
    return {**head, "num_samples": n, **{f"MRE<{k / 10:.1f}": sum(buckets[:k]) / n for k in range(1, 11)}}


def _upstream_metrics(family: str, values) -> dict:
    """A ``summary_values_*`` file through upstream's summarizer loop: its ``summary_metrics_*`` dict."""
    groups: dict[str, list] = {}
    if family == "TL":
        for g, d in values.items():
            groups[g] = list(zip(d["targets"], d["responses"], d["doc_metas"]))
    else:
        for rec in values:
            groups.setdefault(rec["label"], []).append((rec["targets"], rec["responses"][0], rec["doc_meta"]))
    return {g: _upstream_group(family, s) for g, s in groups.items()}


@pytest.mark.parametrize("family", ["TL", "AD"])
def test_v0_per_sample_values_give_the_published_metrics_to_the_bit(family: str) -> None:
    """MedVision-V0-7B's published per-sample values (an excerpt of Paper-results-backup/{TL,AD}/MedVision-V0-7B/
    llm-parsed_gemma-4-31b/ @755a7bb, fixtures/v0_values/README.md) scored by the suite's per-sample metrics and
    summed by the report's per-group aggregation give the published summary_metrics file byte for byte, as
    json.dump(..., indent=2) wrote it (and the test's own statement of upstream's loop agrees)."""
    import polars as pl

    from medvision_bm.report import groups as G
    from medvision_bm.tasks import upstream_metrics as um

    values_name, metrics_name = V0_FILES[family]
    values = json.loads((V0 / family / V0_DIR / values_name).read_text())
    published_text = (V0 / family / V0_DIR / metrics_name).read_text()
    published = json.loads(published_text)
    assert _upstream_metrics(family, values) == published
    rows = []
    samples = ([(g, t, r, m) for g, d in values.items() for t, r, m in zip(d["targets"], d["responses"],
                                                                               d["doc_metas"])]
               if family == "TL" else [(v["label"], v["targets"], v["responses"][0], v["doc_meta"]) for v in values])
    for group, target, response, meta in samples:
        pred = [float(p) for p in response.split(",")]
        s = (um.tl_sample(pred, json.loads(target)) if family == "TL"
             else um.ad_sample(pred, float(target), meta["metric_type"]))
        pre = meta["nmae_precomputed"]
        rows.append({"label": "V0", "group": group, "success": s.success, "MAE": s.MAE, "MRE": s.MRE,
                     "nMAE": pre["NMAE"] if pre["success"] else None})
    per = G.upstream_dicts(pl.DataFrame(rows), family, ("label", "group"), lambda key: "newer")
    ours = {g: d for (_, g), d in per.items()}
    assert json.dumps(ours, indent=2) == published_text


def test_values_files_are_upstreams_and_give_the_metrics_beside_them(scripted_report: Path) -> None:
    """summarize writes summary_values_* beside each summary_metrics_*: upstream's names, shape and key order (those
    of the published V0 files), one record per counted sample; upstream's summarizer loop over it gives the metrics
    file beside it to the last bit."""
    base = scripted_report / "upstream"
    for family, folder, values_name, metrics_name in (
            ("TL", "TL", "summary_values_TL_Task_filtered.json", "summary_metrics_TL_Task_filtered.json"),
            ("AD", "AD", "summary_values_AD_Task.json", "summary_metrics_AD_Task.json")):
        values = json.loads((base / folder / MODEL / "parsed" / values_name).read_text())
        metrics_text = (base / folder / MODEL / "parsed" / metrics_name).read_text()
        metrics = json.loads(metrics_text)
        v0 = json.loads((V0 / family / V0_DIR / V0_FILES[family][0]).read_text())
        if family == "TL":
            assert list(values) == list(metrics)
            first, v0_first = next(iter(values.values())), next(iter(v0.values()))
            assert list(first) == list(v0_first) == ["targets", "responses", "doc_metas"]
            assert list(first["doc_metas"][0]) == list(v0_first["doc_metas"][0])
            assert sum(len(d["targets"]) for d in values.values()) == sum(m["num_samples"] for m in metrics.values())
            assert first["targets"][0] == "[4.84765625, 4.03515625]"  # fixtures/upstream_summaries/README.md
        else:
            assert list(values[0]) == list(v0[0]) == ["label", "targets", "responses", "doc_meta"]
            assert list(values[0]["doc_meta"]) == list(v0[0]["doc_meta"])
            assert len(values) == sum(m["num_samples"] for m in metrics.values())
        assert json.dumps(_upstream_metrics(family, values), indent=2) == metrics_text


def test_detection_values_file_gives_the_metrics_beside_it(scripted_report: Path) -> None:
    """summary_values_detect_Task.json: per group its targets and responses (parse_utils.py
    group_by_anatomy_modality_slice, YongchengYAO/MedVision; the published Paper-results-backup/Detect/
    MedVision-V0-7B/llm-parsed_gemma-4-31b/summary_values_detect_Task.json @755a7bb), one per counted sample; each
    response scored as upstream's cal_metrics_detection_task scores it and the group summed in the file's order gives
    the metrics file beside it to the last bit."""
    from medvision_bm.tasks import upstream_metrics as um

    folder = scripted_report / "upstream" / "Detect" / MODEL / "parsed"
    values = json.loads((folder / "summary_values_detect_Task.json").read_text())
    metrics_text = (folder / "summary_metrics_detect_Task.json").read_text()
    metrics = json.loads(metrics_text)
    assert list(values) == list(metrics)
    ours = {}
    for group, d in values.items():
        assert list(d) == ["targets", "responses"] and len(d["targets"]) == metrics[group]["num_samples"]
        samples = [um.detection_sample([float(v) for v in r.split(",")] if r else None, json.loads(t))
                   for t, r in zip(d["targets"], d["responses"])]
        ours[group] = um.aggregate_detection(samples)
    assert json.dumps(ours, indent=2) == metrics_text
    # the scripted model gives no box when i % 4 == 3 (fixtures/upstream_summaries/README.md): 33 of the 135
    assert sum(r == "" for d in values.values() for r in d["responses"]) == sum(i % 4 == 3 for i in range(135))


def test_a_run_scored_in_memory_gets_no_values_file_and_a_note(scripted_report: Path, phantom_dir: Path,
                                                                tmp_path: Path) -> None:
    """A store whose parsed.jsonl is gone is re-scored in memory (nothing written): its run's values file, which is
    made from the parsed rows on disk, is not written, and the summary says so; the metrics JSON still is."""
    results = tmp_path / "results"
    shutil.copytree(scripted_report.parent / "results", results)
    for parsed in results.glob("*/*BiometricsFromLandmarks*/*/parsed.jsonl"):
        parsed.unlink()
    out = tmp_path / "report"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(out), "--data_dir",
                  str(phantom_dir), "--no_plots", "--n_boot", "100", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    notes = json.loads((out / "summary.json").read_text())["notes"]
    assert any(n.startswith(f"AD summary_values not written for {MODEL}: ") and "medvision-bm parse" in n
               for n in notes), notes
    folder = out / "upstream" / "AD" / MODEL / "parsed"
    assert (folder / "summary_metrics_AD_Task.json").is_file() and not (folder / "summary_values_AD_Task.json").exists()
    assert (out / "upstream" / "TL" / MODEL / "parsed" / "summary_values_TL_Task_filtered.json").is_file()


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=8))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=6), inner, max_size=4),
    st.dictionaries(st.integers(), inner, min_size=1, max_size=2)), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_VALUES)
def test_upstream_json_files_are_json_dumps_indent_2_to_the_character(obj) -> None:
    """The per-model JSON files are written as upstream's ``json.dump(..., indent=2)`` writes them: NaN and
    infinities, escaped non-ASCII text, empty and nested containers, tuples, and non-text keys (which json
    converts) all give json's own text."""
    assert us._json(obj) == json.dumps(obj, indent=2)
