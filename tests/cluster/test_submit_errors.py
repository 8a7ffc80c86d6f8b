"""Bad input to `medvision-bm submit` / `status`: one line on stderr naming the input and the fix, exit 2."""

from __future__ import annotations

import dataclasses

import pytest
from cluster_support import one_line_error, submit

from medvision_bm.cli import submit as submit_cli
from medvision_bm.models.registry import REGISTRY
from mvtest_support import run_cli


def test_no_sbatch_on_path(tmp_path, phantom_dir, empty_path):
    res = submit("--models", "oracle", "--families", "AD", "--data_dir", phantom_dir, "--results_root", tmp_path,
                 env=empty_path)
    one_line_error(res, "sbatch not found on PATH", "--local N", "--dry-run")
    assert not (tmp_path / "submissions").exists()


def test_model_without_environment_spec(monkeypatch, tmp_path, phantom_dir, capsys):
    record = dataclasses.replace(REGISTRY["oracle"], name="no-env", env=None)
    monkeypatch.setitem(REGISTRY, "no-env", record)
    rc = submit_cli.cli_main(["--models", "oracle,no-env", "--families", "AD", "--data_dir", str(phantom_dir),
                              "--results_root", str(tmp_path), "--dry-run"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln]
    assert rc == 2 and len(err) == 1, err
    assert "model 'no-env' has no environment spec" in err[0] and "env=EnvSpec(" in err[0]
    assert not (tmp_path / "submissions").exists()


@pytest.mark.parametrize(("args", "needles"), [
    (["--models", "nosuchmodel"], ["unknown model 'nosuchmodel'"]),
    (["--models", "oracle", "--families", "AD,XY"], ["--families", "'XY'", "AD,TL,detect"]),
    (["--models", "oracle", "--shards", "0"], ["--shards '0'", "N >= 1"]),
    (["--models", "oracle", "--shards", "3:rows"], ["--shards '3:rows'"]),
    (["--models", "oracle", "--shards", "mean=2"], ["names model 'mean', which is not in --models"]),
    (["--models", "oracle", "--model_flags", "oracle"], ["--model_flags 'oracle'", "MODEL='--flag value"]),
    (["--models", "oracle", "--", "--no_such_flag"], ["runner flags for oracle", "--no_such_flag"]),
    (["--models", "oracle", "--", "--sample_limit", "zero"], ["runner flags for oracle", "zero"]),
    (["--models", "oracle", "--", "--results_dir", "/x"], ["--results_dir is set by", "--results_root"]),
    (["--models", "oracle", "--model_flags", "oracle=--shard x"], ["--shard is set by", "--shards"]),
    (["--models", "oracle", "--shards", "2:samples", "--", "--sample_indices", "0-3"],
     ["cannot be combined with sample shards"]),
    (["--models", "hf"], ["needs weights", "--model_hf_id", "--model_flags hf="]),
    (["--models", "oracle,mean", "--", "--model_name", "same"], ["oracle and mean would both write", "'same'"]),
    (["--models", "oracle", "--python", "/no/such/python"], ["--python /no/such/python"]),
    (["--models", "oracle", "--task_tag", "MedVision-Fixed"], ["no {family} placeholder"]),
    (["--models", "oracle", "--array-parallelism", "0"], ["--array-parallelism", "at least 1"]),
    (["--models", "oracle", "--local", "2", "--dry-run"], ["not allowed with argument"]),
])
def test_bad_input_is_one_line(tmp_path, phantom_dir, args, needles):
    mode = [] if "--local" in args else ["--dry-run"]
    res = submit("--data_dir", phantom_dir, "--results_root", tmp_path, *mode, *args)
    one_line_error(res, *needles)


def test_missing_data_folder(tmp_path):
    res = submit("--models", "oracle", "--data_dir", tmp_path / "nothing", "--dry-run")
    one_line_error(res, str(tmp_path / "nothing"), "make-phantom")


def test_status_without_a_submission(tmp_path):
    res = run_cli("status", "--results_root", str(tmp_path))
    one_line_error(res, "no submission under", "pass the folder")
    res = run_cli("status", str(tmp_path))
    one_line_error(res, "is not a submission folder")
