"""Per model and task of a submission: done, running, pending or failed, from the status files and the jobs.

Job states come from squeue (what SLURM still holds), sacct (accounting, when enabled) and the markers each
generated script writes (<submit_dir>/state/<job>_<element>.start/.rc), which also cover --local runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.cluster import slurm
from medvision_bm.cluster.manifest import Manifest, ManifestJob, ManifestWork, load_manifest
from medvision_bm.cluster.plan import WORK_KINDS, StatusSnapshot

RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT"}


@dataclass
class Unit:
    """One schedulable piece: an array element or a plain job."""

    job: ManifestJob
    element: int | None
    slurm_id: str | None  # "123_4", "125" or None (local / dry run)
    state: str = "UNKNOWN"  # SLURM-like state word
    detail: str = ""

    @property
    def label(self) -> str:
        if self.slurm_id:
            return self.slurm_id
        return self.job["name"] + (f"[{self.element}]" if self.element is not None else "")

    @property
    def active(self) -> bool:
        return self.state in slurm.ACTIVE_STATES

    @property
    def failed(self) -> bool:
        return self.state in slurm.FAILED_STATES


@dataclass
class Row:
    model: str
    model_name: str
    family: str
    task: str
    state: str  # done | running | pending | failed | not submitted
    job: str = ""
    detail: str = ""


def _units(data: Manifest) -> list[Unit]:
    out = []
    for job in data["jobs"]:
        jid = job.get("job_id")
        if job["kind"] == "eval":
            for el in job["elements"]:
                out.append(Unit(job, el["index"], f"{jid}_{el['index']}" if jid else None))
        else:
            out.append(Unit(job, None, jid))
    return out


def _marker_state(folder: Path, unit: Unit, local_alive: bool) -> tuple[str, str] | None:
    base = folder / "state" / f"{unit.job['name']}_{unit.element or 0}"
    rc_file, start_file = base.with_name(base.name + ".rc"), base.with_name(base.name + ".start")
    if rc_file.is_file():
        rc = rc_file.read_text().strip()
        return ("COMPLETED", "") if rc == "0" else ("FAILED", f"exit {rc}")
    if start_file.is_file():
        return ("RUNNING", "") if local_alive else ("FAILED", "stopped before it ended")
    return None


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def job_states(folder: Path, data: Manifest) -> list[Unit]:
    units = _units(data)
    ids = sorted({str(u.job["job_id"]) for u in units if u.job.get("job_id")})
    queue = slurm.squeue_states(ids) if ids else {}
    acct = slurm.sacct_states(ids) if ids else {}
    local_alive = data.get("mode") == "local" and _pid_alive(data.get("submitter_pid"))
    for u in units:
        if u.slurm_id:
            base = u.slurm_id.split("_")[0]
            q = queue.get(u.slurm_id) or queue.get(base)
            a = acct.get(u.slurm_id) or acct.get(base)
            if q is not None and (q.state in slurm.ACTIVE_STATES or a is None):
                u.state, u.detail = q.state, q.reason if q.reason not in ("None", "") else ""
            elif a is not None:
                u.state, u.detail = a.state, (f"exit {a.exit_code}" if a.state == "FAILED" else "")
            else:
                m = _marker_state(folder, u, False)
                u.state, u.detail = m or ("UNKNOWN", "gone from the queue, no accounting record")
        elif data.get("mode") == "local":
            m = _marker_state(folder, u, local_alive)
            u.state, u.detail = m if m else (("PENDING", "") if local_alive else ("NOT_RUN", ""))
        else:
            u.state = "NOT_SUBMITTED"
    return units


def collect(folder: Path, data: Manifest | None = None, units: list[Unit] | None = None) -> list[Row]:
    data = data or load_manifest(folder)
    units = units if units is not None else job_states(folder, data)
    status: dict[str, StatusSnapshot] = {}
    rows: list[Row] = []
    for w in data["work"]:
        path = data["families"][w["family"]]["status_file"]
        if path not in status:
            status[path] = StatusSnapshot(path)
        for task, info in w["tasks"].items():
            done = status[path].is_done(w["model_name"], task, info["run_signature"])[0]
            row = Row(w["model"], w["model_name"], w["family"], task, "done" if done else "pending")
            if not done:
                _job_view(row, _covering(units, w, task))
            rows.append(row)
    return rows


def _covering(units: list[Unit], w: ManifestWork, task: str) -> list[Unit]:
    """The units that work on one task: its warm-up, its family's image check, the array elements listing it, its
    finalize job."""
    env = next((u.job["env"] for u in units if u.job["model"] == w["model"] and u.job["kind"] != "summary"), None)
    out = []
    for u in units:
        j = u.job
        if j["kind"] == "warmup" and j["env"] == env:
            out.append(u)
        elif j["model"] == w["model"] and j["family"] == w["family"]:
            tasks = j["elements"][u.element or 0]["tasks"] if j["kind"] == "eval" else j["tasks"]
            if j["kind"] == "preflight" or (j["kind"] in WORK_KINDS and task in tasks):
                out.append(u)
    return out


def _job_view(row: Row, units: list[Unit]) -> None:
    work = [u for u in units if u.job["kind"] != "warmup"]
    if not work:
        row.state = "not submitted"
        return
    running = [u for u in work if u.state in RUNNING]
    waiting = [u for u in units if u.active and u.state not in RUNNING]
    failed = [u for u in units if u.failed or u.state in ("UNKNOWN", "NOT_RUN")]
    if running:
        row.state, row.job = "running", ",".join(u.label for u in running)
    elif any(u.state in RUNNING for u in units):  # the warm-up is running
        row.state, row.job, row.detail = "pending", units[0].label, "environment warm-up running"
    elif waiting:
        row.state, row.job = "pending", ",".join(u.label for u in waiting[:3])
        row.detail = waiting[0].detail
    elif failed:
        row.state, row.job = "failed", ",".join(u.label for u in failed[:3])
        row.detail = "; ".join(f"{u.state.lower()} {u.detail}".strip() for u in failed[:3])
    elif all(u.state == "NOT_SUBMITTED" for u in units):
        row.state = "not submitted"
    else:
        row.state, row.detail = "failed", "its jobs ended but the task is not marked done; see the logs"
