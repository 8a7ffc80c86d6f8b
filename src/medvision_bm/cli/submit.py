"""`medvision-bm submit`: evaluate models x task families as SLURM jobs, or locally with --local N.

Unknown flags, and everything after `--`, are runner flags passed to every evaluation command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from medvision_bm.cli import run_handler
from medvision_bm.cluster import slurm
from medvision_bm.cluster.local import run_local, summarize_runs
from medvision_bm.cluster.manifest import write_manifest
from medvision_bm.cluster.plan import (
    FAMILIES,
    Plan,
    SubmitOptions,
    build_plan,
    parse_families,
    parse_model_flags,
    parse_models,
    parse_shard_spec,
    run_configs,
)
from medvision_bm.cluster.scripts import describe_plan, render_script
from medvision_bm.cluster.status_view import collect
from medvision_bm.cluster.submission import active_submissions, new_submit_dir, submit_jobs, write_files
from medvision_bm.data.planner import DatasetContract
from medvision_bm.envs.setup import repo_root
from medvision_bm.errors import IncompleteRun, UserError
from medvision_bm.paths import safe_component
from medvision_bm.runner.args import DEFAULT_CHECK_K
from medvision_bm.secrets import redact_message

EPILOG = """\
examples:
  medvision-bm submit --models qwen2_5_vl,gemma3 --families AD,TL,detect --data_dir /data/MedVision \\
      --partition gpu --gpus-per-job 1 --time 08:00:00 --array-parallelism 4 --shards 4
  medvision-bm submit --models oracle,mean --families AD --data_dir D --dry-run
  medvision-bm submit --models hf --model_flags 'hf=--model_hf_id /w/tiny --device cpu' --families TL \\
      --data_dir D --local 2 -- --sample_limit 8

