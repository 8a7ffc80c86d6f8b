"""`submit --local N`: run a plan's sbatch scripts on this machine with N worker processes.

The scripts are the ones written for SLURM; each array element runs as `bash script` with SLURM_ARRAY_TASK_ID
set. Dependencies keep their SLURM meaning: afterok waits for success (a failure cancels the dependent job),
afterany waits for the end. With --gpus-per-job G, worker slot i sees GPUs i*G .. i*G+G-1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from medvision_bm.cluster.plan import DEP_OK, Job, Plan
from medvision_bm.cluster.scripts import script_path

_POLL_S = 0.2


@dataclass
class _JobRun:
    job: Job
    todo: list[int]
    running: dict[int, tuple[subprocess.Popen[bytes], int]] = field(default_factory=dict)  # element -> (proc, slot)
    rcs: dict[int, int] = field(default_factory=dict)
    cancelled: bool = False

    @property
    def finished(self) -> bool:
        return self.cancelled or (not self.todo and not self.running)

    @property
    def ok(self) -> bool:
        return self.finished and not self.cancelled and all(rc == 0 for rc in self.rcs.values())


def _gpu_env(slot: int, gpus: int) -> dict[str, str]:
    if gpus <= 0:
        return {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d for d in visible.split(",") if d] if visible else None
    ids = range(slot * gpus, slot * gpus + gpus)
    chosen = [devices[i] for i in ids if i < len(devices)] if devices is not None else [str(i) for i in ids]
    return {"CUDA_VISIBLE_DEVICES": ",".join(chosen)}


def run_local(plan: Plan, workers: int, log: Callable[[str], None] = print) -> dict[str, _JobRun]:
    """Run every job of the plan; returns each job's run (exit codes per element)."""
    runs = {j.name: _JobRun(j, list(range(len(j.elements))) if j.is_array else [0]) for j in plan.jobs}
    free_slots = list(range(workers))
    limit = plan.options.array_parallelism
    logs = plan.options.submit_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.time()

    def ready(run: _JobRun) -> bool | None:
        """True: may start; False: wait; None: a dependency it needs failed."""
        for kind, name in run.job.depends:
            dep = runs[name]
            if not dep.finished:
                return False
            if kind == DEP_OK and not dep.ok:
                return None
        return True

    def stop_all() -> None:
        for run in runs.values():
            for proc, _slot in run.running.values():
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for run in runs.values():
            for proc, _slot in run.running.values():
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)

    try:
        while not all(r.finished for r in runs.values()):
            for run in runs.values():
                for idx, (proc, slot) in list(run.running.items()):
                    rc = proc.poll()
                    if rc is None:
                        continue
                    del run.running[idx]
                    run.rcs[idx] = rc
                    free_slots.append(slot)
                    label = run.job.name + (f"[{idx}]" if run.job.is_array else "")
                    log(f"[{time.time() - started:6.1f}s] {label} {'done' if rc == 0 else f'failed (exit {rc})'}")
            for run in runs.values():
                if run.finished or not run.todo:
                    continue
                state = ready(run)
                if state is None:
                    run.cancelled = True
                    run.todo.clear()
                    log(f"[{time.time() - started:6.1f}s] {run.job.name} cancelled: a job it needs (afterok) failed")
                    continue
                while state and run.todo and free_slots and (not limit or len(run.running) < limit):
                    idx = run.todo.pop(0)
                    slot = free_slots.pop(0)
                    run.running[idx] = (_start(plan, run.job, idx, slot, logs), slot)
                    log(f"[{time.time() - started:6.1f}s] {run.job.name}" +
                        (f"[{idx}]" if run.job.is_array else "") + f" started (worker {slot})")
            time.sleep(_POLL_S)
    except BaseException:
        stop_all()
        raise
    return runs


def _start(plan: Plan, job: Job, idx: int, slot: int, logs: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(plan.secrets.environment())  # secret values the scripts read from their environment
    env["SLURM_ARRAY_TASK_ID"] = str(idx)
    env.update(_gpu_env(slot, job.gpus))
    name = f"{job.name}_local_{idx}.out" if job.is_array else f"{job.name}_local.out"
    with open(logs / name, "ab") as out:
        return subprocess.Popen(["bash", str(script_path(plan, job))], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def summarize_runs(runs: dict[str, _JobRun]) -> list[str]:
    """Lines naming each job that did not succeed."""
    out = []
    for run in runs.values():
        if run.cancelled:
            out.append(f"{run.job.name}: cancelled (a job it needs failed)")
        for idx, rc in sorted(run.rcs.items()):
            if rc != 0:
                label = run.job.name + (f"[{idx}]" if run.job.is_array else "")
                out.append(f"{label}: exit {rc}")
    return out
