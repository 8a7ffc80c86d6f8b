"""Numbers, texts and files from outside go through one typed, bounded reader (medvision_bm.limits): a stored line or
file whose values have the wrong type, are not finite or are out of bounds gives a per-sample reason or one line
naming the file, never a traceback, a file over 10 MB or a sample that is never asked again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mvtest_support import REPO, plant_non_regular, run_cli, user_error_of

TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"
TEN_MB = 10 << 20


def _run(tmp_path: Path, phantom_dir: Path, limit: str = "2"):
    return run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS),
                   "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--sample_limit", limit,
                   "--skip_update_status", "--no_progress", cwd=tmp_path)


def _no_traceback(res) -> None:
    assert "Traceback" not in res.stderr + res.stdout, res.stderr[-3000:]


def _sizes_ok(root: Path) -> None:
    big = [p for p in root.rglob("*") if p.is_file() and p.stat().st_size > TEN_MB]
    assert not big, big


def _edit_first_answer(store: Path, edit) -> str:
    """Rewrite the first answer line of the store's segment with ``edit(obj)``; its key."""
    seg = next((store / "samples").glob("*.jsonl"))
    lines = seg.read_bytes().splitlines()
    obj = json.loads(lines[0])
    edit(obj)
    lines[0] = json.dumps(obj).encode()
    seg.write_bytes(b"\n".join(lines) + b"\n")
    return obj["key"]


HOSTILE_ANSWERS = {
    "output tokens as a word": lambda o: o["usage"].update(output_tokens="plenty"),
    "reasoning tokens of 10**25": lambda o: o["usage"].update(reasoning_tokens=10**25),
    "input tokens of 6e18 (two would wrap a 64-bit total)": lambda o: o["usage"].update(input_tokens=6 * 10**18),
    "latency of 1.6e308": lambda o: o.update(latency_s=1.6e308),
    "latency as a word": lambda o: o.update(latency_s="glacial"),
    "attempts as a list": lambda o: o.update(attempts=[1, 2]),
    "usage as a text": lambda o: o.update(usage="none"),
    "an ok answer whose text is a number": lambda o: o.update(text=42),
}


@pytest.mark.parametrize("edit", list(HOSTILE_ANSWERS.values()), ids=list(HOSTILE_ANSWERS))
def test_a_hostile_answer_line_is_asked_again_never_a_traceback(tmp_path, phantom_dir, edit):
    assert _run(tmp_path, phantom_dir).returncode == 0
    stores = sorted(p.parent for p in (tmp_path / "res").glob("oracle/*/*/signature.json"))
    for store in stores:  # the same hostile line in every task's store (each total would overflow)
        _edit_first_answer(store, edit)
    res = run_cli("parse", "--results_dir", str(tmp_path / "res"), cwd=tmp_path)
    _no_traceback(res)
    assert res.returncode in (0, 3), res.stderr[-2000:]
    for store in stores:
        results = json.loads((store / "results.json").read_text())
        assert results["counts"]["pending"] == 1, results["counts"]  # no answer: the line is not one
        assert all(0 <= v < 10**15 for k, v in results["usage"].items() if "tokens" in k)
    again = _run(tmp_path, phantom_dir)
    _no_traceback(again)
    assert again.returncode == 0, again.stderr[-2000:]
    for store in stores:
        results = json.loads((store / "results.json").read_text())
        assert results["counts"]["answered"] == 2 and results["complete"] is True, results["counts"]
    _sizes_ok(tmp_path / "res")


def _stores(tmp_path: Path) -> list[Path]:
    return sorted(p.parent for p in (tmp_path / "res").glob("oracle/*/*/signature.json"))


def test_a_non_finite_number_in_results_json_is_read_as_null_and_parse_rewrites_it(tmp_path, phantom_dir):
    assert _run(tmp_path, phantom_dir).returncode == 0
    store = _stores(tmp_path)[0]
    path = store / "results.json"
    results = json.loads(path.read_text())
    name = sorted(results["metrics"])[-1]
    results["metrics"][name] = float("-inf")
    results["usage"]["latency_s"] = float("nan")
    path.write_text(json.dumps(results))  # Python writes -Infinity and NaN
    res = run_cli("parse", "--results_dir", str(tmp_path / "res"), cwd=tmp_path)
    _no_traceback(res)
    assert res.returncode == 0, res.stderr[-2000:]
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    again = json.loads(text)
    assert again["metrics_at_run"][name] is None  # what the run said, read as null
    assert again["metrics"][name] is not None  # scored again from the answers


