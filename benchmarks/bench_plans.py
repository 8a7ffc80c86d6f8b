"""Benchmark: reading the docs of one task from a whole-body-CT-sized upstream detection plan.

Generates (once, cached under /tmp) a synthetic ``benchmark_plan_detection_v1.0.0.json.gz`` in upstream's schema and
key order (task header, train_cases_number, train_cases, test_cases_number, test_cases; 70/30 split), by default
~1M slice entries and over 200 MB gzipped, like TotalSegmentator/AbdomenAtlas detection plans. Then, each in a
fresh subprocess (time and the process's own peak RSS, VmHWM), measures against a plain ``json.load`` of the same
file in the same run:

* time to the first doc, index cache cleared (cold);
* ``--sample_limit 1000`` equivalent: the first 1,000 docs of the Axial config, cold;
* all docs of the test split (every plane's config), cold: time and peak RSS;
* the cached second run: the first 1,000 docs (and all docs) with the index already built.

A second baseline, json.load with the cyclic GC disabled, is printed for reference: with the GC on, json.load of a
plan this size spends most of its time in full collections over the objects it has already built.

Targets (issue, 2 cores): first 1,000 docs < 5 s; all docs < 3x json.load and < 4 GB; cached run < 2 s.

``--folder``: a synthetic full-size ``Data/`` folder instead: every detection and tumor/lesion dataset of
upstream's v1.4.0 task lists (29 detection datasets, 12 with tumor/lesion tasks; 41 plans), each plan with upstream's
tasks, sized to upstream's published sample counts (``UPSTREAM_TRAIN``; the test split 3/7 of the train split) and
scaled by ``--folder_scale``. Then ``data tasks`` (every task) and ``data check`` of a tasks list (a few tasks of a
few datasets), each cold (empty cache) and cached, in fresh processes (time, peak RSS), by this checkout and by the
code of ``--baseline_ref`` (the commit before plans were counted in one pass, in parallel and cached), both listings
compared.

    .venv/bin/python benchmarks/bench_plans.py [--small] [--cases 1100] [--workdir /tmp/medvision_bench_plans]
    .venv/bin/python benchmarks/bench_plans.py --profile cold_limit     # cProfile one measurement
    .venv/bin/python benchmarks/bench_plans.py --folder [--folder_scale 1.0] [--baseline_ref ca4c42f] [--disk_cold]

``--disk_cold`` drops the plans from the page cache before each cold run (``posix_fadvise``, best-effort; the share
still resident is printed): cold then also means read from the disk, as on a cluster's first run over a new folder.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import multiprocessing
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from _pagecache import drop_page_cache, resident_fraction
from _peak import peak_rss_mb

DATASET = "BenchCT"
PLANES = ("Axial", "Coronal", "Sagittal")
TASK = f"{DATASET}_BoxCoordinate_Task01_" + "{plane}"
N_TEMPLATES = 12
FULL = {"cases": 1100, "x": 280, "y": 280, "z": 340}  # ~990k slice entries
SMALL = {"cases": 24, "x": 20, "y": 20, "z": 30}
GEN_VERSION = 1


# ---------------------------------------------------------------------------------------------------- generation


def _box(rng: random.Random, h: int, w: int, ph: float, pw: float) -> dict:
    d0, d1 = rng.randint(3, 120), rng.randint(3, 120)
    lo = [rng.randint(0, h - d0), rng.randint(0, w - d1)]
    hi = [lo[0] + d0 - 1, lo[1] + d1 - 1]
    return {"min_coords": lo, "max_coords": hi, "center_coords": [int((lo[0] + hi[0]) / 2), int((lo[1] + hi[1]) / 2)],
            "dimensions": [d0, d1], "sizes": [round(d0 * ph, 3), round(d1 * pw, 3)],
            "mask_image_ratio": round(d0 * d1 / (h * w), 6)}


def _template_body(seed: int, n: dict[str, int]) -> str:
    """The slice_profiles_x/y/z part of one case as JSON text (starts with ', "slice_profiles_x"')."""
    rng = random.Random(seed)
    shape, spacing = (512, 512, 400), (0.781, 0.781, 1.5)
    parts = []
    for dim, axis in enumerate("xyz"):
        h, w = [s for d, s in enumerate(shape) if d != dim]
        ph, pw = [s for d, s in enumerate(spacing) if d != dim]
        start = rng.randint(0, 40)
        entries = []
        for k in range(start, start + n[axis]):
            labels = sorted(rng.sample(range(1, 40), rng.randint(1, 9)))
            entries.append({"slice_idx": k, "slice_profile": [
                {"label": lab, "bboxes": [_box(rng, h, w, ph, pw) for _ in range(rng.choice((1, 1, 1, 2, 3)))]}
                for lab in labels]})
        parts.append(f'"slice_profiles_{axis}": ' + json.dumps(entries))
    return ", " + ", ".join(parts) + "}"


def _case_head(i: int, rng: random.Random) -> str:
    vx = round(rng.uniform(0.6, 0.98), 3)
    vz = rng.choice((0.8, 1.0, 1.25, 1.5, 2.0, 3.0))
    size = [512, 512, rng.randint(300, 500)]
    info = {"voxel_size": [vx, vx, vz], "affine": [[vx, 0.0, 0.0, -250.0], [0.0, vx, 0.0, -250.0],
                                                  [0.0, 0.0, vz, -600.0], [0.0, 0.0, 0.0, 1.0]],
            "orientation": ["R", "A", "S"], "array_size": size}
    cid = f"s{i:04d}"
    head = {"case_ID": cid, "image_file": f"Images/{cid}.nii.gz", "mask_file": f"Masks/{cid}.nii.gz",
            "image_file_info": info, "mask_file_info": info}
    return json.dumps(head)[:-1]  # without the closing brace: the body follows


def _task_header(n_train: int) -> str:
    head = {"task_ID": "01", "task_type": "detection", "image_modality": "CT",
            "image_description": "whole-body computed tomography (CT) scan", "image_folder": "Images",
            "mask_folder": "Masks", "image_prefix": "", "image_suffix": ".nii.gz", "mask_prefix": "",
            "mask_suffix": ".nii.gz", "labels_map": {str(i): f"structure {i}" for i in range(1, 40)},
            "train_cases_number": n_train}
    return json.dumps(head)[:-1]


def _iter_text(n: dict[str, int]):
    """The plan's JSON text in pieces (header, cases built from N_TEMPLATES bodies, footer)."""
    cases = n["cases"]
    n_train = round(cases * 0.7)
    bodies = [_template_body(1000 + t, n) for t in range(N_TEMPLATES)]
    rng = random.Random(7)
    yield ('{"dataset_info": {"dataset": "BenchCT", "dataset_website": "", "dataset_data": [], "license": [], '
           '"paper": []}, "tasks_number": 1, "tasks": [' + _task_header(n_train) + ', "train_cases": [')
    for i in range(cases):
        if i == n_train:
            yield f'], "test_cases_number": {cases - n_train}, "test_cases": ['
        elif i:
            yield ", "
        yield _case_head(i, rng) + bodies[(i * 5) % N_TEMPLATES]
    yield "]}]}"


