"""Benchmark: a rerun of a task whose store already holds every answer (nothing left to ask), at real scale.

Times, on a store of --n answered samples (4 segments, as several runs leave them):
  * the part of a resume that computes the to-do list (hash the selected docs, read every segment, diff): the figure
    this benchmark printed before, kept for comparison;
  * the whole rerun the runner does for the task (``Runner._run_task`` with nothing to ask: hash, read, diff,
    docs.jsonl, scoring, parsed.jsonl, results.json), in a fresh process whose peak RSS is reported;
  * for reference, the finalisation every rerun used to pay (docs.jsonl merged and rewritten, every answer
    re-scored, parsed.jsonl rewritten): the first finalisation of the store, timed in the building process.
The selection's doc objects are built in each process first (a real run reads them from the plan) and reported
apart. Targets on 2 cores at 1M samples: whole rerun < 15 s and peak RSS < 2 GB.
Run: python benchmarks/bench_resume.py [--n 100000] [--workdir DIR]   (1M samples: about 3 GB of disk)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from _peak import peak_rss_mb, reset_peak, rss_mb
from medvision_bm.data.docs import Doc, RunDoc, View
from medvision_bm.io import JsonlAppender
from medvision_bm.models.base import GenResult, GenSettings, Usage
from medvision_bm.runner.loop import PreparedTask, Runner, todo_rundocs
from medvision_bm.store.samples import SampleStore, StoreWriter
from medvision_bm.store.signature import doc_sha

SIG = "bench-answer-signature"
TASK = "Bench_BoxCoordinate_Task01_Axial"


def make_docs(n: int) -> list[RunDoc]:
    view = View(image_hw=(512, 512), pixel_hw_mm=(0.8, 0.8), canvas_hw=(512, 512), content_hw=(512, 512),
                stated_pixel_hw_mm=(0.8, 0.8), header_pixel_hw=(0.8, 0.8))
    meta = {"image_description": "abdominal CT", "image_modality": "CT", "label_name": "liver",
            "source": "benchmarks/bench_resume.py"}  # one per task and label, as the data layer shares it
    out = []
    for i in range(n):
        case, s = i // 40, i % 40
        doc = Doc(key=f"Bench/Images/case{case:05d}.nii.gz:d2:s{s}:l1", task=TASK,
                  family="detect", plane="Axial", split="test", index=i, dataset_name="Bench", taskID="01",
                  taskType="Box-Size", image_file=f"Bench/Images/case{case:05d}.nii.gz",
                  mask_file=f"Bench/Masks/case{case:05d}.nii.gz", landmark_file=None, slice_dim=2, slice_idx=s,
                  label=1, image_size_2d=(512, 512), pixel_size=(0.8, 0.8), image_size_3d=(512, 512, 40),
                  voxel_size=(0.8, 0.8, 2.5),
                  bounding_boxes={"min_coords": [[20, 10]], "max_coords": [[219, 109]], "center_coords": [[119, 59]],
                                  "dimensions": [[200, 100]], "sizes": [[160.0, 80.0]]},
                  meta=meta)
        out.append(RunDoc(doc, view))
    return out


def prepared(rundocs: list[RunDoc], store: SampleStore) -> PreparedTask:
    shas = {rd.doc.key: doc_sha(rd.doc, rd.view) for rd in rundocs}
    inputs = {"task_version": "bench", "plan_version": "bench"}
    return PreparedTask(task=TASK, family="detect", rundocs=rundocs, shas=shas, answer_sig=SIG, answer_inputs=inputs,
                        run_sig="bench-run", selection={}, store=store, gen=GenSettings())


def bench_runner() -> Runner:
    """The runner's own task code, without a data folder or a model (nothing is asked)."""
    runner = object.__new__(Runner)
    runner.cfg = SimpleNamespace(force=True, keep_failed=False, shard=None, protocol="current", model_name="bench",
                                 record=SimpleNamespace(name="oracle", is_api=False), argv=["bench"],
                                 contract=SimpleNamespace(planner_version="bench", filtering=True),
                                 system_prompt=None, log_sys_prompt=False, progress=False, batch_size=1,
                                 perceived_size_rule="none")
    runner.status = None
    runner._backend = None
    runner._provenance = {"versions": {}, "environment": None, "git_commit": None}
    return runner


