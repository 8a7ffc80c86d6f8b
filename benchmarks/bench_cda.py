"""Benchmark: clinical decision agreement (report.cda) on generated stores of its proxy tasks, beside the plain
summarize of the same folder. Per model one KiTS23 T/L store (volumes of 20 slices, major axes 8-150 mm) and one
Ceph-Biometrics-400 angle store (SNA and SNB keys), --samples rows each, in the runner's store layout
(``bench_summarize``'s rows). Each measurement runs in a fresh child process: wall time and peak RSS of (1) load
only, (2) load + the CDA (``cda.analyse``, the bootstrap of every proxy and run, upstream's files), (3) summarize
without plots (its ``timings["cda"]`` is the CDA inside it).

    .venv/bin/python benchmarks/bench_cda.py [--models 4 --samples 5000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _peak import peak_rss_mb
from bench_summarize import _group_fields, make_docs, targets_of, vector_metrics
from medvision_bm.score.store_scoring import SCORING_VERSION
from medvision_bm.store.records import Counts, DocRow, ParsedRow, ResultsRecord, SignatureRecord
from medvision_bm.store.signature import digest
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, SAMPLE_METRICS, format_answer
from medvision_bm.tasks.upstream_parse import SampleStatus
from medvision_bm.tasks.upstream_prompts import prompt_version

TASKS = (("TL", "KiTS23", "Axial", "KiTS23_TumorLesionSize_Task01_Axial"),
         ("AD", "Ceph-Biometrics-400", "Sagittal", "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal"))


def generate(root: Path, n_models: int, n: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    rows = 0
    for family, dataset, plane, task in TASKS:
        docs = make_docs(task, family, dataset, plane, n, rng)
        for i, d in enumerate(docs):
            bp = d["doc"]["biometric_profile"]
            if family == "TL":  # spread the major axes over the four T categories
                major = float(np.float16(rng.uniform(8, 150)))
                bp["metric_value_major_axis"] = [major]
                bp["metric_value_minor_axis"] = [float(np.float16(major * rng.uniform(0.4, 1.0)))]
            else:
                bp.update(metric_type="angle", metric_key=("A-L_1_2-L_2_5", "A-L_1_2-L_2_6")[i % 2],
                          metric_value=float(np.float16(rng.uniform(72, 90))), metric_unit="degree")
        docs = [DocRow.from_json(d).to_json() for d in docs]
        docs_text = "".join(DocRow.from_json(d).line().decode() + "\n" for d in docs)
        tgt = targets_of(docs, family)
        fields = [_group_fields(d["doc"], family) for d in docs]
        for m in range(n_models):
            model = f"model{m:02d}"
            inputs = {"model": {"record": model}, "task": task, "protocol": "current",
                      "task_version": prompt_version("current", family, "")}
            sig = digest(inputs)
            folder = root / model / task / sig[:12]
            (folder / "samples").mkdir(parents=True, exist_ok=True)
            SignatureRecord(sig, inputs).write(folder / "signature.json")
            (folder / "docs.jsonl").write_text(docs_text)
            pred = np.abs(tgt * (1 + rng.normal(0, 0.05 + 0.05 * m, size=tgt.shape)))
            ok = rng.random(n) > 0.02
            mets = vector_metrics(family, pred, tgt)
            seg, parsed = [], []
            for i, d in enumerate(docs):
                seg.append(json.dumps({"answer_signature": sig, "attempts": 1, "doc_sha": d["doc_sha"], "error": None,
                                       "finish_reason": "stop", "index": i, "key": d["key"], "latency_s": 0.5,
                                       "status": "ok", "text": format_answer(pred[i]) if ok[i] else "unsure",
                                       "time": 1.7e9, "usage": None}, separators=(",", ":")) + "\n")
                metrics = {k: (float(mets[k][i]) if ok[i] else None) for k in SAMPLE_METRICS[family]}
                if family == "AD":
                    metrics["nMAE"] = None
                f = fields[i]
                parsed.append(ParsedRow(
                    index=i, family=family, task=task, rules="newer", key=d["key"],
                    status=SampleStatus("ok" if ok[i] else "parse_failed"), success=bool(ok[i]),
                    values=[float(v) for v in pred[i].astype(np.float32)] if ok[i] else None,
                    target=tgt[i].tolist(), metrics=metrics, parser="strict-1", metric_path=DEFAULT_METRIC_PATH,
                    dataset=f["dataset"], label=f["label"], label_name=f["label_name"], modality=f["modality"],
                    slice_dim=f["slice_dim"], metric_type=f.get("metric_type"),
                    metric_key=f.get("metric_key")).line().decode())
            (folder / "samples" / "bench-0.jsonl").write_text("".join(seg))
            (folder / "parsed.jsonl").write_text("".join(parsed))
            ResultsRecord(
                model_name=model, task=task, family=family, answer_signature=sig, complete=True, protocol="current",
                parser_version="strict-1", metric_rules="newer", metric_path=DEFAULT_METRIC_PATH,
                scoring_version=SCORING_VERSION,
                counts=Counts.of_parse(None, selected=n, answered=n, request_failed=0, pending=0, bad_lines=0,
                                       foreign_lines=0, duplicates=0)).write(folder / "results.json")
            rows += n
    return rows


def child(mode: str, results: str, out: str) -> None:
    t0 = time.perf_counter()
    report: dict = {}
    if mode == "summarize":
        from medvision_bm.report.summarize import SummaryOptions, summarize

        res = summarize(results, out, SummaryOptions(plots=False, tl_filter=False))
        report["cda_inside_s"] = res.timings.get("cda")
    else:
        from medvision_bm.report import cda
        from medvision_bm.report.load import load
        from medvision_bm.store.discovery import discover

        refs, _ = discover(results)
        loaded = load(refs)
        if mode == "cda":
            t1 = time.perf_counter()
            analysis = cda.analyse(loaded)
            files = cda.write_files(Path(out), analysis, "parsed", "the strict parse", results, False)
            report.update(cda_s=time.perf_counter() - t1, files=len(files),
                          samples=sum(len(r.samples) for runs in analysis.runs.values() for r in runs))
    report.update(wall_s=time.perf_counter() - t0, peak_rss_mb=peak_rss_mb())
    print(json.dumps(report))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--samples", type=int, default=5000)
    p.add_argument("--keep", default=None)
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ns = p.parse_args()
    if ns.child:
        child(*ns.child)
        return 0
    root = Path(ns.keep) if ns.keep else Path(tempfile.mkdtemp(prefix="bench_cda_"))
    try:
        results = root / "results"
        if not results.exists():
            t = time.perf_counter()
            rows = generate(results, ns.models, ns.samples)
            print(f"generated {rows:,} rows ({ns.models} models x 2 proxy tasks x {ns.samples:,}) in "
                  f"{time.perf_counter() - t:.1f} s")
        for mode in ("load", "cda", "summarize"):
            out = root / f"out_{mode}"
            res = subprocess.run([sys.executable, __file__, "--child", mode, str(results), str(out)],
                                 capture_output=True, text=True, check=True)
            print(f"{mode:>9}: {res.stdout.strip().splitlines()[-1]}")
    finally:
        if not ns.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