def _deflate_block(args: tuple[bytes, bool]) -> bytes:
    data, last = args
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    return comp.compress(data) + comp.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _blocks(pieces, size: int = 16 << 20):
    buf: list[bytes] = []
    length = 0
    for piece in pieces:
        b = piece.encode()
        buf.append(b)
        length += len(b)
        if length >= size:
            yield b"".join(buf)
            buf, length = [], 0
    yield b"".join(buf)


def write_plan(path: Path, n: dict[str, int], workers: int, pieces=None, pool=None) -> None:
    """One gzip member at level 6, its deflate blocks compressed in parallel (as pigz does), then renamed in place.
    ``pieces``: the plan's text in pieces (default: the one-task plan of ``n``); ``pool``: a process pool to use
    (default: one of ``workers`` processes for this plan; none for one worker)."""
    if pool is None and workers > 1:
        with multiprocessing.Pool(workers) as own:
            return write_plan(path, n, workers, pieces, own)
    mapper = pool.map if pool is not None else map
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    crc, total = 0, 0
    with open(tmp, "wb") as out:
        out.write(b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff")
        pending: list[bytes] = []

        def flush(final: bool) -> None:
            nonlocal crc, total
            jobs = [(b, final and i == len(pending) - 1) for i, b in enumerate(pending)]
            for b in pending:
                crc = zlib.crc32(b, crc)
                total += len(b)
            for comp in mapper(_deflate_block, jobs):
                out.write(comp)
            pending.clear()

        blocks = _blocks(_iter_text(n) if pieces is None else pieces)
        nxt = next(blocks)
        for b in blocks:
            pending.append(nxt)
            nxt = b
            if len(pending) >= workers * 2:
                flush(False)
        pending.append(nxt)
        flush(True)
        out.write(struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF))
    os.replace(tmp, path)


