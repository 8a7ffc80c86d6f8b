"""A model's image-processor settings (its folder's or the hub cache's preprocessor config), and the perceived
and stated sizes of an image for a named model: the processor rules of ``processing`` fed with those settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from medvision_bm.errors import UserError
from medvision_bm.io import read_json
from medvision_bm.jsontypes import JsonMapping, JsonObject

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
from medvision_bm.models.processing import (
    API_CODE_FLAGS,
    API_RULES,
    GENERIC_HF_RULES,
    RULES,
    Perceived,
    StatedSize,
    _stated,
    canonical_rule,
    int_of,
    perceive,
    processed_hw,
)


def _read_json(path: str | Path | None) -> JsonObject | None:
    if path is None or not Path(path).is_file():
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else None


def _find_config(locate: Callable[[str], str | Path | None]) -> JsonObject | None:
    """Image-processor settings where transformers looks for them: the ``image_processor`` entry of
    processor_config.json (transformers 5 saves) first, else preprocessor_config.json (the published
    checkpoints); ``locate(filename)`` gives a file's path, or None where there is none."""
    nested = _read_json(locate("processor_config.json"))
    inner = nested.get("image_processor") if nested else None
    if isinstance(inner, dict):
        return dict(inner)
    return _read_json(locate("preprocessor_config.json"))


def read_image_processor_config(folder: str | Path) -> JsonObject:
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


#: A setting :func:`perceive` takes: a count or size, or the anyres canvases.
Setting = int | tuple[tuple[int, int], ...]


def image_processor_settings(config: JsonMapping) -> dict[str, Setting]:
    """Normalise raw settings to the keys :func:`perceive` takes, resolving them as transformers does:
    ``size.shortest_edge``/``size.longest_edge`` are the pixel bounds, overridden by top-level
    ``min_pixels``/``max_pixels``; ``size.height``/``size.width`` give a fixed size (Mllama: the tile);
    ``image_grid_pinpoints`` and the patch/merge/tile counts pass through."""
    size = config.get("size") or {}
    out: dict[str, Setting] = {}
    for key in _PASSTHROUGH_KEYS:
        if config.get(key) is not None:
            out[key] = int_of(config[key])
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
            out[key] = int_of(config[key])
    return out


#: Image-processor class names (lowercase, no separators) and the rule they follow.
_PROCESSOR_RULES: tuple[tuple[str, str], ...] = (
    ("glm4v", "glm4v"), ("glm46v", "glm4v"), ("minimaxm3", "minimax_m3"), ("gemma4", "gemma4"),
    ("mllama", "mllama"), ("llavaonevision", "llava_onevision"),
)


def infer_rule(config: JsonMapping) -> str | None:
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
                            *, model_code: str | None = None, **overrides: object) -> tuple[int, int]:
    """:func:`processed_hw` with the rule and parameters read from a local model folder; ``rule`` forces one,
    ``overrides`` (e.g. a record's max_pixels) win over the folder's values."""
    config = read_image_processor_config(folder)
    chosen = rule or infer_rule(config)
    if chosen is None:
        raise UserError(f"cannot tell how the processor in {folder} resizes images; set the record's resize rule "
                        f"to one of {', '.join(RULES)}")
    return processed_hw(chosen, h, w, model_code=model_code, **{**image_processor_settings(config), **overrides})


def _cached_hub_config(model_id: str, revision: str | None, cache_dir: str | Path | None) -> JsonObject | None:
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
_MODEL_CONFIGS: dict[tuple[str, str | None, str | None], JsonObject] = {}


def _model_config(model: str, revision: str | None, cache_dir: str | Path | None) -> JsonObject | None:
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
                        cache_dir: str | Path | None) -> tuple[str, dict[str, Setting]]:
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


def perceive_for_model(rule: str, model: str | None, h: int, w: int, *, revision: str | None = None,
                       cache_dir: str | Path | None = None, model_code: str | None = None,
                       **overrides: object) -> Perceived:
    """:func:`perceive` with the processor's own settings where they can be read without a download: a local
    folder, or a hub id already in the Hugging Face cache (``cache_dir``, default: the usual one); otherwise the
    rule's published defaults. ``rule='auto'`` infers the rule from those settings (an error when there are
    none). ``overrides`` (e.g. the max_pixels a record passes to the processor) win. API rules read no settings
    and need ``model_code``."""
    name, settings = _settings_for_model(rule, model, revision, cache_dir)
    params: dict[str, object] = {**settings, **overrides}
    if name in ("fixed", "pad_square") and "height" not in params:
        raise UserError(f"resize rule {name!r} needs a fixed height and width, and the processor settings of "
                        f"{model} give none; choose another resize rule")
    return perceive(name, h, w, model_code=model_code, **params)


def stated_size_for_model(rule: str, model: str | None, sent_hw: tuple[int, int],
                          sent_pixel_hw_mm: tuple[float, float], *, revision: str | None = None,
                          cache_dir: str | Path | None = None, model_code: str | None = None,
                          **overrides: object) -> StatedSize:
    """:func:`stated_size` with the settings :func:`perceive_for_model` reads (what a run's view should use)."""
    got = perceive_for_model(rule, model, sent_hw[0], sent_hw[1], revision=revision, cache_dir=cache_dir,
                             model_code=model_code, **overrides)
    return _stated(got, sent_hw, sent_pixel_hw_mm)


def model_code_from_flags(rule: str, model_flags: Mapping[str, Any]) -> str | None:
    """The provider model code an API rule needs, from a run's model flags (None for the other rules; ``Any``: the
    flags hold what the command line gave, a text for these)."""
    name = canonical_rule(rule) if rule != "auto" else rule
    return model_flags.get(API_CODE_FLAGS[name]) if name in API_RULES else None


def processed_hw_for_model(rule: str, model: str | None, h: int, w: int, *, revision: str | None = None,
                           cache_dir: str | Path | None = None, model_code: str | None = None,
                           **overrides: object) -> tuple[int, int]:
    """The resize-only (content) size under :func:`perceive_for_model`; for an API rule ``model`` (or
    ``model_code``) is the provider's model code."""
    code = model_code
    if rule != "auto" and canonical_rule(rule) in API_RULES:
        code = code or model
    return perceive_for_model(rule, model, h, w, revision=revision, cache_dir=cache_dir, model_code=code,
                              **overrides).content_hw
