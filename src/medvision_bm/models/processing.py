"""The image size a model perceives, per model family, so T/L and A/D prompts can state it.

This is MedVision's perceived-size lookup (upstream ``get_resized_img_shape`` in
``lmms_eval/tasks/medvision/medvision_utils.py``; each rule's upstream source is cited at it). A rule
maps the size of the image as sent (after any ``--reshape_image_hw``) to two shapes:

* the **canvas** the vision encoder perceives after the model's own resize *and padding*: the prompt states it as
  the image size;
* the **content**: the resize-only shape of the image inside that canvas. The stated pixel size divides the sent
  pixel size by ``content / sent`` per axis, because padding adds no physical extent.

The two differ only for processors that pad (``pad_square``, ``mllama``, ``llava_onevision``).
:func:`stated_size` returns both numbers the prompt states as a :class:`StatedSize`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medvision_bm.errors import UserError
from medvision_bm.io import read_json

#: Rules (canonical names):
#: - ``none``: the model sees the image as sent (only for the baselines and the generic ``hf``/``openai-compatible``
#:   records, and only when chosen explicitly);
#: - ``fixed``: stretched to ``height`` x ``width`` (Gemma-3 / MedGemma 896, MedDr 448);
#: - ``pad_square``: padded to a square, then resized to ``height`` (LLaVA-Med, HuatuoGPT-Vision, HealthGPT: 336);
#: - ``qwen2_5_vl`` / ``qwen3_vl``: Qwen smart resize, factor patch x merge = 28 / 32 (Qwen2.5-VL, Lingshu,
#:   MedVision-V0 / Qwen3-VL);
#: - ``glm4v``: GLM-4V smart resize (factor 28, area bounds counted over 2 temporal frames);
#: - ``minimax_m3``: Qwen smart resize with MiniMax-M3's bounds;
#: - ``gemma4``: one scale to the patch budget, each side floored to 48 (Gemma-4);
#: - ``mllama``: aspect fit onto <= 4 tiles of 560, padded to whole tiles (Llama-3.2-Vision);
#: - ``llava_onevision``: letterbox into the best anyres canvas of 384-px multiples (LLaVA-OneVision);
#: - ``internvl``: dynamic tiling, stretched onto 448*cols x 448*rows (InternVL3);
#: - ``claude`` / ``openai`` / ``gemini`` / ``kimi``: the client pre-resize of the API model, which needs the
#:   provider's model code (unknown codes raise).
RULES: tuple[str, ...] = ("none", "fixed", "pad_square", "qwen2_5_vl", "qwen3_vl", "glm4v", "minimax_m3", "gemma4",
                          "mllama", "llava_onevision", "internvl", "claude", "openai", "gemini", "kimi")
#: Rules computed from the provider's model code rather than from a processor.
API_RULES: tuple[str, ...] = ("claude", "openai", "gemini", "kimi")
#: Rules whose processor pads: the stated image size (canvas) and the pixel-size basis (content) differ.
PADDING_RULES: tuple[str, ...] = ("pad_square", "mllama", "llava_onevision")

#: The 36 anyres canvases of LLaVA-OneVision: every (384 i, 384 j), i, j in 1..6, in this order (the order breaks
#: ties in the canvas choice).
LLAVA_ONEVISION_PINPOINTS: tuple[tuple[int, int], ...] = tuple(
    (384 * i, 384 * j) for i in range(1, 7) for j in range(1, 7))

#: Defaults of the published checkpoints; a local folder's (or cached hub model's) processor settings win.
RULE_DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_5_vl": {"patch_size": 14, "merge_size": 2, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 16384},
    "qwen3_vl": {"patch_size": 16, "merge_size": 2, "min_pixels": 256 * 256, "max_pixels": 4096 * 4096},
    "glm4v": {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2, "min_pixels": 112 * 112,
              "max_pixels": 9633792},
    "minimax_m3": {"patch_size": 14, "merge_size": 2, "min_pixels": 4 * 28 * 28, "max_pixels": 672 * 672},
    "gemma4": {"patch_size": 16, "max_soft_tokens": 280, "pooling_kernel_size": 3},
    "mllama": {"tile_size": 560, "max_image_tiles": 4},
    "llava_onevision": {"image_grid_pinpoints": LLAVA_ONEVISION_PINPOINTS},
    "internvl": {"tile_size": 448, "min_tiles": 1, "max_tiles": 12, "use_thumbnail": True},
}

#: Other spellings of the rules.
RULE_ALIASES: dict[str, str] = {"qwen2_5": "qwen2_5_vl", "qwen2_vl": "qwen2_5_vl", "qwen3": "qwen3_vl",
                                "llama3_2_vision": "mllama", "internvl3": "internvl", "glm46v": "glm4v"}

_MAX_ASPECT = 200  # the Qwen and GLM processors refuse images more elongated than this


@dataclass(frozen=True)
class Perceived:
    """What a rule gives: the canvas the encoder perceives and the resized content inside it (rows, columns)."""

    canvas_hw: tuple[int, int]
    content_hw: tuple[int, int]


@dataclass(frozen=True)
class StatedSize:
    """The two numbers a T/L or A/D prompt states: the image size and the pixel size (height, width)."""

    image_hw: tuple[int, int]  # the perceived canvas: "The image size is W x H"
    pixel_hw_mm: tuple[float, float]  # sent pixel size / (content / sent), per axis
    content_hw: tuple[int, int]  # the resize-only shape the pixel size is based on (== image_hw unless padded)


def canonical_rule(rule: str) -> str:
    """The canonical name of a rule; ValueError for a name that is no rule."""
    name = RULE_ALIASES.get(rule, rule)
    if name not in RULES:
        raise ValueError(f"unknown resize rule {rule!r}; choose one of {', '.join(RULES)} (or auto, from the model's "
                         "processor settings)")
    return name


# ---------------------------------------------------------------------------------------------- processor rules
def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen-style dynamic resize: round each side to the nearest multiple of ``factor`` (Python's round, halves
    to even), then, if the area leaves [min_pixels, max_pixels], rescale both sides by one factor (floor when
    shrinking, ceil when growing) so the area fits while the aspect ratio is kept as well as the grid allows."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if max(height, width) / min(height, width) > _MAX_ASPECT:
        raise ValueError(f"aspect ratio of {height}x{width} exceeds {_MAX_ASPECT}, which Qwen processors refuse")
    new_h = round(height / factor) * factor
    new_w = round(width / factor) * factor
    if new_h * new_w > max_pixels:
        shrink = math.sqrt(height * width / max_pixels)
        new_h = max(factor, math.floor(height / shrink / factor) * factor)
        new_w = max(factor, math.floor(width / shrink / factor) * factor)
    elif new_h * new_w < min_pixels:
        grow = math.sqrt(min_pixels / (height * width))
        new_h = math.ceil(height * grow / factor) * factor
        new_w = math.ceil(width * grow / factor) * factor
    return new_h, new_w


def glm_smart_resize(height: int, width: int, factor: int, temporal: int, min_pixels: int,
                     max_pixels: int) -> tuple[int, int]:
    """GLM-4V's variant for a still image, which the processor treats as ``temporal`` frames: a side below
    ``factor`` is first scaled up (truncated) so the short side reaches ``factor``; sides round to the nearest
    multiple of ``factor``; the area bounds apply to ``temporal * H * W``."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {height}x{width}")
    if height < factor or width < factor:
        up = max(factor / height, factor / width)
        height, width = int(height * up), int(width * up)
    if max(height, width) / min(height, width) > _MAX_ASPECT:
        raise ValueError(f"aspect ratio of {height}x{width} exceeds {_MAX_ASPECT}, which GLM processors refuse")
    new_h = round(height / factor) * factor
    new_w = round(width / factor) * factor
    frames = temporal  # a still image is `temporal` identical frames: t_bar = round(t / t) * t = t
    if frames * new_h * new_w > max_pixels:
        shrink = math.sqrt(temporal * height * width / max_pixels)
        new_h = max(factor, math.floor(height / shrink / factor) * factor)
        new_w = max(factor, math.floor(width / shrink / factor) * factor)
    elif frames * new_h * new_w < min_pixels:
        grow = math.sqrt(min_pixels / (temporal * height * width))
        new_h = math.ceil(height * grow / factor) * factor
        new_w = math.ceil(width * grow / factor) * factor
    return new_h, new_w


