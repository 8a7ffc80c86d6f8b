"""`medvision-bm data check` and `data tasks`: what a Data/ folder offers at the pinned annotation version."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

from medvision_bm.data.catalogue import FILE_NAMES, SOURCE_COMMITS, availability, catalogue, catalogue_tasks
from medvision_bm.data.layout import DataDir, TaskCount, load_tasks_list
from medvision_bm.data.planner import DatasetContract, resolve_planner_version
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


def check_task(data: DataDir, task: str, listed: int | None = None) -> TaskCheck:
    return _task_check(task, data.counts([task])[task], listed)


def check(data: DataDir, tasks: dict[str, int | None]) -> list[TaskCheck]:
    """Every listed task's check; only the plans the list names are read, each once, in parallel, and cached."""
    counted = data.counts(tasks)
    return [_task_check(name, counted[name], count) for name, count in tasks.items()]


def _print_table(rows: list[TaskCheck], contract: DatasetContract) -> None:
    print(f"data folder {contract.data_dir}  annotation pin {contract.planner_version}  "
          f"single-instance filters {'on' if contract.filtering else 'off'}")
    width = max(len(r.task) for r in rows)
    print(f"{'task':<{width}}  status   plan version  candidates  samples  listed")
    for r in rows:
        ver = f"{r.plan_version}{'' if r.exact in (None, True) else ' (ceiling)'}" if r.plan_version else "-"
        print(f"{r.task:<{width}}  {r.status:<7}  {ver:<12}  {r.candidates if r.candidates is not None else '-':>10}  "
              f"{r.samples if r.samples is not None else '-':>7}  {r.listed if r.listed is not None else '-':>6}")
        if r.reason and r.status != "ok":  # "later" rows say "not at this pin: ..."
            print(f"    {r.reason}")


def cli_check(data_dir: str | None, tasks_list: str | None, as_json: bool) -> int:
    contract = DatasetContract.resolve(data_dir)
    data = DataDir(contract)
    if tasks_list:
        tasks: dict[str, int | None] = dict(load_tasks_list(tasks_list))
    else:
        tasks = dict.fromkeys(data.tasks())
    rows = check(data, tasks) if tasks else []
    if not tasks_list:  # datasets whose plans the pin refuses: say why instead of leaving them out
        rows += [TaskCheck(f"{ds} ({kind} tasks)", "later" if (ds, kind) in data.later else "error",
                           reason=f"not at this pin: {why}" if (ds, kind) in data.later else why)
                 for (ds, kind), why in data.unavailable.items()]
    usable = [r for r in rows if r.status == "ok"]
    later = [r for r in rows if r.status == "later"]  # upstream has no such task at this pin: nothing is wrong
    if as_json:
        print(json.dumps({"data_dir": str(contract.data_dir), "planner_version": contract.planner_version,
                          "filtering": contract.filtering, "tasks": [asdict(r) for r in rows]}, indent=1))
    elif rows:
        _print_table(rows, contract)
    if not usable:
        what = f"of the {len(rows)} task(s) in {tasks_list}" if tasks_list else "at all"
        raise UserError(f"{contract.data_dir} has no usable task {what} at annotation version "
                        f"{contract.planner_version}; check the tasks list, MedVision_PLANNER_VERSION and "
                        "MedVision_ACK_RELEASE, or download the data (`medvision-bm data download`)")
    bad = len(rows) - len(usable) - len(later)
    if later and not as_json:
        print(f"{len(later)} dataset kind(s) not at this pin (their annotations ship with a later release; "
              f"MedVision_PLANNER_VERSION={contract.planner_version} has no such tasks, as upstream)", file=sys.stderr)
    if bad:
        print(f"{bad} of {len(rows)} task(s) not usable", file=sys.stderr)
    return 0 if not bad else 1


def cli_tasks(data_dir: str | None, tasks_list: str | None = None, upstream: bool = False) -> int:
    """`data tasks`: with a tasks list, which of its tasks exist at the pinned release (upstream's catalogues, no data
    needed); with --upstream, upstream's catalogue of the pin; else the tasks a data folder offers at the pin."""
    if tasks_list or upstream:
        return _cli_release_tasks(tasks_list)
    contract = DatasetContract.resolve(data_dir)
    data = DataDir(contract)
    tasks = data.tasks()
    if not tasks:
        raise UserError(f"{contract.data_dir} offers no task at annotation version {contract.planner_version} "
                        f"(datasets with plans: {', '.join(data.datasets()) or 'none'}); `medvision-bm data check "
                        f"--data_dir {contract.data_dir}` says why")
    for name, count in tasks.items():
        print(f"{name}\t{count}")
    return 0


def _cli_release_tasks(tasks_list: str | None) -> int:
    """Upstream's catalogue at MedVision_PLANNER_VERSION: the whole of it, or the verdict for each task of a list."""
    release = resolve_planner_version()
    covered = [f"{fam} (dataset-info/all_tasks__ds_v{cat.source_release}/ @{SOURCE_COMMITS[fam]})"
               for fam in FILE_NAMES if (cat := catalogue(fam, release)) is not None]
    print(f"annotation release {release} (MedVision_PLANNER_VERSION); upstream catalogues: "
          f"{', '.join(covered) or 'none'}", file=sys.stderr)
    if not tasks_list:
        for names in catalogue_tasks(release).values():
            for name, n in names.items():
                if n:
                    print(f"{name}\t{n}")
        return 0
    rows = [availability(name, release) for name in load_tasks_list(tasks_list)]
    width = max(len(r.task) for r in rows)
    print(f"{'task':<{width}}  at {release:<7}  upstream samples")
    for r in rows:
        verdict = {True: "yes", False: "no", None: "unknown"}[r.exists]
        count = r.samples if r.samples is not None else "-"
        print(f"{r.task:<{width}}  {verdict:<10}  {count:>16}" + (f"  ({r.reason})" if r.reason else ""))
    absent = [r for r in rows if r.exists is False]
    unknown = sum(r.exists is None for r in rows)
    if unknown:
        print(f"{unknown} task(s) not covered by upstream's catalogues: the data folder decides "
              f"(`medvision-bm data check --tasks_list_json_path {tasks_list}`)", file=sys.stderr)
    if absent:
        print(f"{len(absent)} of {len(rows)} task(s) have no samples at annotation release {release}",
              file=sys.stderr)
        return 1
    return 0
