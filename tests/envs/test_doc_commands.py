"""Every command block of README.md and docs/*.md, run on the phantom where it can run here.

Each command line of a command block (a ```bash block, or an unmarked/```text block whose first line is a command)
must be listed below: in RUN (with the few substitutions that point it at the phantom, spelled out) or in SKIP with
the reason it cannot run on this machine (and where the same thing is tested). A new or changed command in the
docs fails the first test until it is listed. The commands run in a sandbox folder that holds the checkout's
`script/`, `src/`, `tasks_list/` and `pyproject.toml` (linked), the phantom as `Data`, and writes `Results/` and
`completed_tasks/` of its own; the launcher's environment is the session's eval-cpu (tests/envs/conftest.py), so the
sandbox never touches the checkout. No MedVision_ variable comes from the test: a block that needs the annotation
pin must export it itself, as a user's shell would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from envs_support import REPO, base_env

#: The pages in the order a user follows them (docs/overview.md: evaluate, then parse and summarize); the rest after.
ORDER = ("README.md", "docs/overview.md", "docs/dataset-concepts.md", "docs/running-evaluations.md",
         "docs/environments-and-launchers.md", "docs/cluster.md", "docs/parse-and-summarize.md")
DOCS = [REPO / p for p in ORDER] + sorted(p for p in (REPO / "docs").glob("*.md")
                                          if str(p.relative_to(REPO)) not in ORDER)
COMMAND_WORDS = ("medvision-bm", "python", "bash", "export", "source", "uv", "apt-get", "vllm", "sbatch")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

#: Commands that need what this machine lacks, and where the same behaviour is tested instead.
SKIP = {
    "bash script/quickstart.sh": "the whole main job (every baseline and the tiny VLM on every phantom task, a few "
                                 "minutes on 2 idle cores); its steps run in tests/report, tests/models and below",
    "bash script/run_tests.sh": "the test suite itself",
    "medvision-bm submit --models qwen2_5_vl,gemma3,oracle --families AD,TL,detect --data_dir /data/MedVision "
    "--task_tag 'MedVision-{family}' --partition gpu --gpus-per-job 1 --time 08:00:00 --array-parallelism 4 "
    "--shards 4 -- --max_new_tokens 2048": "a GPU partition and upstream's real data; the same plan shape is "
                                           "tests/cluster/test_submit_plan.py's dry run",
    "medvision-bm status": "needs a submission under Results/submissions; tests/cluster/test_submit_local.py runs it",
    "medvision-bm status DIR --wait": "needs running SLURM jobs; tests/cluster/test_slurm_e2e.py waits on them",
    "medvision-bm submit --models oracle,mean,hf --model_flags 'hf=--model_hf_id /w/tiny --device cpu' --families "
    "AD,TL,detect --data_dir Data --shards hf=2:samples --results_root Results-local --status_dir "
    "Results-local/completed_tasks --local 2 -- --sample_limit 8":
        "about 290 tiny-VLM generations through the launchers (tens of minutes on 2 shared cores); the same plan "
        "runs in tests/cluster/test_submit_local.py",
    "apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge slurmdbd mariadb-server":
        "installs system packages (root); script/run_tests.sh does it where it may",
    "python -m pytest tests/cluster": "the cluster tests themselves",
    "medvision-bm data download --data_dir Data --tasks_list_json_path tasks_list/tasks_MedVision-TL.json":
        "fetches from the Hugging Face hub (unreachable here); tests/data/test_data.py runs the download path against "
        "a local stand-in of upstream's loader",
    "bash script/benchmark-AD/qwen25vl.sh": "an NVIDIA GPU and Qwen2.5-VL-7B's weights",
    "bash script/benchmark-TL/claude.sh --sample_limit 10 --skip_update_status": "Anthropic's API and a key; "
        "tests/envs/test_envs_launchers_e2e.py runs the API launchers against a local server",
    "medvision-bm envs build --model claude": "builds eval-api (minutes with its bytecode); "
        "tests/envs/test_envs_launchers_e2e.py builds it through the GPT launcher",
    "medvision-bm envs lock": "recompiles every family's lock against PyPI and rewrites requirements/ in the "
                              "checkout; tests/envs/test_envs_lint.py checks the locks",
    "medvision-bm envs lock --env eval-cpu": "as above, for one family",
    "uv pip compile requirements/requirements_eval_<family>.in -o requirements/requirements_eval_<family>.txt "
    "--generate-hashes --python-version <EnvSpec.python> --python-platform x86_64-manylinux_2_28 "
    "--custom-compile-command \"medvision-bm envs lock --env eval-<family>\"":
        "a template (placeholders) of what `envs lock` runs",
    "medvision-bm judge --results_dir Results --judge_model gemma4 --base_url URL":
        "a served judge model (URL); tests/judge/test_judge.py runs the judge against a fake server",
    "vllm serve google/gemma-4-31B-it --max-model-len 12288 --tensor-parallel-size 2": "two GPUs and vLLM",
    "medvision-bm judge --results_dir Results --judge_model gemma4 --base_url http://127.0.0.1:8000/v1 "
    "[--concurrency 16]": "the judge served by the line above",
    "medvision-bm summarize --results_dir Results --output_dir Results/report --parse both":
        "the judge's parses written by the line above",
    "python -m medvision_bm.benchmark.eval__qwen2_5_vl --model_hf_id Qwen/Qwen2.5-VL-7B-Instruct ...":
        "an NVIDIA GPU and Qwen2.5-VL-7B's weights",
    "bash script/benchmark-AD/qwen25vl.sh --sample_limit 10 --skip_update_status": "an NVIDIA GPU",
    "medvision-bm run --model openai --tasks_list_json_path tasks_list/tasks_MedVision-AD.json --batch":
        "OpenAI's Batch API and a key; tests/runner/test_batch_runs.py runs batch runs of the phantom against local "
        "servers speaking each provider's batch wire format",
    "medvision-bm run --model openai --tasks_list_json_path T.json --batch --batch_phase submit":
        "OpenAI's Batch API and a key; tests/runner/test_batch_phases.py runs both phases against a local server",
    "medvision-bm run --model openai --tasks_list_json_path T.json --batch --batch_phase collect":
        "OpenAI's Batch API and a key; tests/runner/test_batch_phases.py runs both phases against a local server",
    "medvision-bm check-vision --model oracle --data_dir D --tasks PhantomCT_BoxCoordinate_Task01_Axial -K 4":
        "exits 4 by design (the oracle answers from the annotations, so it is flagged); "
        "tests/runner/test_vision_check.py runs the check on the phantom and checks that verdict",
}

#: Commands run here: the substitutions (old, new) that point them at the phantom, and what must exist afterwards.
RUN: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "source .venv/bin/activate": ((("source .venv/bin/activate",
                                    f"source {Path(sys.prefix) / 'bin' / 'activate'} && medvision-bm --help "
                                    ">/dev/null"),), ()),
    "export MedVision_PLANNER_VERSION=1.0.0 MedVision_ACK_RELEASE=1.4.0": ((), ()),
    "export MedVision_PLANNER_VERSION=1.0.0": ((), ()),
    "medvision-bm data check --data_dir /path/to/Data --tasks_list_json_path tasks_list/tasks_MedVision-TL.json":
        ((("/path/to/Data", "Data"), ("tasks_MedVision-TL.json", "tasks_MedVision-Phantom-TL.json")), ()),
    "medvision-bm run --model oracle --data_dir /path/to/Data --tasks_list_json_path tasks_list/tasks_MedVision-TL.json "
    "--skip_env_setup":
        ((("/path/to/Data", "Data"), ("tasks_MedVision-TL.json", "tasks_MedVision-Phantom-TL.json")),
         ("Results/oracle", "completed_tasks/completed_tasks_MedVision-Phantom-TL.json")),
    "medvision-bm run --model oracle --data_dir Data --tasks_list_json_path tasks_list/tasks_MedVision-Phantom-AD.json "
    "--results_dir Results/MedVision-Phantom-AD --skip_env_setup": ((), ("Results/MedVision-Phantom-AD/oracle",)),
    "bash script/benchmark-detect/oracle.sh": ((), ("launcher-results/oracle", "launcher-results/logs")),
    "medvision-bm parse --results_dir Results [--parser strict-1|lastk-1] [--metric_path posthoc|eval-time]":
        (((" [--parser strict-1|lastk-1]", " --parser strict-1"), (" [--metric_path posthoc|eval-time]", "")), ()),
    "medvision-bm published [--model M] [--family F] [--format table|csv|json]":
        ((("[--model M] ", ""), ("[--family F]", "--family AD"), ("[--format table|csv|json]", "--format csv")), ()),
    "medvision-bm data tasks --tasks_list_json_path tasks_list/OOD/tasks_MedVision-TL-planeOOD-CoT.json":
        ((("tasks_list/OOD/tasks_MedVision-TL-planeOOD-CoT.json", "tasks_list/tasks_MedVision-Phantom-TL.json"),), ()),
    "medvision-bm data tasks --upstream": ((), ()),
    "medvision-bm summarize --results_dir Results --output_dir Results/report":
        ((), ("Results/report/index.html", "Results/report/leaderboard_AD.csv")),
    "medvision-bm compare --results_dir Results --a base-model --b fine-tuned":
        ((("base-model", "mean"), ("fine-tuned", "oracle")), ()),
    "medvision-bm compare --results_dir Results --a base-model --b fine-tuned [--families TL] [--metrics MAE,MRE] "
    "[--n_boot 1000 --seed 0] [--output_dir Results/report]":
        ((("base-model", "mean"), ("fine-tuned", "oracle"), ("[--families TL]", "--families AD"),
          ("[--metrics MAE,MRE]", "--metrics MAE,MRE"), ("[--n_boot 1000 --seed 0]", "--n_boot 1000 --seed 0"),
          ("[--output_dir Results/report]", "--output_dir Results/report")),
         ("Results/report/compare_mean_vs_oracle.csv",)),
    "medvision-bm status --batches Results/": ((), ()),
    "medvision-bm envs list": ((), ()),
    "medvision-bm envs check --env eval-cpu": ((), ()),
    "medvision-bm envs remove --env eval-cpu": ((("medvision-bm envs", "ENVS_ROOT=$PWD/empty-envs medvision-bm envs"),),
                                               ()),
    "medvision-bm envs info": ((), ()),
}
#: Run before the documented commands: a second baseline on the A/D tasks, so `compare` has two runs to pair.
SETUP = ("medvision-bm run --model mean --data_dir Data --tasks_list_json_path "
         "tasks_list/tasks_MedVision-Phantom-AD.json --results_dir Results/MedVision-Phantom-AD --skip_update_status "
         "--skip_env_setup")


def _logical_lines(body: str) -> list[str]:
    lines, pending = [], ""
    for raw in body.splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        line = re.sub(r"\s+#\s.*$", "", line).strip()  # a trailing comment (none of the commands holds " # ")
        line = re.sub(r"\s+", " ", line)  # aligned columns
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def doc_commands() -> list[tuple[str, str]]:
    """(where, command) of every command line in a command block, in document order."""
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            lang, lines = m.group(1), _logical_lines(m.group(2))
            words = lines[0].split() if lines else []
            is_commands = lang in ("bash", "sh", "shell") or (  # "medvision-bm run: error: ..." is output
                lang in ("", "text") and bool(words) and words[0] in COMMAND_WORDS
                and not (len(words) > 1 and words[1].endswith(":")))
            if not is_commands:
                continue
            where = f"{path.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}"
            out += [(where, line) for line in lines]
    return out


def test_every_documented_command_is_run_or_says_why_not():
    found = doc_commands()
    assert len(found) > 20
    listed = set(RUN) | set(SKIP)
    missing = [f"{where}: {cmd}" for where, cmd in found if cmd not in listed]
    assert not missing, "commands in the docs that this test neither runs nor skips:\n" + "\n".join(missing)
    stale = sorted(listed - {cmd for _, cmd in found})
    assert not stale, f"listed here but no longer in the docs: {stale}"


@pytest.fixture()
def sandbox(tmp_path, phantom_dir, cpu_cold) -> tuple[Path, dict[str, str]]:
    box = tmp_path / "box"
    box.mkdir()
    for name in ("script", "src", "tasks_list", "requirements", "pyproject.toml", "README.md"):
        (box / name).symlink_to(REPO / name)
    (box / "Data").symlink_to(phantom_dir)
    env = base_env(ENVS_ROOT=str(cpu_cold["root"]), BENCHMARK_DIR=str(box), RESULTS_DIR=str(box / "launcher-results"),
                   STATUS_FILE=str(box / "completed_tasks" / "launcher.json"), PREPARE_DATA="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return box, env


def test_the_documented_commands_run_on_the_phantom(sandbox):
    box, env = sandbox
    done: list[str] = []
    commands = [cmd for _, cmd in doc_commands() if cmd in RUN]
    # the pin a user exports first (dataset-concepts.md, running-evaluations.md) stays in force for what follows
    script = ["set -e", "cd " + str(box)]
    for cmd in commands:
        subs, _ = RUN[cmd]
        line = cmd
        for old, new in subs:
            assert old in line, (cmd, old)
            line = line.replace(old, new)
        script.append(f"echo '>>> {cmd[:70]}' >&2")
        script.append(line)
        if cmd.startswith("medvision-bm run --model oracle --data_dir Data --tasks_list_json_path tasks_list/tasks_"
                          "MedVision-Phantom-AD.json"):
            script.append(SETUP)
        done.append(cmd)
    res = subprocess.run(["bash", "-c", "\n".join(script)], env=env, capture_output=True, text=True, timeout=3000)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "setting up eval-" not in res.stderr, "a documented command installed packages into its interpreter"
    for cmd in done:
        for rel in RUN[cmd][1]:
            assert (box / rel).exists(), (cmd, rel)
    assert "Traceback" not in res.stderr
    assert set(done) == set(RUN)  # every listed command ran (some appear on several pages)
