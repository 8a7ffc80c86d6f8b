"""Samples exactly as upstream's Hugging Face loader builds them, indexed once per plan and cached on disk.

Upstream's ``MedVision.py`` flattens a plan task's cases (``<split>_cases`` in plan order, then
``slice_profiles_<x|y|z>`` in list order) into candidate rows and drops some of them (single-instance filters):

* detection (``Box-Size``): one candidate per (slice entry, label item); dropped when the label has more than one
  box on the slice, or its box is under 10 px (``dimensions``) on either side;
* tumor/lesion size: one candidate per slice entry, ``label`` = the task's ``target_label``; dropped when
  ``n_total_clusters > 1`` (plans from 1.1.0 on), else when more than one cluster was measured (1.0.0 plans);
* angle/distance: one candidate per metric of the slice entry; never dropped; the ``_Distance``/``_Angle`` configs
  keep only their metric type;
* ``MedVision_DISABLE_SAMPLE_FILTERING=true`` keeps every candidate.

The kept rows are numbered 0..N-1 in that order: the lmms-eval ``doc_id`` (so ``--sample_limit`` and
``--sample_indices`` select what an upstream run selects). Float fields come back float16-rounded, as the loader's
Arrow features store them. Sources: upstream README's quotes of ``MedVision.py`` ``_generate_examples`` (loader
features and filters), ``skills/medvision/sub-skills/dataset-and-tasks/references/concepts.md`` @39dd6bf; see
``docs/dataset-concepts.md`` for the full list and the assumptions.

The index of one (plan file, task, split, family, filter switch) holds every kept row of every plane as one JSON
line, with byte offsets, so a run reads only the rows it selects and a second run never re-reads the plan.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, SupportsFloat, SupportsIndex, SupportsInt, TypedDict, TypeGuard

import numpy as np
import orjson

from medvision_bm.data.plan_files import PlanRef, plan_identity
from medvision_bm.data.plans import read_task
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonMapping, JsonObject, JsonValue
from medvision_bm.limits import int_field, list_field, optional

INDEX_FORMAT = 1
AXES = "xyz"
MIN_BOX_SIDE_PX = 10


_F16_MEMO: dict[object, float] = {}
_F16_MEMO_MAX = 1 << 20


def f16(value: SupportsFloat | SupportsIndex | str) -> float:
    """A float as upstream's loader returns it: stored as float16, read back as a Python float.

    Plans repeat the same few thousand values (sizes = pixels x spacing, voxel sizes), so results are memoised;
    zero is not (its sign would be shared between 0.0 and -0.0).
    """
    try:
        return _F16_MEMO[value]
    except (KeyError, TypeError):
        pass
    out = float(np.float16(value))
    if value and type(value) is float and len(_F16_MEMO) < _F16_MEMO_MAX:
        _F16_MEMO[value] = out
    return out


def _f16_list(values: Iterable[SupportsFloat | SupportsIndex | str]) -> list[float]:
    return [f16(v) for v in values]


def _all_u16(values: list[SupportsInt | SupportsIndex | str]) -> TypeGuard[list[int]]:
    """Whether every value is already a uint16 (an int in 0..65535)."""
    for v in values:  # noqa: SIM110 (a loop: all() over a generator costs twice as much per box here)
        if type(v) is not int or not 0 <= v <= 0xFFFF:
            return False
    return True


def _u16_list(values: Iterable[SupportsInt | SupportsIndex | str]) -> list[int]:
    """Values as uint16, as the loader's features store them (in-range ints, the plans' case, pass unchanged)."""
    out = list(values)
    return out if _all_u16(out) else [int(np.uint16(int(v))) for v in out]


# ------------------------------------------------------------------------------------------------ flatten


def detection_single(item: dict[str, Any]) -> bool:
    """Upstream's single-instance rule for one label item of a detection slice entry: exactly one box, at least
    MIN_BOX_SIDE_PX on both sides."""
    boxes = item.get("bboxes") or []
    if len(boxes) != 1:
        return False
    dims = boxes[0]["dimensions"]
    return int(dims[0]) >= MIN_BOX_SIDE_PX and int(dims[1]) >= MIN_BOX_SIDE_PX


def detection_candidates(entry: Any, filtering: bool = False) -> Iterator[tuple[dict[str, Any] | None, bool]]:
    """(row, single-instance) per label item of one slice entry of a detection plan (row None: dropped, not built)."""
    slice_idx = int(entry["slice_idx"])
    for item in entry.get("slice_profile") or []:
        boxes = item.get("bboxes") or []
        single = detection_single(item)
        if filtering and not single:
            yield None, False
            continue
        if len(boxes) == 1:  # every kept row when filtering: skip the per-box loops
            b = boxes[0]
            bb = {"min_coords": [_u16_list(b["min_coords"])], "max_coords": [_u16_list(b["max_coords"])],
                  "center_coords": [_u16_list(b["center_coords"])], "dimensions": [_u16_list(b["dimensions"])],
                  "sizes": [[f16(v) for v in b["sizes"]]]}
        else:
            bb = {
                "min_coords": [_u16_list(b["min_coords"]) for b in boxes],
                "max_coords": [_u16_list(b["max_coords"]) for b in boxes],
                "center_coords": [_u16_list(b["center_coords"]) for b in boxes],
                "dimensions": [_u16_list(b["dimensions"]) for b in boxes],
                "sizes": [_f16_list(b["sizes"]) for b in boxes],
            }
        yield {"s": slice_idx, "l": int(item["label"]), "b": bb}, single


def _tl_cluster(metrics: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    by_key = {m.get("metric_key"): m for m in metrics}
    unknown = set(by_key) - {"L-1-2", "L-3-4"}
    if unknown:
        raise ValueError(f"unexpected tumor/lesion metric keys {sorted(map(str, unknown))}")
    major, minor = by_key.get("L-1-2"), by_key.get("L-3-4")
    if major is None or minor is None:
        return None
    return {"metric_type": major.get("metric_type"), "metric_map_name": major.get("metric_map_name"),
            "metric_key_major_axis": "L-1-2", "metric_value_major_axis": f16(major["metric_value"]),
            "metric_key_minor_axis": "L-3-4", "metric_value_minor_axis": f16(minor["metric_value"]),
            "metric_unit": major.get("metric_unit")}


def tl_candidates(entry: Any, filtering: bool = False) -> Iterator[tuple[dict[str, Any], bool]]:
    """The one candidate of a tumor/lesion slice entry (its measured clusters together)."""
    clusters = [c for c in (_tl_cluster(ms) for ms in entry.get("slice_profile") or []) if c is not None]
    profile = {k: [c[k] for c in clusters] for k in (
        "metric_type", "metric_map_name", "metric_key_major_axis", "metric_value_major_axis",
        "metric_key_minor_axis", "metric_value_minor_axis", "metric_unit")}
    n_total = entry.get("n_total_clusters")
    single = (n_total <= 1) if n_total is not None else (len(clusters) <= 1)
    yield {"s": int(entry["slice_idx"]), "p": profile, "n": n_total}, single


def ad_candidates(entry: Any, filtering: bool = False) -> Iterator[tuple[dict[str, Any], bool]]:
    """One candidate per metric of a landmark slice entry (never filtered)."""
    for m in entry.get("slice_profile") or []:
        metric = {"metric_type": m.get("metric_type"), "metric_map_name": m.get("metric_map_name"),
                  "metric_key": m.get("metric_key"), "metric_value": f16(m["metric_value"]),
                  "metric_unit": m.get("metric_unit"), "slice_dim": int(m.get("slice_dim", 0))}
        yield {"s": int(entry["slice_idx"]), "m": metric}, True


CANDIDATES = {"detect": detection_candidates, "TL": tl_candidates, "AD": ad_candidates}


def _as_case(value: JsonValue) -> JsonObject:
    """A case of a plan's case list: a JSON object; any other value fails as reading its first field does."""
    if isinstance(value, dict):
        return value
    raise AttributeError(f"'{type(value).__name__}' object has no attribute 'get'")


