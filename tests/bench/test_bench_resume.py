"""benchmarks/bench_resume.py's stores: built with each distinct answer scored once, they are the bytes a plain
build writes through the same writers (finished and killed), times aside."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from mvtest_support import REPO

N = 600  # every 10th sample failed (finished) or never asked (killed): 540 answers, 4 segments


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _timeless(name: str, data: bytes) -> object:
    """A file as compared: the times a build records (when results.json's run ran, when docs.jsonl and parsed.jsonl
    were written) left out; every other file, and the rows of the parse's index, byte for byte."""
    if name == "results.json":
        return {k: v for k, v in json.loads(data).items() if k != "timing"}
    if name == ".docs.merged.json":
        return {k: v for k, v in json.loads(data).items() if k != "mtime_ns"}
    if name == ".parsed.index":
        header, rows = data.split(b"\n", 1)
        return {k: v for k, v in json.loads(header).items() if k != "parsed_mtime_ns"}, rows
    return data


@pytest.mark.parametrize("killed", [False, True], ids=["finished", "killed"])
def test_a_store_built_with_each_answer_scored_once_is_what_a_plain_build_writes(tmp_path, monkeypatch, killed):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_resume
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from medvision_bm.store import answer_record

    # every answer line stamped with the same time, so the answers' line hashes (in the parse's index and the
    # persisted scores) are comparable between the two builds
    monkeypatch.setattr(answer_record, "time", SimpleNamespace(time=lambda: 1_800_000_000.25))
    plain, shared = tmp_path / "plain", tmp_path / "shared"
    bench_resume.build(plain, N, 0.1, killed=killed, plain=True)
    calls: list[str] = []
    scorer = bench_resume.score_answer

    def counted(doc, *args, **kwargs):
        calls.append(doc.key)
        return scorer(doc, *args, **kwargs)

    monkeypatch.setattr(bench_resume, "score_answer", counted)
    bench_resume.build(shared, N, 0.1, killed=killed)
    assert 0 < len(calls) <= 7  # one score per distinct target (7 boxes), not one per answer (540)

    got, want = _files(shared), _files(plain)
    assert sorted(got) == sorted(want)
    assert ("scores/seg0.jsonl" in want) if killed else ("parsed.jsonl" in want and "results.json" in want)
    for name in want:
        assert _timeless(name, got[name]) == _timeless(name, want[name]), name
    if not killed:
        rows = [json.loads(line) for line in (shared / "parsed.jsonl").read_text().splitlines()]
        assert len(rows) == N and len({r["key"] for r in rows}) == N  # each row under its own sample's key
        assert sum(r["status"] == "ok" for r in rows) == N - N // 10


def test_the_noop_rerun_is_printed_against_the_walk_in_process_and_all_in(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_resume.py"), "--n", "400", "--pairs", "1",
                           "--sides", "noop,walk", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"noop [\d.]+ s \(CPU [\d.]+ s\) / \d+ MB \(asked 0\) \[selection [\d.]+ s, process [\d.]+ s\]", out), out
    assert re.search(r"noop / walk: per round [\d.]+; median [\d.]+; process wall per round [\d.]+$", out, re.M), out
    assert not any(tmp_path.iterdir())  # the stores are removed
