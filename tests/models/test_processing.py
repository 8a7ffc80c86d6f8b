"""Resize rules checked against the real processors: the size the prompt states is the size the model sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models.processing import (
    RULE_DEFAULTS,
    image_processor_settings,
    infer_rule,
    processed_hw,
    processed_hw_for_folder,
    processed_hw_for_model,
    read_image_processor_config,
    smart_resize,
)

#: Square, portrait, landscape, tiny (below min_pixels), sides exactly k*28 + 14 (round-half-to-even),
#: large (above the tiny Qwen's max_pixels) and elongated.
SIZES = [(64, 64), (100, 70), (70, 100), (1, 1), (5, 9), (13, 300), (42, 42), (70, 126), (98, 154),
         (512, 512), (480, 640), (1000, 333), (28, 28 * 150), (300, 120)]


def _grid_hw(image_processor, h: int, w: int, make_image) -> tuple[int, int]:
    out = image_processor(images=[make_image(h, w)], return_tensors="pt")
    _, gh, gw = out["image_grid_thw"][0].tolist()
    return gh * image_processor.patch_size, gw * image_processor.patch_size


@pytest.mark.parametrize(("h", "w"), SIZES)
def test_qwen2_5_rule_matches_the_tiny_qwen_processor(h: int, w: int, tiny_qwen_dir: Path, make_image) -> None:
    from medvision_bm.models.hf_local import load_processor

    processor = load_processor(str(tiny_qwen_dir))
    seen = _grid_hw(processor.image_processor, h, w, make_image)
    assert processed_hw_for_folder(tiny_qwen_dir, h, w) == seen
    settings = image_processor_settings(read_image_processor_config(tiny_qwen_dir))
    assert processed_hw("qwen2_5_vl", h, w, **settings) == seen


@pytest.mark.parametrize(("h", "w", "max_pixels"), [
    (64, 64, None), (100, 70, None), (5, 9, None), (250, 3000, None), (512, 512, None), (300, 120, None),
    (1080, 1920, 300_000), (2000, 700, 100_000),  # above max_pixels: shrunk
])
def test_qwen3_rule_matches_a_qwen3_configured_processor(h: int, w: int, max_pixels: int | None,
                                                         make_image) -> None:
    """Qwen3-VL ships the Qwen2-VL image processor with patch 16 and its own bounds: factor 32."""
    from transformers import Qwen2VLImageProcessorPil

    d = RULE_DEFAULTS["qwen3_vl"]
    image_processor = Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, min_pixels=d["min_pixels"],
                                               max_pixels=max_pixels or d["max_pixels"])
    seen = _grid_hw(image_processor, h, w, make_image)
    assert processed_hw("qwen3_vl", h, w, max_pixels=max_pixels) == seen
    assert seen[0] % 32 == 0 and seen[1] % 32 == 0


@pytest.mark.parametrize(("h", "w"), [(100, 70), (512, 512), (1080, 1920), (20, 20)])
def test_qwen2_5_published_defaults_match_transformers(h: int, w: int, make_image) -> None:
    from transformers import Qwen2VLImageProcessorPil

    d = RULE_DEFAULTS["qwen2_5_vl"]
    image_processor = Qwen2VLImageProcessorPil(min_pixels=d["min_pixels"], max_pixels=d["max_pixels"])
    assert processed_hw("qwen2_5_vl", h, w) == _grid_hw(image_processor, h, w, make_image)


def test_fixed_rule_matches_the_tiny_llava(tiny_llava_dir: Path, make_image) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_llava_dir)
    config = read_image_processor_config(tiny_llava_dir)
    assert infer_rule(config) == "fixed"
    for h, w in [(100, 70), (5, 300)]:
        pixels = processor.image_processor(images=[make_image(h, w)], return_tensors="pt")["pixel_values"]
        assert tuple(pixels.shape[-2:]) == processed_hw_for_folder(tiny_llava_dir, h, w) == (28, 28)


def test_known_values() -> None:
    assert smart_resize(100, 70, 28, 56 * 56, 28 * 28 * 1280) == (112, 56)  # 70/28 = 2.5 rounds to 2
    assert smart_resize(1, 1, 28, 56 * 56, 10**7) == (56, 56)
    assert processed_hw("none", 123, 45) == (123, 45)
    assert processed_hw("fixed", 123, 45, height=512, width=512) == (512, 512)
    h, w = processed_hw("qwen2_5_vl", 4000, 3000, max_pixels=1_000_000)
    assert h * w <= 1_000_000 and h % 28 == 0 and w % 28 == 0 and h > w
    assert processed_hw("qwen2_5_vl", 512, 512, min_pixels=None) == (504, 504)  # None keeps the default


def test_rule_errors() -> None:
    with pytest.raises(ValueError, match="unknown resize rule"):
        processed_hw("bilinear", 10, 10)
    with pytest.raises(ValueError, match="height and width"):
        processed_hw("fixed", 10, 10)
    with pytest.raises(ValueError, match="aspect ratio"):
        processed_hw("qwen2_5_vl", 1, 500)
    with pytest.raises(ValueError, match="positive"):
        smart_resize(0, 10, 28, 1, 100)


def test_settings_are_resolved_like_transformers(tmp_path: Path) -> None:
    flat = {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
            "patch_size": 14, "merge_size": 2, "size": {"shortest_edge": 100, "longest_edge": 200000},
            "max_pixels": 50000}
    s = image_processor_settings(flat)
    assert s == {"patch_size": 14, "merge_size": 2, "min_pixels": 100, "max_pixels": 50000}  # top level wins
    assert infer_rule(flat) == "qwen2_5_vl"
    assert infer_rule({**flat, "patch_size": 16, "processor_class": "Qwen3VLProcessor"}) == "qwen3_vl"
    assert infer_rule({"size": {"shortest_edge": 336}, "crop_size": {"height": 336, "width": 336},
                       "do_center_crop": True}) is None  # resize + crop is not a plain rescale
    assert infer_rule({"do_resize": False}) == "none"

    (tmp_path / "preprocessor_config.json").write_text(json.dumps(flat))
    assert read_image_processor_config(tmp_path)["max_pixels"] == 50000
    nested = {"image_processor": {**flat, "max_pixels": 7840}, "processor_class": "Qwen2_5_VLProcessor"}
    (tmp_path / "processor_config.json").write_text(json.dumps(nested))
    assert read_image_processor_config(tmp_path)["max_pixels"] == 7840  # transformers 5 layout first
    assert processed_hw_for_folder(tmp_path, 1000, 1000) == (84, 84)
    assert processed_hw_for_folder(tmp_path, 1000, 1000, max_pixels=200000) == (420, 420)
    assert processed_hw_for_folder(tmp_path, 1000, 1000, rule="none") == (1000, 1000)


def test_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        read_image_processor_config(tmp_path / "nope")
    with pytest.raises(UserError, match=r"no preprocessor_config\.json"):
        read_image_processor_config(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"size": {"shortest_edge": 336},
                                                                   "do_center_crop": True}))
    with pytest.raises(UserError, match="cannot tell how"):
        processed_hw_for_folder(tmp_path, 10, 10)
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read"):
        read_image_processor_config(tmp_path)


def test_registry_spellings_are_aliases() -> None:
    assert processed_hw("qwen2_5", 100, 70) == processed_hw("qwen2_5_vl", 100, 70)
    assert processed_hw("qwen3", 100, 70) == processed_hw("qwen3_vl", 100, 70) == (320, 224)


def test_for_model_reads_folder_cache_or_defaults(tiny_qwen_dir: Path, tiny_llava_dir: Path, tmp_path: Path) -> None:
    # a local folder: its own bounds (the tiny Qwen caps images at 64 merged tokens)
    assert processed_hw_for_model("qwen2_5", str(tiny_qwen_dir), 1000, 1000) == (224, 224)
    assert processed_hw_for_model("auto", str(tiny_qwen_dir), 1000, 1000) == (224, 224)
    assert processed_hw_for_model("auto", str(tiny_llava_dir), 1000, 700) == (28, 28)
    assert processed_hw_for_model("qwen2_5", str(tiny_qwen_dir), 1000, 1000, max_pixels=28 * 28 * 4) == (56, 56)
    # a hub id not in the cache: the published defaults
    cache = tmp_path / "hub"
    assert processed_hw_for_model("qwen2_5", "Qwen/Qwen2.5-VL-7B-Instruct", 1000, 1000, cache_dir=cache) == (1008, 1008)
    with pytest.raises(UserError, match="cannot tell how"):
        processed_hw_for_model("auto", "Qwen/Qwen2.5-VL-7B-Instruct", 1000, 1000, cache_dir=cache)
    # the same id once its preprocessor_config.json is in the cache
    repo = cache / "models--Qwen--Qwen2.5-VL-7B-Instruct"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
         "patch_size": 14, "merge_size": 2, "min_pixels": 3136, "max_pixels": 200704}))
    assert processed_hw_for_model("auto", "Qwen/Qwen2.5-VL-7B-Instruct", 1000, 1000, cache_dir=cache) == (448, 448)


def test_for_model_refuses_what_it_cannot_honour(tiny_qwen_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="'fixed' needs a fixed height and width"):
        processed_hw_for_model("fixed", str(tiny_qwen_dir), 100, 70)  # a Qwen folder has no fixed size
    assert processed_hw_for_model("fixed", str(tiny_qwen_dir), 100, 70, height=64, width=32) == (64, 32)
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot read"):  # a broken file is not read as "no settings, use defaults"
        processed_hw_for_model("qwen2_5", str(tmp_path), 100, 70)