def _entries(case: JsonObject, axis: str) -> Iterable[JsonValue]:
    """The slice entries of one plane of a case, iterated as ``case.get(...) or []`` is (a number there fails as
    iterating it does)."""
    value = case.get(f"slice_profiles_{axis}") or []
    if isinstance(value, int | float):
        raise TypeError(f"'{type(value).__name__}' object is not iterable")
    return value


class CaseRecord(TypedDict):
    """What every doc of a case needs, as an index stores it (``meta.json``): the files as the plan names them, the
    voxel size as float16 and the array size as uint16 (the loader's features)."""

    case_ID: JsonValue
    image_file: JsonValue
    mask_file: JsonValue
    landmark_file: JsonValue
    voxel_size: list[float]
    array_size: list[int]


def _case_record(case: Any) -> CaseRecord:
    info = case.get("image_file_info") or {}
    return {"case_ID": case.get("case_ID"), "image_file": case["image_file"], "mask_file": case.get("mask_file"),
            "landmark_file": case.get("landmark_file"),
            "voxel_size": _f16_list(info["voxel_size"]), "array_size": _u16_list(info["array_size"])}


# ------------------------------------------------------------------------------------------------ counts


def _counts(value: object, field: str) -> list[int]:
    """A list of counts of a cached SplitCounts."""
    return [int_field(v, field) for v in list_field(value, field)]


