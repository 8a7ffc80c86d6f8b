"""The per-sample record (Doc) and the view of its image as the model receives it (View)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FAMILIES: tuple[str, ...] = ("detect", "TL", "AD")

#: MedVision task-type names per family, as they appear in task names.
TASK_TYPES: dict[str, str] = {
    "BoxCoordinate": "detect",
    "TumorLesionSize": "TL",
    "BiometricsFromLandmarks": "AD",
}
FAMILY_TASK_TYPE: dict[str, str] = {v: k for k, v in TASK_TYPES.items()}


@dataclass(frozen=True)
class Doc:
    """One benchmark sample: which slice of which image, what is asked, and the annotation.

    Coordinates in ``annotation`` use the planner's pixel frame of the native slice: origin at the top-left
    corner of the top-left pixel, x to the right (columns), y downwards (rows), in pixel units; a pixel
    (row r, column c) covers [c, c+1) x [r, r+1). Boxes are ``box_px = [x_min, y_min, x_max, y_max]`` on pixel
    edges. Lesion axes are in mm, landmarks in pixels, angles in degrees.
    """

    key: str
    task: str
    dataset: str
    family: str
    task_type: str
    task_id: str
    plane: str
    split: str
    index: int
    image: str  # path relative to the dataset folder
    slice_dim: int
    slice_idx: int
    label: int
    label_name: str
    structure_kind: str  # "anatomy" | "lesion" | "landmarks"
    modality: str
    anatomy: str
    spacing_mm: tuple[float, float, float]
    image_hw: tuple[int, int]  # native slice (rows, columns)
    pixel_hw_mm: tuple[float, float]  # native pixel (height mm, width mm)
    annotation: dict[str, Any]
    measurement: str  # what the question asks for, in words
    mask: str | None = None
    window: tuple[float, float] | None = None  # display window for intensities (CT), else percentiles

    def to_json(self) -> dict[str, Any]:
        """A shallow JSON-ready dict (tuples as lists); much cheaper than ``dataclasses.asdict``."""
        return {name: list(v) if isinstance(v, tuple) else v for name, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Doc:
        data = dict(data)
        data["spacing_mm"] = tuple(data["spacing_mm"])
        data["image_hw"] = tuple(data["image_hw"])
        data["pixel_hw_mm"] = tuple(data["pixel_hw_mm"])
        if data.get("window"):
            data["window"] = tuple(data["window"])
        return cls(**data)


@dataclass(frozen=True)
class View:
    """The image as the model receives it: its size and the physical size of one of its pixels.

    ``reshape_hw`` is set when the suite itself resizes the slice before sending it; ``seen_hw`` is the size
    the model actually processes (equal to the sent size unless the model's processor resizes again).
    """

    seen_hw: tuple[int, int]
    pixel_hw_mm: tuple[float, float]
    reshape_hw: tuple[int, int] | None = None

    @classmethod
    def for_doc(cls, doc: Doc, reshape_hw: tuple[int, int] | None = None,
                processed_hw: tuple[int, int] | None = None) -> View:
        """Pixel size scales with the resize: h_mm' = h_mm * H / H', w_mm' = w_mm * W / W'."""
        native_h, native_w = doc.image_hw
        sent_hw = reshape_hw or (native_h, native_w)
        seen_hw = processed_hw or sent_hw
        ph, pw = doc.pixel_hw_mm
        return cls(
            seen_hw=(int(seen_hw[0]), int(seen_hw[1])),
            pixel_hw_mm=(ph * native_h / seen_hw[0], pw * native_w / seen_hw[1]),
            reshape_hw=tuple(reshape_hw) if reshape_hw else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {"seen_hw": list(self.seen_hw), "pixel_hw_mm": list(self.pixel_hw_mm),
                "reshape_hw": list(self.reshape_hw) if self.reshape_hw else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> View:
        return cls(seen_hw=tuple(data["seen_hw"]), pixel_hw_mm=tuple(data["pixel_hw_mm"]),
                   reshape_hw=tuple(data["reshape_hw"]) if data.get("reshape_hw") else None)


@dataclass(frozen=True)
class RunDoc:
    """What the harness carries per sample: the doc, the view, the prompt variant and where the data lives.

    Serialized for lmms-eval as ``{"key": ..., "payload": "<json>"}`` so Arrow never has to infer a schema for
    family-specific annotations.
    """

    doc: Doc
    view: View
    prompt_variant: str = "plain"  # "plain" | "reasoning"
    data_root: str = ""  # absolute dataset folder at run time (never stored in results)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_lmms_row(self) -> dict[str, str]:
        payload = {"doc": self.doc.to_json(), "view": self.view.to_json(), "prompt_variant": self.prompt_variant,
                   "data_root": self.data_root, "extra": self.extra}
        return {"key": self.doc.key, "payload": json.dumps(payload, sort_keys=True)}

    @classmethod
    def from_lmms_row(cls, row: dict[str, Any]) -> RunDoc:
        payload = json.loads(row["payload"])
        return cls(doc=Doc.from_json(payload["doc"]), view=View.from_json(payload["view"]),
                   prompt_variant=payload.get("prompt_variant", "plain"),
                   data_root=payload.get("data_root", ""), extra=payload.get("extra") or {})
