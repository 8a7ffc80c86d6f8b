"""A launcher's log always lands in $RESULTS_DIR/logs whatever MODEL_NAME says, and neither the log
nor the terminal shows a key or a URL's credentials.

The launchers run against an environment that exists already (this interpreter's own venv, linked in as the
family's environment) with --skip_env_setup, so nothing is built."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from envs_support import REPO, base_env, launch

from fakes.provider_server import FakeProviderServer
from mvtest_support import TEST_CONTRACT_ENV

VENV = Path(sys.prefix)


@pytest.fixture()
def envs_root(tmp_path) -> Path:
    """An ENVS_ROOT whose eval-cpu and eval-api are this interpreter's venv."""
    if not (VENV / "pyvenv.cfg").is_file():
        pytest.skip("the tests do not run in a venv")
    root = tmp_path / "envs"
    root.mkdir()
    for name in ("eval-cpu", "eval-api"):
        (root / name).symlink_to(VENV)
    return root


def _env(tmp_path: Path, envs_root: Path, phantom_dir: Path, phantom_lists: Path, family: str, **extra: str):
    return base_env(ENVS_ROOT=str(envs_root), DATA_DIR=str(phantom_dir), PREPARE_DATA="0",
                    TASKS_LIST=str(phantom_lists / f"tasks_MedVision-Phantom-{family}.json"),
                    RESULTS_DIR=str(tmp_path / "box" / "Results"), STATUS_FILE=str(tmp_path / "box" / "st.json"),
                    **TEST_CONTRACT_ENV, **extra)


def _files(root: Path) -> set[Path]:
    """Files under ``root`` but not in the linked environments (their in-use lock files are the launcher's)."""
    return {p for p in root.rglob("*") if p.is_file() and "envs" not in p.relative_to(root).parts[:1]}


@pytest.mark.parametrize("model_name", ["../../escaped-logs/y", "Org/Team/model-7B", "..", "a\tb"])
def test_model_name_never_moves_or_loses_the_log(tmp_path, envs_root, phantom_dir, phantom_lists, model_name):
    """Before: `../../escaped-logs/y` wrote the log two folders above RESULTS_DIR, `Org/Team/model-7B` lost it
    (tee: No such file or directory). Now the log is in RESULTS_DIR/logs and holds the runner's refusal."""
    env = _env(tmp_path, envs_root, phantom_dir, phantom_lists, "AD", MODEL_NAME=model_name)
    before = _files(tmp_path)
    run = launch("script/benchmark-AD/oracle.sh", "--skip_env_setup", "--sample_limit", "1", "--no_progress", env=env)
    assert run.rc == 2, run.out[-3000:]
    assert "Traceback" not in run.out
    new = _files(tmp_path) - before
    logs = tmp_path / "box" / "Results" / "logs"
    assert new and all(p.parent == logs for p in new), sorted(map(str, new))
    (log,) = new
    assert log.name.endswith(".log") and "/" not in log.name and not log.name.startswith(".")
    text = log.read_text()
    assert "--model_name" in text and "it names a folder" in text, text[-2000:]  # the refusal is in the log


def test_a_vendor_model_name_logs_under_the_results_folder_name(tmp_path, envs_root, phantom_dir, phantom_lists):
    with FakeProviderServer() as server:
        env = _env(tmp_path, envs_root, phantom_dir, phantom_lists, "TL", MODEL_NAME="Acme/Vision-3B-Chat")
        run = launch("script/benchmark-TL/openai-compatible.sh", "--skip_env_setup", "--sample_limit", "1",
                     "--no_progress", "--base_url", server.url + "/v1", env=env)
    assert run.rc == 0, run.out[-3000:]
    results = tmp_path / "box" / "Results"
    assert (results / "Acme_Vision-3B-Chat").is_dir()
    (log,) = (results / "logs").glob("Acme_Vision-3B-Chat_TL_*.log")
    assert "results:" in log.read_text()


def test_no_key_or_url_credential_reaches_the_log_or_the_terminal(tmp_path, envs_root, phantom_dir, phantom_lists):
    """A password in --base_url, a token in its query, a key in the environment and the credentials of
    TORCH_INDEX_URL: none is in the log, on stdout/stderr, or in any file under the results folder."""
    password, token, key = "Launch-Pw-5521", "qtok-8812-xyzw", "sk-launcher-planted-00112233"
    index_pw = "Index-Pw-3390"
    with FakeProviderServer() as server:
        url = server.url.replace("http://", f"http://ops:{password}@") + f"/v1?access_token={token}"
        env = _env(tmp_path, envs_root, phantom_dir, phantom_lists, "AD", OPENAI_COMPATIBLE_API_KEY=key,
                   TORCH_INDEX_URL=f"https://builder:{index_pw}@wheels.example/simple")
        env.pop("TORCH_FIND_LINKS")
        run = launch("script/benchmark-AD/openai-compatible.sh", "--skip_env_setup", "--sample_limit", "1",
                     "--no_progress", "--base_url", url, "--model_name", "served-vlm", env=env)
        dry = launch("script/benchmark-AD/openai-compatible.sh", "--base_url", url, "--model_name", "m",
                     env={**env, "MV_DRY_RUN": "1"})
        sent = [r for r in server.received if r.method == "POST"]
    assert run.rc == 0, run.out[-3000:]
    assert sent and all(r.headers["Authorization"].startswith("Basic ") for r in sent)
    assert all(token in r.path or r.path.endswith("/chat/completions") for r in sent)
    secrets = (password, token, key, index_pw)
    outputs = {"launcher output": run.out, "dry run": dry.out}
    for path in _files(tmp_path / "box"):
        outputs[str(path)] = path.read_text(errors="replace")
    assert any("logs" in name for name in outputs)
    for name, text in outputs.items():
        for secret in secrets:
            assert secret not in text, (name, secret)
    assert "ops:***@" in run.out and "access_token=***" in run.out  # where the URL points is still readable
    assert dry.rc == 0 and "--base_url" in dry.out and "ops:***@" in dry.out
    assert json.loads(next((tmp_path / "box" / "Results").glob("served-vlm/*/*/results.json")).read_text())


def test_skip_env_setup_reaches_the_entry_point_once(tmp_path, envs_root, phantom_dir, phantom_lists):
    env = {**_env(tmp_path, envs_root, phantom_dir, phantom_lists, "AD"), "MV_DRY_RUN": "1"}
    run = launch("script/benchmark-AD/oracle.sh", "--skip_env_setup", "--sample_limit", "1", env=env)
    assert run.rc == 0, run.out
    assert run.proc.stdout.split().count("--skip_env_setup") == 1, run.proc.stdout


def test_the_tee_keeps_progress_lines_live_and_redacts_across_reads(tmp_path):
    """The tee passes a line on as soon as it ends (\\r too) and redacts a secret split over two reads."""
    import subprocess

    log = tmp_path / "t.log"
    env = {**os.environ, "OPENAI_API_KEY": "sk-split-planted-998877665544"}
    proc = subprocess.Popen([sys.executable, "-m", "medvision_bm.envs.redact_tee", str(log), "--"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdin and proc.stdout
    proc.stdin.write(b" 10%|#\r")
    proc.stdin.flush()
    assert proc.stdout.read(7) == b" 10%|#\r"  # before any newline
    proc.stdin.write(b"key sk-split-plan")
    proc.stdin.flush()
    proc.stdin.write(b"ted-998877665544 end\n")
    proc.stdin.close()
    rest = proc.stdout.read()
    assert proc.wait(timeout=30) == 0
    assert rest == b"key *** end\n" and log.read_bytes() == b" 10%|#\rkey *** end\n"
