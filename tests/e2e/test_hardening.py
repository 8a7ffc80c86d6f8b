"""Names that would leave their folder, unbounded or non-finite settings, secrets in what is
stored or echoed, and garbage files: each a one-line error (or a documented cap), never a traceback, a path
outside the results folder or a stored secret."""

from __future__ import annotations

import json
import os

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models.registry import get_record
from medvision_bm.paths import component_problem, safe_component
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.secrets import redact, redact_argv
from mvtest_support import REPO, run_cli

TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"
BAD_NAMES = ["../../escape", "..", ".", "/tmp/abs", "a/b", "a\\b", "x\x00y", "x\ny", "tab\there", "x\x7fy", "",
             ".hidden", " padded", "n" * 201]


def config(tmp_path, *extra: str, model: str = "oracle", tasks=TASKS):
    record = get_record(model)
    argv = ["--data_dir", str(tmp_path / "data"), "--tasks_list_json_path", str(tasks), "--results_dir",
            str(tmp_path / "res"), "--skip_env_setup", "--no_progress", "--skip_update_status", *extra]
    return build_config(build_parser(record, "test").parse_args(argv), record, argv)


def one_line_error(res) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------------ 1. names


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_that_is_not_one_folder_is_refused(name):
    assert component_problem(name)
    with pytest.raises(UserError, match="--model_name") as exc:
        safe_component(name, "--model_name")
    assert "\n" not in str(exc.value) and "\x00" not in str(exc.value)


@pytest.mark.parametrize("name", ["qwen2.5-vl-7b", "Lingshu 7B", "model@v2", "MedGemma_4b+lora", "模型"])
def test_ordinary_names_are_kept_as_given(name):
    assert safe_component(name, "--model_name") == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_model_name_and_shard_refused_before_anything_is_written(tmp_path, name):
    with pytest.raises(UserError, match="--model_name"):
        config(tmp_path, "--model_name", name)
    with pytest.raises(UserError, match="--shard"):
        config(tmp_path, "--model_name", "ok", "--shard", name)
    assert not (tmp_path / "res").exists()


def test_a_default_folder_name_from_the_weights_is_checked_too(tmp_path):
    weights = tmp_path / "w" / ".."  # Path(...).name == ".." (a folder that exists)
    (tmp_path / "w").mkdir()
    with pytest.raises(UserError, match="results folder name"):
        config(tmp_path, "--model_hf_id", str(weights), model="hf")


def test_a_served_model_name_with_a_vendor_keeps_its_name_on_the_wire_and_one_folder(tmp_path):
    from medvision_bm.runner.backends import api_options

    cfg = config(tmp_path, "--model_name", "Qwen/Qwen2.5-VL-7B-Instruct", "--base_url", "http://127.0.0.1:9/v1",
                 model="openai-compatible")
    assert cfg.model_name == "Qwen_Qwen2.5-VL-7B-Instruct"
    assert api_options(cfg).model_name == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert cfg.signature_model()["weights"] == "Qwen/Qwen2.5-VL-7B-Instruct"
    with pytest.raises(UserError, match="--model_name"):
        config(tmp_path, "--model_name", "../../x", "--base_url", "http://127.0.0.1:9/v1", model="openai-compatible")


@pytest.mark.parametrize("task", ["../../evil_TumorLesionSize_Task01_Axial", "/abs/x_TumorLesionSize_Task01_Axial",
                                  "Phantom\x00CT_TumorLesionSize_Task01_Axial"])
def test_a_task_name_that_is_not_one_folder_is_refused(tmp_path, task):
    tasks = tmp_path / "tasks_bad.json"
    tasks.write_text(json.dumps({task: 1}))
    with pytest.raises(UserError, match="task name"):
        config(tmp_path, "--model_name", "ok", tasks=tasks)