--shards N[:tasks|:samples] or MODEL=N[:mode] (repeatable): split each model's pending tasks of a family over
N array elements, by tasks (subsets of the tasks list; the default) or by samples (index ranges of each task,
merged and scored by a finalize job). Resubmitting the same command runs only what the status file does not
list as done (and, for sample shards, only index ranges with unanswered samples).
"""


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= minimum."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {minimum}")
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        raise UserError(f"{redact_message(message)} (`medvision-bm submit --help` lists the options)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="medvision-bm submit", allow_abbrev=False, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Submit evaluations as SLURM jobs: one environment warm-up job per model environment, "
                            "evaluation job arrays (afterok), finalize jobs for sample shards and one summary job "
                            "(afterany). Writes plain sbatch scripts to a submission folder.")
    w = p.add_argument_group("what to evaluate")
    w.add_argument("--models", required=True, help="registry names, comma-separated, or all")
    w.add_argument("--families", default=",".join(FAMILIES), help=f"task families (default: {','.join(FAMILIES)})")
    w.add_argument("--shards", action="append", default=[], metavar="SPEC",
                   help="N[:tasks|:samples] or MODEL=N[:mode]; repeatable (default 1)")
    w.add_argument("--model_flags", "--model-flags", action="append", default=[], metavar="MODEL='FLAGS'",
                   help="runner flags for one model only, e.g. hf='--model_hf_id /w --device cpu'; repeatable")
    d = p.add_argument_group("paths")
    d.add_argument("--data_dir", "--data-dir", default=None, help="data folder (or MedVision_DATA_DIR)")
    d.add_argument("--benchmark_dir", "--benchmark-dir", default=None,
                   help="checkout with script/ and tasks_list/ (default: the current folder if it has script/, "
                        "else the checkout this package runs from)")
    d.add_argument("--task_tag", "--task-tag", default="MedVision-Phantom-{family}",
                   help="tag of each family's tasks list, results and status file (default: %(default)s)")
    d.add_argument("--tasks_list_dir", "--tasks-list-dir", default=None,
                   help="folder of tasks_<tag>.json (default: <benchmark_dir>/tasks_list)")
    d.add_argument("--results_root", "--results-root", default=None,
                   help="results go to <results_root>/<tag> (default: <benchmark_dir>/Results)")
    d.add_argument("--status_dir", "--status-dir", default=None,
                   help="status files completed_tasks_<tag>.json (default: <benchmark_dir>/completed_tasks)")
    d.add_argument("--submit_dir", "--submit-dir", default=None,
                   help="where scripts, logs and plan.json go (default: <results_root>/submissions/<time>)")
    d.add_argument("--python", default=None, metavar="PY",
                   help="run `PY -m medvision_bm.cli run` in an environment you manage instead of the launchers "
                        "(no warm-up job; --skip_env_setup)")
    r = p.add_argument_group("SLURM resources")
    r.add_argument("--partition", default=None)
    r.add_argument("--gpus-per-job", "--gpus_per_job", dest="gpus_per_job", type=_int_at_least(0), default=0,
                   help="GPUs per evaluation job (--gres=gpu:N; only for models whose environment needs GPUs)")
    r.add_argument("--cpus-per-task", "--cpus_per_task", dest="cpus_per_task", type=_int_at_least(1), default=None)
    r.add_argument("--mem", default=None, help="memory per job, e.g. 64G")
    r.add_argument("--time", default=None, help="time limit per job, e.g. 04:00:00")
    r.add_argument("--collect-time", "--collect_time", dest="collect_time", default=None, metavar="TIME",
                   help="with --batch: the collect jobs' time limit (default: --time); a provider may take 24 h")
    r.add_argument("--account", default=None)
    r.add_argument("--qos", default=None)
    r.add_argument("--array-parallelism", "--array_parallelism", dest="array_parallelism", type=_int_at_least(1),
                   default=None, metavar="K", help="at most K elements of one array run at once (%%K)")
    r.add_argument("--sbatch_arg", "--sbatch-arg", action="append", default=[], metavar="ARG",
                   help="extra #SBATCH line for every job, e.g. --sbatch_arg=--constraint=a100; repeatable")
    _add_mode_arguments(p.add_argument_group("mode"))
    return p


def _add_mode_arguments(m: argparse._ArgumentGroup) -> None:
    """How the plan runs: the preflight, batches, a dry run, an estimate or local workers."""
    m.add_argument("--preflight", nargs="?", type=_int_at_least(1), const=DEFAULT_CHECK_K, default=None, metavar="K",
                   help="before each model and family's evaluations, a job asks K samples (default "
                        f"{DEFAULT_CHECK_K}) of its first pending task with the real, a blank and a shuffled slice "
                        "(`medvision-bm check-vision`); the evaluations wait for it (afterok), so a model whose "
                        "answers do not depend on the image runs nothing more")
    m.add_argument("--batch", action="store_true",
                   help="API models only: ask through each provider's batch interface at its batch price, as a pair "
                        "of jobs per model and family: a short submit job (`run --batch --batch_phase submit`: the "
                        "batches submitted and recorded in the stores) and a collect job after it (afterany; "
                        "`--batch_phase collect`) that stores the answers as the batches end; a collect job out of "
                        "time leaves them open, and resubmitting the same command re-attaches to them")
    g = m.add_mutually_exclusive_group()
    g.add_argument("--dry-run", "--dry_run", dest="dry_run", action="store_true",
                   help="write and print the scripts and the dependency graph; submit nothing")
    g.add_argument("--estimate", action="store_true",
                   help="print what each API model's runs would cost (per family and task: samples still to ask, "
                        "input and output tokens, the price live and batched, as `run --estimate`), then the "
                        "total; write and submit nothing")
    g.add_argument("--local", type=_int_at_least(1), default=None, metavar="N",
                   help="run the plan on this machine with N worker processes instead of SLURM")


def _split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _options(ns: argparse.Namespace, runner_flags: list[str]) -> SubmitOptions:
    models = parse_models(ns.models)
    families = parse_families(ns.families)
    shards = dict(parse_shard_spec(s, models) for s in ns.shards)
    bench = _benchmark_dir(ns.benchmark_dir)
    if not bench.is_dir():
        raise UserError(f"--benchmark_dir {ns.benchmark_dir} is not a folder")
    contract = DatasetContract.resolve(ns.data_dir)
    if not contract.data_dir.is_dir():
        raise UserError(f"data folder {contract.data_dir} does not exist; pass --data_dir (for a try-out, "
                        "`medvision-bm data make-phantom --data_dir DIR` writes one)")
    try:
        ns.task_tag.format(family="AD")
    except (KeyError, IndexError, ValueError):
        raise UserError(f"--task_tag {ns.task_tag!r}: the only placeholder is {{family}}") from None
    if "{family}" not in ns.task_tag and len(families) > 1:
        raise UserError(f"--task_tag {ns.task_tag!r} has no {{family}} placeholder, so families would share one "
                        "tasks list and status file; add {family}")

    for fam in families:
        safe_component(ns.task_tag.format(family=fam), "--task_tag")
    _check_script_values(ns, runner_flags)
    results_root = _path(ns.results_root, bench / "Results")
    submit_dir = Path(ns.submit_dir).expanduser().resolve() if ns.submit_dir else new_submit_dir(results_root)
    python = ns.python
    if python is not None:
        import shutil

        found = shutil.which(python)
        if found is None:
            raise UserError(f"--python {python}: no such executable")
        python = str(Path(found).absolute())
    return SubmitOptions(
        models=models, families=families, shards=shards, model_flags=parse_model_flags(ns.model_flags, models),
        runner_flags=runner_flags, benchmark_dir=bench, contract=contract,
        results_root=results_root, tasks_list_dir=_path(ns.tasks_list_dir, bench / "tasks_list"),
        status_dir=_path(ns.status_dir, bench / "completed_tasks"), task_tag=ns.task_tag, submit_dir=submit_dir,
        python=python, summary_python=python or sys.executable, partition=ns.partition, gpus_per_job=ns.gpus_per_job,
        cpus_per_task=ns.cpus_per_task, mem=ns.mem, time=ns.time, account=ns.account, qos=ns.qos,
        array_parallelism=ns.array_parallelism, sbatch_args=list(ns.sbatch_arg), preflight=ns.preflight,
        batch=ns.batch, collect_time=ns.collect_time)


def _check_script_values(ns: argparse.Namespace, runner_flags: list[str]) -> None:
    """Every value that reaches a job script, through cluster/shell.py's rule, before anything is planned."""
    from medvision_bm.cluster.scripts import LAUNCHER_SETTINGS
    from medvision_bm.cluster.shell import one_line, sbatch_option

    if ns.collect_time is not None and not ns.batch:
        raise UserError("--collect_time is the time limit of --batch's collect jobs; give --batch too (or drop it)")
    for flag in ("partition", "account", "qos", "time", "collect_time", "mem", "results_root", "submit_dir", "status_dir",
                 "tasks_list_dir", "benchmark_dir", "data_dir", "python", "task_tag", "models", "families"):
        value = getattr(ns, flag, None)
        if value is not None:
            one_line(value, f"--{flag}")
    for arg in ns.sbatch_arg:
        sbatch_option(arg)
    for text in ns.model_flags:
        one_line(text, "--model_flags")
    for arg in runner_flags:
        one_line(arg, "runner flag")
    for name in LAUNCHER_SETTINGS:
        if os.environ.get(name):
            one_line(os.environ[name], f"the environment variable {name}")
    for name in ("MedVision_DATA_DIR", "MedVision_PLANNER_VERSION", "MedVision_ACK_RELEASE"):
        if os.environ.get(name):
            one_line(os.environ[name], f"the environment variable {name}")


