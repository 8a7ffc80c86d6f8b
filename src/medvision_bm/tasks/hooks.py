"""lmms-eval hooks for the three families; plain functions of one row, testable without lmms-eval.

A row is ``{"key": ..., "payload": "<json of RunDoc>"}``: the doc, the view (what the image is and what the prompt
states about it), the protocol and the task variant, all fixed by the runner before lmms-eval sees the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from medvision_bm.data.docs import Doc, RunDoc, View
from medvision_bm.data.image import IntensityRule, intensity_rule, read_slice
from medvision_bm.data.image import render_gray as _render_gray
from medvision_bm.data.overlay import draw as draw_overlay
from medvision_bm.data.overlay import is_drawn, mask_plane
from medvision_bm.errors import UserError
from medvision_bm.paths import inside
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scoring import SAMPLE_METRICS, hook_score, protocol_settings, target
from medvision_bm.tasks.upstream_prompts import PromptInput, build_prompt, scaled_ps_factors

if TYPE_CHECKING:  # PIL loads only where a picture is made
    from PIL.Image import Image as PILImage


def rundoc(row: Mapping[str, object]) -> RunDoc:
    """The RunDoc of an lmms-eval row (a ``{"key", "payload"}`` dict from lmms-eval or ``RunDoc.to_lmms_row``)."""
    return RunDoc.from_lmms_row(row)


def image_path(rd: RunDoc) -> Path:
    """The doc's image below ``<data_root>/Datasets``; a UserError for an image_file that leaves it (a store's doc is
    read from outside: an imported record could name any file)."""
    return inside(Path(rd.data_root) / "Datasets", rd.doc.image_file, "the doc's image_file")


def intensity_rule_for(doc: Doc, protocol: str) -> IntensityRule:
    return intensity_rule(doc.dataset_name, doc.taskID, doc.taskType, doc.modality, doc.meta.get("label_name"),
                          protocol)


def render_gray(rd: RunDoc) -> np.ndarray:
    """The slice as upstream shows it (uint8, rows x cols), resized when the run reshapes images."""
    d = rd.doc
    gray, _ = _render_gray(image_path(rd), d.slice_dim, d.slice_idx, reshape_hw=rd.view.reshape_hw,
                           rule=intensity_rule_for(d, rd.protocol), protocol=rd.protocol)
    return gray


def drawn_picture(rd: RunDoc) -> PILImage:
    """A visual-prompt sample's picture (``RGB``, before any client resize): the slice as shown, or upstream's black
    canvas of its size, with the view's overlay drawn on it (data/overlay.py). A sample of a visual-prompt variant
    whose view carries no overlay is refused: it is never sent the plain slice."""
    overlay = rd.view.overlay
    if overlay is None:
        raise UserError(f"task {rd.doc.task} sample {rd.doc.key}: the {rd.variant} picture has no drawn visual "
                        "prompt in its view (a record made before the prompts were drawn); run the task again")
    d = rd.doc
    # a black canvas: upstream reads the slice for its shape only (no normalisation)
    base = np.zeros(_render_shape(rd), np.uint8) if overlay.canvas == "black" else render_gray(rd)
    mask = None
    if overlay.mask_contour:
        if not d.mask_file:
            raise UserError(f"task {d.task} sample {d.key} has no mask file for its contour; check the plan")
        mask_path = inside(Path(rd.data_root) / "Datasets", d.mask_file, "the doc's mask_file")
        mask = mask_plane(mask_path, d.slice_dim, d.slice_idx, rd.view.reshape_hw)
    return draw_overlay(base, overlay, mask)


def _render_shape(rd: RunDoc) -> tuple[int, int]:
    """The (resized) slice's shape, read as upstream reads it (the file must hold the slice)."""
    d = rd.doc
    plane, _ = read_slice(image_path(rd), d.slice_dim, d.slice_idx)
    if rd.view.reshape_hw is not None:
        return int(rd.view.reshape_hw[0]), int(rd.view.reshape_hw[1])
    return int(plane.shape[0]), int(plane.shape[1])


def _client_resize(rd: RunDoc, img: PILImage) -> PILImage:
    from PIL import Image

    if rd.view.client_resize_hw:
        h, w = rd.view.client_resize_hw
        img = img.resize((int(w), int(h)), Image.Resampling.LANCZOS)
    return img


