"""Upstream's T/L removed-samples filter in summarize, parse and compare, held against the tests' own statement of
upstream's rule (upstream_filter.py: YongchengYAO/MedVision src/medvision_bm/benchmark/summarize_TL_task.py @28f6c67
``_build_removed_set`` / ``_relative_image_file`` / ``process_jsonl_file_TL_task``) and against lists written here by
hand from the stored docs."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from medvision_bm.report.removed_filter import FilterSettings, filter_frame
from phantom_runs import run_cli
from upstream_filter import LIST_NAME, is_listed, listed_keys

TASK02 = "PhantomCT_TumorLesionSize_Task02_Axial"
MR_AXIAL = "PhantomMR_TumorLesionSize_Task01_Axial"
SUMMARY = ("--families", "TL", "--no_plots", "--n_boot", "100", "--browse_per_task", "0")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _parsed(results: Path, label: str, task: str) -> list[dict]:
    (path,) = list(results.glob(f"*/{label}/{task}/*/parsed.jsonl"))
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_phantom_ships_upstreams_lists(phantom_dir: Path) -> None:
    """Each T/L dataset has its list: the 1.0.0 slices whose 1.1.0 entry counts several clusters (upstream's
    docs/dataset-release/release-v1.1.0.md @2093f97, "Multi-cluster in v1"), re-derived here from the plans."""
    lists = listed_keys(phantom_dir)
    assert set(lists) == {"PhantomCT", "PhantomMR"}
    want: dict[str, set] = {}
    for ds in lists:
        root = phantom_dir / "Datasets" / ds
        old = json.loads(gzip.decompress((root / "benchmark_plan_biometry_v1.0.0.json.gz").read_bytes()))
        new = json.loads(gzip.decompress((root / "benchmark_plan_biometry_v1.1.0.json.gz").read_bytes()))
        keys = set()
        for t0, t1 in zip(old["tasks"], new["tasks"]):
            for split in ("train_cases", "test_cases"):
                for c0, c1 in zip(t0[split], t1[split]):
                    for dim, axis in enumerate("xyz"):
                        had = {e["slice_idx"] for e in c0[f"slice_profiles_{axis}"]}
                        keys |= {(c0["image_file"], dim, e["slice_idx"], int(t0["task_ID"]))
                                 for e in c1[f"slice_profiles_{axis}"]
                                 if e["slice_idx"] in had and e.get("n_total_clusters", 0) > 1}
        want[ds] = keys
    assert lists == want and lists["PhantomCT"] and not lists["PhantomMR"]


def test_summary_drops_exactly_the_phantoms_listed_samples(report_dir: Path, phantom_results: Path,
                                                           phantom_dir: Path) -> None:
    """Default (annotation pin 1.0.0, the data folder's lists): per run and task, the samples removed are exactly the
    listed ones, the tables count without them, and every T/L table and the upstream text say so."""
    lists = listed_keys(phantom_dir)
    rows = {(r["label"], r["task"]): r for r in read_csv(report_dir / "tl_filter.csv")}
    tasks = {(r["label"], r["task"]): r for r in read_csv(report_dir / "tasks_TL.csv")}
    assert rows and {k for k in rows} == {k for k in tasks}
    total = 0
    for (label, task), r in rows.items():
        parsed = _parsed(phantom_results, label, task)
        listed = sum(is_listed(lists, task, p["key"]) for p in parsed)
        total += listed
        assert (r["status"], r["dataset"], int(r["removed"]), int(r["n_before"])) == \
            ("filtered", task.split("_")[0], listed, len(parsed))
        assert int(tasks[(label, task)]["n_removed"]) == listed
        assert int(tasks[(label, task)]["n"]) == len(parsed) - listed
        assert tasks[(label, task)]["tl_filter"] == "filtered"
    assert total == 3 * 16  # 16 of Task02's 32 axial samples, for each of the three baselines
    summary = json.loads((report_dir / "summary.json").read_text())
    assert any(f"dropped {total} sample(s)" in n for n in summary["notes"])
    board = {r["label"]: r for r in read_csv(report_dir / "leaderboard_TL.csv")}
    assert {lb: int(r["n_removed"]) for lb, r in board.items()} == {lb: 16 for lb in board}
    assert "Sample set: upstream's T/L removed-samples filter" in (report_dir / "leaderboard_TL.md").read_text()
    groups = {(r["label"], r["group"]): r for r in read_csv(report_dir / "groups_TL.csv")}
    assert int(groups[("mean", "kidney tumor @ CT (A)")]["n_removed"]) == 16
    assert (report_dir / "upstream" / "TL" / "summary_TL_task_filtered.txt").is_file()
    assert not (report_dir / "upstream" / "TL" / "summary_TL_task.txt").exists()


def _hand_list(results: Path, task: str, picks: tuple[int, ...]) -> list[dict]:
    """A list written by hand from the stored docs, as upstream's lists spell their entries."""
    (docs,) = list(results.glob(f"*/mean/{task}/*/docs.jsonl"))
    out = []
    for line in docs.read_text().splitlines():
        d = json.loads(line)["doc"]
        if d["index"] in picks:
            out.append({"image_file": d["image_file"].split("/", 1)[1], "slice_dim": "xyz"[d["slice_dim"]],
                        "slice_idx": d["slice_idx"], "task_ID": d["taskID"]})
    assert len(out) == len(picks)
    return out


def test_a_list_of_ones_own_drops_those_samples_only(phantom_results: Path, tmp_path: Path) -> None:
    """--removed_samples_dir with a hand-written PhantomMR list and none for PhantomCT: exactly the listed samples go,
    the dataset without a list is summarized unfiltered with one note saying so."""
    root = tmp_path / "Datasets"
    (root / "PhantomMR").mkdir(parents=True)
    entries = _hand_list(phantom_results, MR_AXIAL, (0, 3, 4))
    entries.append({"image_file": "PhantomMR-GLI/Images-t1c/absent.nii.gz", "slice_dim": "z", "slice_idx": 1,
                    "task_ID": "01"})  # names no sample: removes nothing
    (root / "PhantomMR" / LIST_NAME).write_text(json.dumps(entries))
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(phantom_results), "--output_dir", str(out), *SUMMARY,
                  "--removed_samples_dir", str(root))
    assert res.returncode == 0, res.stderr
    rows = {(r["label"], r["task"]): r for r in read_csv(out / "tl_filter.csv")}
    for (_label, task), r in rows.items():
        if task == MR_AXIAL:
            assert (r["status"], int(r["removed"]), int(r["listed"])) == ("filtered", 3, 4)
        elif task.startswith("PhantomMR"):
            assert (r["status"], int(r["removed"])) == ("filtered", 0)
        else:
            assert (r["status"], r["removed"]) == ("unfiltered: no list file", "0")
    missing = [line for line in res.stderr.splitlines() if "has no removed-samples list" in line]
    assert len(missing) == 1 and "PhantomCT" in missing[0]
    tasks = {(r["label"], r["task"]): int(r["n"]) for r in read_csv(out / "tasks_TL.csv")}
    assert tasks[("oracle", MR_AXIAL)] == len(_parsed(phantom_results, "oracle", MR_AXIAL)) - 3
    assert tasks[("oracle", TASK02)] == len(_parsed(phantom_results, "oracle", TASK02))


