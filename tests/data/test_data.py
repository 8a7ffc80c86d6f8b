"""The bundled phantom in upstream's layout, and the `medvision-bm data` commands (check, tasks, download).

The reader's rules themselves (filters, order, ceiling, ACK, task names, bad plan files) are pinned on hand-built
upstream folders in tests/data/test_upstream_layout.py; here the phantom is checked to exercise them and the commands to
report them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from medvision_bm.data.download import config_name, plan_download
from medvision_bm.data.layout import DataDir
from medvision_bm.data.phantom import DEFAULT_SEED, PHANTOM_TASKS, SPECS, make_phantom, tasks_list_paths
from medvision_bm.data.planner import DatasetContract
from medvision_bm.errors import UserError
from mvtest_support import REPO

CLI = [sys.executable, "-m", "medvision_bm.cli"]


def data_at(root: Path, pin: str, ack: str | None = "1.4.0", filtering: bool = True) -> DataDir:
    return DataDir(DatasetContract(root.resolve(), pin, ack, filtering))


def run_cli(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}, **(env or {})}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=full, cwd=cwd or REPO, timeout=300)


def _digest_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".cache" not in p.parts}


# ------------------------------------------------------------------ the phantom


def test_phantom_is_byte_deterministic_and_seeded(tmp_path, phantom_dir):
    again = tmp_path / "again"
    make_phantom(again, seed=DEFAULT_SEED)
    assert _digest_tree(again / "Datasets") == _digest_tree(phantom_dir / "Datasets")
    other = tmp_path / "other"
    make_phantom(other, seed=DEFAULT_SEED + 1)
    assert _digest_tree(other / "Datasets") != _digest_tree(phantom_dir / "Datasets")


def test_committed_phantom_task_lists_match_the_default_seed(tmp_path, repo_root):
    make_phantom(tmp_path / "d", tasks_list_dir=tmp_path / "lists")
    for fam, path in tasks_list_paths(tmp_path / "lists").items():
        committed = json.loads((repo_root / "tasks_list" / path.name).read_text())
        assert committed == json.loads(path.read_text()), f"regenerate tasks_list/{path.name} with make-phantom"
        assert list(committed) == list(PHANTOM_TASKS[fam])


def test_phantom_is_written_in_upstreams_layout(phantom_dir):
    """Plans directly in the dataset folder, sub-dataset and modality image folders, versioned landmark folders
    (data-layout.md @39dd6bf); every path a doc names exists."""
    ds = phantom_dir / "Datasets"
    assert (ds / "PhantomCT" / "benchmark_plan_detection_v1.0.0.json.gz").is_file()
    assert {p.name for p in (ds / "PhantomCT").glob("benchmark_plan_biometry_v*.json.gz")} == {
        f"benchmark_plan_biometry_v{v}.json.gz" for v in ("1.0.0", "1.1.0", "1.1.1", "1.4.0")}
    assert (ds / "PhantomMR" / "PhantomMR-GLI" / "Images-t1c").is_dir()
    assert (ds / "PhantomCT" / "Landmarks-Label5").is_dir() and (ds / "PhantomCT" / "Landmarks-Label5-v1.1.1").is_dir()
    data = data_at(phantom_dir, "1.4.0")
    for task in ("PhantomMR_TumorLesionSize_Task01_Axial", "PhantomFetal_BiometricsFromLandmarks_Task01_Axial",
                 "PhantomCT_BoxCoordinate_Task01_Coronal"):
        for doc in data.samples(task).docs():
            for name in ("image_file", "mask_file", "landmark_file"):
                rel = getattr(doc, name)
                if rel is not None:
                    assert (ds / rel).is_file(), rel
    lm = json.loads(gzip.decompress((ds / "PhantomCT" / "Landmarks-Label5-v1.4.0").glob("*.json.gz").__next__()
                                    .read_bytes()))
    assert set(lm) == {"slice_landmarks_x", "slice_landmarks_y", "slice_landmarks_z"}


def _plan(phantom_dir: Path, ds: str, kind: str, version: str) -> dict:
    path = phantom_dir / "Datasets" / ds / f"benchmark_plan_{kind}_v{version}.json.gz"
    return json.loads(gzip.decompress(path.read_bytes()))


def test_phantom_exercises_every_detection_filter(phantom_dir):
    """Slices whose label has several boxes, and single boxes under 10 px, exist, and the loader drops them."""
    plan = _plan(phantom_dir, "PhantomCT", "detection", "1.0.0")
    items = [it for c in plan["tasks"][0]["test_cases"] for e in c["slice_profiles_z"] for it in e["slice_profile"]]
    multi = [it for it in items if len(it["bboxes"]) > 1]
    small = [it for it in items if len(it["bboxes"]) == 1 and min(it["bboxes"][0]["dimensions"]) < 10]
    kept = [it for it in items if len(it["bboxes"]) == 1 and min(it["bboxes"][0]["dimensions"]) >= 10]
    assert multi and small and kept
    task = "PhantomCT_BoxCoordinate_Task01_Axial"
    assert len(data_at(phantom_dir, "1.0.0").samples(task)) == len(kept)
    assert len(data_at(phantom_dir, "1.0.0", filtering=False).samples(task)) == len(items)


def test_phantom_tl_annotations_change_between_versions(phantom_dir):
    """1.0.0 has no n_total_clusters (fallback: one measured cluster passes), 1.1.0 drops multi-cluster slices,
    1.1.1 changes values (the in-plane spacing fix), 1.4.0 adds small lesions (release notes v1.1.0-v1.4.0)."""
    task = "PhantomCT_TumorLesionSize_Task02_Axial"
    keys = {}
    values = {}
    for v in ("1.0.0", "1.1.0", "1.1.1", "1.4.0"):
        docs = data_at(phantom_dir, v).samples(task).docs()
        keys[v] = {d.key for d in docs}
        values[v] = {d.key: d.biometric_profile["metric_value_major_axis"][0] for d in docs}
    entries = [e for c in _plan(phantom_dir, "PhantomCT", "biometry", "1.1.0")["tasks"][1]["test_cases"]
               for e in c["slice_profiles_z"]]
    assert any(e["n_total_clusters"] > 1 for e in entries)
    assert keys["1.0.0"] - keys["1.1.0"], "a slice kept by the 1.0.0 fallback must be dropped at 1.1.0"
    shared = keys["1.1.0"] & keys["1.1.1"]
    assert shared and any(values["1.1.0"][k] != values["1.1.1"][k] for k in shared)
    assert len(keys["1.4.0"]) >= len(keys["1.1.1"])


def test_phantom_dataset_published_later_is_refused_at_the_paper_pin(phantom_dir):
    task = "PhantomFetal_BiometricsFromLandmarks_Task01_Axial"
    with pytest.raises(UserError, match=r"not published at the selected version.*first ships at v1\.2\.0"):
        data_at(phantom_dir, "1.0.0").samples(task)
    assert len(data_at(phantom_dir, "1.2.0").samples(task)) > 0


def test_phantom_specs_cover_every_family_and_modality():
    assert {s.modality for s in SPECS} >= {"CT", "MRI", "X Ray"}
    assert any(s.tl_targets for s in SPECS) and any(s.landmarks for s in SPECS)


# ------------------------------------------------------------------ data check / data tasks


def test_data_check_reports_plan_versions_and_counts(tmp_path, phantom_dir):
    tasks = {"PhantomCT_TumorLesionSize_Task02_Axial-CoT": 1, "PhantomCT_BoxCoordinate_Task01_Axial": 2,
             "Nowhere_BoxCoordinate_Task01_Axial": 3}
    (tmp_path / "t.json").write_text(json.dumps(tasks))
    env = {"MedVision_PLANNER_VERSION": "1.1.0", "MedVision_ACK_RELEASE": "1.4.0"}
    r = run_cli(["data", "check", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tmp_path / "t.json"),
                 "--json"], env)
    assert r.returncode == 1, r.stderr  # one task is missing
    rows = {row["task"]: row for row in json.loads(r.stdout)["tasks"]}
    tl = rows["PhantomCT_TumorLesionSize_Task02_Axial-CoT"]
    assert tl["status"] == "ok" and tl["plan_version"] == "1.1.0" and tl["samples"] < tl["candidates"]
    det = rows["PhantomCT_BoxCoordinate_Task01_Axial"]
    assert det["plan_version"] == "1.0.0" and det["exact"] is True and det["listed"] == 2
    assert rows["Nowhere_BoxCoordinate_Task01_Axial"]["status"] == "missing"


def test_data_check_without_a_list_names_what_the_pin_refuses(phantom_dir):
    r = run_cli(["data", "check", "--data_dir", str(phantom_dir)], {"MedVision_PLANNER_VERSION": "1.0.0"})
    assert r.returncode == 1
    assert "acknowledgement required" in r.stdout and "PhantomFetal (biometry tasks)" in r.stdout
    assert "PhantomCT_BoxCoordinate_Task01_Axial" in r.stdout


@pytest.mark.parametrize("pin", ["1.0.0", "1.1.1"])
def test_a_fresh_phantom_passes_data_check_at_a_pin_before_its_later_datasets(phantom_dir, pin):
    """PhantomFetal ships from 1.2.0 only (like upstream's later datasets); at the launchers' pin 1.0.0 it
    made `data check` exit 1 on a freshly generated phantom. Its rows now say "not at this pin" and the check passes."""
    r = run_cli(["data", "check", "--data_dir", str(phantom_dir)],
                {"MedVision_PLANNER_VERSION": pin, "MedVision_ACK_RELEASE": "1.4.0"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    later = [ln for ln in r.stdout.splitlines() if ln.startswith("PhantomFetal")]
    assert len(later) == 2 and all(" later " in ln for ln in later), r.stdout
    assert r.stdout.count("not at this pin: ") == 2 and "not usable" not in r.stderr
    assert "2 dataset kind(s) not at this pin" in r.stderr


def test_data_folder_with_no_usable_task_is_an_error(tmp_path):
    (tmp_path / "Datasets" / "Empty").mkdir(parents=True)
    r = run_cli(["data", "tasks", "--data_dir", str(tmp_path)], {"MedVision_PLANNER_VERSION": "latest"})
    assert r.returncode == 2 and "offers no task" in r.stderr and "Traceback" not in r.stderr
    r = run_cli(["data", "check", "--data_dir", str(tmp_path)], {"MedVision_PLANNER_VERSION": "latest"})
    assert r.returncode == 2 and "no usable task" in r.stderr


def test_data_tasks_lists_every_task_and_needs_a_pin(phantom_dir):
    r = run_cli(["data", "tasks", "--data_dir", str(phantom_dir)], {"MedVision_PLANNER_VERSION": "latest"})
    assert r.returncode == 0, r.stderr
    names = dict(line.split("\t") for line in r.stdout.splitlines())
    assert "PhantomFetal_BiometricsFromLandmarks_Task01_Coronal" in names
    assert "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal" in names
    assert all(int(v) > 0 for v in names.values())
    r = run_cli(["data", "tasks", "--data_dir", str(phantom_dir)])
    assert r.returncode == 2 and "annotation version selection required" in r.stderr


# ------------------------------------------------------------------ download


def test_download_plan_skips_present_datasets_and_strips_variants(tmp_path, phantom_dir):
    assert config_name("KiTS23_BoxCoordinate_Task01_Axial-CoT", "test") == "KiTS23_BoxSize_Task01_Axial_Test"
    assert (config_name("Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal", "train")
            == "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal_Train")
    root = tmp_path / "d"
    shutil.copytree(phantom_dir, root)
    (root / ".downloaded_datasets.json").write_text(json.dumps({"dataset_PhantomCT": "1.4.0"}))
    plan = plan_download(root, ["PhantomCT_BoxCoordinate_Task01_Axial", "PhantomMR_BoxCoordinate_Task01_Axial-CoT",
                                "KiTS23_TumorLesionSize_Task01_Axial"], "test", "1.0.0", force=False)
    assert plan.present == ["PhantomCT"]  # the others have no tracker entry: fetched
    assert plan.fetch == {"PhantomMR": "PhantomMR_BoxSize_Task01_Axial_Test",
                          "KiTS23": "KiTS23_TumorLesionSize_Task01_Axial_Test"}
    assert "PhantomCT" in plan_download(root, ["PhantomCT_BoxCoordinate_Task01_Axial"], "test", "1.0.0",
                                        force=True).fetch


def test_download_refuses_restricted_datasets_without_credentials_and_new_datasets(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps({"FeTA24_BiometricsFromLandmarks_Task01_Axial": 40}))
    env = {"MedVision_PLANNER_VERSION": "1.0.0", "SYNAPSE_TOKEN": ""}
    r = run_cli(["data", "download", "--data_dir", str(tmp_path / "D"), "--tasks_list_json_path",
                 str(tmp_path / "t.json")], env)
    assert r.returncode == 2 and "SYNAPSE_TOKEN" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "k.json").write_text(json.dumps({"KiTS23_BoxCoordinate_Task01_Axial": 1}))
    # inside the `data` environment (the re-run is not handed on again) an interpreter without datasets 3.x says so
    r = run_cli(["data", "download", "--data_dir", str(tmp_path / "D"), "--tasks_list_json_path",
                 str(tmp_path / "k.json")], {**env, "MEDVISION_IN_DATA_ENV": "1"})
    assert r.returncode == 2 and "envs build --env data" in r.stderr and "Traceback" not in r.stderr


LOADER_SCRIPT = '''
"""A local stand-in for upstream's MedVision.py: each config 'downloads' its dataset from a local source folder."""
import json
import os
import shutil

import datasets

SOURCE = os.environ["MEDVISION_TEST_SOURCE"]
CONFIGS = json.loads(os.environ["MEDVISION_TEST_CONFIGS"])


class MedVisionStandIn(datasets.GeneratorBasedBuilder):
    BUILDER_CONFIGS = [datasets.BuilderConfig(name=c) for c in CONFIGS]

    def _info(self):
        return datasets.DatasetInfo(features=datasets.Features({"image_file": datasets.Value("string")}))

    def _split_generators(self, dl_manager):
        root = os.environ["MedVision_DATA_DIR"]
        dataset = self.config.name.split("_")[0]
        target = os.path.join(root, "Datasets", dataset)
        if not os.path.isdir(target) or os.environ.get("MedVision_FORCE_DOWNLOAD_DATA") == "true":
            shutil.copytree(os.path.join(SOURCE, "Datasets", dataset), target, dirs_exist_ok=True)
        tracker = os.path.join(root, ".downloaded_datasets.json")
        entries = json.load(open(tracker)) if os.path.exists(tracker) else {}
        entries["dataset_" + dataset] = "1.4.0"
        json.dump(entries, open(tracker, "w"))
        return [datasets.SplitGenerator(name=datasets.Split.TEST, gen_kwargs={"dataset": dataset})]

    def _generate_examples(self, dataset):
        yield 0, {"image_file": dataset}
'''


@pytest.fixture(scope="session")
def data_envs_root(tmp_path_factory) -> Path:
    """One envs root per test session: the `data` environment is built once (from the uv cache) and reused."""
    return tmp_path_factory.mktemp("data-envs")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_download_runs_upstreams_loader_path_in_the_data_environment(tmp_path, phantom_dir, data_envs_root):
    """The real code path: from this interpreter (datasets 4+), `data download` builds the `data` environment the
    project declares (requirements/requirements_data.txt, datasets 3.6.0) and re-runs itself there, where
    ``load_dataset(<repo>, name=<config>, trust_remote_code=True)`` runs with upstream's environment
    (MedVision_DATA_DIR, HF_HOME under Data/.cache); the hub is unreachable, so the repository is a local folder
    with a loading script of ours."""
    repo = tmp_path / "MedVisionStandIn"
    repo.mkdir()
    (repo / "MedVisionStandIn.py").write_text(LOADER_SCRIPT)
    (tmp_path / "t.json").write_text(json.dumps({"PhantomCT_BoxCoordinate_Task01_Axial-CoT": 31,
                                                 "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal": 8}))
    data = tmp_path / "Data"
    drop = ("MedVision_", "HF_", "MEDVISION_IN_DATA_ENV", "BENCHMARK_DIR", "ENV_TOOL", "VIRTUAL_ENV")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(drop)}, "ENVS_ROOT": str(data_envs_root),
           "MEDVISION_ENV_BYTECODE": "0", "PYTHONPATH": str(REPO / "src"), "MedVision_PLANNER_VERSION": "1.0.0",
           "MEDVISION_TEST_SOURCE":
           str(phantom_dir), "MEDVISION_TEST_CONFIGS": json.dumps(["PhantomCT_BoxSize_Task01_Axial_Test",
                                                                   "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal_Test"])}
    cmd = [*CLI, "data", "download", "--data_dir", str(data), "--tasks_list_json_path", str(tmp_path / "t.json"),
           "--hf_dataset", str(repo)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "building the `data` environment" in r.stderr and "running in the `data` environment" in r.stderr
    env_python = data_envs_root / "data" / "bin" / "python"
    versions = subprocess.run([str(env_python), "-c", "import datasets, medvision_bm; print(datasets.__version__)"],
                              capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert versions.stdout.strip() == "3.6.0", versions.stderr[-1000:]
    assert (data / "Datasets" / "PhantomCT" / "benchmark_plan_detection_v1.0.0.json.gz").is_file()
    assert (data / ".cache" / "huggingface" / "datasets").is_dir()  # HF_DATASETS_CACHE under Data/.cache
    tracker = json.loads((data / ".downloaded_datasets.json").read_text())
    assert {"dataset_PhantomCT", "dataset_PhantomXR"} <= set(tracker)
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert again.returncode == 0 and "nothing to download" in again.stderr
    forced = subprocess.run([*cmd, "--force_download_data"], capture_output=True, text=True, env=env, timeout=600,
                            cwd=tmp_path)  # the environment is ready now: reused, nothing built
    assert forced.returncode == 0 and "running in the `data` environment" in forced.stderr, forced.stderr[-2000:]
    assert "building the `data` environment" not in forced.stderr
    assert len(data_at(data, "1.0.0").samples("PhantomCT_BoxCoordinate_Task01_Axial")) > 0


def test_sample_limit_on_an_unindexed_plan_reads_only_its_first_samples(tmp_path, phantom_dir):
    """A --sample_limit run on a plan with no index yet streams the plan until limit + 1 samples are kept: the same
    docs, in the same doc_id order, as the full index gives, and nothing is cached."""
    root = tmp_path / "d"
    shutil.copytree(phantom_dir, root, ignore=shutil.ignore_patterns(".cache"))
    task = "PhantomCT_BoxCoordinate_Task01_Axial"
    part = data_at(root, "1.0.0").samples(task, limit=5)
    assert not part.complete and len(part) > 5
    first = [d.to_json() for d in part.docs(list(range(5)))]
    assert not (root / ".cache" / "medvision_bm" / "plan-index").exists() or not any(
        (root / ".cache" / "medvision_bm" / "plan-index").iterdir())
    full = data_at(root, "1.0.0").samples(task)
    assert full.complete and len(full) > len(part)
    assert [d.to_json() for d in full.docs(list(range(5)))] == first
    whole = data_at(tmp_path / "d", "1.0.0", filtering=False)  # another index key: not cached yet
    small = "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal"
    everything = whole.samples(small, limit=10_000)
    assert everything.complete and len(everything) == len(data_at(root, "1.0.0").samples(small))
