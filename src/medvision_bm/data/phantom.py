"""A deterministic synthetic dataset in the MedVision layout: CT, MR and X-ray phantoms with masks and landmarks.

Everything is computed from the masks and landmarks the way MedVision defines its targets: detection boxes from
the mask on the slice, lesion sizes from an ellipse fitted to the lesion mask on the slice (mm), distances and
angles from landmark coordinates and the pixel spacing. Plans are written for every planner version.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medvision_bm.data.layout import PLAN_SCHEMA, plan_filename
from medvision_bm.data.planner import PLANNER_VERSIONS
from medvision_bm.data.slices import pixel_hw_mm, remaining_axes, slice_to_display, voxel_to_display_xy
from medvision_bm.geometry import box_from_mask, distance_mm, ellipse_axes_mm, line_angle_deg

DEFAULT_SEED = 20251123
PLANE_DIM = {"Sagittal": 0, "Coronal": 1, "Axial": 2}


@dataclass(frozen=True)
class Structure:
    label: int
    name: str
    kind: str  # "anatomy" | "lesion"
    centre: tuple[float, float, float]  # fraction of the field of view
    radii: tuple[float, float, float]  # fraction of the field of view
    intensity: float
    rotate: bool = False  # random in-plane rotation (axial)


@dataclass(frozen=True)
class PhantomSpec:
    name: str
    modality: str
    anatomy: str
    shape: tuple[int, int, int]
    spacing_choices: tuple[tuple[float, float, float], ...]
    n_train: int
    n_test: int
    background: float
    noise: float
    body: tuple[tuple[float, float, float], tuple[float, float, float], float] | None
    structures: tuple[Structure, ...]
    detect_planes: tuple[str, ...] = ()
    tl_planes: tuple[str, ...] = ()
    marker_slices: int = 0  # distance-marker pairs on separate axial slices (3D)
    ceph: bool = False  # 2D radiograph with a bright and a grey marker pair
    dtype: str = "int16"
    window: tuple[float, float] | None = None  # display window (CT: HU), else percentiles


SPECS: tuple[PhantomSpec, ...] = (
    PhantomSpec(
        name="PhantomCT", modality="CT", anatomy="abdomen", shape=(128, 112, 48),
        spacing_choices=((0.8, 0.8, 2.5), (0.7, 0.7, 3.0), (0.9, 0.9, 2.0)),
        n_train=5, n_test=2, background=-1000.0, noise=12.0,
        body=((0.5, 0.5, 0.5), (0.44, 0.40, 0.75), -20.0),
        structures=(
            Structure(1, "liver", "anatomy", (0.34, 0.52, 0.55), (0.17, 0.16, 0.30), 80.0),
            Structure(2, "spleen", "anatomy", (0.70, 0.62, 0.58), (0.07, 0.09, 0.22), 130.0),
            Structure(3, "right kidney", "anatomy", (0.37, 0.30, 0.40), (0.06, 0.07, 0.18), 200.0),
            Structure(4, "left kidney", "anatomy", (0.65, 0.30, 0.40), (0.06, 0.07, 0.18), 200.0),
            Structure(5, "liver tumor", "lesion", (0.32, 0.55, 0.55), (0.07, 0.045, 0.14), 10.0, rotate=True),
            Structure(6, "kidney tumor", "lesion", (0.66, 0.28, 0.42), (0.035, 0.03, 0.10), 90.0, rotate=True),
        ),
        window=(-160.0, 240.0),
        detect_planes=("Axial", "Coronal"), tl_planes=("Axial",), dtype="int16",
    ),
    PhantomSpec(
        name="PhantomMR", modality="MR", anatomy="brain", shape=(96, 112, 72),
        spacing_choices=((1.0, 1.0, 1.4), (1.1, 1.1, 1.2), (0.9, 0.9, 1.5)),
        n_train=4, n_test=2, background=15.0, noise=20.0,
        body=((0.5, 0.5, 0.5), (0.40, 0.42, 0.40), 600.0),
        structures=(
            Structure(1, "lateral ventricles", "anatomy", (0.5, 0.52, 0.55), (0.12, 0.16, 0.10), 1050.0),
            Structure(2, "glioma", "lesion", (0.62, 0.40, 0.50), (0.09, 0.07, 0.12), 880.0, rotate=True),
        ),
        detect_planes=("Axial", "Sagittal"), tl_planes=("Axial", "Coronal"), marker_slices=4, dtype="uint16",
    ),
    PhantomSpec(
        name="PhantomXR", modality="X-ray", anatomy="skull (lateral cephalogram)", shape=(160, 128, 1),
        spacing_choices=((0.4, 0.4, 1.0), (0.35, 0.35, 1.0), (0.45, 0.45, 1.0)),
        n_train=12, n_test=8, background=300.0, noise=15.0,
        body=((0.5, 0.5, 0.5), (0.38, 0.40, 1.0), 900.0),
        structures=(), ceph=True, dtype="uint16",
    ),
)

#: Planner settings per version: minimum structure area on a slice (pixels), slices kept per structure and case,
#: and the smallest minor axis (mm) a tumor/lesion-size sample may have.
PLANNER_SETTINGS: dict[str, dict[str, float]] = {
    "1.0.0": {"min_area_px": 12, "detect_per_case": 2, "tl_per_case": 3, "tl_min_minor_mm": 0.0},
    "1.1.0": {"min_area_px": 25, "detect_per_case": 3, "tl_per_case": 4, "tl_min_minor_mm": 4.0},
}
MARKER_RADIUS_MM = 2.0
GREY_MARKER_LEVEL = 0.62  # fraction between background and bright markers


def _rng(seed: int, *parts: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *parts]))


def _ellipsoid(shape, spacing, centre_mm, radii_mm, angle_rad=0.0) -> np.ndarray:
    """Boolean mask of a (z-axis rotated) ellipsoid, computed on its bounding sub-box only."""
    mask = np.zeros(shape, dtype=bool)
    reach = max(radii_mm[0], radii_mm[1])
    lo = [max(0, math.floor((centre_mm[d] - (reach if d < 2 else radii_mm[2])) / spacing[d]) - 1) for d in range(3)]
    hi = [min(shape[d], math.ceil((centre_mm[d] + (reach if d < 2 else radii_mm[2])) / spacing[d]) + 2) for d in range(3)]
    if any(h <= low for low, h in zip(lo, hi)):
        return mask
    grids = np.meshgrid(*[np.arange(lo[d], hi[d]) * spacing[d] - centre_mm[d] for d in range(3)], indexing="ij")
    x, y, z = grids
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    u, v = c * x + s * y, -s * x + c * y
    inside = (u / radii_mm[0]) ** 2 + (v / radii_mm[1]) ** 2 + (z / radii_mm[2]) ** 2 <= 1.0
    mask[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = inside
    return mask


def _sphere(shape, spacing, centre_ijk, radius_mm) -> np.ndarray:
    centre_mm = [centre_ijk[d] * spacing[d] for d in range(3)]
    radii = [radius_mm if shape[d] > 1 else max(radius_mm, spacing[d]) for d in range(3)]
    return _ellipsoid(shape, spacing, centre_mm, radii)


@dataclass
class Case:
    name: str
    split: str
    volume: np.ndarray
    mask: np.ndarray
    spacing: tuple[float, float, float]
    markers: list[dict[str, Any]]


def make_case(spec: PhantomSpec, spec_index: int, case_index: int, seed: int) -> Case:
    rng = _rng(seed, spec_index, case_index)
    spacing = spec.spacing_choices[int(rng.integers(len(spec.spacing_choices)))]
    shape = spec.shape
    fov = [shape[d] * spacing[d] for d in range(3)]
    vol = np.full(shape, spec.background, dtype=np.float32)
    mask = np.zeros(shape, dtype=np.uint8)
    if spec.body is not None:
        centre, radii, value = spec.body
        body = _ellipsoid(shape, spacing, [centre[d] * fov[d] for d in range(3)],
                          [radii[d] * fov[d] if shape[d] > 1 else 1e6 for d in range(3)])
        vol[body] = value
    for st in spec.structures:
        jitter = rng.uniform(-0.04, 0.04, 3)
        scale = rng.uniform(0.8, 1.2, 3)
        centre_mm = [(st.centre[d] + jitter[d]) * fov[d] for d in range(3)]
        radii_mm = [st.radii[d] * scale[d] * fov[d] for d in range(3)]
        angle = float(rng.uniform(0, math.pi)) if st.rotate else 0.0
        region = _ellipsoid(shape, spacing, centre_mm, radii_mm, angle)
        vol[region] = st.intensity
        mask[region] = st.label
    markers: list[dict[str, Any]] = []
    if spec.marker_slices:
        bright = float(vol.max()) * 1.6
        used: list[int] = []
        for pair in range(spec.marker_slices):
            for _ in range(100):
                k = int(rng.integers(int(0.2 * shape[2]), int(0.8 * shape[2])))
                if all(abs(k - u) * spacing[2] > 4 * MARKER_RADIUS_MM for u in used):
                    break
            used.append(k)
            pts = []
            while len(pts) < 2:
                ij = (int(rng.integers(int(0.15 * shape[0]), int(0.85 * shape[0]))),
                      int(rng.integers(int(0.15 * shape[1]), int(0.85 * shape[1]))))
                if not pts or math.hypot((ij[0] - pts[0][0]) * spacing[0], (ij[1] - pts[0][1]) * spacing[1]) > 20:
                    pts.append(ij)
            for n, (i, j) in enumerate(pts):
                ijk = (i, j, k)
                vol[_sphere(shape, spacing, ijk, MARKER_RADIUS_MM)] = bright
                markers.append({"name": f"M{pair + 1}{'ab'[n]}", "ijk": list(ijk), "group": f"pair{pair + 1}",
                                "kind": "bright"})
    if spec.ceph:
        bright = spec.body[2] * 2.2 if spec.body else 2000.0
        grey = spec.background + GREY_MARKER_LEVEL * (bright - spec.background)
        for group, level in (("line1", bright), ("line2", grey)):
            while True:
                a = (int(rng.integers(int(0.12 * shape[0]), int(0.88 * shape[0]))),
                     int(rng.integers(int(0.12 * shape[1]), int(0.88 * shape[1]))))
                b = (int(rng.integers(int(0.12 * shape[0]), int(0.88 * shape[0]))),
                     int(rng.integers(int(0.12 * shape[1]), int(0.88 * shape[1]))))
                far = math.hypot((a[0] - b[0]) * spacing[0], (a[1] - b[1]) * spacing[1]) > 15
                clear = all(math.hypot((p[0] - m["ijk"][0]) * spacing[0], (p[1] - m["ijk"][1]) * spacing[1]) > 6
                            for p in (a, b) for m in markers)
                if far and clear:
                    break
            for n, (i, j) in enumerate((a, b)):
                ijk = (i, j, 0)
                vol[_sphere(shape, spacing, ijk, MARKER_RADIUS_MM * 0.7)] = level
                markers.append({"name": f"{'L' if group == 'line1' else 'G'}{n + 1}", "ijk": list(ijk),
                                "group": group, "kind": "bright" if group == "line1" else "grey"})
    noise = rng.normal(0.0, spec.noise, shape).astype(np.float32)
    vol = vol + noise
    if spec.modality == "MR":
        vol = np.abs(vol)
    split = "train" if case_index < spec.n_train else "test"
    return Case(f"{spec.name}_case{case_index:03d}", split, vol, mask, spacing, markers)


def _select(indices: list[int], k: int) -> list[int]:
    """Up to k evenly spaced items of a sorted list (deterministic)."""
    if len(indices) <= k:
        return indices
    pos = np.linspace(0, len(indices) - 1, k + 2)[1:-1]
    return [indices[round(p)] for p in pos]


def plan_case(spec: PhantomSpec, case: Case, version: str) -> dict[str, list[dict[str, Any]]]:
    """Samples of one case per task name, for one planner version."""
    cfg = PLANNER_SETTINGS[version]
    out: dict[str, list[dict[str, Any]]] = {}
    image = f"Images/{case.name}.nii.gz"
    mask_path = f"Masks/{case.name}.nii.gz"
    base = {"image": image, "spacing_mm": list(case.spacing)}

    def common(dim: int, idx: int) -> dict[str, Any]:
        a, b = remaining_axes(dim)
        return {**base, "slice_dim": dim, "slice_idx": idx, "image_hw": [case.mask.shape[b], case.mask.shape[a]],
                "pixel_hw_mm": list(pixel_hw_mm(case.spacing, dim))}

    for plane in spec.detect_planes:
        dim = PLANE_DIM[plane]
        name = f"{spec.name}_BoxCoordinate_Task01_{plane}"
        rows = out.setdefault(name, [])
        for st in spec.structures:
            areas = (case.mask == st.label).sum(axis=tuple(d for d in range(3) if d != dim))
            ok = [int(i) for i in np.flatnonzero(areas >= cfg["min_area_px"])]
            for idx in _select(ok, int(cfg["detect_per_case"])):
                m2 = slice_to_display(case.mask, dim, idx) == st.label
                box = box_from_mask(m2)
                h, w = m2.shape
                rows.append({**common(dim, idx), "mask": mask_path, "label": st.label, "label_name": st.name,
                             "structure_kind": st.kind, "measurement": f"the bounding box of the {st.name}",
                             "annotation": {"box_px": box, "box_area_ratio": (box[2] - box[0]) * (box[3] - box[1]) / (h * w)}})
    for plane in spec.tl_planes:
        dim = PLANE_DIM[plane]
        name = f"{spec.name}_TumorLesionSize_Task01_{plane}"
        rows = out.setdefault(name, [])
        for st in (s for s in spec.structures if s.kind == "lesion"):
            areas = (case.mask == st.label).sum(axis=tuple(d for d in range(3) if d != dim))
            ok = [int(i) for i in np.flatnonzero(areas >= cfg["min_area_px"])]
            for idx in _select(ok, int(cfg["tl_per_case"])):
                m2 = slice_to_display(case.mask, dim, idx) == st.label
                major, minor, centre, angle = ellipse_axes_mm(m2, pixel_hw_mm(case.spacing, dim))
                if minor < cfg["tl_min_minor_mm"]:
                    continue
                rows.append({**common(dim, idx), "mask": mask_path, "label": st.label, "label_name": st.name,
                             "structure_kind": "lesion",
                             "measurement": f"the major and minor axis lengths of the {st.name}",
                             "annotation": {"major_axis_mm": major, "minor_axis_mm": minor, "centre_px": centre,
                                            "angle_deg": angle, "unit": "mm"}})
    if spec.marker_slices:
        name = f"{spec.name}_BiometricsFromLandmarks_Task01_Axial"
        rows = out.setdefault(name, [])
        dim = PLANE_DIM["Axial"]
        groups: dict[str, list[dict[str, Any]]] = {}
        for m in case.markers:
            groups.setdefault(m["group"], []).append(m)
        for group, (p, q) in groups.items():
            pts = {m["name"]: list(voxel_to_display_xy(m["ijk"], dim, case.mask.shape)) for m in (p, q)}
            px = pixel_hw_mm(case.spacing, dim)
            rows.append({**common(dim, p["ijk"][2]), "label": 0, "label_name": "markers", "structure_kind": "landmarks",
                         "measurement": "the distance between the two bright markers",
                         "annotation": {"metric": "distance", "landmarks": pts, "points": [p["name"], q["name"]],
                                        "value": distance_mm(pts[p["name"]], pts[q["name"]], px), "unit": "mm",
                                        "measure_id": f"dist-{group}"}})
    if spec.ceph:
        dim = PLANE_DIM["Axial"]  # a 2D image is stored as one slice along the third axis
        plane = "Sagittal"  # a lateral radiograph shows the sagittal plane
        pts = {m["name"]: list(voxel_to_display_xy(m["ijk"], dim, case.mask.shape)) for m in case.markers}
        px = pixel_hw_mm(case.spacing, dim)
        lm = {"label": 0, "label_name": "markers", "structure_kind": "landmarks"}
        out.setdefault(f"{spec.name}_BiometricsFromLandmarks_Task01_{plane}", []).append(
            {**common(dim, 0), **lm, "measurement": "the distance between the two bright markers",
             "annotation": {"metric": "distance", "landmarks": {k: pts[k] for k in ("L1", "L2")}, "points": ["L1", "L2"],
                            "value": distance_mm(pts["L1"], pts["L2"], px), "unit": "mm", "measure_id": "dist-L1-L2"}})
        out.setdefault(f"{spec.name}_BiometricsFromLandmarks_Task02_{plane}", []).append(
            {**common(dim, 0), **lm,
             "measurement": "the angle between the line through the two bright markers and the line through the two grey markers",
             "annotation": {"metric": "angle", "landmarks": pts, "lines": [["L1", "L2"], ["G1", "G2"]],
                            "value": line_angle_deg(pts["L1"], pts["L2"], pts["G1"], pts["G2"], px), "unit": "deg",
                            "measure_id": "angle-L-G"}})
    return out


def _write_gz(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(gzip.compress(data, compresslevel=6, mtime=0))
    tmp.replace(path)


def _nifti_bytes(array: np.ndarray, spacing: tuple[float, float, float], dtype: str) -> bytes:
    import nibabel as nib

    arr = np.rint(array).astype(dtype) if dtype != "float32" else array.astype(np.float32)
    img = nib.Nifti1Image(arr, np.diag([*spacing, 1.0]))
    img.header.set_zooms(spacing)
    img.header.set_xyzt_units("mm")
    return img.to_bytes()


def make_phantom(data_dir: str | Path, seed: int = DEFAULT_SEED, tasks_list_dir: str | Path | None = None) -> dict[str, dict[str, int]]:
    """Write every phantom dataset under ``data_dir``; returns {family: {task: test count}} for the latest planner."""
    from medvision_bm.data.docs import TASK_TYPES
    from medvision_bm.data.layout import parse_task_name

    data_dir = Path(data_dir)
    latest_counts: dict[str, dict[str, int]] = {"detect": {}, "TL": {}, "AD": {}}
    for si, spec in enumerate(SPECS):
        root = data_dir / "Datasets" / spec.name
        plans: dict[str, dict[str, dict[str, list]]] = {v: {} for v in PLANNER_VERSIONS}
        for ci in range(spec.n_train + spec.n_test):
            case = make_case(spec, si, ci, seed)
            _write_gz(root / "Images" / f"{case.name}.nii.gz", _nifti_bytes(case.volume, case.spacing, spec.dtype))
            _write_gz(root / "Masks" / f"{case.name}.nii.gz", _nifti_bytes(case.mask, case.spacing, "uint8"))
            if case.markers:
                lm_path = root / "Landmarks" / f"{case.name}.json"
                lm_path.parent.mkdir(parents=True, exist_ok=True)
                lm_path.write_text(json.dumps({"spacing_mm": list(case.spacing), "markers": case.markers}, indent=1))
            for version in PLANNER_VERSIONS:
                for task, rows in plan_case(spec, case, version).items():
                    plans[version].setdefault(task, {"train": [], "test": []})[case.split].extend(rows)
        info = {"name": spec.name, "modality": spec.modality, "anatomy": spec.anatomy, "seed": seed,
                "labels": {str(s.label): {"name": s.name, "kind": s.kind} for s in spec.structures},
                "window": list(spec.window) if spec.window else None}
        (root / "dataset.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
        for version, tasks in plans.items():
            plan = {"schema": PLAN_SCHEMA, "dataset": spec.name, "planner_version": version, "dataset_info": info,
                    "planner_settings": PLANNER_SETTINGS[version],
                    "tasks": {name: {"task_type": parse_task_name(name).task_type,
                                     "family": TASK_TYPES[parse_task_name(name).task_type], "splits": splits}
                              for name, splits in sorted(tasks.items())}}
            _write_gz(root / "BenchmarkPlans" / plan_filename(spec.name, version),
                      json.dumps(plan, sort_keys=True).encode("utf-8"))
            if version == PLANNER_VERSIONS[-1]:
                for name, splits in tasks.items():
                    latest_counts[TASK_TYPES[parse_task_name(name).task_type]][name] = len(splits["test"])
    if tasks_list_dir is not None:
        write_tasks_lists(latest_counts, tasks_list_dir)
    return latest_counts


def tasks_list_paths(tasks_list_dir: str | Path) -> dict[str, Path]:
    return {fam: Path(tasks_list_dir) / f"tasks_MedVision-Phantom-{fam}.json" for fam in ("detect", "TL", "AD")}


def write_tasks_lists(counts: dict[str, dict[str, int]], tasks_list_dir: str | Path) -> None:
    for fam, path in tasks_list_paths(tasks_list_dir).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(sorted(counts[fam].items())), indent=4) + "\n")
