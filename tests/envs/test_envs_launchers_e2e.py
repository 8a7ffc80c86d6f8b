"""Launchers for real: uv builds environments from nothing, installs our wheel under flock, runs phantom tasks.

Covers the CPU family (two launchers at once on one fresh env, then a warm rerun), the API family against a
local OpenAI-compatible server, --env_setup_only, --skip_env_setup, a build killed half-way, a changed lock,
INSTALL_METHOD=2 and the conda path (with a conda stand-in: conda channels are unreachable here).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from envs_support import (
    REPO,
    base_env,
    copy_checkout_from,
    envs_cli,
    frozen_checkout,
    launch,
    marker,
    needs_build,
    record_time,
    results_json,
    run_env,
)
from fake_openai import FakeOpenAIServer

from medvision_bm.envs.core import lock_hash

pytestmark = [pytest.mark.slow, needs_build]
CPU_LOCK = Path("requirements") / "requirements_eval_cpu.txt"
API_LOCK = Path("requirements") / "requirements_eval_api.txt"


def _lock(env: dict[str, str], rel: Path) -> str:
    return lock_hash(Path(env["BENCHMARK_DIR"]) / rel)


def _env_seconds(out: str) -> float:
    m = re.search(r"eval-\w+: (?:ready, reused as it is \(installed nothing\) in|built in|rebuilt in|package in) "
                  r"([\d.]+) s", out)
    assert m, out[-3000:]
    return float(m[1])


def _png_size(data_url: str) -> tuple[int, int]:
    raw = base64.b64decode(data_url.split(",", 1)[1])
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", raw[16:24])
    return width, height


def _images(body: dict) -> list[str]:
    urls = []
    for msg in body.get("messages", []):
        if isinstance(msg.get("content"), list):
            urls += [p["image_url"]["url"] for p in msg["content"] if p.get("type") == "image_url"]
    return urls


# ------------------------------------------------------------------------------------------------ CPU family
def test_two_launchers_at_once_build_the_cpu_env_once_and_both_finish(cpu_cold):
    runs = cpu_cold["runs"]
    for key, run in runs.items():
        assert run.rc == 0, f"launcher {key} failed:\n{run.out[-4000:]}"
    builders = [k for k, r in runs.items() if "medvision-bm envs: building eval-cpu" in r.out]
    assert len(builders) == 1, {k: r.out[-2000:] for k, r in runs.items()}
    other = runs["b" if builders == ["a"] else "a"]
    # The second launcher waited for the build lock, then found the env ready and installed nothing.
    assert "ready, reused as it is (installed nothing)" in other.out
    assert "uv pip" not in other.out and "uv venv" not in other.out
    built = runs[builders[0]].out
    record_time("eval-cpu cold: env build alone (uv venv + sync + wheel + check)", _env_seconds(built))
    assert "uv pip sync" in built and "--find-links" in built and "uv build --wheel" in built

    prefix = cpu_cold["root"] / "eval-cpu"
    m = marker(prefix)
    assert m["lock_hash"] == _lock(cpu_cold["env"]["a"], CPU_LOCK)
    assert m["mode"] == "frozen" and m["tool"] == "uv" and m["python_request"] == "3.11"
    assert m["versions"]["torch"] == "2.13.0+cpu" and m["versions"]["torchvision"] is None
    assert m["versions"]["lmms-eval"] == "0.7.3" and m["versions"]["filelock"].startswith("3.")
    # Our wheel was built outside the checkout and cached under the envs root.
    assert list((cpu_cold["root"] / ".wheels").glob("*/medvision_bm-*.whl"))
    checkout = Path(cpu_cold["env"]["a"]["BENCHMARK_DIR"])
    assert sorted(p.name for p in checkout.iterdir()) == sorted(
        ["pyproject.toml", "README.md", "src", "requirements", "script", "tasks_list"])

    for key, model in (("a", "oracle"), ("b", "random-box")):
        res_dir = Path(cpu_cold["env"][key]["RESULTS_DIR"])
        results = results_json(runs[key].out)
        assert len(results) == 1 and results[0]["complete"] and results[0]["metrics"]["n"] == 2
        assert results[0]["versions"]["torch"] == "2.13.0+cpu"
        logs = list((res_dir / "logs").glob(f"{model}_*.log"))
        assert len(logs) == 1 and f"results: {res_dir}/" in logs[0].read_text()
    oracle = results_json(runs["a"].out)[0]
    assert oracle["metrics"]["SuccessRate"] == 1.0 and oracle["metrics"]["avgMAE"] == 0
    # The first launcher wrote the phantom data (the other waited for it, then found it).
    assert (Path(cpu_cold["env"]["a"]["DATA_DIR"]) / "Datasets").is_dir()


def test_warm_rerun_reuses_the_env_and_installs_nothing(cpu_cold, envs_work, task_lists, shared_data):
    prefix = cpu_cold["root"] / "eval-cpu"
    before = (prefix / "medvision-env.json").stat().st_mtime_ns, marker(prefix)
    env = run_env(envs_work, "warm", cpu_cold["root"], shared_data, task_lists["AD"])
    run = launch("script/benchmark-AD/oracle.sh", "--sample_limit", "2", "--no_progress", env=env)
    assert run.rc == 0, run.out[-4000:]
    assert "ready, reused as it is (installed nothing)" in run.out
    assert "uv pip" not in run.out and "uv build" not in run.out and "building" not in run.out
    assert ((prefix / "medvision-env.json").stat().st_mtime_ns, marker(prefix)) == before
    assert results_json(run.out)[0]["metrics"]["SuccessRate"] == 1.0
    env_s = _env_seconds(run.out)
    record_time("eval-cpu warm: env check inside the builder (reused, nothing installed)", env_s)
    record_time("eval-cpu warm: whole launcher run (1 task, 2 samples)", run.seconds)
    assert env_s < 5
    setup_only = launch("script/benchmark-AD/oracle.sh", "--env_setup_only", env=env)
    assert setup_only.rc == 0 and "installed nothing" in setup_only.out, setup_only.out[-3000:]
    record_time("eval-cpu warm: whole launcher with --env_setup_only (env reused, nothing evaluated)",
                setup_only.seconds)
    assert setup_only.seconds < 20


def test_the_launcher_exits_with_the_entry_points_code(cpu_cold, envs_work, task_lists, shared_data):
    env = run_env(envs_work, "badflag", cpu_cold["root"], shared_data, task_lists["AD"])
    run = launch("script/benchmark-AD/oracle.sh", "--no_such_flag", env=env)
    assert run.rc == 2, run.out[-3000:]
    assert "unrecognized arguments: --no_such_flag" in run.out
    log = next((Path(env["RESULTS_DIR"]) / "logs").glob("oracle_AD_*.log")).read_text()
    assert "unrecognized arguments: --no_such_flag" in log


def test_skip_env_setup_runs_without_touching_a_stale_env(cpu_cold, envs_work, task_lists, shared_data, tmp_path):
    checkout = copy_checkout_from(Path(cpu_cold["env"]["a"]["BENCHMARK_DIR"]), tmp_path)
    init = checkout / "src" / "medvision_bm" / "__init__.py"
    init.write_text(init.read_text() + "# changed source: the env is stale for this checkout\n")
    prefix = cpu_cold["root"] / "eval-cpu"
    before = (prefix / "medvision-env.json").read_bytes()
    env = run_env(envs_work, "skip", cpu_cold["root"], shared_data, task_lists["TL"], BENCHMARK_DIR=str(checkout))
    check = envs_cli("check", "--env", "eval-cpu", env=env)
    assert check.rc == 1 and "stale" in check.out and "source changed" in check.out
    run = launch("script/benchmark-TL/oracle.sh", "--sample_limit", "1", "--skip_env_setup", "--no_progress",
                 env=env)
    assert run.rc == 0, run.out[-4000:]
    assert "medvision-bm envs" not in run.out and "uv " not in run.out
    assert (prefix / "medvision-env.json").read_bytes() == before
    assert results_json(run.out)[0]["complete"]


# ------------------------------------------------------------------------------------------------ API family
def test_api_family_builds_and_runs_against_a_local_openai_compatible_server(envs_work, task_lists, shared_data):
    root = envs_work / "envs-api"
    with FakeOpenAIServer() as server:
        env = run_env(envs_work, "api-gpt", root, shared_data, task_lists["TL"],
                      OPENAI_API_KEY="sk-test-123\r\n  ")
        # a model code whose image handling upstream verified (the perceived size T/L prompts state needs one)
        run = launch("script/benchmark-TL/gpt.sh", "--sample_limit", "2", "--no_progress", "--base_url",
                     server.base_url, "--openai_model_code", "gpt-4o", env=env)
        assert run.rc == 0, run.out[-4000:]
        assert "medvision-bm envs: building eval-api" in run.out and "uv pip sync" in run.out
        record_time("eval-api cold: env built from nothing + GPT launcher run (TL, 2 samples)", run.seconds)
        record_time("eval-api cold: env build alone", _env_seconds(run.out))
        posts = [r for r in server.requests if r["method"] == "POST"]
        assert len(posts) >= 2
        # The trailing CR/LF/spaces of the key were stripped by the launcher; GPT on TL sends 512x512 slices (the
        # launcher's RESHAPE_IMAGE_HW), the size the store records for each sample.
        assert {r["auth"] for r in posts} == {"Bearer sk-test-123"}
        docs = [json.loads(ln) for f in Path(env["RESULTS_DIR"]).glob("*/*/*/docs.jsonl")
                for ln in f.read_text().splitlines() if ln.strip()]
        assert len(docs) == 2 and all(d["view"]["reshape_hw"] == d["view"]["image_hw"] == [512, 512] for d in docs)
        assert {_png_size(u) for r in posts for u in _images(r["body"])} == {(512, 512)}
        assert all(r["body"]["model"] == "gpt-4o" for r in posts)
        results = results_json(run.out)
        assert len(results) == 1 and results[0]["metrics"]["SuccessRate"] == 1.0
        assert results[0]["versions"]["openai"] is not None
        m = marker(root / "eval-api")
        assert m["lock_hash"] == _lock(env, API_LOCK) and m["versions"]["torch"] == "2.13.0+cpu"
        assert m["versions"]["torchvision"] is None
        log = next((Path(env["RESULTS_DIR"]) / "logs").glob("openai_TL_*.log")).read_text()
        assert "sk-test-123" not in log and "sk-test-123" not in (root / "eval-api" / "medvision-env.json").read_text()

        # A second API launcher on the same env: reused as it is, then evaluates through the server.
        n_before = len(server.requests)
        env2 = run_env(envs_work, "api-compat", root, shared_data, task_lists["AD"])
        run2 = launch("script/benchmark-AD/openai-compatible.sh", "--sample_limit", "2", "--no_progress",
                      "--base_url", server.base_url, "--model_name", "fake-vlm", env=env2)
        assert run2.rc == 0, run2.out[-4000:]
        assert "ready, reused as it is (installed nothing)" in run2.out and "uv pip" not in run2.out, run2.out[-3000:]
        assert len(server.requests) >= n_before + 2
        record_time("eval-api warm: env check (reused, nothing installed)", _env_seconds(run2.out))
        record_time("eval-api warm: openai-compatible launcher run (AD, 2 samples)", run2.seconds)


# ------------------------------------------------------------------------------------------------ killed build
@pytest.fixture(scope="module")
def rebuilt_after_kill(envs_work, task_lists, shared_data):
    """A build killed half-way, then a launcher with --env_setup_only on the same envs root."""
    root = envs_work / "envs-kill"
    env = run_env(envs_work, "kill", root, shared_data, task_lists["AD"])
    proc = subprocess.Popen([sys.executable, "-m", "medvision_bm.cli", "envs", "build", "--env", "eval-cpu"],
                            env=env, cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    site = root / "eval-cpu" / "lib" / "python3.11" / "site-packages"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if site.is_dir() and len(list(site.iterdir())) > 8:  # uv is installing packages
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the build ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed_state = {
        "marker": (root / "eval-cpu" / "medvision-env.json").exists(),
        "list": envs_cli("list", env=env),
        "check": envs_cli("check", "--env", "eval-cpu", env=env),
    }
    run = launch("script/benchmark-AD/oracle.sh", "--env_setup_only", env=env)
    record_time("eval-cpu: rebuild of a half-built env via --env_setup_only", run.seconds)
    return {"root": root, "env": env, "killed": killed_state, "run": run}


def test_half_built_env_is_detected_and_rebuilt_never_used(rebuilt_after_kill):
    killed = rebuilt_after_kill["killed"]
    assert killed["marker"] is False
    line = next(ln for ln in killed["list"].proc.stdout.splitlines() if ln.startswith("eval-cpu "))
    assert line.split()[1] == "stale" and "incomplete" in line
    assert killed["check"].rc == 1
    run = rebuilt_after_kill["run"]
    assert run.rc == 0, run.out[-4000:]
    assert re.search(r"building eval-cpu at .* \(incomplete: no completion marker", run.out)
    assert marker(rebuilt_after_kill["root"] / "eval-cpu")["lock_hash"] == _lock(rebuilt_after_kill["env"], CPU_LOCK)


def test_env_setup_only_builds_and_evaluates_nothing(rebuilt_after_kill):
    run, env = rebuilt_after_kill["run"], rebuilt_after_kill["env"]
    assert "environment for oracle (eval-cpu) is ready" in run.out
    assert "samples to answer" not in run.out
    results = Path(env["RESULTS_DIR"])
    assert [p.name for p in results.iterdir()] == ["logs"] and not Path(env["STATUS_FILE"]).exists()
    assert envs_cli("check", "--env", "eval-cpu", env=env).rc == 0


def test_changed_lock_rebuilds_and_a_comment_does_not(rebuilt_after_kill, tmp_path):
    checkout = copy_checkout_from(Path(rebuilt_after_kill["env"]["BENCHMARK_DIR"]), tmp_path)
    env = {**rebuilt_after_kill["env"], "BENCHMARK_DIR": str(checkout)}
    lock = checkout / "requirements" / "requirements_eval_cpu.txt"
    lock.write_text(lock.read_text() + "# a comment changes nothing\n")
    check = envs_cli("check", "--env", "eval-cpu", env=env)
    assert check.rc == 0, check.out
    # Drop one leaf package (zss, only lmms-eval needs it) from the lock: the env is stale and rebuilt.
    text = lock.read_text()
    block = re.search(r"^zss==[^\n]*\n(?:[ \t]+[^\n]*\n)*", text, flags=re.M)
    assert block
    lock.write_text(text.replace(block[0], ""))
    check = envs_cli("check", "--env", "eval-cpu", env=env)
    assert check.rc == 1 and "requirements/requirements_eval_cpu.txt changed" in check.out, check.out
    build = envs_cli("build", "--env", "eval-cpu", env=env)
    assert build.rc == 0 and "eval-cpu: rebuilt" in build.out, build.out[-3000:]
    record_time("eval-cpu: rebuild after a lock change (envs build)", build.seconds)
    prefix = rebuilt_after_kill["root"] / "eval-cpu"
    assert marker(prefix)["lock_hash"] == lock_hash(lock)
    assert not list(prefix.glob("lib/python3.11/site-packages/zss-*.dist-info"))
    again = envs_cli("build", "--env", "eval-cpu", env=env)
    assert again.rc == 0 and "reused as it is (installed nothing)" in again.out


# ------------------------------------------------------------------------------------------------ method 2, conda
def test_install_method_2_lets_the_entry_point_install_the_lock(envs_work, task_lists, shared_data):
    root = envs_work / "envs-m2"
    env = run_env(envs_work, "m2", root, shared_data, task_lists["detect"], INSTALL_METHOD="2")
    run = launch("script/benchmark-detect/oracle.sh", "--sample_limit", "1", "--no_progress", env=env)
    assert run.rc == 0, run.out[-4000:]
    assert "uv pip sync" not in run.out  # the launcher made a bare env with medvision-bm only
    assert re.search(r"setting up eval-cpu: \d+ pinned packages missing", run.out)
    assert "--skip_env_setup" not in run.out.split("running:")[1].splitlines()[0]
    m = marker(root / "eval-cpu")
    assert m["mode"] == "entry-point" and m["lock_hash"] == _lock(env, CPU_LOCK)
    assert envs_cli("check", "--env", "eval-cpu", env=env).rc == 0
    record_time("INSTALL_METHOD=2 cold: bootstrap + entry point installs + run", run.seconds)
    assert "installing through the entry point" in run.out
    again = launch("script/benchmark-detect/oracle.sh", "--env_setup_only", env=env)
    assert again.rc == 0, again.out[-3000:]
    assert "setting up eval-cpu" not in again.out and "installed nothing" in again.out


def test_conda_tool_creates_a_prefix_with_conda(envs_work, tmp_path):
    """conda is unreachable here: a stand-in `conda` that logs its arguments and makes the prefix with uv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "conda.log"
    shim = bindir / "conda"
    shim.write_text(f"""#!/usr/bin/env bash
echo "$*" >> {log}
prefix=""; py=""
while [ $# -gt 0 ]; do
  case "$1" in --prefix) prefix="$2"; shift ;; python=*) py="${{1#python=}}" ;; esac; shift
done
exec uv venv --quiet --python "$py" "$prefix"
""")
    shim.chmod(0o755)
    root = envs_work / "envs-conda"
    env = base_env(ENVS_ROOT=str(root), ENV_TOOL="conda", PATH=f"{bindir}:{os.environ['PATH']}",
                   BENCHMARK_DIR=str(frozen_checkout(envs_work)))
    build = envs_cli("build", "--env", "eval-cpu", "--method", "2", env=env)
    assert build.rc == 0, build.out[-3000:]
    assert log.read_text().split() == ["create", "--yes", "--quiet", "--prefix", str(root / "eval-cpu"),
                                       "python=3.11", "pip"]
    assert marker(root / "eval-cpu")["tool"] == "conda"
    # The same env seen with the default tool is stale (built by another tool).
    listed = envs_cli("list", env={**env, "ENV_TOOL": "uv"})
    line = next(ln for ln in listed.proc.stdout.splitlines() if ln.startswith("eval-cpu "))
    assert line.split()[1] == "stale" and "built with conda" in line


