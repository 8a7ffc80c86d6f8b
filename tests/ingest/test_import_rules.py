"""`medvision-bm import` under the run path's rules: model names as one folder name, image paths
that stay below Datasets/, the size bounds of medvision_bm.limits, results files checked, and one writer at a time
per store (a concurrent import or a killed one never leaves a stale or mixed store).

Upstream's files as upstream's vendored lmms-eval writes them (master c221615 ``lmms_eval/loggers/
evaluation_tracker.py`` ``save_results_samples``: one JSON record per line, ``resps`` ``[[<answer>]]``)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from medvision_bm import limits
from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract
from medvision_bm.errors import UserError
from medvision_bm.ingest.upstream import SEGMENT, import_upstream
from medvision_bm.io import iter_jsonl
from medvision_bm.tasks.scoring import target
from mvtest_support import run_cli

TASK = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal"
TS1, TS2 = "20250301_080000", "20250302_080000"


def records(phantom_dir: Path, answer=lambda i, t: f"<answer>{t * 1.1:.3f}</answer>", n: int | None = None) -> list:
    docs = DataDir(DatasetContract.resolve(phantom_dir)).samples(TASK).docs()[:n]
    out = []
    for i, d in enumerate(docs):
        t = target(d)[0]
        text = answer(i, t)
        out.append({"doc_id": i, "doc": d.upstream_row(phantom_dir), "target": str(t), "resps": [[text]],
                    "filtered_resps": [text], "input": "prompt"})
    return out


def write_samples(folder: Path, ts: str, recs: list, results: object = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{ts}_samples_{TASK}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    if results is not None:
        (folder / f"{ts}_results.json").write_text(results if isinstance(results, str) else json.dumps(results))
    return path


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


# ------------------------------------------------------------------------------------------- C: names and paths


@pytest.mark.parametrize("name", ["../../escaped", "ABSOLUTE", "two\nlines", "m" * 250, ".hidden"])
def test_model_names_run_refuses_are_refused_by_import_before_anything_is_written(phantom_dir, tmp_path, name):
    absolute = tmp_path / "outside" / "abs-model"  # an absolute name, in a folder of this test's own
    name = str(absolute) if name == "ABSOLUTE" else name
    up = tmp_path / "Results" / "MedVision-AD" / "some-model"
    write_samples(up, TS1, records(phantom_dir, n=2))
    res = run_cli("import", "--upstream_results", str(up), "--results_dir", str(tmp_path / "ours" / "R"),
                  "--data_dir", str(phantom_dir), "--model_name", name)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert len(res.stderr.strip().splitlines()) == 1 and "--model_name" in res.stderr
    assert not (tmp_path / "ours").exists() and not absolute.parent.exists()
    assert files_under(tmp_path) == files_under(tmp_path / "Results")


def test_a_model_folder_named_as_run_refuses_is_skipped_with_the_reason(phantom_dir, tmp_path):
    bad = "x" * 230  # a folder name ext4 takes, over the 200 characters a --model_name may have
    write_samples(tmp_path / "Results" / bad, TS1, records(phantom_dir, n=2))
    write_samples(tmp_path / "Results" / "good-model", TS1, records(phantom_dir, n=2))
    report = import_upstream(tmp_path / "Results", tmp_path / "ours", data_dir=phantom_dir)
    assert [t.model for t in report.tasks] == ["good-model"]
    assert any("230 characters long" in s and "--model_name" in s for s in report.skipped_tasks), report.skipped_tasks
    assert {p.name for p in (tmp_path / "ours").iterdir()} == {"good-model"}


@pytest.mark.parametrize("image", ["/etc/hostname", "../../../../etc/hostname", "/data/Datasets/../../etc/hostname"])
def test_records_whose_image_file_leaves_datasets_are_never_stored_nor_read(phantom_dir, tmp_path, image):
    recs = records(phantom_dir, n=3)
    recs[1]["doc"]["image_file"] = image
    up = tmp_path / "Results" / "MedVision-AD" / "m"
    write_samples(up, TS1, recs)
    report = import_upstream(up, tmp_path / "ours", use_data=False)  # docs from the records themselves
    (ti,) = report.tasks
    assert ti.added == 2 and any("image_file" in u for u in ti.unmatched), ti.unmatched
    stored = [json.loads(line) for line in (ti.stores[0] / "docs.jsonl").read_text().splitlines()]
    assert all(not r["doc"]["image_file"].startswith("/") and ".." not in r["doc"]["image_file"] for r in stored)


def test_a_stored_doc_naming_a_file_outside_datasets_is_not_rendered(phantom_dir):
    """A store imported before this rule (or edited) still never makes the report read a file outside Datasets/."""
    import dataclasses

    from medvision_bm.data.docs import RunDoc
    from medvision_bm.tasks import hooks

    doc = DataDir(DatasetContract.resolve(phantom_dir)).samples(TASK).docs()[0]
    good = RunDoc(doc=doc, view=None, data_root=str(phantom_dir))  # type: ignore[arg-type]
    assert hooks.image_path(good).is_file()
    for bad in ("/etc/hostname", "../../etc/hostname", "PhantomXR/../../../etc/hostname"):
        rd = dataclasses.replace(good, doc=dataclasses.replace(doc, image_file=bad))
        with pytest.raises(UserError, match="image_file"):
            hooks.image_path(rd)


# ------------------------------------------------------------------------------------------- C: results files


@pytest.mark.parametrize("results, why", [("{not json", "not JSON"), ("[" * 20_000 + "]" * 20_000, "nested"),
                                          (json.dumps({"configs": [1, 2]}), "'configs' is a JSON list"),
                                          (json.dumps(["a list"]), "holds a JSON list")])
def test_a_broken_upstream_results_file_is_a_one_line_error_naming_it(phantom_dir, tmp_path, results, why):
    up = tmp_path / "Results" / "m"
    write_samples(up, TS1, records(phantom_dir, n=2), results=results)
    res = run_cli("import", "--upstream_results", str(up), "--results_dir", str(tmp_path / "ours"),
                  "--data_dir", str(phantom_dir))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    line = res.stderr.strip()
    assert "\n" not in line and why in line and f"{TS1}_results.json" in line, line


# ------------------------------------------------------------------------------------------- A: sizes


def test_an_upstream_answer_over_the_stored_maximum_is_stored_cut_as_the_run_path_cuts(phantom_dir, tmp_path):
    long = "x" * (limits.MAX_ANSWER_CHARS + 3_000_000) + " <answer>4.2</answer>"
    recs = records(phantom_dir, answer=lambda i, t: long if i == 0 else f"<answer>{t:.3f}</answer>", n=2)
    up = tmp_path / "Results" / "m"
    write_samples(up, TS1, recs)
    (ti,) = import_upstream(up, tmp_path / "ours", data_dir=phantom_dir).tasks
    stored = {r["index"]: r for r in iter_jsonl(ti.stores[0] / "samples" / SEGMENT)}
    first = stored[min(stored)]
    assert len(first["text"]) == limits.MAX_ANSWER_CHARS + len(limits.ANSWER_CUT_MARK)
    assert first["truncated_chars"] == len(long) - limits.MAX_ANSWER_CHARS
    assert first["text"].endswith("<answer>4.2</answer>")  # the tail (where the answer is) is kept


def test_records_past_the_limit_are_not_read_and_said(phantom_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_SAMPLES_RECORDS", 3)
    up = tmp_path / "Results" / "m"
    write_samples(up, TS1, records(phantom_dir, n=5))
    report = import_upstream(up, tmp_path / "ours", data_dir=phantom_dir)
    assert report.tasks[0].records == 3
    assert any("over 3 records" in m for m in report.malformed), report.malformed


def test_a_record_line_past_the_limit_is_skipped_unparsed(phantom_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_RECORD_BYTES", 4096)
    recs = records(phantom_dir, n=3)
    recs[1]["resps"] = [["y" * 10_000]]
    up = tmp_path / "Results" / "m"
    write_samples(up, TS1, recs)
    report = import_upstream(up, tmp_path / "ours", data_dir=phantom_dir)
    assert report.tasks[0].records == 2
    assert any(":2: a record over 4096 bytes" in m for m in report.malformed), report.malformed


def test_a_samples_file_that_is_a_fifo_is_reported_without_blocking(phantom_dir, tmp_path):
    up = tmp_path / "Results" / "m"
    up.mkdir(parents=True)
    os.mkfifo(up / f"{TS1}_samples_{TASK}.jsonl")
    write_samples(up, TS2, records(phantom_dir, n=2))
    box: dict = {}
    t = threading.Thread(target=lambda: box.update(r=import_upstream(up, tmp_path / "ours", data_dir=phantom_dir)),
                         daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the import blocked on the FIFO"
    report = box["r"]
    assert any("FIFO" in m for m in report.malformed) and report.tasks[0].added == 2


# ------------------------------------------------------------------------------------------- C: one writer per store


def test_concurrent_imports_of_two_timestamps_leave_the_newer_answers_and_both_sources(phantom_dir, tmp_path,
                                                                                        monkeypatch):
    """Two imports into one store at once; each waits a while after reading the store's segment (where a writer
    without the store's lock merges from a state the other is about to replace)."""
    import time

    import medvision_bm.ingest.upstream as ingest

    read_segment = ingest._read_segment

    def slow_read(path):
        found = read_segment(path)
        time.sleep(0.5)
        return found

    monkeypatch.setattr(ingest, "_read_segment", slow_read)
    docs_n = len(records(phantom_dir))
    a, b = tmp_path / "A" / "m", tmp_path / "B" / "m"
    write_samples(a, TS1, records(phantom_dir, answer=lambda i, t: f"old <answer>{t:.2f}</answer>"))
    write_samples(b, TS2, records(phantom_dir, answer=lambda i, t: f"new <answer>{t:.3f}</answer>"))
    ours = tmp_path / "ours"
    errors: list[BaseException] = []

    def one(up: Path) -> None:
        try:
            import_upstream(up, ours, data_dir=phantom_dir)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(up,)) for up in (b, a)]  # the newer first: the older must lose
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    (store,) = {p.parent for p in ours.glob("m/*/*/signature.json")}
    texts = [r["text"] for r in iter_jsonl(store / "samples" / SEGMENT)]
    assert len(texts) == docs_n and all(t.startswith("new ") for t in texts)
    sources = json.loads((store / "signature.json").read_text())["import"]["sources"]
    assert {Path(s["path"]).parent.parent.name for s in sources} == {"A", "B"}
    parsed = [json.loads(line) for line in (store / "parsed.jsonl").read_text().splitlines()]
    assert len(parsed) == docs_n


