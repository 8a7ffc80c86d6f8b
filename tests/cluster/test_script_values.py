"""Every value that reaches a generated job script is one line, quoted for bash and for sbatch's
directive parser, and never a secret (a secret is read from the job's environment, which submit fills).

The scripts are checked by `bash -n`, by a real `sbatch --test-only` (the one-node SLURM cluster, where it can
start), and by running them (`submit --local`): a `$(...)` in a path is never executed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_support import load_plan, one_line_error, submit

from fakes.provider_server import FakeProviderServer
from medvision_bm.cluster.shell import directive_value, sbatch_option
from medvision_bm.errors import UserError

#: A folder name a user may well have, plus what an attacker would put there (no newline: that is refused).
ODD = "Run #2 $(touch {pwned}) `touch {pwned}` 'q' \"dq\" back\\slash"


def _odd_root(tmp_path: Path) -> tuple[Path, Path]:
    pwned = tmp_path / "PWNED"
    return tmp_path / ODD.format(pwned=pwned), pwned


def _scripts(submit_dir: Path) -> list[Path]:
    return [*sorted((submit_dir / "jobs").glob("*.sbatch")), submit_dir / "submit.sh"]


def test_a_results_root_with_spaces_quotes_and_command_text_is_valid_bash_and_sbatch(tmp_path, phantom_dir,
                                                                                    phantom_lists, slurm_cluster):
    """Before: `#SBATCH --output=<root>/...` was unquoted, so sbatch stopped at the space (`Invalid directive
    found in batch script`)."""
    root, pwned = _odd_root(tmp_path)
    res = submit("--models", "oracle", "--families", "AD,TL", "--data_dir", phantom_dir, "--tasks_list_dir",
                 phantom_lists, "--results_root", root, "--status_dir", root / "st", "--python", sys.executable,
                 "--time", "00:10:00", "--sbatch_arg=--comment=nightly run #3 \"of\" 'five'", "--dry-run",
                 "--", "--sample_limit", "1")
    assert res.returncode == 0, res.stderr[-3000:]
    (sub,) = root.glob("submissions/*")
    assert len(load_plan(sub)["jobs"]) == 3
    env = {**os.environ, **slurm_cluster}
    for script in _scripts(sub):
        text = script.read_text()
        assert "\r" not in text
        checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, (script.name, checked.stderr)
        if script.suffix == ".sbatch":
            assert '#SBATCH --comment="nightly run #3 \\"of\\" \'five\'"' in text
            test = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, env=env,
                                  timeout=60)
            assert test.returncode == 0, (script.name, test.stderr)
            assert "to start at" in test.stderr, test.stderr
    assert not pwned.exists()


def test_running_the_scripts_executes_nothing_from_a_path(tmp_path, phantom_dir, phantom_lists):
    root, pwned = _odd_root(tmp_path)
    res = submit("--models", "oracle", "--families", "AD", "--data_dir", phantom_dir, "--tasks_list_dir",
                 phantom_lists, "--results_root", root, "--status_dir", root / "st", "--python", sys.executable,
                 "--local", "1", "--", "--sample_limit", "1")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert not pwned.exists()
    assert list((root / "MedVision-Phantom-AD" / "oracle").glob("*/*/results.json"))
    assert (root / "summary" / "index.html").is_file()


@pytest.mark.parametrize("args,needle", [
    (["--account", "lab\nrm -rf /x"], "--account 'lab\\nrm -rf /x' contains a control character"),
    (["--mem", "4G\r"], "--mem '4G\\r'"),
    (["--qos", "hi\tgh"], "--qos"),
    (["--sbatch_arg", "--comment=a\ntouch /x/P"], "--sbatch_arg"),
    (["--submit_dir", "/x/S\n$(touch /x/P)"], "--submit_dir"),
    (["--", "--stop_strings", "</a>\ntouch /x/P"], "runner flag '</a>\\ntouch /x/P'"),
    (["--model_flags", "oracle=--pace_s 0\n--x"], "--model_flags"),
])
def test_a_control_character_in_any_value_is_one_line_and_writes_nothing(tmp_path, phantom_dir, phantom_lists,
                                                                          args, needle):
    res = submit("--models", "oracle", "--families", "AD", "--data_dir", phantom_dir, "--tasks_list_dir",
                 phantom_lists, "--results_root", tmp_path / "res", "--dry-run", *args)
    assert needle in one_line_error(res)
    assert not (tmp_path / "res").exists()


def test_a_control_character_in_a_launcher_setting_is_refused(tmp_path, phantom_dir, phantom_lists):
    res = submit("--models", "oracle", "--families", "AD", "--data_dir", phantom_dir, "--tasks_list_dir",
                 phantom_lists, "--results_root", tmp_path / "res", "--dry-run",
                 env={"TORCH_INDEX_URL": "https://w.example/simple\ntouch /x/P"})
    assert "TORCH_INDEX_URL" in one_line_error(res)


def test_sbatch_options_are_one_option_each():
    assert sbatch_option("--constraint=a100") == "--constraint=a100"
    assert sbatch_option("--exclusive") == "--exclusive"
    assert sbatch_option("-N2") == "-N2"
    assert sbatch_option("--chdir=/x/my dir") == '--chdir="/x/my dir"'
    assert directive_value('a"b\\c', "x") == '"a\\"b\\\\c"'
    with pytest.raises(UserError, match="not one sbatch option"):
        sbatch_option("--nodes 2")


def test_no_secret_reaches_a_job_script_or_the_dry_run_and_the_jobs_still_get_it(tmp_path, phantom_dir,
                                                                                   phantom_lists):
    """Before: `--model_flags 'openai-compatible=--base_url http://u:PW@...'` and credentials in TORCH_INDEX_URL
    were written into every job script and printed by the dry run."""
    password, token, index_pw = "Job-Pw-6610", "qtok-7731-abcd", "Idx-Pw-2208"
    key = "sk-submit-planted-44556677"
    with FakeProviderServer() as server:
        url = server.url.replace("http://", f"http://svc:{password}@") + f"/v1?token={token}"
        flags = f"openai-compatible=--base_url {url} --model_name served-m"
        common = ("--models", "openai-compatible", "--model_flags", flags, "--families", "AD", "--data_dir",
                  phantom_dir, "--tasks_list_dir", phantom_lists, "--status_dir", tmp_path / "st",
                  "--python", sys.executable)
        env = {"TORCH_INDEX_URL": f"https://ci:{index_pw}@wheels.example/simple",
               "OPENAI_COMPATIBLE_API_KEY": key}
        dry = submit(*common, "--results_root", tmp_path / "dry", "--dry-run", "--", "--sample_limit", "1", env=env)
        assert dry.returncode == 0, dry.stderr[-3000:]
        ran = submit(*common, "--results_root", tmp_path / "ran", "--local", "1", "--", "--sample_limit", "1", env=env)
        sent = [r for r in server.received if r.method == "POST"]
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert sent and all(r.headers["Authorization"].startswith("Basic ") for r in sent)  # the job got the URL
    texts = {"dry-run stdout": dry.stdout + dry.stderr, "local stdout": ran.stdout + ran.stderr}
    for folder in (tmp_path / "dry", tmp_path / "ran"):
        for path in folder.rglob("*"):
            if path.is_file():
                texts[str(path)] = path.read_text(errors="replace")
    assert any(name.endswith(".sbatch") for name in texts)
    for name, text in texts.items():
        for secret in (password, token, index_pw, key):
            assert secret not in text, (name, secret)
    script = next((tmp_path / "dry").glob("submissions/*/jobs/eval-*.sbatch")).read_text()
    assert "${MEDVISION_JOB_SECRET_1:?" in script and "reads MEDVISION_JOB_SECRET_" in script


def test_a_secret_with_sbatch_export_is_refused_before_any_job(tmp_path, phantom_dir, phantom_lists):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/bash\necho \"$*\" >> {tmp_path / 'sbatch.log'}\necho 7\n")
    (bin_dir / "sbatch").chmod(0o755)
    flags = "openai-compatible=--base_url http://svc:Export-Pw-1188@127.0.0.1:9/v1 --model_name m"
    res = submit("--models", "openai-compatible", "--model_flags", flags, "--families", "AD", "--data_dir",
                 phantom_dir, "--tasks_list_dir", phantom_lists, "--results_root", tmp_path / "res",
                 "--python", sys.executable, "--sbatch_arg=--export=NONE",
                 env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    line = one_line_error(res, "--export=NONE", "MEDVISION_JOB_SECRET_1")
    assert "Export-Pw-1188" not in line and not (tmp_path / "sbatch.log").exists()


def test_a_base_url_token_no_key_shape_betrays_reaches_no_job_script(tmp_path, phantom_dir, phantom_lists):
    """A path segment with one digit and a ``?code=`` value (secrets.redact_url: not plain words) are kept out of
    the scripts and the dry run like any secret."""
    segment, code = "Gw7hTqXpLmNz", "Cq4dWvRs"
    flags = (f"openai-compatible=--base_url http://127.0.0.1:9/gw/{segment}/v1?code={code}&region=eu "
             "--model_name served-m")
    dry = submit("--models", "openai-compatible", "--model_flags", flags, "--families", "AD", "--data_dir",
                 phantom_dir, "--tasks_list_dir", phantom_lists, "--status_dir", tmp_path / "st", "--python",
                 sys.executable, "--results_root", tmp_path / "dry", "--dry-run", "--", "--sample_limit", "1")
    assert dry.returncode == 0, dry.stderr[-3000:]
    texts = {"dry-run": dry.stdout + dry.stderr}
    texts.update({str(p): p.read_text(errors="replace") for p in (tmp_path / "dry").rglob("*") if p.is_file()})
    assert any(name.endswith(".sbatch") for name in texts)
    assert [(name, s) for name, text in texts.items() for s in (segment, code) if s in text] == []
