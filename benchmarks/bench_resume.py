"""Benchmark: computing the to-do list of a task whose store already holds 100,000 answered samples.

Prints the time of the resume path (hash the selected docs, read every store segment, diff) against a fresh start
(same docs, empty store), measured in the same run. Target: resume under 2 s on 2 cores.
Run: python benchmarks/bench_resume.py [--n 100000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from medvision_bm.data.docs import Doc, RunDoc, View
from medvision_bm.io import JsonlAppender
from medvision_bm.models.base import GenResult, GenSettings, Usage
from medvision_bm.runner.loop import PreparedTask, todo_rundocs
from medvision_bm.runner.signature import doc_sha
from medvision_bm.runner.store import SampleStore, StoreWriter


def make_docs(n: int) -> list[RunDoc]:
    out = []
    for i in range(n):
        doc = Doc(key=f"case{i // 40:05d}:d2:s{i % 40}:l1", task="Bench_BoxCoordinate_Task01_Axial", dataset="Bench",
                  family="detect", task_type="BoxCoordinate", task_id="Task01", plane="Axial", split="test", index=i,
                  image=f"Images/case{i // 40:05d}.nii.gz", slice_dim=2, slice_idx=i % 40, label=1, label_name="liver",
                  structure_kind="anatomy", modality="CT", anatomy="abdomen", spacing_mm=(0.8, 0.8, 2.5),
                  image_hw=(512, 512), pixel_hw_mm=(0.8, 0.8), annotation={"box_px": [10, 20, 110, 220]},
                  measurement="the bounding box of the liver")
        out.append(RunDoc(doc, View.for_doc(doc)))
    return out


def todo_time(rundocs: list[RunDoc], store: SampleStore) -> tuple[float, int]:
    t0 = time.perf_counter()
    shas = {rd.doc.key: doc_sha(rd.doc, rd.view) for rd in rundocs}
    prep = PreparedTask(task="Bench", family="detect", rundocs=rundocs, shas=shas, answer_sig=store.answer_signature,
                        answer_inputs={}, run_sig="", selection={}, store=store, gen=GenSettings())
    todo = todo_rundocs(prep, store.read(), keep_failed=False)
    return time.perf_counter() - t0, len(todo)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    n = ap.parse_args().n
    rundocs = make_docs(n)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = SampleStore(Path(tmp) / "fresh", "sig")
        full = SampleStore(Path(tmp) / "full", "sig")
        t0 = time.perf_counter()
        for part in range(4):  # a resumed store usually holds several segments
            writer = StoreWriter(JsonlAppender(full.samples_dir / f"seg{part}.jsonl"), "sig")
            for rd in rundocs[part::4]:
                sha = doc_sha(rd.doc, rd.view)
                writer.append(GenResult(rd.doc.key, "<answer>0.1, 0.2, 0.3, 0.4</answer>", finish_reason="stop",
                                        usage=Usage(812, 24), latency_s=0.4), index=rd.doc.index, doc_sha=sha)
            writer.close()
        build = time.perf_counter() - t0
        fresh_s, fresh_todo = todo_time(rundocs, fresh)
        resume_s, resume_todo = todo_time(rundocs, full)
    assert fresh_todo == n and resume_todo == 0
    print(f"samples: {n}  (store written in {build:.2f} s)")
    print(f"fresh start : to-do of {fresh_todo} computed in {fresh_s:.3f} s")
    print(f"resume      : to-do of {resume_todo} computed in {resume_s:.3f} s")
    print(f"ratio resume/fresh: {resume_s / fresh_s:.2f}x   target: resume < 2 s -> {'OK' if resume_s < 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
