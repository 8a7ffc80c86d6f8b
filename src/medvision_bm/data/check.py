"""What a Data/ folder offers at the pinned annotation version, task by task (`medvision-bm data check` prints it)."""

from __future__ import annotations

from dataclasses import dataclass

from medvision_bm.data.layout import DataDir, TaskCount
from medvision_bm.errors import UserError


@dataclass
class TaskCheck:
    task: str
    status: str  # "ok" | "missing" | "empty" | "error" | "later" (ships after the pin: no such task there)
    plan: str | None = None  # plan file name the ceiling rule picked
    plan_version: str | None = None
    exact: bool | None = None  # the picked version is the pair's newest on disk
    candidates: int | None = None  # samples before the single-instance filters (this plane / metric type)
    samples: int | None = None  # after the filters
    listed: int | None = None  # the count the tasks list gives (informational, as upstream)
    reason: str = ""


def _task_check(task: str, counted: TaskCount | UserError, listed: int | None) -> TaskCheck:
    if isinstance(counted, UserError):
        msg = str(counted)
        status = "missing" if ("is not under" in msg or ("has no" in msg and "plan" in msg)) else "error"
        return TaskCheck(task, status, listed=listed, reason=msg)
    n, plan = counted.samples, counted.plan
    # A/D candidates are never filtered; a _Distance/_Angle config keeps only its metric type
    return TaskCheck(task, "ok" if n else "empty", plan.path.name, plan.version, plan.exact, counted.candidates, n,
                     listed, "" if n else "no samples on this plane after the filters")


def check(data: DataDir, tasks: dict[str, int | None]) -> list[TaskCheck]:
    """Every listed task's check; only the plans the list names are read, each once, in parallel, and cached."""
    counted = data.counts(tasks)
    return [_task_check(name, counted[name], count) for name, count in tasks.items()]
