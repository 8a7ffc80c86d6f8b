"""Rendering a plan: plain sbatch scripts, the submit.sh that chains them, and the dependency graph as text.

Each script is self-contained (absolute paths, resource lines as #SBATCH comments) so users can read it and
submit it again by hand; only dependencies are given on the sbatch command line, as job ids exist only then.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from medvision_bm.cluster.plan import DEP_ANY, DEP_OK, Element, Job, Plan, launcher_path
from medvision_bm.cluster.shell import SECRET_VAR, directive_value, one_line, sbatch_option, sh
from medvision_bm.data.planner import ENV_ACK, ENV_DISABLE_FILTERING, ENV_PLANNER
from medvision_bm.models.registry import GPU_ENVS, HF_ENV_VAR, get_record

JOB_PREFIX = "mvbm-"
#: Launcher settings taken from the submitting shell into the scripts, so a script reruns the same way later.
LAUNCHER_SETTINGS = ("ENVS_ROOT", "ENV_TOOL", "INSTALL_METHOD", "TORCH_FIND_LINKS", "TORCH_INDEX_URL",
                     "MEDVISION_BOOT_PYTHON")
_KIND_TEXT = {"warmup": "env warm-up", "preflight": "image check", "eval": "evaluation", "finalize": "finalize",
              "submit": "batch submit", "collect": "batch collect", "summary": "summary"}


def q(value: str | os.PathLike[str]) -> str:
    """One shell word of a job script (cluster/shell.py: one line, quoted)."""
    return sh(value)


def slurm_name(job: Job) -> str:
    return JOB_PREFIX + job.name


def script_path(plan: Plan, job: Job) -> Path:
    return plan.options.submit_dir / "jobs" / f"{job.name}.sbatch"


def log_pattern(plan: Plan, job: Job) -> Path:
    return plan.options.submit_dir / "logs" / ("%x_%A_%a.out" if job.is_array else "%x_%j.out")


def array_spec(plan: Plan, job: Job) -> str:
    spec = f"0-{len(job.elements) - 1}" if len(job.elements) > 1 else "0"
    k = plan.options.array_parallelism
    return f"{spec}%{k}" if k else spec


def sbatch_lines(plan: Plan, job: Job) -> list[str]:
    o = plan.options
    lines = [f"--job-name={slurm_name(job)}",
             f"--output={directive_value(log_pattern(plan, job), '--submit_dir (the jobs log there)')}"]
    if job.is_array:
        lines.append(f"--array={array_spec(plan, job)}")
    limit = o.collect_time if job.kind == "collect" and o.collect_time else o.time
    for flag, value in (("partition", o.partition), ("account", o.account), ("qos", o.qos), ("time", limit),
                        ("mem", o.mem)):
        if value:
            lines.append(f"--{flag}={directive_value(value, f'--{flag}')}")
    if o.cpus_per_task:
        lines.append(f"--cpus-per-task={o.cpus_per_task}")
    if job.gpus:
        lines.append(f"--gres=gpu:{job.gpus}")
    if job.depends:
        lines.append("--kill-on-invalid-dep=yes")  # a failed warm-up cancels its evaluations instead of hanging
    lines.extend(sbatch_option(a) for a in o.sbatch_args)
    return lines


# --------------------------------------------------------------------------- commands
def _family_env(plan: Plan, family: str) -> dict[str, str]:
    o = plan.options
    fp = o.family_paths(family)
    return {"BENCHMARK_DIR": str(o.benchmark_dir), "DATA_DIR": str(o.data_dir), "TASK_TAG": fp.tag,
            "RESULTS_DIR": str(fp.results_dir), "STATUS_FILE": str(fp.status_file)}


def contract_exports(plan: Plan) -> list[str]:
    """The dataset contract the plan was checked against, exported so every job reads the same samples: the pin
    (resolved: ``latest`` is written as the release it meant at submit time), the acknowledgement whenever one was
    given, and the single-instance filter switch (so a job never inherits another setting from its shell)."""
    c = plan.options.contract
    lines = [f"export {ENV_PLANNER}={q(c.planner_version)}"]
    if c.ack_release:
        lines.append(f"export {ENV_ACK}={q(c.ack_release)}")
    lines.append(f"export {ENV_DISABLE_FILTERING}={'false' if c.filtering else 'true'}")
    return lines


def runner_command(plan: Plan, job: Job, tasks_file: Path, extra: list[str]) -> str:
    """One runner invocation: the model's launcher, or `python -m medvision_bm.cli run` with --python."""
    o = plan.options
    assert job.model and job.family
    record = get_record(job.model)
    fp = o.family_paths(job.family)
    work = next(w for w in plan.work if w.model == job.model and w.family == job.family)
    flags = [*work.flags, *extra]
    if "--no_progress" not in flags:
        flags.append("--no_progress")  # progress bars make unreadable batch logs
    secret_words = plan.secrets.words(flags, "runner flags")  # a key or a URL's password: from the environment
    if o.python is None:  # the warm-up job (afterok) has just built the environment: do not check it again
        launcher = launcher_path(o, record, job.family).relative_to(o.benchmark_dir)
        return f"TASKS_LIST={q(tasks_file)} bash {q(launcher)} --skip_env_setup {secret_words}"
    argv = [o.python, "-m", "medvision_bm.cli", "run", "--model", job.model, "--tasks_list_json_path",
            str(tasks_file), "--data_dir", str(o.data_dir), "--results_dir", str(fp.results_dir),
            "--task_status_json_path", str(fp.status_file), "--skip_env_setup"]
    return " ".join(q(a) for a in argv) + " " + secret_words


