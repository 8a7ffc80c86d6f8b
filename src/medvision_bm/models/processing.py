"""The image size a model actually processes, from its processor's resize rule, so prompts can state it."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from medvision_bm.errors import UserError
from medvision_bm.io import read_json

#: Resize rules:
#: - ``none``: the model sees the image as sent;
#: - ``fixed``: the processor resizes every image to ``height`` x ``width`` (no crop, e.g. SigLIP-style 896x896);
#: - ``qwen2_5_vl``: Qwen2-VL/Qwen2.5-VL dynamic resolution (both sides multiples of patch 14 x merge 2 = 28,
#:   area kept within [min_pixels, max_pixels]);
#: - ``qwen3_vl``: the same rule with patch 16 x merge 2 = 32 and Qwen3-VL's pixel bounds.
RULES: tuple[str, ...] = ("none", "fixed", "qwen2_5_vl", "qwen3_vl")

#: Defaults of the published checkpoints' preprocessor_config.json; a local folder's own values win.
RULE_DEFAULTS: dict[str, dict[str, int]] = {
    "qwen2_5_vl": {"patch_size": 14, "merge_size": 2, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 16384},
    "qwen3_vl": {"patch_size": 16, "merge_size": 2, "min_pixels": 256 * 256, "max_pixels": 4096 * 4096},
}

#: Other spellings of the rules (the registry says ``qwen2_5`` and ``qwen3``).
RULE_ALIASES: dict[str, str] = {"qwen2_5": "qwen2_5_vl", "qwen2_vl": "qwen2_5_vl", "qwen3": "qwen3_vl"}

_MAX_ASPECT = 200  # the Qwen processors refuse images more elongated than this


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


def processed_hw(rule: str, h: int, w: int, **params: Any) -> tuple[int, int]:
    """Size (rows, columns) of an image of ``h`` x ``w`` pixels after the model's processor resizes it.

    ``params``: for ``fixed``: ``height``, ``width``; for the Qwen rules (all optional, defaults in
    :data:`RULE_DEFAULTS`): ``patch_size``, ``merge_size``, ``min_pixels``, ``max_pixels``. Unknown keys are
    ignored, so the output of :func:`image_processor_settings` can be passed as is.
    """
    h, w = int(h), int(w)
    rule = RULE_ALIASES.get(rule, rule)
    if rule == "none":
        return h, w
    if rule == "fixed":
        try:
            return int(params["height"]), int(params["width"])
        except KeyError as exc:
            raise ValueError("resize rule 'fixed' needs height and width") from exc
    if rule in RULE_DEFAULTS:
        p = {**RULE_DEFAULTS[rule], **{k: v for k, v in params.items() if v is not None}}
        factor = int(p["patch_size"]) * int(p["merge_size"])
        return smart_resize(h, w, factor, int(p["min_pixels"]), int(p["max_pixels"]))
    raise ValueError(f"unknown resize rule {rule!r}; choose one of {', '.join(RULES)} (or auto, from the model's "
                     "processor settings)")


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


def image_processor_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """Normalise raw settings to the keys :func:`processed_hw` takes, resolving them as transformers does:
    ``size.shortest_edge``/``size.longest_edge`` are the pixel bounds, overridden by top-level
    ``min_pixels``/``max_pixels``; ``size.height``/``size.width`` give a fixed size."""
    size = config.get("size") or {}
    out: dict[str, Any] = {}
    for key in ("patch_size", "merge_size"):
        if config.get(key) is not None:
            out[key] = int(config[key])
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


def infer_rule(config: Mapping[str, Any]) -> str | None:
    """The resize rule that raw image-processor settings describe, or None when it is none of :data:`RULES`
    (e.g. shortest-edge resize plus centre crop, whose pixel geometry is not a plain rescale)."""
    kind = f"{config.get('image_processor_type', '')} {config.get('processor_class', '')}".lower()
    settings = image_processor_settings(config)
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


def processed_hw_for_model(rule: str, model: str | None, h: int, w: int, *, revision: str | None = None,
                           cache_dir: str | Path | None = None, **overrides: Any) -> tuple[int, int]:
    """The size the model sees, with the processor's own settings where they can be read without a download:
    a local folder, or a hub id already in the Hugging Face cache (``cache_dir``, default: the usual one);
    otherwise the rule's published defaults.
    ``rule='auto'`` infers the rule from those settings (an error when there are none). ``overrides`` (e.g. the
    max_pixels a record passes to the processor) win."""
    config = _model_config(model, revision, cache_dir) if model else None
    if rule == "auto":
        inferred = infer_rule(config) if config is not None else None
        if inferred is None:
            raise UserError(f"cannot tell how the processor of {model} resizes images; pass a resize rule "
                            f"({', '.join(RULES)})")
        rule = inferred
    params = {**(image_processor_settings(config) if config is not None else {}), **overrides}
    if RULE_ALIASES.get(rule, rule) == "fixed" and not {"height", "width"} <= params.keys():
        raise UserError(f"resize rule 'fixed' needs a fixed height and width, and the processor settings of "
                        f"{model} give none; choose another resize rule")
    return processed_hw(rule, h, w, **params)
