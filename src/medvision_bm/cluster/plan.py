"""The submission plan: models x task families -> warm-up, evaluation arrays, finalize and summary jobs.

The plan is built from the runner's own configuration code, so it knows each task's run signature, asks the
status file which tasks are done (those get no job) and, for sample shards, asks the sample store which
index ranges are already answered (those ranges get no array element).
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from medvision_bm.cluster.shell import JobSecrets
from medvision_bm.data.docs import Family
from medvision_bm.data.layout import DataDir, load_tasks_list
from medvision_bm.data.planner import DatasetContract
from medvision_bm.errors import UserError
from medvision_bm.models.registry import (
    GPU_ENVS,
    REGISTRY,
    EnvSpec,
    ModelRecord,
    get_record,
    launcher_args,
    record_env,
)
from medvision_bm.paths import safe_component
from medvision_bm.runner.args import add_estimate_argument, build_parser
from medvision_bm.runner.config import RunConfig, build_config
from medvision_bm.runner.loop import PreparedTask, prepare_task
from medvision_bm.secrets import SafeArgumentParser
from medvision_bm.store.status import StatusFile

#: The families a submission runs, in the order of its jobs (the quick A/D tasks first).
FAMILIES: tuple[Family, ...] = (Family.AD, Family.TL, Family.DETECT)
_FAMILY_ALIASES = {"ad": "AD", "tl": "TL", "detect": "detect", "detection": "detect"}
SHARD_MODES = ("tasks", "samples")
#: Runner flags that `submit` sets itself for every job; users set them through submit's own options.
OWNED_FLAGS = {
    "--tasks_list_json_path": "--tasks_list_dir / --task_tag",
    "--results_dir": "--results_root",
    "--task_status_json_path": "--status_dir",
    "--data_dir": "--data_dir (a submit option, before any `--`)",
    "--shard": "--shards",
    "--skip_update_status": "nothing (the jobs mark the status file; sample shards never do)",
    "--env_setup_only": "nothing (warm-up jobs set environments up)",
    "--skip_env_setup": "nothing (warm-up jobs set environments up; with --python you manage it)",
    "--model": "--models",
    "--batch_phase": "--batch (submit's own: it gives each model and family a submit job and a collect job)",
    "--estimate": "--estimate (a submit option, before any `--`: it prices the whole plan)",
}
#: The kinds of job that ask or score a task's samples (a plan without one has nothing to submit).
WORK_KINDS = ("eval", "finalize", "submit", "collect")
DEP_OK = "afterok"
DEP_ANY = "afterany"


@dataclass(frozen=True)
class ShardSpec:
    count: int = 1
    by: str = "tasks"  # "tasks": tasks-list subsets; "samples": sample-index ranges + a finalize job


@dataclass(frozen=True)
class FamilyPaths:
    family: str
    tag: str
    tasks_list: Path
    results_dir: Path
    status_file: Path


@dataclass
class Element:
    """One array element: one runner command over a tasks-list subset (and maybe a sample-index range)."""

    index: int
    tasks: list[str]
    tasks_file: Path
    sample_indices: str | None = None
    shard: str | None = None
    n_samples: int = 0


@dataclass
class Job:
    name: str  # unique in the plan; the SLURM job name is "mvbm-" + name
    kind: str  # "warmup" | "preflight" | "eval" | "finalize" | "submit" | "collect" | "summary"
    depends: list[tuple[str, str]] = field(default_factory=list)  # (afterok|afterany, job name)
    model: str | None = None  # registry name
    family: str | None = None
    env: str | None = None
    gpus: int = 0
    elements: list[Element] = field(default_factory=list)  # eval arrays only
    tasks: list[str] = field(default_factory=list)  # tasks this job completes (finalize) or covers
    tasks_file: Path | None = None  # finalize, submit, collect: the pending tasks of its (model, family)
    job_id: str | None = None

    @property
    def is_array(self) -> bool:
        return self.kind == "eval"


@dataclass
class TaskInfo:
    count: int  # samples selected
    run_signature: str
    done_at_submit: bool


@dataclass
class ModelFamily:
    """What one model has to do on one task family."""

    model: str
    family: str
    model_name: str  # results folder and status-file key
    flags: list[str]  # runner flags for every command (model flags + pass-through)
    tasks: dict[str, TaskInfo]
    shard: ShardSpec

    @property
    def pending(self) -> list[str]:
        return [t for t, info in self.tasks.items() if not info.done_at_submit]


@dataclass
class SubmitOptions:
    models: list[str]
    families: list[str]
    shards: dict[str, ShardSpec]  # "" -> default for every model
    model_flags: dict[str, list[str]]
    runner_flags: list[str]
    benchmark_dir: Path
    contract: DatasetContract  # data folder, annotation pin, acknowledgement, filters: every job runs with these
    results_root: Path
    tasks_list_dir: Path
    status_dir: Path
    task_tag: str
    submit_dir: Path
    python: str | None  # run `python -m medvision_bm.cli run` in an environment the user manages
    summary_python: str
    partition: str | None = None
    gpus_per_job: int = 0
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    array_parallelism: int | None = None
    sbatch_args: list[str] = field(default_factory=list)
    #: --preflight K: each model and family's evaluations wait (afterok) for the image-dependence check of K samples
    preflight: int | None = None
    #: --batch: API models ask through their provider's batch interface, a submit job then a collect job (afterany)
    batch: bool = False
    collect_time: str | None = None  # --collect_time: the collect jobs' time limit (None: --time)

    @property
    def data_dir(self) -> Path:
        return self.contract.data_dir

    @property
    def planner_version(self) -> str:
        return self.contract.planner_version

    def shard_for(self, model: str) -> ShardSpec:
        return self.shards.get(model, self.shards.get("", ShardSpec()))

    def family_paths(self, family: str) -> FamilyPaths:
        tag = safe_component(self.task_tag.format(family=family), f"--task_tag (for family {family})")
        return FamilyPaths(family, tag, self.tasks_list_dir / f"tasks_{tag}.json", self.results_root / tag,
                           self.status_dir / f"completed_tasks_{tag}.json")

    @property
    def summary_dir(self) -> Path:
        return self.results_root / "summary"


@dataclass
class Plan:
    options: SubmitOptions
    work: list[ModelFamily]
    jobs: list[Job]
    tasks_files: dict[Path, dict[str, int]] = field(default_factory=dict)  # subsets to write before submitting
    secrets: JobSecrets = field(default_factory=JobSecrets)  # values the scripts read from the jobs' environment

    @property
    def empty(self) -> bool:
        return not any(j.kind in WORK_KINDS for j in self.jobs)


# --------------------------------------------------------------------------- parsing submit's own inputs
def parse_families(text: str) -> list[str]:
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        fam = _FAMILY_ALIASES.get(part.lower())
        if fam is None:
            raise UserError(f"--families: unknown task family {part!r}; choose from {','.join(FAMILIES)}")
        if fam not in out:
            out.append(fam)
    if not out:
        raise UserError(f"--families is empty; give some of {','.join(FAMILIES)}")
    return out


def evaluable_models() -> list[str]:
    """`--models all`: every registry model with its own `eval__<name>` entry point."""
    return [name for name, rec in REGISTRY.items() if importlib.util.find_spec(rec.module) is not None]


def parse_models(text: str) -> list[str]:
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        names = evaluable_models() if part == "all" else [get_record(part).name]
        out.extend(n for n in names if n not in out)
    if not out:
        raise UserError("--models is empty; give registry names (`medvision-bm models` lists them) or all")
    return out


def parse_shard_spec(text: str, models: list[str]) -> tuple[str, ShardSpec]:
    """'4', '4:samples', 'qwen2_5_vl=4:samples' -> (model or '', spec)."""
    model, _, value = text.rpartition("=")
    m = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\w+)\s*)?", value)
    if not m or int(m[1]) < 1 or (m[2] and m[2] not in SHARD_MODES):
        raise UserError(f"--shards {text!r}: write N, N:tasks, N:samples or MODEL=N[:mode] with N >= 1")
    if model:
        model = get_record(model.strip()).name
        if model not in models:
            raise UserError(f"--shards {text!r} names model {model!r}, which is not in --models")
    return model, ShardSpec(int(m[1]), m[2] or "tasks")


def parse_model_flags(values: list[str], models: list[str]) -> dict[str, list[str]]:
    """'hf=--model_hf_id /w --device cpu' (repeatable) -> {'hf': [...]}."""
    import shlex

    out: dict[str, list[str]] = {}
    for text in values:
        name, sep, flags = text.partition("=")
        if not sep or not name.strip():
            raise UserError(f"--model_flags {text!r}: write MODEL='--flag value ...'")
        model = get_record(name.strip()).name
        if model not in models:
            raise UserError(f"--model_flags {text!r} names model {model!r}, which is not in --models")
        try:
            out.setdefault(model, []).extend(shlex.split(flags))
        except ValueError as exc:
            raise UserError(f"--model_flags {text!r}: {exc}; quote the flags like a shell command line") from None
    return out


def check_owned_flags(flags: list[str], where: str) -> None:
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in OWNED_FLAGS:
            raise UserError(f"{where}: {name} is set by `medvision-bm submit` for every job; "
                            f"use {OWNED_FLAGS[name]} instead")


# --------------------------------------------------------------------------- building the plan
def check_record(record: ModelRecord, gpus_per_job: int = 0) -> EnvSpec:
    """The environment the jobs of ``record`` run in. A record with a GPU environment beside its CPU one (``hf``)
    takes the GPU one when the jobs get GPUs (``--gpus_per_job``), whatever the submitting machine has: a login node
    without a GPU must not plan CPU jobs for a GPU cluster."""
    if record.name in GPU_ENVS:
        return record_env(record, gpu=gpus_per_job > 0)
    env = getattr(record, "env", None)
    if not isinstance(env, EnvSpec) or not env.name:
        raise UserError(f"model {record.name!r} has no environment spec, so no job can set its environment up; "
                        "give its record env=EnvSpec(...) in src/medvision_bm/models/registry.py")
    if not record.launcher:
        raise UserError(f"model {record.name!r} has no launcher name; give its record launcher=... in "
                        "src/medvision_bm/models/registry.py")
    return env


def launcher_path(opts: SubmitOptions, record: ModelRecord, family: str) -> Path:
    return opts.benchmark_dir / "script" / f"benchmark-{family}" / f"{record.launcher}.sh"


class _FlagsParser(SafeArgumentParser):
    """The runner's parser as submit reads a model's flags: an error raises a UserError naming the model."""

    def __init__(self, record_name: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.record_name = record_name

    def error(self, message: str) -> NoReturn:
        raise UserError(f"runner flags for {self.record_name}: {message} "
                        f"(`medvision-bm run --model {self.record_name} --help` lists them)")


def run_flags(opts: SubmitOptions, model: str, record: ModelRecord) -> list[str]:
    """The flags a model's runs get: jobs run through the launcher add its own first (launcher_flags,
    --sample_limit), then the model's --model_flags, then the flags for every model."""
    own = launcher_args(record) if opts.python is None else []
    return [*own, *opts.model_flags.get(model, []), *opts.runner_flags]


