"""Upstream MedVision's ``Data/`` folder: task names, task lists, datasets, and the samples of a task.

    <data_dir>/
        Datasets/<dataset>/
            benchmark_plan_<segmentation|detection|biometry>_v<X.Y.Z>.json.gz
            Images[-<modality>]/, Masks/, Landmarks[-LabelN][-vX.Y.Z]/   (or inside <sub-dataset>/ folders)
        src/medvision_ds/                                               (upstream's dataset package, optional)
        .downloaded_datasets.json                                       (upstream's download tracker, optional)

Case paths in a plan are relative to the dataset folder and already name the sub-dataset and modality folder
(``AMOS22-CT/Images/...``, ``BraTS24-GLI/Images-t2f/...``), so one reader serves every dataset.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from medvision_bm import limits
from medvision_bm.data.docs import LOADER_TASK_TYPE, PLANE_OF_DIM, PLANES, TASK_TYPES, Doc
from medvision_bm.data.plan_counts import PlanCounts, plan_counts
from medvision_bm.data.plan_files import NotAtPin, PlanRef, data_release, plan_files, resolve_plan
from medvision_bm.data.planner import DatasetContract
from medvision_bm.data.plans import TaskNotInPlan
from medvision_bm.data.samples import PlanIndex, PrefixIndex, f16
from medvision_bm.data.task_meta import TaskMeta, load_task_meta, resolve_ad_names, resolve_label_name
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonMapping, JsonValue
from medvision_bm.paths import safe_component

#: Task-name suffixes (variants) upstream's task lists use: they select the prompt/target variant, never the data.
VARIANTS: tuple[str, ...] = ("", "-CoT", "-CoT-woInstruct", "-CoT-scaledPS", "-VP", "-VP-woMedImg",
                             "-336x336", "-560x560", "-896x896")
RESOLUTION_VARIANTS: dict[str, tuple[int, int]] = {"-336x336": (336, 336), "-560x560": (560, 560),
                                                   "-896x896": (896, 896)}
FAMILY_PLAN_KIND: dict[str, str] = {"detect": "detection", "TL": "biometry", "AD": "biometry"}

_TASK_RE = re.compile(
    r"^(?P<dataset>[^_]+)_(?P<type>" + "|".join([*TASK_TYPES, "MaskSize"]) + r")(?:_(?P<measure>Distance|Angle))?"
    r"_Task(?P<nn>\d{2,})_(?P<plane>" + "|".join(PLANES) + r")(?:_(?P<split>Train|Test))?(?P<rest>.*)$"
)


@dataclass(frozen=True)
class TaskName:
    """A task name as upstream writes it: ``<Dataset>_<TaskType>[_Distance|_Angle]_Task<NN>_<Plane>[_Test][-variant]``."""

    name: str
    dataset: str
    task_type: str  # the token in the name (BoxCoordinate, BoxSize, TumorLesionSize, BiometricsFromLandmarks)
    measure: str | None  # "Distance" | "Angle" (Ceph-Biometrics-400) | None
    task_id: str  # two digits, as upstream's taskID field: "01"
    plane: str
    split: str  # "test" | "train"
    variant: str  # "" or one of VARIANTS (with its dash: "-CoT")

    @property
    def family(self) -> str:
        return TASK_TYPES[self.task_type]

    @property
    def slice_dim(self) -> int:
        return PLANES[self.plane]

    @property
    def task_pos(self) -> int:
        """Upstream picks the plan task by position: ``tasks[int(taskID) - 1]``."""
        return int(self.task_id) - 1

    @property
    def kind(self) -> str:
        return FAMILY_PLAN_KIND[self.family]

    @property
    def base(self) -> str:
        """The name without its variant: the data a task reads."""
        return self.name[: len(self.name) - len(self.variant)] if self.variant else self.name

    @property
    def config(self) -> str:
        """Upstream's Hugging Face config name (``BoxCoordinate`` -> ``BoxSize``, split appended)."""
        token = "BoxSize" if self.family == "detect" else self.task_type
        measure = f"_{self.measure}" if self.measure else ""
        return f"{self.dataset}_{token}{measure}_Task{self.task_id}_{self.plane}_{self.split.capitalize()}"

    @property
    def loader_task_type(self) -> str:
        return LOADER_TASK_TYPE[(self.family, self.measure)]


