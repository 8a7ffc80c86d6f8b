"""The case-level split swap between two annotation releases (upstream YongchengYAO/MedVision
script/analyze/compare-ds-release/count_case_split_swap.py @45fa8e5): a case's split pooled over a dataset's tasks,
test -> train and train -> test over the shared cases, cases in one release only."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from medvision_bm.cli import main
from medvision_bm.data.split_swap import split_swap
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
    assert out[-1] == "Skipped (no v1.0.0 or v1.4.0 plan): OnlyNew"
    assert any(line.startswith("All ") for line in out)


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
