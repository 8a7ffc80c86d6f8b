"""The tests' own statement of upstream's T/L removed-samples rule, written apart from the suite's code.

YongchengYAO/MedVision src/medvision_bm/benchmark/summarize_TL_task.py @28f6c67: ``_build_removed_set`` keys a list
entry ``(image_file, {"x": 0, "y": 1, "z": 2}[slice_dim], int(slice_idx), int(task_ID))``; a sample's key is its
image file after the first ``/<dataset>/`` (dataset: the ``samples_<dataset>_`` token of the samples file name), its
``slice_dim``, ``slice_idx`` and ``int(taskID)``; a listed sample is skipped. The list of a dataset is
``<Datasets>/<dataset>/multi_cluster_samples_v1.0.0_to_v1.1.0.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

LIST_NAME = "multi_cluster_samples_v1.0.0_to_v1.1.0.json"
AXES = {"x": 0, "y": 1, "z": 2}


def listed_keys(data_dir: Path, name: str = LIST_NAME) -> dict[str, set[tuple[str, int, int, int]]]:
    """dataset -> the keys its list names (datasets without a list are absent)."""
    out: dict[str, set[tuple[str, int, int, int]]] = {}
    for path in sorted((Path(data_dir) / "Datasets").glob(f"*/{name}")):
        out[path.parent.name] = {(e["image_file"], AXES[e["slice_dim"]], int(e["slice_idx"]), int(e["task_ID"]))
                                 for e in json.loads(path.read_text())}
    return out


def sample_key(task: str, key: str) -> tuple[str, str, int, int, int]:
    """(dataset, relative image, slice_dim, slice_idx, task id) of a stored T/L sample (``key`` as the suite stores
    it: ``<image below Datasets>:d<dim>:s<idx>:l<label>``)."""
    dataset = task.split("_")[0]
    m = re.fullmatch(r"(.+):d(\d+):s(\d+)(?::l\d+)?", key)
    assert m, key
    image = "/" + m[1]
    at = image.find(f"/{dataset}/")
    rel = image[at + len(dataset) + 2:] if at >= 0 else Path(m[1]).name
    task_id = int(re.search(r"_Task(\d+)_", task)[1])
    return dataset, rel, int(m[2]), int(m[3]), task_id


def is_listed(lists: dict[str, set[tuple[str, int, int, int]]], task: str, key: str) -> bool:
    dataset, *rest = sample_key(task, key)
    return tuple(rest) in lists.get(dataset, set())
