"""Build tiny, randomly initialised, seeded VLM folders offline (LLaVA, Qwen2.5-VL) for plumbing checks."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from medvision_bm.errors import UserError
from medvision_bm.io import read_json, write_json_atomic
from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.processing import int_of
from medvision_bm.secrets import SafeArgumentParser

if TYPE_CHECKING:
    import tokenizers
    from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

ARCHS: tuple[str, ...] = ("llava", "qwen2_5_vl")

#: Written into every folder (README.md, medvision_tiny.json, config.json) so nobody mistakes it for a model.
RANDOM_WEIGHTS_NOTE = (
    "RANDOM WEIGHTS: a tiny randomly initialised model built offline by medvision-bm for plumbing checks "
    "only; its answers carry no information and its scores mean nothing."
)
MARKER_FILE = "medvision_tiny.json"

# A fixed, self-written corpus for the byte-level BPE merges: text shaped like this suite's prompts and answers,
# so prompts tokenise into fewer tokens than one per byte. Changing it changes every tiny tokenizer.
_CORPUS = (
    "Estimate the bounding box of the liver in this CT slice. The image is 256 x 256 pixels and each pixel is "
    "0.78 mm wide and 0.78 mm high. Give the lower-left and upper-right corners as relative coordinates "
    "between 0 and 1. Answer: 0.12, 0.34, 0.56, 0.78. The major axis of the lesion is 23.5 mm and the minor "
    "axis is 11.2 mm. The distance between the two landmarks is 41.0 mm; the angle between the lines is "
    "37.5 degrees. MRI, ultrasound, X-ray, axial, sagittal, coronal plane, kidney, tumor, spleen, heart, brain. "
    "<answer>1.0, 2.5</answer> <think>measure the structure, then convert pixels to millimetres</think> "
    "0 1 2 3 4 5 6 7 8 9 10 25 50 75 100 0.5 1.5 2.25 3.75 . , ; : ( ) [ ] - + = %"
)
_BPE_VOCAB_SIZE = 640


def _byte_bpe(special_tokens: Sequence[str]) -> tokenizers.Tokenizer:
    """A byte-level BPE tokenizer trained on the fixed corpus; same merges on every run."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=_BPE_VOCAB_SIZE + len(special_tokens),
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer)
    return tok


def _special_ids(raw: tokenizers.Tokenizer, tokens: Sequence[str]) -> dict[str, int]:
    """The ids of special tokens ``raw`` was trained with (each has one: the trainer adds them first)."""
    ids: dict[str, int] = {}
    for token in tokens:
        tid = raw.token_to_id(token)
        if tid is None:  # pragma: no cover - the trainer adds every special token
            raise ValueError(f"the tiny tokenizer has no {token!r}")
        ids[token] = tid
    return ids


def _silence_special_tokens(model: PreTrainedModel, token_ids: Sequence[int]) -> None:
    """Zero the output rows of special tokens: their logit is then 0 while the best of ~500 random logits is
    positive, so greedy decoding never emits EOS or an image placeholder and always runs to max_new_tokens."""
    import torch

    head = model.get_output_embeddings()
    with torch.no_grad():
        for tid in token_ids:
            head.weight[tid].zero_()


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    """transformers draws a progress bar for writing even one tiny shard; keep the output clean."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _write_markers(out: Path, arch: str, seed: int) -> None:
    marker = {"random_weights": True, "purpose": "plumbing checks only", "arch": arch, "seed": seed,
              "built_by": "medvision_bm.models.tiny", "note": RANDOM_WEIGHTS_NOTE}
    write_json_atomic(out / MARKER_FILE, marker)
    _update_json(out / "config.json", medvision_tiny=marker)
    (out / "README.md").write_text(
        f"# Tiny {arch} (random weights)\n\n{RANDOM_WEIGHTS_NOTE}\n\n"
        f"Built with seed {seed} by `medvision-bm models make-tiny --arch {arch}`.\n",
        encoding="utf-8",
    )


def _update_json(path: Path, **entries: object) -> None:
    write_json_atomic(path, {**read_json(path), **entries})


def is_tiny_model(path: str | Path) -> bool:
    """True when the folder was built here (random weights)."""
    return (Path(path) / MARKER_FILE).is_file()


def _qwen_tokenizer(max_length: int) -> tuple[tokenizers.Tokenizer, PreTrainedTokenizerFast, dict[str, int]]:
    """The tiny byte-level tokenizer with Qwen2.5-VL's special tokens (left padding), and their ids."""
    from transformers import PreTrainedTokenizerFast

    raw = _byte_bpe(_QWEN_SPECIALS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"},
        padding_side="left", model_max_length=max_length,
    )
    return raw, tokenizer, _special_ids(raw, _QWEN_SPECIALS)


