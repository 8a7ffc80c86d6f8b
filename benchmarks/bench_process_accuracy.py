"""Benchmark: process and equation accuracy (``report.process_stage``) over a -CoT T/L store of N samples beside the
plain summarize of the same folder. The phantom's T/L -CoT task is run once by the oracle (the real runner); its
docs and answers are then repeated under new keys to N samples (the same landmark files, so every sample reads the
ground truth from disk as a real run does), each answer rewritten as a -CoT answer with four reasoning steps and
formulas. Each size is summarized in a child process twice, with the stage and without it (the stage switched off
through ``process_stage.run_stage``), and its wall time and peak RSS printed.

    .venv/bin/python benchmarks/bench_process_accuracy.py [--sizes 2000 20000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _peak import peak_rss_mb
from medvision_bm.data.phantom import LAUNCHER_PIN, make_phantom
from medvision_bm.store.records import DocRow, ParsedRow, ResultsRecord
from medvision_bm.tasks.scoring import target

TASK = "PhantomCT_TumorLesionSize_Task02_Axial-CoT"
REPO = Path(__file__).resolve().parents[1]


def cot_answer(major: float, minor: float, i: int) -> str:
    """A -CoT answer in upstream's step format (points near the image centre, lengths off by a few percent)."""
    a, b = major * (1 + 0.01 * (i % 7)), minor * (1 - 0.01 * (i % 5))
    return ("<step-1-reasoning>The lesion's longest chord runs from the upper left to the lower right.</step-1-reasoning>"
            "<step-1-answer>(0.4100, 0.5200), (0.5900, 0.4700)</step-1-answer>"
            "<step-2-reasoning>Perpendicular to it, the widest chord.</step-2-reasoning>"
            "<step-2-answer>(0.4800, 0.4400), (0.5200, 0.5600)</step-2-answer>"
            f"<step-3-reasoning>L = sqrt((0.18 * 512 * 0.7)^2 + (0.05 * 512 * 0.7)^2) = {a:.3f}</step-3-reasoning>"
            f"<step-3-answer>{a:.3f}</step-3-answer>"
            f"<step-4-reasoning>W = sqrt(|0.04 * 512 * 0.7|^2 + (0.12 * 512 * 0.7)^2)</step-4-reasoning>"
            f"<step-4-answer>{b:.3f}</step-4-answer><answer>{a:.3f}, {b:.3f}</answer>")


def base_store(work: Path, data: Path) -> Path:
    tasks = work / "tasks.json"
    tasks.write_text(json.dumps({TASK: 0}))
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{os.environ.get('PYTHONPATH', '')}",
           **LAUNCHER_PIN}
    res = subprocess.run([sys.executable, "-m", "medvision_bm.cli", "run", "--model", "oracle", "--data_dir", str(data),
                          "--tasks_list_json_path", str(tasks), "--results_dir", str(work / "base"),
                          "--skip_update_status", "--skip_env_setup", "--no_progress"], env=env, capture_output=True,
                         text=True)
    if res.returncode != 0:
        raise SystemExit(res.stderr[-2000:])
    return next((work / "base").glob(f"**/{TASK}/*/docs.jsonl")).parent


def grow(base: Path, n: int, dest: Path) -> None:
    """``base`` repeated under new keys to ``n`` samples, every answer a -CoT one."""
    docs = [json.loads(line) for line in (base / "docs.jsonl").read_text().splitlines()]
    parsed = {r["key"]: r for r in (json.loads(line) for line in (base / "parsed.jsonl").read_text().splitlines())}
    seg = {r["key"]: r for r in (json.loads(line) for line in next((base / "samples").glob("*.jsonl")).read_text()
                                 .splitlines()) if r.get("status") == "ok"}
    folder = dest / "MedVision-TL-CoT" / "oracle" / TASK / base.name
    (folder / "samples").mkdir(parents=True)
    shutil.copy(base / "signature.json", folder / "signature.json")
    with open(folder / "docs.jsonl", "w") as fd, open(folder / "samples" / "bench.jsonl", "w") as fs, \
            open(folder / "parsed.jsonl", "w") as fp:
        for i in range(n):
            d = docs[i % len(docs)]
            key = f"{d['key']}#{i}"
            row = {**d, "key": key, "index": i, "doc": {**d["doc"], "key": key, "index": i}}  # as the runner keys it
            major, minor = target(DocRow.from_json(d).rundoc().doc)
            fd.write(json.dumps(row) + "\n")
            fs.write(json.dumps({**seg[d["key"]], "key": key, "index": i, "text": cot_answer(major, minor, i)}) + "\n")
            fp.write(ParsedRow.from_json({**parsed[d["key"]], "key": key, "index": i}).line().decode() + "\n")
    results = ResultsRecord.read(base / "results.json")
    assert results is not None
    data = results.to_json()
    data.update(selection=None, counts={**(data.get("counts") or {}), "selected": n, "answered": n})
    (folder / "results.json").write_text(json.dumps(data))
    os.utime(folder / "parsed.jsonl", (time.time() + 5, time.time() + 5))


def child(results: str, out: str, data: str, stage: bool) -> None:
    from medvision_bm.report import process_stage
    from medvision_bm.report.summarize import SummaryOptions, summarize

    if not stage:
        process_stage.run_stage = lambda *a, **k: process_stage.ProcessResult()  # the plain summarize
    t0 = time.perf_counter()
    res = summarize(results, out, SummaryOptions(data_dir=data, plots=False, n_boot=200, browse_per_task=0))
    print(json.dumps({"wall_s": time.perf_counter() - t0, "stage_s": res.timings.get("process_accuracy"),
                      "peak_mb": peak_rss_mb(), "files": len(res.files)}))


def timed(results: Path, out: Path, data: Path, stage: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO / 'benchmarks'}:{os.environ.get('PYTHONPATH', '')}"}
    res = subprocess.run([sys.executable, __file__, "--child", str(results), str(out), str(data), str(int(stage))],
                         env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--keep", default=None)
    ap.add_argument("--child", nargs=4, default=None)
    ns = ap.parse_args()
    if ns.child:
        child(ns.child[0], ns.child[1], ns.child[2], ns.child[3] == "1")
        return 0
    work = Path(ns.keep or tempfile.mkdtemp(prefix="bench-procacc-"))
    data = work / "Data"
    if not (data / "Datasets").is_dir():
        make_phantom(data)
    base = base_store(work, data)
    for n in ns.sizes:
        results = work / f"results-{n}"
        shutil.rmtree(results, ignore_errors=True)
        grow(base, n, results)
        plain = timed(results, work / f"out-plain-{n}", data, False)
        full = timed(results, work / f"out-{n}", data, True)
        print(f"{n:>8} samples: summarize {plain['wall_s']:.1f} s, {plain['peak_mb']:.0f} MB; with process and "
              f"equation accuracy {full['wall_s']:.1f} s (the stage {full['stage_s']:.1f} s, "
              f"{n / max(full['stage_s'], 1e-9):,.0f} samples/s), {full['peak_mb']:.0f} MB")
    if not ns.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
