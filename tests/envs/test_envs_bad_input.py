"""Bad input to launchers and `medvision-bm envs`: one clear line naming the input and the fix, non-zero exit,
nothing built. (The half-built environment case is in test_envs_launchers_e2e.py: it needs a real build.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from envs_support import REPO, base_env, copy_checkout, envs_cli, launch, one_task_lists


@pytest.fixture()
def lenv(tmp_path) -> dict[str, str]:
    tasks = one_task_lists(tmp_path)
    return base_env(ENVS_ROOT=str(tmp_path / "envs"), DATA_DIR=str(tmp_path / "Data"),
                    RESULTS_DIR=str(tmp_path / "Results"), TASKS_LIST=str(tasks["AD"]),
                    STATUS_FILE=str(tmp_path / "status.json"))


def _error_line(out: str) -> str:
    lines = [ln for ln in out.splitlines() if "error:" in ln]
    assert len(lines) == 1, out
    assert "Traceback" not in out, out
    return lines[0]


def _path_without(tmp_path: Path, missing: str) -> str:
    """A PATH with the tools a launcher uses, minus one."""
    bindir = tmp_path / f"bin-no-{missing}"
    bindir.mkdir()
    for tool in ("bash", "dirname", "basename", "date", "tee", "mkdir", "cat", "env", "python3", "uv", "flock"):
        found = shutil.which(tool)
        if tool != missing and found:
            (bindir / tool).symlink_to(found)
    return str(bindir)


def _no_env_created(env: dict[str, str]) -> bool:
    root = Path(env["ENVS_ROOT"])
    return not root.exists() or not any(p.is_dir() and not p.name.startswith(".") for p in root.iterdir())


def test_unknown_model(tmp_path, lenv):
    launcher = tmp_path / "script" / "benchmark-AD" / "nope.sh"
    launcher.parent.mkdir(parents=True)
    launcher.write_text(f'MODEL=qwen9000\nsource "{REPO}/script/lib/launcher.sh"\nmv_launch AD "$@"\n')
    run = launch(str(launcher), env=lenv)
    assert run.rc == 2
    line = _error_line(run.out)
    assert "unknown model 'qwen9000'" in line and "medvision-bm models" in line
    assert _no_env_created(lenv)


def test_env_setup_only_with_skip_env_setup_is_refused_before_anything_is_built(lenv):
    run = launch("script/benchmark-AD/oracle.sh", "--env_setup_only", "--skip_env_setup", env=lenv)
    assert run.rc == 2
    line = _error_line(run.out)
    assert "--env_setup_only" in line and "--skip_env_setup" in line and "one of them" in line
    assert _no_env_created(lenv)


def test_missing_requirements_file(tmp_path, lenv):
    (tmp_path / "co").mkdir()
    checkout = copy_checkout(tmp_path / "co")
    (checkout / "requirements" / "requirements_eval_cpu.txt").unlink()
    run = launch("script/benchmark-AD/oracle.sh", env={**lenv, "BENCHMARK_DIR": str(checkout)})
    assert run.rc == 2
    line = _error_line(run.out)
    assert "requirements_eval_cpu.txt for eval-cpu is missing" in line
    assert "medvision-bm envs lock --env eval-cpu" in line
    assert _no_env_created(lenv)


@pytest.mark.parametrize("tool,expect", [("flock", "flock is not on PATH; install util-linux"),
                                         ("uv", "uv is not on PATH; install it")])
def test_missing_tool(tmp_path, lenv, tool, expect):
    env = {**lenv, "PATH": _path_without(tmp_path, tool)}
    run = launch("script/benchmark-AD/oracle.sh", env=env)
    assert run.rc == 2
    assert expect in _error_line(run.out)
    assert _no_env_created(lenv)


@pytest.mark.parametrize("var,value,expect", [
    ("ENV_TOOL", "conda", "ENV_TOOL=conda but conda is not on PATH"),
    ("ENV_TOOL", "pipenv", "ENV_TOOL=pipenv is not a known tool"),
    ("INSTALL_METHOD", "3", "INSTALL_METHOD=3 is unknown"),
    ("TASKS_LIST", "/nonexistent/tasks.json", "tasks list /nonexistent/tasks.json does not exist"),
    ("BENCHMARK_DIR", "/tmp", "BENCHMARK_DIR=/tmp is not a medvision_bm checkout"),
])
def test_bad_variables(tmp_path, lenv, var, value, expect):
    env = {**lenv, var: value}
    if value == "conda":
        env["PATH"] = _path_without(tmp_path, "conda")
    run = launch(str(REPO / "script" / "benchmark-AD" / "oracle.sh"), env=env)
    assert run.rc == 2
    assert expect in _error_line(run.out)
    assert _no_env_created(lenv)


def test_skip_env_setup_without_an_env(lenv):
    run = launch("script/benchmark-AD/oracle.sh", "--skip_env_setup", env=lenv)
    assert run.rc == 2
    line = _error_line(run.out)
    assert "environment eval-cpu does not exist" in line and "without --skip_env_setup" in line
    assert _no_env_created(lenv)


def test_python_too_old_for_lmms_eval():
    from medvision_bm.envs.lock import check_python
    from medvision_bm.errors import UserError
    from medvision_bm.models.registry import EnvSpec, environments

    with pytest.raises(UserError, match=r"needs Python >= 3\.10"):
        check_python(EnvSpec("eval-old", python="3.9"))
    assert all(check_python(spec) for spec in environments().values())  # every registry env is new enough


@pytest.mark.parametrize("args,expect", [
    (("build", "--env", "eval-nope"), "unknown environment 'eval-nope'"),
    (("build", "--model", "qwen9000"), "unknown model 'qwen9000'"),
    (("remove", "--model", "qwen9000"), "unknown model 'qwen9000'"),
    (("check", "--env", "eval-nope"), "unknown environment 'eval-nope'"),
    (("build", "--env", "eval-cpu", "--torch-find-links", "/nonexistent/wheels"),
     "torch find-links folder /nonexistent/wheels does not exist"),
    (("build", "--env", "eval-cpu", "--envs-root", "/dev/null"), "envs root /dev/null is a file"),
    (("remove", "--env", "eval-cpu", "--envs-root", "/proc/no-such/envs"), "cannot create lock file"),
])
def test_envs_cli_bad_input(lenv, args, expect):
    res = envs_cli(*args, env=lenv)
    assert res.rc == 2
    assert expect in _error_line(res.out)
    assert _no_env_created(lenv)


def test_install_medvision_ds_with_an_uncreatable_data_dir(capsys):
    from medvision_bm.benchmark import install_medvision_ds

    assert install_medvision_ds.main(["--data_dir", "/proc/no-such/Data", "--phantom", "never"]) == 2
    assert "cannot create the data folder /proc/no-such/Data" in _error_line(capsys.readouterr().err)


def test_envs_remove_of_an_absent_env_is_a_no_op(lenv):
    res = envs_cli("remove", "--env", "eval-cpu", env=lenv)
    assert res.rc == 0 and "absent, nothing to remove" in res.out
