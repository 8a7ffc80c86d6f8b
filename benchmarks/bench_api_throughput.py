"""Throughput of the OpenAI-compatible backend against a fixed-latency local server, beside lmms-eval's own
``openai`` model in the same run.

The server (tests/fakes/provider_server.py --lean: a bare HTTP/1.1 responder that costs little CPU, standing in
for a remote server) runs in a separate process and answers every request after exactly
``--latency`` seconds, so with ``--concurrency`` requests in flight the ideal wall time is
``N * latency / concurrency``. Efficiency = ideal / measured wall time (1.0 = the client adds nothing). Client CPU
is this process's CPU time (all threads) per request. Both clients send the same images (``--images`` distinct
slices of ``--size`` pixels, reused round-robin over the N requests) and the same prompt. Each client runs
``--repeat`` times after a warm-up and its best run is reported (the machine is shared; the best run is the one
least disturbed by other work). A bare aiohttp client posting pre-built bodies is measured too: the floor any
Python client can reach on this machine, next to which our figure should be read.

    python benchmarks/bench_api_throughput.py                     # N=2000, 50 ms, concurrency 64
    python benchmarks/bench_api_throughput.py --skip-lmms --n 500

lmms-eval is imported here only (its import costs seconds and changes global logging), never by the package.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

    def efficiency(self, latency: float, concurrency: int) -> float:
        return (self.n * latency / concurrency) / self.wall_s


def slice_images(count: int, size: int, seed: int = 0) -> list[Image.Image]:
    """CT-like slices: a smooth body disc, an ellipse 'lesion' and mild noise (PNGs of realistic size)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size - 0.5
    out = []
    for i in range(count):
        body = (xx ** 2 + yy ** 2 < 0.2).astype(np.float32) * 120
        lesion = (((xx - 0.1 * np.sin(i)) / 0.12) ** 2 + ((yy - 0.05 * np.cos(i)) / 0.07) ** 2 < 1) * 80
        noisy = body + lesion + rng.normal(0, 6, size=(size, size))
        gray = np.clip(noisy, 0, 255).astype(np.uint8)
        out.append(Image.fromarray(np.stack([gray] * 3, axis=-1), "RGB"))
    return out


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


def timed(name: str, n: int, call: Callable[[], int], repeat: int) -> Measured:
    """The best (shortest wall time) of ``repeat`` runs of ``call``, which returns how many answers were right."""
    best: Measured | None = None
    for _ in range(repeat):
        cpu0, t0 = time.process_time(), time.perf_counter()
        ok = call()
        run = Measured(name, n, time.perf_counter() - t0, time.process_time() - cpu0, ok)
        if best is None or run.wall_s < best.wall_s:
            best = run
    assert best is not None
    return best


def run_ours(url: str, images: list[Image.Image], n: int, concurrency: int, repeat: int) -> Measured:
    from medvision_bm.models.api import build_api_backend

    gen = GenSettings(max_new_tokens=64, temperature=0.0, seed=None)
    backend = build_api_backend("openai_compatible", {"base_url": [url], "model_name": "bench", "batch_size": concurrency,
                                                      "max_retries": 1, "request_timeout": 30, "gen": gen})

    def requests(count: int, offset: int) -> list[GenRequest]:
        out = []
        for i in range(count):
            k = (offset + i) % len(images)
            doc = make_doc(offset + i, slice_idx=k)
            out.append(GenRequest(f"r{offset + i}", PROMPT, RunDoc(doc, make_view(doc), data_root="/bench"), gen,
                                  images=[images[k]]))
        return out

    try:
        backend.generate(requests(concurrency, 10 * n), lambda r: None)  # warm-up: connections, imports

        todo = requests(n, 0)  # built outside the timing; images are already cached from the warm-up

        def call() -> int:
            results: list[GenResult] = []
            backend.generate(todo, results.append)
            return sum(1 for r in results if r.ok and "12.5" in (r.text or ""))

        return timed("medvision_bm openai_compatible", n, call, repeat)
    finally:
        backend.close()


