"""The case-level split swap between two annotation releases (upstream YongchengYAO/MedVision
script/analyze/compare-ds-release/count_case_split_swap.py @45fa8e5): a case's split pooled over a dataset's tasks,
test -> train and train -> test over the shared cases, cases in one release only; and the suite's per-task view."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from medvision_bm.cli import main
from medvision_bm.data.split_swap import compare_releases, split_swap
from medvision_bm.errors import UserError


def _plan(ds_dir: Path, version: str) -> dict:
    return json.loads(gzip.decompress((ds_dir / f"benchmark_plan_biometry_v{version}.json.gz").read_bytes()))


def _write(ds_dir: Path, version: str, plan: dict) -> None:
    (ds_dir / f"benchmark_plan_biometry_v{version}.json.gz").write_bytes(gzip.compress(json.dumps(plan).encode()))


@pytest.fixture()
def two_releases(phantom_dir: Path, tmp_path: Path) -> tuple[Path, str, str, str]:
    """A copy of one phantom dataset with a second release where one test case and one train case trade splits
    (in every task that holds them) and one train case is dropped."""
    src = next(p.parent for p in sorted((phantom_dir / "Datasets").glob("*/benchmark_plan_biometry_v1.0.0.json.gz")))
    ds_dir = tmp_path / "Data" / "Datasets" / src.name
    ds_dir.mkdir(parents=True)
    shutil.copy(src / "benchmark_plan_biometry_v1.0.0.json.gz", ds_dir)
    plan = _plan(ds_dir, "1.0.0")
    task = plan["tasks"][0]
    a = task["test_cases"][0]["image_file"]
    trains = list(dict.fromkeys(c["image_file"] for c in task["train_cases"]))
    assert len(trains) >= 2, "the phantom's first biometry task needs two training cases"
    b, gone = trains[0], trains[1]
    for t in plan["tasks"]:
        train = [c for c in t["train_cases"] if c["image_file"] not in (b, gone)]
        test = [c for c in t["test_cases"] if c["image_file"] != a]
        train += [c for c in t["test_cases"] if c["image_file"] == a]
        test += [c for c in t["train_cases"] if c["image_file"] == b]
        t["train_cases"], t["test_cases"] = train, test
        t["train_cases_number"], t["test_cases_number"] = len(train), len(test)
    _write(ds_dir, "1.4.0", plan)
    return tmp_path / "Data", src.name, a, b


def test_swapped_cases_counted_per_dataset(two_releases) -> None:
    data, ds, _, _ = two_releases
    old = _plan(data / "Datasets" / ds, "1.0.0")
    images = {s: {c["image_file"] for t in old["tasks"] for c in t[f"{s}_cases"]} for s in ("train", "test")}
    rows, skipped = split_swap(data, "1.0.0", "1.4.0")
    assert skipped == [] and [r[0] for r in rows] == [ds]
    row = rows[0][1]
    assert row["test_to_train"] == 1 and row["train_to_test"] == 1
    assert row["old_only"] == 1 and row["new_only"] == 0
    assert row["shared"] == len(images["train"] | images["test"]) - 1
    assert row["old_test"] == len(images["test"]) and row["old_train"] == len(images["train"]) - 1
    # the other direction: the new release's test case was the old one's training case
    back = split_swap(data, "1.4.0", "1.0.0")[0][0][1]
    assert (back["test_to_train"], back["train_to_test"], back["old_only"], back["new_only"]) == (1, 1, 0, 1)


def test_cli_prints_upstream_table_and_skips(two_releases, capsys) -> None:
    data, ds, _, _ = two_releases
    (data / "Datasets" / "OnlyNew").mkdir()
    _write(data / "Datasets" / "OnlyNew", "1.4.0", {"tasks": []})
    assert main(["data", "split-swap", "--data_dir", str(data)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Case-level train/test swap, v1.0.0 -> v1.4.0"
    row = next(line for line in out if line.startswith(ds))
    cells = [c.strip() for c in row.split("|")]
    assert cells[2].startswith("1/") and cells[3].startswith("1/")
    skipped = out.index("Skipped (no v1.0.0 or v1.4.0 plan): OnlyNew")
    assert any(line.startswith("All ") for line in out[:skipped])
    # the per-task table is the suite's own: after upstream's last line, one blank line apart, named as ours
    assert out[skipped + 1] == "" and out[skipped + 2].startswith("Per task (medvision-bm's view, not upstream's)")
    tasks = [[c.strip() for c in line.split("|")] for line in out[skipped + 2:] if line.startswith(f"{ds} ")]
    n_tasks = len(_plan(data / "Datasets" / ds, "1.0.0")["tasks"])
    assert [t[1] for t in tasks] == [f"Task{i + 1:02d}" for i in range(n_tasks)]
    assert all(t[3].startswith("1/") and t[4].startswith("1/") for t in tasks)


def test_swapped_cases_counted_per_task(two_releases) -> None:
    """A task counts the cases it lists in either release, each with its release's split: a case the new release
    dropped from one task but holds as a training case in another still moved test -> train for that task; a case
    new to one task is new only there."""
    data, ds, a, _ = two_releases
    plan = _plan(data / "Datasets" / ds, "1.4.0")
    assert len(plan["tasks"]) >= 2, "the phantom's first biometry dataset needs two tasks"
    last = plan["tasks"][-1]
    last["train_cases"] = [c for c in last["train_cases"] if c["image_file"] != a]
    last["train_cases"].append({**last["train_cases"][0], "case_ID": "new", "image_file": "Images/new_case.nii.gz"})
    last["train_cases_number"] = len(last["train_cases"])
    _write(data / "Datasets" / ds, "1.4.0", plan)
    old = _plan(data / "Datasets" / ds, "1.0.0")
    report = compare_releases(data, "1.0.0", "1.4.0")
    by_pos = {pos: row for name, pos, row in report.tasks if name == ds}
    assert sorted(by_pos) == list(range(len(old["tasks"])))
    for pos, row in by_pos.items():
        listed = {c["image_file"] for s in ("train", "test") for c in old["tasks"][pos][f"{s}_cases"]}
        assert (row["test_to_train"], row["train_to_test"], row["old_only"]) == (1, 1, 1)
        assert row["shared"] == len(listed) - 1
        assert row["new_only"] == (1 if pos == len(old["tasks"]) - 1 else 0)
    # the pooled row is upstream's and does not move: the dropped listing is still a case of the release
    assert report.datasets[0][1]["test_to_train"] == 1 and report.datasets[0][1]["new_only"] == 1


def test_case_in_both_splits_is_refused(two_releases) -> None:
    data, ds, a, _ = two_releases
    plan = _plan(data / "Datasets" / ds, "1.4.0")
    plan["tasks"].append({"task_ID": "x", "train_cases": [], "test_cases": [
        next(c for t in plan["tasks"] for c in t["train_cases"] if c["image_file"] == a)]})
    _write(data / "Datasets" / ds, "1.4.0", plan)
    with pytest.raises(UserError, match="both train and test"):
        split_swap(data, "1.0.0", "1.4.0")


@pytest.mark.parametrize("flag", ["--old_version", "--new_version"])
def test_a_release_that_does_not_exist_is_one_line_naming_the_flag(two_releases, flag, capsys) -> None:
    data_dir = two_releases[0]
    assert main(["data", "split-swap", "--data_dir", str(data_dir), flag, "1.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{flag} '1.9' is not an annotation release" in err[0]


def test_a_plan_case_that_is_no_object_is_a_one_line_error_naming_the_plan(two_releases) -> None:
    data, ds, _, _ = two_releases
    plan = _plan(data / "Datasets" / ds, "1.4.0")
    plan["tasks"][0]["test_cases"][0] = 1
    _write(data / "Datasets" / ds, "1.4.0", plan)
    with pytest.raises(UserError, match="has a case without an image_file string") as exc:
        compare_releases(data, "1.0.0", "1.4.0")
    assert "benchmark_plan_biometry_v1.4.0.json.gz" in str(exc.value) and "\n" not in str(exc.value)
