"""Benchmark: `medvision-bm import` of one large upstream samples file (about 900k records once took GBs).

Generates (once, cached under ``--workdir``) an upstream lmms-eval samples file of ``--n`` records of one detection
task in upstream's record shape (``doc`` as upstream's loader yields the row, ``target`` as ``str(doc_to_target)``,
``resps``/``filtered_resps``, the prompt in ``input`` at the length of upstream's detection prompt) and its results
file. Then, each side in a fresh process, imports it into an empty results folder without a data folder (the docs
built from the records) and scores the store, measuring wall time, CPU time and the process's own peak RSS:

* this checkout;
* ``--baseline_ref`` (default 9fc990d: the import before it read records into compact candidates), its package
  source put on the child's PYTHONPATH.

Both sides' stores are compared: the same answers, docs and parse, byte for byte. Sides run interleaved over
``--pairs`` rounds in an order rotated each round; medians are printed with the per-round ratios.

``--judged`` measures the import of upstream's judged copy instead (``llm-parsed_bench-judge/``, the same records
with upstream's ``LLM_*`` fields, every 50th doc judged twice): the raw file is imported first (not measured), then
the judged folder into its store's judged parse, in a fresh process whose wall time and peak RSS are reported.

    .venv/bin/python benchmarks/bench_import.py [--n 900000] [--pairs 1] [--baseline_ref 9fc990d] [--judged]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _peak import peak_rss_mb

TASK = "BenchCT_BoxCoordinate_Task01_Axial"
TS = "20250101_120000"
GEN_VERSION = 1
#: the length of upstream's detection prompt with its image description, about what lmms-eval writes in ``input``
PROMPT = ("Task:\nGiven the input medical image: computed tomography (CT) scan, return the coordinates of the lower-left "
          "and upper-right corner of the bounding box for the target region. " * 6 + "Format:\n<answer>x1, y1, x2, y2"
          "</answer>")


def _records(n: int):
    """n upstream records: 1,000 volumes of up to 300 slices, 1 to 3 labels per slice, one box each."""
    from medvision_bm.data.docs import Doc
    from medvision_bm.tasks.scoring import target

    rng = random.Random(7)
    made = 0
    for case in range(100_000):
        h, w = rng.choice(((512, 512), (256, 256), (480, 640)))
        for slice_idx in range(rng.randint(150, 300)):
            for label in range(1, rng.randint(1, 3) + 1):
                r0, c0 = rng.randrange(h // 2), rng.randrange(w // 2)
                boxes = {"min_coords": [[r0, c0]], "max_coords": [[r0 + rng.randrange(4, h // 2),
                                                                   c0 + rng.randrange(4, w // 2)]],
                         "dimensions": [[rng.randrange(4, 99), rng.randrange(4, 99)]]}
                doc = Doc(key="", task=TASK, family="detect", plane="Axial", split="test", index=made,
                          dataset_name="BenchCT", taskID="01", taskType="Box coordinates",
                          image_file=f"BenchCT/Images/case_{case:05d}.nii.gz",
                          mask_file=f"BenchCT/Masks/case_{case:05d}.nii.gz", landmark_file=None, slice_dim=2,
                          slice_idx=slice_idx, label=label, image_size_2d=(h, w), pixel_size=(0.7822265625, 0.7822265625),
                          image_size_3d=(h, w, 300), voxel_size=(0.78125, 0.78125, 2.5), bounding_boxes=boxes)
                tgt = target(doc)
                a = ", ".join(f"{v + rng.uniform(-0.05, 0.05):.3f}" for v in tgt)
                text = f"The box is <answer>{a}</answer>" if made % 17 else "I cannot tell."
                yield {"doc_id": made, "doc": doc.upstream_row("/cluster/MedVision/Data"), "target": str(tgt),
                       "arguments": {"0": {"max_new_tokens": 1024, "temperature": 0}}, "resps": [[text]],
                       "filtered_resps": [text], "doc_hash": hashlib.sha256(str(made).encode()).hexdigest(),
                       "prompt_hash": "p", "target_hash": "t", "input": PROMPT,
                       "avgMAE": {"MAE": 0.1, "success": True}, "SuccessRate": {"success": True}}
                made += 1
                if made == n:
                    return


def ensure_upstream(workdir: Path, n: int) -> tuple[Path, float | None, int]:
    """The upstream results folder with one samples file of n records (generated once), its generation time, size."""
    folder = workdir / f"upstream-n{n}-g{GEN_VERSION}"
    model = folder / "Qwen2.5-VL-7B-Instruct"
    samples = model / f"{TS}_samples_{TASK}.jsonl"
    done = folder / ".complete"
    if done.is_file():
        return folder, None, samples.stat().st_size
    t0 = time.perf_counter()
    model.mkdir(parents=True, exist_ok=True)
    with open(samples, "w") as fh:
        for rec in _records(n):
            fh.write(json.dumps(rec) + "\n")
    (model / f"{TS}_results.json").write_text(json.dumps({
        "results": {TASK: {"alias": TASK}}, "configs": {TASK: {"task": TASK, "generation_kwargs": {
            "max_new_tokens": 1024, "temperature": 0}}}, "versions": {TASK: "Yaml"},
        "config": {"model": "qwen2_5_vl", "model_args": "pretrained=Qwen/Qwen2.5-VL-7B-Instruct", "gen_kwargs": ""},
        "git_hash": "2f20f64", "date": TS}))
    done.write_text("")
    return folder, time.perf_counter() - t0, samples.stat().st_size


JUDGE_DIR = "llm-parsed_bench-judge"


def ensure_judged(upstream: Path) -> Path:
    """The judged copy of the samples file (upstream's apply_judge.py record shape, YongchengYAO/MedVision
    script/llm-parsing @2f20f64), written once beside it; every 50th record twice (a duplicate the import counts)."""
    model = upstream / "Qwen2.5-VL-7B-Instruct"
    folder = model / JUDGE_DIR
    done = folder / ".complete"
    if done.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with open(model / f"{TS}_samples_{TASK}.jsonl") as src, open(folder / f"{TS}_samples_{TASK}.jsonl", "w") as out:
        for i, line in enumerate(src):
            rec = json.loads(line)
            text = rec["filtered_resps"][0]
            pred = text.split("<answer>")[1].split("</answer>")[0] if "<answer>" in text else ""
            mode = "conclusion_in_format" if pred else "undetermined"
            rec.update(LLM_filtered_resps=[pred], LLM_judge_answer_mode=mode, LLM_judge_SR={"success": bool(pred)},
                       LLM_judge={"reason": "strict_success" if pred else "no_numbers", "strict_pred": pred,
                                  "judge_pred": "", "judge_span": "", "judge_model": "bench/judge-7B"})
            out.write(json.dumps(rec) + "\n")
            if i % 50 == 0:
                out.write(json.dumps(rec) + "\n")
    done.write_text("")
    return folder


def child(upstream: Path, results: Path, judged: bool = False) -> dict:
    """One import, in this (fresh) process (``judged``: the judged folder into the stores imported before)."""
    from medvision_bm.ingest.upstream import import_upstream
    from medvision_bm.ingest.upstream_judged import import_judged

    t0 = time.perf_counter()
    if judged:
        stores = sorted(p.parent for p in results.rglob("signature.json") if "judged" not in p.parts)
        (ji,), _, _ = import_judged(upstream, stores)
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "added": ji.used, "unmatched": len(ji.unmatched),
                "duplicates": getattr(ji, "duplicates", None)}  # (counted since the streamed judged import)
    report = import_upstream(upstream, results, use_data=False)
    seconds = time.perf_counter() - t0
    (ti,) = report.tasks
    return {"seconds": seconds, "peak_rss_mb": peak_rss_mb(), "added": ti.added, "unmatched": len(ti.unmatched)}


def run_side(upstream: Path, results: Path, src: Path | None, judged: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    if judged:  # the raw import first (not measured), then the judged one
        run_side(upstream, results, src)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(upstream), str(results),
           *(["--judged"] if judged else [])]
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        text = out.read()
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"import child failed:\n{text[-4000:]}")
    result = json.loads(text.strip().splitlines()[-1])
    result["cpu"] = usage.ru_utime + usage.ru_stime
    return result


def store_digest(results: Path) -> str:
    """What the import wrote that the two sides must agree on: the bytes of every store's docs.jsonl, parsed.jsonl
    and answer segment (signature.json and results.json hold times and are left out)."""
    h = hashlib.sha256()
    for path in sorted(results.rglob("*")):
        if path.is_file() and path.name in ("docs.jsonl", "parsed.jsonl", "upstream-import.jsonl"):
            h.update(str(path.relative_to(results)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=900_000, help="records in the samples file")
    ap.add_argument("--workdir", default="/tmp/medvision_bench_import")
    ap.add_argument("--pairs", type=int, default=1, help="rounds of both sides")
    ap.add_argument("--baseline_ref", default="9fc990d", help="the commit to compare with ('' for none)")
    ap.add_argument("--judged", action="store_true", help="measure the import of the judged copy instead")
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        print(json.dumps(child(Path(ns.child[0]), Path(ns.child[1]), ns.judged)), flush=True)
        return
    from _gitref import source_at

    workdir = Path(ns.workdir)
    upstream, gen_s, size = ensure_upstream(workdir, ns.n)
    if ns.judged:
        ensure_judged(upstream)
    print(f"upstream samples file: {ns.n:,} records, {size / 1e9:.2f} GB"
          + (f", generated in {gen_s:.0f} s" if gen_s is not None else " (cached)"), flush=True)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    sides = [("this checkout", None)]
    if ns.baseline_ref:
        sides.append((f"baseline {ns.baseline_ref}", source_at(ns.baseline_ref)))
    runs: dict[str, list[dict]] = {label: [] for label, _ in sides}
    digests: dict[str, str] = {}
    for r in range(ns.pairs):
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        for label, src in order:
            results = Path(tempfile.mkdtemp(prefix="import-", dir=workdir))
            try:
                m = run_side(upstream, results, src, ns.judged)
                digests[label] = store_digest(results)
            finally:
                shutil.rmtree(results, ignore_errors=True)
            runs[label].append(m)
            print(f"  round {r + 1} {label:<20} {m['seconds']:7.1f} s  CPU {m['cpu']:7.1f} s  peak RSS "
                  f"{m['peak_rss_mb']:7.0f} MB  ({m['added']:,} added, {m['unmatched']} unmatched)", flush=True)
    for label, ms in runs.items():
        print(f"{label:<22} median {statistics.median(m['seconds'] for m in ms):7.1f} s, peak RSS "
              f"{statistics.median(m['peak_rss_mb'] for m in ms):7.0f} MB", flush=True)
    if len(sides) == 2:
        a, b = (runs[label] for label, _ in sides)
        for i, (ma, mb) in enumerate(zip(a, b)):
            print(f"round {i + 1}: baseline / this checkout = {mb['seconds'] / ma['seconds']:.2f}x time, "
                  f"{mb['peak_rss_mb'] / ma['peak_rss_mb']:.2f}x peak memory", flush=True)
        if not ns.judged:  # (a judged parse's folder is named by its signature, which the judged side may change)
            same = len(set(digests.values())) == 1
            print(f"the same stores from both: {'yes' if same else 'NO'} ({', '.join(digests.values())})", flush=True)


if __name__ == "__main__":
    main()
