"""The image size a model perceives, per model family, so T/L and A/D prompts can state it.

This is MedVision's perceived-size lookup (upstream ``get_resized_img_shape`` in
``lmms_eval/tasks/medvision/medvision_utils.py``: newer rules @0a4c5e2, the paper protocol's master rules @c221615;
rules and citations in docs/spec/perceived-size.md and docs/benchmark-definition.md). A rule maps the size of the image as sent (after any ``--reshape_image_hw``) to two
shapes:

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import SupportsIndex, SupportsInt

from medvision_bm.errors import UserError

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
#: - ``llava_onevision_master``: the paper era's LLaVA-OneVision rule (master c221615 ``_process_img_llavaonevision``):
#:   ``select_best_resolution(PIL size, pinpoints)``, i.e. the canvas chosen for the image with its sides swapped
#:   (PIL gives (W, H), the helper reads (H, W)), the image taken as stretched onto it;
#: - ``internvl``: dynamic tiling, stretched onto 448*cols x 448*rows (InternVL3);
#: - ``claude`` / ``openai`` / ``gemini`` / ``kimi``: the client pre-resize of the API model, which needs the
#:   provider's model code (unknown codes raise).
RULES: tuple[str, ...] = ("none", "fixed", "pad_square", "qwen2_5_vl", "qwen3_vl", "glm4v", "minimax_m3", "gemma4",
                          "mllama", "llava_onevision", "llava_onevision_master", "internvl", "claude", "openai",
                          "gemini", "kimi")
#: Rules computed from the provider's model code rather than from a processor.
API_RULES: tuple[str, ...] = ("claude", "openai", "gemini", "kimi")
#: Rules whose processor pads: the stated image size (canvas) and the pixel-size basis (content) differ.
PADDING_RULES: tuple[str, ...] = ("pad_square", "mllama", "llava_onevision")

#: The 36 anyres canvases of LLaVA-OneVision: every (384 i, 384 j), i, j in 1..6, in this order (the order breaks
#: ties in the canvas choice).
LLAVA_ONEVISION_PINPOINTS: tuple[tuple[int, int], ...] = tuple(
    (384 * i, 384 * j) for i in range(1, 7) for j in range(1, 7))

#: Defaults of the published checkpoints; a local folder's (or cached hub model's) processor settings win.
RULE_DEFAULTS: dict[str, dict[str, int | bool | tuple[tuple[int, int], ...]]] = {
    "qwen2_5_vl": {"patch_size": 14, "merge_size": 2, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 16384},
    "qwen3_vl": {"patch_size": 16, "merge_size": 2, "min_pixels": 256 * 256, "max_pixels": 4096 * 4096},
    "glm4v": {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2, "min_pixels": 112 * 112,
              "max_pixels": 9633792},
    "minimax_m3": {"patch_size": 14, "merge_size": 2, "min_pixels": 4 * 28 * 28, "max_pixels": 672 * 672},
    "gemma4": {"patch_size": 16, "max_soft_tokens": 280, "pooling_kernel_size": 3},
    "mllama": {"tile_size": 560, "max_image_tiles": 4},
    "llava_onevision": {"image_grid_pinpoints": LLAVA_ONEVISION_PINPOINTS},
    "llava_onevision_master": {"image_grid_pinpoints": LLAVA_ONEVISION_PINPOINTS},
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


def best_pinpoint(height: int, width: int, pinpoints: Sequence[Sequence[int]]) -> tuple[int, int]:
    """The anyres canvas (h, w) for an image of ``height`` x ``width``: the pinpoint with the most effective pixels
    ``min(int(W s) * int(H s), W H)``, s = min(w / W, h / H) (fewest wasted pixels on ties, first one wins)."""
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
    return best


def llava_onevision_size(height: int, width: int, pinpoints: Sequence[Sequence[int]]) -> Perceived:
    """LLaVA-OneVision: the canvas is :func:`best_pinpoint`; the content fills the canvas along the axis with the
    smaller scale, the other side is ``ceil``-ed; the rest is padding."""
    best = best_pinpoint(height, width, pinpoints)
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


def _longest_prefix(table: Mapping[str, object], code: str) -> str | None:
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
        table: Mapping[str, object] = CLAUDE_CAPS
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
def int_of(value: object) -> int:
    """``int(value)`` of a setting or option read as ``object``: int()'s result, and int()'s own TypeError for a
    value it refuses (a list, a dict, None)."""
    if isinstance(value, str | bytes | bytearray | SupportsInt | SupportsIndex):
        return int(value)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not "
                    f"'{type(value).__name__}'")


def _pinpoints(value: object) -> Sequence[Sequence[int]]:
    """The anyres canvases of the settings (pairs of ints), refused as iterating anything else would be."""
    if isinstance(value, Sequence):
        return value
    raise TypeError(f"'{type(value).__name__}' object is not iterable")


def _params(rule: str, params: Mapping[str, object]) -> dict[str, object]:
    return {**RULE_DEFAULTS.get(rule, {}), **{k: v for k, v in params.items() if v is not None}}


def _fixed_hw(rule: str, p: Mapping[str, object]) -> tuple[int, int]:
    try:
        return int_of(p["height"]), int_of(p["width"] if "width" in p else p["height"])
    except KeyError as exc:
        raise ValueError(f"resize rule {rule!r} needs height and width") from exc


def perceive(rule: str, h: int, w: int, *, model_code: str | None = None, **params: object) -> Perceived:
    """The canvas and content of an image of ``h`` x ``w`` pixels (as sent) under ``rule``.

    ``params`` override :data:`RULE_DEFAULTS` (None values are ignored, unknown keys too, so the output of
    :func:`image_processor_settings` can be passed as is): ``fixed``/``pad_square``: ``height``, ``width``;
    Qwen/GLM/MiniMax: ``patch_size``, ``merge_size`` (GLM: ``temporal_patch_size``), ``min_pixels``,
    ``max_pixels``; ``gemma4``: ``patch_size``, ``max_soft_tokens``, ``pooling_kernel_size``; ``mllama``:
    ``tile_size`` (else ``height``), ``max_image_tiles``; ``llava_onevision``/``llava_onevision_master``:
    ``image_grid_pinpoints``;
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
        size = smart_resize(h, w, int_of(p["patch_size"]) * int_of(p["merge_size"]), int_of(p["min_pixels"]),
                            int_of(p["max_pixels"]))
        return Perceived(size, size)
    if rule == "glm4v":
        size = glm_smart_resize(h, w, int_of(p["patch_size"]) * int_of(p["merge_size"]),
                                int_of(p["temporal_patch_size"]), int_of(p["min_pixels"]), int_of(p["max_pixels"]))
        return Perceived(size, size)
    if rule == "gemma4":
        size = gemma4_size(h, w, int_of(p["patch_size"]), int_of(p["max_soft_tokens"]),
                           int_of(p["pooling_kernel_size"]))
        return Perceived(size, size)
    if rule == "mllama":
        tile = int_of(params.get("tile_size") or params.get("height") or p["tile_size"])
        return mllama_size(h, w, tile, int_of(p["max_image_tiles"]))
    if rule == "llava_onevision":
        return llava_onevision_size(h, w, _pinpoints(p["image_grid_pinpoints"]))
    if rule == "llava_onevision_master":  # master passes PIL's (W, H) where the helper reads (H, W)
        size = best_pinpoint(w, h, _pinpoints(p["image_grid_pinpoints"]))
        return Perceived(size, size)
    if rule == "internvl":
        size = internvl_size(h, w, int_of(p["tile_size"]), int_of(p["min_tiles"]), int_of(p["max_tiles"]),
                             bool(p["use_thumbnail"]))
        return Perceived(size, size)
    if not model_code:
        raise UserError(f"resize rule {rule!r} needs the API model code (--{API_CODE_FLAGS[rule]})")
    size = api_resized_hw(rule, model_code, h, w)
    return Perceived(size, size)


def stated_size(rule: str, sent_hw: tuple[int, int], sent_pixel_hw_mm: tuple[float, float], *,
                model_code: str | None = None, **params: object) -> StatedSize:
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


def processed_hw(rule: str, h: int, w: int, *, model_code: str | None = None, **params: object) -> tuple[int, int]:
    """The resize-only size (rows, columns) of an image of ``h`` x ``w`` pixels: the basis of the stated pixel
    size. It equals the stated image size except for the padding rules (:data:`PADDING_RULES`), whose canvas
    :func:`perceive` gives. API rules take ``model_code``."""
    return perceive(rule, h, w, model_code=model_code, **params).content_hw


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

GENERIC_HF_RULES: tuple[str, ...] = ("none", "fixed", "qwen2_5", "qwen3")
