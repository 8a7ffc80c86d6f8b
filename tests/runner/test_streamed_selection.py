"""A task's selection kept as keys, indices and doc hashes (runner/selection.py): a rerun builds docs only for the
samples it asks or re-scores, and every file it writes is, byte for byte, what the runner wrote when it held every
sample's doc (the reference below is that earlier code, transcribed)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from medvision_bm.data.layout import TaskSamples
from medvision_bm.models.base import GenResult, RequestError, SyncBackend
from medvision_bm.models.baselines import OracleBackend
from medvision_bm.models.registry import get_record
from medvision_bm.runner import harness as harness_mod
from medvision_bm.runner import loop as loop_mod
from medvision_bm.runner import selection as selection_mod
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.runner.loop import Runner
from medvision_bm.score.follow import ListSelection
from medvision_bm.store.records import DocRow
from medvision_bm.store.signature import digest, doc_sha, run_signature
from mvtest_support import REPO

pytestmark = pytest.mark.slow
TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"  # two tasks of 8 samples
FAILED = 4  # the sample whose request fails in the first run


class Oracle(SyncBackend):
    """The oracle with a fixed latency (results.json sums it), failing sample ``fail`` when set."""

    name = "oracle-fixed"

    def __init__(self, fail: int | None = None) -> None:
        self.fail, self.oracle = fail, OracleBackend()

    def answer(self, request):
        if request.rundoc.doc.index == self.fail:
            return GenResult(request.key, None, RequestError("http", "HTTP 503", 503, True), latency_s=0.5)
        return dataclasses.replace(self.oracle.answer(request), latency_s=0.25)


@dataclasses.dataclass(frozen=True)
class HeldSelection(ListSelection):
    """The selection as the runner kept it before: every RunDoc and a key -> doc hash dict (its to-do, docs.jsonl
    digest and rows computed as it computed them)."""

    protocol: str = ""
    variant: str = ""

    def __len__(self) -> int:
        return len(self.items)

    @property
    def meta_source(self):
        return self.items[0].doc.meta.get("source") if self.items else None

    def todo(self, state, keep_failed):
        return [pos for pos, rd in enumerate(self.items) if not state.answered(rd.doc.key, self.sha_of[rd.doc.key])
                and not (keep_failed and rd.doc.key in state.failed)]

    def hold(self, positions, rundocs) -> None:
        pass

    def release(self) -> None:
        pass

    def docs_digest(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for rd in self.items:
            key = rd.doc.key
            h.update(f"{key}\0{rd.doc.index}\0{self.sha_of[key]}\0{rd.protocol}\0{rd.variant}\n".encode())
        return h.hexdigest()

    def doc_rows(self):
        return (DocRow.of(rd, self.sha_of[rd.doc.key]) for rd in self.items)


def held(prep):
    """The task as the earlier runner prepared it (all docs built and kept, hashed one by one)."""
    rundocs = prep.samples.all_rundocs()
    shas = {rd.doc.key: doc_sha(rd.doc, rd.view) for rd in rundocs}
    assert prep.run_sig == run_signature(prep.answer_sig, prep.selection, digest(sorted(shas.values())))
    return dataclasses.replace(prep, samples=HeldSelection(rundocs, shas, prep.samples.protocol,
                                                           prep.samples.variant))


def run(results: Path, phantom_dir: Path, backend, monkeypatch, *, keep: bool) -> dict[str, list[list[int]]]:
    """One run; returns per phase ("prepare", "run") the doc indices built, call by call. ``keep``: the reference
    (every doc built and kept)."""
    record = get_record("oracle")
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(TASKS), "--results_dir", str(results),
            "--skip_update_status", "--skip_env_setup", "--no_progress"]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)
    built: dict[str, list[list[int]]] = {"prepare": [], "run": []}
    phase = ["run"]
    real_docs, real_prepare, real_harness = TaskSamples.docs, loop_mod.prepare_task, harness_mod.DirectHarness.run

    def docs(self, indices=None):
        built[phase[0]].append(list(indices))
        return real_docs(self, indices)

    def prepare(*a, **k):
        phase[0] = "prepare"
        try:
            prep = real_prepare(*a, **k)
            return held(prep) if keep else prep
        finally:
            phase[0] = "run"

    def harness_run(self, spec):  # what the harness (a baseline's: the direct one) is handed
        rows.append([rd.to_lmms_row() for rd in spec.rundocs])
        return real_harness(self, spec)

    rows: list = []
    with monkeypatch.context() as m:
        m.setattr(TaskSamples, "docs", docs)
        m.setattr(loop_mod, "prepare_task", prepare)
        m.setattr(harness_mod.DirectHarness, "run", harness_run)
        m.setattr(selection_mod, "CHUNK", 3)  # several chunks per task
        Runner(cfg, lambda cfg, data: backend).run()
    built["harness_rows"] = rows
    return built


def files(results: Path) -> dict[str, bytes]:
    """docs.jsonl, parsed.jsonl and results.json of every store (results.json without its timing)."""
    out = {}
    for p in sorted(results.rglob("*")):
        if p.name in ("docs.jsonl", "parsed.jsonl"):
            out[str(p.relative_to(results))] = p.read_bytes()
        elif p.name == "results.json":
            res = json.loads(p.read_text())
            assert res.pop("timing")["seconds"] >= 0
            out[str(p.relative_to(results))] = json.dumps(res, sort_keys=True).encode()
    return out


def test_a_rerun_builds_docs_only_for_what_it_asks_and_writes_the_bytes_of_the_held_selection(
        tmp_path, phantom_dir, clean_env, monkeypatch):
    results = tmp_path / "res"

    def start_from(folder: Path | None) -> None:
        shutil.rmtree(results, ignore_errors=True)
        if folder is not None:
            shutil.copytree(folder, results)

    def keep_as(name: str) -> Path:
        shutil.copytree(results, tmp_path / name)
        return tmp_path / name

    # the first run (a sample of each task fails), streamed and held, on the same path: the same files
    first = run(results, phantom_dir, Oracle(fail=FAILED), monkeypatch, keep=False)
    assert first["prepare"] == [[0, 1, 2], [3, 4, 5], [6, 7]] * 2  # every sample walked once, a chunk at a time
    streamed = files(results)
    assert len(streamed) == 6 and all(json.loads(v)["counts"]["request_failed"] == 1
                                      for k, v in streamed.items() if k.endswith("results.json"))
    streamed_first = keep_as("streamed_first")
    start_from(None)
    reference = run(results, phantom_dir, Oracle(fail=FAILED), monkeypatch, keep=True)
    assert files(results) == streamed and reference["harness_rows"] == first["harness_rows"]
    assert [len(r) for r in first["harness_rows"]] == [8, 8]
    held_first = keep_as("held_first")

    # the resume (1 of 8 left per task): only the failed sample's doc is built, once
    start_from(streamed_first)
    resume = run(results, phantom_dir, Oracle(), monkeypatch, keep=False)
    assert resume["run"] == [[FAILED], [FAILED]]
    assert [[json.loads(r["payload"])["doc"]["index"] for r in rows] for rows in resume["harness_rows"]] == \
        [[FAILED], [FAILED]]
    streamed = files(results)
    assert all(json.loads(v)["counts"]["asked_this_run"] == 1 and json.loads(v)["complete"]
               for k, v in streamed.items() if k.endswith("results.json"))
    start_from(held_first)
    reference = run(results, phantom_dir, Oracle(), monkeypatch, keep=True)
    assert files(results) == streamed and reference["harness_rows"] == resume["harness_rows"]

    # a rerun with nothing left, on the store the held selection wrote and resumed: no doc built after the walk,
    # docs.jsonl and parsed.jsonl not rewritten (its digest is the held selection's), the files of the held rerun
    held_resumed = keep_as("held_resumed")
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in results.rglob("*.jsonl")
              if p.name in ("docs.jsonl", "parsed.jsonl")}
    noop = run(results, phantom_dir, Oracle(), monkeypatch, keep=False)
    assert noop["run"] == [] and noop["harness_rows"] == []
    assert len(before) == 4 and {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in before} == before
    streamed = files(results)
    start_from(held_resumed)
    run(results, phantom_dir, Oracle(), monkeypatch, keep=True)
    assert files(results) == streamed

def test_a_selection_made_again_from_its_indices_gives_the_same_keys_hashes_and_docs():
    """Positions map back to the doc indices selected (repeats and any order kept), a chunk at a time."""
    from medvision_bm.data.docs import Doc, RunDoc, View

    view = View((4, 4), (1.0, 1.0), (4, 4), (4, 4), (1.0, 1.0), (1.0, 1.0))

    def make(indices):
        made.append(list(indices))
        return [RunDoc(Doc(f"k{i}", "T", "detect", "Axial", "test", i, "D", "01", "Box-Size", f"img{i}", None, None,
                           2, i, 1, (4, 4), (1.0, 1.0), (4, 4, 9), (1.0, 1.0, 1.0), meta={"source": f"s{i}"}), view)
                for i in indices]

    made: list[list[int]] = []
    chosen = [5, 2, 9, 2, 0, 7, 3]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(selection_mod, "CHUNK", 3)
        sel = selection_mod.StreamedSelection.walk(chosen, make, "current", "")
        assert made == [[5, 2, 9], [2, 0, 7], [3]]
        direct = make(chosen)
        assert list(sel.keys) == [rd.doc.key for rd in direct] and len(sel) == 7 and sel.meta_source == "s5"
        assert list(sel.shas) == [doc_sha(rd.doc, rd.view) for rd in direct] == [sel.shas[i] for i in range(7)]
        assert sel.sorted_shas() == sorted(set(sel.shas))
        made.clear()
        assert list(sel.rundocs([6, 1, 3])) == [direct[6], direct[1], direct[3]] and made == [[3, 2, 2]]
        sel.hold([1], [direct[1]])
        made.clear()
        assert list(sel.rundocs([0, 1])) == direct[:2] and made == [[5]]  # the held one is not built again
        assert [r.line() for r in sel.doc_rows()] == [DocRow.of(rd, doc_sha(rd.doc, rd.view)).line() for rd in direct]
