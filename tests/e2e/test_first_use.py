"""First use: what a new user meets before the first result.

- a launcher's --help prints help and builds, checks and writes nothing; a GPU family's launcher on a machine
  without a GPU says so before building several GB (--env_setup_only builds anyway);
- `--env_setup_only` needs no tasks list; a run refused while it validates leaves no results folder behind;
- error hints name commands that work; an API key with a line break inside is a bad key, said at once;
- a plain `pip install` of the package (no extras) parses a store, and `summarize` names the extra it needs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from medvision_bm.cli.run import cli_main
from medvision_bm.models.registry import get_record, machine_has_gpu
from mvtest_support import REPO, TEST_CONTRACT_ENV, uv_venv

SRC = REPO / "src" / "medvision_bm"


def _launcher_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MedVision_", "MEDVISION_"))}
    env.update({"ENVS_ROOT": str(tmp_path / "envs"), "RESULTS_DIR": str(tmp_path / "results"),
                "DATA_DIR": str(tmp_path / "data"), "STATUS_FILE": str(tmp_path / "status.json")})
    return env


def _nothing_made(tmp_path: Path) -> None:
    made = [p.name for p in tmp_path.iterdir()]
    assert not made, f"the launcher created {made}"


@pytest.mark.parametrize("launcher", ["benchmark-AD/qwen25vl.sh", "benchmark-detect/hf.sh", "benchmark-TL/oracle.sh"])
def test_launcher_help_builds_nothing(launcher: str, tmp_path: Path) -> None:
    res = subprocess.run(["bash", str(REPO / "script" / launcher), "--help"], capture_output=True, text=True,
                         env=_launcher_env(tmp_path), timeout=120)
    assert res.returncode == 0, res.stderr
    model = re.search(r"^MODEL=(\S+)", (REPO / "script" / launcher).read_text(), re.M)[1]
    assert f"usage: medvision-bm run --model {model}" in res.stdout and "--tasks_list_json_path" in res.stdout
    assert "script/lib/launcher.sh" in res.stdout
    assert "building" not in res.stderr and "log:" not in res.stderr
    _nothing_made(tmp_path)  # no environment, no results/logs folder, no data


def test_gpu_launcher_without_a_gpu_says_so_before_building(tmp_path: Path) -> None:
    if machine_has_gpu():
        pytest.skip("this machine has a GPU")
    env = _launcher_env(tmp_path)
    res = subprocess.run(["bash", str(REPO / "script" / "benchmark-AD" / "qwen25vl.sh")], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 2
    out = res.stdout + res.stderr  # the launcher logs through tee: its messages are on stdout too
    err = [ln for ln in out.splitlines() if "error:" in ln]
    assert len(err) == 1 and "this machine has none" in err[0] and "eval-qwen25vl" in err[0], out
    assert "--env_setup_only" in err[0] and "MEDVISION_BUILD_WITHOUT_GPU=1" in err[0]
    assert not (tmp_path / "envs").exists()  # nothing downloaded or built
    # the generic transformers model takes its CPU environment here: no refusal for it
    out = subprocess.run([sys.executable, "-m", "medvision_bm.cli", "envs", "resolve", "--model", "hf"],
                         capture_output=True, text=True, env={**env, "BENCHMARK_DIR": str(REPO)}, timeout=60)
    assert "MV_ENV_NAME=eval-cpu" in out.stdout and "MV_ENV_GPU=0" in out.stdout and "MV_HAS_GPU=0" in out.stdout


# ------------------------------------------------------------------------------------------ a plain install
@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with `pip install <this checkout>` (uv) and no extras: the core dependencies only."""
    uv, venv = uv_venv(tmp_path_factory.mktemp("plain") / "venv")
    res = subprocess.run([uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(REPO)],
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        pytest.skip(f"cannot install the package into a fresh venv here: {res.stderr.strip()[-300:]}")
    return venv


def _plain(venv: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    full.update(env or {})
    return subprocess.run([str(venv / "bin" / "medvision-bm"), *args], capture_output=True, text=True, env=full,
                          timeout=300, cwd=venv.parent)


def _oracle_store(phantom_dir: Path, phantom_lists: Path, results: Path) -> None:
    from medvision_bm.runner.args import build_parser
    from medvision_bm.runner.backends import build_backend
    from medvision_bm.runner.config import build_config
    from medvision_bm.runner.loop import Runner

    rec = get_record("oracle")
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(phantom_lists / "tasks_MedVision-Phantom-AD.json"),
            "--results_dir", str(results), "--skip_update_status", "--skip_env_setup", "--no_progress"]
    runner = Runner(build_config(build_parser(rec, "t").parse_args(argv), rec, argv), build_backend)  # direct harness
    assert all(o.state == "done" for o in runner.run())


def test_plain_install_parses_and_summarize_names_its_extra(plain_venv: Path, phantom_dir: Path,
                                                              phantom_lists: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    _oracle_store(phantom_dir, phantom_lists, results)
    parsed = _plain(plain_venv, "parse", "--results_dir", str(results))
    assert parsed.returncode == 0, parsed.stderr
    assert "rewrote parsed.jsonl" in parsed.stdout + parsed.stderr
    summ = _plain(plain_venv, "summarize", "--results_dir", str(results), "--output_dir", str(tmp_path / "out"))
    assert summ.returncode == 2 and "Traceback" not in summ.stderr, summ.stderr
    lines = summ.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'medvision-bm[report]'" in lines[0], summ.stderr
    # every report module's third-party import is in the core dependencies or in the extra the error names
    requires = metadata.requires("medvision-bm") or []
    report_extra = {re.split(r"[<>=;\[ ]", r)[0].lower() for r in requires
                    if re.search(r"extra\s*==\s*['\"]report['\"]", r)}
    assert {"polars", "matplotlib"} <= report_extra


def test_env_setup_only_needs_no_tasks_list(plain_venv: Path, tmp_path: Path) -> None:
    # a checkout whose eval-cpu lock this venv satisfies: set-up finds nothing to install
    checkout = tmp_path / "checkout"
    (checkout / "requirements").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    numpy = subprocess.run([str(plain_venv / "bin" / "python"), "-c", "import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    (checkout / "requirements" / "requirements_eval_cpu.txt").write_text(f"numpy=={numpy}\n")
    env = {"BENCHMARK_DIR": str(checkout), "MEDVISION_HF_ENV": ""}
    res = _plain(plain_venv, "run", "--model", "oracle", "--env_setup_only", env=env)
    assert res.returncode == 0, res.stderr
    assert "environment for oracle (eval-cpu) is ready" in res.stderr
    res = _plain(plain_venv, "run", "--model", "oracle", "--skip_env_setup", env=env)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "--tasks_list_json_path is required" in res.stderr and "--env_setup_only" in res.stderr


# --------------------------------------------------------------------------------- refused runs leave nothing
def _one_task(phantom_lists: Path, tmp_path: Path) -> Path:
    tasks = json.loads((phantom_lists / "tasks_MedVision-Phantom-AD.json").read_text())
    path = tmp_path / "tasks_one.json"
    path.write_text(json.dumps(dict(list(tasks.items())[:1])))
    return path


def test_runs_refused_while_validating_leave_no_results_folder(phantom_dir: Path, phantom_lists: Path,
                                                               tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, value in TEST_CONTRACT_ENV.items():
        monkeypatch.setenv(name, value)
    tasks = _one_task(phantom_lists, tmp_path)
    common = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks), "--skip_env_setup",
              "--no_progress", "--task_status_json_path", str(tmp_path / "status.json")]
    # weights that cannot be loaded (an id not in the offline cache): refused when the model loads
    results = tmp_path / "r1"
    rc = cli_main(["--model", "hf", "--model_hf_id", "nosuchorg/nosuchmodel", "--processor_resize", "none",
                   "--results_dir", str(results), *common])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot load the processor of nosuchorg/nosuchmodel" in err, err
    assert not results.exists() or not any(results.rglob("signature.json")), list(results.rglob("*"))
    # an API key with a line break inside: a bad key, refused before any request and any folder
    results = tmp_path / "r2"
    monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", "sk-first\nsk-second")
    rc = cli_main(["--model", "openai-compatible", "--model_name", "m", "--base_url", "http://127.0.0.1:9/v1",
                   "--max_retries", "0", "--results_dir", str(results), *common])
    err = capsys.readouterr().err
    assert rc == 2 and "OPENAI_COMPATIBLE_API_KEY contains a newline" in err, err
    assert "connection" not in err.lower() and len(err.strip().splitlines()) == 1, err
    assert not results.exists() or not any(results.rglob("signature.json"))


def test_every_key_with_a_control_character_is_a_bad_key() -> None:
    from medvision_bm.errors import UserError
    from medvision_bm.models.api.keys import read_key

    for bad, what in (("sk-a\nsk-b", "a newline"), ("sk-a\rb", "a carriage return"), ("sk-\tab", "a tab"),
                      ("sk-\u00e9", "U+00E9")):
        with pytest.raises(UserError, match=f"OPENAI_API_KEY contains (the character )?{re.escape(what)}"):
            read_key("openai", {"OPENAI_API_KEY": bad})
    assert read_key("openai", {"OPENAI_API_KEY": "  sk-good\n"}).reveal() == "sk-good"  # trailing space is trimmed


# ---------------------------------------------------------------------------------------------- error hints
def test_envs_build_hints_name_commands_the_cli_takes() -> None:
    from medvision_bm.cli.envs import build_parser

    hints = []
    for path in [*SRC.rglob("*.py"), *(REPO / "script").rglob("*.sh"), REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for m in re.finditer(r"medvision-bm envs build([^`'\"\n)]*)", path.read_text(encoding="utf-8")):
            hints.append((path.name, m[1].strip()))
    assert hints
    parser = build_parser()
    for where, rest in hints:
        rest = rest.split("#")[0].strip()  # a shell comment after the command
        words = rest.split()
        # a placeholder value ({record.env.name}, $MV_MODEL, <env>) stands for a real one
        args = [("eval-cpu" if i and words[i - 1] == "--env" else "hf") if re.match(r"[{$<]", w) else w
                for i, w in enumerate(words)]
        try:
            parser.parse_args(["build", *args])
        except SystemExit as exc:
            raise AssertionError(f"{where}: `medvision-bm envs build {rest}` is not a command the CLI takes") from exc


def test_processor_resize_hint_lists_only_values_the_flag_takes(tmp_path: Path) -> None:
    from medvision_bm.errors import UserError
    from medvision_bm.models.processor_config import perceive_for_model

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(UserError) as info:
        perceive_for_model("auto", str(folder), 64, 64)
    listed = re.search(r"one of (.*)$", str(info.value))[1].split(", ")
    flag = next(f for f in get_record("hf").flags if f.name == "--processor_resize")
    assert listed and set(listed) <= set(flag.choices) and "auto" not in listed, (listed, flag.choices)
