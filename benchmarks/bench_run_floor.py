"""Benchmark: a whole ``medvision-bm run`` against an OpenAI-compatible server, beside a floor script doing the same
unavoidable work, each in a fresh process, the two sides interleaved in the same run.

The data (built once, cached under ``--workdir``): the phantom ``Data/`` folder whose PhantomCT detection plan is
replaced by one task of ``--volumes`` CT-like ``.nii.gz`` volumes of ``--shape`` (int16, gzip level 6 as the phantom
writes them), each test case contributing ``ceil(N / volumes)`` axial slices, so that every one of the ``--n``
samples is a different slice (``PhantomCT_BoxCoordinate_Task01_Axial``, one box per slice).

The server: tests/fakes/provider_server.py ``--lean`` (a bare HTTP/1.1 responder answering every request after
``--latency`` seconds) in its own process.

Sides, each a fresh interpreter started and timed from here (wall from launch to exit, CPU = the child's user +
system time from ``getrusage(RUSAGE_CHILDREN)``), in an order rotated each round, for ``--pairs`` rounds:

* ``run``: ``python -m medvision_bm.cli run --model openai-compatible --base_url <server>/v1 --batch_size
  <concurrency>`` on that task, into a new results folder each round (from scratch: every sample asked);
* ``floor``: this file with ``--floor``: the plan's slices read with nibabel, each volume once and in the plan's
  order (inflated by python-isal as the suite inflates, parsed by nibabel; the stored int16 array, scaled and
  windowed to uint8 per slice), each slice encoded as
  the suite encodes a grey slice (single-channel PNG, rows unfiltered, deflate level
  ``models.api.images.PNG_COMPRESS_LEVEL`` through python-isal), base64, and posted as an OpenAI chat body with bare
  aiohttp, ``--concurrency`` in flight; reading and encoding on a thread pool of the machine's cores. No store, no
  retries, no lmms-eval: the work no client can avoid.

Printed per round: wall, CPU and the server's CPU of each side, the ratios run/floor (wall and CPU), and when the
run sent its first request (after launch) and how long it ran past its last answer (from the store's answer times);
then the medians over the rounds. ``--profile FILE`` also runs the run side once more under ``cProfile`` (after the rounds)
and writes its stats to FILE.

    python benchmarks/bench_run_floor.py                                  # N=400 over 4 volumes of 512x512x120
    python benchmarks/bench_run_floor.py --n 2000 --volumes 20 --pairs 3  # the 2,000-slice case
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from _lean_server import process_cpu_s, start_server

REPO = Path(__file__).resolve().parents[1]
TASK = "PhantomCT_BoxCoordinate_Task01_Axial"
PIN = {"MedVision_PLANNER_VERSION": "1.0.0", "MedVision_ACK_RELEASE": "1.4.0"}  # the phantom's launcher pin
PROMPT = "Locate the liver on this axial CT slice and answer with its bounding box."


# ====================================================================== data

def _volume(shape: tuple[int, int, int], seed: int) -> np.ndarray:
    """A CT-like int16 volume: air, an elliptic body, a liver-like blob and noise (compresses like a real CT)."""
    rng = np.random.default_rng(seed)
    h, w, d = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    body = ((yy / h - 0.5) / 0.45) ** 2 + ((xx / w - 0.5) / 0.4) ** 2 < 1
    liver = ((yy / h - 0.4) / 0.15) ** 2 + ((xx / w - 0.35) / 0.12) ** 2 < 1
    plane = np.where(body, 40.0, -1000.0) + np.where(liver, 60.0, 0.0)
    vol = np.empty(shape, np.int16)
    for k in range(d):
        vol[:, :, k] = np.rint(plane + rng.normal(0, 12, size=(h, w))).astype(np.int16)
    return vol


def _liver_box(shape: tuple[int, int, int]) -> dict[str, Any]:
    h, w, _ = shape
    lo = [int(h * 0.25) + 1, int(w * 0.23) + 1]
    hi = [int(h * 0.55) - 1, int(w * 0.47) - 1]
    dims = [hi[0] - lo[0] + 1, hi[1] - lo[1] + 1]
    return {"min_coords": lo, "max_coords": hi, "center_coords": [(lo[0] + hi[0]) // 2, (lo[1] + hi[1]) // 2],
            "dimensions": dims, "sizes": [round(d * 0.78, 3) for d in dims],
            "mask_image_ratio": round(dims[0] * dims[1] / (h * w), 6)}


def build_data(root: Path, n: int, volumes: int, shape: tuple[int, int, int]) -> Path:
    """The phantom Data/ folder with PhantomCT's detection plan replaced by one task of ``volumes`` big volumes,
    ``ceil(n / volumes)`` axial slices each (``n`` samples in all, every one a different slice). Cached in ``root``."""
    from medvision_bm.data.phantom import _nifti_bytes, make_phantom

    if min(shape[:2]) < 64:  # the liver's box would be under upstream's 10-pixel floor and every sample dropped
        raise SystemExit(f"--shape {shape}: slices of at least 64 x 64 pixels")
    per = math.ceil(n / volumes)
    if per > shape[2]:
        raise SystemExit(f"--n {n} over --volumes {volumes} needs {per} slices per volume; --shape has {shape[2]}")
    data = root / f"Data-{n}-{volumes}-{'x'.join(map(str, shape))}"
    if (data / ".complete").exists():
        return data
    shutil.rmtree(data, ignore_errors=True)
    make_phantom(data)
    ds = data / "Datasets" / "PhantomCT"
    plan_path = ds / "benchmark_plan_detection_v1.0.0.json.gz"
    plan = json.loads(gzip.decompress(plan_path.read_bytes()))
    task = plan["tasks"][0]
    spacing = (0.78, 0.78, 2.5)
    box = _liver_box(shape)
    cases = []
    left = n
    for v in range(volumes):
        case_id = f"bench_{v:03d}"
        vol_bytes = _nifti_bytes(_volume(shape, v).astype(np.float64), spacing, "int16")
        (ds / "Images" / f"{case_id}.nii.gz").write_bytes(gzip.compress(vol_bytes, compresslevel=6, mtime=0))
        mask = np.zeros(shape, np.uint8)
        mask[box["min_coords"][0]:box["max_coords"][0] + 1, box["min_coords"][1]:box["max_coords"][1] + 1, :] = 1
        (ds / "Masks" / f"{case_id}.nii.gz").write_bytes(
            gzip.compress(_nifti_bytes(mask, spacing, "uint8"), compresslevel=6, mtime=0))
        info = {"voxel_size": list(spacing), "affine": np.diag([*spacing, 1.0]).tolist(),
                "orientation": ["R", "A", "S"], "array_size": list(shape)}
        take = min(per, left)
        left -= take
        cases.append({"case_ID": case_id, "image_file": f"Images/{case_id}.nii.gz",
                      "mask_file": f"Masks/{case_id}.nii.gz", "image_file_info": info, "mask_file_info": info,
                      "slice_profiles_x": [], "slice_profiles_y": [],
                      "slice_profiles_z": [{"slice_idx": k, "slice_profile": [{"label": 1, "bboxes": [box]}]}
                                           for k in range(take)]})
    task.update(train_cases=[], train_cases_number=0, test_cases=cases, test_cases_number=len(cases))
    plan["tasks"] = [task]
    plan_path.write_bytes(gzip.compress(json.dumps(plan).encode(), compresslevel=6, mtime=0))
    (data / ".complete").write_text("")
    return data


def plan_slices(data: Path) -> list[tuple[str, list[int]]]:
    """(volume path, axial slice indices) per test case, in the plan's order."""
    plan = json.loads(gzip.decompress((data / "Datasets" / "PhantomCT" /
                                       "benchmark_plan_detection_v1.0.0.json.gz").read_bytes()))
    root = data / "Datasets" / "PhantomCT"
    return [(str(root / c["image_file"]), [e["slice_idx"] for e in c["slice_profiles_z"]])
            for c in plan["tasks"][0]["test_cases"]]


