"""Scores persisted as the answers land: a run killed before its task's scoring leaves them in the store, its resume
scores only the answers without one and writes what an uninterrupted run writes; a damaged, stale or foreign score
line is never taken."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from medvision_bm.store.scores import PersistedScore
from mvtest_support import REPO, TEST_CONTRACT_ENV, run_cli

pytestmark = pytest.mark.slow
DETECT = "PhantomCT_BoxCoordinate_Task01_Coronal"  # the phantom's largest task
SMALL = "PhantomMR_BoxCoordinate_Task01_Axial"


def _tasks_list(tmp_path: Path, lists: Path, task: str) -> Path:
    counts = json.loads((lists / "tasks_MedVision-Phantom-detect.json").read_text())
    path = tmp_path / f"{task}.json"
    path.write_text(json.dumps({task: counts[task]}))
    return path


def _args(phantom_dir: Path, tl: Path, results: Path, *extra: str) -> list[str]:
    return ["run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl),
            "--results_dir", str(results), "--skip_update_status", "--skip_env_setup", "--no_progress", *extra]


def _store(results: Path) -> Path:
    (folder,) = results.glob("*/*/*/signature.json")
    return folder.parent


def _persisted(results: Path) -> list[PersistedScore]:
    """The complete, well-formed score lines of every writer of the one store under ``results``."""
    out = []
    for path in sorted(results.glob("*/*/*/scores/*.jsonl")):
        for line in path.read_bytes().split(b"\n")[:-1]:  # a last line without its newline is torn
            got = PersistedScore.from_line(line)
            if got is not None:
                out.append(got)
    return out


def _answers(results: Path) -> int:
    return sum(p.read_bytes().count(b'"status":"ok"') for p in results.glob("*/*/*/samples/*.jsonl"))


def _without_times(path: Path) -> dict:
    data = json.loads(path.read_text())
    data.pop("timing")
    data["usage"].pop("latency_s", None)
    return data


def test_a_killed_run_resumes_scoring_only_the_answers_without_a_persisted_score(tmp_path, phantom_dir,
                                                                                   phantom_lists):
    tl = _tasks_list(tmp_path, phantom_lists, DETECT)
    n = json.loads(tl.read_text())[DETECT]
    ref = tmp_path / "ref"
    done = run_cli(*_args(phantom_dir, tl, ref))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((_store(ref) / "results.json").read_text())["counts"]["scored_this_run"] == n

    killed = tmp_path / "killed"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}, **TEST_CONTRACT_ENV}
    proc = subprocess.Popen([sys.executable, "-m", "medvision_bm.cli", *_args(phantom_dir, tl, killed, "--pace_s",
                                                                              "0.02")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=REPO,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and len(_persisted(killed)) < 20:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    store = _store(killed)
    assert not (store / "parsed.jsonl").exists()  # killed before the task's scoring
    persisted = _persisted(killed)
    answered = _answers(killed)
    assert 20 <= len(persisted) <= answered < n
    # a kill in the middle of a checkpoint leaves a torn last line
    (killed_scores,) = store.glob("scores/*.jsonl")
    with open(killed_scores, "ab") as fh:
        fh.write(persisted[0].line()[:57])

    resumed = run_cli(*_args(phantom_dir, tl, killed))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = json.loads((store / "results.json").read_text())
    assert got["counts"]["asked_this_run"] == n - answered
    assert got["counts"]["scored_this_run"] == n - len(persisted)  # every other answer's score was taken
    assert (store / "parsed.jsonl").read_bytes() == (_store(ref) / "parsed.jsonl").read_bytes()
    # parsed.jsonl holds the killed run's rows now: its scores are removed; the resume's own stay until the next run
    left = list(store.glob("scores/*.jsonl"))
    assert not killed_scores.exists() and len(left) == 1
    again = run_cli(*_args(phantom_dir, tl, killed))
    assert again.returncode == 0 and not left[0].exists(), again.stderr[-3000:]
    want = _without_times(_store(ref) / "results.json")
    have = _without_times(store / "results.json")
    assert have["metrics"] == want["metrics"] and have["usage"] == want["usage"]
    assert {k: v for k, v in have["counts"].items() if not k.endswith("_this_run")} \
        == {k: v for k, v in want["counts"].items() if not k.endswith("_this_run")}


def test_a_damaged_stale_or_foreign_score_line_is_never_taken(tmp_path, phantom_dir, phantom_lists):
    tl = _tasks_list(tmp_path, phantom_lists, SMALL)
    n = json.loads(tl.read_text())[SMALL]
    res = tmp_path / "res"
    first = run_cli(*_args(phantom_dir, tl, res))
    assert first.returncode == 0, first.stderr[-3000:]
    store = _store(res)
    want = (store / "parsed.jsonl").read_bytes()
    (score_file,) = store.glob("scores/*.jsonl")
    lines = score_file.read_bytes().split(b"\n")[:-1]
    assert len(lines) == n
    good = [PersistedScore.from_line(line) for line in lines]
    assert all(good) and all(b'"success":true' in g.parsed for g in good if g)

    def wrong(score: PersistedScore) -> bytes:
        return score.parsed.replace(b'"success":true', b'"success":false')

    a, b, c = good[0], good[1], good[2]
    assert a and b and c
    damaged = lines[0].replace(b'"success":true', b'"success":false')  # its check no longer holds
    stale = PersistedScore(b.scoring, b.sha, b.mark ^ 1, b.columns, wrong(b)).line().rstrip(b"\n")
    foreign = PersistedScore("f" * 32, c.sha, c.mark, c.columns, wrong(c)).line().rstrip(b"\n")
    score_file.write_bytes(b"\n".join([damaged, stale, foreign, *lines[3:]]) + b"\n" + lines[3][:40])
    # as a run killed before its task's scoring leaves the store: answers and their scores, no parsed.jsonl
    (store / "parsed.jsonl").unlink()
    (store / ".parsed.index").unlink()

    again = run_cli(*_args(phantom_dir, tl, res))
    assert again.returncode == 0, again.stderr[-3000:]
    counts = json.loads((store / "results.json").read_text())["counts"]
    assert counts["asked_this_run"] == 0
    assert counts["scored_this_run"] == 3  # the three samples whose line was not taken
    assert (store / "parsed.jsonl").read_bytes() == want
