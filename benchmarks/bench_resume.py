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
    view = View(image_hw=(512, 512), pixel_hw_mm=(0.8, 0.8), canvas_hw=(512, 512), content_hw=(512, 512),
                stated_pixel_hw_mm=(0.8, 0.8), header_pixel_hw=(0.8, 0.8))
    out = []
    for i in range(n):
        case, s = i // 40, i % 40
        doc = Doc(key=f"Bench/Images/case{case:05d}.nii.gz:d2:s{s}:l1", task="Bench_BoxCoordinate_Task01_Axial",
                  family="detect", plane="Axial", split="test", index=i, dataset_name="Bench", taskID="01",
                  taskType="Box-Size", image_file=f"Bench/Images/case{case:05d}.nii.gz",
                  mask_file=f"Bench/Masks/case{case:05d}.nii.gz", landmark_file=None, slice_dim=2, slice_idx=s,
                  label=1, image_size_2d=(512, 512), pixel_size=(0.8, 0.8), image_size_3d=(512, 512, 40),
                  voxel_size=(0.8, 0.8, 2.5),
                  bounding_boxes={"min_coords": [[20, 10]], "max_coords": [[219, 109]], "center_coords": [[119, 59]],
                                  "dimensions": [[200, 100]], "sizes": [[160.0, 80.0]]},
                  meta={"image_description": "abdominal CT", "image_modality": "CT", "label_name": "liver",
                        "source": "benchmarks/bench_resume.py"})
        out.append(RunDoc(doc, view))
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