def parse_task_name(name: str) -> TaskName:
    m = _TASK_RE.match(name)
    if not m:
        raise UserError(
            f"task name {name!r} does not follow <Dataset>_<TaskType>[_Distance|_Angle]_Task<NN>_<Plane>[-variant] "
            f"with TaskType one of {', '.join(TASK_TYPES)} and Plane one of {', '.join(PLANES)}; check the tasks list"
        )
    if m["type"] == "MaskSize":
        raise UserError(f"task {name!r}: MaskSize tasks are not part of the MedVision benchmark this suite runs "
                        "(detection, tumor/lesion size, angle/distance); remove it from the tasks list")
    if m["measure"] and m["type"] != "BiometricsFromLandmarks":
        raise UserError(f"task {name!r}: the _{m['measure']} token belongs to BiometricsFromLandmarks tasks only")
    variant = m["rest"]
    if variant not in VARIANTS:
        raise UserError(f"task {name!r}: unknown task suffix {variant!r}; known variants: "
                        f"{', '.join(v for v in VARIANTS if v)}")
    return TaskName(name, m["dataset"], m["type"], m["measure"], m["nn"][-2:].rjust(2, "0"), m["plane"],
                    (m["split"] or "Test").lower(), variant)


def load_tasks_list(path: str | Path) -> dict[str, int]:
    """A tasks list: a JSON object of task name -> sample count (informational, as upstream reads only the names)."""
    path = Path(path)
    if not path.exists() or path.is_dir():  # a FIFO or a device: refused by the bounded reader, never read
        what = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"tasks list {path} {what}; pass --tasks_list_json_path pointing at a tasks_*.json file")
    try:
        raw = limits.read_bytes(path, "tasks list", limits.MAX_JSON_FILE_BYTES)
        data = limits.loads_json(raw.decode("utf-8"), f"tasks list {path}")
    except ValueError as exc:  # not JSON, not UTF-8, nested too deep
        raise UserError(f"tasks list {path} is not valid JSON ({getattr(exc, 'msg', exc)}); "
                        "it must be an object of task name -> sample count") from None
    if not isinstance(data, dict) or not data:
        raise UserError(f"tasks list {path} must be a non-empty JSON object of task name -> sample count")
    out: dict[str, int] = {}
    for name, count in data.items():
        try:
            count = limits.int_field(count, f"count for {limits.shown(name)}", 0, limits.MAX_COUNT)
        except limits.BadField as exc:
            raise UserError(f"tasks list {path}: {exc}; it must be a non-negative integer") from None
        safe_component(name, f"tasks list {path}: task name")
        parse_task_name(name)
        out[name] = count
    return out


# ------------------------------------------------------------------------------------------------ task samples


def _meta_for_row(family: str, meta: TaskMeta, row: dict[str, Any], label: int | None) -> dict[str, object]:
    """The prompt/grouping metadata of one sample, resolved from the task metadata as upstream's doc_to_text does."""
    out: dict[str, object] = {"image_description": meta.image_description, "image_modality": meta.image_modality,
                           "source": meta.source}
    try:
        if label is not None:
            out["label_name"] = resolve_label_name(meta, label)
        if family == "AD":
            names = resolve_ad_names(meta, row["m"])
            out.update(biometrics_name=names.biometrics_name, points=list(names.points))
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"task metadata ({meta.source}): {exc}; the plan and the dataset module disagree: "
                        "re-download the dataset") from None
    return out


def _as_int(value: JsonValue) -> int:
    """``int(value)`` of a decoded JSON value (a list, an object or null fails as ``int()`` fails on it)."""
    if isinstance(value, int | float | str):
        return int(value)
    raise TypeError("int() argument must be a string, a bytes-like object or a real number, not "
                    f"'{type(value).__name__}'")


def _joined(prefix: str, name: JsonValue) -> str:
    """``prefix + name`` of a file name a plan gives (another value fails as ``+`` fails on it)."""
    if isinstance(name, str):
        return prefix + name
    raise TypeError(f'can only concatenate str (not "{type(name).__name__}") to str')


def _under(base: Path, name: JsonValue) -> Path:
    """``base / name`` of a file name a plan gives (another value fails as ``/`` fails on it)."""
    if isinstance(name, str):
        return base / name
    raise TypeError(f"unsupported operand type(s) for /: '{type(base).__name__}' and '{type(name).__name__}'")


def _not_in_plan(tn: TaskName, plan: PlanRef, n_tasks: int | None) -> UserError:
    has = f"has {n_tasks} task(s)" if n_tasks is not None else "has fewer tasks"
    return UserError(f"task {tn.name}: the {tn.kind} plan {plan.path} (v{plan.version}) {has}, no "
                     f"Task{tn.task_id}; check the task name in the tasks list")