@pytest.mark.parametrize("file_name", ["tasks_..json", "tasks_.json", "tasks_bad\x01tag.json"])
def test_a_tasks_list_whose_tag_names_no_folder_cannot_name_the_status_file(tmp_path, file_name):
    tasks = tmp_path / file_name
    tasks.write_text(TASKS.read_text())
    record = get_record("oracle")
    argv = ["--data_dir", str(tmp_path), "--tasks_list_json_path", str(tasks), "--skip_env_setup"]
    with pytest.raises(UserError, match="tag of tasks list"):
        build_config(build_parser(record, "t").parse_args(argv), record, argv)


def test_run_with_an_escaping_model_name_writes_nothing_and_says_so_in_one_line(tmp_path, phantom_dir):
    res = run_cli("run", "--model", "oracle", "--model_name", "../../escape", "--data_dir", str(phantom_dir),
                  "--tasks_list_json_path", str(TASKS), "--results_dir", str(tmp_path / "a" / "b" / "res"),
                  "--skip_env_setup", "--sample_limit", "1", "--skip_update_status", cwd=tmp_path)
    line = one_line_error(res)
    assert "--model_name" in line and "'../../escape'" in line
    assert not (tmp_path / "escape").exists() and not (tmp_path / "a").exists()


def test_submit_refuses_a_task_tag_that_leaves_its_folder(tmp_path, phantom_dir):
    bench = tmp_path / "bench"
    bench.mkdir()
    res = run_cli("submit", "--models", "oracle", "--families", "AD", "--benchmark_dir", str(bench), "--data_dir",
                  str(phantom_dir), "--task_tag", "../../{family}", "--dry-run", cwd=tmp_path)
    line = one_line_error(res)
    assert "--task_tag '../../AD'" in line and "single folder name" in line
    assert not (tmp_path / "AD").exists()


# ------------------------------------------------------------------------------------------------ 3. bounds


@pytest.mark.parametrize("flag,value", [("--temperature", "nan"), ("--temperature", "inf"), ("--temperature", "-0.5"),
                                        ("--temperature", "1e9"), ("--top_p", "0"), ("--top_p", "1.5"),
                                        ("--top_p", "nan"), ("--top_p", "-inf"), ("--top_k", "-1"), ("--top_k", "0"),
                                        ("--max_new_tokens", "1000000000"), ("--seed", "-1"),
                                        ("--seed", str(2**40))])
def test_sampling_settings_no_provider_accepts_are_refused(tmp_path, flag, value):
    with pytest.raises(UserError, match=flag) as exc:
        config(tmp_path, f"{flag}={value}")
    assert "\n" not in str(exc.value)


def test_an_absurd_reshape_is_refused_by_the_parser():
    import argparse

    from medvision_bm.runner.args import MAX_IMAGE_SIDE, parse_hw

    with pytest.raises(argparse.ArgumentTypeError, match=f"at most {MAX_IMAGE_SIDE}"):
        parse_hw("100000x100000")
    assert parse_hw("896,896") == (896, 896)


def test_sensible_sampling_settings_pass(tmp_path):
    cfg = config(tmp_path, "--temperature", "0.7", "--top_p", "1", "--top_k", "20", "--max_new_tokens", "16384",
                 "--seed", "1234")
    assert (cfg.gen.temperature, cfg.gen.top_p, cfg.gen.top_k, cfg.gen.max_new_tokens) == (0.7, 1.0, 20, 16384)


def test_a_nan_temperature_on_the_command_line_is_one_line(tmp_path):
    res = run_cli("run", "--model", "oracle", "--data_dir", str(tmp_path), "--tasks_list_json_path", str(TASKS),
                  "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--temperature", "nan", cwd=tmp_path)
    assert "--temperature nan is out of range" in one_line_error(res)
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("n_boot", [10**9, 20_001])
def test_n_boot_has_an_upper_bound(n_boot):
    from medvision_bm.report.bootstrap import MAX_N_BOOT, BootstrapSpec

    with pytest.raises(UserError, match=f"--n_boot {n_boot} is too large; use at most {MAX_N_BOOT}"):
        BootstrapSpec(n_boot).check()
    BootstrapSpec(MAX_N_BOOT).check()