def run_configs(opts: SubmitOptions) -> Iterator[tuple[str, str, RunConfig]]:
    """(model, family, RunConfig) of every run the plan would make, as ``build_plan`` configures them (nothing is
    written): for what needs each run's selection without a submission (``submit --estimate``)."""
    check_owned_flags(opts.runner_flags, "runner flags")
    for model, flags in opts.model_flags.items():
        check_owned_flags(flags, f"--model_flags {model}")
    for m in opts.models:
        rec = get_record(m)
        for f in opts.families:
            fp = opts.family_paths(f)
            if not fp.tasks_list.is_file():
                raise UserError(f"tasks list {fp.tasks_list} of family {f} does not exist; check --task_tag, "
                                "--tasks_list_dir and --benchmark_dir")
            yield m, f, _runner_config(rec, run_flags(opts, m, rec), fp, opts)


def _runner_config(record: ModelRecord, flags: list[str], fp: FamilyPaths, opts: SubmitOptions) -> RunConfig:
    parser = build_parser(record, f"medvision-bm submit ({record.name})",
                          functools.partial(_FlagsParser, record.name))
    if record.is_api:  # the flags `run` takes for an API record: --max_cost, --batch_poll, ...
        add_estimate_argument(parser)
    argv = [*flags, "--tasks_list_json_path", str(fp.tasks_list), "--data_dir", str(opts.data_dir),
            "--results_dir", str(fp.results_dir), "--task_status_json_path", str(fp.status_file)]
    ns = parser.parse_args(argv)
    try:
        return build_config(ns, record, argv)
    except UserError as exc:
        raise UserError(f"{exc} (in `submit`, flags for one model go in --model_flags {record.name}='...')") from None