def test_an_import_killed_before_scoring_is_scored_by_the_rerun(phantom_dir, tmp_path, monkeypatch):
    import medvision_bm.ingest.upstream as ingest

    up = tmp_path / "Results" / "m"
    write_samples(up, TS1, records(phantom_dir, answer=lambda i, t: "no number here"))
    ours = tmp_path / "ours"
    import_upstream(up, ours, data_dir=phantom_dir)
    write_samples(up, TS2, records(phantom_dir))  # a newer, successful run

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest, "_score", killed)
    with pytest.raises(KeyboardInterrupt):
        import_upstream(up, ours, data_dir=phantom_dir)
    monkeypatch.undo()
    again = import_upstream(up, ours, data_dir=phantom_dir)
    assert again.tasks[0].added == 0 and again.tasks[0].replaced == 0  # nothing new to store ...
    (store,) = again.tasks[0].stores
    metrics = json.loads((store / "results.json").read_text())["metrics"]
    assert metrics["SuccessRate"] == 1.0  # ... and yet the store's numbers are those of its answers


def test_a_store_whose_parse_is_older_than_its_segment_is_scored_once_not_on_every_import(phantom_dir, tmp_path,
                                                                                           monkeypatch):
    """A store whose segment's time moved on (touched, restored from a backup) holds a parse older than its
    answers that is up to date. The import scores it once (nothing to rewrite); later imports of the same files do
    not score it again."""
    import os
    import time

    import medvision_bm.ingest.upstream as ingest

    up = tmp_path / "Results" / "m"
    write_samples(up, TS1, records(phantom_dir))
    ours = tmp_path / "ours"
    (store,) = import_upstream(up, ours, data_dir=phantom_dir).tasks[0].stores
    time.sleep(0.05)
    os.utime(store / "samples" / ingest.SEGMENT)  # now: newer than parsed.jsonl and results.json
    scored: list[Path] = []
    real = ingest._score
    monkeypatch.setattr(ingest, "_score", lambda folder, *a: scored.append(folder) or real(folder, *a))
    import_upstream(up, ours, data_dir=phantom_dir)
    import_upstream(up, ours, data_dir=phantom_dir)
    assert len(scored) <= 1, scored  # results.json, rewritten by that score, is newer than the segment after it


