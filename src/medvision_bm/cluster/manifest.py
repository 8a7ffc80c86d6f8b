"""plan.json: what a submission planned and submitted, read back by `medvision-bm status`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TypedDict

from medvision_bm.cluster.plan import Plan
from medvision_bm.cluster.scripts import script_path, slurm_name
from medvision_bm.errors import UserError
from medvision_bm.io import read_json, write_json_atomic

SCHEMA = "medvision-submit/1"
MANIFEST = "plan.json"
_REQUIRED = {"mode", "families", "summary", "work", "jobs"}


class ManifestFamily(TypedDict):
    """A family's files in plan.json."""

    tag: str
    tasks_list: str
    results_dir: str
    status_file: str


class ManifestTask(TypedDict):
    """One task of a model's work in plan.json."""

    n: int
    run_signature: str
    done_at_submit: bool


class ManifestWork(TypedDict):
    """One model and family of plan.json: its shards and its tasks."""

    model: str
    family: str
    model_name: str
    shards: list[int | str]
    tasks: dict[str, ManifestTask]


class ManifestElement(TypedDict):
    """One element of an eval array in plan.json."""

    index: int
    tasks: list[str]
    sample_indices: str | None
    shard: str | None
    n_samples: int


class ManifestJob(TypedDict):
    """One job of plan.json (``job_id`` once submitted to SLURM)."""

    name: str
    slurm_name: str
    kind: str
    model: str | None
    family: str | None
    env: str | None
    gpus: int
    depends: list[list[str]]
    script: str
    job_id: str | None
    tasks: list[str]
    elements: list[ManifestElement]


class Manifest(TypedDict):
    """plan.json as ``manifest`` writes it and ``load_manifest`` reads it back."""

    schema: str
    mode: str
    created: float
    submitter_pid: int
    benchmark_dir: str
    data_dir: str
    planner_version: str
    ack_release: str | None
    sample_filtering: bool
    families: dict[str, ManifestFamily]
    summary: str
    work: list[ManifestWork]
    jobs: list[ManifestJob]


def manifest(plan: Plan, mode: str) -> Manifest:
    o = plan.options
    families: dict[str, ManifestFamily] = {}
    for f in o.families:
        fp = o.family_paths(f)
        families[f] = {"tag": fp.tag, "tasks_list": str(fp.tasks_list), "results_dir": str(fp.results_dir),
                       "status_file": str(fp.status_file)}
    work: list[ManifestWork] = [{"model": w.model, "family": w.family, "model_name": w.model_name, "shards": [w.shard.count, w.shard.by],
             "tasks": {t: {"n": i.count, "run_signature": i.run_signature, "done_at_submit": i.done_at_submit}
                       for t, i in w.tasks.items()}} for w in plan.work]
    jobs: list[ManifestJob] = []
    for j in plan.jobs:
        jobs.append({"name": j.name, "slurm_name": slurm_name(j), "kind": j.kind, "model": j.model,
                     "family": j.family, "env": j.env, "gpus": j.gpus, "depends": [list(d) for d in j.depends],
                     "script": str(script_path(plan, j)), "job_id": j.job_id, "tasks": j.tasks,
                     "elements": [{"index": e.index, "tasks": e.tasks, "sample_indices": e.sample_indices,
                                   "shard": e.shard, "n_samples": e.n_samples} for e in j.elements]})
    return {"schema": SCHEMA, "mode": mode, "created": time.time(), "submitter_pid": os.getpid(),
            "benchmark_dir": str(o.benchmark_dir), "data_dir": str(o.data_dir),
            "planner_version": o.contract.planner_version, "ack_release": o.contract.ack_release,
            "sample_filtering": o.contract.filtering, "families": families,
            "summary": str(o.summary_dir / "index.html"),
            "work": work, "jobs": jobs}


def write_manifest(plan: Plan, mode: str) -> Path:
    path = plan.options.submit_dir / MANIFEST
    write_json_atomic(path, manifest(plan, mode))
    return path


def find_submission(given: str | None, search_root: Path) -> Path:
    """The folder given, or the newest submission under <search_root>/submissions."""
    if given:
        folder = Path(given).expanduser().resolve()
        if folder.name == MANIFEST:
            folder = folder.parent
        if not (folder / MANIFEST).is_file():
            raise UserError(f"{folder} is not a submission folder (no {MANIFEST}); pass the folder "
                            "`medvision-bm submit` printed")
        return folder
    root = search_root / "submissions"
    found = sorted(p.parent for p in root.glob(f"*/{MANIFEST}")) if root.is_dir() else []
    if not found:
        raise UserError(f"no submission under {root}; pass the folder `medvision-bm submit` printed "
                        "(or pass --results_root as given to submit)")
    return found[-1]


def load_manifest(folder: Path) -> Manifest:
    try:
        data = read_json(folder / MANIFEST)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {folder / MANIFEST} ({exc}); pass a folder `medvision-bm submit` wrote") from None
    if not _is_plan(data):
        raise UserError(f"{folder / MANIFEST} is not a `medvision-bm submit` plan ({SCHEMA}); "
                        "pass a folder written by this version")
    return data  # plan.json of this schema: what ``manifest`` wrote


def _is_plan(data: object) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCHEMA and data.keys() >= _REQUIRED