@dataclass
class SplitCounts:
    """The candidate rows of one task split per plane (x, y, z), how many pass the single-instance filters, and
    (A/D) how many are of each metric type (distance, angle, other): every config's sample count, without rows."""

    candidates: list[int]
    single: list[int]
    metric_types: list[list[int]] | None = None

    def samples(self, slice_dim: int, filtering: bool, metric_type: str | None = None) -> int:
        """The sample count of one config: what ``len(TaskSamples)`` gives for it."""
        if metric_type is not None:
            assert self.metric_types is not None
            return self.metric_types[slice_dim][_METRIC_CODE[metric_type]]
        return self.single[slice_dim] if filtering else self.candidates[slice_dim]

    def to_json(self) -> dict[str, object]:
        return {"candidates": self.candidates, "single": self.single, "metric_types": self.metric_types}

    @classmethod
    def from_json(cls, data: JsonMapping) -> SplitCounts:
        """Counts as ``to_json`` wrote them; another shape is a BadField (a ValueError)."""
        types = optional(list_field, data.get("metric_types"), "metric_types")
        return cls(_counts(data["candidates"], "candidates"), _counts(data["single"], "single"),
                   None if types is None else [_counts(t, "metric_types") for t in types])


def count_cases(cases: Iterable[JsonValue | bytes], family: str, plan: PlanRef, task_pos: int,
                parse: Callable[[bytes], object] | None = None) -> SplitCounts:
    """Count the candidates of one task split by the loader's rules (the same predicates the index applies), reading
    each case once and building no row (detection) or only the small rows the rules need (T/L, A/D). A case given
    as bytes is read with ``parse`` first (a lazy document is fine: only mapping and sequence access is used)."""
    counts = SplitCounts([0, 0, 0], [0, 0, 0], [[0, 0, 0] for _ in AXES] if family == "AD" else None)
    for case in cases:
        if isinstance(case, bytes):
            if parse is None:
                raise TypeError("count_cases: cases given as bytes need parse")
            _count_case(parse(case), family, counts, plan, task_pos)
        else:
            _count_case(case, family, counts, plan, task_pos)
    return counts


def _count_case(case: Any, family: str, counts: SplitCounts, plan: PlanRef, task_pos: int) -> None:
    """Add one case to ``counts`` (its own function: nothing of the case outlives it, as a lazy parser needs)."""
    cand, single, types = counts.candidates, counts.single, counts.metric_types
    try:
        _case_record(case)  # the fields every doc of the case needs: a case without them fails here too
        for d, axis in enumerate(AXES):
            for entry in case.get(f"slice_profiles_{axis}") or []:
                if family == "detect":
                    items = entry.get("slice_profile") or []
                    cand[d] += len(items)
                    single[d] += sum(map(detection_single, items))
                    continue
                for row, ok in CANDIDATES[family](entry):
                    cand[d] += 1
                    single[d] += ok
                    if types is not None:
                        assert row is not None  # None only for a detection row dropped by the filter
                        types[d][_METRIC_CODE.get(row["m"]["metric_type"], 2)] += 1
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise UserError(f"benchmark plan {plan.path}: task {task_pos + 1} has a case this reader does not "
                        f"understand ({type(exc).__name__}: {exc}); re-download the plan") from None


