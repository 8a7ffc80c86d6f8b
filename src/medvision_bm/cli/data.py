"""`medvision-bm data ...`: the data subcommands' flags, and the tables and lines they print (the work is `data/`'s)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from medvision_bm.errors import UserError

if TYPE_CHECKING:
    from medvision_bm.data.check import TaskCheck
    from medvision_bm.data.planner import DatasetContract
    from medvision_bm.secrets import SafeArgumentParser

    Subparsers = argparse._SubParsersAction[SafeArgumentParser]

# The front door builds this parser for every command, so each handler imports the `data` modules it needs when it
# runs (the phantom's brings numpy and nibabel; `data download` the environment builder).


def add_data_parser(sub: Subparsers) -> None:
    """The ``data`` subcommand and its own subcommands, on the front door's subparsers."""
    data = sub.add_parser("data", help="Datasets: check, list and download upstream data; generate the phantom")
    data_sub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND")
    mp = data_sub.add_parser("make-phantom", help="Write the deterministic phantom Data/ folder (upstream's layout)")
    mp.add_argument("--data_dir", required=True, help="folder to write <data_dir>/Datasets/... into")
    mp.add_argument("--seed", type=int, default=None, help="generator seed (default: the one the task lists match)")
    mp.add_argument("--tasks_list_dir", default=None, help="also write tasks_MedVision-Phantom-*.json here")
    mp.set_defaults(handler=make_phantom_command)
    dt = data_sub.add_parser("tasks", help="List the tasks a Data/ folder (or upstream's catalogue) offers at "
                                           "MedVision_PLANNER_VERSION")
    dt.add_argument("--data_dir", default=None, help="upstream Data/ folder (default: MedVision_DATA_DIR)")
    dt.add_argument("--tasks_list_json_path", default=None,
                    help="say which tasks of this list exist at the pinned release, from upstream's per-release "
                         "catalogues (no data folder needed)")
    dt.add_argument("--upstream", action="store_true",
                    help="list upstream's catalogue of the pinned release instead of a data folder's tasks")
    dt.set_defaults(handler=tasks_command)
    dc = data_sub.add_parser("check", help="Per task: found or missing, the plan version picked, samples "
                                           "before and after upstream's filters")
    dc.add_argument("--data_dir", default=None, help="upstream Data/ folder (default: MedVision_DATA_DIR)")
    dc.add_argument("--tasks_list_json_path", default=None, help="check these tasks (default: every task found)")
    dc.add_argument("--json", action="store_true", help="print JSON instead of a table")
    dc.set_defaults(handler=check_command)
    dd = data_sub.add_parser("download", help="Fetch the datasets a tasks list needs, as upstream does "
                                              "(Hugging Face dataset YongchengYAO/MedVision and its loading script)")
    dd.add_argument("--data_dir", required=True, help="upstream Data/ folder to fill")
    dd.add_argument("--tasks_list_json_path", required=True, help="tasks list whose datasets to fetch")
    dd.add_argument("--split", choices=("test", "train"), default="test", help="split of the configs to load")
    dd.add_argument("--hf_dataset", default="YongchengYAO/MedVision",
                    help="dataset repository id or a local folder holding it (default: %(default)s)")
    dd.add_argument("--force_download_data", action="store_true",
                    help="download again what is already there (upstream MedVision_FORCE_DOWNLOAD_DATA)")
    dd.add_argument("--dry_run", action="store_true", help="say what would be fetched, fetch nothing")
    dd.set_defaults(handler=download_command)
    _add_split_swap(data_sub)


def _add_split_swap(data_sub: Subparsers) -> None:
    ds = data_sub.add_parser("split-swap", help="Cases whose train/test split changed between two annotation "
                                                "releases, per dataset (upstream's count_case_split_swap.py) "
                                                "and per task")
    ds.add_argument("--data_dir", required=True, help="upstream Data/ folder (or its Datasets/ folder)")
    ds.add_argument("--old_version", default="1.0.0", help="release whose splits are the reference (%(default)s)")
    ds.add_argument("--new_version", default="1.4.0", help="release compared against it (%(default)s)")
    ds.add_argument("--kind", choices=("biometry", "detection", "segmentation"), default="biometry",
                    help="plan kind whose splits are pooled (default: %(default)s, as upstream)")
    ds.add_argument("--datasets", nargs="+", default=None, help="only these datasets (default: all with a "
                                                                  "--new_version plan)")
    ds.set_defaults(handler=split_swap_command)