def ensure_plan(workdir: Path, n: dict[str, int], workers: int) -> tuple[Path, float | None]:
    tag = f"c{n['cases']}-x{n['x']}-y{n['y']}-z{n['z']}-g{GEN_VERSION}"
    data_dir = workdir / tag
    path = data_dir / "Datasets" / DATASET / "benchmark_plan_detection_v1.0.0.json.gz"
    done = path.with_name(".complete")
    if path.is_file() and done.is_file():
        return data_dir, None
    t0 = time.perf_counter()
    write_plan(path, n, workers)
    done.write_text(json.dumps(n))
    return data_dir, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------------- full folder

#: Upstream's train-split sample counts per plan task, summed over the three planes: YongchengYAO/MedVision
#: dataset-info/all_tasks__ds_v1.4.0/tasks_MedVision-detect-CoT__AllSlices__Train.json and
#: tasks_MedVision-TL-CoT__AllSlices__Train.json @b6cbfae. (dataset, plan kind) -> one count per task, in task order.
UPSTREAM_TRAIN: dict[tuple[str, str], list[int]] = {
    ("AbdomenAtlas1.0Mini", "detection"): [6847923], ("AbdomenCT-1K", "detection"): [729475],
    ("ACDC", "detection"): [9452], ("AMOS22", "detection"): [406191, 70121],
    ("autoPET-III", "detection"): [11066, 10808], ("BCV15", "detection"): [35416, 13013],
    ("BraTS24", "detection"): [134828, 135146, 136261, 137170, 27737, 34671, 35599, 35859, 34927, 17772, 17126,
                               17885, 17509],
    ("CAMUS", "detection"): [666027], ("CrossMoDA", "detection"): [3049], ("DEEP-PSMA", "detection"): [841, 444],
    ("FeTA24", "detection"): [34150], ("FLARE22", "detection"): [71571], ("HNTSMRG24", "detection"): [9105, 13567],
    ("ISLES24", "detection"): [3629, 3547], ("KiPA22", "detection"): [26479], ("KiTS23", "detection"): [79588],
    ("LIDC-IDRI", "detection"): [7338], ("LNQ2023", "detection"): [1177], ("MAMA-MIA", "detection"): [46507],
    ("MSD", "detection"): [18871, 18871, 18871, 18871, 2732, 1534, 16202, 9560, 48031, 2439, 26973, 2867, 2867,
                           5310],
    ("MSWAL", "detection"): [42184], ("OAIZIB-CM", "detection"): [452998], ("PDDCA", "detection"): [10316],
    ("PI-CAI", "detection"): [3851], ("SKM-TEA", "detection"): [90182, 90182], ("ToothFairy2", "detection"): [988839],
    ("TopCoW24", "detection"): [21646, 7001], ("TotalSegmentator", "detection"): [4796534, 572050],
    ("VerSe", "detection"): [244729],
    ("autoPET-III", "biometry"): [36207],
    ("BraTS24", "biometry"): [10084, 68555, 37512, 64264, 33398, 7471, 29254, 27146, 4153, 14371, 1451, 1751],
    ("DEEP-PSMA", "biometry"): [4263, 2858], ("HNTSMRG24", "biometry"): [5287, 7748, 9220, 8489],
    ("KiPA22", "biometry"): [9175], ("KiTS23", "biometry"): [43751], ("LIDC-IDRI", "biometry"): [31308],
    ("LNQ2023", "biometry"): [4102], ("MAMA-MIA", "biometry"): [62653],
    ("MSD", "biometry"): [10042, 2790, 11544, 6928, 24398, 9754, 3140, 12428],
    ("MSWAL", "biometry"): [17814, 6323, 6620, 11501, 13279], ("PI-CAI", "biometry"): [15927],
}
#: Case geometries (slice entries per axis): the largest tasks get whole-body-CT-sized cases, as upstream's do.
GEOMETRIES = ((500_000, FULL), (20_000, {"x": 60, "y": 60, "z": 80}), (0, {"x": 12, "y": 12, "z": 16}))
FOLDER_VERSION = 1


