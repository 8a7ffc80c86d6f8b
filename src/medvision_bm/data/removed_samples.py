"""Upstream's T/L removed-samples lists: where they live in the Data/ layout, how a sample is keyed, which it drops.

Upstream's leaderboard summarizes T/L with ``summarize_TL_task --removed_samples_dir <Data>/Datasets``
(YongchengYAO/MedVision ``src/medvision_bm/benchmark/summarize_TL_task.py`` @28f6c67, ``_build_removed_set``,
``_relative_image_file``, ``process_jsonl_file_TL_task``; docs/spec/published-leaderboard.md section 2):

* the list of a dataset is ``<Datasets>/<dataset>/multi_cluster_samples_v1.0.0_to_v1.1.0.json``, ``<dataset>`` the
  task name's dataset token; a dataset folder without the file is not filtered;
* an entry is keyed ``(image_file, {"x": 0, "y": 1, "z": 2}[slice_dim], int(slice_idx), int(task_ID))``, the image
  file relative to the dataset folder;
* a sample is keyed ``(its image file after the first "/<dataset>/", slice_dim, slice_idx, int(taskID))`` and a
  listed sample is left out of every group, count and metric.

The lists were made against annotation 1.0.0 (the slices of v1.0.0 whose v1.1.0 annotation has more than one
cluster), so the filter belongs to T/L runs at that pin (``FILTER_PIN``); ``multi_cluster_entries`` makes such a
list from a dataset's 1.0.0 and 1.1.0 plans (the phantom ships one).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from medvision_bm import limits
from medvision_bm.errors import UserError
from medvision_bm.io import write_text_atomic
from medvision_bm.jsontypes import JsonMapping, JsonObject, JsonValue
from medvision_bm.limits import int_field, list_field, object_field, text_field

#: Upstream's ``--removed_samples_filename`` default.
LIST_FILENAME = "multi_cluster_samples_v1.0.0_to_v1.1.0.json"
#: The annotation pin whose T/L sample set the lists were made against (the published leaderboard's).
FILTER_PIN = "1.0.0"
#: ``slice_dim`` of a list entry (an axis letter) as the docs' integer.
DIM_OF_AXIS: dict[str, int] = {"x": 0, "y": 1, "z": 2}
AXIS_OF_DIM: dict[int, str] = {v: k for k, v in DIM_OF_AXIS.items()}

#: (image file relative to the dataset folder, slice_dim, slice_idx, task id)
RemovedKey = tuple[str, int, int, int]


def list_path(datasets_root: str | Path, dataset: str, filename: str = LIST_FILENAME) -> Path:
    """Where upstream's summarizer looks for a dataset's list: ``<Datasets>/<dataset>/<filename>``."""
    return Path(datasets_root) / dataset / filename


def relative_image_file(image_file: str, dataset: str) -> str:
    """Upstream's ``_relative_image_file``: the path after the first ``/<dataset>/``, else its base name.

    ``image_file`` here is the doc's path relative to ``<data_dir>/Datasets`` (``KiTS23/Images/case_1.nii.gz``); the
    rule is applied to it with a leading slash, which gives upstream's answer on the absolute path unless the data
    folder's own path holds ``/<dataset>/``."""
    text = "/" + image_file.lstrip("/")
    marker = f"/{dataset}/"
    at = text.find(marker)
    return text[at + len(marker):] if at >= 0 else Path(image_file).name


def sample_key(image_file: str, dataset: str, slice_dim: int, slice_idx: int, task_id: int | str) -> RemovedKey:
    """A sample's key in upstream's removed set (``image_file`` relative to ``<data_dir>/Datasets``)."""
    return relative_image_file(image_file, dataset), int(slice_dim), int(slice_idx), int(task_id)


#: The largest slice index or task id an entry may name (upstream's volumes have at most a few thousand slices).
MAX_LIST_INDEX = 10**9
_FIX = "restore the file from the dataset release or pass --no_tl_filter"


def _entry_key(entry: object, path: Path, i: int) -> RemovedKey:
    """One entry's key, every field through the typed readers (``int()`` as upstream applies it: a whole number or
    its digits, never NaN, an infinity or a 5,000-digit number)."""
    if not isinstance(entry, dict):
        raise UserError(f"removed-samples list {path}: entry {i} is {limits.shown(entry)}, not an object "
                        f"{{image_file, slice_dim: x|y|z, slice_idx, task_ID}}; {_FIX}")
    try:
        axis = limits.text_field(entry.get("slice_dim"), "slice_dim", 1)
        if axis not in DIM_OF_AXIS:
            raise limits.BadField(f"slice_dim is {limits.shown(axis)}, not x, y or z")
        return (limits.text_field(entry.get("image_file"), "image_file", 4096), DIM_OF_AXIS[axis],
                limits.int_field(entry.get("slice_idx"), "slice_idx", 0, MAX_LIST_INDEX, lenient=True),
                limits.int_field(entry.get("task_ID"), "task_ID", 0, MAX_LIST_INDEX, lenient=True))
    except limits.BadField as exc:
        raise UserError(f"removed-samples list {path}: entry {i} {exc}; {_FIX}") from None


