"""Benchmark: summarize 1,000,000 generated sample rows (20 models x 50 tasks x 1,000 samples) in the runner's
store layout, against a naive pure-Python JSON-lines pass over the same files, timed in the same run.

    /work/venvs/dev/bin/python benchmarks/bench_summarize.py [--models 20 --tasks 50 --samples 1000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from medvision_bm.data.docs import Doc, View
from medvision_bm.io import iter_jsonl
from medvision_bm.report.summarize import SummaryOptions, summarize
from medvision_bm.runner.signature import digest, doc_sha
from medvision_bm.tasks.metrics import SAMPLE_METRICS, score_answer
from medvision_bm.tasks.prompts import task_version

FAMILY_TYPE = {"detect": "BoxCoordinate", "TL": "TumorLesionSize", "AD": "BiometricsFromLandmarks"}
PLANES = ("Axial", "Coronal", "Sagittal")
SIG = "bench"


def make_docs(task: str, family: str, dataset: str, plane: str, n: int, rng: np.random.Generator) -> list[dict]:
    """Docs shaped like the planner's, with targets drawn at random."""
    docs = []
    h, w = 256, 256
    for i in range(n):
        if family == "detect":
            bw, bh = rng.integers(4, 120, size=2)
            x0, y0 = rng.integers(0, w - bw), rng.integers(0, h - bh)
            ann = {"box_px": [float(x0), float(y0), float(x0 + bw), float(y0 + bh)],
                   "box_area_ratio": float(bw * bh / (w * h))}
        elif family == "TL":
            major = float(rng.uniform(8, 60))
            ann = {"major_axis_mm": major, "minor_axis_mm": float(major * rng.uniform(0.4, 1.0))}
        else:
            metric = "angle" if i % 4 == 0 else "distance"
            ann = {"metric": metric, "value": float(rng.uniform(5, 80) if metric == "angle" else rng.uniform(10, 150))}
        label = int(rng.integers(1, 6))
        doc = Doc(key=f"{dataset}_case{i // 20:04d}:d2:s{i % 20}:l{label}", task=task, dataset=dataset,
                  family=family, task_type=FAMILY_TYPE[family], task_id="Task01", plane=plane, split="test", index=i,
                  image=f"Images/{dataset}_case{i // 20:04d}.nii.gz", slice_dim=2, slice_idx=i % 20, label=label,
                  label_name=f"structure {label}", structure_kind="lesion" if label > 3 else "anatomy",
                  modality=("CT", "MR", "X-ray")[hash(dataset) % 3], anatomy="abdomen", spacing_mm=(0.8, 0.8, 2.5),
                  image_hw=(h, w), pixel_hw_mm=(0.8, 0.8), annotation=ann, measurement=f"the {family} target")
        view = View.for_doc(doc)
        docs.append({"key": doc.key, "index": i, "doc_sha": doc_sha(doc, view), "doc": doc.to_json(),
                     "view": view.to_json(), "prompt_variant": "plain"})
    return docs


def targets_of(docs: list[dict], family: str) -> np.ndarray:
    out = []
    for d in docs:
        a, (h, w) = d["doc"]["annotation"], d["doc"]["image_hw"]
        if family == "detect":
            x0, y0, x1, y1 = a["box_px"]
            out.append([x0 / w, (h - y1) / h, x1 / w, (h - y0) / h])
        elif family == "TL":
            out.append([a["major_axis_mm"], a["minor_axis_mm"]])
        else:
            out.append([a["value"]])
    return np.array(out)


