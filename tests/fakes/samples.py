"""Requests, planted keys and wire-format presets shared by the API backend tests and the benchmark."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from PIL import Image

from medvision_bm.data.docs import Doc, RunDoc, View
from medvision_bm.models.base import Backend, GenRequest, GenResult, GenSettings

#: Planted keys: distinctive, so a leak anywhere is easy to find.
KEYS = {
    "OPENAI_API_KEY": "sk-planted-openai-0123456789abcdef",
    "OPENROUTER_API_KEY": "sk-or-planted-router-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-planted-anthropic-0123456789",
    "GEMINI_API_KEY": "AIzaPlantedGemini0123456789abcdefXYZ",
    "MOONSHOT_API_KEY": "sk-planted-moonshot-0123456789",
    "MINIMAX_API_KEY": "planted-minimax-key-0123456789",
}

#: One options dict per wire format: the kind and what it needs (the fake server's URL is added by `backend`).
WIRES: dict[str, tuple[str, dict[str, Any]]] = {
    "compatible": ("openai_compatible", {"model_name": "served-model"}),
    "openai": ("openai", {"openai_model_code": "gpt-5"}),
    "anthropic": ("anthropic", {"anthropic_model_code": "claude-fake-1"}),
    "gemini": ("gemini", {"google_model_code": "gemini-3-pro-preview"}),
}


def make_doc(i: int, slice_idx: int | None = None, image: str = "ct_001.nii.gz", *, family: str = "TL",
             hw: tuple[int, int] = (24, 32), key: str | None = None) -> Doc:
    """A sample of the upstream data layer's shape (a lesion-size doc by default, or a detection / A/D one)."""
    s = i if slice_idx is None else slice_idx
    task, label, loader = {
        "TL": ("PhantomCT_TumorLesionSize_Task01_Axial", 5, "Tumor-Lesion-Size"),
        "detect": ("PhantomCT_BoxCoordinate_Task01_Axial", 1, "Box-Size"),
        "AD": ("PhantomXR_BiometricsFromLandmarks_Distance_Task01_Axial", None, "Biometrics-From-Landmarks-Distance"),
    }[family]
    h, w = hw
    bb = bp = None
    meta = {"image_description": "abdominal computed tomography (CT) scan", "image_modality": "CT",
            "source": "tests/fakes/samples.py"}
    if family == "detect":
        bb = {"min_coords": [[2, 1]], "max_coords": [[12, 10]], "center_coords": [[7, 5]], "dimensions": [[11, 10]],
              "sizes": [[8.8, 8.0]]}
        meta["label_name"] = "liver"
    elif family == "TL":
        bp = {"metric_type": ["distance"], "metric_map_name": ["lines_map"], "metric_key_major_axis": ["L-1-2"],
              "metric_value_major_axis": [12.5], "metric_key_minor_axis": ["L-3-4"],
              "metric_value_minor_axis": [7.25], "metric_unit": ["mm"]}
        meta["label_name"] = "lesion"
    else:
        bp = {"metric_type": "distance", "metric_map_name": "lines_map", "metric_key": "L-1-2", "metric_value": 12.5,
              "metric_unit": "mm", "slice_dim": 2}
        meta.update(biometrics_name="a distance", points=["P1", "P2"])
    dataset = task.split("_")[0]
    return Doc(key=key or f"s{i}", task=task, family=family, plane="Axial", split="test", index=i,
               dataset_name=dataset, taskID="01", taskType=loader, image_file=f"{dataset}/Images/{image}",
               mask_file=None, landmark_file=None, slice_dim=2, slice_idx=s, label=label, image_size_2d=(h, w),
               pixel_size=(0.8, 0.8), image_size_3d=(h, w, 40), voxel_size=(0.8, 0.8, 2.0), bounding_boxes=bb,
               biometric_profile=bp, meta=meta)


def make_view(doc: Doc, reshape: tuple[int, int] | None = None) -> View:
    """The view of a doc sent as is (or reshaped), perceived unchanged (no processor resize)."""
    hw = tuple(reshape) if reshape else tuple(doc.image_size_2d)
    ph, pw = doc.pixel_size
    px = (ph * doc.image_size_2d[0] / hw[0], pw * doc.image_size_2d[1] / hw[1])
    return View(image_hw=hw, pixel_hw_mm=px, canvas_hw=hw, content_hw=hw,  # type: ignore[arg-type]
                stated_pixel_hw_mm=px, header_pixel_hw=(ph, pw), reshape_hw=tuple(reshape) if reshape else None)


def make_rundoc(i: int = 0, *, data_root: str = "", reshape: tuple[int, int] | None = None, **doc_kw: Any) -> RunDoc:
    doc = make_doc(i, **doc_kw)
    return RunDoc(doc, make_view(doc, reshape), data_root=data_root)


def make_request(i: int, *, slice_idx: int | None = None, gen: GenSettings | None = None,
                 system_prompt: str | None = None, loader: Callable[[], list[Any]] | None = None,
                 reshape: tuple[int, int] | None = None) -> GenRequest:
    doc = make_doc(i, slice_idx)
    rundoc = RunDoc(doc, make_view(doc, reshape), data_root="/data/phantom")
    images = [] if loader else [Image.new("RGB", (32, 24), (10 * (doc.slice_idx % 20), 40, 90))]
    return GenRequest(doc.key, f"Question {i}: how long are the lesion's axes?", rundoc,
                      gen or GenSettings(max_new_tokens=64, temperature=None, seed=None),
                      system_prompt=system_prompt, images=images, image_loader=loader)


def run(backend: Backend, requests: Sequence[GenRequest]) -> list[GenResult]:
    out: list[GenResult] = []
    backend.generate(requests, out.append)
    return out


