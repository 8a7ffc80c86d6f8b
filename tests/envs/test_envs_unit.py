"""Unit tests of the environment builder's decisions: hashes, states, torch source, pins, markers, helpers."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from envs_support import REPO, base_env, envs_cli

from medvision_bm.benchmark import install_medvision_ds, install_vendored_lmms_eval
from medvision_bm.envs import core, setup
from medvision_bm.envs.builder import Inputs, env_state, gather_inputs, resolve_tool
from medvision_bm.envs.lock import compile_command, locked_python
from medvision_bm.errors import UserError
from medvision_bm.models.registry import REGISTRY, EnvSpec, environments, get_record
from medvision_bm.provenance import current_env_info
from medvision_bm.secrets import KEY_ENV_VARS
from mvtest_support import TEST_CONTRACT_ENV

CPU = EnvSpec("eval-cpu", gpu=False)
GPU = EnvSpec("eval-qwen25vl", ("qwen",))


# ------------------------------------------------------------------------------------------------ hashes
def test_lock_hash_ignores_comments_and_blank_lines_but_not_pins(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("# header\nfoo==1.0 \\\n    --hash=sha256:aa\n    # via bar\n\n")
    b = tmp_path / "b.txt"
    b.write_text("# another header\nfoo==1.0 \\\n    --hash=sha256:aa\n")
    c = tmp_path / "c.txt"
    c.write_text("foo==1.1 \\\n    --hash=sha256:aa\n")
    assert core.lock_hash(a) == core.lock_hash(b) != core.lock_hash(c)


def test_source_hash_follows_the_wheel_inputs(tmp_path):
    (tmp_path / "src" / "medvision_bm").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "README.md").write_text("x\n")
    mod = tmp_path / "src" / "medvision_bm" / "m.py"
    mod.write_text("A = 1\n")
    first = core.source_hash(tmp_path)
    (tmp_path / "src" / "medvision_bm" / "__pycache__").mkdir()
    (tmp_path / "src" / "medvision_bm" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"junk")
    (tmp_path / "notes.txt").write_text("not part of the wheel")
    assert core.source_hash(tmp_path) == first
    mod.write_text("A = 2\n")
    assert core.source_hash(tmp_path) != first


def test_inputs_hash_depends_on_lock_python_and_tool():
    base = core.inputs_hash(CPU, "abc", "uv")
    assert base == core.inputs_hash(CPU, "abc", "uv")
    assert base != core.inputs_hash(CPU, "abd", "uv")
    assert base != core.inputs_hash(EnvSpec("eval-cpu", python="3.12", gpu=False), "abc", "uv")
    assert base != core.inputs_hash(CPU, "abc", "conda")


# ------------------------------------------------------------------------------------------------ states
def _inputs(tmp_path: Path, lock_sha: str = "L", source: str = "S", tool: str = "uv") -> Inputs:
    return Inputs(CPU, tmp_path, tmp_path / "lock.txt", lock_sha, tool, source)


def _fake_env(root: Path, **marker) -> core.EnvPaths:
    paths = core.EnvPaths(CPU, root)
    (paths.prefix / "bin").mkdir(parents=True)
    paths.python.write_text("")
    if marker:
        core.write_marker(paths.prefix, marker)
    return paths


def test_env_state_absent_ready_stale(tmp_path):
    inputs = _inputs(tmp_path)
    paths = core.EnvPaths(CPU, tmp_path / "envs")
    assert env_state(paths, inputs).state == "absent"
    good = {"name": "eval-cpu", "tool": "uv", "lock_hash": "L", "python_request": "3.11",
            "inputs_hash": inputs.inputs_sha, "source_hash": "S"}
    paths = _fake_env(tmp_path / "envs", **good)
    st = env_state(paths, inputs)
    assert (st.state, st.needs) == ("ready", "nothing")
    st = env_state(paths, _inputs(tmp_path, lock_sha="L2"))
    assert (st.state, st.needs) == ("stale", "build") and "requirements_eval_cpu.txt changed" in st.reason
    st = env_state(paths, _inputs(tmp_path, source="S2"))
    assert (st.state, st.needs) == ("stale", "package")
    st = env_state(paths, _inputs(tmp_path, tool="conda"))
    assert (st.state, st.needs) == ("stale", "build") and "built with uv" in st.reason
    core.drop_marker(paths.prefix)
    st = env_state(paths, inputs)
    assert (st.state, st.needs) == ("stale", "build") and st.reason.startswith("incomplete")


def test_env_state_of_a_method_2_bootstrap(tmp_path):
    inputs = _inputs(tmp_path)
    paths = _fake_env(tmp_path / "envs", name="eval-cpu", tool="uv", inputs_hash=None, source_hash="S")
    assert env_state(paths, inputs, "entry-point").needs == "nothing"
    assert env_state(paths, inputs, "frozen").needs == "build"  # Method 1 never runs on an unsynced env


def test_unreadable_marker_counts_as_incomplete(tmp_path):
    paths = _fake_env(tmp_path / "envs")
    paths.marker.write_text("{truncated")
    assert env_state(paths, _inputs(tmp_path)).reason.startswith("incomplete")


def test_tool_must_be_known(monkeypatch):
    monkeypatch.setenv("ENV_TOOL", "mamba")
    with pytest.raises(UserError, match="ENV_TOOL='mamba'"):
        resolve_tool(None)
    assert resolve_tool("conda") == "conda"


# ------------------------------------------------------------------------------------------------ torch source
def test_torch_source_precedence(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    assert core.torch_source(CPU, find_links=str(wheels), env={}).uv_args() == ["--find-links", str(wheels)]
    env = {"TORCH_INDEX_URL": "https://example.invalid/whl/cpu"}
    assert core.torch_source(CPU, env=env).uv_args() == ["--extra-index-url", "https://example.invalid/whl/cpu"]
    assert core.torch_source(CPU, find_links=str(wheels), env=env).find_links == str(wheels)  # flags first
    # no flag and no variable: PyTorch's CPU index, whatever folders this machine has (no machine path is a default)
    assert core.torch_source(CPU, env={}).uv_args() == ["--extra-index-url", core.DEFAULT_TORCH_CPU_INDEX]
    assert core.torch_source(GPU, env={}).uv_args() == []  # PyPI's CUDA torch
    with pytest.raises(UserError, match="keep one"):
        core.torch_source(CPU, env={"TORCH_FIND_LINKS": str(wheels), "TORCH_INDEX_URL": "https://x"})
    with pytest.raises(UserError, match="does not exist"):
        core.torch_source(CPU, env={"TORCH_FIND_LINKS": str(tmp_path / "nope")})


# ------------------------------------------------------------------------------------------------ locks
def test_compile_command_options():
    cpu = compile_command(CPU, "out.txt", core.TorchSource(find_links="/w"))
    for opt in ("--generate-hashes", "--python-platform", "x86_64-manylinux_2_28", "--excludes", "--find-links"):
        assert opt in cpu
    assert cpu[cpu.index("--python-version") + 1] == "3.11"
    gpu = compile_command(GPU, "out.txt", core.TorchSource())
    assert "--excludes" not in gpu and "--find-links" not in gpu
    with pytest.raises(UserError, match=r"needs Python >= 3\.10"):
        compile_command(EnvSpec("eval-old", python="3.9"), "o.txt", core.TorchSource())


def test_meddr_lock_remembers_its_python_override():
    spec = environments()["eval-meddr"]
    assert locked_python(REPO / spec.requirements) == "3.10"
    assert locked_python(REPO / "requirements" / "requirements_eval_cpu.txt") is None


# ------------------------------------------------------------------------------------------------ Method 2 setup
def test_unmet_pins_compares_local_versions_and_skips_marker_lines(tmp_path):
    from importlib import metadata

    numpy = metadata.version("numpy")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"numpy=={numpy} \\\n    --hash=sha256:aa\n"
                    "surely-not-installed-pkg==1.0 \\\n    --hash=sha256:bb\n"
                    "pywin32==306 ; sys_platform == 'win32' \\\n    --hash=sha256:cc\n"
                    f"nibabel=={metadata.version('nibabel')}+cpu\n")
    unmet = setup.unmet_pins(lock)
    assert unmet[0] == "surely-not-installed-pkg==1.0"
    assert len(unmet) == 2 and "(have" in unmet[1]


def test_setup_refuses_another_familys_managed_env(tmp_path, monkeypatch):
    prefix = tmp_path / "eval-api"
    prefix.mkdir()
    core.write_marker(prefix, {"name": "eval-api", "tool": "uv"})
    monkeypatch.setattr(sys, "prefix", str(prefix))
    with pytest.raises(UserError, match="runs in eval-cpu"):
        setup.setup_current_environment(get_record("oracle"), REPO)


def test_setup_names_the_lock_command_when_the_requirements_file_is_missing(tmp_path):
    (tmp_path / "requirements").mkdir()
    with pytest.raises(UserError, match=r"requirements_eval_cpu.txt for eval-cpu is missing.*envs lock"):
        setup.requirements_file(get_record("oracle"), tmp_path)


def test_current_env_info_reads_the_marker(tmp_path):
    core.write_marker(tmp_path, {"name": "eval-cpu", "tool": "uv", "lock_hash": "abc", "lock_file": "r.txt",
                                 "inputs_hash": "def", "source_hash": "s", "mode": "frozen"})
    info = current_env_info(tmp_path)
    assert info["managed"] and info["name"] == "eval-cpu" and info["lock_hash"] == "abc"
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    bare = current_env_info(tmp_path / "nothing")
    assert bare["managed"] is False and bare["lock_hash"] is None and bare["name"] is None


def test_marker_is_readable_by_other_users_of_a_shared_envs_root(tmp_path):
    old = os.umask(0o022)
    try:
        core.write_marker(tmp_path, {"name": "eval-cpu"})
    finally:
        os.umask(old)
    assert (tmp_path / core.MARKER_NAME).stat().st_mode & 0o777 == 0o644


# ------------------------------------------------------------------------------------------------ helpers
def test_install_vendored_lmms_eval_keeps_cpu_torch_and_leaves_torchvision_out(monkeypatch):
    monkeypatch.setattr(install_vendored_lmms_eval, "_installed_torch", lambda: "2.13.0+cpu")
    cmd, excludes = install_vendored_lmms_eval.install_command("qwen")
    assert "lmms-eval[qwen]==0.7.3" in cmd and "filelock<4" in cmd and "torch==2.13.0+cpu" in cmd
    assert excludes == "torchvision\n"
    cmd, _ = install_vendored_lmms_eval.install_command("qwen2_5_vl")  # a model: its family's extras + lock
    assert "lmms-eval[qwen]==0.7.3" in cmd and str(REPO / "requirements/requirements_eval_qwen25vl.txt") in cmd
    cmd, _ = install_vendored_lmms_eval.install_command("none")
    assert "lmms-eval==0.7.3" in cmd
    with pytest.raises(UserError, match="neither an lmms-eval extra"):
        install_vendored_lmms_eval.install_command("nonsense-group")


def test_install_vendored_lmms_eval_dry_run(capsys, monkeypatch):
    monkeypatch.setattr(install_vendored_lmms_eval, "_installed_torch", lambda: "2.13.0+cpu")
    assert install_vendored_lmms_eval.main(["--lmms_eval_opt_deps", "claude", "--dry_run"]) == 0
    err = capsys.readouterr().err
    assert "lmms-eval==0.7.3" in err and "--excludes" in err
    assert install_vendored_lmms_eval.main(["--lmms_eval_opt_deps", "bogus", "--dry_run"]) == 2


def _locked_version(lock: Path, name: str) -> str:
    line = next(ln for ln in lock.read_text().splitlines() if ln.startswith(f"{name}=="))
    return line.split("==", 1)[1].split()[0]


def test_install_vendored_lmms_eval_refuses_cuda_torch_without_a_gpu_in_one_line(capsys, monkeypatch):
    """A torch-less venv on a machine without a GPU: the launchers' rule (no GPU visible, no override) refuses."""
    monkeypatch.setattr(install_vendored_lmms_eval, "_installed_torch", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides every GPU, as the launchers read it
    monkeypatch.delenv(install_vendored_lmms_eval.BUILD_WITHOUT_GPU_VAR, raising=False)
    ran: list[list[str]] = []
    monkeypatch.setattr(install_vendored_lmms_eval.subprocess, "run", lambda cmd, **kw: ran.append(cmd))
    assert install_vendored_lmms_eval.main(["--lmms_eval_opt_deps", "medgemma"]) == 2
    err = capsys.readouterr().err
    lock = REPO / get_record("medgemma").env.requirements
    assert err.count("\n") == 1 and "no NVIDIA GPU" in err and "--allow_no_gpu" in err
    assert f"torch=={_locked_version(lock, 'torch')}" in err and f"torchvision=={_locked_version(lock, 'torchvision')}" in err
    assert "CUDA packages" in err and lock.name in err and "download.pytorch.org/whl/cpu) to keep it" in err
    assert ran == []  # nothing installed
    # no family lock: PyPI's CUDA build is named all the same
    assert install_vendored_lmms_eval.main(["--lmms_eval_opt_deps", "none"]) == 2
    assert "CUDA build" in capsys.readouterr().err and ran == []


def test_install_vendored_lmms_eval_installs_cuda_torch_without_a_gpu_when_told(capsys, monkeypatch):
    monkeypatch.setattr(install_vendored_lmms_eval, "_installed_torch", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    ran: list[list[str]] = []

    def fake_run(cmd, **kw):
        ran.append(cmd)
        return install_vendored_lmms_eval.subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(install_vendored_lmms_eval.subprocess, "run", fake_run)
    monkeypatch.delenv(install_vendored_lmms_eval.BUILD_WITHOUT_GPU_VAR, raising=False)
    assert install_vendored_lmms_eval.main(["--lmms_eval_opt_deps", "medgemma", "--allow_no_gpu"]) == 0
    assert "this installs torch==" in capsys.readouterr().err and len(ran) == 1
    monkeypatch.setenv(install_vendored_lmms_eval.BUILD_WITHOUT_GPU_VAR, "1")  # the launchers' override too
    assert install_vendored_lmms_eval.main(["--lmms_eval_opt_deps", "medgemma"]) == 0 and len(ran) == 2
    monkeypatch.delenv(install_vendored_lmms_eval.BUILD_WITHOUT_GPU_VAR)
    assert install_vendored_lmms_eval.main(["--lmms_eval_opt_deps", "medgemma", "--dry_run"]) == 0  # installs nothing
    assert "this installs torch==" in capsys.readouterr().err and len(ran) == 2
    # a GPU machine is not asked; a CPU torch or a CPU family brings no CUDA torch at all
    assert install_vendored_lmms_eval.check_gpu("medgemma", allow_no_gpu=False, has_gpu=True)
    assert install_vendored_lmms_eval.check_gpu("claude", allow_no_gpu=False, has_gpu=False) is None
    monkeypatch.setattr(install_vendored_lmms_eval, "_installed_torch", lambda: "2.13.0+cpu")
    assert install_vendored_lmms_eval.check_gpu("none", allow_no_gpu=False, has_gpu=False) is None


def test_install_medvision_ds_writes_phantom_only_where_no_data(tmp_path, monkeypatch):
    from medvision_bm.data.phantom import phantom_task_counts

    for name in ("MedVision_PLANNER_VERSION", "MedVision_ACK_RELEASE", "MedVision_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "empty"
    with pytest.raises(UserError, match="MedVision_PLANNER_VERSION"):  # the pin is required, as upstream's loader
        install_medvision_ds.prepare(empty, "auto")
    assert not empty.exists()
    for name, value in TEST_CONTRACT_ENV.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UserError, match="has no datasets"):
        install_medvision_ds.prepare(empty, "never")
    tasks = install_medvision_ds.prepare(empty, "auto")
    assert all(n > 0 for n in tasks.values())
    bundled = phantom_task_counts(empty, TEST_CONTRACT_ENV["MedVision_PLANNER_VERSION"],
                                  TEST_CONTRACT_ENV["MedVision_ACK_RELEASE"])
    for family_tasks in bundled.values():  # every bundled phantom task is offered, with the samples it lists
        assert {t: tasks.get(t) for t in family_tasks} == family_tasks
    plan = next((empty / "Datasets").glob("*/benchmark_plan_*.json.gz"))
    stamp = plan.stat().st_mtime_ns
    assert install_medvision_ds.prepare(empty, "auto") == tasks  # present: checked, not rewritten
    assert plan.stat().st_mtime_ns == stamp
    assert install_medvision_ds.main(["--data_dir", str(tmp_path / "absent"), "--phantom", "never"]) == 2

    # a tasks list: only its tasks are checked; unusable ones are named, none usable is an error
    listed = dict(bundled["AD"])
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps({**listed, "PhantomNone_BoxCoordinate_Task01_Axial": 1}))
    assert install_medvision_ds.prepare(empty, "never", tasks_list=tl) == listed
    tl.write_text(json.dumps({"PhantomNone_BoxCoordinate_Task01_Axial": 1}))
    with pytest.raises(UserError, match="none of the 1 task"):
        install_medvision_ds.prepare(empty, "never", tasks_list=tl)


def test_install_medvision_ds_refuses_a_folder_without_usable_tasks(tmp_path, monkeypatch):
    """Datasets whose plans are all newer than the pin: the folder offers nothing, which is an error."""
    monkeypatch.setenv("MedVision_PLANNER_VERSION", "1.0.0")
    monkeypatch.delenv("MedVision_ACK_RELEASE", raising=False)
    data = tmp_path / "Data"
    install_medvision_ds.prepare(data, "auto")
    for ds in (data / "Datasets").iterdir():
        if ds.name != "PhantomFetal":  # the phantom dataset first published at annotation 1.2.0
            shutil.rmtree(ds)
    with pytest.raises(UserError, match="offers no usable task"):
        install_medvision_ds.prepare(data, "never")
    monkeypatch.setenv("MedVision_PLANNER_VERSION", "latest")
    assert install_medvision_ds.prepare(data, "never")


# ------------------------------------------------------------------------------------------------ CLI
def test_envs_list_prints_one_line_per_registry_environment(tmp_path):
    res = envs_cli("list", env=base_env(ENVS_ROOT=str(tmp_path)))
    assert res.rc == 0, res.out
    lines = res.proc.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == list(environments())
    assert {ln.split()[1] for ln in lines} == {"absent"}
    js = envs_cli("list", "--json", env=base_env(ENVS_ROOT=str(tmp_path)))
    assert [json.loads(ln)["state"] for ln in js.proc.stdout.splitlines()] == ["absent"] * len(environments())


def test_envs_resolve_names_env_paths_and_entry_point(tmp_path):
    env = base_env(ENVS_ROOT=str(tmp_path))
    facts = dict(ln.split("=", 1) for ln in envs_cli("resolve", "--model", "claude", env=env).proc.stdout.splitlines())
    assert facts["MV_ENV_NAME"] == "eval-api" and facts["MV_ENV_PREFIX"] == str(tmp_path.resolve() / "eval-api")
    assert facts["MV_ENTRY"] == "medvision_bm.benchmark.eval__claude"
    keys = facts["MV_API_KEY_ENVS"].split()
    assert keys[:2] == ["ANTHROPIC_API_KEY", "OPENROUTER_API_KEY"] and len(keys) == len(set(keys))
    assert set(keys) == set(KEY_ENV_VARS)  # OPENAI_COMPATIBLE_API_KEY too: no registry record names it
    assert facts["MV_BUILD_LOCK"] == str(tmp_path.resolve() / "eval-api.lock")
    oracle = envs_cli("resolve", "--model", "oracle", env=env).proc.stdout
    assert "MV_ENTRY=medvision_bm.cli run --model oracle" in oracle
    for rec in REGISTRY.values():  # every non-baseline record has its eval__ module
        if rec.backend != "baseline" and rec.name not in ("hf", "openai-compatible"):
            assert (REPO / "src" / "medvision_bm" / "benchmark" / f"eval__{rec.name}.py").is_file(), rec.name


def test_gather_inputs_of_the_real_checkout():
    inputs = gather_inputs(environments()["eval-cpu"], REPO, "uv")
    assert inputs.lock_sha == core.lock_hash(REPO / "requirements" / "requirements_eval_cpu.txt")
    assert len(inputs.source_sha) == 64


def test_find_checkout_errors_name_the_variable(tmp_path):
    with pytest.raises(UserError, match="BENCHMARK_DIR"):
        core.find_checkout(env={"BENCHMARK_DIR": str(tmp_path)})
    assert core.find_checkout(env={"BENCHMARK_DIR": str(REPO)}) == REPO.resolve()
    assert core.envs_root(None, REPO, env={}) == (REPO / ".envs").resolve()
    assert core.envs_root(None, REPO, env={"ENVS_ROOT": str(tmp_path)}) == tmp_path.resolve()
    assert os.fspath(core.EnvPaths(CPU, tmp_path).inuse_lock).endswith("eval-cpu.inuse")


def test_environments_are_built_with_bytecode_unless_told_not_to(monkeypatch, tmp_path):
    """Users' environments get their bytecode at build time (a run never compiles lmms-eval itself); only
    MEDVISION_ENV_BYTECODE=0, which the test suite sets for its throwaway environments, leaves it out."""
    from medvision_bm.envs import core

    seen: list[list[str]] = []
    monkeypatch.setattr(core, "run", lambda cmd, what, **kw: seen.append(list(cmd)))
    monkeypatch.setattr(core.shutil, "which", lambda name: "/usr/bin/" + name)
    source = core.TorchSource(index_url=core.DEFAULT_TORCH_CPU_INDEX)
    monkeypatch.delenv("MEDVISION_ENV_BYTECODE", raising=False)
    core.install_lock(tmp_path / "python", tmp_path / "lock.txt", source)
    assert "--compile-bytecode" in seen[-1]
    monkeypatch.setenv("MEDVISION_ENV_BYTECODE", "0")
    core.install_lock(tmp_path / "python", tmp_path / "lock.txt", source, sync=True)
    assert "--compile-bytecode" not in seen[-1] and seen[-1][1:3] == ["pip", "sync"]
    assert core.bytecode_args({"MEDVISION_ENV_BYTECODE": "1"}) == ["--compile-bytecode"]