def gemma4_size(height: int, width: int, patch_size: int, max_soft_tokens: int,
                pooling_kernel_size: int) -> tuple[int, int]:
    """Gemma-4: one scale ``sqrt(budget_px / area)`` (up or down) with budget_px = max_soft_tokens * k^2 * patch^2,
    then each side floored to a multiple of k * patch (48); a side that floors to 0 becomes one step and the other
    side ``floor(long / short)`` steps, capped at max_soft_tokens steps."""
    step = pooling_kernel_size * patch_size
    max_patches = max_soft_tokens * pooling_kernel_size ** 2
    budget_px = max_patches * patch_size ** 2
    scale = math.sqrt(budget_px / (height * width))
    new_h = math.floor(scale * height / step) * step
    new_w = math.floor(scale * width / step) * step
    if new_h == 0 and new_w == 0:
        raise ValueError(f"Gemma-4 would resize {height}x{width} to 0x0")
    longest = (max_patches // pooling_kernel_size ** 2) * step
    if new_h == 0:
        new_h, new_w = step, min(math.floor(width / height) * step, longest)
    elif new_w == 0:
        new_h, new_w = min(math.floor(height / width) * step, longest), step
    if new_h * new_w > budget_px:
        raise ValueError(f"Gemma-4 would resize {height}x{width} to {new_h}x{new_w}, above its patch budget")
    return new_h, new_w


def mllama_size(height: int, width: int, tile_size: int, max_image_tiles: int) -> Perceived:
    """Llama-3.2-Vision: choose the tile arrangement (rows x cols <= max tiles) whose smaller axis scale is the
    smallest one >= 1 (else the largest one < 1), the smallest area on ties; fit the image into it keeping the
    aspect ratio (each side first clipped into [tile, canvas], the scaled side floored); the encoder sees the
    content padded to whole tiles: canvas = ceil(content / tile) * tile per axis."""
    best: tuple[float, int, int, int] | None = None  # (scale, area, canvas_h, canvas_w)
    scales = []
    for a in range(1, max_image_tiles + 1):
        for b in range(1, max_image_tiles + 1):
            if a * b <= max_image_tiles:
                ch, cw = a * tile_size, b * tile_size
                scales.append((min(ch / height, cw / width), ch * cw, ch, cw))
    ups = [s for s in scales if s[0] >= 1]
    chosen = min(s[0] for s in ups) if ups else max(s[0] for s in scales)
    for s in scales:
        if s[0] == chosen and (best is None or s[1] < best[1]):
            best = s
    assert best is not None
    _, _, canvas_h, canvas_w = best
    target_h = min(max(height, tile_size), canvas_h)
    target_w = min(max(width, tile_size), canvas_w)
    scale_h, scale_w = target_h / height, target_w / width
    if scale_w < scale_h:
        content = (min(math.floor(height * scale_w) or 1, target_h), target_w)
    else:
        content = (target_h, min(math.floor(width * scale_h) or 1, target_w))
    canvas = (math.ceil(content[0] / tile_size) * tile_size, math.ceil(content[1] / tile_size) * tile_size)
    return Perceived(canvas, content)


def llava_onevision_size(height: int, width: int, pinpoints: Sequence[Sequence[int]]) -> Perceived:
    """LLaVA-OneVision: the canvas is the pinpoint (h, w) with the most effective pixels
    ``min(int(W s) * int(H s), W H)``, s = min(w / W, h / H) (fewest wasted pixels on ties, first one wins);
    the content fills the canvas along the axis with the smaller scale, the other side is ``ceil``-ed; the rest
    is padding."""
    best: tuple[int, int] | None = None
    best_effective, best_wasted = 0, float("inf")
    for ch, cw in pinpoints:
        s = min(cw / width, ch / height)
        effective = min(int(width * s) * int(height * s), width * height)
        wasted = ch * cw - effective
        if effective > best_effective or (effective == best_effective and wasted < best_wasted):
            best, best_effective, best_wasted = (int(ch), int(cw)), effective, wasted
    if best is None:
        raise ValueError("LLaVA-OneVision needs at least one canvas (image_grid_pinpoints)")
    ch, cw = best
    scale_h, scale_w = ch / height, cw / width
    if scale_w < scale_h:
        content = (min(math.ceil(height * scale_w), ch), cw)
    else:
        content = (ch, min(math.ceil(width * scale_h), cw))
    return Perceived(best, content)


def internvl_size(height: int, width: int, tile_size: int, min_tiles: int, max_tiles: int,
                  use_thumbnail: bool) -> tuple[int, int]:
    """InternVL3 dynamic tiling: among the grids cols x rows with min <= cols*rows <= max (max + 1 when a
    thumbnail is added and max != 1), listed cols-major and stably sorted by tile count, take the one whose
    cols/rows is closest to W/H; on a tie a later grid wins while the image area exceeds half the grid's area.
    The image is stretched onto (tile*rows, tile*cols) with no padding."""
    limit = max_tiles + (1 if use_thumbnail and max_tiles != 1 else 0)
    grids = sorted(((c, r) for c in range(1, limit + 1) for r in range(1, limit + 1) if min_tiles <= c * r <= limit),
                   key=lambda g: g[0] * g[1])
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for cols, rows in grids:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and area > 0.5 * tile_size * tile_size * cols * rows:
            best = (cols, rows)
    return tile_size * best[1], tile_size * best[0]


def pad_square_content(height: int, width: int, side: int) -> tuple[int, int]:
    """Padded to a square of max(H, W), resized to ``side``: the content scales by side / max(H, W), each side
    rounded with Python's round (halves to even)."""
    longest = max(height, width)
    return round(height * side / longest), round(width * side / longest)


# ---------------------------------------------------------------------------------------------- API model rules
#: Claude (long-edge cap px, image-token cap), matched as the longest prefix of the normalised code.
CLAUDE_CAPS: dict[str, tuple[int, int]] = {
    "claude-fable-5": (2576, 4784), "claude-opus-4-8": (2576, 4784), "claude-opus-4-7": (2576, 4784),
    "claude-opus-4-6": (1568, 1568), "claude-opus-4-5": (1568, 1568), "claude-sonnet-4-6": (1568, 1568),
    "claude-sonnet-4-5": (1568, 1568), "claude-haiku-4-5": (1568, 1568),
}
#: OpenAI at detail "high": ("patch", patch budget, max dimension px or None) or ("tile", long cap, short cap);
#: matched exactly (``gpt-5`` is deliberately absent upstream: its family is unconfirmed).
OPENAI_CAPS: dict[str, tuple[str, int, int | None]] = {
    "gpt-5.5": ("patch", 2500, 2048), "gpt-5.5-pro": ("patch", 2500, 2048), "gpt-5.4": ("patch", 2500, 2048),
    "gpt-5.4-mini": ("patch", 1536, None), "gpt-5.4-nano": ("patch", 1536, None),
    "gpt-5-mini": ("patch", 1536, None), "gpt-5-nano": ("patch", 1536, None), "o4-mini": ("patch", 1536, None),
    "gpt-4.1": ("tile", 2048, 768), "gpt-4o": ("tile", 2048, 768), "o3": ("tile", 2048, 768),
}
#: Gemini long-edge cap (px), matched as the longest prefix of the normalised code.
GEMINI_CAPS: dict[str, int] = {
    "gemini-2.5-pro": 3072, "gemini-2.5-flash": 3072, "gemini-2.5-flash-lite": 3072,
    "gemini-3.1-pro-preview": 3072, "gemini-3-flash-preview": 3072, "gemini-3.1-flash-lite": 3072,
    "gemini-3.5-flash": 3072,
}
#: The flag that carries each API rule's model code.
API_CODE_FLAGS: dict[str, str] = {"claude": "anthropic_model_code", "openai": "openai_model_code",
                                  "gemini": "google_model_code", "kimi": "kimi_model_code"}
#: Kimi MoonViT (patch size, merge kernel, pre-merge patch budget, patches per side), matched exactly.
KIMI_CAPS: dict[str, tuple[int, int, int, int]] = {"kimi-k2.6": (14, 2, 16384, 512)}

_DATE_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def _longest_prefix(table: Mapping[str, Any], code: str) -> str | None:
    hits = [k for k in table if code.startswith(k)]
    return max(hits, key=len) if hits else None


def api_model_key(rule: str, model_code: str) -> str:
    """The table entry an API model code resolves to (the gateway prefix such as ``anthropic/`` is dropped;
    Claude codes also map '.' to '-', OpenAI codes drop a ``-YYYY-MM-DD`` suffix). UserError for a code whose
    image handling upstream has not verified."""
    rule = canonical_rule(rule)
    bare = str(model_code or "").split("/")[-1]
    if rule == "claude":
        key = _longest_prefix(CLAUDE_CAPS, bare.replace(".", "-"))
        table: Mapping[str, Any] = CLAUDE_CAPS
    elif rule == "gemini":
        key, table = _longest_prefix(GEMINI_CAPS, bare), GEMINI_CAPS
    elif rule == "openai":
        norm = _DATE_SUFFIX.sub("", bare)
        key, table = (norm if norm in OPENAI_CAPS else None), OPENAI_CAPS
    elif rule == "kimi":
        key, table = (bare if bare in KIMI_CAPS else None), KIMI_CAPS
    else:
        raise ValueError(f"resize rule {rule!r} does not depend on an API model code")
    if key is None:
        raise UserError(f"{rule} model code {model_code!r} has no verified image-size rule, so the image and pixel "
                        f"size stated in T/L and A/D prompts could be wrong; use one of {', '.join(table)}")
    return key


def _floor_to(x: float, step: int) -> int:
    return max(step, (int(x) // step) * step)


def api_resized_hw(rule: str, model_code: str, height: int, width: int) -> tuple[int, int]:
    """The size the client sends (and the model perceives: a fixed point of the provider's own resize/pad)."""
    rule = canonical_rule(rule)
    key = api_model_key(rule, model_code)
    if rule == "claude":
        cap, tokens = CLAUDE_CAPS[key]
        s = min(1.0, cap / max(height, width), math.sqrt(tokens * 750.0 / (height * width)))
        return _floor_to(height * s, 28), _floor_to(width * s, 28)
    if rule == "openai":
        family, a, b = OPENAI_CAPS[key]
        if family == "patch":
            s = min(1.0, math.sqrt(a * 32.0 * 32.0 / (height * width)))
            if b is not None:
                s = min(s, b / max(height, width))
            return _floor_to(height * s, 32), _floor_to(width * s, 32)
        assert b is not None
        s = min(1.0, a / max(height, width), b / min(height, width))
        return max(1, int(height * s)), max(1, int(width * s))
    if rule == "gemini":
        cap = GEMINI_CAPS[key]
        if max(height, width) <= cap:
            return int(height), int(width)
        s = cap / max(height, width)
        return max(1, int(height * s)), max(1, int(width * s))
    patch, merge, budget, per_side = KIMI_CAPS[key]  # kimi
    factor, side_cap = patch * merge, per_side * patch
    s = min(1.0, math.sqrt(budget / (max(1.0, width // patch) * max(1.0, height // patch))),
            side_cap / width, side_cap / height)
    out_h = _floor_to(min(int(height * s), side_cap), factor)
    out_w = _floor_to(min(int(width * s), side_cap), factor)
    while (out_w // patch) * (out_h // patch) > budget and max(out_w, out_h) > factor:
        if out_w >= out_h:
            out_w -= factor
        else:
            out_h -= factor
    return out_h, out_w


# ---------------------------------------------------------------------------------------------- dispatch
def _params(rule: str, params: Mapping[str, Any]) -> dict[str, Any]:
    return {**RULE_DEFAULTS.get(rule, {}), **{k: v for k, v in params.items() if v is not None}}


def _fixed_hw(rule: str, p: Mapping[str, Any]) -> tuple[int, int]:
    try:
        return int(p["height"]), int(p["width"] if "width" in p else p["height"])
    except KeyError as exc:
        raise ValueError(f"resize rule {rule!r} needs height and width") from exc


def perceive(rule: str, h: int, w: int, *, model_code: str | None = None, **params: Any) -> Perceived:
    """The canvas and content of an image of ``h`` x ``w`` pixels (as sent) under ``rule``.

    ``params`` override :data:`RULE_DEFAULTS` (None values are ignored, unknown keys too, so the output of
    :func:`image_processor_settings` can be passed as is): ``fixed``/``pad_square``: ``height``, ``width``;
    Qwen/GLM/MiniMax: ``patch_size``, ``merge_size`` (GLM: ``temporal_patch_size``), ``min_pixels``,
    ``max_pixels``; ``gemma4``: ``patch_size``, ``max_soft_tokens``, ``pooling_kernel_size``; ``mllama``:
    ``tile_size`` (else ``height``), ``max_image_tiles``; ``llava_onevision``: ``image_grid_pinpoints``;
    ``internvl``: ``tile_size``, ``min_tiles``, ``max_tiles``, ``use_thumbnail``. API rules need ``model_code``.
    """
    h, w = int(h), int(w)
    if h <= 0 or w <= 0:
        raise ValueError(f"image size must be positive, got {h}x{w}")
    rule = canonical_rule(rule)
    p = _params(rule, params)
    if rule == "none":
        return Perceived((h, w), (h, w))
    if rule == "fixed":
        size = _fixed_hw(rule, p)
        return Perceived(size, size)
    if rule == "pad_square":
        side = _fixed_hw(rule, p)
        return Perceived(side, pad_square_content(h, w, side[0]))
    if rule in ("qwen2_5_vl", "qwen3_vl", "minimax_m3"):
        size = smart_resize(h, w, int(p["patch_size"]) * int(p["merge_size"]), int(p["min_pixels"]),
                            int(p["max_pixels"]))
        return Perceived(size, size)
    if rule == "glm4v":
        size = glm_smart_resize(h, w, int(p["patch_size"]) * int(p["merge_size"]), int(p["temporal_patch_size"]),
                                int(p["min_pixels"]), int(p["max_pixels"]))
        return Perceived(size, size)
    if rule == "gemma4":
        size = gemma4_size(h, w, int(p["patch_size"]), int(p["max_soft_tokens"]), int(p["pooling_kernel_size"]))
        return Perceived(size, size)
    if rule == "mllama":
        tile = int(params.get("tile_size") or params.get("height") or p["tile_size"])
        return mllama_size(h, w, tile, int(p["max_image_tiles"]))
    if rule == "llava_onevision":
        return llava_onevision_size(h, w, p["image_grid_pinpoints"])
    if rule == "internvl":
        size = internvl_size(h, w, int(p["tile_size"]), int(p["min_tiles"]), int(p["max_tiles"]),
                             bool(p["use_thumbnail"]))
        return Perceived(size, size)
    if not model_code:
        raise UserError(f"resize rule {rule!r} needs the API model code (--{API_CODE_FLAGS[rule]})")
    size = api_resized_hw(rule, model_code, h, w)
    return Perceived(size, size)


def stated_size(rule: str, sent_hw: tuple[int, int], sent_pixel_hw_mm: tuple[float, float], *,
                model_code: str | None = None, **params: Any) -> StatedSize:
    """The image size and pixel size a T/L or A/D prompt states for an image sent at ``sent_hw`` whose pixels
    measure ``sent_pixel_hw_mm`` (after any reshape: native pixel / (sent / native)). Pixel size per axis:
    sent pixel / (content / sent), the same operations in the same order as upstream."""
    return _stated(perceive(rule, sent_hw[0], sent_hw[1], model_code=model_code, **params), sent_hw,
                   sent_pixel_hw_mm)


def _stated(got: Perceived, sent_hw: tuple[int, int], sent_pixel_hw_mm: tuple[float, float]) -> StatedSize:
    ph, pw = sent_pixel_hw_mm
    return StatedSize(image_hw=got.canvas_hw,
                      pixel_hw_mm=(ph / (got.content_hw[0] / sent_hw[0]), pw / (got.content_hw[1] / sent_hw[1])),
                      content_hw=got.content_hw)


def processed_hw(rule: str, h: int, w: int, **params: Any) -> tuple[int, int]:
    """The resize-only size (rows, columns) of an image of ``h`` x ``w`` pixels: the basis of the stated pixel
    size. It equals the stated image size except for the padding rules (:data:`PADDING_RULES`), whose canvas
    :func:`perceive` gives. API rules take ``model_code`` in ``params``."""
    code = params.pop("model_code", None)
    return perceive(rule, h, w, model_code=code, **params).content_hw


def check_rule(rule: str, *, model_code: str | None = None) -> str:
    """Config-time check of a run's rule: the canonical name; UserError for an unknown rule, an API rule without
    a model code, or a model code whose image handling upstream has not verified."""
    try:
        name = canonical_rule(rule) if rule != "auto" else "auto"
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if name in API_RULES:
        if not model_code:
            raise UserError(f"resize rule {name!r} needs the API model code (--{API_CODE_FLAGS[name]})")
        api_model_key(name, model_code)
    return name


# ---------------------------------------------------------------------------------------------- processor settings
def _read_json(path: str | Path | None) -> dict[str, Any] | None:
    if path is None or not Path(path).is_file():
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else None


def _find_config(locate: Callable[[str], str | Path | None]) -> dict[str, Any] | None:
    """Image-processor settings where transformers looks for them: the ``image_processor`` entry of
    processor_config.json (transformers 5 saves) first, else preprocessor_config.json (the published
    checkpoints); ``locate(filename)`` gives a file's path, or None where there is none."""
    nested = _read_json(locate("processor_config.json"))
    if nested and isinstance(nested.get("image_processor"), dict):
        return dict(nested["image_processor"])
    return _read_json(locate("preprocessor_config.json"))


def read_image_processor_config(folder: str | Path) -> dict[str, Any]:
    """The raw image-processor settings of a local model folder (see :func:`_find_config`)."""
    root = Path(folder)
    if not root.is_dir():
        raise UserError(f"model folder {root} does not exist")
    config = _find_config(lambda name: root / name)
    if config is None:
        raise UserError(f"{root} has no preprocessor_config.json (nor an image_processor in processor_config.json)")
    return config


_PASSTHROUGH_KEYS = ("patch_size", "merge_size", "temporal_patch_size", "max_soft_tokens", "pooling_kernel_size",
                     "max_image_tiles")


def image_processor_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """Normalise raw settings to the keys :func:`perceive` takes, resolving them as transformers does:
    ``size.shortest_edge``/``size.longest_edge`` are the pixel bounds, overridden by top-level
    ``min_pixels``/``max_pixels``; ``size.height``/``size.width`` give a fixed size (Mllama: the tile);
    ``image_grid_pinpoints`` and the patch/merge/tile counts pass through."""
    size = config.get("size") or {}
    out: dict[str, Any] = {}
    for key in _PASSTHROUGH_KEYS:
        if config.get(key) is not None:
            out[key] = int(config[key])
    pinpoints = config.get("image_grid_pinpoints")
    if isinstance(pinpoints, list) and pinpoints:
        out["image_grid_pinpoints"] = tuple((int(a), int(b)) for a, b in pinpoints)
    if isinstance(size, Mapping):
        lo = size.get("shortest_edge", size.get("min_pixels"))
        hi = size.get("longest_edge", size.get("max_pixels"))
        if lo is not None:
            out["min_pixels"] = int(lo)
        if hi is not None:
            out["max_pixels"] = int(hi)
        if size.get("height") is not None and size.get("width") is not None:
            out["height"], out["width"] = int(size["height"]), int(size["width"])
    for key in ("min_pixels", "max_pixels"):
        if config.get(key) is not None:
            out[key] = int(config[key])
    return out


#: Image-processor class names (lowercase, no separators) and the rule they follow.
_PROCESSOR_RULES: tuple[tuple[str, str], ...] = (
    ("glm4v", "glm4v"), ("glm46v", "glm4v"), ("minimaxm3", "minimax_m3"), ("gemma4", "gemma4"),
    ("mllama", "mllama"), ("llavaonevision", "llava_onevision"),
)


def infer_rule(config: Mapping[str, Any]) -> str | None:
    """The resize rule that raw image-processor settings describe, or None when it is none of :data:`RULES`
    (e.g. shortest-edge resize plus centre crop, whose pixel geometry is not a plain rescale)."""
    kind = f"{config.get('image_processor_type', '')} {config.get('processor_class', '')}".lower()
    flat = kind.replace("_", "").replace("-", "")
    settings = image_processor_settings(config)
    for marker, rule in _PROCESSOR_RULES:
        if marker in flat:
            return rule
    if "qwen" in kind and "patch_size" in settings:
        return "qwen3_vl" if "qwen3" in kind or settings["patch_size"] == 16 else "qwen2_5_vl"
    if config.get("do_resize") is False:
        return "none"
    if "height" in settings and not config.get("do_center_crop"):
        return "fixed"
    return None


def processed_hw_for_folder(folder: str | Path, h: int, w: int, rule: str | None = None,
                            **overrides: Any) -> tuple[int, int]:
    """:func:`processed_hw` with the rule and parameters read from a local model folder; ``rule`` forces one,
    ``overrides`` (e.g. a record's max_pixels) win over the folder's values."""
    config = read_image_processor_config(folder)
    chosen = rule or infer_rule(config)
    if chosen is None:
        raise UserError(f"cannot tell how the processor in {folder} resizes images; set the record's resize rule "
                        f"to one of {', '.join(RULES)}")
    return processed_hw(chosen, h, w, **{**image_processor_settings(config), **overrides})


def _cached_hub_config(model_id: str, revision: str | None, cache_dir: str | Path | None) -> dict[str, Any] | None:
    """The image-processor settings of a hub model already in the local Hugging Face cache (never downloads)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None

    def locate(filename: str) -> str | None:
        try:
            found = try_to_load_from_cache(model_id, filename, revision=revision,
                                           cache_dir=str(cache_dir) if cache_dir else None)
        except Exception:  # malformed ids and the like: no cached settings
            return None
        return found if isinstance(found, str) else None

    return _find_config(locate)


#: Settings found per (model, revision, cache_dir): read once per run, not once per image size. Misses are not
#: kept, so a model that reaches the cache later is still read.
_MODEL_CONFIGS: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}


def _model_config(model: str, revision: str | None, cache_dir: str | Path | None) -> dict[str, Any] | None:
    key = (model, revision, str(cache_dir) if cache_dir else None)
    if key not in _MODEL_CONFIGS:
        folder = Path(model).expanduser()
        config = (_find_config(lambda name: folder / name) if folder.is_dir()
                  else _cached_hub_config(model, revision, cache_dir))
        if config is None:
            return None
        _MODEL_CONFIGS[key] = config
    return _MODEL_CONFIGS[key]


def _settings_for_model(rule: str, model: str | None, revision: str | None,
                        cache_dir: str | Path | None) -> tuple[str, dict[str, Any]]:
    """The rule (``auto`` resolved) and the processor settings of ``model`` where they can be read offline."""
    if rule != "auto" and canonical_rule(rule) in API_RULES:
        return canonical_rule(rule), {}
    config = _model_config(model, revision, cache_dir) if model else None
    if rule == "auto":
        inferred = infer_rule(config) if config is not None else None
        if inferred is None:
            raise UserError(f"cannot tell how the processor of {model} resizes images; pass --processor_resize "
                            f"with one of {', '.join(GENERIC_HF_RULES)}")
        rule = inferred
    return canonical_rule(rule), (image_processor_settings(config) if config is not None else {})


#: What the generic transformers record's --processor_resize takes besides ``auto`` (the only record with ``auto``).
GENERIC_HF_RULES: tuple[str, ...] = ("none", "fixed", "qwen2_5", "qwen3")


def perceive_for_model(rule: str, model: str | None, h: int, w: int, *, revision: str | None = None,
                       cache_dir: str | Path | None = None, model_code: str | None = None,
                       **overrides: Any) -> Perceived:
    """:func:`perceive` with the processor's own settings where they can be read without a download: a local
    folder, or a hub id already in the Hugging Face cache (``cache_dir``, default: the usual one); otherwise the
    rule's published defaults. ``rule='auto'`` infers the rule from those settings (an error when there are
    none). ``overrides`` (e.g. the max_pixels a record passes to the processor) win. API rules read no settings
    and need ``model_code``."""
    name, settings = _settings_for_model(rule, model, revision, cache_dir)
    params = {**settings, **overrides}
    if name in ("fixed", "pad_square") and "height" not in params:
        raise UserError(f"resize rule {name!r} needs a fixed height and width, and the processor settings of "
                        f"{model} give none; choose another resize rule")
    return perceive(name, h, w, model_code=model_code, **params)


def stated_size_for_model(rule: str, model: str | None, sent_hw: tuple[int, int],
                          sent_pixel_hw_mm: tuple[float, float], *, revision: str | None = None,
                          cache_dir: str | Path | None = None, model_code: str | None = None,
                          **overrides: Any) -> StatedSize:
    """:func:`stated_size` with the settings :func:`perceive_for_model` reads (what a run's view should use)."""
    got = perceive_for_model(rule, model, sent_hw[0], sent_hw[1], revision=revision, cache_dir=cache_dir,
                             model_code=model_code, **overrides)
    return _stated(got, sent_hw, sent_pixel_hw_mm)


def model_code_from_flags(rule: str, model_flags: Mapping[str, Any]) -> str | None:
    """The provider model code an API rule needs, from a run's model flags (None for the other rules)."""
    name = canonical_rule(rule) if rule != "auto" else rule
    return model_flags.get(API_CODE_FLAGS[name]) if name in API_RULES else None


def processed_hw_for_model(rule: str, model: str | None, h: int, w: int, *, revision: str | None = None,
                           cache_dir: str | Path | None = None, **overrides: Any) -> tuple[int, int]:
    """The resize-only (content) size under :func:`perceive_for_model`; for an API rule ``model`` (or
    ``model_code`` in ``overrides``) is the provider's model code."""
    code = overrides.pop("model_code", None)
    if rule != "auto" and canonical_rule(rule) in API_RULES:
        code = code or model
    return perceive_for_model(rule, model, h, w, revision=revision, cache_dir=cache_dir, model_code=code,
                              **overrides).content_hw