def vector_metrics(family: str, pred: np.ndarray, tgt: np.ndarray, hw: int = 256) -> dict[str, np.ndarray]:
    """The family's per-sample metrics for many answers at once (the same formulas as tasks.metrics)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(tgt != 0, np.abs(pred - tgt) / np.abs(np.where(tgt != 0, tgt, 1)), np.nan)
    if family == "detect":
        ix = np.clip(np.minimum(pred[:, 2], tgt[:, 2]) - np.maximum(pred[:, 0], tgt[:, 0]), 0, None)
        iy = np.clip(np.minimum(pred[:, 3], tgt[:, 3]) - np.maximum(pred[:, 1], tgt[:, 1]), 0, None)
        inter = ix * iy
        area = lambda b: np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)  # noqa: E731
        union = area(pred) + area(tgt) - inter
        iou = np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)

        def raster(b):
            c0 = np.clip(np.round(np.minimum(b[:, 0], b[:, 2]) * hw), 0, hw)
            c1 = np.clip(np.round(np.maximum(b[:, 0], b[:, 2]) * hw), 0, hw)
            r0 = np.clip(np.round((1 - np.maximum(b[:, 1], b[:, 3])) * hw), 0, hw)
            r1 = np.clip(np.round((1 - np.minimum(b[:, 1], b[:, 3])) * hw), 0, hw)
            return c0, r0, c1, r1

        p, t = raster(pred), raster(tgt)
        pi = np.clip(np.minimum(p[2], t[2]) - np.maximum(p[0], t[0]), 0, None) * \
            np.clip(np.minimum(p[3], t[3]) - np.maximum(p[1], t[1]), 0, None)
        ap = np.clip(p[2] - p[0], 0, None) * np.clip(p[3] - p[1], 0, None)
        at = np.clip(t[2] - t[0], 0, None) * np.clip(t[3] - t[1], 0, None)
        prec = np.where(ap > 0, pi / np.where(ap > 0, ap, 1), 0.0)
        recall = np.where(at > 0, pi / np.where(at > 0, at, 1), 0.0)
        f1 = np.where(prec + recall > 0, 2 * prec * recall / np.where(prec + recall > 0, prec + recall, 1), 0.0)
        out = {"iou": iou, "pixel_precision": prec, "pixel_recall": recall, "pixel_f1": f1,
               "mae": np.abs(pred - tgt).mean(axis=1), "mre": np.nanmean(rel, axis=1)}
        for th in (50, 60, 70, 80, 90):
            out[f"iou_ge_{th}"] = (iou >= th / 100 - 1e-12).astype(float)
        return out
    if family == "TL":
        e = np.abs(pred - tgt)
        return {"mae": e.mean(axis=1), "mre": np.nanmean(rel, axis=1), "mae_major": e[:, 0], "mae_minor": e[:, 1],
                "mre_major": rel[:, 0], "mre_minor": rel[:, 1]}
    return {"mae": np.abs(pred - tgt)[:, 0], "mre": rel[:, 0]}


def _num(v: float) -> str:
    return "null" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(float(v))


def generate(root: Path, n_models: int, n_tasks: int, n_samples: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    fams = ("detect", "TL", "AD")
    rows = 0
    for t in range(n_tasks):
        family = fams[t % 3]
        dataset = f"Bench{t // 3:02d}"
        task = f"{dataset}_{FAMILY_TYPE[family]}_Task01_{PLANES[t % 3]}"
        docs = make_docs(task, family, dataset, PLANES[t % 3], n_samples, rng)
        docs_text = "".join(json.dumps(d, sort_keys=True, separators=(",", ":")) + "\n" for d in docs)
        tgt = targets_of(docs, family)
        for m in range(n_models):
            model = f"model{m:02d}"
            inputs = {"model": {"record": model}, "task": task, "task_version": task_version(family)}
            sig = digest(inputs)
            folder = root / model / task / sig[:12]
            (folder / "samples").mkdir(parents=True, exist_ok=True)
            (folder / "signature.json").write_text(json.dumps({"answer_signature": sig, "inputs": inputs, "schema": 1}))
            (folder / "docs.jsonl").write_text(docs_text)
            scale = 0.02 + 0.01 * m if family == "detect" else 0.05 + 0.02 * m
            pred = tgt * (1 + rng.normal(0, scale, size=tgt.shape))
            if family == "detect":
                pred = np.clip(pred, 0, 1)
            ok = rng.random(n_samples) > 0.01 * (m % 5)
            mets = vector_metrics(family, pred, tgt)
            seg, parsed = [], []
            for i, d in enumerate(docs):
                text = "<answer>" + ", ".join(repr(float(v)) for v in pred[i]) + "</answer>" if ok[i] else "unsure"
                seg.append(json.dumps({"answer_signature": sig, "attempts": 1, "doc_sha": d["doc_sha"], "error": None,
                                       "finish_reason": "stop", "index": i, "key": d["key"], "latency_s": 0.5,
                                       "status": "ok", "text": text, "time": 1.7e9,
                                       "usage": {"input_tokens": 900, "output_tokens": 20,
                                                 "reasoning_tokens": None}}, separators=(",", ":")) + "\n")
                if ok[i]:
                    metrics = "{" + ",".join(f'"{k}":{_num(mets[k][i])}' for k in sorted(mets)) + "}"
                    values = "[" + ",".join(repr(float(v)) for v in pred[i]) + "]"
                    status, success = "ok", "true"
                else:
                    metrics, values, status, success = "{}", "null", "parse_failed", "false"
                target = "[" + ",".join(repr(float(v)) for v in tgt[i]) + "]"
                parsed.append(f'{{"index":{i},"key":{json.dumps(d["key"])},"metrics":{metrics},'
                              f'"parser_version":"parse-1","status":"{status}","success":{success},'
                              f'"target":{target},"values":{values}}}\n')
            (folder / "samples" / "bench-0.jsonl").write_text("".join(seg))
            (folder / "parsed.jsonl").write_text("".join(parsed))
            (folder / "results.json").write_text(json.dumps({
                "model_name": model, "task": task, "family": family, "answer_signature": sig, "complete": True,
                "counts": {"selected": n_samples, "answered": n_samples, "request_failed": 0, "pending": 0,
                           "store_bad_lines": 0, "store_foreign_lines": 0, "store_duplicates": 0}}))
            rows += n_samples
    return rows


def check_layout(root: Path) -> None:
    """The generated parsed rows agree with the real parser and metrics (a few rows per family)."""
    seen = set()
    for folder in sorted(root.glob("*/*/*")):
        family = json.loads((folder / "results.json").read_text())["family"]
        if family in seen:
            continue
        seen.add(family)
        docs = {r["key"]: r for r in iter_jsonl(folder / "docs.jsonl")}
        texts = {r["key"]: r["text"] for r in iter_jsonl(next((folder / "samples").glob("*.jsonl")))}
        for row in list(iter_jsonl(folder / "parsed.jsonl"))[:50]:
            d = docs[row["key"]]
            sc = score_answer(Doc.from_json(d["doc"]), View.from_json(d["view"]), texts[row["key"]])
            assert sc.status == row["status"], (sc, row)
            for m in SAMPLE_METRICS[family] if sc.success else ():
                a, b = sc.metrics[m], row["metrics"][m]
                assert (a is None and b is None) or abs(a - b) < 1e-9, (family, m, a, b)


def naive_pass(root: Path) -> dict[tuple[str, str], dict[str, float]]:
    """The baseline: every parsed.jsonl and docs.jsonl line through json.loads, means accumulated in Python."""
    sums: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for sig in root.rglob("signature.json"):
        folder = sig.parent
        model, task = folder.parent.parent.name, folder.parent.name
        meta = {}
        with open(folder / "docs.jsonl", "rb") as fh:
            for line in fh:
                d = json.loads(line)
                meta[d["key"]] = (d["doc"]["label_name"], d["doc"]["modality"])
        acc = sums[(model, task)]
        with open(folder / "parsed.jsonl", "rb") as fh:
            for line in fh:
                r = json.loads(line)
                acc["n"] += 1
                acc["success"] += r["success"]
                _ = meta[r["key"]]
                for k, v in r["metrics"].items():
                    if v is not None:
                        acc[k] += v
                        acc[k + "_n"] += 1
    return sums


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children (the plot workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=20)
    p.add_argument("--tasks", type=int, default=50)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--keep", default=None, help="generate into (or reuse) this folder and keep it")
    p.add_argument("--no_plots", action="store_true", help="time only the summarize without PNG plots")
    ns = p.parse_args()
    tmp = None
    if ns.keep:
        root = Path(ns.keep)
    else:
        tmp = tempfile.mkdtemp(prefix="bench-summarize-")
        root = Path(tmp)
    results, out = root / "results", root / "report"
    try:
        if not (results / ".complete").exists():
            t = time.perf_counter()
            rows = generate(results, ns.models, ns.tasks, ns.samples)
            (results / ".complete").write_text(str(rows))
            print(f"generated {rows:,} sample rows ({ns.models} models x {ns.tasks} tasks x {ns.samples} samples) "
                  f"in {time.perf_counter() - t:.1f} s", flush=True)
        rows = int((results / ".complete").read_text())
        check_layout(results)
        size = sum(f.stat().st_size for f in results.rglob("*.jsonl")) / 1e9
        print(f"store files: {size:.2f} GB of JSON lines", flush=True)
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before the timed runs "
              "(other processes inflate wall times; CPU times are what the work itself used)", flush=True)
        t, c = time.perf_counter(), cpu_seconds()
        naive_pass(results)
        naive, naive_cpu = time.perf_counter() - t, cpu_seconds() - c
        print(f"baseline (pure-Python json.loads of every parsed.jsonl and docs.jsonl line, means only, no CIs): "
              f"{naive:.2f} s wall, {naive_cpu:.2f} s CPU", flush=True)
        runs = [("tables, CIs, breakdowns, sample browser, HTML (no plots)", False)]
        if not ns.no_plots:
            runs.append(("the same plus every PNG plot", True))
        for what, plots in runs:
            t, c = time.perf_counter(), cpu_seconds()
            opts = SummaryOptions(plots=plots)
            res = summarize(results, out, opts)
            total, total_cpu = time.perf_counter() - t, cpu_seconds() - c
            n = sum(f.height for f in res.loaded.samples.values())
            assert n == rows, (n, rows)
            stages = ", ".join(f"{k} {v:.2f}" for k, v in res.timings.items() if k != "total")
            print(f"summarize [{what}]: {total:.2f} s wall, {total_cpu:.2f} s CPU for {n:,} rows "
                  f"({len(res.loaded.stores)} runs, {opts.n_boot} bootstrap resamples, {len(res.files)} files); stages: {stages}")
            print(f"  ratio baseline / summarize: {naive / total:.2f}x wall, {naive_cpu / total_cpu:.2f}x CPU; "
                  f"target < 10 s wall: {'met' if total < 10 else 'NOT met'}", flush=True)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
