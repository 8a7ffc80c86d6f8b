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


def make_doc(i: int, slice_idx: int | None = None, image: str = "ct_001.nii.gz") -> Doc:
    return Doc(key=f"s{i}", task="Phantom_TL_Task01_Axial", dataset="Phantom", family="TL",
               task_type="TumorLesionSize", task_id="01", plane="axial", split="test", index=i, image=image,
               slice_dim=2, slice_idx=i if slice_idx is None else slice_idx, label=1, label_name="lesion",
               structure_kind="lesion", modality="CT", anatomy="abdomen", spacing_mm=(0.8, 0.8, 2.0),
               image_hw=(24, 32), pixel_hw_mm=(0.8, 0.8), annotation={"major_mm": 12.5, "minor_mm": 7.25},
               measurement="major and minor axis")


def make_request(i: int, *, slice_idx: int | None = None, gen: GenSettings | None = None,
                 system_prompt: str | None = None, loader: Callable[[], list[Any]] | None = None,
                 reshape: tuple[int, int] | None = None) -> GenRequest:
    doc = make_doc(i, slice_idx)
    rundoc = RunDoc(doc, View.for_doc(doc, reshape), data_root="/data/phantom")
    images = [] if loader else [Image.new("RGB", (32, 24), (10 * (doc.slice_idx % 20), 40, 90))]
    return GenRequest(doc.key, f"Question {i}: how long are the lesion's axes?", rundoc,
                      gen or GenSettings(max_new_tokens=64, temperature=None, seed=None),
                      system_prompt=system_prompt, images=images, image_loader=loader)


def run(backend: Backend, requests: Sequence[GenRequest]) -> list[GenResult]:
    out: list[GenResult] = []
    backend.generate(requests, out.append)
    return out


