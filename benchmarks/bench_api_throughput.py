"""Throughput of the OpenAI-compatible backend against a fixed-latency local server, beside the bare-aiohttp floor and
lmms-eval's own ``openai`` model, the sides interleaved in the same run.

The server (tests/fakes/provider_server.py --lean: a bare HTTP/1.1 responder that costs little CPU, standing in
for a remote server) runs in a separate process and answers every request after exactly ``--latency`` seconds.

Sides (each set up and warmed once, then run once per round, in an order rotated each round, for ``--pairs``
rounds; every figure is printed round by round, then the medians over the rounds):

* ``ours``: what a real run does. Every request carries a new ``--size``-pixel grey CT-like slice, handed over as a
  run hands it (a grey ``L`` image, ``hooks.visual_gray``), so nothing is served from the encode cache;
  ``--shared-images K`` reuses K slices round-robin instead (what the cache saves).
* ``pre``: our client with the same pre-encoded images as the floor: K slices (8, or ``--shared-images``) that its
  encode cache holds from the warm-up, so a round encodes nothing (printed: images encoded in the round).
  With ``--shared-images`` the ``ours`` side is this already and ``pre`` is not run separately.
* ``floor``: bare aiohttp posting pre-built bodies whose image is our encoder's output for those K slices (the same
  bytes ``pre`` sends); no retries, no bookkeeping: the floor any Python client reaches here.
* ``lmms``: lmms-eval 0.7.3's ``openai`` model, handed upstream's RGB picture (three equal channels) of a new slice
  per request, as it gets them in a run (``--skip-lmms``: left out).
* ``split``: ours split over ``--processes`` processes, each its own engine (only with ``--processes`` > 1).
* ``stored`` and ``scored`` (``--scored``): ours with every answer appended to a sample store as a run's
  ``on_result`` does; ``scored`` also hands each stored answer to the run's score checkpoints (scored in their
  thread and persisted, ``score.checkpoint``), so ``scored/stored`` is what scoring as the answers land costs a live
  run (the last checkpoint written and its thread joined inside the timed span).

The headline ratio ``ours/floor`` is ``pre`` over ``floor``: the client's cost with the image hand-over taken out by
giving both sides the same pre-encoded images (rather than subtracting a separately timed encode). The hand-over is
printed apart: the encode time of one new slice measured alone on one thread (ours: single-channel PNG, lmms-eval: RGB
PNG at PIL's default level) and the ratio ``ours (new slices)/floor``. ``lmms/ours`` compares the two clients doing
the whole hand-over of a real run (each its own way of encoding a new slice).

Two ideals are printed: the latency-bound one ``N * latency / concurrency`` and the encode-bound one
``max(latency-bound, N * encode / cores)``. Efficiency = ideal / measured wall (1.0 = the client adds nothing beyond
the work it cannot avoid). Client CPU is this process's CPU time (all threads; the split side: its processes') per
request, image generation included (measured alone and printed); server: the server process's CPU per request.

    python benchmarks/bench_api_throughput.py                     # N=2000, 50 ms, concurrency 64, new 512-px slices
    python benchmarks/bench_api_throughput.py --shared-images 8   # 8 slices reused (the encode cache at work)
    python benchmarks/bench_api_throughput.py --processes 2      # also our client split over 2 processes
    python benchmarks/bench_api_throughput.py --skip-lmms --n 500 --pairs 5

lmms-eval is imported here only (its import costs seconds and changes global logging), never by the package.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from _lean_server import process_cpu_s, start_server

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fakes.samples import make_doc, make_view  # noqa: E402
from medvision_bm.data.docs import RunDoc  # noqa: E402
from medvision_bm.models.base import GenRequest, GenResult, GenSettings  # noqa: E402

PROMPT = ("The image is an axial CT slice; one pixel is 0.78 mm wide and 0.78 mm high. Measure the major and "
          "minor axis of the lesion in mm and answer as <answer>major, minor</answer>.")
PRE_ENCODED = 8  # slices of the pre-encoded sides when --shared-images is not given


@dataclass
class Measured:
    """One run of one side: ``n`` requests."""

    wall_s: float
    cpu_s: float
    ok: int
    encoded: int = -1  # images our engine encoded during the run (-1: not ours)
    server_s: float = 0.0


@dataclass
class Side:
    key: str
    name: str
    run: Callable[[int], Measured]  # round -> one timed run
    close: Callable[[], None]
    ideal_s: float
    runs: list[Measured] = field(default_factory=list)


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


def per_image_ms(call: Callable[[int], object], count: int = 40) -> float:
    """Median single-thread milliseconds of ``call(i)`` over ``count`` new indices."""
    times = []
    for i in range(count):
        t0 = time.perf_counter()
        call(10_000_000 + i)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def timed_once(call: Callable[[], int]) -> Measured:
    """One run of ``call()``, which returns how many answers were right: wall and this process's CPU."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    ok = call()
    return Measured(time.perf_counter() - t0, time.process_time() - cpu0, ok)


