"""Resize rules checked against the real processors: the size the prompt states is the size the model sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models.processing import RULE_DEFAULTS, processed_hw, smart_resize
from medvision_bm.models.processor_config import (
    image_processor_settings,
    infer_rule,
    processed_hw_for_folder,
    processed_hw_for_model,
    read_image_processor_config,
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


# ------------------------------------------------------------------------------------------------------------------
# Golden values of upstream MedVision's perceived-size rules (get_resized_img_shape), computed by hand from the
# upstream formulas. Sources (YongchengYAO/MedVision): [MU] lmms_eval/tasks/medvision/medvision_utils.py @0a4c5e2
# (get_resized_img_shape returns (perceived_canvas_hw, content_hw)); [MIP] docs/Model-Image-Processing.md
# @0a4c5e2; [BUG] docs/Perceived-Size-Bugfix.md @0a4c5e2; [DSP] skills/medvision/sub-skills/extending-models-and-tasks/
# references/image-size-dispatch.md @39dd6bf; [CL] lmms_eval/models/claude.py @783dddb; [OA] lmms_eval/models/openai.py
# @783dddb; [GE] lmms_eval/models/gemini.py @47210fb; [KI] lmms_eval/models/kimi.py @e3cf881. Spec with the rules:
# docs/spec/perceived-size.md.
# ------------------------------------------------------------------------------------------------------------------
from medvision_bm.models.processing import (  # noqa: E402
    API_RULES,
    PADDING_RULES,
    RULES,
    Perceived,
    canonical_rule,
    check_rule,
    perceive,
    stated_size,
)
from medvision_bm.models.processor_config import perceive_for_model  # noqa: E402

#: (rule, sent H, sent W, params, canvas (stated image size), content (pixel-size basis)).
GOLDEN = [
    # [MU] _process_img_qwen25vl: smart resize, factor 14*2 = 28, [3136, 12845056].
    # MedVision-V0 (vllm_qwen25vl branch) on its pinned 512x512: round(512/28 = 18.29) = 18 -> 504.
    ("qwen2_5", 512, 512, {}, (504, 504), (504, 504)),
    # Ceph 1935x2400: round(69.11) = 69 -> 1932, round(85.71) = 86 -> 2408; area 4,652,256 within the bounds.
    ("qwen2_5", 1935, 2400, {}, (1932, 2408), (1932, 2408)),
    # [MU] _process_img_qwen3vl: factor 16*2 = 32, [65536, 16777216]: round(60.47) = 60 -> 1920, round(75.0) -> 2400.
    ("qwen3", 1935, 2400, {}, (1920, 2400), (1920, 2400)),
    # 182x218 rounds to 192x224 = 43,008 < 65,536: beta = sqrt(65536 / 39676) = 1.28522;
    # ceil(233.91 / 32) = 8 -> 256, ceil(280.18 / 32) = 9 -> 288.
    ("qwen3", 182, 218, {}, (256, 288), (256, 288)),
    # [DSP] row 3 (GLM-4V, multiple of 28): round(182/28 = 6.5) = 6 (half to even) -> 168, round(7.79) = 8 -> 224;
    # 2 frames * 168 * 224 = 75,264 within [12544, 9633792].
    ("glm4v", 182, 218, {}, (168, 224), (168, 224)),
    # 2 * 1932 * 2408 = 9,304,512 < 9,633,792: no shrink.
    ("glm4v", 1935, 2400, {}, (1932, 2408), (1932, 2408)),
    # [DSP] row 2 (MiniMax-M3: smart resize to 28 under max_pixels = 451584): 512 -> 504 (254,016 px fits).
    ("minimax_m3", 512, 512, {}, (504, 504), (504, 504)),
    # 1932x2408 > 451,584: beta = sqrt(4,644,000 / 451,584) = 3.20684; floor(603.39 / 28) = 21 -> 588,
    # floor(748.40 / 28) = 26 -> 728.
    ("minimax_m3", 1935, 2400, {}, (588, 728), (588, 728)),
    # [MU] gemma4 comment: "1935x2400 -> ideal 721x895 -> 720x864" (scale sqrt(645120 / 4644000) = 0.37271, floor 48).
    ("gemma4", 1935, 2400, {}, (720, 864), (720, 864)),
    # small images are upscaled: scale sqrt(645120 / 262144) = 1.56875 -> 803.2 -> floor(16.73) * 48 = 768.
    ("gemma4", 512, 512, {}, (768, 768), (768, 768)),
    # [BUG] 3.4: 160x384 -> content 233x560 (canvas 560x560 of 1x1 tiles, scale_w = 560/384, floor(160 * 1.4583)),
    # perceived ceil(content / 560) * 560 = 560x560.
    ("mllama", 160, 384, {}, (560, 560), (233, 560)),
    # [BUG] 3.1: 160x384 -> canvas 384x384 (select_best_resolution), content 160x384 (get_patch_output_size).
    ("llava_onevision", 160, 384, {}, (384, 384), (160, 384)),
    # 182x218: 384x384 wins (effective 39,676 everywhere, least waste); scale_w = 384/218 < scale_h = 384/182,
    # content (min(ceil(182 * 1.76147 = 320.59), 384), 384) = (321, 384).
    ("llava_onevision", 182, 218, {}, (384, 384), (321, 384)),
    # master c221615 _process_img_llavaonevision: select_best_resolution(img_PIL.size = (W, H), pinpoints) reads the
    # size as (H, W), so 700x300 is fitted as 300x700: (384, 768) has effective min(int(700 s) * int(300 s), 210000)
    # = 210000 at s = min(768/700, 384/300) with the least waste (294,912 - 210,000); stretched, canvas = content.
    ("llava_onevision_master", 700, 300, {}, (384, 768), (384, 768)),
    # [MIP]/[BUG] 3.2: InternVL3 tiling canvas (448, max 12 + 1 thumbnail): 1935x2400 -> (1344, 1792) (grid 4x3,
    # |2400/1935 - 4/3| = 0.093 best); 768x768 -> 896x896 (2x2 wins the tie: 589,824 > 0.5 * 448^2 * 4); 512 -> 448.
    ("internvl", 1935, 2400, {}, (1344, 1792), (1344, 1792)),
    ("internvl", 768, 768, {}, (896, 896), (896, 896)),
    ("internvl", 512, 512, {}, (448, 448), (448, 448)),
    # [MU] gemma3/medgemma [896, 896], meddr [448, 448]: stretch, canvas = content.
    ("fixed", 182, 218, {"height": 896, "width": 896}, (896, 896), (896, 896)),
    ("fixed", 1935, 2400, {"height": 448, "width": 448}, (448, 448), (448, 448)),
    # [MU] _padsquare_clip_content_hw(img, 336) with canvas [336, 336]; [BUG] 3.3: 160x384 -> content 140x336.
    ("pad_square", 160, 384, {"height": 336, "width": 336}, (336, 336), (140, 336)),
    # 182x218: round(182 * 336 / 218 = 280.51) = 281.
    ("pad_square", 182, 218, {"height": 336, "width": 336}, (336, 336), (281, 336)),
    # [CL] anthropic_resized_hw: 512x512 on any cap: scale 1 -> floor to 28 = 504.
    ("claude", 512, 512, {"model_code": "claude-sonnet-4-5"}, (504, 504), (504, 504)),
    # standard caps (1568 px, 1568 tokens): scale = sqrt(1568 * 750 / 4,644,000) = 0.50322 ->
    # int(973.73) // 28 * 28 = 952, int(1207.73) // 28 * 28 = 1204.
    ("claude", 1935, 2400, {"model_code": "claude-sonnet-4-5"}, (952, 1204), (952, 1204)),
    # high-res caps (2576, 4784): scale = sqrt(4784 * 750 / 4,644,000) = 0.87898 -> 1700 -> 1680, 2109 -> 2100;
    # the OpenRouter id anthropic/claude-opus-4.8 normalises to claude-opus-4-8 (high-res).
    ("claude", 1935, 2400, {"model_code": "claude-fable-5"}, (1680, 2100), (1680, 2100)),
    ("claude", 1935, 2400, {"model_code": "anthropic/claude-opus-4.8"}, (1680, 2100), (1680, 2100)),
    # [OA] patch family gpt-5.5 (2500 patches, 2048 px): scale = sqrt(2500 * 1024 / 4,644,000) = 0.74246 ->
    # int(1436.7) // 32 * 32 = 1408, int(1781.9) // 32 * 32 = 1760; the date suffix is dropped.
    ("openai", 1935, 2400, {"model_code": "gpt-5.5"}, (1408, 1760), (1408, 1760)),
    ("openai", 1935, 2400, {"model_code": "openai/gpt-5.5-2026-01-01"}, (1408, 1760), (1408, 1760)),
    # tile family gpt-4o: min(1, 2048/512, 768/512) = 1: unchanged.
    ("openai", 512, 512, {"model_code": "gpt-4o"}, (512, 512), (512, 512)),
    # [GE] pass-through below the 3072 px long edge; above: scale 3072/4000 = 0.768 -> 2304x3072.
    ("gemini", 1935, 2400, {"model_code": "gemini-3.1-pro-preview"}, (1935, 2400), (1935, 2400)),
    ("gemini", 3000, 4000, {"model_code": "google/gemini-2.5-pro"}, (2304, 3072), (2304, 3072)),
    # [KI] kimi-k2.6 (MoonViT 14, merge 2, 16384 patches, 512 per side): 512 -> 504;
    # 1935x2400: scale = sqrt(16384 / (171 * 138)) = 0.83324 -> 1612 -> 1596, 1999 -> 1988; 142 * 114 <= 16384.
    ("kimi", 512, 512, {"model_code": "kimi-k2.6"}, (504, 504), (504, 504)),
    ("kimi", 1935, 2400, {"model_code": "moonshotai/kimi-k2.6"}, (1596, 1988), (1596, 1988)),
]


@pytest.mark.parametrize(("rule", "h", "w", "params", "canvas", "content"), GOLDEN)
def test_upstream_perceived_size_goldens(rule, h, w, params, canvas, content) -> None:
    got = perceive(rule, h, w, **params)
    assert (got.canvas_hw, got.content_hw) == (canvas, content)
    assert processed_hw(rule, h, w, **params) == content  # the legacy entry gives the pixel-size basis


def test_every_rule_has_a_golden() -> None:
    covered = {check_rule(g[0], model_code=g[3].get("model_code")) for g in GOLDEN}
    assert covered == set(RULES) - {"none"}


@pytest.mark.parametrize(("rule", "sent", "pixel", "params", "image_hw", "pixel_hw"), [
    # [MU] doc_to_text_TumorLesionSize: image size = canvas, pixel = pixel / (content / sent) per axis.
    # [BUG] worked example: 160x384 at 0.5 mm, CLIP-336 pad-to-square -> 336x336, 0.5 / 0.875 = 0.571 both axes.
    ("pad_square", (160, 384), (0.5, 0.5), {"height": 336, "width": 336}, (336, 336), (0.5 / (140 / 160), 0.5 / 0.875)),
    # Llama: canvas 560x560 stated, pixel from the content 233x560: 0.5 * 160 / 233 = 0.343, 0.5 * 384 / 560 = 0.343.
    ("mllama", (160, 384), (0.5, 0.5), {}, (560, 560), (0.5 / (233 / 160), 0.5 / (560 / 384))),
    # LLaVA-OV letterbox: canvas 384x384, content 160x384: the pixel size is unchanged.
    ("llava_onevision", (160, 384), (0.5, 0.5), {}, (384, 384), (0.5, 0.5)),
    # MedVision-V0: sent 512x512 whose pixel is 0.8 mm: 0.8 * 512 / 504 = 0.8127.
    ("qwen2_5", (512, 512), (0.8, 0.8), {}, (504, 504), (0.8 / (504 / 512), 0.8 / (504 / 512))),
    # Gemma-3 stretch: 182x218 at (0.9, 1.1) mm -> 896x896, (0.9 * 182 / 896, 1.1 * 218 / 896): anisotropic.
    ("fixed", (182, 218), (0.9, 1.1), {"height": 896, "width": 896}, (896, 896), (0.9 / (896 / 182), 1.1 / (896 / 218))),
    # Claude at 512x512 (the launchers' reshape): 504x504 stated, pixel 0.5 * 512 / 504.
    ("claude", (512, 512), (0.5, 0.5), {"model_code": "claude-sonnet-4-5"}, (504, 504), (0.5 / (504 / 512),) * 2),
    # Gemini pass-through: both unchanged.
    ("gemini", (512, 512), (0.5, 0.5), {"model_code": "gemini-3.1-pro-preview"}, (512, 512), (0.5, 0.5)),
])
def test_stated_image_and_pixel_size(rule, sent, pixel, params, image_hw, pixel_hw) -> None:
    got = stated_size(rule, sent, pixel, **params)
    assert got.image_hw == image_hw
    assert got.pixel_hw_mm == pixel_hw  # the same operations as upstream: exact, not approximate
    assert f"{got.pixel_hw_mm[0]:.3f}" == f"{pixel_hw[0]:.3f}"


def test_pad_square_states_the_canvas_but_measures_the_content() -> None:
    got = stated_size("pad_square", (160, 384), (0.5, 0.5), height=336)
    assert got.image_hw == (336, 336) and got.content_hw == (140, 336)
    assert [f"{v:.3f}" for v in got.pixel_hw_mm] == ["0.571", "0.571"]
    assert set(PADDING_RULES) == {"pad_square", "mllama", "llava_onevision"}
    for rule in set(RULES) - set(PADDING_RULES) - set(API_RULES) - {"fixed", "none"}:
        p = perceive(rule, 300, 500)
        assert p.canvas_hw == p.content_hw, rule


@pytest.mark.parametrize(("rule", "code", "match"), [
    ("openai", "gpt-5", "no verified image-size rule"),  # [OA]: gpt-5 base deliberately absent: raises
    ("gemini", "gemini-3-pro-preview", "no verified image-size rule"),  # [GE]: retired code
    ("kimi", "kimi-k2.5", "no verified image-size rule"),  # [KI]: exact match only
    ("claude", "claude-3-opus", "no verified image-size rule"),
    ("claude", None, "needs the API model code"),
])
def test_api_rules_refuse_unverified_model_codes(rule, code, match) -> None:
    with pytest.raises(UserError, match=match):
        perceive(rule, 512, 512, model_code=code)
    with pytest.raises(UserError, match=match):
        check_rule(rule, model_code=code)


def test_check_rule() -> None:
    assert check_rule("qwen2_5") == "qwen2_5_vl"
    assert check_rule("llama3_2_vision") == "mllama"
    assert check_rule("claude", model_code="claude-sonnet-4-5") == "claude"
    assert check_rule("auto") == "auto"
    with pytest.raises(UserError, match="unknown resize rule"):
        check_rule("bilinear")


def test_every_registry_model_has_a_rule() -> None:
    """No silent 'none': only the baselines and the generic records state the image as sent."""
    from medvision_bm.models.registry import GENERIC_RECORDS, REGISTRY

    for record in REGISTRY.values():
        rule = record.processor_resize
        assert rule, record.name
        if rule == "auto":
            assert record.name == "hf"
            continue
        name = canonical_rule(rule)
        if name == "none":
            assert record.backend == "baseline" or record.name in GENERIC_RECORDS, record.name
        assert (name in API_RULES) == (record.name in ("openai", "openai_pro", "claude", "gemini", "kimi")), record.name
    expected = {"qwen2_5_vl": "qwen2_5", "lingshu": "qwen2_5", "medvision-model-rft": "qwen2_5", "qwen3_vl": "qwen3",
                "qwen2_5_vl_32b": "qwen2_5", "glm4v": "glm4v", "glm4v_flash": "glm4v", "openai_pro": "openai",
                "minimax_m3": "minimax_m3", "gemma4": "gemma4", "llama3_2_vision": "mllama",
                "llava_onevision": "llava_onevision", "intern_vl3": "internvl", "gemma3": "fixed", "medgemma": "fixed",
                "meddr": "fixed", "llava_med": "pad_square", "huatuogpt_vision": "pad_square",
                "healthgpt": "pad_square", "claude": "claude", "openai": "openai", "gemini": "gemini", "kimi": "kimi"}
    assert {k: REGISTRY[k].processor_resize for k in expected} == expected
    sizes = {k: REGISTRY[k].engine_kwargs.get("processor_resize_hw") for k in
             ("gemma3", "medgemma", "meddr", "llava_med", "huatuogpt_vision", "healthgpt")}
    assert sizes == {"gemma3": [896, 896], "medgemma": [896, 896], "meddr": [448, 448], "llava_med": [336, 336],
                     "huatuogpt_vision": [336, 336], "healthgpt": [336, 336]}


def test_a_record_without_a_rule_is_refused() -> None:
    import dataclasses

    from medvision_bm.models.registry import REGISTRY

    with pytest.raises(ValueError, match="no perceived-size rule"):
        dataclasses.replace(REGISTRY["glm4v"], processor_resize="")
    with pytest.raises(ValueError, match="unknown resize rule"):
        dataclasses.replace(REGISTRY["glm4v"], processor_resize="bilinear")
    with pytest.raises(ValueError, match="only for the baselines"):
        dataclasses.replace(REGISTRY["glm4v"], processor_resize="none")
    with pytest.raises(ValueError, match="processor_resize_hw"):
        dataclasses.replace(REGISTRY["glm4v"], processor_resize="fixed")
    with pytest.raises(ValueError, match="for API models"):
        dataclasses.replace(REGISTRY["glm4v"], processor_resize="claude")


def test_for_model_reads_the_folder_for_the_new_rules(tmp_path: Path) -> None:
    # a Mllama folder with 280-px tiles and at most 2 of them: 160x384 -> the 1x2 canvas (280x560, smallest
    # upscale 1.458); target (clip(160, 280, 280), clip(384, 280, 560)) = (280, 384), scale_w 1.0 < scale_h 1.75:
    # content (min(floor(160 * 1.0), 280), 384) = (160, 384), tile-padded to (280, 560)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "MllamaImageProcessor", "size": {"height": 280, "width": 280},
         "max_image_tiles": 2}))
    assert perceive_for_model("auto", str(tmp_path), 160, 384) == perceive("mllama", 160, 384, tile_size=280,
                                                                            max_image_tiles=2)
    assert perceive_for_model("mllama", str(tmp_path), 160, 384) == Perceived((280, 560), (160, 384))
    # LLaVA-OneVision with its own pinpoints (another folder: settings are read once per folder)
    ov = tmp_path / "ov"
    ov.mkdir()
    (ov / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "LlavaOnevisionImageProcessor", "image_grid_pinpoints": [[100, 200], [200, 100]]}))
    got = perceive_for_model("auto", str(ov), 160, 384)
    assert got.canvas_hw == (100, 200) and got.content_hw == (84, 200)  # ceil(160 * 200 / 384 = 83.3)
    # API rules read no folder and take the model code
    assert processed_hw_for_model("claude", "claude-sonnet-4-5", 512, 512) == (504, 504)
    with pytest.raises(UserError, match="needs the API model code"):
        processed_hw_for_model("claude", None, 512, 512)


# The processors' own helpers in transformers (the probes upstream runs) agree with our rules.
_SIZES = [(160, 384), (384, 160), (1935, 2400), (182, 218), (512, 512), (768, 768), (672, 672), (633, 633),
          (634, 634), (30, 3000), (1, 1), (5, 9), (2679, 1339), (1028, 2055), (97, 1500), (2400, 1935)]


def test_mllama_matches_transformers() -> None:
    mod = pytest.importorskip("transformers.models.mllama.image_processing_pil_mllama")
    for h, w in _SIZES:
        ch, cw = mod.get_optimal_tiled_canvas(h, w, 4, 560)
        content = tuple(int(v) for v in mod.get_image_size_fit_to_canvas(h, w, int(ch), int(cw), 560))
        assert perceive("mllama", h, w).content_hw == content, (h, w)


def test_llava_onevision_matches_transformers() -> None:
    import numpy as np

    utils = pytest.importorskip("transformers.image_processing_utils")
    from transformers.image_utils import ChannelDimension

    from medvision_bm.models.processing import LLAVA_ONEVISION_PINPOINTS

    pins = [list(p) for p in LLAVA_ONEVISION_PINPOINTS]
    for h, w in _SIZES:
        best = utils.select_best_resolution((h, w), pins)
        content = utils.get_patch_output_size(np.zeros((h, w, 3)), best, ChannelDimension.LAST)
        assert perceive("llava_onevision", h, w) == Perceived(tuple(best), tuple(content)), (h, w)


def test_gemma4_internvl_glm_match_transformers() -> None:
    g4 = pytest.importorskip("transformers.models.gemma4.image_processing_pil_gemma4")
    got = pytest.importorskip("transformers.models.got_ocr2.image_processing_pil_got_ocr2")
    glm = pytest.importorskip("transformers.models.glm46v.image_processing_pil_glm46v")
    for h, w in _SIZES:
        try:
            expected = g4.get_aspect_ratio_preserving_size(h, w, 16, 2520, 3)
        except ValueError:
            with pytest.raises(ValueError):
                perceive("gemma4", h, w)
        else:
            assert perceive("gemma4", h, w).canvas_hw == tuple(expected), (h, w)
        cols, rows = got.get_optimal_tiled_canvas((h, w), (448, 448), 1, 13)
        assert perceive("internvl", h, w).canvas_hw == (448 * rows, 448 * cols), (h, w)
        try:
            expected = glm.smart_resize(2, h, w, 2, 28, 12544, 9633792)
        except ValueError:
            with pytest.raises(ValueError):
                perceive("glm4v", h, w)
        else:
            assert perceive("glm4v", h, w).canvas_hw == tuple(expected), (h, w)


def test_stated_size_for_model_and_the_model_code_flag(tiny_qwen_dir: Path) -> None:
    from medvision_bm.models.processor_config import model_code_from_flags, stated_size_for_model

    # the tiny Qwen folder caps images at 64 merged tokens: 1000x1000 -> 224x224 (see test_for_model_reads...)
    got = stated_size_for_model("qwen2_5", str(tiny_qwen_dir), (1000, 1000), (0.5, 0.5))
    assert got.image_hw == got.content_hw == (224, 224) and got.pixel_hw_mm == (0.5 / (224 / 1000),) * 2
    flags = {"anthropic_model_code": "claude-sonnet-4-5", "thinking": True}
    assert model_code_from_flags("claude", flags) == "claude-sonnet-4-5"
    assert model_code_from_flags("qwen2_5", flags) is None
    got = stated_size_for_model("claude", None, (512, 512), (0.5, 0.5), model_code=model_code_from_flags("claude", flags))
    assert got.image_hw == (504, 504)
