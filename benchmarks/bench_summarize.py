"""Benchmark: summarize 1,000,000 generated sample rows (20 models x 50 tasks x 1,000 samples) in the runner's
store layout (upstream-scored parsed.jsonl rows), against a floor timed in the same run (one polars group-by of the
same parsed.jsonl rows per store: counts and metric means, no groups, CIs or report); then the same stores made stale (a killed rerun: every store gains a segment newer than its
parsed.jsonl, holding --stale_fraction of its answers again), beside the per-sample Python re-score they needed
before (timed on a few stores, scaled to all); then --big_models models (3,000,000 rows by default) with current
stores. Each summarize runs in a child process: its wall and CPU time and its peak RSS are printed.

Then a full-size task: one model on one detection task of --full_task_samples samples (1,000,000;
upstream's largest detection tasks hold about 916k) with no sample limit, summarized by this checkout (the bootstrap
counts drawn in bounded blocks, ``report.bootstrap.count_blocks``) beside the dense path it replaced (the same code
with every resamples x samples count of the task drawn in one block, as summarize did before 5b1f87f; run here
rather than from that commit, which scored stores of an older format): at --full_task_compare samples (100,000), where both fit, and at the full size under an address-space cap
of --dense_cap_gb for the baseline (its counts alone would take about 18 GB there): time, peak memory, their ratios,
and how far apart the two intervals are.

    .venv/bin/python benchmarks/bench_summarize.py [--models 20 --tasks 50 --samples 1000] [--keep DIR]
        [--stale_fraction 0.01] [--big_models 60 | --big_models 0] [--no_plots]
        [--full_task_samples 1000000 | 0] [--full_task_compare 100000] [--dense_cap_gb 8]
        [--full_task_only]
    .venv/bin/python benchmarks/bench_summarize.py --store_factor 10 [--models 20 --tasks 12 --samples 1000]
        [--pairs 3] [--baseline_src ../main/src]   (the same rows in 10x more stores, summarize and the floor
        interleaved, ratios per round; their medians against the targets: 10x the stores at most 1.5x the time, at
        most 3x the floor; also the report's size and each summarize stage's median on both layouts, as the report
        grows with the tasks; --baseline_src: another checkout's summarize timed beside this one in every round)

The generated parsed rows carry upstream's per-sample metrics computed here with numpy; ``check_layout`` re-scores
a few rows per family with the real scorer (``tasks.scoring.score_answer``) and requires the same numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from _peak import peak_rss_mb
from medvision_bm.data.docs import Doc, RunDoc, View
from medvision_bm.io import iter_jsonl
from medvision_bm.report.summarize import SummaryOptions, summarize
from medvision_bm.score.store_scoring import SCORING_VERSION
from medvision_bm.store.records import Counts, DocRow, ParsedRow, ResultsRecord, SignatureRecord
from medvision_bm.store.signature import digest, doc_sha
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, SAMPLE_METRICS, format_answer, score_answer
from medvision_bm.tasks.upstream_parse import SampleStatus
from medvision_bm.tasks.upstream_prompts import prompt_version

FAMILY_TYPE = {"detect": "BoxCoordinate", "TL": "TumorLesionSize", "AD": "BiometricsFromLandmarks"}
LOADER_TYPE = {"detect": "Box-Size", "TL": "Tumor-Lesion-Size", "AD": "Biometrics-From-Landmarks"}
PLANES = ("Axial", "Coronal", "Sagittal")
DIMS = {"Sagittal": 0, "Coronal": 1, "Axial": 2}
MODALITIES = ("CT", "MRI", "X-ray")
LABELS = {"detect": ("liver", "kidney", "spleen", "liver tumor", "kidney tumor"),
          "TL": ("liver tumor", "kidney tumor", "kidney cyst", "enhancing brain tumor", "liver tumor")}
HW = (256, 256)
PIXEL = (0.8, 0.8)


def make_docs(task: str, family: str, dataset: str, plane: str, n: int, rng: np.random.Generator) -> list[dict]:
    """docs.jsonl rows shaped like the data layer's, with targets drawn at random."""
    rows = []
    h, w = HW
    modality = MODALITIES[int(dataset[-2:]) % 3]
    for i in range(n):
        bb = bp = None
        label: int | None = int(rng.integers(1, 6))
        meta = {"image_description": "a generated scan", "image_modality": modality, "source": "bench"}
        if family == "detect":
            bw, bh = rng.integers(4, 120, size=2)
            c0, r0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            bb = {"min_coords": [[r0, c0]], "max_coords": [[r0 + int(bh), c0 + int(bw)]]}
            meta["label_name"] = LABELS["detect"][label - 1]
        elif family == "TL":
            major = float(np.float16(rng.uniform(8, 60)))
            bp = {"metric_type": ["distance"], "metric_value_major_axis": [major],
                  "metric_value_minor_axis": [float(np.float16(major * rng.uniform(0.4, 1.0)))],
                  "metric_unit": ["mm"]}
            meta["label_name"] = LABELS["TL"][label - 1]
        else:
            label = None
            angle = i % 4 == 0
            value = float(np.float16(rng.uniform(5, 80) if angle else rng.uniform(10, 150)))
            bp = {"metric_type": "angle" if angle else "distance", "metric_key": "A-1" if angle else f"L-{i % 3}",
                  "metric_value": value, "metric_unit": "degree" if angle else "mm", "metric_map_name": "lines_map"}
        doc = Doc(key=f"{dataset}/Images/case{i // 20:04d}.nii.gz:d{DIMS[plane]}:s{i % 20}:{i}", task=task,
                  family=family, plane=plane, split="test", index=i, dataset_name=dataset, taskID="01",
                  taskType=LOADER_TYPE[family], image_file=f"{dataset}/Images/case{i // 20:04d}.nii.gz",
                  mask_file=None, landmark_file=None, slice_dim=DIMS[plane], slice_idx=i % 20, label=label,
                  image_size_2d=HW, pixel_size=PIXEL, image_size_3d=(h, w, 20), voxel_size=(*PIXEL, 2.5),
                  bounding_boxes=bb, biometric_profile=bp, meta=meta)
        view = View(image_hw=HW, pixel_hw_mm=PIXEL, canvas_hw=HW, content_hw=HW, stated_pixel_hw_mm=PIXEL,
                    header_pixel_hw=PIXEL)
        rows.append(json.loads(DocRow.of(RunDoc(doc, view), doc_sha(doc, view)).line()))  # as read back
    return rows


