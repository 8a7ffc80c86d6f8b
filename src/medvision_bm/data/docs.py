"""The per-sample record (Doc, the upstream loader's row plus our key), the image as asked (View), and RunDoc."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from operator import attrgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any

from medvision_bm.jsontypes import JsonValue

if sys.version_info >= (3, 11):  # noqa: UP036 (the boot Python of the launchers may be 3.10)
    from enum import StrEnum
else:  # the launchers' boot Python may be 3.10 (envs/core.py reads the registry): StrEnum's behaviour by hand
    class StrEnum(str, Enum):  # noqa: UP042
        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


class Family(StrEnum):
    """The three task families (their values are upstream's folder and tag spellings: ``MedVision-detect`` ...)."""

    DETECT = "detect"
    TL = "TL"
    AD = "AD"


#: Every family, in report order.
FAMILIES: tuple[Family, ...] = tuple(Family)


class RunProtocol(StrEnum):
    """Which upstream generation a run follows: ``current`` (the newest code: ``<answer>`` prompts, the strict
    parser, newer metric rules) or ``paper`` (master c221615: the paper-era prompts, parser and rules). The value is
    what signatures, docs rows and results record."""

    CURRENT = "current"
    PAPER = "paper"


#: Task-type tokens of task names -> family. ``BoxSize`` is the Hugging Face config spelling of ``BoxCoordinate``.
TASK_TYPES: dict[str, str] = {
    "BoxCoordinate": "detect",
    "BoxSize": "detect",
    "TumorLesionSize": "TL",
    "BiometricsFromLandmarks": "AD",
}
FAMILY_TASK_TYPE: dict[str, str] = {"detect": "BoxCoordinate", "TL": "TumorLesionSize", "AD": "BiometricsFromLandmarks"}

#: Upstream's ``taskType`` strings of loaded rows (concepts.md @39dd6bf), per family and A/D subtype.
LOADER_TASK_TYPE: dict[tuple[str, str | None], str] = {
    ("detect", None): "Box-Size",
    ("TL", None): "Tumor-Lesion-Size",
    ("AD", None): "Biometrics-From-Landmarks",
    ("AD", "Distance"): "Biometrics-From-Landmarks-Distance",
    ("AD", "Angle"): "Biometrics-From-Landmarks-Angle",
}
PLANES: dict[str, int] = {"Sagittal": 0, "Coronal": 1, "Axial": 2}
PLANE_OF_DIM: dict[int, str] = {v: k for k, v in PLANES.items()}
#: The order of every upstream row's keys, as the loader's feature dicts list them.
UPSTREAM_FIELDS: tuple[str, ...] = (
    "dataset_name", "taskID", "taskType", "image_file", "mask_file", "landmark_file", "slice_dim", "slice_idx",
    "label", "image_size_2d", "pixel_size", "image_size_3d", "voxel_size", "bounding_boxes", "biometric_profile",
)


@dataclass(frozen=True, slots=True)
class Doc:
    """One benchmark sample: the row upstream's Hugging Face loader yields, plus what this suite adds.

    The upstream fields keep upstream's names and values (floats come back float16-rounded from the loader, and so
    they do here); file paths are stored relative to ``<data_dir>/Datasets`` so that a doc does not depend on where the
    data lives (``upstream_row`` gives the absolute paths upstream uses). ``index`` is the lmms-eval ``doc_id``: the
    position of the sample among the task's samples after upstream's filters. ``meta`` holds the task metadata
    the prompt and the grouping read (image description, modality, label and landmark names) and where it came from;
    docs of one task and label share one ``meta`` dict (never changed after it is made). Slotted: a run builds the docs
    it asks about together (a million of them at real scale; its selection keeps only keys, indices and hashes).
    """

    key: str
    task: str  # the task name as listed, variant suffix included
    family: str
    plane: str
    split: str
    index: int
    dataset_name: str
    taskID: str  # upstream's field names
    taskType: str
    image_file: str
    mask_file: str | None
    landmark_file: str | None
    slice_dim: int
    slice_idx: int
    label: int | None
    image_size_2d: tuple[int, int]
    pixel_size: tuple[float, float]
    image_size_3d: tuple[int, int, int]
    voxel_size: tuple[float, float, float]
    bounding_boxes: dict[str, list[list[float]]] | None = None
    biometric_profile: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def label_name(self) -> str:
        return str(self.meta.get("label_name") or "")

    @property
    def modality(self) -> str:
        return str(self.meta.get("image_modality") or "")

    @property
    def metric_type(self) -> str | None:
        """A/D: "distance" | "angle"; T/L: "distance" (axis lengths); detection: None."""
        bp = self.biometric_profile
        if not bp:
            return None
        mt = bp.get("metric_type")
        return mt[0] if isinstance(mt, list) else mt

    def field_values(self) -> tuple[object, ...]:
        """Every field's value, in declaration order (what the doc hash is made of)."""
        return _doc_values(self)

    def to_json(self) -> dict[str, object]:
        """A shallow JSON-ready dict (tuples as lists); much cheaper than ``dataclasses.asdict``."""
        return {name: list(v) if isinstance(v, tuple) else v for name, v in zip(DOC_FIELDS, _doc_values(self))}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Doc:
        data = dict(data)
        for name in ("image_size_2d", "pixel_size", "image_size_3d", "voxel_size"):
            data[name] = tuple(data[name])
        return cls(**data)

    def upstream_row(self, data_dir: str | Path) -> dict[str, object]:
        """The row exactly as upstream's loader yields it (absolute paths under ``<data_dir>/Datasets``)."""
        root = Path(data_dir) / "Datasets"
        row: dict[str, object] = {
            "dataset_name": self.dataset_name, "taskID": self.taskID, "taskType": self.taskType,
            "image_file": str(root / self.image_file),
        }
        if self.mask_file is not None:
            row["mask_file"] = str(root / self.mask_file)
        if self.landmark_file is not None:
            row["landmark_file"] = str(root / self.landmark_file)
        row.update(slice_dim=self.slice_dim, slice_idx=self.slice_idx)
        if self.label is not None:
            row["label"] = self.label
        row.update(image_size_2d=list(self.image_size_2d), pixel_size=list(self.pixel_size),
                   image_size_3d=list(self.image_size_3d), voxel_size=list(self.voxel_size))
        if self.bounding_boxes is not None:
            row["bounding_boxes"] = self.bounding_boxes
        if self.biometric_profile is not None:
            row["biometric_profile"] = self.biometric_profile
        return row


@dataclass(frozen=True, slots=True)
class Overlay:
    """What a visual-prompt variant (``-VP``, ``-VP-woMedImg``) draws on the picture sent, in its pixels.

    ``canvas`` is ``"slice"`` (the slice as shown) or ``"black"`` (upstream's black canvas of the slice's size);
    ``box`` the detection box as ((row_min, col_min), (row_max, col_max)); ``lines`` the landmark lines as
    ((row, col), (row, col), colour) in drawing order, each with its two end points; ``mask_contour`` whether the
    mask's outer contour is drawn first. Coordinates are the landmark file's or the box's, scaled as upstream scales
    them under a reshape. ``rule`` names the drawing rule and its version (data/overlay.py), which the answer
    signature records. Built by ``data.overlay.overlay_for``; drawn by ``data.overlay.draw``.
    """

    rule: str
    canvas: str
    box: tuple[tuple[float, float], tuple[float, float]] | None = None
    lines: tuple[tuple[tuple[float, float], tuple[float, float], str], ...] = ()
    mask_contour: bool = False

    def field_values(self) -> tuple[object, ...]:
        return (self.rule, self.canvas, self.box, self.lines, self.mask_contour)

    def to_json(self) -> dict[str, object]:
        return {"rule": self.rule, "canvas": self.canvas,
                "box": [list(self.box[0]), list(self.box[1])] if self.box is not None else None,
                "lines": [[list(a), list(b), colour] for a, b, colour in self.lines],
                "mask_contour": self.mask_contour}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Overlay:
        box = data.get("box")
        return cls(rule=str(data["rule"]), canvas=str(data["canvas"]),
                   box=((box[0][0], box[0][1]), (box[1][0], box[1][1])) if box is not None else None,
                   lines=tuple(((a[0], a[1]), (b[0], b[1]), str(colour)) for a, b, colour in data.get("lines") or ()),
                   mask_contour=bool(data.get("mask_contour", False)))


@dataclass(frozen=True, slots=True)
class View:
    """The image as the model receives it and what the prompt states about it.

    ``image_hw`` is the size of the image sent (after the optional reshape) and ``pixel_hw_mm`` the physical size
    of one of its pixels (the NIfTI header spacing divided by the reshape zoom, in float32 as upstream computes it).
    ``canvas_hw`` is the size the model perceives (its processor's canvas: the image size T/L and A/D prompts state)
    and ``stated_pixel_hw_mm`` the pixel size they state (``pixel_hw_mm`` divided by ``content_hw / image_hw``, the
    part of the canvas the image fills). ``header_pixel_hw`` is the native slice's spacing (nMAE's diagonal).
    ``client_resize_hw`` is set for API models, whose client resizes the picture to the provider's fixed point before
    sending it (upstream's API model files, ``_encode_image``, LANCZOS).

    ``-CoT-scaledPS`` samples only: ``pixel_scale_hw`` holds upstream's per-sample factors (s_h, s_w) that multiply
    the stated pixel size, and ``scaled_target`` the answer a perfect model then gives (upstream's
    ``doc_to_target_*_scaledPS``). Both are None for every other sample and are then left out of the doc hash and
    the JSON, so the samples of other variants hash as they always did.

    Visual-prompt samples (``-VP``, ``-VP-woMedImg``) only: ``overlay`` is what is drawn on the picture (see
    :class:`Overlay`); None for every other sample, and then left out of the doc hash and the JSON likewise.
    """

    image_hw: tuple[int, int]
    pixel_hw_mm: tuple[float, float]
    canvas_hw: tuple[int, int]
    content_hw: tuple[int, int]
    stated_pixel_hw_mm: tuple[float, float]
    header_pixel_hw: tuple[float, float]
    reshape_hw: tuple[int, int] | None = None
    client_resize_hw: tuple[int, int] | None = None
    pixel_scale_hw: tuple[float, float] | None = None
    scaled_target: tuple[float, ...] | None = None
    overlay: Overlay | None = None

    def _scaled(self) -> bool:
        return self.pixel_scale_hw is not None or self.scaled_target is not None

    def field_values(self) -> tuple[object, ...]:
        """Every field's value, in declaration order (what the doc hash is made of)."""
        values = _view_values(self) + (_view_scaled_values(self) if self._scaled() else ())
        return (*values, self.overlay.field_values()) if self.overlay is not None else values

    def to_json(self) -> dict[str, object]:
        names = _BASE_VIEW_FIELDS + (_SCALED_VIEW_FIELDS if self._scaled() else ())
        values = _view_values(self) + (_view_scaled_values(self) if self._scaled() else ())
        out = {name: list(v) if isinstance(v, tuple) else v for name, v in zip(names, values)}
        if self.overlay is not None:
            out["overlay"] = self.overlay.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> View:
        overlay = data.get("overlay")
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items() if k != "overlay"},
                   overlay=Overlay.from_json(overlay) if overlay is not None else None)