def our_backend(url: str, concurrency: int) -> Any:
    from medvision_bm.models.api import build_api_backend

    gen = GenSettings(max_new_tokens=64, temperature=0.0, seed=None)
    return build_api_backend("openai_compatible", {"base_url": [url], "model_name": "bench", "batch_size": concurrency,
                                                   "max_retries": 1, "request_timeout": 30, "gen": gen})


def our_requests(slices: Slices, indices: range) -> list[GenRequest]:
    """Requests as the runner makes them: a loader per request, so that only requests in flight hold pixels."""
    gen = GenSettings(max_new_tokens=64, temperature=0.0, seed=None)
    out = []
    for i in indices:
        doc = make_doc(i, slice_idx=slices.slice_id(i))
        out.append(GenRequest(f"r{i}", PROMPT, RunDoc(doc, make_view(doc), data_root="/bench"), gen,
                              image_loader=lambda i=i: [slices.image(i)]))
    return out


def count_ok(results: list[GenResult]) -> int:
    return sum(1 for r in results if r.ok and "12.5" in (r.text or ""))


def side_ours(key: str, name: str, url: str, slices: Slices, n: int, concurrency: int, ideal: float) -> Side:
    backend = our_backend(url, concurrency)
    backend.generate(our_requests(slices, range(50_000_000, 50_000_000 + concurrency)), lambda r: None)  # warm-up

    def run(rnd: int) -> Measured:
        offset = 0 if slices.shared else rnd * n  # new slices every round unless shared
        todo = our_requests(slices, range(offset, offset + n))
        before = backend.stats().images_encoded
        results: list[GenResult] = []
        m = timed_once(lambda: (backend.generate(todo, results.append), count_ok(results))[1])
        m.encoded = backend.stats().images_encoded - before
        return m

    return Side(key, name, run, backend.close, ideal)


def side_store(key: str, url: str, slices: Slices, n: int, concurrency: int, ideal: float, scored: bool) -> Side:
    """Ours, every answer stored as a run stores it (and with ``scored``, scored as it lands and persisted)."""
    from medvision_bm.score.checkpoint import ScoreCheckpoint
    from medvision_bm.store.layout import StoreLayout
    from medvision_bm.store.samples import SampleStore
    from medvision_bm.store.signature import doc_sha

    backend = our_backend(url, concurrency)
    backend.generate(our_requests(slices, range(60_000_000, 60_000_000 + concurrency)), lambda r: None)  # warm-up
    tmp = tempfile.mkdtemp(prefix=f"bench-{key}-")

    def run(rnd: int) -> Measured:
        offset = 0 if slices.shared else rnd * n
        todo = our_requests(slices, range(offset, offset + n))
        by_key = {r.key: r.rundoc for r in todo}
        store = SampleStore(Path(tmp) / f"round{rnd}", "bench-signature")
        store.init({"task_version": "bench", "plan_version": "bench"})
        results: list[GenResult] = []

        def call() -> int:
            writer = store.writer()
            sha_of = {k: doc_sha(rd.doc, rd.view) for k, rd in by_key.items()}
            check = ScoreCheckpoint(StoreLayout(store.folder), writer.name, "TL", "current") if scored else None

            def on_result(res: GenResult) -> None:
                rd = by_key[res.key]
                rec = writer.append(res, index=rd.doc.index, doc_sha=sha_of[res.key])
                if check is not None:
                    check.add(rd, sha_of[res.key], rec)
                results.append(res)

            backend.generate(todo, on_result)
            writer.close()
            if check is not None:
                check.close()
                assert check.scored == sum(1 for r in results if r.ok), "not every answer was scored"
            return count_ok(results)

        return timed_once(call)

    return Side(key, f"ours, answers stored{', scored as they land' if scored else ''}", run,
                lambda: (backend.close(), shutil.rmtree(tmp, ignore_errors=True)), ideal)