def check_task_type(tn: TaskName, plan: PlanRef, header: JsonMapping) -> None:
    """A tumor/lesion-size name must read a task with a target_label, an angle/distance name one without."""
    if tn.family == "TL" and "target_label" not in header:
        raise UserError(f"task {tn.name}: task {tn.task_id} of {plan.path.name} has no target_label, so it is "
                        "not a tumor/lesion-size task (a landmark dataset's tasks are BiometricsFromLandmarks)")
    if tn.family == "AD" and "target_label" in header:
        raise UserError(f"task {tn.name}: task {tn.task_id} of {plan.path.name} is a tumor/lesion-size task "
                        "(it has a target_label); use the TumorLesionSize task name")


@dataclass(frozen=True)
class TaskCount:
    """A task's sample count without its docs: the plan it reads, candidates before the filters, samples after."""

    plan: PlanRef
    candidates: int
    samples: int


class TaskSamples:
    """The samples of one task in doc_id order; docs are built only for the indices asked for."""

    def __init__(self, data: DataDir, tn: TaskName, limit: int | None = None) -> None:
        self.data = data
        self.tn = tn
        self.plan: PlanRef = data.plan_for(tn.dataset, tn.kind)
        metric_type = tn.measure.lower() if tn.measure else None
        filtering = data.contract.filtering
        #: whether len() is the task's whole sample count (False: only the first ``limit`` samples were read)
        self.complete = True
        try:
            if limit is not None and not PlanIndex.cached(self.plan, tn.task_pos, tn.split, tn.family, filtering,
                                                          data.root):
                prefix = PrefixIndex(self.plan, tn.task_pos, tn.split, tn.family, filtering, tn.slice_dim,
                                     metric_type, limit)
                self.complete = prefix.complete
                self.index: PlanIndex | PrefixIndex = prefix
            else:
                self.index = PlanIndex.open(self.plan, tn.task_pos, tn.split, tn.family, filtering, data.root)
        except TaskNotInPlan as exc:
            raise _not_in_plan(tn, self.plan, exc.n_tasks) from None
        check_task_type(tn, self.plan, self.index.header)
        self.positions = self.index.positions(tn.slice_dim, metric_type)
        self.meta_header = data.task_meta(tn, self.index.header)
        self._cases: dict[int, dict[str, Any]] = {}
        self._label_meta: dict[int | None, dict[str, object]] = {}

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def plan_version(self) -> str:
        return self.plan.version

    def case_files(self) -> list[Path]:
        """The data files this task's cases name (image, mask, landmarks): what a sample's view, drawn prompt or
        scaled pixel size is read from."""
        base = self.data.root / "Datasets" / self.tn.dataset
        return [_under(base, name) for case in self.index.cases
                for name in (case.get("image_file"), case.get("mask_file"), case.get("landmark_file")) if name]

    def docs(self, indices: list[int] | None = None) -> list[Doc]:
        """Docs for ``indices`` (doc_ids, in the order given); every doc when None."""
        wanted = range(len(self)) if indices is None else indices
        bad = [i for i in wanted if not 0 <= i < len(self)]
        if bad:
            raise UserError(f"sample index {bad[0]} is out of range for task {self.tn.name} ({len(self)} samples)")
        rows = self.index.read_rows(self.tn.slice_dim, (int(self.positions[i]) for i in wanted))
        return [self._doc(i, row) for i, row in zip(wanted, rows)]

    def _case_fields(self, ci: int) -> dict[str, Any]:
        """The fields a case gives every doc of this task (computed once per case)."""
        cached = self._cases.get(ci)
        if cached is None:
            tn, case = self.tn, self.index.cases[ci]
            keep = [a for a in range(3) if a != tn.slice_dim]
            array_size, voxel = case["array_size"], case["voxel_size"]
            prefix = tn.dataset + "/"
            cached = {
                "image_file": _joined(prefix, case["image_file"]),
                "mask_file": _joined(prefix, case["mask_file"]) if case.get("mask_file") and tn.family != "AD" else None,
                "landmark_file": _joined(prefix, case["landmark_file"])
                if case.get("landmark_file") and tn.family != "detect" else None,
                "image_size_2d": (int(array_size[keep[0]]), int(array_size[keep[1]])),
                "pixel_size": (f16(voxel[keep[0]]), f16(voxel[keep[1]])),
                "image_size_3d": tuple(int(v) for v in array_size),
                "voxel_size": tuple(f16(v) for v in voxel),
            }
            self._cases[ci] = cached
        return cached

    def _doc(self, index: int, row: dict[str, Any]) -> Doc:
        tn = self.tn
        family = tn.family
        case = self._case_fields(row["c"])
        if family == "detect":
            label: int | None = int(row["l"])
        elif family == "TL":
            label = _as_int(self.index.header["target_label"])
        else:
            label = None
        key = f"{case['image_file']}:d{tn.slice_dim}:s{row['s']}"
        if label is not None:
            key += f":l{label}"
        if family == "AD":
            key += f":{row['m']['metric_key']}"
            meta = _meta_for_row(family, self.meta_header, row, label)
        else:
            cached = self._label_meta.get(label)
            if cached is None:
                cached = self._label_meta[label] = _meta_for_row(family, self.meta_header, row, label)
            meta = cached
        return Doc(
            key=key, task=tn.name, family=family, plane=tn.plane, split=tn.split, index=index,
            dataset_name=tn.dataset, taskID=tn.task_id, taskType=tn.loader_task_type,
            slice_idx=int(row["s"]), slice_dim=tn.slice_dim, label=label,
            bounding_boxes=row.get("b"), biometric_profile=row.get("p") if family == "TL" else row.get("m"),
            meta=meta, **case)  # shared by the docs of one label (never changed)