def test_the_report_shows_the_head_and_tail_of_a_huge_answer():
    from medvision_bm.report.browser import RunAnswer, SampleCard
    from medvision_bm.report.html import REPORT_ANSWER_CHARS, sample_card

    raw = "a" * 5_000_000 + "<answer>4</answer>"
    card = SampleCard("TL", "t", "k", {}, {}, "prompt", [1.0], None, "",
                      answers=[RunAnswer("run", "ok", raw, [4.0], {})])
    page = sample_card(card)
    assert len(page) < REPORT_ANSWER_CHARS + 5_000
    assert "&lt;answer&gt;4&lt;/answer&gt;" in page and "characters not shown" in page


# ------------------------------------------------------------------------------------------------ 4. secrets


def test_redaction_hits_secret_flags_only():
    argv = ["run", "--max_new_tokens", "512", "--max_tokens=64", "--min_new_tokens", "3", "--sample_keys", "a,b",
            "--keep_failed", "--api_key", "hunter2hunter2", "--hf-token=abcdef123456", "--password", "pw-9876543",
            "--base_url", "http://alice:S3cretPassw0rd@host:8000/v1,https://tok0123456789@h2/v1"]
    out = redact_argv(argv)
    assert out[:8] == argv[:8], "non-secret flags and values are kept, so the command reproduces the run"
    text = " ".join(out)
    for secret in ("hunter2hunter2", "abcdef123456", "pw-9876543", "S3cretPassw0rd", "tok0123456789"):
        assert secret not in text
    assert "--api_key ***" in text and "--hf-token=***" in text and "http://alice:***@host:8000/v1" in text
    # a value of a secret flag is then redacted wherever it shows up
    assert redact("the server said hunter2hunter2") == "the server said ***"


def test_unrecognised_arguments_are_echoed_without_their_secrets():
    from medvision_bm.secrets import redact_message

    msg = redact_message("unrecognized arguments: --my_api_key hunter2-secret-value --openai_token=xyzxyzxyz1")
    assert "hunter2-secret-value" not in msg and "xyzxyzxyz1" not in msg and "--my_api_key ***" in msg


@pytest.mark.parametrize("command", [["run", "--model", "oracle", "--tasks_list_json_path", "t.json"],
                                     ["summarize", "--results_dir", "r", "--output_dir", "o"], ["data", "tasks"],
                                     ["envs", "list"]])
def test_no_command_echoes_a_secret_it_did_not_recognise(tmp_path, command):
    secret = "planted-Secret-Value-0001"
    res = run_cli(*command, "--my_api_key", secret, "--db_password=" + secret, cwd=tmp_path)
    assert res.returncode != 0
    assert secret not in res.stderr + res.stdout


def test_results_json_keeps_max_new_tokens_and_hides_the_url_password(tmp_path, phantom_dir):
    res = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS),
                  "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--sample_limit", "1",
                  "--skip_update_status", "--max_new_tokens", "77", "--no_progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    results = [json.loads(p.read_text()) for p in (tmp_path / "res").glob("oracle/*/*/results.json")]
    assert results and all(r["argv"][r["argv"].index("--max_new_tokens") + 1] == "77" for r in results)


def test_a_user_error_that_quotes_a_url_never_shows_its_password(tmp_path, phantom_dir):
    res = run_cli("run", "--model", "openai-compatible", "--model_name", "m", "--base_url",
                  "ftp://alice:S3cretPassw0rd@host/v1", "--data_dir", str(phantom_dir), "--tasks_list_json_path",
                  str(TASKS), "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--sample_limit", "1",
                  "--skip_update_status", "--no_progress", cwd=tmp_path)
    assert "--base_url 'ftp://alice:***@host/v1' is not an http(s) URL" in one_line_error(res)
    assert "S3cretPassw0rd" not in res.stderr + res.stdout