def _ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """Split 0..n-1 into `parts` contiguous ranges whose sizes differ by at most one."""
    if n <= 0:
        return []
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, start = [], 0
    for k in range(parts):
        size = base + (k < extra)
        out.append((start, start + size - 1))
        start += size
    return out


def _index_text(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


class _TasksFiles:
    """Writes the tasks-list subsets a plan refers to (under <submit_dir>/tasks/)."""

    def __init__(self, folder: Path, counts: dict[str, dict[str, int]]) -> None:
        self.folder = folder
        self.counts = counts  # family -> the family tasks list
        self.files: dict[Path, dict[str, int]] = {}

    def add(self, name: str, family: str, tasks: list[str]) -> Path:
        path = self.folder / f"{_safe(name)}.json"
        self.files[path] = {t: self.counts[family][t] for t in tasks}
        return path


class StatusSnapshot(StatusFile):
    """The runner's status file read once: is_done() then answers every task from that one read."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self.data = super().read()

    def read(self) -> dict[str, dict[str, Any]]:
        return self.data


def build_plan(opts: SubmitOptions) -> Plan:
    check_owned_flags(opts.runner_flags, "runner flags")
    for model, flags in opts.model_flags.items():
        check_owned_flags(flags, f"--model_flags {model}")
    records = {m: get_record(m) for m in opts.models}
    if opts.batch:
        check_batch_models(opts, records)
    envs = {m: check_record(r, opts.gpus_per_job) for m, r in records.items()}
    paths = {f: opts.family_paths(f) for f in opts.families}
    _check_inputs(opts, records, paths)
    lists = {f: load_tasks_list(fp.tasks_list) for f, fp in paths.items()}
    files = _TasksFiles(opts.submit_dir / "tasks", lists)
    data = DataDir(opts.contract)
    work: list[ModelFamily] = []
    jobs: list[Job] = []
    warmups: dict[str, Job] = {}

    for m, rec in records.items():
        flags = run_flags(opts, m, rec)
        spec = opts.shard_for(m)
        for f in opts.families:
            fp = paths[f]
            cfg = _runner_config(rec, flags, fp, opts)
            if opts.batch:
                _check_batch_run(m, cfg)
            if spec.by == "samples" and cfg.sample_indices is not None:
                raise UserError(f"{m}: --sample_indices cannot be combined with sample shards; "
                                "use --shards N:tasks or drop --sample_indices")
            status = StatusSnapshot(fp.status_file)
            preps = {t: prepare_task(cfg, data, t) for t in cfg.tasks}
            tasks = {t: TaskInfo(len(p.samples), p.run_sig,  # --force: plan every task, as the runner would
                                 not cfg.force and status.is_done(cfg.model_name, t, p.run_sig)[0])
                     for t, p in preps.items()}
            mf = ModelFamily(m, f, cfg.model_name, flags, tasks, spec)
            clash = next((w.model for w in work if w.family == f and w.model_name == mf.model_name), None)
            if clash is not None:
                raise UserError(f"models {clash} and {m} would both write results and status as "
                                f"{mf.model_name!r}; give each its own --model_name through --model_flags")
            work.append(mf)
            pending = mf.pending
            if not pending:
                continue
            env = envs[m]
            deps: list[tuple[str, str]] = []
            if opts.python is None:
                if env.name not in warmups:
                    warmups[env.name] = Job(f"warmup-{_safe(env.name)}", "warmup", model=m, family=f, env=env.name)
                deps.append((DEP_OK, warmups[env.name].name))
            jobs += _work_jobs(opts, mf, preps, files, deps, env, cfg.keep_failed)

    ordered = list(warmups.values()) + jobs
    if jobs:
        summary_deps = [(DEP_ANY, j.name) for j in (*warmups.values(), *jobs)]
        ordered.append(Job("summary", "summary", summary_deps))
    return Plan(opts, work, ordered, files.files)


def _check_inputs(opts: SubmitOptions, records: dict[str, ModelRecord], paths: dict[str, FamilyPaths]) -> None:
    """Every family's tasks list and (without --python) every model's launcher exist."""
    for f, fp in paths.items():
        if not fp.tasks_list.is_file():
            raise UserError(f"tasks list {fp.tasks_list} of family {f} does not exist; check --task_tag, "
                            "--tasks_list_dir and --benchmark_dir")
    if opts.python is None:
        for m, rec in records.items():
            for f in opts.families:
                path = launcher_path(opts, rec, f)
                if not path.is_file():
                    raise UserError(f"launcher {path} for model {m} does not exist; check --benchmark_dir "
                                    f"({opts.benchmark_dir}) or run the entry points directly with --python PY")


def _work_jobs(opts: SubmitOptions, mf: ModelFamily, preps: dict[str, PreparedTask], files: _TasksFiles,
               deps: list[tuple[str, str]], env: EnvSpec, keep_failed: bool) -> list[Job]:
    """The jobs of one model's pending tasks of one family, after its warm-up: the preflight, then the evaluation
    array (and for sample shards the finalize job), or with --batch the submit and collect jobs."""
    m, f, pending = mf.model, mf.family, mf.pending
    gpus = opts.gpus_per_job if env.gpu else 0
    base = f"{_safe(m)}-{f}"
    deps = list(deps)
    jobs: list[Job] = []
    if opts.preflight:  # the check of the family's first pending task: a flagged model runs nothing more
        pre = Job(f"preflight-{base}", "preflight", list(deps), m, f, env.name, gpus, tasks=pending[:1],
                  tasks_file=files.add(f"{base}-preflight", f, pending[:1]))
        jobs.append(pre)
        deps.append((DEP_OK, pre.name))
    if opts.batch:  # the provider runs the batch: one short job submits it, the next collects it
        return jobs + _batch_pair(deps, m, f, env.name, base, files.add(f"{base}-batch", f, pending), pending)
    elements = _elements(mf, pending, preps, files, base, keep_failed)
    eval_job = None
    if elements:
        eval_job = Job(f"eval-{base}", "eval", list(deps), m, f, env.name, gpus, elements, tasks=list(pending))
        jobs.append(eval_job)
    if mf.shard.by == "samples":
        fin_deps = list(deps) + ([(DEP_ANY, eval_job.name)] if eval_job else [])
        jobs.append(Job(f"finalize-{base}", "finalize", fin_deps, m, f, env.name, gpus, tasks=list(pending),
                        tasks_file=files.add(f"{base}-pending", f, pending)))
    return jobs


def check_batch_models(opts: SubmitOptions, records: dict[str, ModelRecord]) -> None:
    """``--batch``: every model an API record, unsharded (the provider runs the batch)."""
    others = [m for m, r in records.items() if not r.is_api]
    if others:
        what = "is not an API record" if len(others) == 1 else "are not API records"
        raise UserError(f"--batch: {', '.join(others)} {what} (batches are the providers' interface); submit "
                        f"{'it' if len(others) == 1 else 'them'} without --batch")
    sharded = [m for m in records if opts.shard_for(m).count > 1]
    if sharded:
        raise UserError(f"--batch: --shards for {', '.join(sharded)}: a batch run is one submit job and one collect "
                        "job per model and family (the provider runs the batch); drop --shards")


def _check_batch_run(model: str, cfg: RunConfig) -> None:
    """What a pair of batch jobs cannot run is refused before anything is written: a provider with no batch
    interface (OpenRouter), and --max_cost (its rounds need one run that submits and collects)."""
    from medvision_bm.models.api import BATCH_PROVIDERS
    from medvision_bm.runner.estimate import provider_of

    if cfg.max_cost is not None:
        raise UserError(f"--batch with --max_cost ({model}): the budget submits in rounds as the answers land, so one "
                        "run must submit and collect; drop --max_cost, or submit without --batch and give the runs "
                        "`-- --batch --max_cost USD`")

    provider = provider_of(cfg)[0]
    if provider not in BATCH_PROVIDERS:
        raise UserError(f"--batch: {model} asks through {provider}, which has no batch interface this suite drives "
                        f"({', '.join(BATCH_PROVIDERS)} have); submit it without --batch")


def _batch_pair(deps: list[tuple[str, str]], model: str, family: str, env: str, base: str, tasks_file: Path,
                pending: list[str]) -> list[Job]:
    """The submit job (builds and submits the batches, records them in the store, ends) and the collect job after
    it (afterany: what a failed submit job did submit is still collected), both over the family's pending tasks."""
    sub = Job(f"batch-submit-{base}", "submit", list(deps), model, family, env, 0, tasks=list(pending),
              tasks_file=tasks_file)
    col = Job(f"batch-collect-{base}", "collect", [*deps, (DEP_ANY, sub.name)], model, family, env, 0,
              tasks=list(pending), tasks_file=tasks_file)
    return [sub, col]


def _elements(mf: ModelFamily, pending: list[str], preps: dict[str, PreparedTask], files: _TasksFiles,
              base: str, keep_failed: bool) -> list[Element]:
    spec = mf.shard
    out: list[Element] = []
    if spec.by == "tasks":
        parts = min(spec.count, len(pending))
        loads = [0] * parts
        groups: list[list[str]] = [[] for _ in range(parts)]
        for t in sorted(pending, key=lambda t: -mf.tasks[t].count):  # largest first onto the lightest shard
            k = loads.index(min(loads))
            groups[k].append(t)
            loads[k] += mf.tasks[t].count
        for k, group in enumerate(groups):
            group.sort(key=pending.index)
            name = base if parts == 1 else f"{base}-{k}"
            out.append(Element(k, group, files.add(name, mf.family, group), n_samples=loads[k]))
        return out
    # samples: tasks with the same selection size share index ranges (one runner command per element)
    by_size: dict[int, list[str]] = {}
    for t in pending:
        by_size.setdefault(mf.tasks[t].count, []).append(t)
    for g, (n, group) in enumerate(by_size.items()):
        todo = {t: _todo_positions(preps[t], keep_failed) for t in group}
        tasks_file = files.add(f"{base}-n{n}", mf.family, group)
        for a, b in _ranges(n, spec.count):
            if not any(a <= i <= b for t in group for i in todo[t]):
                continue  # the runner would ask nothing in this range (all stored already)
            out.append(Element(len(out), group, tasks_file, _index_text(a, b), f"g{g}s{a}", (b - a + 1) * len(group)))
    return out


def _todo_positions(prep: PreparedTask, keep_failed: bool) -> list[int]:
    """Positions (in the task's selection) of the samples the runner would still ask (its own to-do)."""
    return prep.samples.todo(prep.store.read(), keep_failed)
