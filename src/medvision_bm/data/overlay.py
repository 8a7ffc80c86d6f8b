"""Upstream's visual prompts: the box, landmark lines or mask contour drawn on the slice of a ``-VP`` task.

Upstream (YongchengYAO/MedVision ``src/medvision_bm/medvision_lmms_eval/lmms_eval/tasks/medvision/medvision_utils.py``
@0a4c5e2: ``doc_to_visual_wBox`` / ``_wBox_woMedImg``, ``doc_to_visual_wVisualPrompt_TLTask`` / ``_TLTask_woMedImg``,
``_distanceTask`` / ``_distanceTask_woMedImg``, ``_angleTask`` / ``_angleTask_woMedImg``; the drawing helpers
``add_bbox_overlay``, ``add_landmarks_and_line_overlay``, ``add_mask_overlay_contour`` of
``medvision_ds.utils.doc_to_visual_utils``, whose older copy is YongchengYAO/biometric_vqa
``src/biometric_vqa/utils/doc_to_visual_utils.py`` @7eb775b; spec: docs/spec/image-and-prompts.md section 1.5):

- The picture: ``-VP`` draws on the slice as shown (grey ``L`` -> ``RGB``); ``-VP-woMedImg`` on a black canvas of the
  (resized) slice's size.
- Detection: the box's outline, ``min_coords[0]`` to ``max_coords[0]`` of the doc (rows, columns), PIL
  ``ImageDraw.rectangle`` with outline ``#00FF00`` and width 2.
- T/L: the ellipse's major axis (landmarks P1-P2, ``#F58D31``) then its minor axis (P3-P4, ``#0000FF``); A/D: the
  metric's line (``#00FF00``), or for an angle its two lines (``#00FF00`` then ``#0000FF``), the landmarks named
  through the task's ``lines_map`` / ``angles_map`` from the doc's ``metric_map_name`` and ``metric_key``. Each line
  is PIL ``ImageDraw.line`` of width 2, then its two end points as filled ``#FF0000`` discs
  (``ImageDraw.ellipse`` over the point +- 3 px).
- T/L ``-VP-woMedImg`` draws the mask's outer contour first: the mask slice read and resized as the image,
  ``astype(uint8)``, OpenCV ``findContours(RETR_EXTERNAL, CHAIN_APPROX_SIMPLE)`` and ``drawContours`` in
  (0, 255, 0) with thickness 2 (every non-zero label of the mask, as upstream).
- Under a reshape every coordinate (row, col) becomes ``int(row * new_h / H), int(col * new_w / W)`` (``H, W`` the
  doc's ``image_size_2d``); without one the coordinates are passed as read.

Coordinates are (row, column); PIL's ``xy`` is (column, row). ``RULE`` names this rule and its version: it enters
the answer signature of every visual-prompt task, so a change of the drawing never reuses answers given to another
picture.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from medvision_bm.data.docs import Doc, Overlay
from medvision_bm.data.image import read_slice, resize_slice
from medvision_bm.data.landmarks import slice_landmarks
from medvision_bm.data.task_meta import TaskMeta, resolve_ad_names
from medvision_bm.errors import UserError

if TYPE_CHECKING:  # PIL loads only where a picture is drawn
    from PIL.Image import Image as PILImage

#: The drawing rule and its version (bump on any change of what is drawn).
RULE = "upstream-0a4c5e2-visual-prompt-1"
#: Task-name suffixes whose picture carries a visual prompt, and the one of them drawn on a black canvas.
VARIANTS: tuple[str, ...] = ("-VP", "-VP-woMedImg")
BLACK_CANVAS_VARIANT = "-VP-woMedImg"

BOX_COLOUR = "#00FF00"
MAJOR_AXIS_COLOUR = "#F58D31"
MINOR_AXIS_COLOUR = "#0000FF"
LINE_COLOUR = "#00FF00"
SECOND_LINE_COLOUR = "#0000FF"
POINT_COLOUR = "#FF0000"
CONTOUR_BGR = (0, 255, 0)  # OpenCV draws on the RGB array as given: green either way
LINE_WIDTH = 2
POINT_RADIUS = 3
CONTOUR_THICKNESS = 2
#: The landmarks of a T/L ellipse's major and minor axes (upstream reads these four keys for every T/L doc).
TL_AXES: tuple[tuple[str, str, str], ...] = (("P1", "P2", MAJOR_AXIS_COLOUR), ("P3", "P4", MINOR_AXIS_COLOUR))

Point = tuple[float, float]


def is_drawn(variant: str) -> bool:
    return variant in VARIANTS


def _scaler(doc: Doc, reshape_hw: tuple[int, int] | None) -> Callable[[Sequence[float]], tuple[float, float]]:
    if reshape_hw is None:
        return lambda p: (p[0], p[1])
    scale_h = reshape_hw[0] / doc.image_size_2d[0]
    scale_w = reshape_hw[1] / doc.image_size_2d[1]
    return lambda p: (int(p[0] * scale_h), int(p[1] * scale_w))


def _where(doc: Doc) -> str:
    return f"task {doc.task} sample {doc.key}"


def _landmarks(doc: Doc, data_root: str | os.PathLike[str]) -> dict[str, Point]:
    if not doc.landmark_file:
        raise UserError(f"{_where(doc)} has no landmark file, so its visual prompt cannot be drawn; check the plan's "
                        "landmark_file entries or re-download the dataset")
    return slice_landmarks(Path(data_root) / "Datasets" / doc.landmark_file, doc.slice_dim, doc.slice_idx)


def _lines(doc: Doc, points: Mapping[str, Point], spec: tuple[tuple[str, str, str], ...],
           scale: Callable[[Sequence[float]], Point]) -> tuple[tuple[Point, Point, str], ...]:
    missing = [k for a, b, _ in spec for k in (a, b) if k not in points]
    if missing:
        raise UserError(f"{_where(doc)}: landmark {missing[0]} is not on the slice's landmark entry, so its visual "
                        "prompt cannot be drawn; re-download the dataset")
    return tuple((scale(points[a]), scale(points[b]), colour) for a, b, colour in spec)


def overlay_for(doc: Doc, data_root: str | os.PathLike[str], variant: str, reshape_hw: tuple[int, int] | None,
                meta: TaskMeta | None = None) -> Overlay | None:
    """What upstream draws on the picture of ``doc`` for ``variant`` (None for a variant without a visual prompt).

    ``meta`` is the task's metadata (``data.task_meta.TaskMeta``): an A/D metric's landmarks are named through its
    maps. A sample whose prompt cannot be drawn is a one-line UserError naming it (never a plain slice instead)."""
    if not is_drawn(variant):
        return None
    canvas = "black" if variant == BLACK_CANVAS_VARIANT else "slice"
    scale = _scaler(doc, reshape_hw)
    if doc.family == "detect":
        bb = doc.bounding_boxes or {}
        try:
            low, high = bb["min_coords"][0], bb["max_coords"][0]
        except (KeyError, IndexError, TypeError):
            raise UserError(f"{_where(doc)} has no bounding box, so its visual prompt cannot be drawn; check the "
                            "plan") from None
        return Overlay(RULE, canvas, box=(scale(low), scale(high)))
    if doc.family == "TL":
        lines = _lines(doc, _landmarks(doc, data_root), TL_AXES, scale)
        if canvas == "black" and not doc.mask_file:
            raise UserError(f"{_where(doc)} has no mask file, so the lesion contour of its -VP-woMedImg picture "
                            "cannot be drawn; check the plan's mask_file entries")
        return Overlay(RULE, canvas, lines=lines, mask_contour=canvas == "black")
    if doc.family == "AD":
        if meta is None:
            raise UserError(f"{_where(doc)}: an A/D visual prompt needs the task's metadata (its lines_map and "
                            "angles_map name the landmarks); give the data folder (--data_dir)")
        try:
            keys = resolve_ad_names(meta, doc.biometric_profile or {}).point_keys
        except (KeyError, ValueError) as exc:
            raise UserError(f"{_where(doc)}: the metric's landmarks cannot be named ({exc}), so its visual prompt "
                            "cannot be drawn; check the task's lines_map/angles_map") from None
        colours = (LINE_COLOUR, SECOND_LINE_COLOUR)
        spec = tuple((keys[i], keys[i + 1], colours[i // 2]) for i in range(0, len(keys), 2))
        return Overlay(RULE, canvas, lines=_lines(doc, _landmarks(doc, data_root), spec, scale))
    raise UserError(f"{_where(doc)}: family {doc.family!r} has no visual prompt")


def require_contour_drawer() -> None:
    """OpenCV, which draws the mask contour of a T/L ``-VP-woMedImg`` picture as upstream does, or a UserError."""
    try:
        import cv2  # noqa: F401
    except ImportError:
        raise UserError("the T/L -VP-woMedImg picture draws the lesion's mask contour with OpenCV, as upstream does; "
                        "install it (pip install opencv-python-headless) or leave the task out") from None


def _contour(rgb: np.ndarray, mask: np.ndarray) -> np.ndarray:
    require_contour_drawer()
    import cv2

    binary = np.ascontiguousarray(mask.astype(np.uint8))
    contours, _ = cv2.findContours(binary, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    out = np.ascontiguousarray(rgb).copy()
    cv2.drawContours(out, contours, -1, CONTOUR_BGR, CONTOUR_THICKNESS)
    return out


def mask_plane(path: str | os.PathLike[str], slice_dim: int, slice_idx: int,
               reshape_hw: tuple[int, int] | None) -> np.ndarray:
    """The mask slice as upstream reads it for a contour: the same reading and resize as the image (the current
    protocol's zoom order: 0 for a slice of at most two values, else 1), not normalised."""
    plane, _ = read_slice(path, slice_dim, slice_idx)
    if reshape_hw is not None:
        plane, _ = resize_slice(plane, reshape_hw, "current")
    return plane


def draw(base: np.ndarray, overlay: Overlay, mask: np.ndarray | None = None) -> PILImage:
    """The picture sent: ``base`` (the uint8 grey slice as shown, rows x cols) or a black canvas of its size, as
    ``RGB``, with ``overlay`` drawn on it; ``mask`` is the mask slice (resized as the image) for a contour."""
    from PIL import Image, ImageDraw

    grey = np.zeros(base.shape, np.uint8) if overlay.canvas == "black" else np.ascontiguousarray(base)
    rgb = np.asarray(Image.fromarray(grey, "L").convert("RGB"))
    if overlay.mask_contour:
        if mask is None or mask.shape != base.shape:
            raise ValueError(f"the contour needs the mask slice of the picture's shape {base.shape}")
        rgb = _contour(rgb, mask)
    img = Image.fromarray(rgb, "RGB")
    pen = ImageDraw.Draw(img)
    if overlay.box is not None:
        (r0, c0), (r1, c1) = overlay.box
        pen.rectangle([(c0, r0), (c1, r1)], outline=BOX_COLOUR, width=LINE_WIDTH)
    for (ra, ca), (rb, cb), colour in overlay.lines:
        pen.line([(ca, ra), (cb, rb)], fill=colour, width=LINE_WIDTH)
        for r, c in ((ra, ca), (rb, cb)):
            pen.ellipse([(c - POINT_RADIUS, r - POINT_RADIUS), (c + POINT_RADIUS, r + POINT_RADIUS)],
                        fill=POINT_COLOUR)
    return img