#: The field names of Doc and View in declaration order, and getters of all their values at once.
DOC_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Doc))
VIEW_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(View))
_SCALED_VIEW_FIELDS: tuple[str, ...] = ("pixel_scale_hw", "scaled_target")  # set for scaledPS only
_OPTIONAL_VIEW_FIELDS: tuple[str, ...] = (*_SCALED_VIEW_FIELDS, "overlay")  # the last ones, each group set or left out
_BASE_VIEW_FIELDS: tuple[str, ...] = VIEW_FIELDS[:len(VIEW_FIELDS) - len(_OPTIONAL_VIEW_FIELDS)]
_doc_values = attrgetter(*DOC_FIELDS)
_view_values = attrgetter(*_BASE_VIEW_FIELDS)
_view_scaled_values = attrgetter(*_SCALED_VIEW_FIELDS)
#: RunDoc's default ``extra``: one shared read-only empty mapping, not an empty dict per sample.
NO_EXTRA: MappingProxyType[str, JsonValue] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class RunDoc:
    """What the harness carries per sample: the doc, the view, the protocol and variant, and where the data lives.

    Serialized for lmms-eval as ``{"key": ..., "payload": "<json>"}`` so Arrow never has to infer a schema for
    family-specific fields.
    """

    doc: Doc
    view: View
    protocol: str = RunProtocol.CURRENT
    variant: str = ""  # the task-name suffix: "", "-CoT", "-CoT-woInstruct", ...
    data_root: str = ""  # absolute data folder at run time (never stored in results)
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: NO_EXTRA)  # shared, not copied

    def to_lmms_row(self) -> dict[str, str]:
        payload = {"doc": self.doc.to_json(), "view": self.view.to_json(), "protocol": self.protocol,
                   "variant": self.variant, "data_root": self.data_root, "extra": dict(self.extra)}
        return {"key": self.doc.key, "payload": json.dumps(payload, sort_keys=True)}

    @classmethod
    def from_lmms_row(cls, row: Mapping[str, object]) -> RunDoc:
        text = row["payload"]
        if not isinstance(text, str | bytes | bytearray):
            raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(text).__name__}")
        payload = json.loads(text)
        return cls(doc=Doc.from_json(payload["doc"]), view=View.from_json(payload["view"]),
                   protocol=payload.get("protocol", RunProtocol.CURRENT), variant=payload.get("variant", ""),
                   data_root=payload.get("data_root", ""), extra=payload.get("extra") or NO_EXTRA)


