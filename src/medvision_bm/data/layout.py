"""The MedVision on-disk layout: datasets, versioned benchmark plans, task names, task lists and docs.

    <data_dir>/Datasets/<Dataset>/
        dataset.json                                   modality, anatomy, label names
        Images/<case>.nii.gz                           volumes
        Masks/<case>.nii.gz                            label masks (optional)
        Landmarks/<case>.json                          landmark coordinates (optional)
        BenchmarkPlans/<Dataset>__planner-v<X.Y.Z>.json.gz   one plan per planner version
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from medvision_bm.data.docs import TASK_TYPES, Doc
from medvision_bm.data.planner import PLANNER_VERSIONS
from medvision_bm.errors import UserError

PLAN_SCHEMA = "medvision-plan/1"
PLANES = ("Axial", "Coronal", "Sagittal")
_TASK_RE = re.compile(
    r"^(?P<dataset>[^_]+)_(?P<task_type>" + "|".join(TASK_TYPES) + r")(?:_(?P<measure>[A-Za-z]+))?"
    r"_(?P<task_id>Task\d{2,})_(?P<plane>" + "|".join(PLANES) + r")(?P<suffix>-[A-Za-z0-9-]+)?$"
)


@dataclass(frozen=True)
class TaskName:
    name: str
    dataset: str
    task_type: str
    task_id: str
    plane: str

    @property
    def family(self) -> str:
        return TASK_TYPES[self.task_type]


def parse_task_name(name: str) -> TaskName:
    """Split ``<Dataset>_<TaskType>_Task<NN>_<Plane>`` (an optional ``-Suffix`` is kept in the name)."""
    m = _TASK_RE.match(name)
    if not m:
        raise UserError(
            f"task name {name!r} does not follow <Dataset>_<TaskType>_Task<NN>_<Plane> with TaskType one of "
            f"{', '.join(TASK_TYPES)} and Plane one of {', '.join(PLANES)}; check the tasks list"
        )
    return TaskName(name, m["dataset"], m["task_type"], m["task_id"], m["plane"])


def plan_filename(dataset: str, version: str) -> str:
    return f"{dataset}__planner-v{version}.json.gz"


def load_tasks_list(path: str | Path) -> dict[str, int]:
    """A tasks list is a JSON object: task name -> sample count (a non-negative integer)."""
    path = Path(path)
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"tasks list {path} {what}; pass --tasks_list_json_path pointing at a tasks_*.json file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"tasks list {path} is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc}); "
                        "it must be an object of task name -> sample count") from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"tasks list {path} must be a non-empty JSON object of task name -> sample count")
    out: dict[str, int] = {}
    for name, count in data.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise UserError(f"tasks list {path}: count for {name!r} is {count!r}; it must be a non-negative integer")
        parse_task_name(name)
        out[name] = count
    return out


class DataDir:
    """Reads datasets and plans under one data folder for one planner version."""

    def __init__(self, root: str | Path, planner_version: str) -> None:
        self.root = Path(root)
        self.planner_version = planner_version
        if not self.root.is_dir():
            raise UserError(
                f"data folder {self.root} does not exist; create the phantom data with "
                f"`medvision-bm data make-phantom --data_dir {self.root}` or point --data_dir at MedVision data"
            )
        if not (self.root / "Datasets").is_dir():
            raise UserError(
                f"data folder {self.root} has no Datasets/ subfolder; generate it with "
                f"`medvision-bm data make-phantom --data_dir {self.root}` or point --data_dir at MedVision data"
            )

    def datasets(self) -> list[str]:
        return sorted(p.name for p in (self.root / "Datasets").iterdir() if p.is_dir())

    def dataset_dir(self, dataset: str) -> Path:
        path = self.root / "Datasets" / dataset
        if not path.is_dir():
            found = ", ".join(self.datasets()) or "none"
            raise UserError(f"dataset {dataset!r} is not under {self.root / 'Datasets'} (found: {found}); "
                            "check the task name or --data_dir")
        return path

    def plan_versions(self, dataset: str) -> list[str]:
        folder = self.dataset_dir(dataset) / "BenchmarkPlans"
        prefix = f"{dataset}__planner-v"
        return sorted(p.name[len(prefix):-len(".json.gz")] for p in folder.glob(f"{prefix}*.json.gz"))

    def plan(self, dataset: str) -> dict[str, Any]:
        return _load_plan(self.dataset_dir(dataset) / "BenchmarkPlans" / plan_filename(dataset, self.planner_version),
                          dataset, self.planner_version)

    def tasks(self) -> dict[str, int]:
        """Every task of every dataset in this planner version: name -> test sample count."""
        out: dict[str, int] = {}
        for ds in self.datasets():
            if (self.dataset_dir(ds) / "BenchmarkPlans" / plan_filename(ds, self.planner_version)).is_file():
                for name, task in self.plan(ds)["tasks"].items():
                    out[name] = len(task["splits"].get("test", []))
        return out

    def task_plan(self, task: str) -> dict[str, Any]:
        tn = parse_task_name(task)
        plan = self.plan(tn.dataset)
        if task not in plan["tasks"]:
            known = sorted(plan["tasks"])
            raise UserError(f"task {task!r} is not in dataset {tn.dataset} at planner version {self.planner_version} "
                            f"(it has: {', '.join(known[:8])}{' ...' if len(known) > 8 else ''}); check the tasks list")
        return plan["tasks"][task]

    def docs(self, task: str, split: str = "test") -> list[Doc]:
        tn = parse_task_name(task)
        plan = self.plan(tn.dataset)
        tp = self.task_plan(task)
        samples = tp["splits"].get(split)
        if samples is None:
            raise UserError(f"task {task!r} has no {split!r} split at planner version {self.planner_version}")
        info = plan.get("dataset_info", {})
        return [_make_doc(tn, tp, info, split, i, s) for i, s in enumerate(samples)]


def _make_doc(tn: TaskName, tp: dict[str, Any], info: dict[str, Any], split: str, index: int,
              s: dict[str, Any]) -> Doc:
    return Doc(
        key=sample_key(s),
        task=tn.name,
        dataset=tn.dataset,
        family=tn.family,
        task_type=tn.task_type,
        task_id=tn.task_id,
        plane=tn.plane,
        split=split,
        index=index,
        image=s["image"],
        mask=s.get("mask"),
        slice_dim=int(s["slice_dim"]),
        slice_idx=int(s["slice_idx"]),
        label=int(s.get("label", 0)),
        label_name=s.get("label_name", ""),
        structure_kind=s.get("structure_kind", "anatomy"),
        modality=s.get("modality", info.get("modality", "")),
        anatomy=s.get("anatomy", info.get("anatomy", "")),
        spacing_mm=tuple(float(v) for v in s["spacing_mm"]),
        image_hw=tuple(int(v) for v in s["image_hw"]),
        pixel_hw_mm=tuple(float(v) for v in s["pixel_hw_mm"]),
        annotation=s["annotation"],
        measurement=s.get("measurement") or tp.get("measurement", ""),
        window=tuple(info["window"]) if info.get("window") else None,
    )


def sample_key(s: dict[str, Any]) -> str:
    """A stable key: image stem, slice axis and index, label (and measurement id for landmark tasks)."""
    stem = Path(s["image"]).name.removesuffix(".gz").removesuffix(".nii")
    key = f"{stem}:d{s['slice_dim']}:s{s['slice_idx']}:l{s.get('label', 0)}"
    mid = s.get("annotation", {}).get("measure_id")
    return f"{key}:{mid}" if mid else key


@lru_cache(maxsize=64)
def _load_plan(path: Path, dataset: str, version: str) -> dict[str, Any]:
    if not path.is_file():
        available = sorted(p.name for p in path.parent.glob("*.json.gz")) if path.parent.is_dir() else []
        if version not in PLANNER_VERSIONS:
            raise UserError(f"planner version {version!r} does not exist; known: {', '.join(PLANNER_VERSIONS)}")
        raise UserError(
            f"dataset {dataset} has no benchmark plan for planner version {version} ({path.name} missing; "
            f"found: {', '.join(available) or 'none'}); set MedVision_PLANNER_VERSION to an available version "
            "or regenerate the data"
        )
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            plan = json.load(fh)
    except (OSError, EOFError, zlib.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"benchmark plan {path} is unreadable ({type(exc).__name__}); regenerate or re-download it") from None
    if not isinstance(plan, dict) or plan.get("schema") != PLAN_SCHEMA or "tasks" not in plan:
        raise UserError(f"benchmark plan {path} is not a {PLAN_SCHEMA} file; regenerate or re-download it")
    return plan
