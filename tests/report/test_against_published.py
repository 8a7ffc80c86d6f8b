"""A run named after a published model, summarized: the "Against the published leaderboard" section (HTML, CSV,
Markdown) with verdicts, the protocol check, the plot; the verdict, matching and protocol rules; --reference.

Published protocol: docs/spec/published-leaderboard.md (YongchengYAO/MedVision Paper-results-backup/ @755a7bb)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import polars as pl
import pytest

from medvision_bm.report import against_published as ap
from medvision_bm.report.html import table
from medvision_bm.report.plots import FIGURES
from medvision_bm.report.published import published_rows, select
from phantom_runs import run_baseline, run_cli

PUBLISHED_MODEL = "Qwen2.5-VL-7B-Instruct"  # upstream's result folder of Qwen2.5-VL (7B) in every family
SUMMARY = ("--n_boot", "200", "--browse_per_task", "0")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def named_report(phantom_dir: Path, phantom_lists: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("named")
    for fam in ("TL", "AD"):
        out = run_baseline("mean", fam, phantom_dir, root / "results", "--model_name", PUBLISHED_MODEL,
                           lists=phantom_lists)
        assert all(o.state == "done" for o in out), out
    report = root / "report"
    res = run_cli("summarize", "--results_dir", str(root / "results"), "--output_dir", str(report), "--data_dir",
                  str(phantom_dir), *SUMMARY)
    assert res.returncode == 0, res.stderr
    assert "against the published leaderboard:" in res.stdout
    assert "Warning" not in res.stderr, res.stderr  # no library warning in a summarize's normal output
    (report / "stdout.txt").write_text(res.stdout)
    return report


def test_section_csv_markdown_html_and_plot(named_report: Path) -> None:
    rows = read_csv(named_report / "against_published.csv")
    assert list(rows[0])[:13] == ["model", "family", "group", "metric", "ours", "ci_low", "ci_high", "published",
                                  "n_ours", "n_published", "verdict", "comparable", "differences"]
    assert {r["model"] for r in rows} == {PUBLISHED_MODEL} and {r["family"] for r in rows} == {"TL", "AD"}
    published = {(r.family, r.group, r.metric): r for r in select(published_rows(), model=PUBLISHED_MODEL,
                                                                   split="main")}
    for r in rows:
        ref = published[(r["family"], r["group"], r["metric"])]
        assert r["published"] == "" if ref.value is None else float(r["published"]) == ref.value
        assert int(r["n_published"]) == ref.n
        assert r["comparable"] == "false" and "parse" in r["differences"] and "engine" in r["differences"]
        assert "data" in r["differences"] and r["verdict"] == ap.NOT_COMPARABLE  # no verdict on another protocol
    overall = next(r for r in rows if (r["family"], r["group"], r["metric"]) == ("TL", "overall", "SuccessRate"))
    assert overall["ours"] == "1.0"  # the mean baseline always answers
    groups = {r["group"] for r in rows if r["family"] == "TL"}
    assert {"overall", "kidney tumor @ CT (A)", "liver tumor @ CT (A)"} <= groups  # the phantom's labels are upstream's
    proto = read_csv(named_report / "protocol_check.csv")
    tl = {p["setting"]: p for p in proto if p["family"] == "TL"}
    assert list(tl) == list(ap.SETTINGS)
    assert (tl["annotation pin"]["differs"], tl["T/L filter"]["differs"], tl["parse"]["differs"]) == \
        ("false", "false", "true")
    assert tl["data"]["differs"] == "true" and tl["data"]["published"] == "MedVision"
    assert tl["data"]["ours"] == "phantom (PhantomCT, PhantomMR)" and "phantom" in tl["data"]["note"]
    assert tl["token budget"]["published"] == "4096" and tl["engine"]["published"] == "vllm"
    assert "T/L filter" not in {p["setting"] for p in proto if p["family"] == "AD"}
    md = (named_report / "against_published.md").read_text()
    assert "Against the published leaderboard: Tumor/lesion size (TL)" in md and "| – | not comparable: " in md
    assert "| below |" not in md and "| published below ours |" not in md
    html = (named_report / "index.html").read_text()
    assert 'id="against-published"' in html and "Protocol check against the published leaderboard" in html
    assert (named_report / "plots" / "against_published_TL.png").stat().st_size > 1000
    assert (named_report / "plots" / "against_published_AD.png").is_file()


def test_a_phantom_run_of_a_published_model_reads_not_comparable_data_phantom(named_report: Path) -> None:
    """One headline per run and family, at the top of the section and of the terminal summary."""
    heads = json.loads((named_report / "summary.json").read_text())["against_published"]["headlines"]
    assert {(h["model"], h["family"]) for h in heads} == {(PUBLISHED_MODEL, "TL"), (PUBLISHED_MODEL, "AD")}
    for h in heads:
        assert h["comparable"] is False and h["headline"].startswith("not comparable: ")
        assert "data (phantom)" in h["headline"] and "parse" in h["headline"]
    out = (named_report / "stdout.txt").read_text()
    assert f"  {PUBLISHED_MODEL} (Tumor/lesion size (TL), as {PUBLISHED_MODEL}): not comparable: " in out
    md = (named_report / "against_published.md").read_text()
    html = (named_report / "index.html").read_text()
    assert "Comparable to the published leaderboard?" in html
    assert html.index("Comparable to the published leaderboard?") < html.index("Protocol check against")
    assert "not comparable" in md


def test_headline_wording() -> None:
    proto = [{"setting": "data", "ours": "phantom (PhantomCT)", "differs": True},
             {"setting": "parse", "ours": "strict", "differs": True}, {"setting": "engine", "differs": False}]
    assert ap.headline(proto, []) == "not comparable: data (phantom), parse"
    same = [{"setting": "data", "ours": "MedVision (KiTS23)", "differs": False}]
    assert ap.headline(same, [{"differences": ""}]) == "comparable to the paper"
    assert ap.headline(same, [{"differences": ""}], paper=False) == "comparable to the reference numbers"
    assert ap.headline(same, [{"differences": "samples 80 vs 1000"}, {"differences": ""}]) == \
        "not comparable: sample counts (1 of 2 rows)"


def test_no_matching_run_adds_no_section(report_dir: Path) -> None:
    assert not (report_dir / "against_published.csv").exists()
    assert 'id="against-published"' not in (report_dir / "index.html").read_text()
    assert json.loads((report_dir / "summary.json").read_text())["against_published"]["rows"] == []


def test_verdicts_take_the_printed_precision() -> None:
    half = 0.00005  # 4 printed decimals
    assert ap.verdict(0.5, 0.4, 0.6, 0.61, half) == ap.ABOVE
    assert ap.verdict(0.5, 0.4, 0.6, 0.6000, half) == ap.INSIDE
    assert ap.verdict(0.5, 0.4, 0.6, 0.60004, half) == ap.INSIDE  # 0.6000 printed: 0.59995-0.60005 meets the CI
    assert ap.verdict(0.5, 0.4, 0.6, 0.39, half) == ap.BELOW
    assert ap.verdict(0.5, None, None, 0.5, half) == ap.NO_CI
    assert ap.verdict(None, 0.4, 0.6, 0.5, half) == ap.NO_VALUE


def _facts(label: str, record: str, weights: str | None, family: str = "TL", **values) -> ap.RunFacts:
    base = {"annotation pin": "1.0.0", "task-list variant": "-CoT", "sample limit": [("limit", 1000)],
            "parse": "judged:gemma-4-31b", "token budget": 4096, "engine": "vllm", "T/L filter": True,
            "data": "MedVision"}
    base.update(values)
    f = ap.RunFacts(label, family, label, record, weights)
    f.values = base
    f.settings = {k: ap._words(k, v) for k, v in base.items()}
    f.settings["model weights"] = f"{record} {weights}"
    return f


def test_matching_by_name_or_by_record_and_weights() -> None:
    rows = [r for r in published_rows() if r.family == "TL" and r.split == "main"]
    by_model = {r.model: r for r in rows}
    q32 = _facts("my-run", "qwen2_5_vl", "Qwen/Qwen2.5-VL-32B-Instruct")
    assert ap.matches(q32, by_model["Qwen2.5-VL-32B-Instruct"]) and not ap.matches(q32, by_model[PUBLISHED_MODEL])
    default = _facts("my-run", "qwen2_5_vl", None)  # the record's default weights: Qwen2.5-VL-7B-Instruct
    assert ap.matches(default, by_model[PUBLISHED_MODEL])
    sft = "MedVision__fullSFT__Qwen2.5VL-7B__D110k-AD5k-TL5k__CoT__512x512__v2"
    assert not ap.matches(default, by_model[sft])  # its weights are not published: by name only
    assert ap.matches(_facts(sft, "qwen2_5_vl", "/local/ckpt"), by_model[sft])
    assert ap.matches(_facts("Lingshu-32b", "hf", "x"), by_model["lingshu-32b"])  # our folder name for the record


def test_protocol_check_says_medgemma_27b_ran_with_8k() -> None:
    (ref, *_) = [r for r in published_rows() if r.model == "MedGemma-27b-it-Budget8k" and r.family == "AD"]
    facts = _facts("MedGemma-27b-it", "medgemma_27b", "google/medgemma-27b-it", family="AD", engine="hf",
                   **{"token budget": 16000})
    check = {p["setting"]: p for p in ap.protocol(facts, ref)}
    assert check["token budget"]["differs"] is True and check["token budget"]["published"] == "8000"
    assert "--max_new_tokens 8000" in check["token budget"]["note"] and "16000" in check["token budget"]["note"]
    same = _facts("MedGemma-27b-it", "medgemma_27b", "google/medgemma-27b-it", family="AD", engine="hf",
                  **{"token budget": 8000})
    assert not [p for p in ap.protocol(same, ref) if p["differs"]]


def test_sample_limit_all_of_fewer_is_the_same_as_the_limit() -> None:
    (ref, *_) = [r for r in published_rows() if r.model == PUBLISHED_MODEL and r.family == "TL"]
    for sel, differs in (([("all", 800), ("limit", 1000)], False), ([("all", 1200)], True), ([("limit", 100)], True)):
        check = {p["setting"]: p for p in ap.protocol(_facts("x", "qwen2_5_vl", None, **{"sample limit": sel}), ref)}
        assert check["sample limit"]["differs"] is differs, sel


def test_reference_numbers_of_ones_own(named_report: Path, tmp_path: Path, phantom_dir: Path) -> None:
    """--reference: the same comparison against a user's file (the columns `medvision-bm published --format csv`
    writes; unstated protocol settings are no difference)."""
    results = named_report.parent / "results"
    ref = tmp_path / "mine.csv"
    ref.write_text("model,family,group,metric,value,n,decimals\n"
                   f"{PUBLISHED_MODEL},TL,overall,SuccessRate,1.0,89,4\n"
                   f"{PUBLISHED_MODEL},TL,overall,avgMAE,0.0001,89,4\n")
    out = tmp_path / "out"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(out), "--data_dir",
                  str(phantom_dir), "--families", "TL", "--no_plots", *SUMMARY, "--reference", str(ref))
    assert res.returncode == 0, res.stderr
    rows = {r["metric"]: r for r in read_csv(out / "against_published.csv")}
    assert set(rows) == {"SuccessRate", "avgMAE"}
    assert rows["SuccessRate"]["verdict"] == ap.INSIDE and rows["avgMAE"]["verdict"] == ap.BELOW
    proto = {p["setting"]: p for p in read_csv(out / "protocol_check.csv")}
    assert proto["annotation pin"]["published"] == "not stated" and proto["annotation pin"]["differs"] == ""
    assert "Against the reference numbers (mine.csv)" in (out / "against_published.md").read_text()
    bad = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(tmp_path / "bad"), "--reference",
                  str(tmp_path / "nope.csv"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()


def test_served_and_imported_runs_are_matched_on_the_weights_they_ran() -> None:
    """An openai-compatible run serving the published weights (by the name it is served by, or --model_hf_id) and an
    imported upstream run whose folder is lmms-eval's sanitized name (its model_args name the weights) are checked
    against the published model; the weights then are no difference, the engine still is."""
    (ref, *_) = [r for r in published_rows() if r.model == PUBLISHED_MODEL and r.family == "TL" and r.split == "main"]
    served = _facts("Qwen_Qwen2.5-VL-7B-Instruct", "openai-compatible", "Qwen/Qwen2.5-VL-7B-Instruct",
                    engine="openai_compatible")
    assert ap.matches(served, ref)
    check = {p["setting"]: p for p in ap.protocol(served, ref)}
    assert check["model weights"]["differs"] is False and check["engine"]["differs"] is True
    hf_id = ap.weights_of_model({"record": "openai-compatible", "weights": "qwen/qwen2.5-vl-7b-instruct",
                                 "served_name": "my-endpoint"})
    assert ap.matches(_facts("my-endpoint", "openai-compatible", hf_id), ref)
    imported = ap.weights_of_model({"record": None, "backend": "upstream-lmms-eval",
                                    "model_args": "pretrained=Qwen/Qwen2.5-VL-7B-Instruct,tensor_parallel_size=1"})
    assert imported == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert ap.matches(_facts("Qwen__Qwen2.5-VL-7B-Instruct", "upstream-lmms-eval", imported), ref)
    assert not ap.matches(_facts("other", "openai-compatible", "Qwen/Qwen2.5-VL-32B-Instruct"), ref)


def test_a_run_that_looks_published_but_is_not_matched_gets_a_note_saying_why() -> None:
    rows = [r for r in published_rows() if r.family == "TL" and r.split == "main"]
    firsts = list({r.model: r for r in rows}.values())
    mine = _facts("Qwen2.5-VL-7B-Instruct-finetuned", "hf", "/ckpt/mine")
    assert not any(ap.matches(mine, r) for r in firsts)
    note = ap.near_miss(mine, firsts)
    assert note is not None and "looks like published model" in note and "/ckpt/mine" in note
    assert ap.near_miss(_facts("oracle", "oracle", None), firsts) is None


def test_an_imported_upstream_folder_without_its_sanitized_name_is_checked(phantom_dir: Path, tmp_path: Path) -> None:
    """Upstream's lmms-eval wrote the files straight into the sanitized folder (no model_name_sanitized in its
    results file): the run is named Qwen__Qwen2.5-VL-7B-Instruct, and matched on its model_args' weights."""
    from medvision_bm.data.layout import DataDir
    from medvision_bm.data.planner import DatasetContract
    from medvision_bm.tasks.scoring import target
    from mvtest_support import run_cli as run_pinned  # the annotation pin a data folder is read at
    from upstream_results import SANITIZED, write_samples

    task = "PhantomMR_TumorLesionSize_Task01_Coronal"
    data = DataDir(DatasetContract.resolve(phantom_dir))
    recs = [{"doc_id": i, "doc": d.upstream_row(phantom_dir), "target": str(target(d)),
             "resps": [["<answer>1, 1</answer>"]], "filtered_resps": ["<answer>1, 1</answer>"]}
            for i, d in enumerate(data.samples(task).docs())]
    folder = tmp_path / "upstream" / "MedVision-TL" / SANITIZED
    write_samples(folder, "20251201_120000", task, recs)
    results_file = next(folder.glob("*_results.json"))
    res = json.loads(results_file.read_text())
    del res["model_name_sanitized"]
    results_file.write_text(json.dumps(res))
    imported = tmp_path / "Results"
    done = run_pinned("import", "--upstream_results", str(tmp_path / "upstream"), "--results_dir", str(imported),
                   "--data_dir", str(phantom_dir))
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "report"
    summary = run_cli("summarize", "--results_dir", str(imported), "--output_dir", str(out), "--data_dir",
                      str(phantom_dir), "--no_plots", *SUMMARY)
    assert summary.returncode == 0, summary.stderr
    heads = json.loads((out / "summary.json").read_text())["against_published"]["headlines"]
    assert [(h["model"], h["published_model"]) for h in heads] == [(SANITIZED, PUBLISHED_MODEL)]
    assert "data (phantom)" in heads[0]["headline"]