def _benchmark_dir(value: str | None) -> Path:
    if value:
        return Path(value).expanduser().resolve()
    here = Path.cwd()
    if (here / "script").is_dir():
        return here

    return repo_root() or here


def default_results_root() -> Path:
    """Where submit puts results (and submissions/) without --results_root; status looks there too."""
    return _benchmark_dir(None) / "Results"


def _warn_active(results_root: Path) -> None:
    """Name earlier submissions under the same results root whose jobs are still queued or running."""
    for folder, n in active_submissions(results_root):
        print(f"warning: submission {folder} still has {n} job(s) queued or running; tasks they have not "
              "finished yet are planned again (wait, or scancel them first)", file=sys.stderr)


def _path(value: str | None, default: Path) -> Path:
    return Path(value).expanduser().resolve() if value else default


def _submit(argv: list[str]) -> int:
    own, passthrough = _split_passthrough(argv)
    ns, unknown = build_parser().parse_known_args(own)
    runner_flags = [*unknown, *passthrough]
    if ns.estimate:
        return _estimate(_options(ns, runner_flags))
    if not ns.dry_run and ns.local is None:
        slurm.require_sbatch()  # before any planning work: the commonest mistake, found at once
        if ns.partition:
            slurm.check_partition(ns.partition)
    opts = _options(ns, runner_flags)
    plan = build_plan(opts)
    if plan.empty:
        print(describe_plan(plan), end="")
        return 0
    write_files(plan)
    if ns.dry_run:
        for job in plan.jobs:
            print(f"===== {job.name}.sbatch =====")
            print(render_script(plan, job))
        print(describe_plan(plan), end="")
        write_manifest(plan, "dry-run")
        print("dry run: nothing submitted; `bash submit.sh` in the submission folder submits these scripts")
        return 0
    if ns.local is not None:
        return _run_local(plan, ns.local)
    _warn_active(opts.results_root)
    submit_jobs(plan)
    write_manifest(plan, "slurm")
    print(describe_plan(plan), end="")
    print(f"submitted {len(plan.jobs)} jobs; follow them with: medvision-bm status {opts.submit_dir}")
    return 0


