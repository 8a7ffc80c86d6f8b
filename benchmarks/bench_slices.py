"""Benchmark: reading one slice of a real-size CT volume, cold and warm, per axis, with peak memory.

Generates (once, cached under the work folder) a CT-like 512x512x300 int16 volume (body, organs, bone, noise; 0.78 x
0.78 x 1.5 mm) as ``.nii.gz`` and ``.nii``, then measures, each in a fresh subprocess (time and peak RSS above the
process's own baseline after its imports, from the process's own ``VmHWM``), our reader beside the alternatives in the
same run:

* ours, cold: ``image.render_gray`` of one slice (read, CT window, uint8), nothing cached (per axis);
* ours, warm: new slices of the same volume once it is cached (median of ``--warm`` reads per axis);
* upstream's way per sample: ``nib.load(path).get_fdata().astype("float32")`` then the slice (cold);
* nibabel's array proxy, slicing ``img.dataobj`` (reads only what the slice needs from the stream; cold);
* the old whole-volume ``np.take`` on a cached Fortran-ordered float32 volume (warm).

Targets (issue 14, 2 cores): a new slice from a cached real-size volume under 20 ms; a cold one under 1 s with under
200 MB peak.

    .venv/bin/python benchmarks/bench_slices.py [--workdir /tmp/medvision_bench_slices] [--shape 512 512 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _peak import peak_rss_mb

AXES = {0: "sagittal", 1: "coronal", 2: "axial"}


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


def child(kind: str, path: str, axis: int, warm: int) -> dict:
    """One measurement in this (fresh) process: seconds and peak RSS above the post-import baseline."""
    import nibabel as nib

    from medvision_bm.data import image

    rule = image.IntensityRule("window", width=400.0, level=40.0)
    shape = nib.load(path).shape
    mid = shape[axis] // 2
    base = peak_rss_mb()
    t0 = time.perf_counter()
    if kind == "ours_cold":
        gray, _ = image.render_gray(path, axis, mid, rule=rule, protocol="current")
        assert gray.dtype == np.uint8
    elif kind == "upstream_cold":
        vol = nib.load(path).get_fdata().astype("float32")
        plane = np.take(vol, mid, axis=axis)
        assert plane.ndim == 2
    elif kind == "proxy_cold":
        sl = [slice(None)] * 3
        sl[axis] = mid
        plane = np.asarray(nib.load(path).dataobj[tuple(sl)], dtype=np.float32)
        assert plane.ndim == 2
    elif kind == "ours_warm":
        image.render_gray(path, axis, mid, rule=rule, protocol="current")  # caches the volume
        t0 = time.perf_counter()
        times = []
        for i in range(warm):
            t = time.perf_counter()
            image.render_gray(path, axis, (mid + 1 + i) % shape[axis], rule=rule, protocol="current")
            times.append(time.perf_counter() - t)
        return {"s": statistics.median(times), "peak_mb": peak_rss_mb() - base}
    elif kind == "take_warm":
        vol = nib.load(path).get_fdata().astype("float32")  # the old cache: a Fortran-ordered float32 volume
        times = []
        for i in range(warm):
            t = time.perf_counter()
            np.ascontiguousarray(np.take(vol, (mid + 1 + i) % shape[axis], axis=axis))
            times.append(time.perf_counter() - t)
        return {"s": statistics.median(times), "peak_mb": peak_rss_mb() - base}
    else:
        raise SystemExit(f"unknown measurement {kind}")
    return {"s": time.perf_counter() - t0, "peak_mb": peak_rss_mb() - base}


def measure(kind: str, path: Path, axis: int, warm: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(path), str(axis), str(warm)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{kind} on {path.name} axis {axis} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, path, axis, warm = sys.argv[2:6]
        print(json.dumps(child(kind, path, int(axis), int(warm))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", default="/tmp/medvision_bench_slices", help="where the volumes are generated once")
    p.add_argument("--shape", type=int, nargs=3, default=[512, 512, 300], metavar=("X", "Y", "Z"))
    p.add_argument("--warm", type=int, default=20, help="warm reads per axis (median reported)")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)
    if min(args.shape) < 2 or args.warm < 1:
        p.error("--shape needs three sizes >= 2 and --warm >= 1")

    t0 = time.perf_counter()
    gz, raw = make_volume(Path(args.workdir), tuple(args.shape))
    made = time.perf_counter() - t0
    print(f"volume {tuple(args.shape)} int16: {gz.name} {gz.stat().st_size / 1e6:.0f} MB, {raw.name} "
          f"{raw.stat().st_size / 1e6:.0f} MB (ready in {made:.1f} s); cores {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    rows = [("ours, cold (render_gray)", "ours_cold"), ("upstream per sample: get_fdata, cold", "upstream_cold"),
            ("nibabel array proxy slice, cold", "proxy_cold"), ("ours, warm (new slice, cached volume)", "ours_warm"),
            ("old np.take on cached float32 volume", "take_warm")]
    figures: dict[str, dict] = {}
    for path in (gz, raw):
        print(f"\n{path.name}")
        print(f"{'measurement':40s} " + " ".join(f"{AXES[a]:>20s}" for a in AXES))
        for label, kind in rows:
            cells = []
            for axis in AXES:
                m = measure(kind, path, axis, args.warm)
                figures[f"{path.name}/{kind}/{AXES[axis]}"] = m
                t = f"{m['s'] * 1000:.1f} ms" if m["s"] < 1 else f"{m['s']:.2f} s"
                cells.append(f"{t}, {m['peak_mb']:.0f} MB")
            print(f"{label:40s} " + " ".join(f"{c:>20s}" for c in cells))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