def targets_of(docs: list[dict], family: str) -> np.ndarray:
    out = []
    h, w = HW
    for d in docs:
        doc = d["doc"]
        if family == "detect":
            (r0, c0), (r1, c1) = doc["bounding_boxes"]["min_coords"][0], doc["bounding_boxes"]["max_coords"][0]
            out.append([c0 / w, (h - r1) / h, c1 / w, (h - r0) / h])
        elif family == "TL":
            bp = doc["biometric_profile"]
            out.append([bp["metric_value_major_axis"][0], bp["metric_value_minor_axis"][0]])
        else:
            out.append([doc["biometric_profile"]["metric_value"]])
    return np.array(out)


def vector_metrics(family: str, pred: np.ndarray, tgt: np.ndarray) -> dict[str, np.ndarray]:
    """Upstream's per-sample metrics (newer rules) for many float32-rounded answers at once."""
    p = pred.astype(np.float32).astype(np.float64)
    ae = np.abs(p - tgt)
    if family == "detect":
        px0, px1 = np.minimum(p[:, 0], p[:, 2]), np.maximum(p[:, 0], p[:, 2])
        py0, py1 = np.minimum(p[:, 1], p[:, 3]), np.maximum(p[:, 1], p[:, 3])
        tx0, tx1 = np.minimum(tgt[:, 0], tgt[:, 2]), np.maximum(tgt[:, 0], tgt[:, 2])
        ty0, ty1 = np.minimum(tgt[:, 1], tgt[:, 3]), np.maximum(tgt[:, 1], tgt[:, 3])
        ix, iy = np.minimum(px1, tx1) - np.maximum(px0, tx0), np.minimum(py1, ty1) - np.maximum(py0, ty0)
        hit = (ix > 0) & (iy > 0)
        inter = np.where(hit, ix * iy, 0.0)
        ap, ag = (px1 - px0) * (py1 - py0), (tx1 - tx0) * (ty1 - ty0)
        with np.errstate(divide="ignore", invalid="ignore"):
            iou = np.where(hit, np.minimum(inter / (ap + ag - inter), 1.0), 0.0)
            f1 = np.where(hit, np.minimum(2 * inter / (ap + ag), 1.0), 0.0)
            prec = np.where(hit, np.minimum(inter / ap, 1.0), 0.0)
            rec = np.where(hit, np.minimum(inter / ag, 1.0), 0.0)
        return {"IoU": iou, "F1": f1, "Precision": prec, "Recall": rec, "MAE": ae.mean(axis=1)}
    mae = ae.mean(axis=1)
    diag = float(np.sqrt((HW[0] * PIXEL[0]) ** 2 + (HW[1] * PIXEL[1]) ** 2))
    return {"MAE": mae, "MRE": (ae / (tgt + 1e-15)).mean(axis=1), "nMAE": mae / diag}


def _group_fields(doc: dict, family: str) -> dict:
    out = {"dataset": doc["dataset_name"], "label": doc["label"], "label_name": doc["meta"].get("label_name"),
           "modality": doc["meta"]["image_modality"], "slice_dim": doc["slice_dim"]}
    if family == "AD":
        out.update(metric_type=doc["biometric_profile"]["metric_type"],
                   metric_key=doc["biometric_profile"]["metric_key"])
    return out