def element_command(plan: Plan, job: Job, el: Element) -> str:
    extra: list[str] = []
    if el.sample_indices is not None:  # a --shard run keeps its own results/parsed files and never marks status
        extra = ["--sample_indices", el.sample_indices, "--shard", el.shard or f"e{el.index}"]
    return runner_command(plan, job, el.tasks_file, extra)


def warmup_command(plan: Plan, job: Job) -> str:
    o = plan.options
    assert job.model and job.family
    launcher = launcher_path(o, get_record(job.model), job.family).relative_to(o.benchmark_dir)
    return f"TASKS_LIST={q(o.family_paths(job.family).tasks_list)} bash {q(launcher)} --env_setup_only"


def summary_command(plan: Plan) -> str:
    """One report over the results root, limited to this submission's models and families."""
    o = plan.options
    names = ",".join(dict.fromkeys(w.model_name for w in plan.work))
    argv: list[str | os.PathLike[str]] = [o.summary_python, "-m", "medvision_bm.cli", "summarize", "--results_dir", o.results_root,
            "--output_dir", o.summary_dir, "--models", names, "--families", ",".join(o.families)]
    return " ".join(q(a) for a in argv)


# --------------------------------------------------------------------------- scripts
def describe_job(plan: Plan, job: Job) -> str:
    if job.kind == "warmup":
        users = sorted({j.model for j in plan.jobs if j.kind != "warmup" and j.env == job.env and j.model})
        return f"set up environment {job.env} (used by {', '.join(users)})"
    if job.kind == "preflight":
        return (f"check that {job.model}'s answers depend on the image ({plan.options.preflight} samples of "
                f"{', '.join(job.tasks)}); its {job.family} evaluations start only when they do")
    if job.kind == "eval":
        how = "one element" if len(job.elements) == 1 else f"{len(job.elements)} shards by {_shard_by(plan, job)}"
        return f"evaluate {job.model} on {len(job.tasks)} {job.family} task(s), {how}"
    if job.kind == "submit":
        return (f"submit {job.model}'s {job.family} batches at its provider ({len(job.tasks)} task(s)): recorded in "
                "the stores, not waited for")
    if job.kind == "collect":
        return (f"collect {job.model}'s open {job.family} batches, store and score their answers, mark the status "
                "file; out of time, the batches stay open and this job (or the same submit) re-attaches to them")
    if job.kind == "finalize":
        return (f"finalize {job.model} on {job.family}: score the merged shards, write results.json, "
                "mark the status file (answers any sample the shards left)")
    return "summarize the results of these models and families into tables and an HTML report"


def _shard_by(plan: Plan, job: Job) -> str:
    return plan.options.shard_for(job.model or "").by


def render_script(plan: Plan, job: Job) -> str:
    body = _script_body(plan, job)
    head = ["#!/bin/bash", f"# {one_line(describe_job(plan, job), 'a job description')}",
            f"# Written by `medvision-bm submit` on {time.strftime('%Y-%m-%d %H:%M')}. Submit it again by hand with",
            f"#   sbatch{_dep_hint(job)} {one_line(script_path(plan, job), '--submit_dir')}",
            "# (submit.sh beside jobs/ submits every job of this submission with its dependencies)."]
    used = sorted(set(re.findall(rf"\$\{{({SECRET_VAR}\d+):", "\n".join(body))))
    if used:
        head += [f"# Secret values are not written here: this job reads {', '.join(used)} from its environment",
                 "# (submit passed them to sbatch); export them (the same values) before submitting it by hand."]
    head += [f"#SBATCH {line}" for line in sbatch_lines(plan, job)]
    return "\n".join([*head, "", *body]) + "\n"


