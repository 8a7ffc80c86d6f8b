"""The shipped task lists and catalogues are upstream's files byte for byte; the catalogues say which tasks exist at a
pinned release, `data tasks` reports it and a run refuses a task the pinned release lacks before anything runs.

Every byte check names the upstream file (repository YongchengYAO/MedVision) and the commit it was read at. The
files of 880f7d3, 837709e and 00bc49b are in upstream's history as a fork carries it (viennh/MedVision, which holds upstream's
commits up to ae6e130): their sha256 equals `git show <commit>:<path> | sha256sum` there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from medvision_bm.data.catalogue import SOURCE_RELEASE, availability, catalogue, known_datasets
from medvision_bm.data.layout import load_tasks_list
from mvtest_support import run_cli

REPO = Path(__file__).resolve().parents[2]
CATALOGUES = REPO / "src" / "medvision_bm" / "data" / "catalogues"

#: shipped file -> (upstream path, commit, sha256 of upstream's bytes at that commit)
UPSTREAM_FILES: dict[str, tuple[str, str, str]] = {
    "tasks_list/tasks_MedVision-AD-CoT.json": (
        "tasks_list/tasks_MedVision-AD-CoT.json", "880f7d3",
        "d0636e05d8f01b6c0958199830739a4042ddcbec97ee60001a78ebd6f7fef0a4"),
    "tasks_list/tasks_MedVision-detect-CoT.json": (
        "tasks_list/tasks_MedVision-detect-CoT.json", "3ddbef0",
        "caec86823bc53e9abb1424bbec1e198b3dfedf5482d007ebb36f1d71a852d9f9"),
    "tasks_list/tasks_MedVision-TL-CoT.json": (
        "tasks_list/tasks_MedVision-TL-CoT.json", "837709e",
        "b2a7179b52c32bdb3cde55b11d4f9d00578cde075bdf69918c80bf4a7fbdb808"),
    "tasks_list/OOD/tasks_MedVision-detect-planeOOD-CoT.json": (
        "tasks_list/OOD/tasks_MedVision-detect-planeOOD-CoT.json", "a9947a3",
        "a7cd0c918e4abaa62f0f4a488fe09f1f90c743373cad1015b98ed8f4372eea78"),
    "tasks_list/OOD/tasks_MedVision-detect-taskOOD-CoT.json": (
        "tasks_list/tasks_MedVision-detect-taskOOD-CoT.json", "d872cfa",
        "525588bf587b497e4faa525dff633786cf0d26b5e92dd5a6b7df1a5d8e31e724"),
    "tasks_list/OOD/tasks_MedVision-TL-planeOOD-CoT.json": (
        "tasks_list/tasks_MedVision-TL-planeOOD-CoT.json", "00bc49b",
        "eb6a32637a2ee812caac59801f9aa88a54a1df7a68bdc905ba61512ef11b5b7f"),
    "tasks_list/OOD/tasks_MedVision-TL-taskOOD-CoT.json": (
        "tasks_list/tasks_MedVision-TL-taskOOD-CoT.json", "00bc49b",
        "bb9a628f365cf5800286139dd9186f7b5fe494852f2b8d745a3a32586c6b437e"),
    "tasks_list/experimental/tasks_MedVision-AD-CoT-scaledPS.json": (
        "tasks_list/experimental/tasks_MedVision-AD-CoT-scaledPS.json", "a9947a3",
        "9f9ae25adc72f81ad8f4c81df53ee7f2c2c4149dc7c97cab763ae0476d6a3267"),
    "tasks_list/experimental/tasks_MedVision-TL-CoT-scaledPS.json": (
        "tasks_list/experimental/tasks_MedVision-TL-CoT-scaledPS.json", "a9947a3",
        "d6794793a64b042426de759aa2c37002ad8181300182212caac3e1bc0e1745ea"),
}
_CAT = "src/medvision_bm/data/catalogues/all_tasks__ds_v{v}/tasks_MedVision-{f}-CoT__AllSlices__Test.json"
for _v, _f, _commit, _sha in (
        ("1.0.0", "detect", "b6cbfae", "6859ea790c17011e4ce8dc97015642b608a5b8c46dd45b2b4ebfcd98d8b5edec"),
        ("1.0.0", "TL", "b6cbfae", "495859182f7b2734f92c286b9adc4b4f56be8ea11ee2dd3a2edfbd00ce1fbd41"),
        ("1.1.0", "TL", "b6cbfae", "d16afcc5a3f0b2b1cfd1a3ea288e2d24495d602debf646d083d94110e188ddcc"),
        ("1.1.1", "TL", "b6cbfae", "6f685b5ee04cdc39bab928261d95e0150de9773554662ff49ae2f561061a597f"),
        ("1.2.0", "detect", "b6cbfae", "aaa2adf9b8905072f307b1b388122139cd7d338014b904c0893e5b2c58b14d23"),
        ("1.2.0", "TL", "b6cbfae", "8f026b085ea9217d08ca468bb9d76be55a3c812640db627bb6cec3100e80f85b"),
        ("1.3.0", "detect", "b6cbfae", "380865a20668a0e0e2bb9edbaf413813e737ec45956a62100b5f0ec5010d6cb4"),
        ("1.3.0", "TL", "b6cbfae", "d18957dd8358b607a5ea79260338f441015e7c5152f32e212d8c32da991bb26a"),
        ("1.4.0", "TL", "b6cbfae", "8478b6d94086169fb1d98611500403c11dd1471d62d27c74d8f78236d975b117"),
        ("1.4.0", "AD", "be2ab7e", "3d3f54d7af9d89df14a8ac7df07c10cd7eb69e08e72712ea5325c9dbc524865c")):
    _shipped = _CAT.format(v=_v, f=_f)
    UPSTREAM_FILES[_shipped] = (f"dataset-info/{_shipped.split('/catalogues/')[1]}", _commit, _sha)


@pytest.mark.parametrize("shipped", sorted(UPSTREAM_FILES), ids=str)
def test_shipped_file_is_upstreams_bytes(shipped):
    upstream_path, commit, sha = UPSTREAM_FILES[shipped]
    data = (REPO / shipped).read_bytes()
    assert hashlib.sha256(data).hexdigest() == sha, f"{shipped} differs from upstream {upstream_path} @{commit}"


def test_every_catalogue_file_shipped_is_checked():
    shipped = {str(p.relative_to(REPO)) for p in CATALOGUES.rglob("*.json")}
    assert shipped == {k for k in UPSTREAM_FILES if "/catalogues/" in k}


@pytest.mark.parametrize("path", sorted(p.relative_to(REPO) for p in (REPO / "tasks_list").rglob("*.json")), ids=str)
def test_every_shipped_list_loads(path):
    assert load_tasks_list(REPO / path)


# Subtasks per release and family, train and test together, as upstream's readmes state them (dataset-info/
# all_tasks__ds_v1.{2,3,4}.0/readme.md @be2ab7e): the test files hold half of them.
@pytest.mark.parametrize("family,release,subtasks", [
    ("detect", "1.2.0", 360), ("detect", "1.3.0", 378), ("detect", "1.4.0", 378),
    ("TL", "1.2.0", 182), ("TL", "1.3.0", 224), ("TL", "1.4.0", 228), ("AD", "1.4.0", 10), ("AD", "1.0.0", 10)])
def test_catalogue_sizes_are_upstreams_coverage(family, release, subtasks):
    cat = catalogue(family, release)
    assert cat is not None and len(cat.tasks) == subtasks // 2


@pytest.mark.parametrize("shipped,release", [
    ("tasks_list/tasks_MedVision-AD-CoT.json", "1.0.0"), ("tasks_list/tasks_MedVision-detect-CoT.json", "1.0.0"),
    ("tasks_list/tasks_MedVision-TL-CoT.json", "1.0.0"),
    ("tasks_list/OOD/tasks_MedVision-detect-planeOOD-CoT.json", "1.0.0"),
    ("tasks_list/OOD/tasks_MedVision-detect-taskOOD-CoT.json", "1.0.0"),
    # upstream runs the T/L OOD lists at 1.1.1 (script/ablation/OOD/eval__MedVision-V0-7B__TL__taskOOD.sh @2673ce5)
    ("tasks_list/OOD/tasks_MedVision-TL-planeOOD-CoT.json", "1.1.1"),
    ("tasks_list/OOD/tasks_MedVision-TL-taskOOD-CoT.json", "1.1.1"),
    ("tasks_list/experimental/tasks_MedVision-AD-CoT-scaledPS.json", "1.0.0"),
    ("tasks_list/experimental/tasks_MedVision-TL-CoT-scaledPS.json", "1.0.0")])
def test_upstreams_lists_exist_at_the_release_upstream_runs_them(shipped, release):
    verdicts = {t: availability(t, release) for t in load_tasks_list(REPO / shipped)}
    assert all(a.exists for a in verdicts.values()), {t: a.reason for t, a in verdicts.items() if not a.exists}


def test_availability_names_why_a_task_is_missing():
    assert availability("MSWAL_TumorLesionSize_Task01_Axial-CoT", "1.0.0").reason == "first published at release 1.3.0"
    assert availability("MSWAL_TumorLesionSize_Task01_Axial-CoT-scaledPS", "1.3.0").samples == 423
    empty = availability("BraTS24_TumorLesionSize_Task11_Sagittal-CoT", "1.0.0")  # upstream lists it with 0
    assert (empty.status, empty.exists, empty.samples) == ("empty", False, 0)
    assert availability("BraTS24_TumorLesionSize_Task11_Sagittal", "1.1.0").samples == 3
    assert availability("KiTS23_BoxCoordinate_Task05_Axial", "1.4.0").reason == \
        "not a task upstream publishes at any release"
    # 1.4.0's detection tasks are 1.3.0's (upstream's readme); 1.1.x's are 1.0.0's
    assert catalogue("detect", "1.4.0").tasks is catalogue("detect", "1.3.0").tasks
    assert catalogue("detect", "1.1.1").file == "dataset-info/all_tasks__ds_v1.0.0/" \
                                                "tasks_MedVision-detect-CoT__AllSlices__Test.json"


def test_what_the_catalogues_do_not_cover_is_left_to_the_data():
    assert availability("PhantomCT_BoxCoordinate_Task01_Axial", "1.0.0").exists is None  # no upstream dataset
    assert availability("KiTS23_BoxCoordinate_Task01_Axial_Train", "1.0.0").exists is None  # train split
    assert availability("KiTS23_BoxCoordinate_Task01_Axial", "1.2.1").exists is None  # no 1.2.1 catalogue
    assert availability("FeTA24_BiometricsFromLandmarks_Task01_Axial", "1.2.1").exists is True  # A/D: every release
    assert "PhantomCT" not in known_datasets("detect") and "MSWAL" in known_datasets("TL")
    assert set(SOURCE_RELEASE["AD"].values()) == {"1.4.0"}


# ------------------------------------------------------------------------------------------------ CLI


def _list(tmp_path: Path, names: list[str]) -> Path:
    path = tmp_path / "tasks_mixed.json"
    path.write_text(json.dumps(dict.fromkeys(names, 1)))
    return path


def test_data_tasks_says_which_tasks_exist_at_the_pin(tmp_path):
    tl = _list(tmp_path, ["KiTS23_TumorLesionSize_Task01_Axial-CoT", "MSWAL_TumorLesionSize_Task01_Axial-CoT",
                          "PhantomCT_BoxCoordinate_Task01_Axial"])
    r = run_cli("data", "tasks", "--tasks_list_json_path", str(tl), env={"MedVision_PLANNER_VERSION": "1.0.0"})
    assert r.returncode == 1 and "Traceback" not in r.stderr
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()[1:]}
    assert rows["KiTS23_TumorLesionSize_Task01_Axial-CoT"][:2] == ["yes", "673"]
    assert rows["MSWAL_TumorLesionSize_Task01_Axial-CoT"][0] == "no"
    assert rows["PhantomCT_BoxCoordinate_Task01_Axial"][0] == "unknown"
    assert "1 of 3 task(s) have no samples at annotation release 1.0.0" in r.stderr
    r = run_cli("data", "tasks", "--tasks_list_json_path", str(tl), env={"MedVision_PLANNER_VERSION": "1.3.0"})
    assert r.returncode == 0, r.stderr


def test_data_tasks_upstream_lists_the_pins_catalogue():
    r = run_cli("data", "tasks", "--upstream", env={"MedVision_PLANNER_VERSION": "1.0.0"})
    assert r.returncode == 0, r.stderr
    names = dict(line.split("\t") for line in r.stdout.splitlines())
    assert names["KiTS23_TumorLesionSize_Task01_Axial-CoT"] == "673"
    assert "BraTS24_TumorLesionSize_Task11_Sagittal-CoT" not in names  # 0 samples at 1.0.0
    assert "MSWAL_BoxCoordinate_Task01_Axial-CoT" not in names and len(names) == 162 + 80 + 5


def test_a_run_refuses_a_task_the_pinned_release_lacks_before_anything_runs(tmp_path, phantom_dir):
    tl = _list(tmp_path, ["PhantomCT_BoxCoordinate_Task01_Axial", "MSWAL_TumorLesionSize_Task01_Axial-CoT"])
    r = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
                 "--results_dir", str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", env={"MedVision_PLANNER_VERSION": "1.0.0", "MedVision_ACK_RELEASE": "1.4.0"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "MSWAL_TumorLesionSize_Task01_Axial-CoT (first published at release 1.3.0)" in r.stderr
    assert not (tmp_path / "res").exists()


def test_a_phantom_task_the_pin_lacks_is_a_one_line_error_naming_it(tmp_path, phantom_dir):
    name = "PhantomFetal_BoxCoordinate_Task01_Axial-CoT"  # the phantom publishes PhantomFetal from 1.2.0
    tl = _list(tmp_path, ["PhantomCT_BoxCoordinate_Task01_Axial", name])
    r = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
                 "--results_dir", str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", env={"MedVision_PLANNER_VERSION": "1.0.0", "MedVision_ACK_RELEASE": "1.4.0"})
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("medvision-bm run: error")]
    assert r.returncode == 2 and len(lines) == 1 and f"task {name}:" in lines[0] and "1.2.0" in lines[0]
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("family,tag,where", [
    ("AD", "MedVision-AD-CoT", "tasks_list/tasks_MedVision-AD-CoT.json"),
    ("TL", "MedVision-TL-planeOOD-CoT", "tasks_list/OOD/tasks_MedVision-TL-planeOOD-CoT.json"),
    ("TL", "MedVision-TL-CoT-scaledPS", "tasks_list/experimental/tasks_MedVision-TL-CoT-scaledPS.json")])
def test_a_launcher_runs_a_shipped_list_by_its_tag(family, tag, where):
    res = subprocess.run(["bash", str(REPO / "script" / f"benchmark-{family}" / "qwen25vl.sh")], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "MV_DRY_RUN": "1", "TASK_TAG": tag})
    assert res.returncode == 0, res.stderr
    argv = shlex.split(res.stdout)
    assert argv[argv.index("--tasks_list_json_path") + 1] == str(REPO / where)
    assert argv[argv.index("--task_status_json_path") + 1].endswith(f"completed_tasks_{tag}.json")