def run_raw(url: str, images: list[Image.Image], n: int, concurrency: int, repeat: int) -> Measured:
    """The floor for any Python client here: bare aiohttp posting pre-built bodies, no retries, no bookkeeping."""
    import asyncio
    import base64
    import io

    import aiohttp

    bodies = []
    for img in images:
        buf = io.BytesIO()
        img.save(buf, format="PNG")
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
            best: Measured | None = None
            for _ in range(repeat):
                cpu0, t0 = time.process_time(), time.perf_counter()
                ok = await batch(session, n)
                run = Measured("bare aiohttp (floor)", n, time.perf_counter() - t0, time.process_time() - cpu0, ok)
                best = run if best is None or run.wall_s < best.wall_s else best
            assert best is not None
            return best

    return asyncio.run(main())


def run_lmms(url: str, images: list[Image.Image], n: int, concurrency: int, repeat: int) -> Measured:
    os.environ.setdefault("OPENAI_API_KEY", "bench-not-a-key")
    from lmms_eval.api.instance import Instance
    from lmms_eval.models.simple.openai import OpenAICompatible

    model = OpenAICompatible(model_version="bench", base_url=url + "/v1", api_key="bench-not-a-key",
                             num_concurrent=concurrency, max_retries=1, timeout=30)
    docs = {i: {"id": i} for i in range(n + concurrency)}
    model.task_dict = {"bench": {"test": docs}}

    def instances(count: int, offset: int) -> list[Instance]:
        gen_kwargs = {"max_new_tokens": 64, "temperature": 0}
        return [Instance("generate_until", (PROMPT, gen_kwargs, lambda doc: [images[doc["id"] % len(images)]],
                                            offset + i, "bench", "test"), idx=0,
                         metadata={"task": "bench", "doc_id": offset + i, "repeats": 1})
                for i in range(count)]

    model.generate_until(instances(concurrency, n))  # warm-up

    todo = instances(n, 0)

    def call() -> int:
        outs = model.generate_until(todo)
        return sum(1 for o in outs if "12.5" in getattr(o, "text", o))

    return timed("lmms-eval 0.7.3 openai", n, call, repeat)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="requests per client")
    p.add_argument("--latency", type=float, default=0.05, help="server latency per request, seconds")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    p.add_argument("--images", type=int, default=8, help="distinct slices, reused round-robin")
    p.add_argument("--size", type=int, default=256, help="slice size in pixels (square)")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per client; the best is reported")
    p.add_argument("--skip-lmms", action="store_true", help="measure our backend only")
    p.add_argument("--skip-raw", action="store_true", help="leave out the bare-aiohttp floor")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)

    images = slice_images(args.images, args.size)
    proc, url = start_server(args.latency)
    rows: list[Measured] = []
    try:
        rows.append(run_ours(url, images, args.n, args.concurrency, args.repeat))
        if not args.skip_raw:
            rows.append(run_raw(url, images, args.n, args.concurrency, args.repeat))
        if not args.skip_lmms:
            rows.append(run_lmms(url, images, args.n, args.concurrency, args.repeat))
    finally:
        proc.terminate()
        proc.wait(10)

    ideal = args.n * args.latency / args.concurrency
    load = os.getloadavg()[0]
    print(f"N={args.n} latency={args.latency * 1000:.0f} ms concurrency={args.concurrency} "
          f"images={args.images}x{args.size}px  ideal wall {ideal:.2f} s  best of {args.repeat}  "
          f"(cores: {os.cpu_count()}, load average {load:.1f})")
    print(f"{'client':34s} {'wall s':>7s} {'eff.':>6s} {'CPU ms/req':>10s} {'ok':>6s}")
    for r in rows:
        print(f"{r.name:34s} {r.wall_s:7.2f} {r.efficiency(args.latency, args.concurrency):6.2f} "
              f"{1000 * r.cpu_s / r.n:10.2f} {r.ok:6d}")
    figures = {r.name: {"wall_s": r.wall_s, "efficiency": r.efficiency(args.latency, args.concurrency),
                        "cpu_ms_per_request": 1000 * r.cpu_s / r.n, "ok": r.ok} for r in rows}
    lmms = [r for r in rows if r.name.startswith("lmms-eval")]
    if lmms:
        ratio = rows[0].efficiency(args.latency, args.concurrency) / lmms[0].efficiency(args.latency,
                                                                                         args.concurrency)
        figures["ratio"] = ratio
        print(f"ratio ours / lmms-eval: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