# ------------------------------------------------------------------------------------------------ data folder


class DataDir:
    """One ``Data/`` folder read at one annotation pin (the run's dataset contract)."""

    def __init__(self, contract: DatasetContract) -> None:
        self.contract = contract
        self.root = contract.data_dir
        if not self.root.is_dir():
            raise UserError(
                f"data folder {self.root} does not exist; create the phantom data with "
                f"`medvision-bm data make-phantom --data_dir {self.root}` or point --data_dir at a MedVision Data/ folder"
            )
        if not (self.root / "Datasets").is_dir():
            raise UserError(
                f"data folder {self.root} has no Datasets/ subfolder; point --data_dir at upstream's Data/ folder "
                f"(the one holding Datasets/), download with `medvision-bm data download`, or create the phantom "
                f"with `medvision-bm data make-phantom --data_dir {self.root}`"
            )
        self._plans: dict[tuple[str, str], PlanRef] = {}
        self._samples: dict[str, TaskSamples] = {}
        self._meta: dict[tuple[str, str, str], TaskMeta] = {}
        #: (dataset, plan kind) -> why its tasks are not offered at this pin (filled by ``tasks()``)
        self.unavailable: dict[tuple[str, str], str] = {}
        #: those of them whose plans all ship after the pin (upstream has no such tasks at this pin: not an error)
        self.later: set[tuple[str, str]] = set()

    @property
    def planner_version(self) -> str:
        return self.contract.planner_version

    @cached_property
    def release(self) -> str | None:
        return data_release(self.root)

    def datasets(self) -> list[str]:
        """Dataset folders that hold at least one benchmark plan."""
        return sorted(p.name for p in (self.root / "Datasets").iterdir() if p.is_dir() and plan_files(p))

    def dataset_dir(self, dataset: str) -> Path:
        path = self.root / "Datasets" / dataset
        if not path.is_dir():
            found = ", ".join(self.datasets()) or "none"
            raise UserError(f"dataset {dataset!r} is not under {self.root / 'Datasets'} (found: {found}); "
                            "download it (`medvision-bm data download`), check the task name, or fix --data_dir")
        return path

    def plan_for(self, dataset: str, kind: str) -> PlanRef:
        key = (dataset, kind)
        if key not in self._plans:
            c = self.contract
            self._plans[key] = resolve_plan(self.dataset_dir(dataset), dataset, kind, c.planner_version,
                                            c.ack_release, self.release)
        return self._plans[key]

    def samples(self, task: str, limit: int | None = None) -> TaskSamples:
        """The samples of a task. With ``limit``, a plan not indexed yet is read only until its first ``limit``
        samples are known (``TaskSamples.complete`` is then False unless the task has no more)."""
        cached = self._samples.get(task)
        if cached is not None and (cached.complete or (limit is not None and len(cached) > limit)):
            return cached
        samples = TaskSamples(self, parse_task_name(task), limit)
        self._samples[task] = samples
        return samples

    def task_meta(self, tn: TaskName, header: JsonMapping) -> TaskMeta:
        """Prompt metadata of a plan task: from upstream's medvision_ds module in Data/src when present, else the plan."""
        key = (tn.dataset, tn.kind, tn.task_id)
        if key not in self._meta:
            try:
                self._meta[key] = load_task_meta(self.root, tn.dataset, tn.kind, tn.task_id, header)
            except (ValueError, OSError) as exc:
                raise UserError(f"task {tn.name}: cannot read its prompt metadata ({exc}); check "
                                f"{self.root / 'src' / 'medvision_ds'} or re-download the dataset") from None
        return self._meta[key]

    def _count(self, tn: TaskName, plan: PlanRef, pc: PlanCounts) -> TaskCount:
        """One task's count from its plan's counts, with the checks ``samples()`` makes (task in the plan, family,
        prompt metadata)."""
        if tn.task_pos >= len(pc.headers):
            raise _not_in_plan(tn, plan, len(pc.headers))
        header = pc.headers[tn.task_pos]
        check_task_type(tn, plan, header)
        self.task_meta(tn, header)
        split = pc.counts[(tn.task_pos, tn.split)]
        metric_type = tn.measure.lower() if tn.measure else None
        n = split.samples(tn.slice_dim, self.contract.filtering, metric_type)
        return TaskCount(plan, n if tn.measure else split.candidates[tn.slice_dim], n)

    def counts(self, tasks: Iterable[str]) -> dict[str, TaskCount | UserError]:
        """Sample counts of tasks without reading their docs (``data check``): only the plans the tasks name are read,
        each once for all of its tasks named and no further than the last of them, plans in parallel, and the counts
        cached (``plan_counts``); a task that cannot be counted gets its one-line error."""
        out: dict[str, TaskCount | UserError] = {}
        named: dict[str, tuple[TaskName, PlanRef]] = {}
        wanted: dict[PlanRef, set[tuple[int | None, str]]] = {}
        for task in tasks:
            try:
                tn = parse_task_name(task)
                plan = self.plan_for(tn.dataset, tn.kind)
            except UserError as exc:
                out[task] = exc
                continue
            named[task] = (tn, plan)
            wanted.setdefault(plan, set()).add((tn.task_pos, tn.split))
        counted = plan_counts(wanted, self.root)
        for task, (tn, plan) in named.items():
            pc = counted[plan]
            try:
                if isinstance(pc, UserError):
                    raise pc
                out[task] = self._count(tn, plan, pc)
            except UserError as exc:
                out[task] = exc
        return out

    def tasks(self) -> dict[str, int]:
        """Every benchmark task this folder offers at the pin (no variant suffix): name -> samples after filters.
        Each plan is read once for all its tasks, plans in parallel, and the counts cached (``plan_counts``)."""
        plans: list[PlanRef] = []
        for ds in self.datasets():
            kinds = plan_files(self.dataset_dir(ds))
            for kind in ("detection", "biometry"):
                if kind not in kinds:
                    continue
                try:
                    plans.append(self.plan_for(ds, kind))
                except UserError as exc:  # not published at this pin, paused, or not acknowledged
                    self.unavailable[(ds, kind)] = str(exc)
                    if isinstance(exc, NotAtPin):
                        self.later.add((ds, kind))
        counted = plan_counts({p: {(None, "test")} for p in plans}, self.root)
        out: dict[str, int] = {}
        for plan in plans:
            pc = counted[plan]
            if isinstance(pc, UserError):
                raise pc
            for pos, header in enumerate(pc.headers):
                for name in _task_names(plan.dataset, plan.kind, pos, header):
                    n = self._count(parse_task_name(name), plan, pc).samples
                    if n:
                        out[name] = n
        return out


def _task_names(dataset: str, kind: str, pos: int, header: JsonMapping) -> list[str]:
    nn = f"{pos + 1:02d}"
    if kind == "detection":
        return [f"{dataset}_BoxCoordinate_Task{nn}_{p}" for p in PLANE_OF_DIM.values()]
    if "target_label" in header:
        return [f"{dataset}_TumorLesionSize_Task{nn}_{p}" for p in PLANE_OF_DIM.values()]
    bmap = header.get("biometrics_map") or []
    if isinstance(bmap, dict):
        entries = list(bmap.values())
    elif isinstance(bmap, list | tuple | str):
        entries = list(bmap)
    else:
        raise TypeError(f"'{type(bmap).__name__}' object is not iterable")
    metric_types = {str(v.get("metric_type", "")).lower() for v in entries if isinstance(v, dict)}
    if {"distance", "angle"} <= metric_types:  # as Ceph-Biometrics-400: one config per metric type
        return [f"{dataset}_BiometricsFromLandmarks_{m}_Task{nn}_{p}" for m in ("Distance", "Angle")
                for p in PLANE_OF_DIM.values()]
    return [f"{dataset}_BiometricsFromLandmarks_Task{nn}_{p}" for p in PLANE_OF_DIM.values()]
