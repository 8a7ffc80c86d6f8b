"""Upstream MedVision's benchmark constants (``src/medvision_bm/utils/configs.py``), as data.

The values live in ``upstream_configs.json`` next to this module, generated from the upstream text (the JSON's
``source`` entry names the file and the commits). Two generations:

* ``"newer"`` (the default): ``configs.py`` @9fff178 (30 datasets; a superset of the @1df0ffe version, which lacks a
  few labels/datasets: ``variants.1df0ffe`` in the JSON). It adds
  the CT windowing tables (``HU_window_WL_map``, ``CT_HU_windows_WL``), the forced-standard-normalisation task list
  and ``AD_NEAR_ZERO_GT_THRESHOLD``.
* ``"paper"``: master c221615 (identical on feat/sft-cot 837709e). Only ``label_map_regroup`` differs for the 22 paper
  datasets (the knee labels group to ``"Knee"``, not ``"Knee Bone"``/``"Knee Soft Tissue"``); the paper era has no CT
  windows (it rendered every slice with a min-max stretch).

Loaded once, read-only views. Stdlib only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Literal

from medvision_bm.jsontypes import JsonMapping
from medvision_bm.limits import float_field, int_field, list_field, object_field, text_field

Era = Literal["newer", "paper"]
ERAS: tuple[str, ...] = ("newer", "paper")
_JSON_NAME = "upstream_configs.json"


@dataclass(frozen=True)
class ForcedTask:
    """One entry of ``TASK_LIST_FORCE_STANDARD_IMAGE_NORMALIZATION`` (the doc's three fields, compared as strings)."""

    dataset_name: str
    taskID: str  # upstream's field name; the doc's string, e.g. "01"
    taskType: str


@cache
def _data() -> dict[str, object]:
    text = resources.files(__package__).joinpath(_JSON_NAME).read_text(encoding="utf-8")
    return object_field(json.loads(text), _JSON_NAME)


def _get(*keys: str) -> object:
    """The value at ``keys`` of the packaged data (each step an object)."""
    value: object = _data()
    for i, key in enumerate(keys):
        value = object_field(value, ".".join(keys[:i]) or _JSON_NAME)[key]
    return value


def _text_map(*keys: str) -> Mapping[str, str]:
    """The object at ``keys`` as a read-only map of texts."""
    name = ".".join(keys)
    return MappingProxyType({k: text_field(v, f"{name}.{k}") for k, v in object_field(_get(*keys), name).items()})


@cache
def _texts(key: str) -> tuple[str, ...]:
    return tuple(text_field(v, key) for v in list_field(_get(key), key))


def _check_era(era: str) -> None:
    if era not in ERAS:
        raise ValueError(f"era must be one of {ERAS}, not {era!r}")


def source() -> JsonMapping:
    """Where the data came from (upstream file, commits, what was left out)."""
    return MappingProxyType(object_field(_get("source"), "source"))


# ---------------------------------------------------------------- label maps

@cache
def label_map_regroup(era: Era = "newer") -> Mapping[str, str]:
    """Fine label name (a value of a task's ``labels_map``) -> anatomy group, e.g. ``"kidney tumor"`` ->
    ``"Kidney Tumor/Lesion"``. Keys are exact (case-sensitive) strings."""
    _check_era(era)
    return _text_map("label_map_regroup") if era == "newer" else _text_map("paper_era", "label_map_regroup")


@cache
def label_map_rename() -> Mapping[str, str]:
    """Fine label name -> canonical name (identical in both generations)."""
    return _text_map("label_map_rename")


def anatomy_group(label_name: str, era: Era = "newer") -> str | None:
    """The anatomy group of a fine label name, or None when upstream's map lacks it."""
    return label_map_regroup(era).get(label_name)


# ---------------------------------------------------------------- CT windows (newer generation only)

@cache
def hu_window_presets() -> Mapping[str, tuple[int, int]]:
    """``HU_window_WL_map``: preset name -> (window width W, window level L), e.g. ``"soft_tissue"`` -> (400, 40)."""
    presets = {}
    for name, raw in object_field(_get("HU_window_WL_map"), "HU_window_WL_map").items():
        wl = list_field(raw, f"HU_window_WL_map.{name}")
        presets[name] = (int_field(wl[0], name, -(1 << 31)), int_field(wl[1], name, -(1 << 31)))
    return MappingProxyType(presets)


@cache
def ct_window_presets_by_group() -> Mapping[str, str]:
    """``CT_HU_windows_WL`` as anatomy group -> preset name (``"Lung"`` -> ``"lung"``). ``"Others"`` has none."""
    return _text_map("CT_HU_windows_WL")


def ct_window_preset(group: str) -> str | None:
    """The HU preset name of an anatomy group, or None (``"Others"``, or a group upstream has no window for)."""
    return ct_window_presets_by_group().get(group)


def window_bounds(width: float, level: float) -> tuple[float, float]:
    """Upstream's clip range of a (W, L) window: ``(L - W/2, L + W/2)``."""
    return level - (width / 2), level + (width / 2)


# ---------------------------------------------------------------- normalisation exceptions

@cache
def forced_standard_normalization() -> tuple[ForcedTask, ...]:
    """``TASK_LIST_FORCE_STANDARD_IMAGE_NORMALIZATION``: tasks whose CT slices get the percentile stretch, not a window
    (upstream: "contrast CT scans, such as KiPA22")."""
    key = "TASK_LIST_FORCE_STANDARD_IMAGE_NORMALIZATION"
    tasks = [object_field(t, key) for t in list_field(_get(key), key)]
    return tuple(ForcedTask(text_field(t["dataset_name"], key), text_field(t["taskID"], key),
                            text_field(t["taskType"], key)) for t in tasks)


def is_forced_standard_normalization(dataset_name: str, task_id: str, task_type: str) -> bool:
    """Upstream's exact triple match (``taskID`` is the doc's string, e.g. ``"01"``)."""
    return ForcedTask(dataset_name, task_id, task_type) in forced_standard_normalization()


# ---------------------------------------------------------------- datasets

@cache
def datasets_name2package() -> Mapping[str, str]:
    """``DATASETS_NAME2PACKAGE``: dataset name -> ``medvision_ds.datasets`` package (``"OAIZIB-CM"`` ->
    ``"OAIZIB_CM"``)."""
    return _text_map("DATASETS_NAME2PACKAGE")


def dataset_package(dataset_name: str) -> str | None:
    return datasets_name2package().get(dataset_name)


# ---------------------------------------------------------------- summary constants

@cache
def minimum_group_size() -> int:
    """A region/label group needs at least this many samples to enter the group averages."""
    return int_field(_get("MINIMUM_GROUP_SIZE"), "MINIMUM_GROUP_SIZE")


def excluded_keys() -> tuple[str, ...]:
    """Substrings (lower case) that drop a region from the group averages."""
    return _texts("EXCLUDED_KEYS")


def tumor_lesion_group_keys() -> tuple[str, ...]:
    """Substrings (lower case) that put a region into the tumour/lesion group."""
    return _texts("TUMOR_LESION_GROUP_KEYS")


@cache
def ad_near_zero_gt_threshold() -> float:
    """Newer generation: A/D samples whose ground truth is below this are left out of the metrics."""
    return float_field(_get("AD_NEAR_ZERO_GT_THRESHOLD"), "AD_NEAR_ZERO_GT_THRESHOLD")


@cache
def seed() -> int:
    return int_field(_get("SEED"), "SEED")


@cache
def random_box_simulations() -> int:
    return int_field(_get("RANDOM_BOX_SIMULATIONS"), "RANDOM_BOX_SIMULATIONS")


@cache
def summary_filenames() -> Mapping[str, str]:
    """Upstream's summary file names (``SUMMARY_FILENAME_*``)."""
    return _text_map("SUMMARY_FILENAMES")
