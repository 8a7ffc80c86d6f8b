"""`medvision-bm submit --dry-run` and `medvision-bm status` without SLURM: the plan, scripts and dependencies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cluster_support import jobs_by_name, load_plan, submit

from medvision_bm.cluster.plan import _ranges
from medvision_bm.data.planner import LATEST_RELEASE
from medvision_bm.store.status import StatusFile
from mvtest_support import TEST_CONTRACT_ENV, phantom_list, run_cli

FAMILIES = ("AD", "TL", "detect")
LIMIT = 24  # --sample_limit of the dry run
TASK_SHARDS, SAMPLE_SHARDS = 2, 3


def _balanced(sizes: list[int], parts: int) -> list[int]:
    """Loads of `parts` shards filled largest task first onto the lightest shard (what the plan promises)."""
    loads = [0] * min(parts, len(sizes))
    for n in sorted(sizes, reverse=True):
        loads[loads.index(min(loads))] += n
    return sorted(loads)


def _sample_ranges(tasks: dict[str, int], limit: int, parts: int) -> list[str]:
    """The index ranges of sample shards: tasks of one selection size share them."""
    sizes = dict.fromkeys(min(n, limit) for n in tasks.values())
    return [str(a) if a == b else f"{a}-{b}" for n in sizes for a, b in _ranges(n, parts)]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory, phantom_dir, phantom_lists):
    """One dry run: two baselines (2 task shards) and a local model (3 sample shards), all resource flags."""
    tmp = tmp_path_factory.mktemp("dry")
    empty = tmp / "empty-bin"
    empty.mkdir()
    (tmp / "weights").mkdir()  # an empty model folder: a plan reads no weights
    hf_flags = f"hf=--model_hf_id {tmp / 'weights'} --device cpu --processor_resize none"
    res = submit("--models", "oracle,mean,hf", "--model_flags", hf_flags,
                 "--families", "AD,TL,detect", "--shards", "2", "--shards", "hf=3:samples",
                 "--partition", "gpu", "--time", "02:00:00", "--account", "lab", "--qos", "high",
                 "--array-parallelism", "2", "--cpus-per-task", "4", "--mem", "32G", "--sbatch_arg=--constraint=a100",
                 "--data_dir", phantom_dir, "--tasks_list_dir", phantom_lists, "--results_root", tmp / "res",
                 "--status_dir", tmp / "status", "--submit_dir", tmp / "sub", "--dry-run", "--max_new_tokens", "32",
                 "--", "--sample_limit", str(LIMIT),
                 env={"PATH": str(empty)})  # no SLURM command (nor bash) reachable: a dry run needs none
    assert res.returncode == 0, res.stderr[-3000:]
    return tmp, res, load_plan(tmp / "sub"), {f: phantom_list(phantom_lists, f) for f in FAMILIES}


def test_dry_run_submits_nothing_and_says_so(dry_run):
    tmp, res, plan, _lists = dry_run
    assert plan["mode"] == "dry-run"
    assert "dry run: nothing submitted" in res.stdout
    assert all(j["job_id"] is None for j in plan["jobs"])
    assert not (tmp / "status").exists()
    assert not any((tmp / "res").glob("MedVision-*"))  # no results folder was created


def test_dependency_graph(dry_run):
    _tmp, res, plan, _lists = dry_run
    jobs = jobs_by_name(plan)
    kinds = sorted(j["kind"] for j in plan["jobs"])
    assert kinds.count("warmup") == 1  # oracle, mean and hf share the eval-cpu environment
    assert kinds.count("eval") == 9 and kinds.count("finalize") == 3 and kinds.count("summary") == 1
    warm = jobs["warmup-eval-cpu"]
    assert warm["depends"] == []
    for job in plan["jobs"]:
        if job["kind"] in ("eval", "finalize"):
            assert ["afterok", "warmup-eval-cpu"] in job["depends"], job["name"]
    for fam in FAMILIES:
        assert ["afterany", f"eval-hf-{fam}"] in jobs[f"finalize-hf-{fam}"]["depends"]
        assert f"finalize-oracle-{fam}" not in jobs  # task shards mark the status file themselves
    others = {j["name"] for j in plan["jobs"] if j["kind"] != "summary"}
    assert {n for k, n in jobs["summary"]["depends"] if k == "afterany"} == others
    assert "afterok:warmup-eval-cpu" in res.stdout and "afterany:eval-hf-detect" in res.stdout


def test_array_sizes_and_shards(dry_run):
    tmp, _res, plan, lists = dry_run
    jobs = jobs_by_name(plan)
    # task shards: the detect tasks (at most LIMIT samples each) -> balanced elements, largest task first
    det = jobs["eval-oracle-detect"]["elements"]
    det_sizes = [min(n, LIMIT) for n in lists["detect"].values()]
    assert len(det) == min(TASK_SHARDS, len(det_sizes))
    assert sorted(e["n_samples"] for e in det) == _balanced(det_sizes, TASK_SHARDS)
    assert sorted(t for e in det for t in e["tasks"]) == sorted(lists["detect"])
    assert len(jobs["eval-oracle-AD"]["elements"]) == min(TASK_SHARDS, len(lists["AD"]))
    # sample shards: tasks of one selection size share index ranges; SAMPLE_SHARDS ranges per size
    for fam in FAMILIES:
        hf = jobs[f"eval-hf-{fam}"]["elements"]
        assert sorted(e["sample_indices"] for e in hf) == sorted(_sample_ranges(lists[fam], LIMIT, SAMPLE_SHARDS))
        assert len({e["shard"] for e in hf}) == len(hf)
        for e in hf:  # one element: every task of one selection size, over a range inside it
            sizes = {min(lists[fam][t], LIMIT) for t in e["tasks"]}
            assert len(sizes) == 1 and int(e["sample_indices"].split("-")[-1]) < min(sizes), e
            assert e["tasks"] == [t for t, n in lists[fam].items() if min(n, LIMIT) in sizes], e
    n_hf = len(jobs["eval-hf-detect"]["elements"])
    script = Path(jobs["eval-hf-detect"]["script"]).read_text()
    assert f"#SBATCH --array=0-{n_hf - 1}%2" in script
    assert f"#SBATCH --array=0-{len(det) - 1}%2" in Path(jobs["eval-oracle-detect"]["script"]).read_text()
    # every element's tasks-list subset holds exactly its tasks, with the family list's counts
    for e in det:
        line = next(ln for ln in Path(jobs["eval-oracle-detect"]["script"]).read_text().splitlines()
                    if f"TASKS_LIST={tmp}" in ln and f"-{e['index']}.json" in ln)
        subset = json.loads(Path(line.split("TASKS_LIST=")[1].split()[0]).read_text())
        assert subset == {t: lists["detect"][t] for t in e["tasks"]}


def test_resource_flags_and_commands(dry_run):
    _tmp, _res, plan, lists = dry_run
    jobs = jobs_by_name(plan)
    script = Path(jobs["eval-hf-detect"]["script"]).read_text()
    for line in ("--partition=gpu", "--time=02:00:00", "--account=lab", "--qos=high", "--cpus-per-task=4",
                 "--mem=32G", "--constraint=a100", "--job-name=mvbm-eval-hf-detect", "--kill-on-invalid-dep=yes"):
        assert f"#SBATCH {line}" in script, line
    assert "--gres" not in script  # eval-cpu needs no GPU, whatever --gpus-per-job says
    commands = [ln for ln in script.splitlines() if "bash script/benchmark-detect/hf.sh" in ln]
    assert len(commands) == len(_sample_ranges(lists["detect"], LIMIT, SAMPLE_SHARDS))
    for cmd in commands:
        for flag in ("--sample_limit 24", "--max_new_tokens 32", "--model_hf_id", "--device cpu", "--skip_env_setup",
                     "--sample_indices", "--shard "):
            assert flag in cmd, (flag, cmd)
        assert "--skip_update_status" not in cmd  # a --shard run never marks the status file by itself
    final = Path(jobs["finalize-hf-detect"]["script"]).read_text()
    final_cmd = next(ln for ln in final.splitlines() if "hf.sh" in ln)
    assert "--sample_indices" not in final_cmd and "--shard" not in final_cmd  # the finalize run marks status
    assert "--sample_limit 24" in final_cmd
    oracle = Path(jobs["eval-oracle-AD"]["script"]).read_text()
    assert "--skip_update_status" not in oracle and "--sample_indices" not in oracle
    warm = Path(jobs["warmup-eval-cpu"]["script"]).read_text()
    assert "--env_setup_only" in warm and "--array" not in warm
    # every job reads the data under the contract the plan was checked against (the tests' pin and ack)
    for job in plan["jobs"]:
        text = Path(job["script"]).read_text()
        for name, value in TEST_CONTRACT_ENV.items():
            assert f"export {name}={value}\n" in text, (job["name"], name)
        assert "export MedVision_DISABLE_SAMPLE_FILTERING=false\n" in text, job["name"]
    assert plan["planner_version"] == TEST_CONTRACT_ENV["MedVision_PLANNER_VERSION"]


def test_scripts_export_the_contract_in_force(tmp_path, phantom_dir, phantom_lists):
    """`latest` is written as the release it resolves to; no acknowledgement given -> none exported; filters off
    at submit time stay off in the jobs."""
    env = {"MedVision_PLANNER_VERSION": "latest", "MedVision_ACK_RELEASE": "",
           "MedVision_DISABLE_SAMPLE_FILTERING": "true"}
    res = submit("--models", "oracle", "--families", "AD", "--data_dir", phantom_dir, "--tasks_list_dir",
                 phantom_lists, "--results_root", tmp_path / "res", "--submit_dir", tmp_path / "sub", "--dry-run",
                 env=env)
    assert res.returncode == 0, res.stderr
    plan = load_plan(tmp_path / "sub")
    assert (plan["planner_version"], plan["ack_release"], plan["sample_filtering"]) == (LATEST_RELEASE, None, False)
    for job in plan["jobs"]:
        text = Path(job["script"]).read_text()
        assert f"export MedVision_PLANNER_VERSION={LATEST_RELEASE}\n" in text, job["name"]
        assert "MedVision_ACK_RELEASE" not in text, job["name"]
        assert "export MedVision_DISABLE_SAMPLE_FILTERING=true\n" in text, job["name"]


def test_scripts_are_valid_bash(dry_run):
    tmp, _res, plan, _lists = dry_run
    paths = [Path(j["script"]) for j in plan["jobs"]] + [tmp / "sub" / "submit.sh"]
    for path in paths:
        res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, (path, res.stderr)
    chain = (tmp / "sub" / "submit.sh").read_text()
    assert "--dependency=afterok:$j_warmup_eval_cpu" in chain
    assert "--dependency=afterok:$j_warmup_eval_cpu,afterany:$j_eval_hf_TL jobs/finalize-hf-TL.sbatch" in chain


def test_gpu_models_request_gpus_only_for_evaluation(tmp_path, phantom_dir):
    res = submit("--models", "qwen2_5_vl", "--families", "TL", "--gpus-per-job", "2", "--data_dir", phantom_dir,
                 "--results_root", tmp_path / "res", "--status_dir", tmp_path / "st", "--submit_dir", tmp_path / "sub",
                 "--dry-run")
    assert res.returncode == 0, res.stderr
    jobs = jobs_by_name(load_plan(tmp_path / "sub"))
    assert "#SBATCH --gres=gpu:2" in Path(jobs["eval-qwen2_5_vl-TL"]["script"]).read_text()
    for name in ("warmup-eval-qwen25vl", "summary"):
        assert "--gres" not in Path(jobs[name]["script"]).read_text(), name


@pytest.mark.parametrize("gpus", [0, 1])
def test_generic_hf_jobs_take_the_environment_their_gpus_call_for(tmp_path, phantom_dir, phantom_lists, gpus):
    """The generic `hf` record has a CPU and a GPU environment. A plan made on a login node without a GPU
    gives GPU jobs the GPU environment (warm-up and evaluation alike) and pins it for the node the job lands on."""
    (tmp_path / "weights").mkdir()
    res = submit("--models", "hf", "--model_flags", f"hf=--model_hf_id {tmp_path / 'weights'} --processor_resize none",
                 "--families", "TL", "--gpus-per-job", str(gpus), "--data_dir", phantom_dir,
                 "--tasks_list_dir", phantom_lists, "--results_root", tmp_path / "res", "--status_dir",
                 tmp_path / "st", "--submit_dir", tmp_path / "sub", "--dry-run", "--", "--sample_limit", "2",
                 env={"MEDVISION_HF_ENV": "cpu"})  # what the submitting machine would pick must not matter
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = jobs_by_name(load_plan(tmp_path / "sub"))
    env, pinned = ("eval-hf-gpu", "gpu") if gpus else ("eval-cpu", "cpu")
    warmup = f"warmup-{env}"
    assert set(jobs) >= {warmup, "eval-hf-TL"}, sorted(jobs)
    for name in (warmup, "eval-hf-TL"):
        script = Path(jobs[name]["script"]).read_text()
        assert f"export MEDVISION_HF_ENV={pinned}\n" in script, name
    assert ("#SBATCH --gres=gpu:1" in Path(jobs["eval-hf-TL"]["script"]).read_text()) == bool(gpus)
    assert "(used by hf)" in Path(jobs[warmup]["script"]).read_text()


def test_resubmission_skips_done_tasks_and_status_shows_them(tmp_path, phantom_dir, phantom_lists):
    common = ("--models", "oracle", "--families", "AD,TL", "--data_dir", phantom_dir, "--tasks_list_dir",
              phantom_lists, "--results_root", tmp_path / "res", "--status_dir", tmp_path / "st", "--dry-run")
    first = submit(*common, "--submit_dir", tmp_path / "a")
    assert first.returncode == 0, first.stderr
    plan = load_plan(tmp_path / "a")
    ad = next(w for w in plan["work"] if w["family"] == "AD")
    names = list(ad["tasks"])
    assert sorted(names) == sorted(phantom_list(phantom_lists, "AD")) and len(names) >= 2
    *done, last = names
    status = StatusFile(tmp_path / "st" / "completed_tasks_MedVision-Phantom-AD.json")
    for task in done:
        status.mark("oracle", task, {"run_signature": ad["tasks"][task]["run_signature"]})
    status.mark("oracle", last, {"run_signature": "another-run"})  # done, but under other settings
    second = submit(*common, "--submit_dir", tmp_path / "b")
    assert second.returncode == 0, second.stderr
    jobs = jobs_by_name(load_plan(tmp_path / "b"))
    assert [e["tasks"] for e in jobs["eval-oracle-AD"]["elements"]] == [[last]]
    assert sorted(jobs["eval-oracle-TL"]["elements"][0]["tasks"]) == sorted(phantom_list(phantom_lists, "TL"))
    assert f"oracle (oracle) AD: {len(names)} tasks, {len(done)} done, 1 to run" in second.stdout

    shown = run_cli("status", str(tmp_path / "b"), "--json")
    assert shown.returncode == 0, shown.stderr
    rows = {(r["family"], r["task"]): r["state"] for r in map(json.loads, shown.stdout.splitlines())}
    assert [rows[("AD", t)] for t in names] == ["done"] * len(done) + ["not submitted"]
    assert {s for (f, _t), s in rows.items() if f == "TL"} == {"not submitted"}

    tl_status = StatusFile(tmp_path / "st" / "completed_tasks_MedVision-Phantom-TL.json")
    for task, info in next(w for w in plan["work"] if w["family"] == "TL")["tasks"].items():
        tl_status.mark("oracle", task, {"run_signature": info["run_signature"]})
    status.mark("oracle", last, {"run_signature": ad["tasks"][last]["run_signature"]})
    third = submit(*common, "--submit_dir", tmp_path / "c")
    assert third.returncode == 0, third.stderr
    assert "nothing to submit" in third.stdout
    assert not (tmp_path / "c").exists()