def test_the_filtered_name_follows_the_flag_even_when_no_list_is_found(phantom_results: Path, tmp_path: Path) -> None:
    """Upstream names the T/L summary on the flag alone: ``--removed_samples_dir`` given means
    ``summary_TL_task_filtered.txt`` whether or not any list file was found there (YongchengYAO/MedVision
    src/medvision_bm/benchmark/summarize_TL_task.py @28f6c67, ``_suffix = "_filtered" if removed_samples_dir``)."""
    root = tmp_path / "Datasets"
    root.mkdir()  # no <dataset>/ list anywhere
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(phantom_results), "--output_dir", str(out), *SUMMARY,
                  "--removed_samples_dir", str(root))
    assert res.returncode == 0, res.stderr
    rows = read_csv(out / "tl_filter.csv")
    assert rows and all(r["status"] == "unfiltered: no list file" for r in rows)
    assert (out / "upstream" / "TL" / "summary_TL_task_filtered.txt").is_file()
    assert not (out / "upstream" / "TL" / "summary_TL_task.txt").exists()
    assert {p.name for p in (out / "upstream").rglob("summary_metrics_TL_Task*.json")} == \
        {"summary_metrics_TL_Task_filtered.json"}


def test_no_tl_filter_keeps_every_sample(phantom_results: Path, tmp_path: Path, phantom_dir: Path) -> None:
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(phantom_results), "--output_dir", str(out), *SUMMARY,
                  "--data_dir", str(phantom_dir), "--no_tl_filter")
    assert res.returncode == 0, res.stderr
    rows = read_csv(out / "tl_filter.csv")
    assert rows and all(r["status"] == "unfiltered: --no_tl_filter" and r["removed"] == "0" for r in rows)
    tasks = {(r["label"], r["task"]): int(r["n"]) for r in read_csv(out / "tasks_TL.csv")}
    assert tasks[("mean", TASK02)] == len(_parsed(phantom_results, "mean", TASK02)) == 32
    assert (out / "upstream" / "TL" / "summary_TL_task.txt").is_file()