def test_a_parse_a_score_finds_up_to_date_keeps_its_bytes_and_reads_as_current_after(phantom_dir, tmp_path):
    """A store whose segment was touched after its parse: the import's score finds every row up to date, rewrites
    no row, and leaves a parse that the freshness rule (report, scoring, import alike) reads as current."""
    import os
    import time

    import medvision_bm.ingest.upstream as ingest
    from medvision_bm.score.store_scoring import current_scoring
    from medvision_bm.store.freshness import Fresh, Refreshable, parse_state

    up = tmp_path / "Results" / "m"
    write_samples(up, TS1, records(phantom_dir))
    ours = tmp_path / "ours"
    (store,) = import_upstream(up, ours, data_dir=phantom_dir).tasks[0].stores
    assert parse_state(store, current_scoring) == Fresh()
    rows, results = (store / "parsed.jsonl").read_bytes(), json.loads((store / "results.json").read_text())
    time.sleep(0.05)
    os.utime(store / "samples" / ingest.SEGMENT)
    assert isinstance(parse_state(store, current_scoring), Refreshable)
    import_upstream(up, ours, data_dir=phantom_dir)
    assert parse_state(store, current_scoring) == Fresh()
    assert (store / "parsed.jsonl").read_bytes() == rows
    assert json.loads((store / "results.json").read_text())["metrics"] == results["metrics"]