def test_rows_that_are_not_comparable_are_greyed_with_their_reason_and_no_verdict(named_report: Path) -> None:
    html = (named_report / "index.html").read_text()
    section = html[html.index('id="against-published"'):]
    section = section[:section.index("</section>")]
    tables = re.findall(r'<table id="against-the-published-leaderboard-[^"]*".*?</table>', section, re.S)
    assert len(tables) == 2  # T/L and A/D
    rows = [r for t in tables for r in re.findall(r"<tr[^>]*>.*?</tr>", t.split("<tbody>", 1)[1], re.S)]
    assert len(rows) == len(read_csv(named_report / "against_published.csv"))
    for row in rows:
        assert row.startswith('<tr class="not-comparable">'), row[:80]
        cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        assert cells[8] == "–" and cells[9].startswith("not comparable: ") and "data" in cells[9], cells
    assert not re.search(r"published (?:inside|above|below) ours", section.split("Comparable to the published")[1]
                         .split("Protocol check")[0] + "".join(tables))
    assert "tr.not-comparable td{" in html  # greyed


def _frame(comparable: list[bool]) -> pl.DataFrame:
    return pl.DataFrame([{"model": "m", "family": "TL", "group": f"g{i}", "metric": "avgMRE", "ours": 0.2,
                          "ci_low": 0.1, "ci_high": 0.3, "published": 0.25, "n_ours": 100, "n_published": 100,
                          "verdict": ap.INSIDE if ok else ap.NOT_COMPARABLE, "comparable": ok,
                          "differences": "" if ok else "data", "published_model": "P", "published_name": "P",
                          "split": "main", "kind": "aggregate", "decimals": 4, "source_file": "f"}
                         for i, ok in enumerate(comparable)], schema=ap._ROW_SCHEMA, orient="row")


def test_a_comparable_row_keeps_its_verdict_and_the_plot_draws_the_other_hollow() -> None:
    frame = _frame([True, False])
    view = ap.against_view(frame, "TL", 0.95, "the published leaderboard")
    assert view.row_classes == ["", "not-comparable"]
    assert view.rows[0][8:] == [ap.INSIDE, "yes"] and view.rows[1][8:] == ["–", "not comparable: data"]
    body = table(view).split("<tbody>", 1)[1]
    assert body.startswith("<tr><td>") and '<tr class="not-comparable">' in body
    frame = frame.with_columns(pl.lit("overall").alias("group"), pl.Series("model", ["a", "b"]))
    job = ap.plot_job(frame, "TL", "unused.png", 0.95, "the published leaderboard")
    fig = FIGURES["against"](job)
    marks = {ln.get_gid(): ln for ax in fig.axes for ln in ax.lines if ln.get_gid() and ln.get_marker() == "o"}
    assert set(marks) == {"comparable", "not-comparable"}
    assert marks["not-comparable"].get_markerfacecolor() == "none"
    assert marks["comparable"].get_markerfacecolor() != "none"
    assert "hollow: not comparable" in fig.get_suptitle()
