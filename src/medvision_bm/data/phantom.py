"""A deterministic synthetic ``Data/`` folder in upstream MedVision's exact layout and plan schema.

Four datasets, written the way upstream's planner writes real ones (``Datasets/<dataset>/benchmark_plan_<kind>_v<X.Y.Z>
.json.gz``, RAS+ NIfTI volumes, masks, gzipped landmark files, case paths relative to the dataset folder):

* PhantomCT: abdominal CT; detection (v1.0.0) and tumor/lesion size (v1.0.0, 1.1.0, 1.1.1, 1.4.0), two T/L tasks;
* PhantomMR: brain MR in a sub-dataset folder with a modality image folder (``PhantomMR-GLI/Images-t1c``); detection
  and tumor/lesion size;
* PhantomXR: cephalogram-like 2D X-ray stored as a (1, H, W) volume; landmark distances and angles (v1.0.0), one
  config per metric type as Ceph-Biometrics-400;
* PhantomFetal: fetal-brain-like MR published from v1.2.0 only; detection and landmark distances on three planes.

The planner rules are this suite's own re-statement of upstream's (``medvision_ds/utils/benchmark_planner.py``):
boxes per connected component (inclusive min/max indices of the 2D slice array, ``dimensions = max - min + 1``,
``sizes`` in mm), tumor/lesion axes from an ellipse fitted to each cluster in physical space, distances and angles
between landmarks in physical space. The T/L annotations change between versions as upstream's did (cluster size
threshold and ``n_total_clusters`` from 1.1.0, the in-plane spacing swap fixed in 1.1.1, a millimetre size floor in
1.4.0), and the volumes include what every loader filter drops: several boxes of one label on a slice, boxes under
10 px, slices with several lesion clusters. Each T/L dataset ships upstream's removed-samples list
(``multi_cluster_samples_v1.0.0_to_v1.1.0.json``: its 1.0.0 slices that 1.1.0 counts several clusters on).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract, parse_planner_version
from medvision_bm.data.removed_samples import list_path, multi_cluster_entries, write_removed_list
from medvision_bm.errors import UserError
from medvision_bm.io import write_text_atomic
from medvision_bm.jsontypes import JsonObject, JsonValue

DEFAULT_SEED = 20251123
AXES = "xyz"
PLANE_DIM = {"Sagittal": 0, "Coronal": 1, "Axial": 2}
TL_VERSIONS = ("1.0.0", "1.1.0", "1.1.1", "1.4.0")
_V = TypeVar("_V")
#: slice_profiles_x/y/z (or slice_landmarks_x/y/z) of one case: axis key -> its entries.
Profiles = dict[str, list[JsonValue]]



@dataclass(frozen=True)
class TLSetting:
    """The planner settings of the tumor/lesion annotation at one version: the cluster size threshold (pixels),
    whether ``n_total_clusters`` is written, whether the in-plane spacing is swapped (the bug fixed in 1.1.1), and
    whether the millimetre size floor applies."""

    min_pixels: int
    n_total: bool
    swap_spacing: bool
    mm_floor: bool


#: Planner settings of the tumor/lesion annotation per version (phantom-sized analogues of upstream's).
TL_SETTINGS: dict[str, TLSetting] = {
    "1.0.0": TLSetting(min_pixels=16, n_total=False, swap_spacing=True, mm_floor=False),
    "1.1.0": TLSetting(min_pixels=12, n_total=True, swap_spacing=True, mm_floor=False),
    "1.1.1": TLSetting(min_pixels=12, n_total=True, swap_spacing=False, mm_floor=False),
    "1.4.0": TLSetting(min_pixels=3, n_total=True, swap_spacing=False, mm_floor=True),
}


@dataclass(frozen=True)
class Blob:
    label: int
    centre: tuple[float, float, float]  # fraction of the field of view
    radii: tuple[float, float, float]  # fraction of the field of view
    intensity: float
    rotate: bool = False


@dataclass(frozen=True)
class Landmark:
    key: str  # "P1", ...
    name: str
    ijk: tuple[float, float, float]  # fraction of the field of view (the slice axis coordinate is shared per metric)


@dataclass
class Spec:
    name: str
    modality: str
    description: str
    shape: tuple[int, int, int]
    spacings: tuple[tuple[float, float, float], ...]
    n_train: int
    n_test: int
    background: float
    noise: float
    body: tuple[tuple[float, float, float], tuple[float, float, float], float] | None
    blobs: tuple[Blob, ...] = ()
    labels_map: dict[str, str] = field(default_factory=dict)
    detection_version: str | None = "1.0.0"
    tl_targets: tuple[int, ...] = ()  # one T/L task per target label
    tl_versions: tuple[str, ...] = TL_VERSIONS
    landmark_version: str | None = None
    landmarks: tuple[Landmark, ...] = ()
    lines: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # key -> (name, P, P)
    angles: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # key -> (name, line, line)
    biometrics: tuple[tuple[str, str, int], ...] = ()  # (metric_type, metric_key, slice_dim)
    sub_folder: str = ""  # "PhantomMR-GLI/" for a multi-part dataset
    image_folder: str = "Images"
    dtype: str = "int16"


SPECS: tuple[Spec, ...] = (
    Spec(
        name="PhantomCT", modality="CT", description="abdominal computed tomography (CT) scan",
        shape=(96, 84, 24), spacings=((0.7, 0.8, 2.5), (0.75, 0.9, 3.0), (0.8, 0.7, 2.0)),
        n_train=3, n_test=3, background=-1000.0, noise=10.0,
        body=((0.5, 0.5, 0.5), (0.46, 0.42, 0.9), -20.0),
        blobs=(
            Blob(1, (0.34, 0.52, 0.5), (0.17, 0.17, 0.45), 80.0),
            Blob(2, (0.72, 0.64, 0.55), (0.07, 0.09, 0.3), 130.0),
            Blob(3, (0.36, 0.28, 0.45), (0.06, 0.08, 0.3), 200.0),
            Blob(4, (0.66, 0.28, 0.45), (0.06, 0.08, 0.3), 200.0),
            Blob(5, (0.30, 0.56, 0.5), (0.08, 0.05, 0.25), 10.0, rotate=True),
            Blob(6, (0.66, 0.26, 0.42), (0.05, 0.065, 0.25), 90.0, rotate=True),
            Blob(6, (0.64, 0.36, 0.5), (0.022, 0.025, 0.12), 90.0),  # a second kidney-tumor cluster
            Blob(7, (0.38, 0.22, 0.5), (0.018, 0.02, 0.15), 15.0),  # two small cysts: boxes under 10 px,
            Blob(7, (0.34, 0.33, 0.45), (0.03, 0.035, 0.2), 15.0),  # and two boxes of one label on a slice
        ),
        labels_map={"1": "liver", "2": "spleen", "3": "right kidney", "4": "left kidney", "5": "liver tumor",
                    "6": "kidney tumor", "7": "kidney cyst"},
        tl_targets=(5, 6),
    ),
    Spec(
        name="PhantomMR", modality="MRI",
        description="contrast enhanced T1-weighted brain magnetic resonance imaging (MRI) scan",
        shape=(48, 56, 36), spacings=((1.0, 1.0, 1.5), (1.1, 0.9, 1.2), (0.9, 1.0, 1.4)),
        n_train=3, n_test=2, background=15.0, noise=18.0,
        body=((0.5, 0.5, 0.5), (0.42, 0.44, 0.42), 600.0),
        blobs=(
            Blob(1, (0.5, 0.52, 0.55), (0.12, 0.16, 0.1), 1050.0),
            Blob(2, (0.62, 0.38, 0.5), (0.11, 0.08, 0.14), 880.0, rotate=True),
        ),
        labels_map={"1": "ventricles", "2": "enhancing brain tumor"},
        tl_targets=(2,), sub_folder="PhantomMR-GLI/", image_folder="Images-t1c", dtype="uint16",
    ),
    Spec(
        name="PhantomXR", modality="X Ray", description="cephalogram (head and neck X-ray)",
        shape=(1, 120, 150), spacings=((1.0, 0.4, 0.4), (1.0, 0.35, 0.35), (1.0, 0.45, 0.45)),
        n_train=6, n_test=4, background=300.0, noise=12.0,
        body=((0.5, 0.5, 0.5), (1.0, 0.4, 0.42), 900.0),
        detection_version=None, tl_versions=(), landmark_version="1.0.0",
        landmarks=(Landmark("P1", "sella", (0.0, 0.3, 0.35)), Landmark("P2", "nasion", (0.0, 0.35, 0.75)),
                   Landmark("P3", "orbitale", (0.0, 0.45, 0.62)), Landmark("P4", "porion", (0.0, 0.48, 0.25)),
                   Landmark("P5", "menton", (0.0, 0.82, 0.62))),
        lines={"L-1-2": ("", "P1", "P2"), "L-3-4": ("", "P3", "P4"), "L-2-5": ("", "P2", "P5")},
        angles={"A-L_1_2-L_3_4": ("", "L-1-2", "L-3-4"), "A-L_1_2-L_2_5": ("", "L-1-2", "L-2-5")},
        biometrics=(("angle", "A-L_1_2-L_3_4", 0), ("angle", "A-L_1_2-L_2_5", 0), ("distance", "L-1-2", 0),
                    ("distance", "L-2-5", 0)),
        dtype="uint16",
    ),
    Spec(
        name="PhantomFetal", modality="", description="",
        shape=(40, 48, 40), spacings=((0.8, 0.8, 0.8), (0.9, 0.9, 0.9), (0.85, 0.85, 0.85)),
        n_train=3, n_test=3, background=10.0, noise=15.0,
        body=((0.5, 0.5, 0.5), (0.4, 0.44, 0.4), 500.0),
        blobs=(Blob(1, (0.5, 0.55, 0.55), (0.3, 0.3, 0.28), 700.0), Blob(2, (0.5, 0.25, 0.35), (0.14, 0.1, 0.1), 820.0)),
        labels_map={"1": "brain", "2": "cerebellum"},
        detection_version="1.2.0", tl_versions=(), landmark_version="1.2.0",
        landmarks=(Landmark("P1", "most anterior point of corpus callosum", (0.5, 0.72, 0.6)),
                   Landmark("P2", "most posterior point of corpus callosum", (0.5, 0.35, 0.62)),
                   Landmark("P3", "right parietal eminence ", (0.2, 0.5, 0.55)),
                   Landmark("P4", "left parietal eminence", (0.8, 0.5, 0.55)),
                   Landmark("P5", "vermis top", (0.5, 0.3, 0.4)), Landmark("P6", "vermis bottom", (0.5, 0.3, 0.2))),
        lines={"L-1-2": ("length of corpus callosum", "P1", "P2"), "L-3-4": ("brain biparietal diameter", "P3", "P4"),
               "L-5-6": ("height of the vermis", "P5", "P6")},
        biometrics=(("distance", "L-1-2", 0), ("distance", "L-3-4", 2), ("distance", "L-5-6", 1)),
        dtype="uint16",
    ),
)


def _rng(seed: int, *parts: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *parts]))


def _ellipsoid(shape: tuple[int, ...], spacing: Sequence[float], centre_mm: Sequence[float],
              radii_mm: Sequence[float], angle_rad: float = 0.0) -> np.ndarray:
    """Boolean mask of an ellipsoid (rotated about the third axis), computed on its bounding sub-box only."""
    mask = np.zeros(shape, dtype=bool)
    reach = max(radii_mm[0], radii_mm[1])
    r = (reach, reach, radii_mm[2])
    lo = [max(0, math.floor((centre_mm[d] - r[d]) / spacing[d]) - 1) for d in range(3)]
    hi = [min(shape[d], math.ceil((centre_mm[d] + r[d]) / spacing[d]) + 2) for d in range(3)]
    if any(h <= low for low, h in zip(lo, hi)):
        return mask
    x, y, z = np.meshgrid(*[np.arange(lo[d], hi[d]) * spacing[d] - centre_mm[d] for d in range(3)], indexing="ij")
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    u, v = c * x + s * y, -s * x + c * y
    inside = (u / radii_mm[0]) ** 2 + (v / radii_mm[1]) ** 2 + (z / radii_mm[2]) ** 2 <= 1.0
    mask[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = inside
    return mask


@dataclass
class Case:
    case_id: str
    volume: np.ndarray
    mask: np.ndarray | None
    spacing: tuple[float, float, float]
    points: dict[str, tuple[int, int, int]]  # landmark key -> voxel indices


def make_case(spec: Spec, spec_index: int, case_index: int, seed: int) -> Case:
    rng = _rng(seed, spec_index, case_index)
    spacing = spec.spacings[int(rng.integers(len(spec.spacings)))]
    shape = spec.shape
    fov = [shape[d] * spacing[d] for d in range(3)]
    vol = np.full(shape, spec.background, dtype=np.float32)
    mask = np.zeros(shape, dtype=np.uint8) if spec.blobs else None
    if spec.body is not None:
        centre, radii, value = spec.body
        body = _ellipsoid(shape, spacing, [centre[d] * fov[d] for d in range(3)],
                          [radii[d] * fov[d] if shape[d] > 1 else 1e6 for d in range(3)])
        vol[body] = value
    for blob in spec.blobs:
        jitter = rng.uniform(-0.03, 0.03, 3)
        scale = rng.uniform(0.85, 1.15, 3)
        centre_mm = [(blob.centre[d] + jitter[d]) * fov[d] for d in range(3)]
        radii_mm = [blob.radii[d] * scale[d] * fov[d] for d in range(3)]
        angle = float(rng.uniform(0, math.pi)) if blob.rotate else 0.0
        region = _ellipsoid(shape, spacing, centre_mm, radii_mm, angle)
        vol[region] = blob.intensity
        assert mask is not None
        mask[region] = blob.label
    points: dict[str, tuple[int, int, int]] = {}
    if spec.landmarks:
        bright = float(np.max(vol)) * 1.8 + 200.0
        for lm in spec.landmarks:
            jitter = rng.uniform(-0.04, 0.04, 3)
            ijk = [min(shape[d] - 1, max(0, round((lm.ijk[d] + (jitter[d] if shape[d] > 1 else 0)) * (shape[d] - 1))))
                   for d in range(3)]
            points[lm.key] = (int(ijk[0]), int(ijk[1]), int(ijk[2]))
        for mtype, key, dim in spec.biometrics:  # every point of a metric on the slice of its first point
            pts = _metric_points(spec, mtype, key)
            k = points[pts[0]][dim]
            for p in pts[1:]:
                ijk = list(points[p])
                ijk[dim] = k
                points[p] = (ijk[0], ijk[1], ijk[2])
        for point in points.values():
            sl = tuple(slice(max(0, c - 1), c + 2) if shape[d] > 1 else slice(0, 1) for d, c in enumerate(point))
            vol[sl] = bright
    vol = vol + rng.normal(0.0, spec.noise, shape).astype(np.float32)
    if spec.modality != "CT":
        vol = np.abs(vol)
    return Case(f"{spec.name.lower()}_{case_index:03d}", vol, mask, spacing, points)


def _metric_points(spec: Spec, mtype: str, key: str) -> list[str]:
    if mtype == "distance":
        _, a, b = spec.lines[key]
        return [a, b]
    _, l1, l2 = spec.angles[key]
    return [*spec.lines[l1][1:], *spec.lines[l2][1:]]


# ------------------------------------------------------------------------------------------------ planner


def _in_plane(values: tuple[_V, _V, _V], dim: int) -> tuple[_V, _V]:
    a, b = (v for d, v in enumerate(values) if d != dim)
    return a, b


def _slice(arr: np.ndarray, dim: int, k: int) -> np.ndarray:
    return arr[k, :, :] if dim == 0 else arr[:, k, :] if dim == 1 else arr[:, :, k]


def detection_profiles(mask: np.ndarray, spacing: tuple[float, float, float]) -> dict[str, list[JsonValue]]:
    """slice_profiles_x/y/z of a detection plan: every labelled slice, its labels ascending, one box per component."""
    from scipy import ndimage

    out: dict[str, list[JsonValue]] = {}
    for dim, axis in enumerate(AXES):
        ph, pw = _in_plane(spacing, dim)
        entries: list[JsonValue] = []
        for k in range(mask.shape[dim]):
            sl = _slice(mask, dim, k)
            labels = [int(v) for v in np.unique(sl) if v]
            if not labels:
                continue
            profile: list[JsonValue] = []
            for label in labels:
                comps, _ = ndimage.label(sl == label)
                boxes: list[JsonValue] = []
                for obj in ndimage.find_objects(comps):
                    lo = [int(obj[0].start), int(obj[1].start)]
                    hi = [int(obj[0].stop - 1), int(obj[1].stop - 1)]
                    dims = [hi[0] - lo[0] + 1, hi[1] - lo[1] + 1]
                    boxes.append({"min_coords": [lo[0], lo[1]], "max_coords": [hi[0], hi[1]],
                                  "center_coords": [int((lo[0] + hi[0]) / 2), int((lo[1] + hi[1]) / 2)],
                                  "dimensions": [dims[0], dims[1]], "sizes": [round(dims[0] * ph, 3), round(dims[1] * pw, 3)],
                                  "mask_image_ratio": round(dims[0] * dims[1] / sl.size, 6)})
                profile.append({"label": label, "bboxes": boxes})
            entries.append({"slice_idx": k, "slice_profile": profile})
        out[f"slice_profiles_{axis}"] = entries
    return out


def fit_ellipse_mm(rows: np.ndarray, cols: np.ndarray, pixel_hw: tuple[float, float]
                   ) -> tuple[float, float, tuple[npt.NDArray[np.float64], float, float]]:
    """Full axis lengths (mm) of the ellipse with the second moments of the pixel centres, and its axes in pixels."""
    ph, pw = pixel_hw
    pts = np.vstack([rows * ph, cols * pw])
    cov = np.cov(pts, bias=True) if rows.size > 1 else np.zeros((2, 2))
    evals, evecs = np.linalg.eigh(cov)
    evals = np.clip(evals, 0.0, None)
    major, minor = 4.0 * math.sqrt(evals[1]), 4.0 * math.sqrt(evals[0])
    return major, minor, (evecs, float(rows.mean()), float(cols.mean()))


def tl_profiles(mask: np.ndarray, spacing: tuple[float, float, float], target: int, version: str,
                slice_dims: tuple[int, ...] = (0, 1, 2)) -> tuple[Profiles, Profiles]:
    """slice_profiles_x/y/z of a T/L biometry plan and the matching landmark file content, at one version."""
    from scipy import ndimage

    cfg = TL_SETTINGS[version]
    profiles: Profiles = {f"slice_profiles_{a}": [] for a in AXES}
    landmarks: Profiles = {f"slice_landmarks_{a}": [] for a in AXES}
    for dim in slice_dims:
        axis = AXES[dim]
        ph, pw = _in_plane(spacing, dim)
        fit_px = (pw, ph) if cfg.swap_spacing else (ph, pw)  # the 1.1.1 fix: spacing in the right order
        floor_mm = max(2.0, 2.0 * max(ph, pw)) if cfg.mm_floor else 0.0
        for k in range(mask.shape[dim]):
            sl = _slice(mask, dim, k) == target
            if not sl.any():
                continue
            comps, n_total = ndimage.label(sl)
            clusters = []
            for c in range(1, n_total + 1):
                rows, cols = np.nonzero(comps == c)
                if rows.size < cfg.min_pixels:
                    continue
                major, minor, (evecs, r0, c0) = fit_ellipse_mm(rows, cols, fit_px)
                if major < floor_mm or minor <= 0:
                    continue
                clusters.append((rows.size, major, minor, evecs, r0, c0))
            if not clusters:
                continue
            clusters.sort(key=lambda t: -t[0])
            entry: JsonObject = {"slice_idx": k}
            if cfg.n_total:
                entry["n_total_clusters"] = int(n_total)
            entry["slice_profile"] = [[
                {"metric_type": "distance", "metric_map_name": "lines_map", "metric_key": "L-1-2",
                 "metric_value": round(major, 3), "metric_unit": "mm", "slice_dim": dim},
                {"metric_type": "distance", "metric_map_name": "lines_map", "metric_key": "L-3-4",
                 "metric_value": round(minor, 3), "metric_unit": "mm", "slice_dim": dim},
            ] for _, major, minor, *_ in clusters]
            profiles[f"slice_profiles_{axis}"].append(entry)
            lms: list[JsonValue] = []
            for n_px, major, minor, evecs, r0, c0 in clusters:
                pts: JsonObject = {}
                for name, (vec, length) in {"P1": (evecs[:, 1], major), "P3": (evecs[:, 0], minor)}.items():
                    dr, dc = vec[0] * length / 2 / fit_px[0], vec[1] * length / 2 / fit_px[1]
                    other = "P2" if name == "P1" else "P4"
                    for key, sign in ((name, 1), (other, -1)):
                        ij = [round(r0 + sign * dr), round(c0 + sign * dc)]
                        ijk = [*ij[:dim], k, *ij[dim:]]
                        pts[key] = [int(v) for v in ijk]
                lms.append({**dict(sorted(pts.items())), "ROI_pixels_count": int(n_px)})
            item: JsonObject = {"slice_idx": k, "landmarks": lms}
            if cfg.n_total:
                item["n_total_clusters"] = int(n_total)
            landmarks[f"slice_landmarks_{axis}"].append(item)
    return profiles, landmarks


def landmark_profiles(spec: Spec, case: Case) -> tuple[Profiles, Profiles]:
    """slice_profiles_x/y/z of a landmark biometry plan (one entry per metric, biometrics_map order) and landmarks."""
    profiles: Profiles = {f"slice_profiles_{a}": [] for a in AXES}
    landmarks: Profiles = {f"slice_landmarks_{a}": [] for a in AXES}
    for mtype, key, dim in spec.biometrics:
        names = _metric_points(spec, mtype, key)
        ph, pw = _in_plane(case.spacing, dim)
        xy = {p: np.array(_in_plane(case.points[p], dim), dtype=float) * np.array([ph, pw]) for p in names}
        if mtype == "distance":
            value = float(np.linalg.norm(xy[names[1]] - xy[names[0]]))
            unit, map_name = "mm", "lines_map"
        else:
            u, v = xy[names[1]] - xy[names[0]], xy[names[3]] - xy[names[2]]
            cos = abs(float(u @ v)) / (float(np.linalg.norm(u)) * float(np.linalg.norm(v)))
            value = math.degrees(math.acos(min(1.0, cos)))
            unit, map_name = "degree", "angles_map"
        k = case.points[names[0]][dim]
        profiles[f"slice_profiles_{AXES[dim]}"].append({"slice_idx": int(k), "slice_profile": [{
            "metric_type": mtype, "metric_map_name": map_name, "metric_key": key, "metric_value": round(value, 3),
            "metric_unit": unit, "slice_dim": dim}]})
        landmarks[f"slice_landmarks_{AXES[dim]}"].append(
            {"slice_idx": int(k), "landmarks": {p: list(case.points[p]) for p in names}})
    return profiles, landmarks


# ------------------------------------------------------------------------------------------------ writing


def _write_gz(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(gzip.compress(data, compresslevel=6, mtime=0))
    tmp.replace(path)


def _nifti_bytes(array: np.ndarray, spacing: tuple[float, float, float], dtype: str) -> bytes:
    import nibabel as nib

    arr = np.rint(array).astype(dtype)
    img = nib.Nifti1Image(arr, np.diag([*spacing, 1.0]))
    img.header.set_zooms(spacing)
    img.header.set_xyzt_units("mm")
    img.header.set_qform(img.affine, code=1)
    img.header.set_sform(img.affine, code=1)
    return img.to_bytes()


def _image_info(case: Case) -> JsonObject:
    return {"voxel_size": [round(float(s), 3) for s in case.spacing],
            "affine": [[round(float(v), 3) for v in row] for row in np.diag([*case.spacing, 1.0])],
            "orientation": ["R", "A", "S"], "array_size": [int(s) for s in case.volume.shape]}


def _task_header(spec: Spec, kind: str, task_no: int, target: int | None, version: str | None) -> JsonObject:
    sub = spec.sub_folder
    head: JsonObject = {"task_ID": f"{task_no:02d}", "task_type": kind, "image_modality": spec.modality,
                            "image_description": spec.description, "image_folder": f"{sub}{spec.image_folder}"}
    if kind != "biometry" or target is not None:
        head.update(mask_folder=f"{sub}Masks")
    head.update(image_prefix="", image_suffix=".nii.gz")
    if kind != "biometry" or target is not None:
        head.update(mask_prefix="", mask_suffix=".nii.gz")
    if kind == "biometry":
        folder = f"{sub}Landmarks" + (f"-Label{target}" if target is not None else "")
        if target is not None and version != "1.0.0":
            folder += f"-v{version}"
        head.update(landmark_folder=folder, landmark_figure_folder=folder.replace("Landmarks", "Landmarks-fig", 1),
                    landmark_prefix="", landmark_suffix=".json.gz")
    if target is not None:
        head["labels_map"] = dict(spec.labels_map)
        head.update(landmarks_map={"P1": "most right/anterior/superior endpoint of the major axis",
                                   "P2": "most left/superior/inferior endpoint of the major axis",
                                   "P3": "most right/anterior/superior endpoint of the minor axis",
                                   "P4": "most left/superior/inferior endpoint of the minor axis"},
                    lines_map={"L-1-2": {"name": "major axis of the fitted ellipse", "element_keys": ["P1", "P2"],
                                         "element_map_name": "landmarks_map"},
                               "L-3-4": {"name": "minor axis of the fitted ellipse", "element_keys": ["P3", "P4"],
                                         "element_map_name": "landmarks_map"}},
                    angles_map={}, biometrics_map=[], target_label=target,
                    cluster_size_threshold=TL_SETTINGS[version or "1.0.0"].min_pixels,
                    min_major_axis_mm=2.0 if TL_SETTINGS[version or "1.0.0"].mm_floor else 0.0)
    elif kind == "biometry":
        head.update(
            landmarks_map={lm.key: lm.name for lm in spec.landmarks},
            lines_map={k: {"name": n, "element_keys": [a, b], "element_map_name": "landmarks_map"}
                       for k, (n, a, b) in spec.lines.items()},
            angles_map={k: {"name": n, "element_keys": [a, b], "element_map_name": "lines_map"}
                        for k, (n, a, b) in spec.angles.items()},
            biometrics_map=[{"metric_type": t, "metric_map_name": "lines_map" if t == "distance" else "angles_map",
                             "metric_key": k, "slice_dim": d} for t, k, d in spec.biometrics])
    else:
        head["labels_map"] = dict(spec.labels_map)
    return head


def _case_entry(spec: Spec, case: Case, head: JsonObject, profiles: Profiles) -> JsonObject:
    entry: JsonObject = {"case_ID": case.case_id, "image_file": f"{head['image_folder']}/{case.case_id}.nii.gz"}
    if "mask_folder" in head:
        entry["mask_file"] = f"{head['mask_folder']}/{case.case_id}.nii.gz"
    if "landmark_folder" in head:
        entry["landmark_file"] = f"{head['landmark_folder']}/{case.case_id}.json.gz"
    entry["image_file_info"] = _image_info(case)
    if "mask_file" in entry:
        entry["mask_file_info"] = _image_info(case)
    entry.update(profiles)
    return entry


def _plan(spec: Spec, tasks: list[JsonObject]) -> bytes:
    plan = {"dataset_info": {"dataset": spec.name, "dataset_website": "", "dataset_data": [],
                             "license": ["CC0 (synthetic phantom of medvision_bm)"], "paper": []},
            "tasks_number": len(tasks), "tasks": tasks}
    return json.dumps(plan).encode("utf-8")


def make_phantom(data_dir: str | Path, seed: int = DEFAULT_SEED,
                 tasks_list_dir: str | Path | None = None) -> dict[str, dict[str, int]]:
    """Write every phantom dataset under ``<data_dir>/Datasets``; returns {family: {task: samples}} of the bundled
    task lists at upstream's launcher pin (``LAUNCHER_PIN``)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"--seed {seed!r}: the phantom's seed must be a whole number, 0 or more (default "
                        f"{DEFAULT_SEED})")
    data_dir = Path(data_dir)
    for si, spec in enumerate(SPECS):
        root = data_dir / "Datasets" / spec.name
        cases = [make_case(spec, si, ci, seed) for ci in range(spec.n_train + spec.n_test)]
        splits = {"train_cases": cases[: spec.n_train], "test_cases": cases[spec.n_train:]}
        for case in cases:
            _write_gz(root / spec.sub_folder / spec.image_folder / f"{case.case_id}.nii.gz",
                      _nifti_bytes(case.volume, case.spacing, spec.dtype))
            if case.mask is not None:
                _write_gz(root / spec.sub_folder / "Masks" / f"{case.case_id}.nii.gz",
                          _nifti_bytes(case.mask, case.spacing, "uint8"))
        if spec.detection_version:
            head = _task_header(spec, "detection", 1, None, None)
            task = dict(head)
            for split, group in splits.items():
                task[f"{split}_number"] = len(group)
                entries: list[JsonValue] = []
                for c in group:
                    assert c.mask is not None  # a dataset with detection plans has blobs, so masks
                    entries.append(_case_entry(spec, c, head, detection_profiles(c.mask, c.spacing)))
                task[split] = entries
            _write_gz(root / f"benchmark_plan_detection_v{spec.detection_version}.json.gz", _plan(spec, [task]))
        tl_plans: dict[str, list[JsonObject]] = {}
        for version in spec.tl_versions:
            tasks: list[JsonObject] = []
            for n, target in enumerate(spec.tl_targets, start=1):
                head = _task_header(spec, "biometry", n, target, version)
                task = dict(head)
                for split, group in splits.items():
                    task[f"{split}_number"] = len(group)
                    entries = []
                    for c in group:
                        assert c.mask is not None
                        profiles, lms = tl_profiles(c.mask, c.spacing, target, version)
                        entries.append(_case_entry(spec, c, head, profiles))
                        _write_gz(root / str(head["landmark_folder"]) / f"{c.case_id}.json.gz",
                                  json.dumps(lms).encode("utf-8"))
                    task[split] = entries
                tasks.append(task)
            tl_plans[version] = tasks
            _write_gz(root / f"benchmark_plan_biometry_v{version}.json.gz", _plan(spec, tasks))
        if {"1.0.0", "1.1.0"} <= set(tl_plans):
            write_removed_list(list_path(data_dir / "Datasets", spec.name),
                               multi_cluster_entries(tl_plans["1.0.0"], tl_plans["1.1.0"]))
        if spec.landmark_version:
            head = _task_header(spec, "biometry", 1, None, spec.landmark_version)
            task = dict(head)
            for split, group in splits.items():
                task[f"{split}_number"] = len(group)
                entries = []
                for c in group:
                    profiles, lms = landmark_profiles(spec, c)
                    entries.append(_case_entry(spec, c, head, profiles))
                    _write_gz(root / str(head["landmark_folder"]) / f"{c.case_id}.json.gz", json.dumps(lms).encode("utf-8"))
                task[split] = entries
            _write_gz(root / f"benchmark_plan_biometry_v{spec.landmark_version}.json.gz", _plan(spec, [task]))
    counts = phantom_task_counts(data_dir)
    if tasks_list_dir is not None:
        write_tasks_lists(counts, tasks_list_dir)
    return counts


