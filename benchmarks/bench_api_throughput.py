"""Throughput of the OpenAI-compatible backend against a fixed-latency local server, beside lmms-eval's own
``openai`` model in the same run.

The server (tests/fakes/provider_server.py --lean: a bare HTTP/1.1 responder that costs little CPU, standing in
for a remote server) runs in a separate process and answers every request after exactly ``--latency`` seconds.

What a real run does is the default: every request carries a new ``--size``-pixel grey CT-like slice, handed over
as a run hands it (to our API engine a grey ``L`` image, ``hooks.visual_gray``; to lmms-eval's client upstream's
RGB picture with three equal channels), so nothing can be served from an encode cache;
``--shared-images K`` reuses K slices round-robin instead (the old mode: what a cache saves). Each client runs
``--repeat`` times after a warm-up and the median run is reported.

Two ideals are printed: the latency-bound one ``N * latency / concurrency`` and the encode-bound one
``max(latency-bound, N * encode / cores)``, where ``encode`` is the time, measured in this run on one thread, to
encode one new slice the way each client does (ours: single-channel PNG at zlib level 1; lmms-eval: RGB PNG at
PIL's default level). Efficiency = ideal / measured wall (1.0 = the client adds nothing beyond the work it cannot
avoid). Client CPU is this process's CPU time (all threads) per request, image generation included (measured
alone and printed). A bare aiohttp client posting pre-built bodies is the floor any Python client reaches here.

    python benchmarks/bench_api_throughput.py                     # N=2000, 50 ms, concurrency 64, new 512-px slices
    python benchmarks/bench_api_throughput.py --shared-images 8   # 8 slices reused (the encode cache at work)
    python benchmarks/bench_api_throughput.py --processes 2      # also our client split over 2 processes
    python benchmarks/bench_api_throughput.py --skip-lmms --n 500

lmms-eval is imported here only (its import costs seconds and changes global logging), never by the package.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "tests" / "fakes" / "provider_server.py"
sys.path.insert(0, str(REPO / "tests"))

from fakes.samples import make_doc, make_view  # noqa: E402
from medvision_bm.data.docs import RunDoc  # noqa: E402
from medvision_bm.models.base import GenRequest, GenResult, GenSettings  # noqa: E402

PROMPT = ("The image is an axial CT slice; one pixel is 0.78 mm wide and 0.78 mm high. Measure the major and "
          "minor axis of the lesion in mm and answer as <answer>major, minor</answer>.")


@dataclass
class Measured:
    name: str
    n: int
    wall_s: float
    cpu_s: float
    ok: int
    runs: int = 1

    def efficiency(self, ideal_s: float) -> float:
        return ideal_s / self.wall_s


class Slices:
    """Grey CT-like slices handed over as a run hands them: to our API engine as a grey ``L`` image
    (``hooks.visual_gray``), to lmms-eval's client as upstream's picture (``RGB``, three equal channels).
    ``shared`` > 0: that many slices reused round-robin; 0: slice ``i`` is new for every ``i`` (a few base slices
    shifted by ``i`` pixels, so every image differs and compresses like a real one)."""

    def __init__(self, size: int, shared: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size - 0.5
        self.base = []
        for i in range(max(shared, 8)):
            body = (xx ** 2 + yy ** 2 < 0.2).astype(np.float32) * 120
            lesion = (((xx - 0.1 * np.sin(i)) / 0.12) ** 2 + ((yy - 0.05 * np.cos(i)) / 0.07) ** 2 < 1) * 80
            noisy = body + lesion + rng.normal(0, 6, size=(size, size))
            self.base.append(np.clip(noisy, 0, 255).astype(np.uint8))
        self.shared = shared
        self._fixed = {mode: [self._picture(g, mode) for g in self.base[:shared]] for mode in ("L", "RGB")}

    @staticmethod
    def _picture(gray: np.ndarray, mode: str) -> Image.Image:
        img = Image.fromarray(gray, "L")
        return img if mode == "L" else img.convert("RGB")

    def slice_id(self, i: int) -> int:
        return i % self.shared if self.shared else i

    def image(self, i: int, mode: str = "L") -> Image.Image:
        if self.shared:
            return self._fixed[mode][i % self.shared]
        gray = self.base[i % len(self.base)]
        return self._picture(np.roll(gray, i // len(self.base) + 1, axis=1), mode)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc; 0.0 where it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_image_ms(call: Callable[[int], object], count: int = 40) -> float:
    """Median single-thread milliseconds of ``call(i)`` over ``count`` new indices."""
    times = []
    for i in range(count):
        t0 = time.perf_counter()
        call(10_000_000 + i)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def start_server(latency: float) -> tuple[subprocess.Popen[bytes], str]:
    port_file = Path(tempfile.mkstemp(prefix="bench-port-")[1])
    port_file.write_text("")
    proc = subprocess.Popen([sys.executable, str(SERVER), "--lean", "--port", "0", "--port-file", str(port_file),
                             "--latency", str(latency)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while not port_file.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the benchmark server did not start")
        time.sleep(0.05)
    port = int(port_file.read_text())
    port_file.unlink()
    return proc, f"http://127.0.0.1:{port}"


def timed(name: str, n: int, call: Callable[[int], int], repeat: int) -> Measured:
    """The median (by wall time) of ``repeat`` runs of ``call(run)``, which returns how many answers were right."""
    runs = []
    for r in range(repeat):
        cpu0, t0 = time.process_time(), time.perf_counter()
        ok = call(r)
        runs.append(Measured(name, n, time.perf_counter() - t0, time.process_time() - cpu0, ok, repeat))
    runs.sort(key=lambda m: m.wall_s)
    return runs[len(runs) // 2]


def run_ours(url: str, slices: Slices, n: int, concurrency: int, repeat: int) -> Measured:
    from medvision_bm.models.api import build_api_backend

    gen = GenSettings(max_new_tokens=64, temperature=0.0, seed=None)
    backend = build_api_backend("openai_compatible", {"base_url": [url], "model_name": "bench", "batch_size": concurrency,
                                                      "max_retries": 1, "request_timeout": 30, "gen": gen})

    def requests(count: int, offset: int) -> list[GenRequest]:
        out = []
        for i in range(offset, offset + count):
            doc = make_doc(i, slice_idx=slices.slice_id(i))
            # the runner hands over a loader, so that only requests in flight hold pixels
            out.append(GenRequest(f"r{i}", PROMPT, RunDoc(doc, make_view(doc), data_root="/bench"), gen,
                                  image_loader=lambda i=i: [slices.image(i)]))
        return out

    try:
        backend.generate(requests(concurrency, 50_000_000), lambda r: None)  # warm-up: connections, imports

        def call(run: int) -> int:
            todo = requests(n, 0 if slices.shared else run * n)  # new slices every run unless shared
            results: list[GenResult] = []
            backend.generate(todo, results.append)
            return sum(1 for r in results if r.ok and "12.5" in (r.text or ""))

        return timed("medvision_bm openai_compatible", n, call, repeat)
    finally:
        backend.close()


def _split_child(url: str, slices: Slices, part: int, parts: int, n: int, concurrency: int, shared: bool,
                 go: Any, done: Any) -> None:
    """One process of ``run_ours_split``: its own engine, every ``parts``-th request of each run."""
    from medvision_bm.models.api import build_api_backend

    gen = GenSettings(max_new_tokens=64, temperature=0.0, seed=None)
    backend = build_api_backend("openai_compatible", {"base_url": [url], "model_name": "bench", "batch_size": concurrency,
                                                      "max_retries": 1, "request_timeout": 30, "gen": gen})

    def requests(indices: range) -> list[GenRequest]:
        out = []
        for i in indices:
            doc = make_doc(i, slice_idx=slices.slice_id(i))
            out.append(GenRequest(f"r{i}", PROMPT, RunDoc(doc, make_view(doc), data_root="/bench"), gen,
                                  image_loader=lambda i=i: [slices.image(i)]))
        return out

    try:
        backend.generate(requests(range(50_000_000 + part * 1000, 50_000_000 + part * 1000 + concurrency)),
                         lambda r: None)  # warm-up
        done.put(None)
        while (run := go.get()) is not None:
            offset = 0 if shared else run * n
            todo = requests(range(offset + part, offset + n, parts))
            results: list[GenResult] = []
            cpu0 = time.process_time()
            backend.generate(todo, results.append)
            done.put((time.process_time() - cpu0, sum(1 for r in results if r.ok and "12.5" in (r.text or ""))))
    finally:
        backend.close()


def run_ours_split(url: str, slices: Slices, n: int, concurrency: int, repeat: int, processes: int) -> Measured:
    """The same requests split over ``processes`` processes, each with its own engine and encoder threads and
    ``concurrency / processes`` requests in flight (no pixels cross processes: each loads its own slices)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    done = ctx.Queue()
    gos = [ctx.Queue() for _ in range(processes)]
    kids = [ctx.Process(target=_split_child, args=(url, slices, k, processes, n, max(1, concurrency // processes),
                                                   bool(slices.shared), gos[k], done)) for k in range(processes)]
    for kid in kids:
        kid.start()
    try:
        for _ in kids:
            done.get(timeout=120)  # every engine warmed up
        runs = []
        for r in range(repeat):
            t0 = time.perf_counter()
            for go in gos:
                go.put(r)
            outs = [done.get(timeout=600) for _ in kids]
            runs.append(Measured(f"medvision_bm x{processes} processes", n, time.perf_counter() - t0,
                                 sum(c for c, _ in outs), sum(ok for _, ok in outs), repeat))
    finally:
        for go in gos:
            go.put(None)
        for kid in kids:
            kid.join(30)
    runs.sort(key=lambda m: m.wall_s)
    return runs[len(runs) // 2]


def run_raw(url: str, slices: Slices, n: int, concurrency: int, repeat: int) -> Measured:
    """The floor for any Python client here: bare aiohttp posting pre-built bodies, no retries, no bookkeeping."""
    import asyncio
    import base64
    import io

    import aiohttp

    bodies = []
    for i in range(8):
        buf = io.BytesIO()
        slices.image(i).save(buf, format="PNG", compress_level=1)
        url_data = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
        bodies.append(json.dumps({"model": "bench", "max_tokens": 64, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url_data}}, {"type": "text", "text": PROMPT}]}]}).encode())

    async def batch(session: aiohttp.ClientSession, count: int) -> int:
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> int:
            async with gate, session.post(url + "/v1/chat/completions", data=bodies[i % len(bodies)],
                                          headers={"Content-Type": "application/json"}) as resp:
                return int("12.5" in json.loads(await resp.read())["choices"][0]["message"]["content"])

        return sum(await asyncio.gather(*(one(i) for i in range(count))))

    async def main() -> Measured:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            await batch(session, concurrency)
            runs = []
            for _ in range(repeat):
                cpu0, t0 = time.process_time(), time.perf_counter()
                ok = await batch(session, n)
                runs.append(Measured("bare aiohttp, pre-built (floor)", n, time.perf_counter() - t0,
                                     time.process_time() - cpu0, ok, repeat))
            runs.sort(key=lambda m: m.wall_s)
            return runs[len(runs) // 2]

    return asyncio.run(main())


def run_lmms(url: str, slices: Slices, n: int, concurrency: int, repeat: int) -> Measured:
    os.environ.setdefault("OPENAI_API_KEY", "bench-not-a-key")
    from lmms_eval.api.instance import Instance
    from lmms_eval.models.simple.openai import OpenAICompatible

    model = OpenAICompatible(model_version="bench", base_url=url + "/v1", api_key="bench-not-a-key",
                             num_concurrent=concurrency, max_retries=1, timeout=30)
    docs = {i: {"id": i} for i in range(n * (repeat + 1) + concurrency)}
    model.task_dict = {"bench": {"test": docs}}

    def instances(count: int, offset: int) -> list[Instance]:
        gen_kwargs = {"max_new_tokens": 64, "temperature": 0}
        return [Instance("generate_until", (PROMPT, gen_kwargs, lambda doc: [slices.image(doc["id"], "RGB")],
                                            i, "bench", "test"), idx=0,
                         metadata={"task": "bench", "doc_id": i, "repeats": 1})
                for i in range(offset, offset + count)]

    model.generate_until(instances(concurrency, n * repeat))  # warm-up

    def call(run: int) -> int:
        outs = model.generate_until(instances(n, 0 if slices.shared else run * n))
        return sum(1 for o in outs if "12.5" in getattr(o, "text", o))

    return timed("lmms-eval 0.7.3 openai", n, call, repeat)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="requests per client")
    p.add_argument("--latency", type=float, default=0.05, help="server latency per request, seconds")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    p.add_argument("--shared-images", type=int, default=0,
                   help="reuse this many slices round-robin (0, the default: a new slice per request)")
    p.add_argument("--size", type=int, default=512, help="slice size in pixels (square)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per client; the median is reported")
    p.add_argument("--skip-lmms", action="store_true", help="measure our backend only")
    p.add_argument("--skip-raw", action="store_true", help="leave out the bare-aiohttp floor")
    p.add_argument("--processes", type=int, default=1,
                   help="also time our client split over this many processes, each its own engine (1: not timed)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.n < 1 or args.concurrency < 1 or args.repeat < 1 or args.size < 8 or args.shared_images < 0 \
            or args.processes < 1:
        p.error("--n, --concurrency, --repeat and --processes must be >= 1, --size >= 8, --shared-images >= 0")

    from medvision_bm.models.api.images import encode_image

    slices = Slices(args.size, args.shared_images)
    cores = os.cpu_count() or 1
    gen_ms = per_image_ms(slices.image) if not args.shared_images else 0.0  # the grey picture our engine gets
    gen_rgb_ms = per_image_ms(lambda i: slices.image(i, "RGB")) if not args.shared_images else 0.0  # lmms-eval's

    def lmms_encode(i: int) -> None:  # what lmms-eval's openai model does per image: RGB PNG, PIL's default level
        import base64
        import io
        buf = io.BytesIO()
        slices.image(i, "RGB").save(buf, format="PNG")
        base64.b64encode(buf.getvalue())

    enc_ours_ms = per_image_ms(lambda i: encode_image(slices.image(i), "png")) - gen_ms
    enc_lmms_ms = per_image_ms(lmms_encode) - gen_rgb_ms
    latency_ideal = args.n * args.latency / args.concurrency

    def encode_ideal(encode_ms: float, make_ms: float) -> float:
        if args.shared_images:
            return latency_ideal
        return max(latency_ideal, args.n * (encode_ms + make_ms) / 1000 / cores)

    proc, url = start_server(args.latency)
    rows: list[tuple[Measured, float]] = []
    server_ms: dict[str, float] = {}  # client -> the server process's CPU per request while that client ran

    def with_server_cpu(run: Callable[..., Measured], ideal: float) -> None:
        before = process_cpu_s(proc.pid)
        m = run(url, slices, args.n, args.concurrency, args.repeat)
        asked = args.n * args.repeat + args.concurrency  # the timed runs and the warm-up
        server_ms[m.name] = 1000 * (process_cpu_s(proc.pid) - before) / asked
        rows.append((m, ideal))

    try:
        with_server_cpu(run_ours, encode_ideal(enc_ours_ms, gen_ms))
        if args.processes > 1:
            with_server_cpu(lambda *a: run_ours_split(*a, processes=args.processes), encode_ideal(enc_ours_ms, gen_ms))
        if not args.skip_raw:
            with_server_cpu(run_raw, latency_ideal)
        if not args.skip_lmms:
            with_server_cpu(run_lmms, encode_ideal(enc_lmms_ms, gen_rgb_ms))
    finally:
        proc.terminate()
        proc.wait(10)

    load = os.getloadavg()[0]
    images = f"{args.shared_images} shared" if args.shared_images else "a new one per request"
    print(f"N={args.n} latency={args.latency * 1000:.0f} ms concurrency={args.concurrency} "
          f"images: {args.size}px, {images}  median of {args.repeat}  (cores: {cores}, load average {load:.1f})")
    print(f"one thread, per new image: generation {gen_ms:.1f} ms grey, {gen_rgb_ms:.1f} ms RGB; encode ours "
          f"{enc_ours_ms:.1f} ms (single-channel PNG, zlib 1), lmms-eval {enc_lmms_ms:.1f} ms (RGB PNG, default level)")
    print(f"latency-bound ideal {latency_ideal:.2f} s")
    print(f"{'client':34s} {'wall s':>7s} {'ideal s':>7s} {'eff.':>6s} {'eff. vs latency':>15s} "
          f"{'CPU ms/req':>10s} {'server':>7s} {'CPU floor s':>11s} {'ok':>6s}")
    figures: dict[str, object] = {"gen_ms": gen_ms, "gen_rgb_ms": gen_rgb_ms, "encode_ours_ms": enc_ours_ms, "encode_lmms_ms": enc_lmms_ms,
                                  "latency_ideal_s": latency_ideal}
    for r, ideal in rows:
        # what the cores must do whatever the scheduling: this client's CPU and the local server's, over the cores
        floor = max(latency_ideal, r.n * (r.cpu_s / r.n + server_ms[r.name] / 1000) / cores)
        print(f"{r.name:34s} {r.wall_s:7.2f} {ideal:7.2f} {r.efficiency(ideal):6.2f} "
              f"{r.efficiency(latency_ideal):15.3f} {1000 * r.cpu_s / r.n:10.2f} {server_ms[r.name]:7.2f} "
              f"{floor:11.2f} {r.ok:6d}")
        figures[r.name] = {"wall_s": r.wall_s, "ideal_s": ideal, "efficiency": r.efficiency(ideal),
                           "efficiency_vs_latency": r.efficiency(latency_ideal),
                           "cpu_ms_per_request": 1000 * r.cpu_s / r.n, "server_cpu_ms_per_request": server_ms[r.name],
                           "cpu_floor_s": floor, "ok": r.ok}
    print("server: the local server process's CPU per request; CPU floor: max(latency-bound ideal, N x (client + "
          "server CPU per request) / cores), the wall no scheduling can beat on this machine, the server sharing "
          "its cores")
    lmms = [r for r, _ in rows if r.name.startswith("lmms-eval")]
    if lmms:
        ratio = lmms[0].wall_s / rows[0][0].wall_s  # same N, same latency-bound ideal: the ratio of efficiencies
        figures["ratio"] = ratio
        print(f"efficiency ours / lmms-eval (against the same latency-bound ideal): {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