def rerun(folder: Path, n: int) -> dict[str, float]:
    """In a fresh process: the old part-only figure, then the whole rerun (each after its own doc hashing)."""
    base_mb = rss_mb()  # the interpreter and the imports: paid once whatever n
    t0 = time.perf_counter()
    rundocs = make_docs(n)
    docs_s, docs_mb, docs_peak = time.perf_counter() - t0, rss_mb(), peak_rss_mb()
    reset_peak()
    store = SampleStore(folder, SIG)
    t0 = time.perf_counter()
    prep = prepared(rundocs, store)
    hash_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    todo = todo_rundocs(prep, store.read(), keep_failed=False)
    part_s = hash_s + time.perf_counter() - t0
    assert not todo
    with tempfile.TemporaryDirectory() as tmp:  # the same to-do against an empty store: a fresh start
        t0 = time.perf_counter()
        fresh = SampleStore(Path(tmp) / "fresh", SIG)
        n_fresh = len(todo_rundocs(prepared(rundocs, fresh), fresh.read(), keep_failed=False))
        fresh_s = time.perf_counter() - t0
    assert n_fresh == n
    part_peak = peak_rss_mb()
    reset_peak()  # the whole rerun's own peak window
    t0 = time.perf_counter()
    prep = prepared(rundocs, store)  # hashed again: the whole rerun starts from the selection, as a run does
    outcome = bench_runner()._run_task(prep)
    whole_s = time.perf_counter() - t0
    assert outcome.state == "done" and outcome.n_asked == 0, outcome
    return {"base_mb": base_mb, "docs_s": docs_s, "docs_mb": docs_mb, "hash_s": hash_s, "part_s": part_s, "whole_s": whole_s,
            "fresh_s": fresh_s, "n_fresh": n_fresh,
            "rerun_peak_mb": peak_rss_mb(), "peak_mb": max(docs_peak, part_peak, peak_rss_mb())}


def build(folder: Path, n: int) -> dict[str, float]:
    rundocs = make_docs(n)
    store = SampleStore(folder, SIG)
    store.init({"bench": True})
    t0 = time.perf_counter()
    for part in range(4):  # a resumed store usually holds several segments
        writer = StoreWriter(JsonlAppender(store.samples_dir / f"seg{part}.jsonl"), SIG)
        for rd in rundocs[part::4]:
            writer.append(GenResult(rd.doc.key, "<answer>0.1, 0.2, 0.3, 0.4</answer>", finish_reason="stop",
                                    usage=Usage(812, 24), latency_s=0.4), index=rd.doc.index,
                          doc_sha=doc_sha(rd.doc, rd.view))
        writer.close()
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    outcome = bench_runner()._run_task(prepared(rundocs, store))  # docs.jsonl, every answer scored, parsed.jsonl
    assert outcome.state == "done" and outcome.n_asked == 0, outcome
    return {"write_s": write_s, "first_s": time.perf_counter() - t0, "build_peak_mb": peak_rss_mb()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--workdir", type=Path, default=None, help="where the store is written (default: a temp dir)")
    ap.add_argument("--rerun-only", type=Path, default=None, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.rerun_only is not None:
        print(json.dumps(rerun(args.rerun_only, args.n)))
        return
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        folder = Path(tmp) / "store"
        built = build(folder, args.n)
        child = subprocess.run([sys.executable, __file__, "--n", str(args.n), "--rerun-only", str(folder)],
                               capture_output=True, text=True, check=True)
        r = json.loads(child.stdout.strip().splitlines()[-1])
        size_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
    n = args.n
    print(f"samples: {n}  store: {size_mb:.0f} MB on disk, answers written in {built['write_s']:.1f} s")
    print(f"first finalisation (docs.jsonl written, every answer scored, parsed.jsonl written): {built['first_s']:.2f} s"
          f"   [what every rerun paid before]")
    print(f"rerun process: selection's doc objects built in {r['docs_s']:.2f} s (a real run reads them from the plan);"
          f" RSS with them: {r['docs_mb']:.0f} MB")
    print(f"  fresh start : to-do of {r['n_fresh']} computed in {r['fresh_s']:.3f} s (same docs, empty store)")
    print(f"  resume      : to-do of 0 computed in {r['part_s']:.3f} s (hash {r['hash_s']:.2f} s + read segments + "
          f"diff)   [the old, part-only figure]")
    print(f"  whole rerun (hash, read, diff, docs.jsonl, scoring, parsed.jsonl, results.json): {r['whole_s']:.2f} s")
    print(f"  peak RSS during the rerun: {r['rerun_peak_mb']:.0f} MB, of which the store path (above the docs): "
          f"{r['rerun_peak_mb'] - r['docs_mb']:.0f} MB; whole process peak {r['peak_mb']:.0f} MB")
    scale = 1_000_000 / n
    store_mb = r["rerun_peak_mb"] - r["docs_mb"]
    print(f"  at 1M samples (linear from this n{'' if n == 1_000_000 else ', extrapolated'}): whole rerun "
          f"{r['whole_s'] * scale:.1f} s, part-only {r['part_s'] * scale:.1f} s, first finalisation "
          f"{built['first_s'] * scale:.0f} s; store path {store_mb * 1024 * 1024 / n:.0f} bytes per sample")
    if n >= 300_000:  # memory figures of small runs are the interpreter's
        peak_1m = r["base_mb"] + (r["rerun_peak_mb"] - r["base_mb"]) * scale  # the interpreter's share is not scaled
        how = "" if n == 1_000_000 else f" (extrapolated from {n}: run --n 1000000 for the figure itself)"
        print(f"targets at 1M on 2 cores{how}: whole rerun < 15 s -> {'OK' if r['whole_s'] * scale < 15 else 'MISSED'}; "
              f"peak RSS < 2 GB -> {'OK' if peak_1m * 2**20 < 2e9 else 'MISSED'} "
              f"({peak_1m * 2**20 / 1e9:.2f} GB = {peak_1m:.0f} MiB)")

if __name__ == "__main__":
    main()