#: The phantom tasks of the bundled task lists: what upstream's launchers can run (annotation pin 1.0.0, as the
#: paper), so PhantomFetal (first published at 1.2.0) is in the data but not in these lists.
PHANTOM_TASKS: dict[str, tuple[str, ...]] = {
    "detect": ("PhantomCT_BoxCoordinate_Task01_Axial", "PhantomCT_BoxCoordinate_Task01_Coronal",
               "PhantomMR_BoxCoordinate_Task01_Axial", "PhantomMR_BoxCoordinate_Task01_Sagittal"),
    "TL": ("PhantomCT_TumorLesionSize_Task01_Axial", "PhantomCT_TumorLesionSize_Task02_Axial",
           "PhantomMR_TumorLesionSize_Task01_Axial", "PhantomMR_TumorLesionSize_Task01_Coronal"),
    "AD": ("PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal",
           "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal"),
}
#: The pin the bundled lists are counted at: upstream's launchers export these (the paper's annotations).
LAUNCHER_PIN = {"MedVision_PLANNER_VERSION": "1.0.0", "MedVision_ACK_RELEASE": "1.4.0"}


def phantom_task_counts(data_dir: Path, planner_version: str = LAUNCHER_PIN["MedVision_PLANNER_VERSION"],
                        ack: str = LAUNCHER_PIN["MedVision_ACK_RELEASE"]) -> dict[str, dict[str, int]]:
    """Samples per bundled phantom task at a pin (default filters), through the same reader real data uses."""
    pin = parse_planner_version(planner_version)
    data = DataDir(DatasetContract(Path(data_dir).resolve(), pin, ack, True))
    return {fam: {t: len(data.samples(t)) for t in names} for fam, names in PHANTOM_TASKS.items()}


def tasks_list_paths(tasks_list_dir: str | Path) -> dict[str, Path]:
    return {fam: Path(tasks_list_dir) / f"tasks_MedVision-Phantom-{fam}.json" for fam in ("detect", "TL", "AD")}


def write_tasks_lists(counts: dict[str, dict[str, int]], tasks_list_dir: str | Path) -> None:
    for fam, path in tasks_list_paths(tasks_list_dir).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(counts[fam], indent=4) + "\n")
