"""Thin wrappers around the SLURM client commands: sbatch, sinfo, scancel, squeue and sacct."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.errors import UserError

ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED",
                 "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}
FAILED_STATES = {"FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                 "PREEMPTED", "REVOKED", "SPECIAL_EXIT"}
_TIMEOUT_S = 60


@dataclass(frozen=True)
class JobState:
    state: str  # SLURM's state word, e.g. RUNNING, COMPLETED, CANCELLED
    reason: str = ""
    exit_code: str = ""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UserError(f"{name} not found on PATH: run this on a SLURM login node (or load SLURM, e.g. "
                        "`module load slurm`), or use --local N to run on this machine, or --dry-run")
    return path


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no message)"


def require_sbatch() -> None:
    _tool("sbatch")


def partitions() -> list[str] | None:
    """Partition names the cluster knows (None when sinfo is missing or fails)."""
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        return None
    try:
        res = subprocess.run([sinfo, "-h", "-o", "%R"], capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return sorted({ln.strip() for ln in res.stdout.splitlines() if ln.strip()})


def check_partition(name: str) -> None:
    known = partitions()
    if known is not None and name not in known:
        raise UserError(f"partition {name!r} does not exist on this cluster (sinfo lists: {', '.join(known) or 'none'}); "
                        "pass --partition with one of them")


def sbatch(script: Path, dependency: str = "", env: dict[str, str] | None = None) -> str:
    """Submit one script (``env``: variables added to the environment sbatch passes on to the job); its job id."""
    argv = [_tool("sbatch"), "--parsable"]
    if dependency:
        argv.append(dependency)
    argv.append(str(script))
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S,
                             env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        raise UserError(f"sbatch {script.name} did not answer in {_TIMEOUT_S} s; is slurmctld reachable "
                        "(`scontrol ping`)?") from None
    job_id = res.stdout.strip().split(";")[0]
    if res.returncode != 0 or not re.fullmatch(r"\d+", job_id):
        raise UserError(f"sbatch rejected {script.name}: {_first_line(res.stderr or res.stdout)}")
    return job_id


def scancel(job_ids: list[str]) -> None:
    if job_ids and shutil.which("scancel"):
        subprocess.run([shutil.which("scancel") or "scancel", *job_ids], capture_output=True, timeout=_TIMEOUT_S)


def _expand(job_field: str) -> list[str]:
    """'12_[0-3%2]' -> ['12_0', ..., '12_3']; '12_4' and '12' unchanged."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_field)
    if not m:
        return [job_field]
    out: list[str] = []
    for part in m[2].split("%")[0].split(","):
        a, _, b = part.partition("-")
        if a.isdigit() and (not b or b.isdigit()):
            out.extend(f"{m[1]}_{i}" for i in range(int(a), int(b or a) + 1))
    return out


def squeue_states(job_ids: list[str]) -> dict[str, JobState]:
    """States of the jobs SLURM still holds (active ones, and finished ones for MinJobAge seconds)."""
    squeue = shutil.which("squeue")
    if not job_ids or squeue is None:
        return {}
    wanted = set(job_ids)
    try:
        res = subprocess.run([squeue, "-h", "-r", "-t", "all", "-o", "%i|%T|%r"], capture_output=True, text=True,
                             timeout=_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return {}
    out: dict[str, JobState] = {}
    for line in res.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3:
            continue
        for jid in _expand(parts[0]):
            if jid.split("_")[0] in wanted:
                out[jid] = JobState(parts[1], parts[2])
    return out


def sacct_states(job_ids: list[str]) -> dict[str, JobState]:
    """States from accounting (empty when accounting is disabled or sacct is missing)."""
    sacct = shutil.which("sacct")
    if not job_ids or sacct is None:
        return {}
    try:
        res = subprocess.run([sacct, "-n", "-P", "-X", "-j", ",".join(job_ids), "--format=JobID,State,ExitCode"],
                             capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return {}
    if res.returncode != 0:
        return {}
    out: dict[str, JobState] = {}
    for line in res.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3:
            continue
        state = parts[1].split()[0] if parts[1] else ""  # "CANCELLED by 0" -> CANCELLED
        for jid in _expand(parts[0]):
            out[jid] = JobState(state, exit_code=parts[2])
    return out