def _split_child(url: str, slices: Slices, part: int, parts: int, n: int, concurrency: int, go: Any,
                 done: Any) -> None:
    """One process of ``side_split``: its own engine, every ``parts``-th request of each round."""
    backend = our_backend(url, concurrency)
    try:
        warm = 50_000_000 + part * 1000
        backend.generate(our_requests(slices, range(warm, warm + concurrency)), lambda r: None)
        done.put(None)
        while (rnd := go.get()) is not None:
            offset = 0 if slices.shared else rnd * n
            todo = our_requests(slices, range(offset + part, offset + n, parts))
            results: list[GenResult] = []
            cpu0 = time.process_time()
            backend.generate(todo, results.append)
            done.put((time.process_time() - cpu0, count_ok(results)))
    finally:
        backend.close()


def side_split(url: str, slices: Slices, n: int, concurrency: int, processes: int, ideal: float) -> Side:
    """The same requests split over ``processes`` processes, each with its own engine and encoder threads and
    ``concurrency / processes`` requests in flight (no pixels cross processes: each loads its own slices). Set up
    before any other side: the children are forked, and a fork must not copy another engine's threads."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    done = ctx.Queue()
    gos = [ctx.Queue() for _ in range(processes)]
    kids = [ctx.Process(target=_split_child, args=(url, slices, k, processes, n, max(1, concurrency // processes),
                                                   gos[k], done)) for k in range(processes)]
    for kid in kids:
        kid.start()
    for _ in kids:
        done.get(timeout=120)  # every engine warmed up

    def run(rnd: int) -> Measured:
        t0 = time.perf_counter()
        for go in gos:
            go.put(rnd)
        outs = [done.get(timeout=600) for _ in kids]
        return Measured(time.perf_counter() - t0, sum(c for c, _ in outs), sum(ok for _, ok in outs))

    def close() -> None:
        for go in gos:
            go.put(None)
        for kid in kids:
            kid.join(30)

    return Side("split", f"medvision_bm x{processes} processes", run, close, ideal)


def side_floor(url: str, pre: Slices, n: int, concurrency: int, ideal: float) -> Side:
    """Bare aiohttp posting pre-built bodies (our encoder's bytes for ``pre``'s slices), on one event loop kept
    across rounds; no retries, no bookkeeping."""
    import asyncio

    import aiohttp

    from medvision_bm.models.api.images import encode_image

    bodies = []
    for i in range(pre.shared):
        url_data = encode_image(pre.image(i), "png").data_url
        bodies.append(json.dumps({"model": "bench", "max_tokens": 64, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url_data}}, {"type": "text", "text": PROMPT}]}]}).encode())

    async def batch(session: aiohttp.ClientSession, count: int) -> int:
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> int:
            async with gate, session.post(url + "/v1/chat/completions", data=bodies[i % len(bodies)],
                                          headers={"Content-Type": "application/json"}) as resp:
                return int("12.5" in json.loads(await resp.read())["choices"][0]["message"]["content"])

        return sum(await asyncio.gather(*(one(i) for i in range(count))))

    async def open_session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    loop = asyncio.new_event_loop()
    session = loop.run_until_complete(open_session())
    loop.run_until_complete(batch(session, concurrency))  # warm-up: connections

    def close() -> None:
        loop.run_until_complete(session.close())
        loop.close()

    return Side("floor", "bare aiohttp, pre-built (floor)", lambda rnd: timed_once(
        lambda: loop.run_until_complete(batch(session, n))), close, ideal)


def side_lmms(url: str, slices: Slices, n: int, concurrency: int, pairs: int, ideal: float) -> Side:
    os.environ.setdefault("OPENAI_API_KEY", "bench-not-a-key")
    from lmms_eval.api.instance import Instance
    from lmms_eval.models.simple.openai import OpenAICompatible

    model = OpenAICompatible(model_version="bench", base_url=url + "/v1", api_key="bench-not-a-key",
                             num_concurrent=concurrency, max_retries=1, timeout=30)
    model.task_dict = {"bench": {"test": {i: {"id": i} for i in range(n * (pairs + 1) + concurrency)}}}

    def instances(count: int, offset: int) -> list[Instance]:
        gen_kwargs = {"max_new_tokens": 64, "temperature": 0}
        return [Instance("generate_until", (PROMPT, gen_kwargs, lambda doc: [slices.image(doc["id"], "RGB")],
                                            i, "bench", "test"), idx=0,
                         metadata={"task": "bench", "doc_id": i, "repeats": 1})
                for i in range(offset, offset + count)]

    model.generate_until(instances(concurrency, n * pairs))  # warm-up

    def run(rnd: int) -> Measured:
        todo = instances(n, 0 if slices.shared else rnd * n)
        return timed_once(lambda: sum(1 for o in model.generate_until(todo) if "12.5" in getattr(o, "text", o)))

    return Side("lmms", "lmms-eval 0.7.3 openai", run, lambda: None, ideal)


def med(values: list[float]) -> float:
    return statistics.median(values)


def ratio_lines(by: dict[str, Side]) -> list[tuple[str, str, str, str]]:
    """(short label, long label, numerator key, denominator key) of the ratios the sides present allow."""
    head = "pre" if "pre" in by else "ours"
    out = [("ours/floor", "ours/floor (same pre-encoded images: the client's cost)", head, "floor")]
    if head != "ours":
        out.append(("ours-new/floor", "ours-new/floor (new slices: the image hand-over included)", "ours", "floor"))
    out += [("lmms/ours", "lmms/ours (each its own hand-over of new slices)", "lmms", "ours"),
            ("split/ours", "split/ours (our client over processes)", "split", "ours"),
            ("scored/stored", "scored/stored (scoring as the answers land, off the asking path)", "scored", "stored")]
    return [r for r in out if r[2] in by and r[3] in by]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000, help="requests per side per round")
    p.add_argument("--latency", type=float, default=0.05, help="server latency per request, seconds")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight")
    p.add_argument("--shared-images", type=int, default=0,
                   help="reuse this many slices round-robin (0, the default: a new slice per request)")
    p.add_argument("--size", type=int, default=512, help="slice size in pixels (square)")
    p.add_argument("--pairs", type=int, default=3, help="rounds of interleaved sides (at least 3 for figures)")
    p.add_argument("--skip-lmms", action="store_true", help="leave out lmms-eval's client")
    p.add_argument("--scored", action="store_true",
                   help="also the sides that store every answer, and store and score it as it lands")
    p.add_argument("--processes", type=int, default=1,
                   help="also time our client split over this many processes, each its own engine (1: not timed)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    if args.n < 1 or args.concurrency < 1 or args.pairs < 1 or args.size < 8 or args.shared_images < 0 \
            or args.processes < 1:
        p.error("--n, --concurrency, --pairs and --processes must be >= 1, --size >= 8, --shared-images >= 0")

    from medvision_bm.models.api.images import encode_image

    slices = Slices(args.size, args.shared_images)
    pre = slices if args.shared_images else Slices(args.size, PRE_ENCODED)
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
    sides: list[Side] = []
    try:
        if args.processes > 1:  # first: its children are forked before any other engine starts threads
            sides.append(side_split(url, slices, args.n, args.concurrency, args.processes,
                                    encode_ideal(enc_ours_ms, gen_ms)))
        sides.append(side_ours("ours", "medvision_bm openai_compatible", url, slices, args.n, args.concurrency,
                               encode_ideal(enc_ours_ms, gen_ms)))
        if pre is not slices:
            sides.append(side_ours("pre", "medvision_bm, pre-encoded images", url, pre, args.n, args.concurrency,
                                   latency_ideal))
        sides.append(side_floor(url, pre, args.n, args.concurrency, latency_ideal))
        if args.scored:
            for key in ("stored", "scored"):
                sides.append(side_store(key, url, slices, args.n, args.concurrency, encode_ideal(enc_ours_ms, gen_ms),
                                        key == "scored"))
        if not args.skip_lmms:
            sides.append(side_lmms(url, slices, args.n, args.concurrency, args.pairs,
                                   encode_ideal(enc_lmms_ms, gen_rgb_ms)))
        by = {s.key: s for s in sides}
        ratios = ratio_lines(by)
        load = os.getloadavg()[0]
        images = f"{args.shared_images} shared" if args.shared_images else "a new one per request"
        print(f"N={args.n} latency={args.latency * 1000:.0f} ms concurrency={args.concurrency} images: "
              f"{args.size}px, {images}; pre-encoded sides: {pre.shared} slices; {args.pairs} rounds "
              f"(cores: {cores}, load average {load:.1f})")
        print(f"image hand-over, one thread, per new image: generation {gen_ms:.1f} ms grey, {gen_rgb_ms:.1f} ms RGB; "
              f"encode ours {enc_ours_ms:.1f} ms (single-channel PNG), lmms-eval {enc_lmms_ms:.1f} ms (RGB PNG, "
              f"default level)")
        print(f"latency-bound ideal {latency_ideal:.2f} s", flush=True)
        for rnd in range(args.pairs):
            order = sides[rnd % len(sides):] + sides[:rnd % len(sides)]
            print(f"round {rnd + 1} [{', '.join(s.key for s in order)}]:")
            for s in order:
                before = process_cpu_s(proc.pid)
                m = s.run(rnd)
                m.server_s = process_cpu_s(proc.pid) - before
                s.runs.append(m)
                enc = f"  encoded {m.encoded}" if m.encoded >= 0 else ""
                print(f"  {s.key:6s} wall {m.wall_s:6.2f} s  client CPU {1000 * m.cpu_s / args.n:7.2f} ms/req  "
                      f"server {1000 * m.server_s / args.n:5.2f} ms/req  ok {m.ok}{enc}")
            print("  ratios: " + "  ".join(
                f"{short} wall {by[num].runs[-1].wall_s / by[den].runs[-1].wall_s:.2f} CPU "
                f"{by[num].runs[-1].cpu_s / max(by[den].runs[-1].cpu_s, 1e-9):.2f}" for short, _, num, den in ratios),
                flush=True)
    finally:
        for s in sides:
            s.close()
        proc.terminate()
        proc.wait(10)

    print(f"median over {args.pairs} rounds:")
    print(f"  {'side':6s} {'client':34s} {'wall s':>7s} {'ideal s':>7s} {'eff.':>6s} {'eff. vs latency':>15s} "
          f"{'CPU ms/req':>10s} {'server':>7s} {'CPU floor s':>11s} {'ok':>6s}")
    figures: dict[str, Any] = {"gen_ms": gen_ms, "gen_rgb_ms": gen_rgb_ms, "encode_ours_ms": enc_ours_ms,
                               "encode_lmms_ms": enc_lmms_ms, "latency_ideal_s": latency_ideal, "pairs": args.pairs}
    for s in sides:
        wall = med([m.wall_s for m in s.runs])
        cpu_ms = 1000 * med([m.cpu_s for m in s.runs]) / args.n
        server_ms = 1000 * med([m.server_s for m in s.runs]) / args.n
        # what the cores must do whatever the scheduling: this client's CPU and the local server's, over the cores
        floor = max(latency_ideal, args.n * (cpu_ms + server_ms) / 1000 / cores)
        ok = int(med([m.ok for m in s.runs]))
        print(f"  {s.key:6s} {s.name:34s} {wall:7.2f} {s.ideal_s:7.2f} {s.ideal_s / wall:6.2f} "
              f"{latency_ideal / wall:15.3f} {cpu_ms:10.2f} {server_ms:7.2f} {floor:11.2f} {ok:6d}")
        figures[s.key] = {"name": s.name, "wall_s": wall, "ideal_s": s.ideal_s, "efficiency": s.ideal_s / wall,
                          "efficiency_vs_latency": latency_ideal / wall, "cpu_ms_per_request": cpu_ms,
                          "server_cpu_ms_per_request": server_ms, "cpu_floor_s": floor, "ok": ok,
                          "rounds": [vars(m) for m in s.runs]}
    print("  server: the local server process's CPU per request; CPU floor: max(latency-bound ideal, N x (client + "
          "server CPU per request) / cores), the wall no scheduling can beat on this machine, the server sharing "
          "its cores")
    figures["ratios"] = {}
    for short, label, num, den in ratios:
        walls = [a.wall_s / b.wall_s for a, b in zip(by[num].runs, by[den].runs, strict=True)]
        cpus = [a.cpu_s / max(b.cpu_s, 1e-9) for a, b in zip(by[num].runs, by[den].runs, strict=True)]
        print(f"  {label}: wall per round {', '.join(f'{x:.2f}' for x in walls)}; median {med(walls):.2f}; "
              f"client CPU per round {', '.join(f'{x:.2f}' for x in cpus)}; median {med(cpus):.2f}")
        figures["ratios"][short] = {"wall": walls, "cpu": cpus, "wall_median": med(walls),
                                             "cpu_median": med(cpus)}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