def generate(root: Path, n_models: int, n_tasks: int, n_samples: int, seed: int = 0, first_model: int = 0) -> int:
    """Models ``first_model`` .. ``n_models - 1`` on every task; returns the rows written."""
    rng = np.random.default_rng([seed, first_model])
    fams = ("detect", "TL", "AD")
    rows = 0
    for t in range(n_tasks):
        family = fams[t % 3]
        dataset = f"Bench{t // 3:02d}"
        plane = PLANES[t % 3]
        task = f"{dataset}_{FAMILY_TYPE[family]}_Task01_{plane}"
        docs = make_docs(task, family, dataset, plane, n_samples, rng)
        docs_text = "".join(DocRow.from_json(d).line().decode() + "\n" for d in docs)
        tgt = targets_of(docs, family)
        fields = [_group_fields(d["doc"], family) for d in docs]
        for m in range(first_model, n_models):
            model = f"model{m:02d}"
            inputs = {"model": {"record": model}, "task": task, "protocol": "current",
                      "task_version": prompt_version("current", family, "")}
            sig = digest(inputs)
            folder = root / model / task / sig[:12]
            (folder / "samples").mkdir(parents=True, exist_ok=True)
            SignatureRecord(sig, inputs).write(folder / "signature.json")
            (folder / "docs.jsonl").write_text(docs_text)
            scale = 0.02 + 0.01 * m if family == "detect" else 0.05 + 0.02 * m
            pred = np.abs(tgt * (1 + rng.normal(0, scale, size=tgt.shape)))
            if family == "detect":
                pred = np.clip(pred, 0, 1)
            ok = rng.random(n_samples) > 0.01 * (m % 5)
            mets = vector_metrics(family, pred, tgt)
            names = SAMPLE_METRICS[family]
            seg, parsed = [], []
            for i, d in enumerate(docs):
                text = format_answer(pred[i]) if ok[i] else "unsure"
                seg.append(json.dumps({"answer_signature": sig, "attempts": 1, "doc_sha": d["doc_sha"], "error": None,
                                       "finish_reason": "stop", "index": i, "key": d["key"], "latency_s": 0.5,
                                       "status": "ok", "text": text, "time": 1.7e9,
                                       "usage": {"input_tokens": 900, "output_tokens": 20,
                                                 "reasoning_tokens": None}}, separators=(",", ":")) + "\n")
                if ok[i]:
                    metrics = {k: float(mets[k][i]) for k in names}
                    if family == "AD" and fields[i]["metric_type"] == "angle":
                        metrics["nMAE"] = None  # upstream: nMAE only for distances
                    values = [float(v) for v in pred[i].astype(np.float32)]
                    status = "ok"
                else:
                    metrics = {k: (0.0 if k in ("IoU", "F1", "Precision", "Recall") else None) for k in names}
                    values, status = None, "parse_failed"
                f = fields[i]
                parsed.append(ParsedRow(
                    index=i, family=family, task=task, rules="newer", key=d["key"], status=SampleStatus(status),
                    success=status == "ok", values=values, target=tgt[i].tolist(), metrics=metrics, parser="strict-1",
                    metric_path=DEFAULT_METRIC_PATH, dataset=f["dataset"], label=f["label"],
                    label_name=f["label_name"], modality=f["modality"], slice_dim=f["slice_dim"],
                    metric_type=f.get("metric_type"), metric_key=f.get("metric_key")).line().decode())
            (folder / "samples" / "bench-0.jsonl").write_text("".join(seg))
            (folder / "parsed.jsonl").write_text("".join(parsed))
            ResultsRecord(
                model_name=model, task=task, family=family, answer_signature=sig, complete=True, protocol="current",
                parser_version="strict-1", metric_rules="newer", metric_path=DEFAULT_METRIC_PATH,
                scoring_version=SCORING_VERSION,
                counts=Counts.of_parse(None, selected=n_samples, answered=n_samples, request_failed=0, pending=0,
                                       bad_lines=0, foreign_lines=0, duplicates=0)).write(folder / "results.json")
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
            sc = score_answer(Doc.from_json(d["doc"]), View.from_json(d["view"]), texts[row["key"]], "strict-1",
                              "newer")
            assert sc.status == row["status"], (sc, row)
            for m in SAMPLE_METRICS[family]:
                a, b = sc.metrics[m], row["metrics"][m]
                # upstream computes Precision/Recall partly in float32 (tasks/upstream_metrics.py); here float64
                tol = 1e-6 if m in ("Precision", "Recall") else 1e-9
                assert (a is None and b is None) or abs(a - b) < tol, (family, m, a, b)


def model_names(n: int) -> list[str]:
    return [f"model{m:02d}" for m in range(n)]


def polars_floor(root: Path, models: list[str]) -> int:
    """The floor: one polars group-by over the same parsed.jsonl rows (per store: rows, successes, the mean of
    every per-sample metric over the rows that have it); no groups, CIs, tables or report. Returns the stores."""
    import polars as pl

    paths = sorted(str(p) for m in models for p in (root / m).glob("*/*/parsed.jsonl"))
    names = sorted({k for fam in SAMPLE_METRICS.values() for k in fam})
    schema = {"key": pl.Utf8, "success": pl.Boolean,
              "metrics": pl.Struct({k: pl.Float64 for k in names})}
    frame = pl.scan_ndjson(paths, schema=schema, include_file_paths="store").unnest("metrics")
    out = frame.group_by("store").agg(pl.len().alias("n"), pl.col("success").sum(),
                                      *[pl.col(k).mean() for k in names]).collect()
    return out.height


