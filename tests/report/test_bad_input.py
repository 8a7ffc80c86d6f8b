"""Bad input gives one clear line and a non-zero exit; damaged stores are counted and reported, never averaged."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from medvision_bm.models.base import GenResult, RequestError, SyncBackend
from medvision_bm.models.baselines import OracleBackend
from phantom_runs import run_baseline, run_cli

TL_TASK = "PhantomCT_TumorLesionSize_Task01_Axial"


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def one_error_line(res, *needles: str) -> str:
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", ["summarize", "parse", "compare"])
def test_results_dir_without_runs(tmp_path: Path, command: str) -> None:
    empty = tmp_path / "empty"
    (empty / "some-model").mkdir(parents=True)
    extra = {"summarize": ["--output_dir", str(tmp_path / "o")], "parse": [], "compare": ["--a", "x", "--b", "y"]}
    res = run_cli(command, "--results_dir", str(empty), *extra[command])
    one_error_line(res, "holds no runs", str(empty))
    res = run_cli(command, "--results_dir", str(tmp_path / "missing"), *extra[command])
    one_error_line(res, "does not exist")


def test_unknown_names_are_reported(phantom_results: Path, tmp_path: Path) -> None:
    tl = str(phantom_results / "MedVision-Phantom-TL")
    one_error_line(run_cli("compare", "--results_dir", tl, "--a", "mean", "--b", "gpt-9"), "gpt-9", "oracle")
    one_error_line(run_cli("summarize", "--results_dir", tl, "--output_dir", str(tmp_path / "o"), "--models", "gpt-9"),
                   "no runs matching models=gpt-9")
    one_error_line(run_cli("summarize", "--results_dir", tl, "--output_dir", str(tmp_path / "o"), "--no_plots",
                           "--sample_keys", "no-such-key"), "no-such-key")


def _tl_store(root: Path, model: str) -> Path:
    return next(root.glob(f"MedVision-Phantom-TL/{model}/{TL_TASK}/*/signature.json")).parent


def test_torn_and_foreign_lines_are_counted_and_skipped(results_copy: Path, tmp_path: Path) -> None:
    store = _tl_store(results_copy, "mean")
    seg = next((store / "samples").glob("*.jsonl"))
    first = json.loads(seg.read_text().splitlines()[0])
    foreign = {**first, "answer_signature": "f" * 64, "text": "<answer>1, 1</answer>"}
    with open(seg, "a", encoding="utf-8") as fh:  # a foreign line, then a line torn by a kill
        fh.write(json.dumps(foreign) + "\n")
        fh.write('{"key": "' + first["key"] + '", "status": "ok", "te')
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results_copy / "MedVision-Phantom-TL"), "--output_dir", str(out),
                  "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "1 torn or unreadable line(s) and 1 foreign line(s)" in res.stderr
    assert "scored in memory" in res.stderr  # the segment is newer than parsed.jsonl: its answers are re-scored
    runs = {(r["label"], r["task"]): r for r in read_csv(out / "runs.csv")}
    damaged = runs[("mean", TL_TASK)]
    assert (damaged["bad_lines"], damaged["foreign_lines"]) == ("1", "1")
    assert damaged["source"].startswith("parsed.jsonl + ") and damaged["source"].endswith("scored in memory")
    assert runs[("oracle", TL_TASK)]["bad_lines"] == "0"
    # the skipped lines change nothing: same scores as the untouched results
    ref = tmp_path / "ref"
    assert run_cli("summarize", "--results_dir", str(results_copy.parent / "results"), "--output_dir", str(ref),
                   "--no_plots", "--n_boot", "200", "--families", "TL").returncode == 0
    a = {(r["label"], r["task"]): r["avgMAE"] for r in read_csv(out / "tasks_TL.csv")}
    b = {(r["label"], r["task"]): r["avgMAE"] for r in read_csv(ref / "tasks_TL.csv")}
    assert a == b
    # parse reports the damage too, and records it in results.json
    res = run_cli("parse", "--results_dir", str(results_copy / "MedVision-Phantom-TL"), "--models", "mean")
    assert res.returncode == 0 and "skipped lines: 1 torn, 1 foreign" in res.stdout
    counts = json.loads((store / "results.json").read_text())["counts"]
    assert (counts["store_bad_lines"], counts["store_foreign_lines"]) == (1, 1)


def test_unreadable_parsed_jsonl_is_rescored(results_copy: Path, tmp_path: Path) -> None:
    store = _tl_store(results_copy, "oracle")
    (store / "parsed.jsonl").write_text("this is not json\n")
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results_copy / "MedVision-Phantom-TL"), "--output_dir", str(out),
                  "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "parsed.jsonl is unreadable" in res.stderr
    row = next(r for r in read_csv(out / "tasks_TL.csv") if r["label"] == "oracle" and r["task"] == TL_TASK)
    n = len((store / "docs.jsonl").read_text().splitlines())
    assert float(row["avgMAE"]) == 0.0 and row["num_samples"] == str(n)


def test_two_signatures_of_one_model_are_never_averaged(results_copy: Path, phantom_dir: Path, phantom_lists: Path,
                                                        tmp_path: Path) -> None:
    tl = results_copy / "MedVision-Phantom-TL"
    # the mean baseline again on resized images (a flag that enters a baseline's signature, unlike the generation
    # flags it ignores): a second answer signature for every TL task; its answers are replaced by the oracle's so
    # that the two runs' scores differ
    run_baseline("mean", "TL", phantom_dir, tl, "--reshape_image_hw", "64,64", lists=phantom_lists)
    stores = sorted(p.parent for p in tl.glob(f"mean/{TL_TASK}/*/signature.json"))
    assert len(stores) == 2
    second = next(s for s in stores if json.loads((s / "signature.json").read_text())["inputs"]["reshape_hw"]
                  == [64, 64])
    oracle_texts = {}
    for seg in (_tl_store(results_copy, "oracle") / "samples").glob("*.jsonl"):
        for line in seg.read_text().splitlines():
            rec = json.loads(line)
            oracle_texts[rec["key"]] = rec["text"]
    for seg in (second / "samples").glob("*.jsonl"):
        recs = [json.loads(x) for x in seg.read_text().splitlines()]
        seg.write_text("".join(json.dumps({**r, "text": oracle_texts[r["key"]]}) + "\n" for r in recs))
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(tl), "--output_dir", str(out), "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "model mean has 2 runs with different answer signatures for task " + TL_TASK in res.stderr
    assert "reshape_hw" in res.stderr and "never averaged" in res.stderr
    rows = [r for r in read_csv(out / "tasks_TL.csv") if r["task"] == TL_TASK and r["label"].startswith("mean")]
    assert len(rows) == 2 and all(r["label"].startswith("mean@") for r in rows)
    assert len({r["label"] for r in rows}) == 2
    assert sorted(float(r["avgMAE"]) for r in rows)[0] == 0.0  # the replaced run, on its own
    assert sorted(float(r["avgMAE"]) for r in rows)[1] > 0.5  # the original mean baseline, on its own
    board = {r["label"] for r in read_csv(out / "leaderboard_TL.csv")}
    assert "mean" not in board and {r["label"] for r in rows} <= board


def test_output_dir_that_is_a_file(phantom_results: Path, tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    one_error_line(run_cli("summarize", "--results_dir", str(phantom_results), "--output_dir", str(f)),
                   "is a file")
    one_error_line(run_cli("compare", "--results_dir", str(phantom_results), "--a", "mean", "--b", "oracle",
                           "--output_dir", str(f)), "is a file")
    one_error_line(run_cli("summarize", "--results_dir", str(phantom_results), "--output_dir", str(f / "below"),
                           "--no_plots"), f"--output_dir {f / 'below'} cannot be created")


@pytest.mark.parametrize(("command", "flags", "needle"), [
    ("summarize", ["--seed", "-1"], "--seed -1 must be 0 or more"),
    ("summarize", ["--n_boot", "10"], "--n_boot 10 is too small"),
    ("compare", ["--seed", "-3"], "--seed -3 must be 0 or more"),
    ("compare", ["--ci", "1.5"], "--ci 1.5 must be between 0.5 and 1"),
    ("compare", ["--families", "TL", "--metrics", "iou"], "--metrics 'IoU' is not a metric of the families compared"),
    ("compare", ["--metrics", "pixel_f1"], "--metrics 'pixel_f1' is not a metric; choose from"),
])
def test_bad_bootstrap_and_metric_flags(phantom_results: Path, tmp_path: Path, command: str, flags: list[str],
                                        needle: str) -> None:
    extra = {"summarize": ["--output_dir", str(tmp_path / "o"), "--no_plots"], "compare": ["--a", "mean", "--b",
                                                                                          "oracle"]}[command]
    one_error_line(run_cli(command, "--results_dir", str(phantom_results), *extra, *flags), needle)
    assert not (tmp_path / "o").exists()


def test_parse_skips_a_store_it_cannot_write(results_copy: Path) -> None:
    store = _tl_store(results_copy, "mean")
    n_stores = len(list((results_copy / "MedVision-Phantom-TL").glob("*/*/*/signature.json")))
    (store / "parsed.jsonl").unlink()
    (store / "parsed.jsonl").mkdir()  # a folder where the file goes: the rewrite fails for this store only
    res = run_cli("parse", "--results_dir", str(results_copy / "MedVision-Phantom-TL"))
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert f"store {store}: Is a directory" in res.stderr
    assert f"rewrote parsed.jsonl of {n_stores - 1} store(s) with parser strict-1" in res.stdout
    assert "; 1 skipped" in res.stdout


def test_store_without_docs_is_skipped_with_a_note(results_copy: Path, tmp_path: Path) -> None:
    store = _tl_store(results_copy, "random-box")
    shutil.rmtree(store / "samples")
    (store / "docs.jsonl").unlink()
    (store / "parsed.jsonl").unlink()
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results_copy / "MedVision-Phantom-TL"), "--output_dir", str(out),
                  "--no_plots", "--n_boot", "200")
    assert res.returncode == 0, res.stderr
    assert "has no docs.jsonl" in res.stderr
    assert ("random-box", TL_TASK) not in {(r["label"], r["task"]) for r in read_csv(out / "tasks_TL.csv")}


class FlakyOracle(SyncBackend):
    """The oracle, except that the requests for some keys fail (as an unreachable server would)."""

    name = "flaky"

    def __init__(self, fail: set[str]) -> None:
        self.fail = fail
        self._oracle = OracleBackend()

    def answer(self, request):
        if request.key in self.fail:
            return GenResult(request.key, None, RequestError("http", "503 Service Unavailable", 503, True), attempts=3)
        return self._oracle.answer(request)


def test_failed_requests_count_against_success_and_are_reported(phantom_dir: Path, phantom_lists: Path,
                                                                tmp_path: Path) -> None:
    results = tmp_path / "results"
    task = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal"
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({task: 8}))
    run_baseline("oracle", "AD", phantom_dir, results / "tag", lists=phantom_lists, tasks_json=tasks)
    store = next(results.glob("tag/oracle/*/*/signature.json")).parent
    keys = [json.loads(x)["key"] for x in (store / "docs.jsonl").read_text().splitlines()]
    n = len(keys)
    shutil.rmtree(results)
    outcomes = run_baseline("oracle", "AD", phantom_dir, results / "tag", lists=phantom_lists, tasks_json=tasks,
                            backend=lambda cfg, data: FlakyOracle({keys[0], keys[1]}))
    assert any(o.state == "incomplete" for o in outcomes)
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(out), "--no_plots", "--n_boot",
                  "200", "--browse_per_task", "0", "--sample_keys", keys[0])
    assert res.returncode == 0, res.stderr
    assert f"oracle / {task}: incomplete run (2 failed request(s), 0 pending of {n})" in res.stderr
    row = next(r for r in read_csv(out / "tasks_AD.csv") if r["task"] == task)
    assert (row["num_samples"], row["n_success"], row["n_request_failed"]) == (str(n), str(n - 2), "2")
    # upstream's denominators: SuccessRate over every sample, avgMAE over the successes only
    assert float(row["SuccessRate"]) == (n - 2) / n and float(row["avgMAE"]) == 0.0
    board = next(r for r in read_csv(out / "leaderboard_AD.csv") if r["aggregate"] == "Distance")
    assert float(board["SuccessRate"]) == (n - 2) / n and board["n"] == str(n)
    html = (out / "index.html").read_text()
    assert f'data-key="{keys[0]}"' in html and "[request failed] 503 Service Unavailable" in html


def test_report_without_a_data_folder_says_slices_are_not_rendered(results_copy: Path, phantom_dir: Path,
                                                                  tmp_path: Path) -> None:
    tl = results_copy / "MedVision-Phantom-TL"
    for path in tl.glob("*/*/*/results.json"):  # the data folder the runs recorded is gone
        res = json.loads(path.read_text())
        assert str(phantom_dir) in res["argv"]
        res["argv"] = [str(tmp_path / "moved-away") if a == str(phantom_dir) else a for a in res["argv"]]
        assert res["data_dir"] == str(phantom_dir)
        res["data_dir"] = str(tmp_path / "moved-away")
        path.write_text(json.dumps(res))
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(tl), "--output_dir", str(out), "--no_plots", "--n_boot", "200",
                  "--no_tl_filter")  # without the data, pin 1.0.0's T/L filter cannot be applied
    assert res.returncode == 0, res.stderr
    assert "slices not rendered: no data folder known" in res.stderr
    html = (out / "index.html").read_text()
    n_cards = html.count('class="sample"')  # two drawn samples per task and its worst errors
    assert n_cards >= 2 * len(list(tl.glob("oracle/*/*/signature.json"))) and html.count("(no image)") == n_cards
    assert "Format requirement" in html and "&lt;answer&gt;" in html  # the prompts are there without the data
    assert not (out / "slices").exists()
    bad = run_cli("summarize", "--results_dir", str(tl), "--output_dir", str(out), "--data_dir", str(tmp_path))
    one_error_line(bad, f"--data_dir {tmp_path} has no Datasets/ folder")