def make_phantom_command(ns: argparse.Namespace, extra: list[str]) -> int:
    from medvision_bm.data.phantom import make_phantom

    counts = make_phantom(ns.data_dir, seed=ns.seed, tasks_list_dir=ns.tasks_list_dir)
    total = sum(sum(c.values()) for c in counts.values())
    n_tasks = sum(len(c) for c in counts.values())
    print(f"phantom data written to {ns.data_dir} in upstream MedVision's layout: {n_tasks} bundled tasks, {total} "
          "test samples at annotation version 1.0.0 (upstream's launchers: MedVision_PLANNER_VERSION=1.0.0, "
          "MedVision_ACK_RELEASE=1.4.0)")
    return 0


# ---------------------------------------------------------------------------------------------------- data check

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


def check_command(ns: argparse.Namespace, extra: list[str]) -> int:
    """`data check`: per task, found or missing, the plan version picked, samples before and after the filters."""
    from medvision_bm.data.check import TaskCheck, check
    from medvision_bm.data.layout import DataDir, load_tasks_list
    from medvision_bm.data.planner import DatasetContract

    contract = DatasetContract.resolve(ns.data_dir)
    data = DataDir(contract)
    tasks_list = ns.tasks_list_json_path
    tasks: dict[str, int | None] = dict(load_tasks_list(tasks_list)) if tasks_list else dict.fromkeys(data.tasks())
    rows = check(data, tasks) if tasks else []
    if not tasks_list:  # datasets whose plans the pin refuses: say why instead of leaving them out
        rows += [TaskCheck(f"{ds} ({kind} tasks)", "later" if (ds, kind) in data.later else "error",
                           reason=f"not at this pin: {why}" if (ds, kind) in data.later else why)
                 for (ds, kind), why in data.unavailable.items()]
    usable = [r for r in rows if r.status == "ok"]
    later = [r for r in rows if r.status == "later"]  # upstream has no such task at this pin: nothing is wrong
    if ns.json:
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
    if later and not ns.json:
        print(f"{len(later)} dataset kind(s) not at this pin (their annotations ship with a later release; "
              f"MedVision_PLANNER_VERSION={contract.planner_version} has no such tasks, as upstream)", file=sys.stderr)
    if bad:
        print(f"{bad} of {len(rows)} task(s) not usable", file=sys.stderr)
    return 0 if not bad else 1


# ---------------------------------------------------------------------------------------------------- data tasks

def tasks_command(ns: argparse.Namespace, extra: list[str]) -> int:
    """`data tasks`: with a tasks list, which of its tasks exist at the pinned release (upstream's catalogues, no data
    needed); with --upstream, upstream's catalogue of the pin; else the tasks a data folder offers at the pin."""
    from medvision_bm.data.layout import DataDir
    from medvision_bm.data.planner import DatasetContract

    if ns.tasks_list_json_path or ns.upstream:
        return _release_tasks(ns.tasks_list_json_path)
    contract = DatasetContract.resolve(ns.data_dir)
    data = DataDir(contract)
    tasks = data.tasks()
    if not tasks:
        raise UserError(f"{contract.data_dir} offers no task at annotation version {contract.planner_version} "
                        f"(datasets with plans: {', '.join(data.datasets()) or 'none'}); `medvision-bm data check "
                        f"--data_dir {contract.data_dir}` says why")
    for name, count in tasks.items():
        print(f"{name}\t{count}")
    return 0