def _script_body(plan: Plan, job: Job) -> list[str]:
    o = plan.options
    body = ["set -uo pipefail", f"cd {q(o.benchmark_dir)}"]
    body += contract_exports(plan)
    if job.family and job.kind != "summary":
        body += [f"export {k}={q(v)}" for k, v in _family_env(plan, job.family).items()]
        if o.python is None:
            body.append("export PREPARE_DATA=0  # `submit` checked the data folder; jobs must not write it at once")
            body += [f"export {k}={plan.secrets.value(os.environ[k], k)}" for k in LAUNCHER_SETTINGS
                     if os.environ.get(k)]
            alt = GPU_ENVS.get(job.model or "")
            if alt is not None:  # the environment the plan chose, not whatever the node it lands on has
                body.append(f"export {HF_ENV_VAR}={'gpu' if job.env == alt.name else 'cpu'}")
    state = o.submit_dir / "state" / job.name
    body += [f"state={q(state)}_${{SLURM_ARRAY_TASK_ID:-0}}",
             'echo "${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-local}} $(hostname) $(date +%s)" > "$state.start"']
    if job.kind == "eval":
        body.append("case ${SLURM_ARRAY_TASK_ID:-0} in")
        for el in job.elements:
            what = f"{len(el.tasks)} task(s)" + (f", samples {el.sample_indices}" if el.sample_indices else "")
            body.append(f"    {el.index})  # {one_line(what + ': ' + ', '.join(el.tasks), 'a tasks list')}")
            body.append(f"        {element_command(plan, job, el)} ;;")
        body.append('    *) echo "no array element ${SLURM_ARRAY_TASK_ID}" >&2; false ;;')
        body.append("esac")
        body.append("rc=$?")
    elif job.kind == "finalize":
        assert job.tasks_file is not None
        body += [runner_command(plan, job, job.tasks_file, []), "rc=$?"]
    elif job.kind in ("submit", "collect"):
        assert job.tasks_file is not None
        body += [runner_command(plan, job, job.tasks_file, ["--batch", "--batch_phase", job.kind]), "rc=$?"]
    elif job.kind == "preflight":
        assert job.tasks_file is not None
        body += [runner_command(plan, job, job.tasks_file,
                                ["--preflight", str(o.preflight), "--preflight_only"]), "rc=$?"]
    elif job.kind == "warmup":
        body += [warmup_command(plan, job), "rc=$?"]
    else:
        body += [summary_command(plan), "rc=$?"]
    body += ['echo "$rc" > "$state.rc"', 'exit "$rc"']
    return body


def _dep_hint(job: Job) -> str:
    kinds = sorted({kind for kind, _ in job.depends})
    return "".join(f" --dependency={k}:<{k.removeprefix('after')} job ids>" for k in kinds)


def _var(job: Job) -> str:
    return "j_" + re.sub(r"\W", "_", job.name)


def render_submit_sh(plan: Plan) -> str:
    lines = ["#!/bin/bash", "# Submits this folder's jobs in dependency order (what `medvision-bm submit` did).",
             "set -euo pipefail", 'cd "$(dirname "$0")"']
    for job in plan.jobs:
        dep = dependency_arg(job, {j.name: f"${_var(j)}" for j in plan.jobs})
        dep_text = f" {dep}" if dep else ""
        lines.append(f"{_var(job)}=$(sbatch --parsable{dep_text} jobs/{job.name}.sbatch | cut -d';' -f1)")
        lines.append(f'echo "{job.name}: ${_var(job)}"')
    return "\n".join(lines) + "\n"


def dependency_arg(job: Job, ids: dict[str, str]) -> str:
    parts = []
    for kind in (DEP_OK, DEP_ANY):
        names = [n for k, n in job.depends if k == kind]
        if names:
            parts.append(kind + ":" + ":".join(ids[n] for n in names))
    return "--dependency=" + ",".join(parts) if parts else ""


# --------------------------------------------------------------------------- the graph as text
def describe_plan(plan: Plan) -> str:
    o = plan.options
    out = [f"submission folder: {o.submit_dir}"]
    for w in plan.work:
        done = len(w.tasks) - len(w.pending)
        state = "all done, no job" if not w.pending else f"{len(w.pending)} to run"
        shard = f", shards {w.shard.count}:{w.shard.by}" if w.pending and w.shard.count > 1 else ""
        out.append(f"  {w.model} ({w.model_name}) {w.family}: {len(w.tasks)} tasks, {done} done, {state}{shard}")
    if plan.empty:
        out.append("nothing to submit: every selected task is done (pass --force in the runner flags to redo)")
        return "\n".join(out) + "\n"
    rows = [("job", "kind", "array", "gpus", "job id", "depends on")]
    for job in plan.jobs:
        deps = " ".join(f"{k}:" + ",".join(n for kk, n in job.depends if kk == k)
                        for k in dict.fromkeys(k for k, _ in job.depends)) or "-"
        rows.append((job.name, _KIND_TEXT[job.kind], array_spec(plan, job) if job.is_array else "-",
                     str(job.gpus), job.job_id or "-", deps))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    out.append("dependency graph:")
    for r, listed in zip(rows, [None, *plan.jobs]):
        out.append("  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r[:5])) + "  " + r[5])
        if listed is not None and listed.is_array:
            for el in listed.elements:
                rng = f" samples {el.sample_indices}" if el.sample_indices else ""
                out.append(f"      [{el.index}] {len(el.tasks)} task(s){rng}, {el.n_samples} samples: "
                           f"{', '.join(el.tasks)}")
    return "\n".join(out) + "\n"