@pytest.mark.parametrize("value", [12, "x" * 300])
def test_a_signature_file_whose_signature_is_not_one_is_one_line_for_run_and_a_note_for_parse(tmp_path,
                                                                                                phantom_dir, value):
    assert _run(tmp_path, phantom_dir, "1").returncode == 0
    store = _stores(tmp_path)[0]
    sig = json.loads((store / "signature.json").read_text())
    sig["answer_signature"] = value
    (store / "signature.json").write_text(json.dumps(sig))
    res = _run(tmp_path, phantom_dir, "1")
    _no_traceback(res)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "signature.json cannot be read" in lines[0] and str(store) in lines[0]
    parsed = run_cli("parse", "--results_dir", str(tmp_path / "res"), cwd=tmp_path)
    _no_traceback(parsed)
    assert f"store {store.relative_to(tmp_path)}" in parsed.stdout + parsed.stderr or str(store) in \
        parsed.stdout + parsed.stderr
    assert "not a signature" in parsed.stdout + parsed.stderr


def test_summarize_refuses_a_reference_asking_for_a_million_decimals_in_one_line(tmp_path, phantom_dir):
    assert _run(tmp_path, phantom_dir, "1").returncode == 0
    ref = tmp_path / "ref.json"
    ref.write_text(json.dumps([{"model": "oracle", "family": "AD", "group": "overall", "metric": "avgMAE",
                                "value": 0.5, "decimals": 1_000_000}]))
    res = run_cli("summarize", "--results_dir", str(tmp_path / "res"), "--output_dir", str(tmp_path / "out"),
                  "--no_plots", "--n_boot", "200", "--reference", str(ref), cwd=tmp_path)
    _no_traceback(res)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "column decimals" in lines[0], res.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_a_reference_naming_only_unknown_models_says_so_on_stderr(tmp_path, phantom_dir):
    assert _run(tmp_path, phantom_dir, "1").returncode == 0
    ref = tmp_path / "ref.csv"
    ref.write_text("model,family,group,metric,value\nnobody-7b,AD,overall,avgMAE,0.5\n"
                   "\"line\nbreak\",AD,overall,avgMAE,0.5\n")
    res = run_cli("summarize", "--results_dir", str(tmp_path / "res"), "--output_dir", str(tmp_path / "out"),
                  "--no_plots", "--n_boot", "200", "--reference", str(ref), cwd=tmp_path)
    _no_traceback(res)
    assert res.returncode == 0, res.stderr[-2000:]
    said = [ln for ln in res.stderr.splitlines() if "--reference" in ln]
    assert len(said) == 1 and str(ref) in said[0] and "nobody-7b" in said[0] and "none of its 2" in said[0], \
        res.stderr
    _sizes_ok(tmp_path / "out")


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_status_file_price_table_or_tasks_list_that_is_no_regular_file_is_one_line(tmp_path, kind):
    from medvision_bm.data.layout import load_tasks_list
    from medvision_bm.models.api.pricing import load_price_table
    from medvision_bm.store.status import StatusFile

    for name, read in (("status.json", lambda p: StatusFile(p).read()), ("prices.json", load_price_table),
                       ("tasks.json", load_tasks_list)):
        path = tmp_path / name
        plant_non_regular(path, kind)
        error = str(user_error_of(lambda read=read, path=path: read(path)) or "")
        assert str(path) in error and "\n" not in error, (name, error)


def test_a_tasks_list_count_past_its_bound_is_one_line(tmp_path):
    from medvision_bm.data.layout import load_tasks_list
    from medvision_bm.errors import UserError

    path = tmp_path / "tasks.json"
    path.write_text('{"PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal": 1e300}')
    with pytest.raises(UserError, match="not an integer"):
        load_tasks_list(path)
    path.write_text('{"PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal": ' + "9" * 40 + "}")
    with pytest.raises(UserError, match="outside 0"):
        load_tasks_list(path)


# ------------------------------------------------------------------------------------------ F: URLs written anywhere

PLANTED = ("Tk7aQxWm3bZr", "Zq8pWmxY", "pL4nt3dVal")