def read_removed_list(path: str | Path) -> frozenset[RemovedKey]:
    """The keys of one list (upstream's ``_build_removed_set``), read within the bounds of any outside JSON file
    (``limits.read_json_file``: a regular file, size and nesting bounded); a malformed file is a one-line user
    error."""
    path = Path(path)
    try:
        entries = limits.read_json_file(path, "removed-samples list")
    except UserError as exc:
        raise UserError(f"{exc}; {_FIX}") from None
    if not isinstance(entries, list):
        raise UserError(f"removed-samples list {path} is not a JSON array of entries; {_FIX}")
    return frozenset(_entry_key(e, path, i) for i, e in enumerate(entries))


def list_entry(image_file: str, slice_dim: int, slice_idx: int, task_id: str, **extra: JsonValue) -> JsonObject:
    """One entry as upstream's lists spell it (``image_file`` relative to the dataset folder)."""
    return {"image_file": image_file, "slice_dim": AXIS_OF_DIM[int(slice_dim)], "slice_idx": int(slice_idx),
            "task_ID": task_id, **extra}


def multi_cluster_entries(tasks_v100: list[JsonObject], tasks_v110: list[JsonObject]) -> list[JsonObject]:
    """Upstream's ``multi_cluster_samples_v1.0.0_to_v1.1.0.json`` of one dataset: the slices of the 1.0.0 T/L plan
    (train and test cases) whose 1.1.0 entry counts more than one cluster (``n_total_clusters``), keyed as upstream's
    summarizer reads them (YongchengYAO/MedVision docs/dataset-release/release-v1.1.0.md @2093f97, "Multi-cluster in
    v1"; ``summarize_TL_task.py`` @28f6c67 ``_build_removed_set``)."""
    out: list[JsonObject] = []
    for old, new in zip(tasks_v100, tasks_v110):
        task_id = text_field(old["task_ID"], "task_ID")
        for split in ("train_cases", "test_cases"):
            pairs = zip(list_field(old.get(split, []), split), list_field(new.get(split, []), split))
            for raw_old, raw_new in pairs:
                case_old, case_new = object_field(raw_old, split), object_field(raw_new, split)
                image_file = text_field(case_old["image_file"], "image_file")
                for dim, axis in AXIS_OF_DIM.items():
                    key = f"slice_profiles_{axis}"
                    kept = {object_field(e, key)["slice_idx"] for e in list_field(case_old.get(key, []), key)}
                    for item in list_field(case_new.get(key, []), key):
                        e = object_field(item, key)
                        n_total = int_field(e.get("n_total_clusters") or 0, "n_total_clusters")
                        if e["slice_idx"] in kept and n_total > 1:
                            out.append(list_entry(image_file, dim, int_field(e["slice_idx"], "slice_idx"), task_id,
                                                  n_total_clusters=n_total))
    return out


def write_removed_list(path: str | Path, entries: Sequence[JsonMapping]) -> None:
    """Write a list file (a JSON array, as upstream ships them)."""
    write_text_atomic(Path(path), json.dumps(list(entries), indent=2) + "\n")


@dataclass(frozen=True)
class RemovedList:
    """One dataset's list as found: its path and keys (None: the file is missing)."""

    dataset: str
    path: Path
    keys: frozenset[RemovedKey] | None

    @property
    def found(self) -> bool:
        return self.keys is not None


@dataclass
class RemovedLists:
    """The lists under one Datasets root, read once per dataset (as upstream caches them per dataset name)."""

    datasets_root: Path
    filename: str = LIST_FILENAME
    _cache: dict[str, RemovedList] = field(default_factory=dict)

    def get(self, dataset: str) -> RemovedList:
        if dataset not in self._cache:
            path = list_path(self.datasets_root, dataset, self.filename)
            there = os.path.lexists(path)  # a FIFO or a device there is refused in one line, not taken for none
            self._cache[dataset] = RemovedList(dataset, path, read_removed_list(path) if there else None)
        return self._cache[dataset]