# ====================================================================== the floor (its own process)

def _encode(plane: np.ndarray) -> str:
    """Single-channel 8-bit PNG (filter 0 rows, deflate level 1 via python-isal), base64: the suite's settings."""
    import zlib

    from isal import isal_zlib

    h, w = plane.shape
    rows = np.zeros((h, w + 1), np.uint8)
    rows[:, 1:] = plane

    def chunk(kind: bytes, body: bytes) -> bytes:
        return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(body, zlib.crc32(kind)).to_bytes(4, "big")

    ihdr = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", isal_zlib.compress(rows, 1)) + \
        chunk(b"IEND", b"")
    return base64.b64encode(png).decode("ascii")


def _window(raw: np.ndarray, slope: float, inter: float) -> np.ndarray:
    """Scaled float32 slice to uint8 through a CT window (W 400, L 40), truncating as the suite does."""
    hu = raw.astype(np.float32) * np.float32(slope) + np.float32(inter)
    return ((np.clip(hu, -160.0, 240.0) + 160.0) / 400.0 * 255.0).astype(np.uint8)


async def _floor(url: str, data: Path, concurrency: int) -> int:
    import aiohttp
    import nibabel as nib
    from isal import igzip

    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
    gate = asyncio.Semaphore(concurrency)
    ok = 0

    def read(path: str) -> tuple[np.ndarray, float, float]:
        with igzip.open(path, "rb") as stream:  # the fastest inflate at hand (the suite's), then nibabel's parse
            img = nib.Nifti1Image.from_bytes(stream.read())
        slope, inter = img.dataobj.slope, img.dataobj.inter
        return np.asarray(img.dataobj.get_unscaled()), float(slope), float(inter)

    async def one(session: aiohttp.ClientSession, vol: np.ndarray, k: int, slope: float, inter: float) -> None:
        nonlocal ok
        try:
            b64 = await loop.run_in_executor(pool, lambda: _encode(_window(vol[:, :, k], slope, inter)))
            body = {"model": "bench", "max_tokens": 64, "temperature": 0.0,
                    "messages": [{"role": "user", "content": [
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64}"}},
                        {"type": "text", "text": PROMPT}]}]}
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                answer = await resp.json()
                ok += bool(answer["choices"][0]["message"]["content"])
        finally:
            gate.release()

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = []
        for path, indices in plan_slices(data):
            vol, slope, inter = await loop.run_in_executor(pool, read, path)  # once per volume, in order
            for k in indices:
                await gate.acquire()
                tasks.append(asyncio.create_task(one(session, vol, k, slope, inter)))
        await asyncio.gather(*tasks)
    pool.shutdown()
    return ok