# ------------------------------------------------------------------------------------------------ index


@dataclass
class PlaneRows:
    offsets: np.ndarray  # int64, n + 1 byte offsets into the rows file
    metric_types: np.ndarray | None  # A/D: 0 distance, 1 angle, 2 other, per row


def cache_root(data_dir: Path) -> Path:
    """Where plan indexes live: MEDVISION_CACHE_DIR, else <data_dir>/.cache/medvision_bm when writable, else ~/.cache."""
    env = os.environ.get("MEDVISION_CACHE_DIR", "").strip()
    if env:
        return Path(env).expanduser() / "plan-index"
    preferred = data_dir / ".cache" / "medvision_bm" / "plan-index"
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        probe = preferred / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return preferred
    except OSError:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return base / "medvision_bm" / "plan-index"


def index_key(plan: PlanRef, task_pos: int, split: str, family: str, filtering: bool) -> str:
    ident = [INDEX_FORMAT, plan_identity(plan.path), task_pos, split, family, filtering]
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]


_METRIC_CODE = {"distance": 0, "angle": 1}


def build_index(plan: PlanRef, task_pos: int, split: str, family: str, filtering: bool, folder: Path) -> None:
    """Flatten one task of a plan into ``folder`` (written under a temporary name, then renamed into place)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    with gc_paused():
        _build_into(tmp, plan, task_pos, split, family, filtering, folder)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic GC while millions of short-lived acyclic containers are made (it was most of the build time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _build_into(tmp: Path, plan: PlanRef, task_pos: int, split: str, family: str, filtering: bool,
                folder: Path) -> None:
    try:
        task = read_task(plan.path, task_pos, split)
        candidates = CANDIDATES[family]
        cases: list[CaseRecord] = []
        files = [open(tmp / f"rows_{a}.jsonl", "wb") for a in AXES]  # noqa: SIM115
        offsets: list[list[int]] = [[0], [0], [0]]
        types: list[list[int]] = [[], [], []]
        n_candidates = [0, 0, 0]
        try:
            for value in task.cases:
                ci = len(cases)
                case = _as_case(value)
                cases.append(_case_record(case))
                for d, axis in enumerate(AXES):
                    for entry in _entries(case, axis):
                        for row, single in candidates(entry, filtering):
                            n_candidates[d] += 1
                            if filtering and not single:
                                continue
                            assert row is not None
                            row["c"] = ci
                            line = orjson.dumps(row) + b"\n"
                            files[d].write(line)
                            offsets[d].append(offsets[d][-1] + len(line))
                            if family == "AD":
                                types[d].append(_METRIC_CODE.get(row["m"]["metric_type"], 2))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
            raise UserError(f"benchmark plan {plan.path}: task {task_pos + 1} has a case this reader does not "
                            f"understand ({type(exc).__name__}: {exc}); re-download the plan") from None
        finally:
            for fh in files:
                fh.close()
        for d, axis in enumerate(AXES):
            np.save(tmp / f"offsets_{axis}.npy", np.asarray(offsets[d], dtype=np.int64))
            if family == "AD":
                np.save(tmp / f"types_{axis}.npy", np.asarray(types[d], dtype=np.uint8))
        meta = {"format": INDEX_FORMAT, "plan": str(plan.path), "plan_version": plan.version, "task_pos": task_pos,
                "split": split, "family": family, "filtering": filtering, "header": task.header, "cases": cases,
                "n_candidates": dict(zip(AXES, n_candidates))}
        (tmp / "meta.json").write_bytes(orjson.dumps(meta))
        try:
            os.replace(tmp, folder)
        except OSError:  # another process finished the same index first: keep theirs
            if not (folder / "meta.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


class PlanIndex:
    """The kept rows of one plan task and split, per plane, read on demand."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.meta = orjson.loads((folder / "meta.json").read_bytes())
        self.header: JsonObject = self.meta["header"]
        self.cases: list[CaseRecord] = self.meta["cases"]
        self._planes: dict[int, PlaneRows] = {}

    @staticmethod
    def cached(plan: PlanRef, task_pos: int, split: str, family: str, filtering: bool, data_dir: Path) -> bool:
        return (cache_root(data_dir) / index_key(plan, task_pos, split, family, filtering) / "meta.json").is_file()

    @classmethod
    def open(cls, plan: PlanRef, task_pos: int, split: str, family: str, filtering: bool,
             data_dir: Path) -> PlanIndex:
        folder = cache_root(data_dir) / index_key(plan, task_pos, split, family, filtering)
        if not (folder / "meta.json").is_file():
            build_index(plan, task_pos, split, family, filtering, folder)
        try:
            return cls(folder)
        except (OSError, ValueError):  # a damaged cache entry: rebuild it once
            shutil.rmtree(folder, ignore_errors=True)
            build_index(plan, task_pos, split, family, filtering, folder)
            return cls(folder)

    def plane(self, slice_dim: int) -> PlaneRows:
        if slice_dim not in self._planes:
            axis = AXES[slice_dim]
            offsets = np.load(self.folder / f"offsets_{axis}.npy")
            tpath = self.folder / f"types_{axis}.npy"
            self._planes[slice_dim] = PlaneRows(offsets, np.load(tpath) if tpath.is_file() else None)
        return self._planes[slice_dim]

    def positions(self, slice_dim: int, metric_type: str | None = None) -> np.ndarray:
        """Row positions of a config in doc_id order (all rows of the plane, or one A/D metric type)."""
        rows = self.plane(slice_dim)
        n = len(rows.offsets) - 1
        if metric_type is None:
            return np.arange(n, dtype=np.int64)
        assert rows.metric_types is not None
        return np.flatnonzero(rows.metric_types == _METRIC_CODE[metric_type]).astype(np.int64)

    def read_rows(self, slice_dim: int, positions: Iterable[int]) -> list[dict[str, Any]]:
        rows = self.plane(slice_dim)
        out = []
        with gc_paused(), open(self.folder / f"rows_{AXES[slice_dim]}.jsonl", "rb") as fh:
            for p in positions:
                start, end = int(rows.offsets[p]), int(rows.offsets[p + 1])
                fh.seek(start)
                out.append(orjson.loads(fh.read(end - start)))
        return out