def _release_tasks(tasks_list: str | None) -> int:
    """Upstream's catalogue at MedVision_PLANNER_VERSION: the whole of it, or the verdict for each task of a list."""
    from medvision_bm.data.catalogue import (
        FILE_NAMES,
        SOURCE_COMMITS,
        availability,
        catalogue,
        catalogue_tasks,
    )
    from medvision_bm.data.layout import load_tasks_list
    from medvision_bm.data.planner import resolve_planner_version

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
    if (unknown := sum(r.exists is None for r in rows)):
        print(f"{unknown} task(s) not covered by upstream's catalogues: the data folder decides "
              f"(`medvision-bm data check --tasks_list_json_path {tasks_list}`)", file=sys.stderr)
    if absent:
        print(f"{len(absent)} of {len(rows)} task(s) have no samples at annotation release {release}",
              file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------------------- data download

def download_command(ns: argparse.Namespace, extra: list[str]) -> int:
    """`data download`: fetch what the tasks list needs; without ``datasets`` 3.x here, the fetch re-runs in the
    ``data`` environment the project builds (built if needed)."""
    from medvision_bm.data import download as dl
    from medvision_bm.data.layout import load_tasks_list
    from medvision_bm.data.planner import ENV_PLANNER, parse_planner_version
    from medvision_bm.envs.data_env import IN_DATA_ENV, run_download_in_data_env
    from medvision_bm.secrets import redact

    data_dir = Path(ns.data_dir).expanduser().resolve()
    pin = parse_planner_version(os.environ.get(ENV_PLANNER))
    tasks = list(load_tasks_list(ns.tasks_list_json_path))
    data_dir.mkdir(parents=True, exist_ok=True)
    plan = dl.plan_download(data_dir, tasks, ns.split, pin, ns.force_download_data)
    for ds in plan.present:
        print(f"{ds}: already in {data_dir / 'Datasets' / ds} (tracker entry and a plan at or below {pin}); skipped",
              file=sys.stderr)
    if not plan.fetch:
        print("nothing to download", file=sys.stderr)
        return 0
    dl.check_credentials(list(plan.fetch), os.environ)
    if ns.dry_run:
        for ds, config in plan.fetch.items():
            print(f"{ds}: would load config {config} from {ns.hf_dataset}")
        return 0
    version = dl.datasets_version()
    if not os.environ.get(IN_DATA_ENV) and not dl.can_run_loader(version):
        return run_download_in_data_env(dl.download_argv(ns), f"datasets {version}" if version else "no datasets")
    os.environ.update(dl.upstream_env(data_dir, ns.force_download_data))  # before `datasets` reads its cache paths
    datasets = dl.datasets_module()
    for ds, config in plan.fetch.items():
        print(f"{ds}: loading config {config} from {ns.hf_dataset} (upstream's loading script downloads the data)",
              file=sys.stderr)
        try:
            datasets.load_dataset(ns.hf_dataset, name=config, split=ns.split, trust_remote_code=True)
        except Exception as exc:  # the loader's own errors (access, network, version banners) name the fix
            raise UserError(f"{ds}: loading {config} failed: {redact(f'{type(exc).__name__}: {exc}')[:400]}") from None
    print(f"downloaded {len(plan.fetch)} dataset(s) into {data_dir / 'Datasets'}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------- data split-swap

def split_swap_command(ns: argparse.Namespace, extra: list[str]) -> int:
    """`data split-swap`: upstream's table of cases whose split changed between two annotation releases, then the
    suite's per-task table."""
    from medvision_bm.data.plan_files import plan_filename
    from medvision_bm.data.planner import PLANNER_VERSIONS
    from medvision_bm.data.split_swap import compare_releases, report_lines, task_lines

    for flag, value in (("--old_version", ns.old_version), ("--new_version", ns.new_version)):
        if value not in PLANNER_VERSIONS:
            raise UserError(f"{flag} {value!r} is not an annotation release; give one of {', '.join(PLANNER_VERSIONS)}")
    report = compare_releases(ns.data_dir, ns.old_version, ns.new_version, ns.kind, ns.datasets)
    if not report.datasets and not report.skipped:
        raise UserError(f"no dataset in {ns.data_dir} has a {plan_filename(ns.kind, ns.new_version)}; check "
                        "--data_dir and --new_version")
    print("\n".join(report_lines(report.datasets, report.skipped, ns.old_version, ns.new_version)))
    by_task = task_lines(report.tasks, ns.old_version, ns.new_version)
    if by_task:  # the suite's own table, after upstream's lines and apart from them
        print("\n" + "\n".join(by_task))
    return 0