# ====================================================================== the sides

def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    env.update(PIN, PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH", "")) if p))
    return env


def run_argv(url: str, data: Path, out: Path, n: int, concurrency: int) -> list[str]:
    tasks = out / "tasks.json"
    tasks.write_text(json.dumps({TASK: n}))
    return ["-m", "medvision_bm.cli", "run", "--model", "openai-compatible", "--base_url", f"{url}/v1",
            "--model_name", "bench", "--data_dir", str(data), "--tasks_list_json_path", str(tasks),
            "--results_dir", str(out / "res"), "--task_status_json_path", str(out / "status.json"),
            "--skip_env_setup", "--no_progress", "--batch_size", str(concurrency), "--max_retries", "1"]


def timed(argv: list[str], log: Path) -> tuple[float, float, int, float, float]:
    """(wall s, CPU s, exit status, launch and exit epoch s) of one fresh interpreter running ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, launch = time.perf_counter(), time.time()
    with log.open("w") as out:
        rc = subprocess.run([sys.executable, *argv], env=child_env(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                            check=False).returncode
    wall, ended = time.perf_counter() - t0, time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), rc, launch, ended


def request_window(out: Path, launch: float, ended: float) -> tuple[float, float]:
    """Seconds from launch to the first request sent, and from the last answer stored to the exit (the store's
    answer times less their latencies)."""
    sent, landed = [], []
    for path in (out / "res").glob("*/*/*/samples/*.jsonl"):
        for line in path.open():
            rec = json.loads(line)
            landed.append(rec["time"])
            sent.append(rec["time"] - rec["latency_s"])
    return (min(sent) - launch, ended - max(landed)) if sent else (float("nan"), float("nan"))


def answers_stored(out: Path) -> int:
    """Samples answered, from the run's results.json (0 when there is none)."""
    found = list((out / "res").glob("*/*/*/results.json"))
    return int(json.loads(found[0].read_text())["counts"]["answered"]) if found else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=400, help="samples (each a different slice)")
    p.add_argument("--volumes", type=int, default=4, help="volumes the samples are spread over")
    p.add_argument("--shape", type=int, nargs=3, default=(512, 512, 120), help="volume shape (axial slices last)")
    p.add_argument("--latency", type=float, default=0.05, help="server latency per request, seconds")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    p.add_argument("--pairs", type=int, default=3, help="rounds (sides rotated each round)")
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "medvision_bench_run_floor"))
    p.add_argument("--profile", default=None, help="also run the run side once more under cProfile (its main thread, "
                   "which asks; the engine and lmms-eval run elsewhere), stats to this file")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--floor", nargs=2, metavar=("URL", "DATA"), help=argparse.SUPPRESS)  # the floor child
    args = p.parse_args(argv)
    if args.floor:
        ok = asyncio.run(_floor(args.floor[0], Path(args.floor[1]), args.concurrency))
        print(f"floor: {ok} answers")
        return 0 if ok == args.n else 1
    if min(args.n, args.volumes, args.concurrency, args.pairs) < 1:
        p.error("--n, --volumes, --concurrency and --pairs must be >= 1")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data = build_data(work, args.n, args.volumes, tuple(args.shape))
    print(f"data: {data} ({time.perf_counter() - t0:.1f} s to build or find)", flush=True)
    proc, url = start_server(args.latency)
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        sides = ["run", "floor"]
        for rnd in range(args.pairs):
            order = sides[rnd % 2:] + sides[:rnd % 2]
            got: dict[str, dict[str, float]] = {}
            for side in order:
                out = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=work))
                if side == "run":
                    cmd = run_argv(url, data, out, args.n, args.concurrency)
                else:
                    cmd = [str(Path(__file__).resolve()), "--floor", url, str(data), "--concurrency",
                           str(args.concurrency), "--n", str(args.n)]
                server0 = process_cpu_s(proc.pid)
                wall, cpu, rc, launch, ended = timed(cmd, out / "log.txt")
                server = process_cpu_s(proc.pid) - server0
                stored = answers_stored(out) if side == "run" else args.n
                if rc != 0 or stored != args.n:
                    raise SystemExit(f"{side} failed (exit {rc}, {stored} of {args.n} answers); see {out}/log.txt")
                got[side] = {"wall_s": wall, "cpu_s": cpu, "server_cpu_s": server}
                if side == "run":
                    got[side]["first_request_s"], got[side]["tail_s"] = request_window(out, launch, ended)
                shutil.rmtree(out, ignore_errors=True)
            rounds.append(got)
            r, f = got["run"], got["floor"]
            print(f"round {rnd + 1} [{', '.join(order)}]: run's first request {r['first_request_s']:.2f} s after "
                  f"launch, exit {r['tail_s']:.2f} s after its last answer")
            print("  " + "  ".join(
                f"{s} wall {got[s]['wall_s']:6.2f} s CPU {got[s]['cpu_s']:6.2f} s "
                f"({1000 * got[s]['cpu_s'] / args.n:.2f} ms/sample) server {got[s]['server_cpu_s']:.2f} s"
                for s in sides) + f"  run/floor wall {r['wall_s'] / f['wall_s']:.2f} CPU "
                f"{r['cpu_s'] / f['cpu_s']:.2f}", flush=True)
        if args.profile:
            out = Path(tempfile.mkdtemp(prefix="profile-", dir=work))
            cmd = run_argv(url, data, out, args.n, args.concurrency)
            cmd = ["-m", "cProfile", "-o", str(Path(args.profile).resolve()), *cmd]
            wall, cpu, rc, _, _ = timed(cmd, out / "log.txt")
            print(f"profiled run: wall {wall:.2f} s CPU {cpu:.2f} s exit {rc}; stats in {args.profile}")
            shutil.rmtree(out, ignore_errors=True)
    finally:
        proc.terminate()
        proc.wait(10)

    def med(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in rounds)

    walls = [r["run"]["wall_s"] / r["floor"]["wall_s"] for r in rounds]
    cpus = [r["run"]["cpu_s"] / r["floor"]["cpu_s"] for r in rounds]
    print(f"N={args.n} over {args.volumes} volumes of {'x'.join(map(str, args.shape))}, latency "
          f"{args.latency * 1000:.0f} ms, {args.concurrency} in flight, {args.pairs} rounds; latency-bound ideal "
          f"{args.n * args.latency / args.concurrency:.2f} s (cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f})")
    print(f"  run's first request {med('run', 'first_request_s'):.2f} s after launch, exit "
          f"{med('run', 'tail_s'):.2f} s after its last answer (medians)")
    for side in ("run", "floor"):
        print(f"  {side:5s} median wall {med(side, 'wall_s'):6.2f} s  CPU {med(side, 'cpu_s'):6.2f} s "
              f"({1000 * med(side, 'cpu_s') / args.n:.2f} ms/sample)  server CPU {med(side, 'server_cpu_s'):.2f} s")
    print(f"  run/floor wall per round {', '.join(f'{x:.2f}' for x in walls)}; median {statistics.median(walls):.2f}")
    print(f"  run/floor CPU  per round {', '.join(f'{x:.2f}' for x in cpus)}; median {statistics.median(cpus):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "floor"},
                                               "rounds": rounds, "wall_ratio": walls, "cpu_ratio": cpus}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
