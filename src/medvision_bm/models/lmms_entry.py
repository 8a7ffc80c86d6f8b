"""lmms-eval entry point (group ``lmms_eval.models``): exposes our model class to lmms-eval's registry.

Kept import-free so lmms-eval can read the manifest without importing our backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lmms_eval.models.registry_v2 import ModelManifest


def manifests() -> list[ModelManifest]:
    from lmms_eval.models.registry_v2 import ModelManifest

    return [ModelManifest(model_id="medvision", simple_class_path="medvision_bm.models.lmms_models.MedVisionLMM",
                          aliases=("medvision_bm",))]