def _prepare_out(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not is_tiny_model(out):
            raise UserError(f"--out {out} is a non-empty folder that holds no tiny model; choose an empty or new folder")
        shutil.rmtree(out)  # an earlier tiny build: replace it whole, so no file of another arch lingers
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create --out {out} ({exc.strerror}); choose a folder you can write to") from None
    return out


def _save_random_model(model_cls: type[PreTrainedModel], config: PreTrainedConfig, out: Path, seed: int, special_ids: Sequence[int], *,
                       eos: int, pad: int, bos: int) -> None:
    """Initialise ``model_cls(config)`` from ``seed``, make greedy decoding run to max_new_tokens, save it."""
    import torch

    torch.manual_seed(seed)
    model = model_cls(config).eval()
    _silence_special_tokens(model, special_ids)
    gc = model.generation_config
    gc.eos_token_id, gc.pad_token_id, gc.bos_token_id = eos, pad, bos
    gc.do_sample = False
    with _no_progress_bars():
        model.save_pretrained(out)


# ----------------------------------------------------------------------------------------------- LLaVA

_LLAVA_SPECIALS = ("<unk>", "<s>", "</s>", "<pad>", "<image>")
_LLAVA_IMAGE_HW = 28  # the processor resizes every image to 28 x 28 (no crop): 2 x 2 patches of 14

_LLAVA_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}SYSTEM: {% elif message['role'] == 'user' %}USER: "
    "{% else %}ASSISTANT: {% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>\n{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}</s>{% endif %}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def make_tiny_llava(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny LLaVA (CLIP vision tower, Llama text model) that loads with AutoProcessor and
    AutoModelForImageTextToText; images are resized to 28 x 28."""
    from tokenizers import processors
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaImageProcessorPil,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    out = _prepare_out(out_dir)
    raw = _byte_bpe(_LLAVA_SPECIALS)
    # like Llama tokenizers, it puts <s> in front of every text it encodes with special tokens
    raw.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", raw.token_to_id("<s>"))])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        extra_special_tokens={"image_token": "<image>"}, padding_side="left", model_max_length=4096,
    )
    ids = _special_ids(raw, _LLAVA_SPECIALS)
    image_processor = LlavaImageProcessorPil(
        size={"height": _LLAVA_IMAGE_HW, "width": _LLAVA_IMAGE_HW}, do_center_crop=False,
        crop_size={"height": _LLAVA_IMAGE_HW, "width": _LLAVA_IMAGE_HW},
    )
    processor = LlavaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, patch_size=14,
        vision_feature_select_strategy="default", num_additional_image_tokens=1, chat_template=_LLAVA_TEMPLATE,
    )
    vision = CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        image_size=_LLAVA_IMAGE_HW, patch_size=14, projection_dim=32,
    )
    text = LlamaConfig(
        vocab_size=raw.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, initializer_range=0.2,
        bos_token_id=ids["<s>"], eos_token_id=ids["</s>"], pad_token_id=ids["<pad>"],
    )
    config = LlavaConfig(
        vision_config=vision, text_config=text, image_token_index=ids["<image>"],
        image_seq_length=(_LLAVA_IMAGE_HW // 14) ** 2, vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    _save_random_model(LlavaForConditionalGeneration, config, out, seed, list(ids.values()),
                       eos=ids["</s>"], pad=ids["<pad>"], bos=ids["<s>"])
    processor.save_pretrained(out)
    _write_markers(out, "llava", seed)
    return out


# ------------------------------------------------------------------------------------------ Qwen2.5-VL

_QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>")
#: Qwen2.5-VL's own pixel bounds are 56*56 .. 28*28*16384; the tiny one keeps images small (4 .. 64 merged
#: tokens) so a CPU forward pass stays cheap while the resize rule is the same.
QWEN_TINY_MIN_PIXELS = 28 * 28 * 4
QWEN_TINY_MAX_PIXELS = 28 * 28 * 64

_QWEN_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def make_tiny_qwen2_5_vl(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny Qwen2.5-VL in the layout of the published checkpoints (preprocessor_config.json naming
    Qwen2VLImageProcessor and Qwen2_5_VLProcessor). Where torchvision is absent, AutoProcessor cannot build
    its video part: load it with :func:`medvision_bm.models.hf_local.load_processor`, which falls back to an
    image-only processor."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    out = _prepare_out(out_dir)
    raw, tokenizer, ids = _qwen_tokenizer(4096)
    head_dim = 16
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": raw.get_vocab_size(), "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 4096, "initializer_range": 0.2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                "mrope_section": [head_dim // 4, head_dim // 8, head_dim // 8]},
            "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 14,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 56, "out_hidden_size": 64,
            "fullatt_block_indexes": [1],
        },
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    _save_random_model(Qwen2_5_VLForConditionalGeneration, config, out, seed, list(ids.values()),
                       eos=ids["<|im_end|>"], pad=ids["<|endoftext|>"], bos=ids["<|endoftext|>"])
    _write_qwen_processor(out, tokenizer, QWEN_TINY_MIN_PIXELS, QWEN_TINY_MAX_PIXELS)
    _write_markers(out, "qwen2_5_vl", seed)
    return out


def _write_qwen_processor(out: Path, tokenizer: PreTrainedTokenizerFast, min_pixels: int, max_pixels: int) -> None:
    """The processor files as the published checkpoints ship them (no nested processor_config.json)."""
    tokenizer.save_pretrained(out)
    _update_json(out / "tokenizer_config.json", processor_class="Qwen2_5_VLProcessor")
    preprocessor = {
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
        "min_pixels": min_pixels, "max_pixels": max_pixels,
        "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    }
    write_json_atomic(out / "preprocessor_config.json", preprocessor)
    (out / "chat_template.jinja").write_text(_QWEN_TEMPLATE, encoding="utf-8")


#: Qwen2.5-VL's published pixel bounds (preprocessor_config.json of the Qwen2.5-VL checkpoints).
QWEN_MIN_PIXELS = 56 * 56
QWEN_MAX_PIXELS = 28 * 28 * 1280


def make_random_qwen2_5_vl(out_dir: str | Path, text: JsonObject, vision: JsonObject, *, seed: int = 0,
                           dtype: str = "bfloat16", device: str = "cpu", min_pixels: int = QWEN_MIN_PIXELS,
                           max_pixels: int = QWEN_MAX_PIXELS) -> Path:
    """A Qwen2.5-VL of any size (``text``/``vision``: config values, e.g. a published config.json's) with random
    weights, built on ``device`` in ``dtype`` and saved like a checkpoint: for benchmarks of the local path at a
    real model's size without its weights. The tokenizer is the tiny one (its special tokens take the ids the
    config's image/vision/EOS ids point to); output rows beyond its vocabulary and of its special tokens are zeroed,
    so greedy decoding emits only its ordinary tokens and always runs to max_new_tokens."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    out = _prepare_out(out_dir)
    raw, tokenizer, ids = _qwen_tokenizer(32768)
    text = {**text, "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"]}
    config = Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, tie_word_embeddings=bool(text.get("tie_word_embeddings", False)),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    previous = torch.get_default_dtype()
    torch.manual_seed(seed)
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        with torch.device(device):
            model = Qwen2_5_VLForConditionalGeneration(config).eval()
    finally:
        torch.set_default_dtype(previous)
    unused = list(range(raw.get_vocab_size(), int_of(text["vocab_size"])))
    _silence_special_tokens(model, list(ids.values()))
    if unused:
        with torch.no_grad():
            model.get_output_embeddings().weight[unused].zero_()
    gc = model.generation_config
    gc.eos_token_id, gc.pad_token_id, gc.bos_token_id = ids["<|im_end|>"], ids["<|endoftext|>"], ids["<|endoftext|>"]
    gc.do_sample = False
    with _no_progress_bars():
        model.save_pretrained(out)
    del model
    _write_qwen_processor(out, tokenizer, min_pixels, max_pixels)
    _write_markers(out, "qwen2_5_vl", seed)
    return out


_BUILDERS = {"llava": make_tiny_llava, "qwen2_5_vl": make_tiny_qwen2_5_vl}


def make_tiny(arch: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Build the tiny model of ``arch`` (one of :data:`ARCHS`) into ``out_dir``."""
    if arch not in _BUILDERS:
        raise UserError(f"unknown tiny architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    return _BUILDERS[arch](out_dir, seed=seed)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or SafeArgumentParser(prog="medvision-bm models make-tiny",
                                          description="Build a tiny random-weight VLM folder (plumbing checks only).")
    p.add_argument("--arch", choices=ARCHS, default="llava", help="architecture to build (default: llava)")
    p.add_argument("--out", required=True, help="folder to write the model to (created if absent)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default: 0)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        out = make_tiny(args.arch, args.out, seed=args.seed)
    except UserError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return UserError.exit_code
    print(f"wrote tiny {args.arch} (random weights, plumbing checks only) to {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