class PrefixIndex:
    """The first kept rows of one plane of a plan task, read by streaming the plan until ``limit + 1`` rows are kept
    (or the split ends), for a ``--sample_limit`` run on a plan with no index yet: nothing is cached, and the
    rest of the plan is never read. ``complete`` says whether every row of the plane was seen."""

    def __init__(self, plan: PlanRef, task_pos: int, split: str, family: str, filtering: bool, slice_dim: int,
                 metric_type: str | None, limit: int) -> None:
        task = read_task(plan.path, task_pos, split)
        self.header: JsonObject = task.header
        self.cases: list[CaseRecord] = []
        self.meta: dict[str, dict[str, int | None]] = {"n_candidates": {}}
        self.rows: list[dict[str, Any]] = []
        self.complete = True
        candidates = CANDIDATES[family]
        axis = AXES[slice_dim]
        n_candidates = 0
        try:
            for value in task.cases:
                ci = len(self.cases)
                case = _as_case(value)
                self.cases.append(_case_record(case))
                for entry in _entries(case, axis):
                    for row, single in candidates(entry):
                        n_candidates += 1
                        assert row is not None  # candidates(entry) does not filter, so it builds every row
                        if (filtering and not single) or (metric_type and row["m"]["metric_type"] != metric_type):
                            continue
                        row["c"] = ci
                        self.rows.append(row)
                if len(self.rows) > limit:
                    self.complete = False
                    break
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:  # as the index
            raise UserError(f"benchmark plan {plan.path}: task {task_pos + 1} has a case this reader does not "
                            f"understand ({type(exc).__name__}: {exc}); re-download the plan") from None
        finally:
            close = getattr(task.cases, "close", None)
            if close is not None:
                close()  # stop reading the plan
        self.meta["n_candidates"][axis] = n_candidates if self.complete else None

    def positions(self, slice_dim: int, metric_type: str | None = None) -> np.ndarray:
        return np.arange(len(self.rows), dtype=np.int64)

    def read_rows(self, slice_dim: int, positions: Iterable[int]) -> list[dict[str, Any]]:
        return [self.rows[int(p)] for p in positions]
