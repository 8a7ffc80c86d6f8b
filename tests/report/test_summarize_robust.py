"""`summarize` renders whatever a run can legitimately leave: families whose every request failed (a served model
that refuses connections, through the real runner), one-sample tasks, an empty task, a store killed before it
selected anything, a family present in one run only, a model present in one family only, non-finite metrics.
The healthy families are reported in full beside them (CSV, Markdown, summary.json, index.html)."""

from __future__ import annotations

import csv
import json
import re
import socket
from pathlib import Path

import pytest

from medvision_bm.store.samples import SampleStore
from phantom_runs import run_baseline, run_cli

pytestmark = pytest.mark.slow


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def messy_results(phantom_dir: Path, phantom_lists: Path, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("messy")
    # healthy: the oracle on detection
    assert all(o.state == "done" for o in run_baseline("oracle", "detect", phantom_dir, root, lists=phantom_lists))
    # every request refused (nothing listens on the port, no retry): detection and TL; TL has no other run
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    for fam in ("detect", "TL"):
        outs = run_baseline("openai-compatible", fam, phantom_dir, root, "--base_url", url, "--model_name", "refused",
                            "--max_retries", "0", lists=phantom_lists)
        assert outs and all(o.state == "incomplete" and o.metrics["n_request_failed"] == o.n_selected for o in outs)
    # one-sample tasks: two runs on A/D only (a model present in one family only)
    run_baseline("oracle", "AD", phantom_dir, root, "--sample_limit", "1", lists=phantom_lists)
    run_baseline("mean", "AD", phantom_dir, root, "--sample_indices", "0", lists=phantom_lists)
    # an empty task (no sample selected) and a store killed before it selected anything, written as the runner does
    model_dir = root / "oracle"
    task = sorted(p.name for p in model_dir.iterdir() if "_BoxCoordinate_" in p.name)[0]
    src = next((model_dir / task).iterdir())
    sig = json.loads((src / "signature.json").read_text())
    for name in ("empty", "killed"):
        store = SampleStore(root / name / task / src.name, sig["answer_signature"])
        store.init(sig["inputs"])
        if name == "empty":
            store.write_docs([])
            (store.folder / "parsed.jsonl").write_text("")
    # non-finite metrics in a parsed.jsonl that another writer produced (Python's json writes NaN and Infinity)
    parsed = next((model_dir / sorted(p.name for p in model_dir.iterdir() if "_BoxCoordinate_" in p.name)[1])
                  .iterdir()) / "parsed.jsonl"
    rows = [json.loads(line) for line in parsed.read_text().splitlines()]
    rows[0]["metrics"]["IoU"], rows[1]["metrics"]["MAE"] = float("nan"), float("inf")
    parsed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="module")
def messy_report(messy_results: Path, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("messy-report") / "out"
    res = run_cli("summarize", "--results_dir", str(messy_results), "--output_dir", str(out), "--n_boot", "200",
                  "--compare", "mean:oracle")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    return out, res.stderr


def test_every_family_renders_beside_an_all_failed_one(messy_report) -> None:
    out, _ = messy_report
    for fam in ("detect", "TL", "AD"):
        for kind in ("leaderboard", "groups", "tasks"):
            assert (out / f"{kind}_{fam}.csv").is_file() and (out / f"{kind}_{fam}.md").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["families"]) == {"detect", "TL", "AD"}
    html = (out / "index.html").read_text()
    assert "refused" in html and "oracle" in html and "mean" in html
    # the healthy family is reported in full: the oracle is perfect on every detection task
    board = [r for r in _csv(out / "leaderboard_detect.csv") if r["aggregate"] == "all regions"]
    by_label = {r["label"]: r for r in board}
    assert float(by_label["oracle"]["IoU"]) == pytest.approx(1.0)
    assert float(by_label["refused"]["SuccessRate"]) == 0.0
    # TL exists only for the refused run: its tasks are listed with every request failed, no value is invented
    tl_tasks = _csv(out / "tasks_TL.csv")
    assert tl_tasks and all(r["label"] == "refused" and int(r["n_request_failed"]) == int(r["n"]) for r in tl_tasks)
    assert all(r["SuccessRate"] in ("0.0", "0") for r in tl_tasks)
    # plots: the healthy family's distributions are drawn; the all-failed family has none to draw
    assert (out / "plots" / "errors_detect.png").is_file()
    assert not list((out / "plots").glob("errors_TL*.png"))


def test_one_sample_intervals_are_flagged_not_shown_as_a_point(messy_report) -> None:
    out, _ = messy_report
    for kind in ("leaderboard", "tasks"):
        md = (out / f"{kind}_AD.md").read_text()
        assert "(n=1: no CI)" in md
        assert not re.search(r"\[([^,\]]+), \1\]", md), md  # no "[x, x]"
        rows = _csv(out / f"{kind}_AD.csv")
        assert rows and all(r[f"{s}_lo"] == "" and r[f"{s}_hi"] == "" for r in rows for s in ("avgMAE", "SuccessRate"))
    summary = json.loads((out / "summary.json").read_text())
    mean = [r for r in summary["families"]["AD"]["leaderboard"] if r["label"] == "mean" and r["avgMAE"] is not None]
    assert mean and all(r["avgMAE_lo"] is None and r["avgMAE_hi"] is None for r in mean)
    # a paired comparison on one pair has no interval, no p-value and no winner
    pairs = _csv(out / "compare_mean_vs_oracle.csv")
    one = [r for r in pairs if r["n_pairs"] == "1"]
    assert one and all(r["better"] == "too few pairs" and r["p_boot"] == "" and r["diff_lo"] == "" for r in one)
    assert "(n=1: no CI)" in (out / "compare_mean_vs_oracle.md").read_text()
    # larger rows keep their intervals
    detect = [r for r in summary["families"]["detect"]["tasks"] if r["label"] == "oracle"]
    assert all(r["num_samples"] > 1 and r["IoU_lo"] is not None for r in detect)


def test_empty_killed_and_non_finite_stores_are_noted_and_counted(messy_report, messy_results: Path) -> None:
    out, stderr = messy_report
    assert "/empty/" in stderr and "/killed/" in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert not [r for r in summary["runs"] if r["label"] in ("empty", "killed")]
    # the store whose parsed.jsonl holds NaN/Infinity is re-scored from its raw answers: every sample counted
    stores = {(r["label"], r["task"]): r for r in summary["runs"]}
    nan_store = [r for r in stores.values() if r["label"] == "oracle" and r["source"].startswith("re-scored")]
    assert len(nan_store) == 1 and nan_store[0]["selected"] == nan_store[0]["success"] > 1