# ------------------------------------------------------------------------- C: the judged import under the same rules
# Upstream's judged copies: ``<model>/llm-parsed_<judge>/<the raw file's name>``, each record the raw one plus
# ``LLM_filtered_resps``, ``LLM_judge_answer_mode`` and ``LLM_judge`` (YongchengYAO/MedVision
# script/llm-parsing/apply_judge.py @2f20f64).


def judged(recs: list, judge_model: object = "google/gemma-4-31B-it") -> list:
    out = []
    for r in recs:
        pred = r["filtered_resps"][0].removeprefix("<answer>").removesuffix("</answer>")
        out.append({**r, "LLM_filtered_resps": [pred], "LLM_judge_answer_mode": "conclusion_in_format",
                    "LLM_judge_SR": {"success": True},
                    "LLM_judge": {"reason": "strict_success", "strict_pred": pred, "judge_pred": "",
                                  "judge_span": "", "judge_model": judge_model}})
    return out


def judged_layout(phantom_dir: Path, tmp_path: Path, judge_dir: str = "llm-parsed_gemma-4-31b",
                  judge_model: object = "google/gemma-4-31B-it") -> tuple[Path, Path]:
    model = tmp_path / "Results" / "MedVision-AD" / "some-model"
    recs = records(phantom_dir, n=4)
    write_samples(model, TS1, recs)
    write_samples(model / judge_dir, TS1, judged(recs, judge_model))
    return model.parent, model / judge_dir


def import_cli(up: Path, ours: Path, phantom_dir: Path, timeout: float = 120):
    return run_cli("import", "--upstream_results", str(up), "--results_dir", str(ours), "--data_dir",
                   str(phantom_dir), timeout=timeout)


