"""A planned submission put on disk and into SLURM: its folder, its job scripts, the sbatch sequence with each job's
dependencies (cancelled as a whole when one sbatch fails), and the earlier submissions still in the queue."""

from __future__ import annotations

import os
import time
from pathlib import Path

from medvision_bm.cluster import slurm
from medvision_bm.cluster.manifest import MANIFEST, load_manifest
from medvision_bm.cluster.plan import Plan
from medvision_bm.cluster.scripts import dependency_arg, render_script, render_submit_sh, script_path
from medvision_bm.errors import UserError
from medvision_bm.io import write_json_atomic, write_text_atomic


def new_submit_dir(results_root: Path) -> Path:
    """``<results_root>/submissions/<time stamp>[-n]``, a folder no earlier submission has."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = results_root / "submissions" / stamp
    n = 2
    while folder.exists():
        folder = results_root / "submissions" / f"{stamp}-{n}"
        n += 1
    return folder


def write_files(plan: Plan) -> None:
    """The submission folder: tasks files, one job script per job, and ``submit.sh`` that submits them by hand."""
    o = plan.options
    try:
        for sub in ("jobs", "logs", "state", "tasks"):
            (o.submit_dir / sub).mkdir(parents=True, exist_ok=True)
        for path, tasks in plan.tasks_files.items():
            write_json_atomic(path, tasks)
        for job in plan.jobs:
            write_text_atomic(script_path(plan, job), render_script(plan, job))
        submit_sh = o.submit_dir / "submit.sh"
        write_text_atomic(submit_sh, render_submit_sh(plan))
        os.chmod(submit_sh, 0o755)
    except OSError as exc:
        raise UserError(f"cannot write the submission folder {o.submit_dir} ({exc.strerror or exc}); "
                        "pass --submit_dir (or --results_root) somewhere writable") from None


def submit_jobs(plan: Plan) -> None:
    """sbatch every job in order with its dependencies; on a failure, cancel what this call submitted."""
    submitted: list[str] = []
    ids: dict[str, str] = {}
    env = plan.secrets.environment()
    export = next((a for a in plan.options.sbatch_args if a.startswith("--export")), None)
    if env and export:
        raise UserError(f"--sbatch_arg {export}: the jobs read {', '.join(env)} (secret values of the runner "
                        "flags) from the environment sbatch passes on; drop it (sbatch's default is --export=ALL)")
    try:
        for job in plan.jobs:
            job.job_id = slurm.sbatch(script_path(plan, job), dependency_arg(job, ids), env)
            ids[job.name] = job.job_id
            submitted.append(job.job_id)
    except BaseException:
        slurm.scancel(submitted)
        for job in plan.jobs:
            job.job_id = None
        raise


def active_submissions(results_root: Path, newest: int = 20) -> list[tuple[Path, int]]:
    """The ``newest`` SLURM submissions under ``results_root`` with jobs still queued or running, and how many."""
    plans = sorted((results_root / "submissions").glob(f"*/{MANIFEST}")) if results_root.is_dir() else []
    by_plan: dict[Path, list[str]] = {}
    for path in plans[-newest:]:
        try:
            data = load_manifest(path.parent)
        except UserError:  # not ours, or broken: nothing to warn about
            continue
        if data.get("mode") == "slurm":
            by_plan[path.parent] = [str(j["job_id"]) for j in data["jobs"] if j.get("job_id")]
    ids = [i for v in by_plan.values() for i in v]
    if not ids:
        return []
    active = {jid.split("_")[0] for jid, st in slurm.squeue_states(ids).items() if st.state in slurm.ACTIVE_STATES}
    return [(folder, n) for folder, job_ids in by_plan.items() if (n := len(active & set(job_ids)))]