# ------------------------------------------------------------------------------------------------ 6. garbage files


GARBAGE = bytes(range(256)) * 4 + b"\xff\xfe\x00\x80"


def test_a_status_file_of_binary_garbage_is_a_one_line_error(tmp_path, phantom_dir):
    from medvision_bm.store.status import StatusFile

    path = tmp_path / "status.json"
    path.write_bytes(GARBAGE)
    with pytest.raises(UserError, match=r"status file .* is not UTF-8 JSON text"):
        StatusFile(path).read()
    res = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS),
                  "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--task_status_json_path", str(path),
                  "--no_progress", cwd=tmp_path)
    assert "status file" in one_line_error(res)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_price_table_of_binary_garbage_is_a_one_line_error(tmp_path, suffix):
    from medvision_bm.models.api.pricing import load_price_table

    path = tmp_path / f"prices{suffix}"
    path.write_bytes(GARBAGE)
    with pytest.raises(UserError, match="--price_table"):
        load_price_table(path)


@pytest.mark.parametrize("entry", [{"price_in": "nan", "price_out": 1}, [1, "inf"], [-1, 2]])
def test_a_price_that_is_not_a_finite_amount_is_refused(tmp_path, entry):
    from medvision_bm.models.api.pricing import Price, load_price_table

    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"gpt-x": entry}))
    with pytest.raises(UserError, match=r"--price_table .* entry 'gpt-x'"):
        load_price_table(path)
    with pytest.raises(UserError, match="finite"):
        Price(float("nan"), 1.0)


def test_a_corrupt_docs_line_counts_its_sample_as_missing(tmp_path, phantom_dir):
    from medvision_bm.score.rescore import rescore
    from medvision_bm.store.discovery import discover

    res = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS),
                  "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--sample_limit", "3",
                  "--skip_update_status", "--no_progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    ref = discover(tmp_path / "res")[0][0]
    docs = ref.folder / "docs.jsonl"
    lines = docs.read_bytes().splitlines()
    lines[1] = GARBAGE.replace(b"\n", b" ")
    docs.write_bytes(b"\n".join(lines) + b"\n")
    out = rescore(ref)
    assert out.counts.selected == 3 and out.counts.pending == 1 and out.counts.answered == 2
    assert any("counted as missing" in n for n in out.notes)


def test_parse_marks_a_store_with_a_corrupt_docs_line_incomplete(tmp_path, phantom_dir):
    res = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS),
                  "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--sample_limit", "2",
                  "--skip_update_status", "--no_progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    docs = next((tmp_path / "res").glob("oracle/*/*/docs.jsonl"))
    docs.write_bytes(docs.read_bytes().splitlines()[0] + b"\n{not json\n")
    assert run_cli("parse", "--results_dir", str(tmp_path / "res"), cwd=tmp_path).returncode in (0, 3)
    results = json.loads((docs.parent / "results.json").read_text())
    assert results["counts"]["pending"] == 1 and results["complete"] is False


def test_a_volume_without_finite_values_is_a_one_line_reason(tmp_path):
    nib = pytest.importorskip("nibabel")
    import numpy as np

    from medvision_bm.data.image import MINMAX, render_gray

    path = tmp_path / "inf.nii.gz"
    vol = np.full((8, 8, 3), np.inf, dtype=np.float32)
    vol[0, 0, 0] = np.nan
    nib.save(nib.Nifti1Image(vol, np.eye(4)), path)
    with pytest.raises(UserError, match="no finite value") as exc:
        render_gray(path, 2, 1, rule=MINMAX, protocol="paper")
    assert "\n" not in str(exc.value)


def test_fixture_environment_is_clean():
    assert "MedVision_DATA_DIR" not in os.environ