def _tl_template_body(seed: int, n: dict[str, int]) -> str:
    """A tumor/lesion case's slice_profiles_x/y/z (upstream's biometry schema: clusters of L-1-2 / L-3-4 metrics)."""
    rng = random.Random(seed)
    parts = []
    for axis in "xyz":
        entries = []
        start = rng.randint(0, 40)
        for k in range(start, start + n[axis]):
            clusters = rng.choice((1, 1, 2))
            profile = [[{"metric_type": "distance", "metric_map_name": "lesion", "metric_key": key,
                         "metric_value": round(rng.uniform(2, 60), 3), "metric_unit": "mm"}
                        for key in ("L-1-2", "L-3-4")] for _ in range(clusters)]
            entries.append({"slice_idx": k, "n_total_clusters": clusters, "slice_profile": profile})
        parts.append(f'"slice_profiles_{axis}": ' + json.dumps(entries))
    return ", " + ", ".join(parts) + "}"


def _kept_per_case(body: str, kind: str) -> float:
    """Samples one case of this template gives on all three planes after upstream's filters (for sizing only)."""
    from medvision_bm.data.samples import detection_single

    case = json.loads("{" + body[2:])
    kept = 0
    for axis in "xyz":
        for entry in case[f"slice_profiles_{axis}"]:
            if kind == "detection":
                kept += sum(map(detection_single, entry["slice_profile"]))
            else:
                kept += entry["n_total_clusters"] <= 1
    return kept


def _folder_plan_text(dataset: str, kind: str, train_counts: list[int], scale: float, bodies: dict) -> tuple:
    """The plan's text in pieces, and its (train, test) case counts."""
    rng = random.Random(f"{dataset}/{kind}")
    yield_cases: list[tuple[int, int, dict]] = []
    for target in train_counts:
        geometry = next(g for floor, g in GEOMETRIES if target >= floor)
        key = (kind, tuple(sorted(geometry.items())))
        if key not in bodies:
            make = _template_body if kind == "detection" else _tl_template_body
            texts = [make(2000 + t, geometry) for t in range(N_TEMPLATES)]
            bodies[key] = (texts, sum(_kept_per_case(b, kind) for b in texts) / len(texts))
        texts, kept = bodies[key]
        n_train = max(1, round(target * scale / max(kept, 1)))
        yield_cases.append((n_train, max(1, round(n_train * 3 / 7)), {"texts": texts}))

    def pieces():
        yield ('{"dataset_info": {"dataset": "' + dataset + '", "dataset_website": "", "dataset_data": [], '
               '"license": [], "paper": []}, "tasks_number": ' + str(len(train_counts)) + ', "tasks": [')
        for t, (n_train, n_test, spec) in enumerate(yield_cases):
            head = {"task_ID": f"{t + 1:02d}", "task_type": kind, "image_modality": "CT",
                    "image_description": "computed tomography (CT) scan", "image_folder": "Images",
                    "mask_folder": "Masks", "image_prefix": "", "image_suffix": ".nii.gz", "mask_prefix": "",
                    "mask_suffix": ".nii.gz", "labels_map": {str(i): f"structure {i}" for i in range(1, 40)}}
            if kind == "biometry":
                head.update(target_label=t + 1, landmark_folder=f"Landmarks-Label{t + 1}")
            head["train_cases_number"] = n_train
            yield (", " if t else "") + json.dumps(head)[:-1] + ', "train_cases": ['
            for i in range(n_train + n_test):
                if i == n_train:
                    yield f'], "test_cases_number": {n_test}, "test_cases": ['
                elif i:
                    yield ", "
                yield _case_head(i, rng) + spec["texts"][(i * 5) % N_TEMPLATES]
            yield "]}"
        yield "]}"

    return pieces(), [(a, b) for a, b, _ in yield_cases]


