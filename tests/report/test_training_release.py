"""A run whose registry record names the annotation release its weights were trained on: the report marks each task
whose evaluated test cases that release's plans hold in their training split (the per-task split swap from the data
folder's plans), in the HTML section, summary.md, summary.json, training_release.csv and the printed summary; a task
without such a case, and a run whose record names no training release, are not marked."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from medvision_bm.data.planner import PLANNER_VERSIONS
from medvision_bm.models.registry import REGISTRY
from medvision_bm.report.summarize import SummaryOptions, result_lines, summarize
from medvision_bm.report.training_release import TITLE


def _plan_path(data: Path, ds: str, version: str) -> Path:
    return data / "Datasets" / ds / f"benchmark_plan_biometry_v{version}.json.gz"


def _plan(data: Path, ds: str, version: str) -> dict:
    return json.loads(gzip.decompress(_plan_path(data, ds, version).read_bytes()))


@pytest.fixture()
def swapped_data(phantom_dir: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the phantom whose v1.4.0 PhantomCT biometry plan holds one v1.0.0 test case as a training case
    (in every task listing it); PhantomMR's plans are left as they are."""
    data = tmp_path / "Data"
    shutil.copytree(phantom_dir, data)
    plan = _plan(data, "PhantomCT", "1.4.0")
    moved = plan["tasks"][0]["test_cases"][0]["image_file"]
    for t in plan["tasks"]:
        t["train_cases"] += [c for c in t["test_cases"] if c["image_file"] == moved]
        t["test_cases"] = [c for c in t["test_cases"] if c["image_file"] != moved]
        t["train_cases_number"], t["test_cases_number"] = len(t["train_cases"]), len(t["test_cases"])
    _plan_path(data, "PhantomCT", "1.4.0").write_bytes(gzip.compress(json.dumps(plan).encode()))
    return data, moved


def _summary(results: Path, data: Path, out: Path):
    res = summarize(results, out, SummaryOptions(families=["TL"], data_dir=str(data), plots=False, n_boot=100,
                                                 browse_per_task=0))
    return res, json.loads((out / "summary.json").read_text())


def test_tasks_holding_training_cases_are_marked(phantom_results, swapped_data, tmp_path, monkeypatch) -> None:
    data, moved = swapped_data
    monkeypatch.setitem(REGISTRY, "oracle", dataclasses.replace(REGISTRY["oracle"], training_release="1.4.0"))
    res, summary = _summary(phantom_results, data, tmp_path / "out")
    rows = summary["training_release"]
    assert rows and {r["record"] for r in rows} == {"oracle"}  # mean has no training release: no row
    by_task = {r["task"]: r for r in rows}
    old = _plan(data, "PhantomCT", "1.0.0")
    for task, row in by_task.items():
        assert (row["evaluated"], row["training"]) == ("1.0.0", "1.4.0")
        if task.startswith("PhantomCT_"):
            pos = int(task.split("_Task")[1][:2]) - 1
            tests = [c["image_file"] for c in old["tasks"][pos]["test_cases"]]
            assert moved in tests
            assert (row["seen"], row["cases"], row["marked"]) == (1, len(tests), True)
        else:  # PhantomMR: its v1.4.0 plan keeps every v1.0.0 test case in test
            assert (row["seen"], row["marked"]) == (0, False)
    assert any(t.startswith("PhantomCT_") for t in by_task) and any(t.startswith("PhantomMR_") for t in by_task)
    html = (tmp_path / "out" / "index.html").read_text()
    assert TITLE in html
    marked = [t for t, r in by_task.items() if r["marked"]]
    table = html[html.index(f'data-title="{TITLE}"'):]
    body = table[table.index("<tbody>"):table.index("</tbody>")]
    shown = {re.sub(r"<[^>]+>", "", re.findall(r"<td>(.*?)</td>", cells)[1]): cls
             for cls, cells in re.findall(r'<tr(?: class="([^"]*)")?>(.*?)</tr>', body)}
    assert shown == {t: ("trained-on" if t in marked else "") for t in by_task}
    md = (tmp_path / "out" / "summary.md").read_text()
    assert TITLE in md and "yes: trained on its test cases" in md
    assert "training_release.csv" in res.files
    line = next(x for x in result_lines(res, 0.95) if "trained on release 1.4.0" in x)
    assert f"{len(marked)} of {len(by_task)} task(s)" in line and all(t in line for t in marked)


def test_no_training_release_no_mark(phantom_results, swapped_data, tmp_path) -> None:
    assert REGISTRY["oracle"].training_release is None
    res, summary = _summary(phantom_results, swapped_data[0], tmp_path / "out")
    assert summary["training_release"] == [] and not res.trained
    assert TITLE not in (tmp_path / "out" / "index.html").read_text()
    assert "training_release.csv" not in res.files


def test_other_weights_of_a_record_are_not_its_training_release(monkeypatch) -> None:
    from medvision_bm.report.training_release import training_release_of

    rec = REGISTRY["medvision-model-rft"]
    assert training_release_of({"record": rec.name}) == (rec.name, rec.training_release)
    assert training_release_of({"record": rec.name, "weights": rec.default_weights.upper()}) is not None
    assert training_release_of({"record": rec.name, "weights": "someone/another-rft-7b"}) is None


def test_every_training_release_is_an_annotation_release() -> None:
    named = {r.name: r.training_release for r in REGISTRY.values() if r.training_release is not None}
    assert named.get("medvision-model-rft") == "1.0.0"  # YongchengYAO/MedVision docs/model-release/MedVision-V0-7B_ModelCard.md @0b7106d: "(v1.0.0)"
    assert all(v in PLANNER_VERSIONS for v in named.values())


def test_runs_that_cannot_be_checked_get_one_note_per_reason(phantom_results, phantom_dir, monkeypatch) -> None:
    from medvision_bm.report.load import load
    from medvision_bm.report.training_release import overlaps
    from medvision_bm.store.discovery import discover

    monkeypatch.setitem(REGISTRY, "oracle", dataclasses.replace(REGISTRY["oracle"], training_release="1.2.0"))
    refs, _ = discover(phantom_results, models=["oracle"], families=["TL"])
    stores = load(refs).stores
    labels = {s.ref.label for s in stores}
    rows, notes = overlaps(stores, None)
    assert rows == [] and len(notes) == len(labels)
    assert all(f"{len([s for s in stores if s.ref.label == lb])} task(s) not checked against training release "
               "1.2.0 (no data folder is known (pass --data_dir))" in " ".join(notes) for lb in labels)
    # the phantom's T/L datasets have no v1.2.0 biometry plan: one note per run and dataset, no row
    rows, notes = overlaps(stores, phantom_dir)
    datasets = {s.ref.task.split("_")[0] for s in stores}
    assert rows == [] and len(notes) == len(labels) * len(datasets)
    assert all(any(f"lacks the v1.0.0 or v1.2.0 biometry plan of {ds}" in n for n in notes) for ds in datasets)