def visual_gray(rd: RunDoc) -> PILImage:
    """The slice as a PIL grey ``L`` image, resized with LANCZOS to the provider's fixed point for API models.

    Upstream converts ``L`` to ``RGB`` and then resizes; PIL resamples every band alike, so the ``RGB`` copy of
    this image is that picture pixel for pixel (``tests/api/test_images_sent.py`` holds it). API backends take it
    as is: a grey slice goes on the wire single-channel anyway, and this spares them the three-channel copy.
    A visual-prompt sample's picture is colour: it comes as :func:`visual` gives it (``RGB``)."""
    from PIL import Image

    if is_drawn(rd.variant) or rd.view.overlay is not None:
        return visual(rd)
    return _client_resize(rd, Image.fromarray(np.ascontiguousarray(render_gray(rd)), "L"))


def visual(rd: RunDoc) -> PILImage:
    """The picture upstream sends: a PIL ``RGB`` image (the grey ``L`` slice converted, or for a visual-prompt
    variant the drawn picture of :func:`drawn_picture`), resized for API models as upstream's API clients do before
    sending (see :func:`visual_gray`)."""
    if is_drawn(rd.variant) or rd.view.overlay is not None:
        return _client_resize(rd, drawn_picture(rd))
    return visual_gray(rd).convert("RGB")


def prompt_input(doc: Doc, view: View, variant: str, data_root: str | Path = "") -> PromptInput:
    bp = doc.biometric_profile or {}
    scale = view.pixel_scale_hw or (1.0, 1.0)
    if variant == "-CoT-scaledPS" and view.pixel_scale_hw is None:  # a store row from before the view kept them
        scale = scaled_ps_factors(str(Path(data_root) / "Datasets" / doc.image_file), doc.slice_dim, doc.slice_idx,
                                  doc.taskID, doc.label, doc.family)
    spec = family_spec(doc.family)
    return PromptInput(
        family=doc.family, task_type=doc.taskType, image_description=doc.meta.get("image_description"),
        label_name=doc.meta.get("label_name"), metric_type=doc.metric_type if spec.per_metric else None,
        metric_unit=bp.get("metric_unit") if spec.measure else None,
        biometrics_name=doc.meta.get("biometrics_name"), points=tuple(doc.meta.get("points") or ()),
        canvas_hw=(view.canvas_hw[0], view.canvas_hw[1]) if spec.measure else None,
        pixel_hw_mm=(view.stated_pixel_hw_mm[0], view.stated_pixel_hw_mm[1]) if spec.measure else None,
        scale_hw=scale)


def prompt(rd: RunDoc) -> str:
    return build_prompt(prompt_input(rd.doc, rd.view, rd.variant, rd.data_root), rd.variant, rd.protocol)


def doc_to_visual(row: Mapping[str, object]) -> list[PILImage]:
    return [visual(rundoc(row))]


def doc_to_visual_gray(row: Mapping[str, object]) -> list[PILImage]:
    """:func:`doc_to_visual` for backends that take grey slices (``takes_gray_slices``): the same pixels in ``L``."""
    return [visual_gray(rundoc(row))]


def doc_to_text(row: Mapping[str, object], lmms_eval_specific_kwargs: Mapping[str, object] | None = None) -> str:
    return prompt(rundoc(row))


def doc_to_target(row: Mapping[str, object]) -> str:
    rd = rundoc(row)
    return ", ".join(f"{v:.6g}" for v in target(rd.doc, rd.view))


def process_results(row: Mapping[str, object], results: list[str]) -> dict[str, float | None]:
    rd = rundoc(row)
    p = protocol_settings(rd.protocol)
    score = hook_score(rd.doc, rd.view, results[0] if results else None, p.parser, p.rules)
    out: dict[str, float | None] = {"SuccessRate": 1.0 if score.success else 0.0}
    for name in SAMPLE_METRICS[rd.doc.family]:
        out[name] = score.metrics.get(name)
    return out


def mean_over_present(values: list[float | None]) -> float | None:
    """lmms-eval aggregation: the mean of the values present (failed samples carry None)."""
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None
