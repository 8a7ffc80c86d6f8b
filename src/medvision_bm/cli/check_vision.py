"""`medvision-bm check-vision --model NAME ...`: whether a model's answers depend on the image it is shown.

K samples of each task are asked with the real slice, a blank one and a shuffled one
(``runner/vision_check.py`` says how each is made and how the verdict is reached); one line per task says whether
the answers follow the image, with the numbers. Exit 0 when every task's answers depend on the image, 4 when some
do not or cannot be read, 3 when requests failed (rerun to ask them again), 2 for a user mistake. The answers are
stored under ``<results_dir>/.check-vision/``, never in a run's store.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from medvision_bm.cli.model_front import CHECK_FLAGGED_EXIT, model_command, set_up_environment
from medvision_bm.errors import UserError
from medvision_bm.models.registry import get_record
from medvision_bm.runner.args import DEFAULT_CHECK_K, build_parser, positive_int

if TYPE_CHECKING:
    from medvision_bm.cli.model_front import BackendFactory
    from medvision_bm.models.registry import ModelRecord
    from medvision_bm.runner.config import RunConfig
    from medvision_bm.runner.vision_check import VisionCheck, VisionChecker


def build_check_parser(record: ModelRecord, prog: str) -> argparse.ArgumentParser:
    """The run's flags (model, data, generation) and the check's own."""
    p = build_parser(record, prog)
    p.description = (f"Ask K samples of each task of {record.display_name} with the real slice, a blank slice and "
                     "another sample's slice; say per task whether the answers depend on the image.")
    add_check_arguments(p)
    return p


def add_check_arguments(p: argparse.ArgumentParser) -> None:
    """The check's own flags."""
    g = p.add_argument_group("image check")
    g.add_argument("-K", "--check_samples", dest="check_samples", type=positive_int, default=DEFAULT_CHECK_K,
                   metavar="N", help="samples asked per task, spread evenly over it (or over --sample_indices)")
    g.add_argument("--tasks", default=None, metavar="TASK[,TASK...]",
                   help="tasks to check, comma-separated (instead of --tasks_list_json_path)")


def _tasks(text: str) -> dict[str, int]:
    from medvision_bm.data.layout import parse_task_name

    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UserError("--tasks is empty; name tasks like PhantomCT_BoxCoordinate_Task01_Axial, comma-separated")
    for name in names:
        parse_task_name(name)
    return dict.fromkeys(names, 0)


def print_check(result: VisionCheck) -> None:
    print(result.line(), flush=True)


def run_checks(cfg: RunConfig, backend_factory: BackendFactory, k: int, tasks: Sequence[str],
               close: bool) -> tuple[list[VisionCheck], VisionChecker]:
    """The checks of ``tasks`` (each line printed as it is made) and the checker that made them."""
    from medvision_bm.data.catalogue import check_tasks_at_release
    from medvision_bm.runner.harness import quiet_environment
    from medvision_bm.runner.vision_check import VisionChecker

    quiet_environment()
    check_tasks_at_release(list(tasks), cfg.contract.planner_version, str(cfg.tasks_list_path))
    checker = VisionChecker(cfg, backend_factory, k)
    return checker.run(tasks, on_check=print_check, close=close), checker


def preflight(cfg: RunConfig, backend_factory: BackendFactory, k: int, prog: str) -> bool:
    """A run's ``--preflight``: the check of the first task of each family; False (and the reason on stderr) when
    the run must not go on. The backend stays loaded for the run when it goes on."""
    from medvision_bm.runner.vision_check import first_task_per_family

    tasks = first_task_per_family(list(cfg.tasks))
    print(f"{prog}: preflight: asking {k} samples of {', '.join(tasks)} with the real, a blank and a shuffled slice",
          file=sys.stderr)
    results, checker = run_checks(cfg, backend_factory, k, tasks, close=False)
    flagged = [r for r in results if r.flagged]
    if not flagged:
        return True
    checker.close()
    print(f"{prog}: stopped by the preflight: {_flagged_text(flagged)}; nothing was evaluated (answers of the check "
          f"in {cfg.results_dir / '.check-vision' / cfg.model_name})", file=sys.stderr)
    return False


def _flagged_text(flagged: Sequence[VisionCheck]) -> str:
    return "; ".join(f"{r.task}: {r.verdict}" for r in flagged)


def _check(model: str, argv: list[str], prog: str) -> int:
    record = get_record(model)
    ns = build_check_parser(record, prog).parse_args(argv)
    if set_up_environment(record, ns, prog):
        return 0
    if bool(ns.tasks) == bool(ns.tasks_list_json_path):
        raise UserError("name the tasks to check with --tasks T1,T2 or --tasks_list_json_path FILE (one of them)")
    ns.skip_update_status = True  # a check marks nothing done
    from medvision_bm.runner.backends import build_backend
    from medvision_bm.runner.config import build_config

    cfg = build_config(ns, record, [prog, *argv], tasks=_tasks(ns.tasks) if ns.tasks else None)
    results, _ = run_checks(cfg, build_backend, ns.check_samples, list(cfg.tasks), close=True)
    print(f"check answers: {cfg.results_dir / '.check-vision' / cfg.model_name}")
    flagged = [r for r in results if r.flagged and r.verdict != "incomplete"]
    if flagged:
        print(f"{prog}: {len(flagged)} of {len(results)} task(s) not shown to depend on the image: "
              f"{_flagged_text(flagged)}", file=sys.stderr)
        return CHECK_FLAGGED_EXIT
    incomplete = [r for r in results if r.verdict == "incomplete"]
    if incomplete:
        print(f"{prog}: incomplete: {len(incomplete)} task(s) have requests without an answer; rerun the same "
              "command to ask them again", file=sys.stderr)
        return 3
    return 0


def cli_main(argv: Sequence[str]) -> int:
    """`medvision-bm check-vision --model NAME [flags]`."""
    return model_command(
        argv, "check-vision",
        "usage: medvision-bm check-vision --model NAME (--tasks T1,T2 | --tasks_list_json_path FILE) [-K N] [flags]\n\n"
        "Ask K samples of each task with the real slice, a blank slice and another sample's slice, and say\n"
        "per task whether the answers depend on the image; `medvision-bm check-vision --model NAME --help`\n"
        "lists the model's flags.", _check)