def test_a_broken_list_is_a_one_line_error(phantom_results: Path, tmp_path: Path) -> None:
    root = tmp_path / "Datasets"
    (root / "PhantomCT").mkdir(parents=True)
    (root / "PhantomCT" / LIST_NAME).write_text('[{"image_file": "a.nii.gz", "slice_dim": "w"}]')
    res = run_cli("summarize", "--results_dir", str(phantom_results), "--output_dir", str(tmp_path / "o"), *SUMMARY,
                  "--removed_samples_dir", str(root))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert "removed-samples list" in line and LIST_NAME in line and "--no_tl_filter" in line
    assert not (tmp_path / "o").exists()


def test_other_pins_and_no_data_folder_are_not_filtered() -> None:
    """A store at another annotation pin keeps its samples (from 1.1.0 upstream's loader drops those slices
    itself); without a data folder nothing can be filtered, and a note says how to fix it."""
    frame = pl.DataFrame({"store": [0, 0, 1], "key": ["PhantomCT/Images/phantomct_003.nii.gz:d2:s10:l6"] * 3})
    stores = [(0, "a", TASK02, "1.1.0"), (1, "b", TASK02, "1.0.0")]
    kept, report = filter_frame(frame, stores, FilterSettings(True, None))
    assert kept.height == 3
    assert [r.status for r in report.rows] == ["unfiltered: annotation pin 1.1.0", "unfiltered: no data folder"]
    assert any("--data_dir or --removed_samples_dir" in n for n in report.notes)


def test_parse_reports_and_compare_applies_the_filter(phantom_results: Path, phantom_dir: Path,
                                                      tmp_path: Path) -> None:
    lists = listed_keys(phantom_dir)
    listed = sum(is_listed(lists, TASK02, p["key"]) for p in _parsed(phantom_results, "mean", TASK02))
    res = run_cli("parse", "--results_dir", str(phantom_results), "--families", "TL", "--dry_run")
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("mean") and TASK02 in x)
    assert f"tl_filter: filtered, {listed} listed" in line
    runs = {}
    for flag in ((), ("--no_tl_filter",)):
        out = tmp_path / ("off" if flag else "on")
        res = run_cli("compare", "--results_dir", str(phantom_results), "--a", "mean", "--b", "oracle", "--families",
                      "TL", "--n_boot", "100", "--output_dir", str(out), *flag)
        assert res.returncode == 0, res.stderr
        (path,) = list(out.glob("compare_*.json"))
        runs[bool(flag)] = {r["task"]: r["n_pairs"] for r in json.loads(path.read_text())["rows"]
                            if r["metric"] == "SuccessRate"}
    assert runs[True][TASK02] == 32 and runs[False][TASK02] == 32 - listed == 16
    assert runs[True][MR_AXIAL] == runs[False][MR_AXIAL]


@pytest.mark.parametrize("entry", [{"image_file": "x", "slice_dim": "z", "slice_idx": "3", "task_ID": 2}])
def test_list_entries_read_as_upstream_reads_them(entry: dict, tmp_path: Path) -> None:
    """``int(slice_idx)``, ``int(task_ID)``: strings and numbers alike (upstream's ``_build_removed_set``)."""
    from medvision_bm.data.removed_samples import read_removed_list

    path = tmp_path / LIST_NAME
    path.write_text(json.dumps([entry]))
    assert read_removed_list(path) == frozenset({("x", 2, 3, 2)})


def test_parse_counts_listed_samples_without_the_report_extra(phantom_results: Path) -> None:
    """A plain install (no polars) still parses: the filter's counts for `parse` need no frame library."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['polars'] = None\n"
            "from medvision_bm.cli.parse import parse_main\n"
            f"raise SystemExit(parse_main(['--results_dir', {str(phantom_results)!r}, '--families', 'TL', "
            "'--models', 'oracle', '--dry_run']))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"{TASK02}" in res.stdout and "tl_filter: filtered, 16 listed" in res.stdout