def ensure_folder(workdir: Path, scale: float, workers: int) -> tuple[Path, float | None, dict]:
    """The synthetic full-size Data/ folder (generated once per scale, reused), its generation time, its sizes."""
    data_dir = workdir / f"folder-s{scale:g}-g{FOLDER_VERSION}"
    done = data_dir / ".complete"
    if done.is_file():
        return data_dir, None, json.loads(done.read_text())
    t0 = time.perf_counter()
    bodies: dict = {}
    sizes = {}
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(multiprocessing.Pool(workers)) if workers > 1 else None
        for (dataset, kind), counts in UPSTREAM_TRAIN.items():
            pieces, cases = _folder_plan_text(dataset, kind, counts, scale, bodies)
            path = data_dir / "Datasets" / dataset / f"benchmark_plan_{kind}_v1.0.0.json.gz"
            write_plan(path, {}, workers, pieces, pool)
            sizes[f"{dataset}/{kind}"] = {"cases": cases, "bytes": path.stat().st_size}
    done.write_text(json.dumps(sizes))
    return data_dir, time.perf_counter() - t0, sizes


def drop_plans_from_page_cache(data_dir: Path) -> float:
    """Drop every plan of the folder from the page cache (best-effort); the fraction of their bytes still resident."""
    plans = sorted((data_dir / "Datasets").glob("*/benchmark_plan_*.json.gz"))
    for plan in plans:
        drop_page_cache(str(plan))
    sizes = [plan.stat().st_size for plan in plans]
    fractions = [max(0.0, resident_fraction(str(plan))) for plan in plans]
    return sum(f * n for f, n in zip(fractions, sizes)) / max(1, sum(sizes))


def folder_tasks_list(data_dir: Path) -> Path:
    """A tasks list of a few tasks of a few datasets (detection and tumor/lesion), as a run's list names them."""
    names = ["ACDC_BoxCoordinate_Task01_Axial", "KiTS23_BoxCoordinate_Task01_Coronal",
             "KiTS23_TumorLesionSize_Task01_Axial", "MSD_BoxCoordinate_Task05_Sagittal",
             "MSD_TumorLesionSize_Task08_Axial", "BraTS24_TumorLesionSize_Task09_Coronal",
             "LIDC-IDRI_BoxCoordinate_Task01_Axial", "PI-CAI_TumorLesionSize_Task01_Sagittal"]
    path = data_dir / "tasks_check.json"
    path.write_text(json.dumps(dict.fromkeys(names, 1000)))
    return path


