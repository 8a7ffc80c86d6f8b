"""Benchmark: reading one slice of a real-size CT volume, cold, disk-cold and warm, per axis, with peak memory.

Generates (once, cached under the work folder) a CT-like 512x512x300 int16 volume (body, organs, bone, noise; 0.78 x
0.78 x 1.5 mm) as ``.nii.gz`` and ``.nii``, then measures, each in a fresh subprocess (time and peak RSS above the
process's own baseline after its imports, from the process's own ``VmHWM``), our reader beside the alternatives in the
same run, the sides interleaved: ``--pairs`` rounds, each running every side once per axis, in an order rotated each
round; per round the figures and the ratios ours / array proxy, then the medians over the rounds:

* ours, cold: ``image.render_gray`` of one slice (read, CT window, uint8), nothing cached in the process (per axis);
* ours, warm: new slices of the same volume once it is cached (median of ``--warm`` reads per axis);
* upstream's way per sample: ``nib.load(path).get_fdata().astype("float32")`` then the slice (cold);
* nibabel's array proxy, slicing ``nib.load(path).dataobj`` (reads only what the slice needs from the stream; raw
  values, no window; cold);
* the array proxy, warm: new slices through ``img.dataobj`` of an image opened once (``keep_file_open=True``), as a
  reader caching the open image would do (median of ``--warm`` reads);
* the old whole-volume ``np.take`` on a cached Fortran-ordered float32 volume (warm).

"Cold" reads find the file in the page cache (the child reads it through first, untimed): they time the decoding, not
the disk. "Disk-cold" reads (ours and the proxy) first drop the file from the page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (no root needed for a file one can open). The drop is best-effort: the kernel
may keep pages (tmpfs keeps them all), so each child also reports the fraction of the file resident in the page cache
just before its timed read (``mincore``, Linux), printed with the medians.

Targets (2 cores): a new slice from a cached real-size volume under 20 ms; a cold one under 1 s with under
200 MB peak.

    .venv/bin/python benchmarks/bench_slices.py [--workdir /tmp/medvision_bench_slices] [--shape 512 512 300] [--pairs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from _pagecache import drop_page_cache, resident_fraction
from _peak import peak_rss_mb, reset_peak

AXES = {0: "sagittal", 1: "coronal", 2: "axial"}
#: (side, label); a side is ``<reader>_<state>``, the state one of cold (page cache warm), disk (page cache dropped)
#: and warm (the volume or the open image held by the process)
SIDES = [("ours_cold", "ours, cold (render_gray)"), ("ours_disk", "ours, disk-cold (render_gray)"),
         ("upstream_cold", "upstream per sample: get_fdata, cold"), ("proxy_cold", "nibabel array proxy slice, cold"),
         ("proxy_disk", "array proxy slice, disk-cold"), ("ours_warm", "ours, warm (new slice, cached volume)"),
         ("proxy_warm", "array proxy, warm (new slice, image open)"),
         ("take_warm", "old np.take on cached float32 volume")]
#: the ratios printed: (label, ours side, the proxy side)
RATIOS = [("cold", "ours_cold", "proxy_cold"), ("disk-cold", "ours_disk", "proxy_disk"),
          ("warm", "ours_warm", "proxy_warm")]


def make_volume(workdir: Path, shape: tuple[int, int, int]) -> tuple[Path, Path]:
    """A CT-like int16 volume in HU (air -1000, soft tissue, an organ, bone, noise), written once as .nii.gz and .nii."""
    import nibabel as nib

    tag = "x".join(map(str, shape))
    gz, raw = workdir / f"ct_{tag}.nii.gz", workdir / f"ct_{tag}.nii"
    if gz.exists() and raw.exists():
        return gz, raw
    workdir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x, y = np.ogrid[-1:1:complex(0, shape[0]), -1:1:complex(0, shape[1])]
    vol = np.empty(shape, np.int16, order="F")
    for k in range(shape[2]):
        z = 2 * k / max(shape[2] - 1, 1) - 1
        plane = np.full(shape[:2], -1000, np.float32)
        body = (x / 0.8) ** 2 + (y / 0.6) ** 2 < 1 - 0.2 * z * z
        plane[body] = 40
        plane[((x - 0.25) / 0.25) ** 2 + ((y + 0.1) / 0.2) ** 2 < 1 - z * z] = 60  # an organ
        plane[((x / 0.08) ** 2 + ((y - 0.4) / 0.08) ** 2) < 1] = 700  # bone
        plane += rng.normal(0, 12, shape[:2]).astype(np.float32) * body
        vol[:, :, k] = plane.astype(np.int16)
    affine = np.diag([0.78, 0.78, 1.5, 1.0])
    img = nib.Nifti1Image(vol, affine)
    img.header.set_zooms((0.78, 0.78, 1.5))
    nib.save(img, str(raw) + ".tmp.nii")
    os.replace(str(raw) + ".tmp.nii", raw)
    nib.save(img, str(gz) + ".tmp.nii.gz")
    os.replace(str(gz) + ".tmp.nii.gz", gz)
    return gz, raw


def read_through(path: str) -> None:
    """Bring the whole file into the page cache (a small buffer: the process's peak is not raised)."""
    buf = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def child(kind: str, path: str, axis: int, warm: int) -> dict:
    """One measurement in this (fresh) process: seconds, peak RSS above the baseline after the imports and the page
    cache preparation, and the fraction of the file in the page cache just before the timed read."""
    import nibabel as nib

    from medvision_bm.data import image

    state = kind.rsplit("_", 1)[1]
    rule = image.IntensityRule("window", width=400.0, level=40.0)
    shape = nib.load(path).shape
    mid = shape[axis] // 2
    if state == "disk":
        drop_page_cache(path)
    else:
        read_through(path)
    resident = resident_fraction(path)
    reset_peak()
    base = peak_rss_mb()

    def done(seconds: float) -> dict:
        return {"s": seconds, "peak_mb": peak_rss_mb() - base, "resident": resident}

    def new_slices(read: Callable[[int], object]) -> dict:
        times = []
        for i in range(warm):
            t = time.perf_counter()
            read((mid + 1 + i) % shape[axis])
            times.append(time.perf_counter() - t)
        return done(statistics.median(times))

    def proxy_slice(img: Any, index: int) -> np.ndarray:
        sl: list = [slice(None)] * 3
        sl[axis] = index
        plane = np.asarray(img.dataobj[tuple(sl)], dtype=np.float32)
        assert plane.ndim == 2
        return plane

    t0 = time.perf_counter()
    if kind in ("ours_cold", "ours_disk"):
        gray, _ = image.render_gray(path, axis, mid, rule=rule, protocol="current")
        assert gray.dtype == np.uint8
    elif kind == "upstream_cold":
        vol = nib.load(path).get_fdata().astype("float32")
        plane = np.take(vol, mid, axis=axis)
        assert plane.ndim == 2
    elif kind in ("proxy_cold", "proxy_disk"):
        proxy_slice(nib.load(path), mid)
    elif kind == "ours_warm":
        image.render_gray(path, axis, mid, rule=rule, protocol="current")  # caches the volume
        return new_slices(lambda i: image.render_gray(path, axis, i, rule=rule, protocol="current"))
    elif kind == "proxy_warm":
        img = nib.load(path, keep_file_open=True)  # the image opened once, as a caching reader holds it
        proxy_slice(img, mid)
        return new_slices(lambda i: proxy_slice(img, i))
    elif kind == "take_warm":
        vol = nib.load(path).get_fdata().astype("float32")  # the old cache: a Fortran-ordered float32 volume
        return new_slices(lambda i: np.ascontiguousarray(np.take(vol, i, axis=axis)))
    else:
        raise SystemExit(f"unknown measurement {kind}")
    return done(time.perf_counter() - t0)


def measure(kind: str, path: Path, axis: int, warm: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(path), str(axis), str(warm)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{kind} on {path.name} axis {axis} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cell(m: dict) -> str:
    t = f"{m['s'] * 1000:.1f} ms" if m["s"] < 1 else f"{m['s']:.2f} s"
    return f"{t}, {m['peak_mb']:.0f} MB"


def resident(runs: dict[str, list[dict[int, dict]]], state: str) -> str:
    """The median, lowest and highest page-cache fraction the sides of ``state`` found before their timed read."""
    got = [v["resident"] for k in runs if k.endswith("_" + state) for r in runs[k] for v in r.values()]
    if min(got) < 0:
        return "unknown (mincore unavailable)"
    return f"{statistics.median(got):.0%} (lowest {min(got):.0%}, highest {max(got):.0%})"


def table(rows: dict[str, dict[int, dict]], kinds: list[str], axes: list[int]) -> None:
    labels = dict(SIDES)
    print(f"  {'measurement':42s} " + " ".join(f"{AXES[a]:>20s}" for a in axes))
    for kind in kinds:
        print(f"  {labels[kind]:42s} " + " ".join(f"{cell(rows[kind][a]):>20s}" for a in axes))


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, path, axis, warm = sys.argv[2:6]
        print(json.dumps(child(kind, path, int(axis), int(warm))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", default="/tmp/medvision_bench_slices", help="where the volumes are generated once")
    p.add_argument("--shape", type=int, nargs=3, default=[512, 512, 300], metavar=("X", "Y", "Z"))
    p.add_argument("--warm", type=int, default=20, help="warm reads per axis (median reported)")
    p.add_argument("--axes", type=int, nargs="+", default=list(AXES), choices=list(AXES),
                   help="slice axes measured (0 sagittal, 1 coronal, 2 axial; default all)")
    p.add_argument("--pairs", type=int, default=3, help="rounds of interleaved sides (at least 3 for figures)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    if min(args.shape) < 2 or args.warm < 1 or args.pairs < 1:
        p.error("--shape needs three sizes >= 2, --warm and --pairs >= 1")

    t0 = time.perf_counter()
    gz, raw = make_volume(Path(args.workdir), tuple(args.shape))
    made = time.perf_counter() - t0
    print(f"volume {tuple(args.shape)} int16: {gz.name} {gz.stat().st_size / 1e6:.0f} MB, {raw.name} "
          f"{raw.stat().st_size / 1e6:.0f} MB (ready in {made:.1f} s); cores {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    kinds = [k for k, _ in SIDES]
    axes = sorted(set(args.axes))
    figures: dict[str, object] = {"pairs": args.pairs}
    for path in (gz, raw):
        runs: dict[str, list[dict[int, dict]]] = {k: [] for k in kinds}  # side -> per round -> axis -> figures
        for rnd in range(args.pairs):
            order = kinds[rnd % len(kinds):] + kinds[:rnd % len(kinds)]
            for kind in order:
                runs[kind].append({axis: measure(kind, path, axis, args.warm) for axis in axes})
            print(f"\n{path.name}, round {rnd + 1} [{', '.join(order)}]:")
            table({k: runs[k][-1] for k in kinds}, kinds, axes)
            print("  ratios ours/proxy (" + ", ".join(AXES[x] for x in axes) + "): " + "  ".join(
                f"{label} " + " ".join(f"{runs[a][-1][x]['s'] / runs[b][-1][x]['s']:.3g}" for x in axes)
                for label, a, b in RATIOS), flush=True)
        medians = {k: {x: {f: statistics.median(r[x][f] for r in runs[k]) for f in ("s", "peak_mb", "resident")}
                       for x in axes} for k in kinds}
        print(f"\n{path.name}, median over {args.pairs} rounds:")
        table(medians, kinds, axes)
        for label, a, b in RATIOS:
            for x in axes:
                per = [ra[x]["s"] / rb[x]["s"] for ra, rb in zip(runs[a], runs[b], strict=True)]
                print(f"  ours/proxy {label:9s} {AXES[x]:8s}: per round {', '.join(f'{v:.3g}' for v in per)}; "
                      f"median {statistics.median(per):.3g}")
                figures[f"{path.name}/ratio/{label}/{AXES[x]}"] = {"per_round": per, "median": statistics.median(per)}

        print(f"  page cache before the timed read (fraction of the file resident): cold {resident(runs, 'cold')}, "
              f"disk-cold {resident(runs, 'disk')}; the disk-cold drop (posix_fadvise DONTNEED) is best-effort")
        for kind in kinds:
            for x in axes:
                figures[f"{path.name}/{kind}/{AXES[x]}"] = {**medians[kind][x],
                                                            "rounds": [r[x] for r in runs[kind]]}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
