"""Models that need upstream code: clone it at the commit pinned in the record, put it on the import path, and
answer through a small adapter per model (LLaVA-Med, MedDr, HuatuoGPT-Vision, HealthGPT).

The clone and pin logic (``third_party_code``) runs anywhere git does; what every adapter shares is in
``third_party_shared``. The adapters need the upstream code, its pinned dependencies and a
CUDA GPU (every upstream inference path calls ``.cuda()``), so upstream modules are only imported inside adapter
methods, when a run actually uses one.

What each adapter calls, at the pinned commits (see the adapter docstrings for details):

- LLaVA-Med (microsoft/LLaVA-Med): ``llava.model.builder.load_pretrained_model``, ``llava.conversation.conv_templates``
  (``mistral_instruct``), ``llava.mm_utils.tokenizer_image_token`` / ``process_images`` and the model's ``generate``,
  as ``llava/eval/model_vqa.py`` does.
- HuatuoGPT-Vision (FreedomIntelligence/HuatuoGPT-Vision): ``cli.HuatuoChatbot(model_dir).inference(text, images)``,
  with the chatbot's ``gen_kwargs`` set per request.
- MedDr (sunanhe/MedDr on an InternVL environment): ``src.model.internvl_chat.InternVLChatModel`` and
  ``src.dataset.transforms.build_transform`` with ``InternVLChatModel.chat``, as ``demo.py`` does.
- HealthGPT (DCDmllm/HealthGPT): the steps of ``llava/demo/com_infer_phi4.py`` (L14) and
  ``llava/demo/com_infer_qwen2_5.py`` (XL32) -- those scripts have no importable loader, so the adapter makes the same
  calls: ``LlavaPhiForCausalLM`` / ``LlavaQwen2ForCausalLM``, ``llava.peft`` H-LoRA, ``llava/demo/utils.py`` helpers.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from medvision_bm.errors import UserError
from medvision_bm.models.base import (
    GenSettings,
    ModelRunSettings,
    required_weights,
)
from medvision_bm.models.hf_local import add_stop_criteria
from medvision_bm.models.hf_types import Decoder, GenerateKwargs
from medvision_bm.models.registry import ModelRecord
from medvision_bm.models.third_party_code import _load_module, _put_on_path, prepare_third_party
from medvision_bm.models.third_party_shared import (
    Adapter,
    GenerateModel,
    ThirdPartyBackend,
    UpstreamModel,
    accept_only_forward_kwargs,
    counting_generate,
    llava_conversation_prompt,
    python_random,
    seed_generation,
    torch_dtype,
    upstream_generate_kwargs,
    with_system_text,
)

if TYPE_CHECKING:
    import torch
    from PIL import Image
    from transformers import PreTrainedTokenizerBase


class LlavaModel(Protocol):
    """An upstream LLaVA-style model as an adapter calls it: its config and ``generate(ids, images=...)``."""

    @property
    def config(self) -> object: ...

    def generate(self, *args: torch.Tensor, **kwargs: object) -> torch.Tensor: ...


class HuatuoChatbot(Protocol):
    """HuatuoGPT-Vision's ``cli.HuatuoChatbot``: its model, tokenizer, generation settings and ``inference``."""

    model: UpstreamModel
    tokenizer: Decoder
    gen_kwargs: GenerateKwargs

    def inference(self, text: str, images: list[Image.Image]) -> list[str] | str: ...


class InternVLChatModel(GenerateModel, Protocol):
    """MedDr's ``InternVLChatModel``: ``chat`` answers one question on one image's tiles."""

    def chat(self, *, tokenizer: Decoder, pixel_values: torch.Tensor, question: str,
             generation_config: GenerateKwargs, print_out: bool) -> str: ...


# =====================================================================================================================
# LLaVA-Med
# =====================================================================================================================

#: Greedy decoding on mistral_instruct can end at once on long prompts (an empty answer; haotian-liu/LLaVA#1363):
#: MedVision forced at least 16 new tokens, far fewer than any real answer. Used when GenSettings give no floor.
LLAVA_MED_MIN_NEW_TOKENS = 16


