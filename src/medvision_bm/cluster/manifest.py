"""plan.json: what a submission planned and submitted, read back by `medvision-bm status`."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from medvision_bm.cluster.plan import Plan
from medvision_bm.cluster.scripts import script_path, slurm_name
from medvision_bm.errors import UserError
from medvision_bm.io import read_json, write_json_atomic

SCHEMA = "medvision-submit/1"
MANIFEST = "plan.json"
_REQUIRED = {"mode", "families", "summary", "work", "jobs"}


def manifest(plan: Plan, mode: str) -> dict[str, Any]:
    o = plan.options
    families = {}
    for f in o.families:
        fp = o.family_paths(f)
        families[f] = {"tag": fp.tag, "tasks_list": str(fp.tasks_list), "results_dir": str(fp.results_dir),
                       "status_file": str(fp.status_file)}
    work = [{"model": w.model, "family": w.family, "model_name": w.model_name, "shards": [w.shard.count, w.shard.by],
             "tasks": {t: {"n": i.count, "run_signature": i.run_signature, "done_at_submit": i.done_at_submit}
                       for t, i in w.tasks.items()}} for w in plan.work]
    jobs = []
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


def load_manifest(folder: Path) -> dict[str, Any]:
    try:
        data = read_json(folder / MANIFEST)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {folder / MANIFEST} ({exc}); pass a folder `medvision-bm submit` wrote") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not data.keys() >= _REQUIRED:
        raise UserError(f"{folder / MANIFEST} is not a `medvision-bm submit` plan ({SCHEMA}); "
                        "pass a folder written by this version")
    return data