# ------------------------------------------------------------------------------------------------ helper entry point
def test_install_vendored_lmms_eval_installs_the_pinned_harness_and_keeps_cpu_torch(envs_work, tmp_path):
    from medvision_bm.envs.builder import ensure_wheel, install_wheel
    from medvision_bm.envs.core import source_hash

    checkout = frozen_checkout(envs_work)
    venv = tmp_path / "venv"
    py = venv / "bin" / "python"
    env = base_env(BENCHMARK_DIR=str(checkout))
    subprocess.run(["uv", "venv", "--quiet", "--python", "3.11", str(venv)], check=True, env=env)
    subprocess.run(["uv", "pip", "install", "--quiet", "--python", str(py), "--find-links", env["TORCH_FIND_LINKS"],
                    "torch==2.13.0+cpu"], check=True, env=env)
    install_wheel(py, ensure_wheel(checkout, source_hash(checkout), tmp_path / "wheels"))
    start = time.monotonic()
    res = subprocess.run([str(py), "-m", "medvision_bm.benchmark.install_vendored_lmms_eval",
                          "--lmms_eval_opt_deps", "claude"], env=env, text=True, capture_output=True, timeout=600)
    record_time("install_vendored_lmms_eval into a venv with CPU torch", time.monotonic() - start)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "--excludes" in res.stderr and "torch==2.13.0+cpu" in res.stderr
    code = ("import json; from importlib import metadata as m\n"
            "def v(n):\n"
            "    try: return m.version(n)\n"
            "    except m.PackageNotFoundError: return None\n"
            "print(json.dumps({n: v(n) for n in ('lmms-eval', 'torch', 'torchvision', 'filelock')}))")
    versions = json.loads(subprocess.run([str(py), "-c", code], text=True, capture_output=True, check=True).stdout)
    assert versions["lmms-eval"] == "0.7.3" and versions["torch"] == "2.13.0+cpu"
    assert versions["torchvision"] is None and int(versions["filelock"].split(".")[0]) < 4