def make_stale(root: Path, fraction: float, models: list[str]) -> int:
    """A killed rerun in every store: a new segment, newer than parsed.jsonl, holding the last ``fraction`` of the
    store's answer lines again (later ok records of answered samples: summarize must re-score exactly these samples,
    and the first answer still wins, so every number stays the same). Returns the answer lines written."""
    n = 0
    for seg in sorted(p for m in models for p in (root / m).glob("*/*/samples/bench-0.jsonl")):
        lines = seg.read_bytes().splitlines(keepends=True)
        k = max(1, round(len(lines) * fraction))
        new = seg.parent / "bench-1.jsonl"
        new.write_bytes(b"".join(lines[-k:]))
        later = (seg.parent.parent / "parsed.jsonl").stat().st_mtime + 1
        os.utime(new, (later, later))
        n += k
    return n


def unstale(root: Path) -> None:
    for seg in root.glob("*/*/*/samples/bench-1.jsonl"):
        seg.unlink()


def full_rescore_rate(root: Path, models: list[str], n_stores: int = 6) -> tuple[float, int]:
    """The path a stale store took before: every sample re-scored in Python (``report.rescore.rescore``), timed on
    a few stores; returns (seconds, rows)."""
    from medvision_bm.score.rescore import rescore
    from medvision_bm.store.discovery import discover

    refs, _ = discover(root, models=models)
    step = max(1, len(refs) // n_stores)
    t, rows = time.perf_counter(), 0
    for ref in refs[::step][:n_stores]:
        rows += len(rescore(ref).rows)
    return time.perf_counter() - t, rows


def _ci_values(res) -> list[float | None]:
    """Every interval bound of every table, in a fixed order (to compare two paths' intervals)."""
    out: list[float | None] = []
    for fam in sorted(res.tables):
        ft = res.tables[fam]
        for frame in (ft.leaderboard, ft.groups, ft.tasks):
            cols = sorted(c for c in frame.columns if c.endswith(("_lo", "_hi")))
            for row in frame.select(cols).rows():
                out.extend(row)
    return out


def child_main(results: str, out: str, plots: bool, report: str, models: list[str], cap_gb: float = 0.0,
               dense: bool = False) -> int:
    """One timed summarize (run by ``timed_summarize`` in a fresh process); ``dense``: every count of a task in one
    block (the path before the blocked bootstrap)."""
    if dense:
        from medvision_bm.report import bootstrap

        bootstrap.MAX_COUNT_CELLS = 1 << 62
    if cap_gb > 0:
        cap = int(cap_gb * 1e9)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        res = summarize(results, out, SummaryOptions(plots=plots, models=models))
    except MemoryError as exc:
        Path(report).write_text(json.dumps({"memory_error": str(exc) or "MemoryError",
                                            "peak_rss_gb": peak_rss_mb() * 2**20 / 1e9}))
        return 0
    sources: dict[str, int] = defaultdict(int)
    for s in res.loaded.stores:
        sources[s.source.split(" + ")[0] + (" + newer answers" if " + " in s.source else "")] += 1
    Path(report).write_text(json.dumps({
        "rows": sum(f.height for f in res.loaded.samples.values()), "runs": len(res.loaded.stores),
        "files": len(res.files), "timings": res.timings, "sources": sources, "peak_rss_gb": peak_rss_mb() * 2**20 / 1e9,
        "table_rows": sum(frame.height for ft in res.tables.values() for frame in (ft.leaderboard, ft.groups, ft.tasks)),
        "leaderboards": {fam: ft.leaderboard.drop("parser", "protocol").to_dicts() for fam, ft in res.tables.items()},
        "cis": _ci_values(res)}))
    return 0


def timed_floor(results: Path, models: list[str]) -> dict:
    """The polars floor in a child process: its wall and CPU time and its own peak RSS."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--_floor", str(results), ",".join(models)],
                            stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("the polars floor failed")
    data = json.loads(proc.stdout.read().strip().splitlines()[-1])
    data.update(wall=wall, cpu=usage.ru_utime + usage.ru_stime)
    return data


def compare_store_counts(root: Path, ns: argparse.Namespace) -> None:
    """The same number of rows in ``--store_factor`` times more stores (more tasks of fewer samples each), summarize
    and the polars floor on each, interleaved over ``--pairs`` rounds of fresh processes; ratios per round."""
    f = ns.store_factor
    shapes = {"few": (ns.models, ns.tasks, ns.samples), "many": (ns.models, ns.tasks * f, ns.samples // f)}
    folders = {}
    for name, (m, t, n) in shapes.items():
        folders[name] = root / f"stores-{name}-{m}x{t}x{n}"
        if not (folders[name] / ".complete").exists():
            generate(folders[name], m, t, n)
            (folders[name] / ".complete").write_text("1")
        print(f"{name}: {m} models x {t} tasks x {n} samples = {m * t * n:,} rows in {m * t:,} stores", flush=True)
    models = model_names(ns.models)
    got: dict[str, list[float]] = defaultdict(list)
    ratios: dict[str, list[float]] = defaultdict(list)
    stages: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in shapes}
    size: dict[str, tuple[int, int]] = {}
    for p in range(ns.pairs):
        sides = [("summarize", "few"), ("floor", "few"), ("summarize", "many"), ("floor", "many")]
        if ns.baseline_src:
            sides[1:1] = [("baseline", "few")]
            sides.append(("baseline", "many"))
        if p % 2:
            sides.reverse()
        wall = {}
        for what, name in sides:
            if what in ("summarize", "baseline"):
                d = timed_summarize(folders[name], root / f"report-{what}-{name}", False, models,
                                    src=ns.baseline_src if what == "baseline" else None)
            else:
                d = timed_floor(folders[name], models)
            wall[(what, name)] = d["wall"]
            got[f"{what} {name}"].append(d["wall"])
            got[f"{what} {name} peak GB"].append(d["peak_rss_gb"])
            got[f"{what} {name} CPU"].append(d["cpu"])
            if what == "summarize":
                for stage, sec in d["timings"].items():
                    stages[name][stage].append(sec)
                size[name] = (d["report_bytes"], d["table_rows"])
        ratios["many/few"].append(wall[("summarize", "many")] / wall[("summarize", "few")])
        ratios["floor many/few"].append(wall[("floor", "many")] / wall[("floor", "few")])
        ratios["many/floor"].append(wall[("summarize", "many")] / wall[("floor", "many")])
        ratios["few/floor"].append(wall[("summarize", "few")] / wall[("floor", "few")])
        print(f"round {p + 1}: " + "  ".join(f"{w} {n} {wall[(w, n)]:.2f} s" for w, n in sides)
              + f"\n  ratios: summarize many/few {wall[('summarize', 'many')] / wall[('summarize', 'few')]:.2f}, "
              f"floor many/few {wall[('floor', 'many')] / wall[('floor', 'few')]:.2f}, "
              f"summarize/floor few {wall[('summarize', 'few')] / wall[('floor', 'few')]:.2f}, "
              f"many {wall[('summarize', 'many')] / wall[('floor', 'many')]:.2f}", flush=True)
    med = {k: float(np.median(v)) for k, v in got.items()}
    print("medians: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()), flush=True)
    cpu = {k: float(np.median(v)) for k, v in got.items() if k.endswith(" CPU")}
    print(f"CPU (a loaded machine inflates wall times): summarize many/few "
          f"{cpu['summarize many CPU'] / cpu['summarize few CPU']:.2f}, floor many/few "
          f"{cpu['floor many CPU'] / cpu['floor few CPU']:.2f}, summarize/floor many "
          f"{cpu['summarize many CPU'] / cpu['floor many CPU']:.2f}, few {cpu['summarize few CPU'] / cpu['floor few CPU']:.2f}",
          flush=True)
    if ns.baseline_src:
        print(f"baseline ({ns.baseline_src}) beside this checkout, medians of the rounds: "
              + ", ".join(f"{name}: {med[f'baseline {name}']:.2f} -> {med[f'summarize {name}']:.2f} s wall, "
                          f"{cpu[f'baseline {name} CPU']:.2f} -> {cpu[f'summarize {name} CPU']:.2f} s CPU"
                          for name in ("few", "many"))
              + f"; baseline many/few {med['baseline many'] / med['baseline few']:.2f} wall, "
              f"{cpu['baseline many CPU'] / cpu['baseline few CPU']:.2f} CPU; baseline/floor at the many stores "
              f"{med['baseline many'] / med['floor many']:.2f} wall, "
              f"{cpu['baseline many CPU'] / cpu['floor many CPU']:.2f} CPU", flush=True)
    many_few = float(np.median(ratios["many/few"]))
    to_floor = float(np.median(ratios["many/floor"]))
    n_few, n_many = (m * t for m, t, _ in shapes.values())
    extra = n_many - n_few
    print(f"median of the per-round ratios: summarize many/few {many_few:.2f} (target <= 1.5: "
          f"{'met' if many_few <= 1.5 else 'NOT met'}), floor many/few {float(np.median(ratios['floor many/few'])):.2f}, "
          f"summarize/floor at {n_many:,} stores {to_floor:.2f} (target <= 3: {'met' if to_floor <= 3 else 'NOT met'}), "
          f"at {n_few:,} stores {float(np.median(ratios['few/floor'])):.2f}; per extra store: "
          f"{(med['summarize many'] - med['summarize few']) / extra * 1e3:.2f} ms, "
          f"{(med['summarize many peak GB'] - med['summarize few peak GB']) / extra * 1e3:.3f} MB peak, "
          f"{(cpu['summarize many CPU'] - cpu['summarize few CPU']) / extra * 1e3:.2f} ms CPU (floor "
          f"{(cpu['floor many CPU'] - cpu['floor few CPU']) / extra * 1e3:.2f} ms CPU)", flush=True)
    # what grows with the stores besides them: the report itself (a table row per run and task, a group row per
    # run, task and group), and each stage's share of the growth
    few_st, many_st = ({k: float(np.median(v)) for k, v in stages[name].items()} for name in ("few", "many"))
    print(f"the report: {size['few'][0] / 1e6:.1f} -> {size['many'][0] / 1e6:.1f} MB written, {size['few'][1]:,} -> "
          f"{size['many'][1]:,} table rows (x{size['many'][1] / max(size['few'][1], 1):.1f}); summarize stages, "
          "median s few -> many (x): " + ", ".join(
              f"{k} {few_st[k]:.2f} -> {many_st[k]:.2f} (x{many_st[k] / few_st[k]:.1f})" if few_st[k] > 0
              else f"{k} {few_st[k]:.2f} -> {many_st[k]:.2f}" for k in few_st if k != "total" and k in many_st),
          flush=True)
    rows = {name: m * t * n for name, (m, t, n) in shapes.items()}
    print("per row (median wall | CPU, microseconds): " + ", ".join(
        f"{what} {name} {med[f'{what} {name}'] / rows[name] * 1e6:.1f} | {cpu[f'{what} {name} CPU'] / rows[name] * 1e6:.1f}"
        for what in ("summarize", "floor") for name in ("few", "many")), flush=True)


def timed_summarize(results: Path, out: Path, plots: bool, models: list[str], dense: bool = False,
                    cap_gb: float = 0.0, src: str | None = None) -> dict:
    """Summarize in a child process; its wall and CPU time (os.wait4) with what it reported, its own peak RSS included.
    ``dense``: the bootstrap counts of a task drawn in one block (``child_main``); ``cap_gb``: an
    address-space limit for the child (a MemoryError under it is reported, not raised); ``src``: the package
    sources the child imports (another checkout's ``src``: a baseline timed in the same run)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        report = fh.name
    os.sync()  # the previous step's writes (generation, a stale segment) are not flushed during this timed run
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([src, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--_child", str(results), str(out), str(int(plots)), report,
                             ",".join(models), str(cap_gb), str(int(dense))], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"summarize child failed with exit code {proc.returncode}")
    data = json.loads(Path(report).read_text())
    os.unlink(report)
    data.update(wall=wall, cpu=usage.ru_utime + usage.ru_stime)  # peak RSS: the child's own (ru_maxrss inherits ours)
    data["report_bytes"] = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())  # outside the timed child
    return data


def same_numbers(a: object, b: object, tol: float = 1e-6) -> bool:
    """Equal structures, floats within ``tol`` (relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_numbers(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_numbers(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= tol * max(1.0, abs(a), abs(b))
    return a == b


def show(what: str, d: dict, target: float | None = None) -> None:
    stages = ", ".join(f"{k} {v:.2f}" for k, v in d["timings"].items() if k != "total")
    met = "" if target is None else f"; target < {target:g} s wall: {'met' if d['wall'] < target else 'NOT met'}"
    print(f"summarize [{what}]: {d['wall']:.2f} s wall, {d['cpu']:.2f} s CPU, peak RSS {d['peak_rss_gb']:.2f} GB for "
          f"{d['rows']:,} rows ({d['runs']} runs, {d['files']} files; scores from: "
          f"{', '.join(f'{k} x{v}' for k, v in d['sources'].items())}); stages in the child: {stages}{met}",
          flush=True)


def against_floor(d: dict, results: Path, models: list[str]) -> None:
    """The polars floor of the same stores, timed right after a summarize row, and the ratio (every row has one)."""
    fl = timed_floor(results, models)
    print(f"  floor of the same stores: {fl['wall']:.2f} s wall, {fl['cpu']:.2f} s CPU; ratio summarize / floor: "
          f"{d['wall'] / fl['wall']:.2f}x wall, {d['cpu'] / fl['cpu']:.2f}x CPU", flush=True)


def cpu_seconds() -> float:
    """User + system CPU time of this process and of its finished children (the plot workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _full_task(root: Path, n: int) -> Path:
    """One model on one detection task of ``n`` samples, generated once under ``root`` and reused."""
    results = root / f"full-task-{n}"
    done = results / ".complete"
    if not done.exists():
        if results.exists():
            shutil.rmtree(results)
        t = time.perf_counter()
        rows = generate(results, 1, 1, n)
        done.write_text(json.dumps([1, 1, n]))
        print(f"generated one detection task of {rows:,} samples in {time.perf_counter() - t:.1f} s", flush=True)
    return results


def _show_path(what: str, d: dict) -> None:
    if "memory_error" in d:
        print(f"  {what}: MemoryError after a peak RSS of {d['peak_rss_gb']:.2f} GB ({d['memory_error']})", flush=True)
        return
    print(f"  {what}: {d['wall']:.2f} s wall, {d['cpu']:.2f} s CPU, peak RSS {d['peak_rss_gb']:.2f} GB; stages: "
          f"{', '.join(f'{k} {v:.2f}' for k, v in d['timings'].items() if k != 'total')}", flush=True)


def _ci_gap(a: list, b: list) -> str:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    same_nulls = all((x is None) == (y is None) for x, y in zip(a, b, strict=True))
    identical = sum(x == y for x, y in pairs)
    worst = max((abs(x - y) / max(abs(x), abs(y), 1e-300) for x, y in pairs if x != y), default=0.0)
    return (f"{identical:,} of {len(pairs):,} interval bounds bit-identical, the others within a relative "
            f"{worst:.1e}; missing bounds {'the same' if same_nulls else 'DIFFERENT'}")


def full_task_section(root: Path, n_full: int, n_compare: int, cap_gb: float) -> None:
    """The full-size task: the blocked bootstrap beside the dense path it replaced (module docstring)."""
    from medvision_bm.report.bootstrap import DEFAULT_N_BOOT, block_rows

    print(f"full-size task: one model, one detection task, no sample limit, {DEFAULT_N_BOOT} resamples; this "
          f"checkout draws blocks of {block_rows(n_full, DEFAULT_N_BOOT)} resamples at {n_full:,} samples, "
          f"{block_rows(n_compare, DEFAULT_N_BOOT)} at {n_compare:,}; baseline: the dense path (one block of "
          f"{DEFAULT_N_BOOT} x n counts)", flush=True)
    models = model_names(1)
    if n_compare:
        results = _full_task(root, n_compare)
        base = timed_summarize(results, root / "report-baseline", False, models, dense=True)
        blocked = timed_summarize(results, root / "report-blocked", False, models)
        _show_path(f"dense baseline (all counts at once), {n_compare:,} samples", base)
        _show_path(f"this checkout (blocked counts), {n_compare:,} samples", blocked)
        against_floor(blocked, results, models)
        if "memory_error" not in base:
            print(f"  ratio baseline / this checkout at {n_compare:,} samples: {base['wall'] / blocked['wall']:.2f}x "
                  f"wall, {base['cpu'] / blocked['cpu']:.2f}x CPU, {base['peak_rss_gb'] / blocked['peak_rss_gb']:.2f}x "
                  f"peak RSS; intervals: {_ci_gap(base['cis'], blocked['cis'])}", flush=True)
    if n_full:
        results = _full_task(root, n_full)
        blocked = timed_summarize(results, root / "report-blocked", False, models)
        _show_path(f"this checkout (blocked counts), {n_full:,} samples", blocked)
        against_floor(blocked, results, models)
        counts_gb = DEFAULT_N_BOOT * n_full * (8 + 8 + 4) / 1e9  # int64 draws, int64 bincount, float32 counts
        print(f"  the baseline at {n_full:,} samples holds {counts_gb:.1f} GB while drawing the counts (int64 draws, "
              f"their int64 bincount, the float32 matrix), then a float64 copy: it runs under an address-space cap "
              f"of {cap_gb:g} GB", flush=True)
        base = timed_summarize(results, root / "report-baseline", False, models, dense=True, cap_gb=cap_gb)
        _show_path(f"dense baseline (all counts at once), {n_full:,} samples, capped at {cap_gb:g} GB", base)
        if "memory_error" not in base:
            print(f"  ratio baseline / this checkout at {n_full:,} samples: {base['wall'] / blocked['wall']:.2f}x "
                  f"wall, {base['peak_rss_gb'] / blocked['peak_rss_gb']:.2f}x peak RSS; intervals: "
                  f"{_ci_gap(base['cis'], blocked['cis'])}", flush=True)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_floor":
        stores = polars_floor(Path(sys.argv[2]), sys.argv[3].split(","))
        print(json.dumps({"stores": stores, "peak_rss_gb": peak_rss_mb() * 2**20 / 1e9}))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--_child":
        return child_main(sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5], sys.argv[6].split(","),
                          float(sys.argv[7]), sys.argv[8] == "1")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=20)
    p.add_argument("--tasks", type=int, default=50)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--keep", default=None, help="generate into (or reuse) this folder and keep it")
    p.add_argument("--no_plots", action="store_true", help="time only the summarize without PNG plots")
    p.add_argument("--stale_fraction", type=float, default=0.01,
                   help="share of each store's answers in the killed rerun's newer segment (0: skip the stale run)")
    p.add_argument("--big_models", type=int, default=60,
                   help="then add models up to this many and time summarize again without plots (0: skip)")
    p.add_argument("--full_task_samples", type=int, default=1_000_000,
                   help="samples of the full-size task (0: skip that section)")
    p.add_argument("--full_task_compare", type=int, default=100_000,
                   help="samples of the task where today's dense path and the blocked one both run (0: skip)")
    p.add_argument("--dense_cap_gb", type=float, default=8.0,
                   help="address-space cap of today's dense path at the full size (it needs about 18 GB)")
    p.add_argument("--full_task_only", action="store_true", help="run only the full-size task section")
    p.add_argument("--store_factor", type=int, default=0,
                   help="compare the same rows in this many times more stores (more tasks of fewer samples), "
                        "summarize and the polars floor, interleaved; nothing else is run")
    p.add_argument("--pairs", type=int, default=3, help="rounds of the --store_factor comparison")
    p.add_argument("--baseline_src", default=None,
                   help="with --store_factor: also time summarize from this package source folder (another "
                        "checkout's src, e.g. the main branch's) in every round, beside this checkout")
    ns = p.parse_args()
    tmp = None
    if ns.keep:
        root = Path(ns.keep)
    else:
        tmp = tempfile.mkdtemp(prefix="bench-summarize-")
        root = Path(tmp)
    results, out = root / "results", root / "report"
    if ns.store_factor:
        try:
            compare_store_counts(root, ns)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        return 0
    try:
        if ns.full_task_only:
            full_task_section(root, ns.full_task_samples, ns.full_task_compare, ns.dense_cap_gb)
            return 0
        # .complete: [models generated, tasks, samples]; a folder with more models is reused (timed on a subset)
        done = results / ".complete"
        have = json.loads(done.read_text()) if done.exists() else None
        if not (isinstance(have, list) and len(have) == 3 and have[1:] == [ns.tasks, ns.samples]
                and have[0] >= ns.models):
            if results.exists():
                shutil.rmtree(results)
            t = time.perf_counter()
            rows = generate(results, ns.models, ns.tasks, ns.samples)
            have = [ns.models, ns.tasks, ns.samples]
            done.write_text(json.dumps(have))
            print(f"generated {rows:,} sample rows ({ns.models} models x {ns.tasks} tasks x {ns.samples} samples) "
                  f"in {time.perf_counter() - t:.1f} s", flush=True)
        unstale(results)
        models = model_names(ns.models)
        rows = ns.models * ns.tasks * ns.samples
        check_layout(results)
        size = sum(f.stat().st_size for f in results.rglob("*.jsonl")) / 1e9
        print(f"store files: {size:.2f} GB of JSON lines", flush=True)
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} before the timed runs "
              "(other processes inflate wall times; CPU times are what the work itself used)", flush=True)
        floor = timed_floor(results, models)
        print(f"floor (one polars group-by of the same parsed.jsonl rows per store: counts and metric means, no "
              f"groups, CIs or report): {floor['wall']:.2f} s wall, {floor['cpu']:.2f} s CPU", flush=True)
        naive, naive_cpu = floor["wall"], floor["cpu"]
        runs = [("current stores: upstream tables, CIs, per-group and per-task tables, sample browser, HTML "
                 "(no plots)", False)]
        if not ns.no_plots:
            runs.append(("current stores: the same plus every PNG plot", True))
        current = None
        for what, plots in runs:
            d = timed_summarize(results, out, plots, models)
            assert d["rows"] == rows, (d["rows"], rows)
            show(what, d, 10)
            print(f"  ratio summarize / floor: {d['wall'] / naive:.2f}x wall, {d['cpu'] / naive_cpu:.2f}x CPU",
                  flush=True)
            current = current or d
        if ns.stale_fraction > 0:
            n_new = make_stale(results, ns.stale_fraction, models)
            d = timed_summarize(results, out, False, models)
            assert d["rows"] == rows, (d["rows"], rows)
            # the re-scored samples come from the real scorer: Precision/Recall partly in float32 (see check_layout)
            assert same_numbers(d["leaderboards"], current["leaderboards"]), "the stale summary must equal the current"
            show(f"stale stores (a killed rerun appended {n_new:,} answers, {ns.stale_fraction:.0%} of each store, "
                 "newer than parsed.jsonl; no plots)", d, 15)
            against_floor(d, results, models)  # the floor reads parsed.jsonl only: the re-score is above it
            secs, n = full_rescore_rate(results, models)
            print(f"  before: a stale store was re-scored whole in per-sample Python: {secs:.2f} s for {n:,} rows "
                  f"(6 stores) -> about {secs / n * rows:.0f} s for {rows:,} rows", flush=True)
            unstale(results)
        if ns.big_models > ns.models:
            if have[0] < ns.big_models:
                t = time.perf_counter()
                more = generate(results, ns.big_models, ns.tasks, ns.samples, first_model=have[0])
                print(f"generated {more:,} more rows (models {have[0]}..{ns.big_models - 1}) in "
                      f"{time.perf_counter() - t:.1f} s", flush=True)
                done.write_text(json.dumps([ns.big_models, ns.tasks, ns.samples]))
            d = timed_summarize(results, out, False, model_names(ns.big_models))
            assert d["rows"] == ns.big_models * ns.tasks * ns.samples, d["rows"]
            show(f"{ns.big_models} models, current stores (no plots)", d, 20)
            against_floor(d, results, model_names(ns.big_models))
        if ns.full_task_samples or ns.full_task_compare:
            full_task_section(root, ns.full_task_samples, ns.full_task_compare, ns.dense_cap_gb)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