def _estimate(opts: SubmitOptions) -> int:
    """`submit --estimate`: every API model's runs priced as `run --estimate` prices one; the others named."""
    from medvision_bm.cli.run import print_estimate
    from medvision_bm.data.layout import DataDir
    from medvision_bm.runner.estimate import estimate_run

    data = DataDir(opts.contract)
    totals: dict[str, list[float | None]] = {}
    for model, family, cfg in run_configs(opts):
        if not cfg.record.is_api:
            print(f"== {model} ({family}): a {cfg.record.backend} record; its cost is compute time, not tokens")
            continue
        print(f"== {model} ({family})")
        est = estimate_run(cfg, data)
        print_estimate(est, model)
        if est.price is not None:  # per model, live and batched: a price missing in one family leaves it unknown
            t = totals.setdefault(model, [0.0, 0.0])
            for i, price in enumerate((est.price.live, est.price.batch)):
                cost, so_far = est.cost(price, bound=True), t[i]
                t[i] = None if cost is None or so_far is None else so_far + cost
    for model, (live, batch) in totals.items():
        shown = [f"${v:,.2f}" if v is not None else "unknown" for v in (live, batch)]
        print(f"total {model}: at most {shown[0]} live, {shown[1]} batched (every answer at the max tokens)")
    return 0


def _run_local(plan: Plan, workers: int) -> int:
    write_manifest(plan, "local")
    print(describe_plan(plan), end="", flush=True)
    print(f"running locally with {workers} worker(s); logs in {plan.options.submit_dir / 'logs'}", flush=True)
    runs = run_local(plan, workers, log=lambda line: print(line, flush=True))
    failed = summarize_runs(runs)
    rows = collect(plan.options.submit_dir)
    not_done = [r for r in rows if r.state != "done"]
    for line in failed:
        print(f"  {line}", file=sys.stderr)
    if not_done:
        raise IncompleteRun(f"{len(not_done)} of {len(rows)} tasks are not done "
                            f"(`medvision-bm status {plan.options.submit_dir}`); rerun the same command to retry them")
    summary = runs.get("summary")
    if summary is not None and not summary.ok:
        print(f"medvision-bm submit: all {len(rows)} tasks done, but the summary job failed; see "
              f"{plan.options.submit_dir / 'logs' / 'summary_local.out'}", file=sys.stderr)
        return 1
    print(f"all {len(rows)} tasks done")
    return 0


def cli_main(argv: Sequence[str]) -> int:
    return run_handler(lambda: _submit(list(argv)), prog="medvision-bm submit")