def _judged_parses(ours: Path) -> list[Path]:
    return sorted(ours.rglob("judged/*/judge.json"))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_judged_file_that_is_no_regular_file_is_reported_not_read(phantom_dir, tmp_path, kind):
    up, jdir = judged_layout(phantom_dir, tmp_path)
    write_samples(jdir.parent, TS2, records(phantom_dir, n=4))  # a second raw file (the same answers) ...
    bad = jdir / f"{TS2}_samples_{TASK}.jsonl"  # ... whose judged copy is no regular file
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to("/dev/zero")
    res = import_cli(up, tmp_path / "ours", phantom_dir, timeout=90)  # before: read (or hashed) without end
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "not a regular file" in res.stderr + res.stdout
    (jj,) = _judged_parses(tmp_path / "ours")
    sources = json.loads(jj.read_text())["import"]["sources"]
    assert [Path(s["path"]).name for s in sources] == [f"{TS1}_samples_{TASK}.jsonl"]


@pytest.mark.parametrize("name", ["llm-parsed_tab\tjudge", "llm-parsed_\x1b[2Jjudge", "llm-parsed_" + "j" * 230])
def test_a_judged_folder_named_as_no_folder_may_be_is_skipped_with_the_reason(phantom_dir, tmp_path, name):
    up, _ = judged_layout(phantom_dir, tmp_path, judge_dir=name)
    res = import_cli(up, tmp_path / "ours", phantom_dir)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "the judged folder's name" in res.stderr + res.stdout
    assert _judged_parses(tmp_path / "ours") == []  # the raw answers imported, no judge named by that folder


@pytest.mark.parametrize("judge_model", ["x" * 5000, "gemma\n<script>", 42])
def test_a_judge_model_name_no_model_has_is_left_out_of_the_judge_file(phantom_dir, tmp_path, judge_model):
    """The signature names the judge of the folder (llm-parsed_<judge>); what the records name is kept beside it,
    a name no model has left out and reported."""
    up, _ = judged_layout(phantom_dir, tmp_path, judge_model=judge_model)
    res = import_cli(up, tmp_path / "ours", phantom_dir)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr[-2000:]
    (jj,) = _judged_parses(tmp_path / "ours")
    held = json.loads(jj.read_text())
    assert held["inputs"]["weights"] == "gemma-4-31b" and held["import"]["judge_models"] == []
    assert "which is no model name" in res.stderr + res.stdout


@pytest.mark.parametrize("content", ["not json {", "[1, 2]", '{"import": [1]}'])
def test_a_broken_judge_file_of_an_earlier_import_is_a_note_not_a_traceback(phantom_dir, tmp_path, content):
    up, _ = judged_layout(phantom_dir, tmp_path)
    assert import_cli(up, tmp_path / "ours", phantom_dir).returncode in (0, 1)
    (jj,) = _judged_parses(tmp_path / "ours")
    jj.write_text(content)
    res = import_cli(up, tmp_path / "ours", phantom_dir)
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "judge file" in res.stderr + res.stdout and "not imported" in res.stderr + res.stdout
    assert jj.read_text() == content  # left as it was, for the user to move away


def test_a_judged_record_whose_image_file_leaves_datasets_matches_no_doc(phantom_dir, tmp_path):
    up, jdir = judged_layout(phantom_dir, tmp_path)
    (jfile,) = jdir.glob("*.jsonl")
    recs = [json.loads(x) for x in jfile.read_text().splitlines()]
    recs[0]["doc"]["image_file"] = "/etc/hostname"
    jfile.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = import_cli(up, tmp_path / "ours", phantom_dir)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr[-2000:]
    (jj,) = _judged_parses(tmp_path / "ours")
    answers = [json.loads(x) for x in (jj.parent / "answers" / "upstream-import.jsonl").read_text().splitlines()]
    assert len(answers) == 3 and not any("hostname" in json.dumps(a) for a in answers)