def folder_child(mode: str, data_dir: Path, tasks_list: Path | None) -> dict:
    """``data tasks`` (mode tasks) or ``data check`` of ``tasks_list`` (mode check), in this (fresh) process."""
    from medvision_bm.data.check import check
    from medvision_bm.data.layout import DataDir, load_tasks_list
    from medvision_bm.data.planner import DatasetContract

    t0 = time.perf_counter()
    data = DataDir(DatasetContract.resolve(data_dir, {"MedVision_PLANNER_VERSION": "latest"}))
    if mode == "tasks":
        listing = data.tasks()
    else:
        assert tasks_list is not None
        rows = check(data, dict(load_tasks_list(tasks_list)))
        listing = {r.task: (r.status, r.samples, r.candidates) for r in rows}
    return {"mode": mode, "seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb(), "listing": listing}


def run_folder_child(mode: str, data_dir: Path, cache: Path, tasks_list: Path | None, src: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MEDVISION_CACHE_DIR"] = str(cache)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", f"folder_{mode}", "--data_dir", str(data_dir)]
    if tasks_list is not None:
        cmd += ["--tasks_list", str(tasks_list)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # CPU time of the child and of the workers it waited for
        code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code:
        sys.stderr.write(stdout[-4000:] + stderr[-4000:])
        raise SystemExit(f"child folder_{mode} failed (exit {code})")
    result = json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("{\"mode\"")))
    result["cpu"] = usage.ru_utime + usage.ru_stime
    return result


def folder_main(ns: argparse.Namespace) -> None:
    from _gitref import source_at

    workdir = Path(ns.workdir)
    data_dir, gen_s, sizes = ensure_folder(workdir, ns.folder_scale, ns.workers)
    gz = sum(v["bytes"] for v in sizes.values()) / 1e9
    cases = sum(a + b for v in sizes.values() for a, b in v["cases"])
    n_tasks = sum(len(v["cases"]) for v in sizes.values())
    print(f"folder: {data_dir}: {len({k.split('/')[0] for k in sizes})} datasets, {len(sizes)} plans, {n_tasks} plan "
          f"tasks, {cases:,} cases, {gz:.2f} GB gzipped (scale {ns.folder_scale:g} of upstream's sample counts)"
          + (f", generated in {gen_s:.0f} s" if gen_s is not None else " (cached)"), flush=True)
    largest = sorted(sizes.items(), key=lambda kv: -kv[1]["bytes"])[:3]
    print("  largest plans: " + ", ".join(f"{k} {v['bytes'] / 1e6:.0f} MB" for k, v in largest), flush=True)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)
    tasks_list = folder_tasks_list(data_dir)
    impls = [("this checkout", None)]
    if ns.baseline_ref:
        impls.append((f"baseline {ns.baseline_ref}", source_at(ns.baseline_ref)))
    results: dict[str, dict[str, dict]] = {}
    for label, src in impls:
        for mode, lst in (("tasks", None), ("check", tasks_list)):
            cache = Path(tempfile.mkdtemp(prefix=f"bench-plans-{mode}-", dir=workdir))
            try:
                if ns.disk_cold:
                    resident = drop_plans_from_page_cache(data_dir)
                cold = run_folder_child(mode, data_dir, cache, lst, src)
                cached = run_folder_child(mode, data_dir, cache, lst, src)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            results.setdefault(label, {})[mode] = {"cold": cold, "cached": cached}
            what = (f"data tasks ({len(cold['listing'])} tasks)" if mode == "tasks"
                    else f"data check of {len(cold['listing'])} listed tasks")
            for state, m in (("cold", cold), ("cached", cached)):
                disk = (f", plans {resident:.0%} in the page cache before it" if ns.disk_cold and state == "cold"
                        else "")
                print(f"  {label:<22} {what:<34} {state:<6} {m['seconds']:8.2f} s  CPU {m['cpu']:8.2f} s  peak RSS "
                      f"{m['peak_rss_mb']:6.0f} MB (the command's process{disk})", flush=True)
    if len(impls) == 2:
        ra, rb = (results[label] for label, _ in impls)
        for mode in ("tasks", "check"):
            same = ra[mode]["cold"]["listing"] == rb[mode]["cold"]["listing"]
            for state in ("cold", "cached"):
                r = rb[mode][state]["seconds"] / ra[mode][state]["seconds"]
                c = rb[mode][state]["cpu"] / ra[mode][state]["cpu"]
                print(f"  data {mode} {state}: baseline / this checkout = {r:.1f}x wall, {c:.1f}x CPU", flush=True)
            print(f"  data {mode}: the same listing from both: {'yes' if same else 'NO'}", flush=True)


# ---------------------------------------------------------------------------------------------------- measuring