def llava_med_model_name(name_from_path: str) -> str:
    """The model name handed to ``load_pretrained_model``, which only takes its LLaVA-Mistral path when the name
    contains both "llava" and "mistral" (else it loads a plain language model). LLaVA-Med v1.5 is Mistral-based,
    so a folder named otherwise gets a name that says so."""
    low = name_from_path.lower()
    if "llava" in low and "mistral" in low:
        return name_from_path
    return f"llava-med-mistral-{name_from_path}"


@dataclass(eq=False)
class LlavaMedAdapter:
    """LLaVA-Med v1.5 through its ``llava`` package, as ``llava/eval/model_vqa.py`` runs it: the
    ``mistral_instruct`` template, ``<image>`` before the question, ``process_images`` (pad to square, CLIP-336), and
    ``generate(ids, images=...)`` whose output holds only the new tokens."""

    tokenizer: Decoder
    model: LlavaModel
    image_processor: object  # handed to llava.mm_utils.process_images only
    _: KW_ONLY
    conv_mode: str
    dtype: torch.dtype
    device: torch.device

    @classmethod
    def load(cls, weights: str, conv_mode: str, dtype_name: str | None) -> LlavaMedAdapter:
        import torch
        from llava.mm_utils import get_model_name_from_path
        from llava.model.builder import load_pretrained_model

        with contextlib.suppress(ImportError):
            from llava.utils import disable_torch_init

            disable_torch_init()
        path = os.path.expanduser(weights)
        name = llava_med_model_name(get_model_name_from_path(path))
        tokenizer, model, image_processor, _ = load_pretrained_model(path, None, name)
        dtype = torch_dtype(dtype_name, torch.float16)  # the builder loads float16; the record may ask otherwise
        model.to(dtype=dtype).eval()
        accept_only_forward_kwargs(model)
        return cls(tokenizer, model, image_processor, conv_mode=conv_mode, dtype=dtype, device=model.device)

    def prompt(self, question: str, system_prompt: str | None) -> str:
        from llava.constants import DEFAULT_IM_END_TOKEN, DEFAULT_IM_START_TOKEN, DEFAULT_IMAGE_TOKEN
        from llava.conversation import conv_templates

        image_token = DEFAULT_IMAGE_TOKEN
        if getattr(self.model.config, "mm_use_im_start_end", False):
            image_token = DEFAULT_IM_START_TOKEN + DEFAULT_IMAGE_TOKEN + DEFAULT_IM_END_TOKEN
        return llava_conversation_prompt(conv_templates, self.conv_mode, question, image_token, system_prompt)

    def answer(self, prompt: str, image: Image.Image, gen: GenSettings, system_prompt: str | None
               ) -> tuple[str, int | None, int | None]:
        import torch
        from llava.constants import IMAGE_TOKEN_INDEX
        from llava.mm_utils import process_images, tokenizer_image_token

        text = self.prompt(prompt, system_prompt)
        ids = tokenizer_image_token(text, self.tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt")
        ids = ids.unsqueeze(0).to(self.device)
        with python_random(int(gen.seed or 0)):
            pixels = process_images([image], self.image_processor, self.model.config)
        pixels = pixels.to(device=self.device, dtype=self.dtype)
        kw = upstream_generate_kwargs(gen, min_new_tokens=LLAVA_MED_MIN_NEW_TOKENS)
        kw = add_stop_criteria(kw, self.tokenizer, gen.stop)
        seed_generation(gen)
        with torch.inference_mode():
            out = self.model.generate(ids, images=pixels, use_cache=True, **kw)
        answer = self.tokenizer.batch_decode(out, skip_special_tokens=True)[0].strip()
        return answer, int(ids.shape[-1]), int(out.shape[-1])


# =====================================================================================================================
# HuatuoGPT-Vision
# =====================================================================================================================


def check_huatuo_weights(weights: str) -> str:
    """``HuatuoChatbot`` picks its architecture from the weights path: "huatuogpt-vision-7b" loads Qwen2, any other
    name containing "huatuogpt" loads the LLaMA-style 34B, anything else is refused. Say so before loading."""
    if "huatuogpt" not in weights.lower():
        raise UserError(f"HuatuoGPT-Vision's loader needs 'huatuogpt' in the weights path to pick the model "
                        f"(got {weights!r}); name the folder like the released weights, e.g. HuatuoGPT-Vision-34B")
    return weights


def huatuo_gen_kwargs(upstream: GenerateKwargs, gen: GenSettings) -> GenerateKwargs:
    """The chatbot's ``gen_kwargs`` for one request: the upstream dict (eos/pad ids, ``repetition_penalty`` 1.2,
    ``min_new_tokens`` 1) with our budget and decoding mode. Upstream samples at temperature 0.2 with a 512-token
    budget; the run's settings decide both here, and its repetition penalty and floor replace upstream's when set."""
    kw = {k: v for k, v in upstream.items()
          if k not in ("do_sample", "temperature", "top_p", "top_k", "max_new_tokens", "stopping_criteria")}
    floor = upstream.get("min_new_tokens")  # upstream's is 1
    kw.update(upstream_generate_kwargs(gen, min_new_tokens=floor if isinstance(floor, int) else None))
    return kw


class HuatuoAdapter:
    """HuatuoGPT-Vision through the upstream ``cli.HuatuoChatbot``: ``HuatuoChatbot(model_dir, device)`` loads the
    model (bfloat16), ``inference(text, images)`` builds the ``<|user|>``/``<|assistant|>`` prompt, pads the image to
    square and returns a list of answers. Generation settings go through the chatbot's ``gen_kwargs`` dict."""

    def __init__(self, bot: HuatuoChatbot) -> None:
        self.bot = bot
        self.upstream_gen_kwargs = dict(bot.gen_kwargs)

    @classmethod
    def load(cls, checkout_dir: Path, weights: str) -> HuatuoAdapter:
        cli = _load_module(Path(checkout_dir) / "cli.py", "huatuogpt_vision_cli")
        bot = cli.HuatuoChatbot(check_huatuo_weights(weights), device="cuda")
        accept_only_forward_kwargs(bot.model)
        return cls(bot)

    def answer(self, prompt: str, image: Image.Image, gen: GenSettings, system_prompt: str | None
               ) -> tuple[str, int | None, int | None]:
        kw = huatuo_gen_kwargs(self.upstream_gen_kwargs, gen)
        self.bot.gen_kwargs = add_stop_criteria(kw, self.bot.tokenizer, gen.stop)
        seed_generation(gen)
        with counting_generate(self.bot.model) as counts:
            answers = self.bot.inference(with_system_text(prompt, system_prompt), [image])
        text = answers[0] if isinstance(answers, list) else answers
        return text, counts.get("in"), counts.get("out")


# =====================================================================================================================
# MedDr
# =====================================================================================================================

MEDDR_IMG_CONTEXT_TOKEN = "<IMG_CONTEXT>"
#: Where ``build_transform(is_train, input_size, pad2square)`` lives: MedDr's own module (used by its demo.py), then
#: the InternVL checkout the record also puts on the path.
MEDDR_TRANSFORM_MODULES = ("src.dataset.transforms", "internvl.train.dataset")


def meddr_build_transform() -> Callable[..., Callable[[Image.Image], torch.Tensor]]:
    """MedDr's ``build_transform``; a module that is absent falls through to the next, a dependency missing
    inside one is an error of its own."""
    for module in MEDDR_TRANSFORM_MODULES:
        try:
            return importlib.import_module(module).build_transform
        except ModuleNotFoundError as exc:
            if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
                continue
            raise
    raise ImportError(f"no build_transform in {' or '.join(MEDDR_TRANSFORM_MODULES)}")


@dataclass(eq=False)
class MedDrAdapter:
    """MedDr as its ``demo.py`` runs it: ``LlamaTokenizer``, ``src.model.internvl_chat.InternVLChatModel`` (bfloat16),
    ``build_transform(is_train=False, input_size=force_image_size, pad2square=config.pad2square)`` (448x448), and
    ``model.chat(tokenizer, pixel_values, question, generation_config, print_out=False)``."""

    tokenizer: Decoder
    model: InternVLChatModel
    transform: Callable[[Image.Image], torch.Tensor]
    _: KW_ONLY
    dtype: torch.dtype
    device: str = "cuda"  # chat() itself puts the prompt ids on "cuda"

    @classmethod
    def load(cls, weights: str, dtype_name: str | None, revision: str | None = None) -> MedDrAdapter:
        import torch
        from src.model.internvl_chat import InternVLChatModel
        from transformers import LlamaTokenizer

        build_transform = meddr_build_transform()
        dtype = torch_dtype(dtype_name, torch.bfloat16)
        tokenizer = LlamaTokenizer.from_pretrained(weights, revision=revision or "main")  # transformers' default
        model = InternVLChatModel.from_pretrained(weights, revision=revision, low_cpu_mem_usage=True,
                                                  torch_dtype=dtype).cuda().eval()
        size = model.config.force_image_size or model.config.vision_config.image_size
        transform = build_transform(is_train=False, input_size=size, pad2square=model.config.pad2square)
        model.img_context_token_id = tokenizer.convert_tokens_to_ids(MEDDR_IMG_CONTEXT_TOKEN)
        return cls(tokenizer, model, transform, dtype=dtype)

    def answer(self, prompt: str, image: Image.Image, gen: GenSettings, system_prompt: str | None
               ) -> tuple[str, int | None, int | None]:
        import torch

        pixels = self.transform(image).unsqueeze(0).to(device=self.device, dtype=self.dtype)
        config = add_stop_criteria(upstream_generate_kwargs(gen), self.tokenizer, gen.stop)
        seed_generation(gen)
        with torch.no_grad(), counting_generate(self.model) as counts:
            text = self.model.chat(tokenizer=self.tokenizer, pixel_values=pixels,
                                   question=with_system_text(prompt, system_prompt), generation_config=config,
                                   print_out=False)
        return text.strip(), counts.get("in"), counts.get("out")


# =====================================================================================================================
# HealthGPT
# =====================================================================================================================


@dataclass(frozen=True)
class HealthGPTSpec:
    """One ``--model_choice``: the upstream instructions' settings for visual question answering."""

    weights: str  # hub repository holding the H-LoRA file
    hlora_file: str
    base: str  # base language model
    arch: str  # "phi4" -> LlavaPhiForCausalLM, "qwen2" -> LlavaQwen2ForCausalLM
    template: str  # conversation template (--instruct_template)
    dtype: str
    vision_tower: str = "openai/clip-vit-large-patch14-336"
    hlora_r: int = 32
    hlora_alpha: int = 64
    hlora_nums: int = 4
    vq_idx_nums: int = 8192


#: HealthGPT's --model_choice (llava/demo/com_infer_phi4.sh and com_infer_qwen2_5.sh: FP16, r=32, alpha=64, 4 H-LoRA
#: experts, 8192 VQ indices, CLIP ViT-L/14-336).
HEALTHGPT_CHOICES: dict[str, HealthGPTSpec] = {
    "HealthGPT-L14": HealthGPTSpec(weights="lintw/HealthGPT-L14", hlora_file="com_hlora_weights_phi4.bin",
                                   base="microsoft/phi-4", arch="phi4", template="phi4_instruct", dtype="float16"),
    "HealthGPT-XL32": HealthGPTSpec(weights="lintw/HealthGPT-XL32", hlora_file="com_hlora_weights_QWEN_32B.bin",
                                    base="Qwen/Qwen2.5-32B-Instruct", arch="qwen2", template="qwen_2",
                                    dtype="float16"),
}


def healthgpt_spec(choice: str | None) -> HealthGPTSpec:
    if choice not in HEALTHGPT_CHOICES:
        raise UserError(f"unknown HealthGPT --model_choice {choice!r}; choose {' or '.join(HEALTHGPT_CHOICES)}")
    return HEALTHGPT_CHOICES[choice]


def healthgpt_dtype(spec: HealthGPTSpec, cfg_dtype: str | None, record_dtype: str) -> str:
    """The choice's dtype, unless --dtype asked for another (the run config holds the record's dtype otherwise)."""
    return cfg_dtype if cfg_dtype and cfg_dtype not in ("auto", record_dtype) else spec.dtype


def healthgpt_source_root(checkout_dir: Path) -> Path:
    """The folder holding HealthGPT's ``llava`` package: the checkout itself at the pinned commit, ``HealthGPT/``
    in later upstream layouts."""
    for root in (Path(checkout_dir), Path(checkout_dir) / "HealthGPT"):
        if (root / "llava" / "demo" / "utils.py").is_file():
            return root
    raise UserError(f"{checkout_dir} has no llava/demo/utils.py (nor HealthGPT/llava/demo/utils.py): it is not the "
                    "HealthGPT code this adapter was written for")


@dataclass(eq=False)
class HealthGPTAdapter:
    """HealthGPT (L14 on phi-4, XL32 on Qwen2.5-32B-Instruct) with the calls of ``llava/demo/com_infer_phi4.py`` /
    ``com_infer_qwen2_5.py``: base model, H-LoRA through ``llava.peft.get_peft_model``, the vision tower through
    ``initialize_vision_modules(com_vision_args)``, ``load_weights`` of the H-LoRA file; per question the template's
    prompt, ``expand2square`` + the CLIP processor, and ``model.base_model.model.generate`` (new tokens only)."""

    tokenizer: PreTrainedTokenizerBase
    model: Any  # HealthGPT's H-LoRA model (its vendored peft around a LLaVA model): untyped upstream code
    spec: HealthGPTSpec
    _: KW_ONLY
    dtype: torch.dtype
    expand2square: Callable[[Image.Image, tuple[int, ...]], Image.Image]
    device: str = "cuda"

    @classmethod
    def load(cls, spec: HealthGPTSpec, checkout_dir: Path, dtype_name: str, revision: str | None = None
             ) -> HealthGPTAdapter:
        import torch
        import transformers
        from huggingface_hub import hf_hub_download

        root = healthgpt_source_root(checkout_dir)
        _put_on_path(root)
        demo = _load_module(root / "llava" / "demo" / "utils.py", "healthgpt_demo_utils")
        from llava.peft import LoraConfig, get_peft_model

        if spec.arch == "phi4":
            from llava.model.language_model.llava_phi3 import LlavaPhiForCausalLM as model_class
        else:
            from llava.model.language_model.llava_qwen import LlavaQwen2ForCausalLM as model_class
        dtype = torch_dtype(dtype_name, torch.float16)
        try:
            hlora_path = hf_hub_download(repo_id=spec.weights, filename=spec.hlora_file, revision=revision)
        except Exception as exc:  # offline, gated, renamed: one line that names the file and the repository
            first = (str(exc).strip().splitlines() or [""])[0]
            raise UserError(f"cannot fetch the H-LoRA weights {spec.hlora_file} from {spec.weights} "
                            f"({type(exc).__name__}: {first}); check the network or the Hugging Face cache") from None

        model = model_class.from_pretrained(pretrained_model_name_or_path=spec.base, attn_implementation=None,
                                            torch_dtype=dtype)
        lora = LoraConfig(r=spec.hlora_r, lora_alpha=spec.hlora_alpha,
                          target_modules=demo.find_all_linear_names(model), lora_dropout=0.0, bias="none",
                          task_type="CAUSAL_LM", lora_nums=spec.hlora_nums)
        model = get_peft_model(model, lora)
        tokenizer = transformers.AutoTokenizer.from_pretrained(spec.base, padding_side="right", use_fast=False)
        if spec.arch == "phi4":
            demo.add_special_tokens_and_resize_model(tokenizer, model, spec.vq_idx_nums)
        elif tokenizer.unk_token:  # com_infer_qwen2_5.py adds no VQ tokens
            tokenizer.pad_token = tokenizer.unk_token
        else:
            tokenizer.legacy = False
        vision_args = argparse.Namespace(**vars(demo.com_vision_args))
        vision_args.model_name_or_path = spec.base
        vision_args.vision_tower = spec.vision_tower
        vision_args.version = spec.template
        model.get_model().initialize_vision_modules(model_args=vision_args)
        model.get_vision_tower().to(dtype=dtype)
        model = demo.load_weights(model, hlora_path)
        model.eval()
        model.to(dtype).cuda()
        accept_only_forward_kwargs(model.base_model.model)
        return cls(tokenizer, model, spec, dtype=dtype, expand2square=demo.expand2square)

    def prompt(self, question: str, system_prompt: str | None) -> str:
        from llava import conversation as conversation_lib
        from llava.constants import DEFAULT_IMAGE_TOKEN

        return llava_conversation_prompt(conversation_lib.conv_templates, self.spec.template, question,
                                         DEFAULT_IMAGE_TOKEN, system_prompt)

    def answer(self, prompt: str, image: Image.Image, gen: GenSettings, system_prompt: str | None
               ) -> tuple[str, int | None, int | None]:
        import torch
        from llava.constants import IMAGE_TOKEN_INDEX
        from llava.mm_utils import tokenizer_image_token

        ids = tokenizer_image_token(self.prompt(prompt, system_prompt), self.tokenizer, IMAGE_TOKEN_INDEX,
                                    return_tensors="pt").unsqueeze(0).to(self.device)
        processor = self.model.get_vision_tower().image_processor
        square = self.expand2square(image.convert("RGB"), tuple(int(x * 255) for x in processor.image_mean))
        pixels = processor.preprocess(square, return_tensors="pt")["pixel_values"][0].unsqueeze(0)
        kw = add_stop_criteria(upstream_generate_kwargs(gen), self.tokenizer, gen.stop)
        seed_generation(gen)
        with torch.inference_mode():
            out = self.model.base_model.model.generate(
                ids, images=pixels.to(dtype=self.dtype, device=self.device, non_blocking=True), image_sizes=square.size,
                use_cache=True, **kw)
        text = self.tokenizer.decode(out[0], skip_special_tokens=True)
        if not isinstance(text, str):  # pragma: no cover - one row of ids decodes to one text
            raise TypeError(f"the tokenizer decoded one row to {type(text).__name__}, not a text")
        return text.strip(), int(ids.shape[-1]), int(out.shape[-1])


# =====================================================================================================================
# Building the backend
# =====================================================================================================================

ADAPTED_MODELS = ("llava_med", "huatuogpt_vision", "meddr", "healthgpt")


def _require_cuda(record: ModelRecord) -> None:
    try:
        import torch
    except ImportError:
        raise UserError(f"{record.display_name} needs torch; build its environment with "
                        f"`medvision-bm envs build --env {record.env.name}`") from None
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        raise UserError(f"{record.display_name}'s upstream code runs on a CUDA GPU only and none is visible{hint}; "
                        "run it on a GPU machine")


def check_run_flags(cfg: ModelRunSettings) -> None:
    """Refuse, before any clone or download, the settings an upstream loader cannot honour (they would enter the
    run signature without changing the answers)."""
    rec = cfg.record
    name = rec.engine_kwargs.get("adapter", rec.name)  # a record may run another's adapter (HealthGPT-XL32)
    if name not in ADAPTED_MODELS:
        raise UserError(f"no third-party adapter for {rec.name}")
    if cfg.lora_path:
        raise UserError(f"{rec.display_name} runs through its upstream code, which takes no --lora_path")
    if cfg.revision and rec.name in ("llava_med", "huatuogpt_vision"):
        raise UserError(f"{rec.display_name}'s upstream loader takes no --revision; download that revision to a "
                        "folder and pass it as --model_hf_id")
    if name == "healthgpt":
        healthgpt_spec(cfg.weights)
        return
    weights = required_weights(cfg)
    if rec.name == "huatuogpt_vision":
        if cfg.dtype not in ("auto", "bfloat16"):
            raise UserError(f"HuatuoGPT-Vision's upstream code runs in bfloat16 only; drop --dtype {cfg.dtype}")
        check_huatuo_weights(weights)


def _load_adapter(cfg: ModelRunSettings, paths: Sequence[Path]) -> Adapter:
    rec = cfg.record
    if rec.name == "llava_med":
        return LlavaMedAdapter.load(required_weights(cfg), rec.engine_kwargs.get("conv_mode", "mistral_instruct"),
                                    cfg.dtype)
    if rec.name == "huatuogpt_vision":
        return HuatuoAdapter.load(paths[0], required_weights(cfg))
    if rec.name == "meddr":
        return MedDrAdapter.load(required_weights(cfg), cfg.dtype, cfg.revision)
    spec = healthgpt_spec(cfg.weights)
    return HealthGPTAdapter.load(spec, paths[0], healthgpt_dtype(spec, cfg.dtype, rec.dtype), cfg.revision)


def build_third_party_backend(cfg: ModelRunSettings) -> ThirdPartyBackend:
    """Check the flags, fetch the upstream code, then load the model through its adapter (GPU only)."""
    rec = cfg.record
    check_run_flags(cfg)
    paths = prepare_third_party(rec, cfg.model_flags.get("dir_third_party"))
    _require_cuda(rec)
    try:
        adapter = _load_adapter(cfg, paths)
    except ImportError as exc:
        raise UserError(f"{rec.display_name}'s upstream code or its dependencies do not import ({exc}); build its "
                        f"environment with `medvision-bm envs build --env {rec.env.name}`") from None
    return ThirdPartyBackend(rec.name, adapter)