def rundoc_from_store_row(row: dict[str, Any]) -> RunDoc:
    """A ``docs.jsonl`` row of a sample store as a RunDoc; rows of stores written before the upstream data layer
    (schema with ``annotation`` and ``seen_hw``) are converted so their answers can be scored again."""
    doc, view = row["doc"], row["view"]
    if "annotation" in doc:
        return _legacy_rundoc(doc, view)
    return RunDoc(Doc.from_json(doc), View.from_json(view), row.get("protocol") or RunProtocol.CURRENT,
                  row.get("variant") or "")


def _legacy_rundoc(doc: dict[str, Any], view: dict[str, Any]) -> RunDoc:
    """An older store's sample: the target it was asked about (on its own picture) is kept exactly.

    Its detection box was stored on pixel edges ``box_px = [x0, y0, x1, y1]``; as min/max indices (rows, cols) with
    upstream's target formula ``[min_col / W, (H - max_row) / H, max_col / W, (H - min_row) / H]`` the very same
    relative box comes out. Lesion axes and A/D values carry over; the nMAE diagonal uses its native pixel size.
    """
    ann = doc["annotation"]
    family = doc["family"]
    h, w = (int(v) for v in doc["image_hw"])
    ph, pw = (float(v) for v in doc["pixel_hw_mm"])
    bb = bp = None
    if family == "detect":
        x0, y0, x1, y1 = ann["box_px"]
        bb = {"min_coords": [[y0, x0]], "max_coords": [[y1, x1]], "center_coords": [[(y0 + y1) / 2, (x0 + x1) / 2]],
              "dimensions": [[y1 - y0, x1 - x0]], "sizes": [[(y1 - y0) * ph, (x1 - x0) * pw]]}
    elif family == "TL":
        bp = {"metric_type": ["distance"], "metric_map_name": ["lines_map"], "metric_key_major_axis": ["L-1-2"],
              "metric_value_major_axis": [float(ann["major_axis_mm"])], "metric_key_minor_axis": ["L-3-4"],
              "metric_value_minor_axis": [float(ann["minor_axis_mm"])], "metric_unit": ["mm"]}
    else:
        bp = {"metric_type": ann.get("metric", "distance"), "metric_map_name": "", "metric_key":
              ann.get("measure_id", ""), "metric_value": float(ann["value"]), "metric_unit": ann.get("unit", "mm"),
              "slice_dim": int(doc["slice_dim"])}
    sx, sy, sz = (float(v) for v in doc["spacing_mm"])
    new = Doc(key=doc["key"], task=doc["task"], family=family, plane=doc["plane"], split=doc.get("split", "test"),
              index=int(doc["index"]), dataset_name=doc["dataset"], taskID=str(doc.get("task_id", "Task01"))[-2:],
              taskType=LOADER_TASK_TYPE[(family, None)], image_file=doc["image"], mask_file=doc.get("mask"),
              landmark_file=None, slice_dim=int(doc["slice_dim"]), slice_idx=int(doc["slice_idx"]),
              label=int(doc["label"]) if family != "AD" else None, image_size_2d=(h, w), pixel_size=(ph, pw),
              image_size_3d=(0, 0, 0), voxel_size=(sx, sy, sz), bounding_boxes=bb, biometric_profile=bp,
              meta={"label_name": doc.get("label_name"), "image_modality": doc.get("modality", ""),
                    "image_description": "", "source": "legacy store (before the upstream data layer)"})
    seen_h, seen_w = (int(v) for v in view["seen_hw"])
    seen = (seen_h, seen_w)
    v = View(image_hw=seen, pixel_hw_mm=tuple(view["pixel_hw_mm"]), canvas_hw=seen, content_hw=seen,
             stated_pixel_hw_mm=tuple(view["pixel_hw_mm"]), header_pixel_hw=(ph, pw),
             reshape_hw=tuple(view["reshape_hw"]) if view.get("reshape_hw") else None)
    return RunDoc(new, v, RunProtocol.CURRENT, "")