def clear_index(data_dir: Path) -> None:
    shutil.rmtree(data_dir / ".cache" / "medvision_bm", ignore_errors=True)


def child(mode: str, data_dir: Path, limit: int) -> dict:
    """One measurement, in this (fresh) process."""
    out: dict = {"mode": mode}
    if mode in ("json_load", "json_load_nogc"):
        if mode == "json_load_nogc":
            import gc

            gc.disable()
        path = data_dir / "Datasets" / DATASET / "benchmark_plan_detection_v1.0.0.json.gz"
        t0 = time.perf_counter()
        with gzip.open(path, "rb") as fh:
            plan = json.load(fh)
        out["seconds"] = time.perf_counter() - t0
        out["test_cases"] = len(plan["tasks"][0]["test_cases"])
        out["peak_rss_mb"] = peak_rss_mb()
        return out

    from medvision_bm.data.layout import DataDir
    from medvision_bm.data.planner import DatasetContract

    if mode.startswith("cold"):
        clear_index(data_dir)
    t0 = time.perf_counter()
    data = DataDir(DatasetContract.resolve(data_dir, {"MedVision_PLANNER_VERSION": "latest"}))
    # what a run asks for: a --sample_limit run reads only the first samples of a plan it has no index of yet
    wanted = {"cold_first": 1, "cold_limit": limit, "cached_limit": limit}.get(mode)
    samples = data.samples(TASK.format(plane="Axial"), limit=wanted)
    out["open_s"] = time.perf_counter() - t0
    if mode in ("cold_first",):
        docs = samples.docs([0])
    elif mode in ("cold_limit", "cached_limit"):
        docs = samples.docs(list(range(min(limit, len(samples)))))
    else:  # all docs of the test split: every plane's config
        docs_n = 0
        for plane in PLANES:
            s = data.samples(TASK.format(plane=plane))
            docs = s.docs()
            docs_n += len(docs)
            out[f"n_{plane}"] = len(docs)
            del docs
        docs = []
        out["docs"] = docs_n
    out["seconds"] = time.perf_counter() - t0
    out.setdefault("docs", len(docs))
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def run_child(mode: str, data_dir: Path, limit: int, profile: bool = False) -> dict:
    cmd = [sys.executable]
    if profile:
        cmd += ["-m", "cProfile", "-s", "cumulative"]
    cmd += [os.path.abspath(__file__), "--child", mode, "--data_dir", str(data_dir), "--sample_limit", str(limit)]
    env = {k: v for k, v in os.environ.items() if k != "MEDVISION_CACHE_DIR"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"child {mode} failed (exit {proc.returncode})")
    if profile:
        print("\n".join(proc.stdout.splitlines()[:60]))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("{\"mode\""))
    return json.loads(line)


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="a quick smoke size (a few MB) instead of ~1M slice entries")
    ap.add_argument("--cases", type=int, default=None, help="number of cases (default 1100, or 24 with --small)")
    ap.add_argument("--workdir", default="/tmp/medvision_bench_plans", help="where the generated plan is cached")
    ap.add_argument("--sample_limit", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--skip_json_load", action="store_true", help="do not measure the json.load baseline")
    ap.add_argument("--profile", default=None, metavar="MODE",
                    help="cProfile one measurement (json_load, cold_first, cold_limit, cold_all, cached_limit, "
                         "cached_all) and exit")
    ap.add_argument("--folder", action="store_true", help="the synthetic full-size Data/ folder (module docstring)")
    ap.add_argument("--folder_scale", type=float, default=1.0, help="the folder's size as a share of upstream's")
    ap.add_argument("--disk_cold", action="store_true",
                    help="--folder: drop the plans from the page cache before each cold run (best-effort)")
    ap.add_argument("--baseline_ref", default="ca4c42f",
                    help="--folder: the commit whose data layer runs beside this checkout's (empty: none)")
    ap.add_argument("--tasks_list", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--data_dir", default=None, help=argparse.SUPPRESS)
    ns = ap.parse_args()

    if ns.child:
        if ns.child.startswith("folder_"):
            lst = Path(ns.tasks_list) if ns.tasks_list else None
            print(json.dumps(folder_child(ns.child.removeprefix("folder_"), Path(ns.data_dir), lst)))
        else:
            print(json.dumps(child(ns.child, Path(ns.data_dir), ns.sample_limit)))
        return
    if ns.folder:
        folder_main(ns)
        return

    n = dict(SMALL if ns.small else FULL)
    if ns.cases:
        n["cases"] = ns.cases
    data_dir, gen_s = ensure_plan(Path(ns.workdir), n, ns.workers)
    path = data_dir / "Datasets" / DATASET / "benchmark_plan_detection_v1.0.0.json.gz"
    entries = n["cases"] * (n["x"] + n["y"] + n["z"])
    gz_mb = path.stat().st_size / 1e6
    print(f"plan: {path}")
    print(f"  {n['cases']} cases ({round(n['cases'] * 0.7)} train, {n['cases'] - round(n['cases'] * 0.7)} test), "
          f"{entries:,} slice entries, {gz_mb:.1f} MB gzipped"
          + (f" (generated in {gen_s:.1f} s)" if gen_s is not None else " (cached)"))

    if ns.profile:
        if ns.profile.startswith("cached"):
            run_child("cold_first", data_dir, ns.sample_limit)
        run_child(ns.profile, data_dir, ns.sample_limit, profile=True)
        return

    base = None if ns.skip_json_load else run_child("json_load", data_dir, ns.sample_limit)
    base_nogc = None if ns.skip_json_load else run_child("json_load_nogc", data_dir, ns.sample_limit)
    first = run_child("cold_first", data_dir, ns.sample_limit)
    limit = run_child("cold_limit", data_dir, ns.sample_limit)
    full = run_child("cold_all", data_dir, ns.sample_limit)
    cached = run_child("cached_limit", data_dir, ns.sample_limit)
    cached_all = run_child("cached_all", data_dir, ns.sample_limit)

    def ratio(s: float) -> str:
        return f"{s / base['seconds']:5.2f}x json.load" if base else "   (no baseline)"

    rows = []
    if base:
        rows.append(("json.load (baseline, whole plan)", base, "1.00x"))
        rows.append(("json.load with gc disabled (reference)", base_nogc, None))
    rows += [("cold: first doc", first, None),
             (f"cold: first {limit['docs']} docs (--sample_limit {ns.sample_limit})", limit, None),
             (f"cold: all {full['docs']:,} docs of the test split", full, None),
             (f"cached: first {cached['docs']} docs", cached, None),
             ("cached: all docs of the test split", cached_all, None)]
    print(f"{'measurement':<46} {'time':>9} {'peak RSS':>10}   vs baseline")
    for label, m, rel in rows:
        print(f"{label:<46} {m['seconds']:8.2f}s {m['peak_rss_mb']:8.0f}MB   {rel or ratio(m['seconds'])}")
    print(f"  (cold all: index build {full['open_s']:.2f} s; docs per config Axial/Coronal/Sagittal "
          f"{full['n_Axial']:,}/{full['n_Coronal']:,}/{full['n_Sagittal']:,})")
    print("targets (2 cores):")
    print(f"  first {ns.sample_limit} docs < 5 s          : {limit['seconds']:.2f} s -> {verdict(limit['seconds'] < 5)}")
    if base:
        r = full["seconds"] / base["seconds"]
        print(f"  all docs < 3x json.load      : {r:.2f}x -> {verdict(r < 3)}   "
              f"({full['seconds'] / base_nogc['seconds']:.2f}x json.load with gc disabled)")
    print(f"  all docs peak RSS < 4 GB     : {full['peak_rss_mb'] / 1024:.2f} GB -> "
          f"{verdict(full['peak_rss_mb'] < 4096)}")
    print(f"  cached run < 2 s             : {cached['seconds']:.2f} s -> {verdict(cached['seconds'] < 2)}")


if __name__ == "__main__":
    main()