def test_no_planted_token_of_a_base_url_reaches_the_results_logs_or_report(tmp_path, phantom_dir):
    from fakes.provider_server import FakeProviderServer

    server = FakeProviderServer().start()
    try:
        url = f"{server.url}/gw/{PLANTED[0]}/v1?code={PLANTED[1]}&region=eu#x={PLANTED[2]}"
        res = run_cli("run", "--model", "openai-compatible", "--model_name", "served-model", "--base_url", url,
                      "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir",
                      str(tmp_path / "res"), "--skip_env_setup", "--sample_limit", "1", "--skip_update_status",
                      "--no_progress", "--max_retries", "0", cwd=tmp_path)
    finally:
        server.stop()
    _no_traceback(res)
    assert list((tmp_path / "res").rglob("results.json")), res.stderr[-2000:]
    report = run_cli("summarize", "--results_dir", str(tmp_path / "res"), "--output_dir", str(tmp_path / "out"),
                     "--no_plots", "--n_boot", "200", cwd=tmp_path)
    _no_traceback(report)
    texts = {str(p): p.read_text(errors="replace") for root in ("res", "out") for p in (tmp_path / root).rglob("*")
             if p.is_file()}
    texts.update(run_out=res.stdout + res.stderr, report_out=report.stdout + report.stderr)
    assert any("/gw/***/v1" in t for t in texts.values())  # the URL was written, with its token hidden
    leaks = [(where, token) for where, text in texts.items() for token in PLANTED if token in text]
    assert leaks == []


# ------------------------------------------------------------------------------ F: names that read other than they are

FORMAT_NAMES = ["report\u202egpj.exe", "model\u2066x\u2069", "qwen\u200b7b", "\ufeffmodel", "a\u2067b"]


@pytest.mark.parametrize("name", FORMAT_NAMES)
def test_run_refuses_a_model_name_with_a_format_character_before_anything_is_written(tmp_path, phantom_dir, name):
    from medvision_bm.paths import component_problem

    assert component_problem(name) == "contains a control or format character"
    res = run_cli("run", "--model", "oracle", "--model_name", name, "--data_dir", str(phantom_dir),
                  "--tasks_list_json_path", str(TASKS), "--results_dir", str(tmp_path / "res"), "--skip_env_setup",
                  "--sample_limit", "1", "--skip_update_status", "--no_progress", cwd=tmp_path)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1 and "--model_name" in lines[0], res.stderr[-2000:]
    assert name not in lines[0]  # shown escaped, never as it would render
    assert not (tmp_path / "res").exists()



def test_summarize_refuses_a_newer_answer_line_in_one_line_naming_its_file(tmp_path, phantom_dir):
    assert _run(tmp_path, phantom_dir, "1").returncode == 0
    store = _stores(tmp_path)[-1]
    seg = next((store / "samples").glob("*.jsonl"))
    line = json.loads(seg.read_bytes().splitlines()[0])
    with seg.open("a") as fh:
        fh.write(json.dumps({**line, "v": 3, "text": "a newer shape"}) + "\n")
    res = run_cli("summarize", "--results_dir", str(tmp_path / "res"), "--output_dir", str(tmp_path / "out"),
                  "--no_plots", "--n_boot", "200", cwd=tmp_path)
    _no_traceback(res)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert str(seg.relative_to(tmp_path)) in lines[0] and "version 3" in lines[0]


def test_a_price_of_400_digits_is_one_line(tmp_path):
    from medvision_bm.errors import UserError
    from medvision_bm.models.api.pricing import load_price_table

    path = tmp_path / "prices.json"
    path.write_text('{"gpt-x": [1, ' + "7" * 400 + "]}")
    with pytest.raises(UserError, match=r"entry 'gpt-x' must be"):
        load_price_table(path)


@pytest.mark.parametrize("field,value", [("counts", "many")])
def test_parse_rewrites_a_results_file_whose_field_has_another_type(tmp_path, phantom_dir, field, value):
    assert _run(tmp_path, phantom_dir, "1").returncode == 0
    path = _stores(tmp_path)[0] / "results.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    res = run_cli("parse", "--results_dir", str(tmp_path / "res"), cwd=tmp_path)
    _no_traceback(res)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(path.read_text())["counts"]["selected"] == 1
