"""The judged import (upstream's ``llm-parsed_<judge>/`` folders): its judge signature taken from the folder, so
every folder of one model judged by one judge feeds one judged parse however it is imported; records read one at
a time and reduced to one verdict per doc, duplicate records counted and reported. Upstream's layout: YongchengYAO/
MedVision script/llm-parsing/apply_judge.py and judge_io.py @2f20f64 (``<model>/llm-parsed_<judge>/<the raw file's
name>``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_import_rules import TASK, judged, records, write_samples

from medvision_bm.cli.import_upstream import cli_main as import_main
from phantom_runs import run_cli

TS_OLD, TS_NEW = "20250401_090000", "20250405_090000"


def model_folder(root: Path) -> Path:
    return root / "Results" / "MedVision-AD" / "judged-model"


def write_run(root: Path, ts: str, recs: list, judge_dir: str, judge_model: str) -> None:
    folder = model_folder(root)
    write_samples(folder, ts, recs)
    write_samples(folder / judge_dir, ts, judged(recs, judge_model))


def do_import(root: Path, ours: Path, phantom_dir: Path, capsys) -> str:
    capsys.readouterr()
    assert import_main(["--upstream_results", str(model_folder(root).parent), "--results_dir", str(ours),
                        "--data_dir", str(phantom_dir)]) in (0, 1)
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return out.out + out.err


def judged_parses(ours: Path) -> list[Path]:
    return sorted(ours.rglob("judged/*/judge.json"))


def verdicts(judge_file: Path) -> list[dict]:
    seg = judge_file.parent / "answers" / "upstream-import.jsonl"
    return [json.loads(x) for x in seg.read_text().splitlines()]


@pytest.mark.parametrize("order", ["newer first", "older first"])
def test_two_folders_of_one_model_feed_one_judged_parse_named_by_the_folder(phantom_dir, tmp_path, capsys, order):
    """Two copies of a model's results, each judged (their records naming the judge differently, or not at all),
    imported one after the other: one judged parse, its verdicts those on the answers the store holds (the newer
    run's), and `summarize --parse judged` reports it."""
    old = records(phantom_dir, n=5)
    new = records(phantom_dir, answer=lambda i, t: f"<answer>{t * 1.3:.4f}</answer>", n=5)
    a, b = tmp_path / "copy-a", tmp_path / "copy-b"
    write_run(a, TS_NEW, new, "llm-parsed_qwen3-32b", "Qwen/Qwen3-32B")
    write_run(b, TS_OLD, old, "llm-parsed_qwen3-32b", "")  # a record without its judge model
    ours = tmp_path / "ours"
    for root in ((a, b) if order == "newer first" else (b, a)):
        do_import(root, ours, phantom_dir, capsys)
    (jf,) = judged_parses(ours)
    held = json.loads(jf.read_text())
    assert held["inputs"]["weights"] == "qwen3-32b" and held["import"]["judge_models"] == ["Qwen/Qwen3-32B"]
    got = verdicts(jf)
    assert len(got) == 5 and all(Path(v["source"]["file"]).is_relative_to(a) for v in got)
    results = json.loads((jf.parent / "results.json").read_text())
    assert results["counts"]["judged"] == 5 and results["counts"]["not_judged"] == 0
    res = run_cli("summarize", "--results_dir", str(ours), "--output_dir", str(tmp_path / "sum"), "--parse",
                  "judged", "--no_plots")
    assert res.returncode == 0, res.stderr[-2000:]


def test_a_judged_file_holding_a_doc_three_times_counts_the_repeats_and_keeps_the_last(phantom_dir, tmp_path,
                                                                                      capsys):
    recs = records(phantom_dir, n=4)
    rows = judged(recs, "google/gemma-4-31B-it")
    first, second = dict(rows[1]), dict(rows[1])
    first["LLM_judge"] = {**rows[1]["LLM_judge"], "reason": "first copy"}
    second["LLM_judge"] = {**rows[1]["LLM_judge"], "reason": "second copy"}
    folder = model_folder(tmp_path)
    write_samples(folder, TS_OLD, recs)
    jdir = folder / "llm-parsed_gemma-4-31b"
    jdir.mkdir(parents=True)
    (jdir / f"{TS_OLD}_samples_{TASK}.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in [first, *rows, second]))
    out = do_import(tmp_path, tmp_path / "ours", phantom_dir, capsys)
    assert "records=6" in out and "used=4" in out and "duplicates=2" in out, out
    assert "2 judged record(s) judge a doc and answer another record of this import judged already" in out
    (jf,) = judged_parses(tmp_path / "ours")
    got = {v["key"]: v for v in verdicts(jf)}
    assert len(got) == 4 and sum(v["reason"] == "second copy" for v in got.values()) == 1
    assert json.loads((jf.parent / "results.json").read_text())["counts"]["duplicates"] == 2


def test_a_judged_parse_an_older_signature_rule_made_is_named_with_what_to_do(phantom_dir, tmp_path, capsys):
    """A judged parse an earlier version signed by its records' judge model beside the one signed by the folder:
    `summarize --parse judged` reads one per store, so the import says which to move away."""
    write_run(tmp_path, TS_OLD, records(phantom_dir, n=3), "llm-parsed_gemma-4-31b", "google/gemma-4-31B-it")
    ours = tmp_path / "ours"
    do_import(tmp_path, ours, phantom_dir, capsys)
    (jf,) = judged_parses(ours)
    older = jf.parent.parent / "0123456789ab"
    older.mkdir()
    held = json.loads(jf.read_text())
    held["inputs"]["weights"] = "google/gemma-4-31B-it"
    (older / "judge.json").write_text(json.dumps({**held, "judge_signature": "0123456789ab" + "0" * 52}))
    (older / "parsed.jsonl").write_bytes((jf.parent / "parsed.jsonl").read_bytes())
    out = do_import(tmp_path, ours, phantom_dir, capsys)
    (line,) = [x for x in out.splitlines() if str(older) in x]
    assert f"now in {jf.parent.name}" in line and "move" in line
    assert sorted(judged_parses(ours)) == sorted([jf, older / "judge.json"])  # nothing removed
