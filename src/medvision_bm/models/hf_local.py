"""Local-model backend on transformers/accelerate: chat template, batched generation, one result per request."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.models.base import GenRequest, GenResult, GenSettings, RequestError, ResultSink, Usage
from medvision_bm.models.hf_types import ChatProcessor, Decoder, GenerateKwargs, GeneratingModel, Tokenizer

if TYPE_CHECKING:
    import torch
    from transformers import ProcessorMixin, StoppingCriteriaList

DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")
DEVICES: tuple[str, ...] = ("cpu", "cuda", "auto")


def _looks_like_path(model_id_or_path: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else that names a path is a folder."""
    return (model_id_or_path.startswith((".", "/", "~")) or model_id_or_path.count("/") > 1
            or Path(model_id_or_path).exists())


def _check_source(model_id_or_path: str) -> str:
    """A local folder must exist; anything else is taken as a hub id (resolved from the local cache offline)."""
    if not model_id_or_path:
        raise UserError("no model given: pass --model_hf_id with a hub id or a local folder")
    expanded = os.path.expanduser(model_id_or_path)
    if _looks_like_path(model_id_or_path) and not Path(expanded).is_dir():
        raise UserError(f"model folder {model_id_or_path} does not exist")
    return expanded if Path(expanded).is_dir() else model_id_or_path


def _load_error(what: str, source: str, exc: BaseException) -> UserError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
    hint = (" (HF_HUB_OFFLINE is set: only folders and ids already in the local cache load)" if offline else
            " (is it a local folder with config.json, or a hub id that can be downloaded or is cached?)")
    return UserError(f"cannot load the {what} of {source}{hint}: {type(exc).__name__}: {first}")


_IMAGE_ONLY_CLASSES: dict[type[ProcessorMixin], type[ProcessorMixin]] = {}


def _image_only(processor_cls: type[ProcessorMixin]) -> type[ProcessorMixin]:
    """A subclass of ``processor_cls`` without its video part: its sub-processors are read from the
    constructor's signature, so dropping ``video_processor`` there lets the image path load without
    torchvision (the Qwen-VL video processors need it; CPU environments keep torchvision absent)."""
    if processor_cls not in _IMAGE_ONLY_CLASSES:
        def get_attributes(cls: type) -> list[str]:
            return [a for a in super(sub, cls).get_attributes() if "video" not in a]

        # ``Any``: a class made at run time, whose base's classmethod ``super`` reaches
        sub: type[Any] = type(f"ImageOnly{processor_cls.__name__}", (processor_cls,), {
            "get_attributes": classmethod(get_attributes),
            "__doc__": f"{processor_cls.__name__} without a video processor (images only).",
        })
        _IMAGE_ONLY_CLASSES[processor_cls] = sub
    return _IMAGE_ONLY_CLASSES[processor_cls]


def load_processor(model_id_or_path: str, *, revision: str | None = None, trust_remote_code: bool = False
                   ) -> ChatProcessor:
    """``AutoProcessor.from_pretrained``; where that fails only because torchvision is missing (Qwen-VL video
    processors), the same processor class without its video part. Errors become one-line UserErrors."""
    from transformers import AutoConfig, AutoProcessor
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING

    source = _check_source(model_id_or_path)
    # ``Any``: passed on as is to from_pretrained, whose parameters transformers types one by one
    kwargs: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    try:
        processor: ChatProcessor = AutoProcessor.from_pretrained(source, **kwargs)
        return processor
    except ImportError as exc:
        if "torchvision" not in str(exc).lower():
            raise _load_error("processor", model_id_or_path, exc) from exc
        try:
            config = AutoConfig.from_pretrained(source, **kwargs)
            base = PROCESSOR_MAPPING[type(config)]
            # transformers types every auto mapping's value as a (slow, fast) pair; the processor mapping's is a class
            image_only = _image_only(base).from_pretrained(source, **kwargs)  # type: ignore[arg-type]
            # by construction a chat processor: transformers types a conversation as text-only messages, and its
            # chat templates take the image parts of build_messages too
            return cast("ChatProcessor", image_only)
        except Exception as inner:
            raise _load_error("processor (image-only, torchvision absent)", model_id_or_path, inner) from inner
    except (OSError, ValueError, KeyError) as exc:
        raise _load_error("processor", model_id_or_path, exc) from exc


def build_messages(request: GenRequest) -> list[JsonObject]:
    """Chat messages for a processor's chat template: optional system turn, then the images and the prompt."""
    messages: list[JsonObject] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": [{"type": "text", "text": request.system_prompt}]})
    content: list[JsonValue] = [{"type": "image"} for _ in request.get_images()]
    content.append({"type": "text", "text": request.prompt})
    messages.append({"role": "user", "content": content})
    return messages


def generation_kwargs(gen: GenSettings) -> GenerateKwargs:
    """``generate`` settings from GenSettings. Every sampling knob is set explicitly (None means off), so the
    checkpoint's generation_config.json never changes an answer behind the run signature's back. Stop strings
    are applied by :func:`stop_criteria` and cut from the text afterwards."""
    sampling = bool(gen.temperature)
    return {
        "max_new_tokens": int(gen.max_new_tokens),
        "do_sample": sampling,
        "temperature": float(gen.temperature) if gen.temperature else None,  # i.e. if sampling
        "top_p": float(gen.top_p) if sampling and gen.top_p is not None else None,
        "top_k": int(gen.top_k) if sampling and gen.top_k is not None else None,
        "repetition_penalty": float(gen.repetition_penalty) if gen.repetition_penalty is not None else None,
        "min_new_tokens": int(gen.min_new_tokens) if gen.min_new_tokens else None,
        # off unless asked: greedy and sampling alike ignore the checkpoint's defaults
        "num_beams": 1,
        "no_repeat_ngram_size": None,
        "length_penalty": None,
    }


def stop_criteria(tokenizer: Decoder, stop: Sequence[str], prompt_len: int) -> StoppingCriteriaList:
    """A stopping criterion ending each row once its generated text contains a stop string. It decodes only the
    last few tokens of each row (enough to hold the longest stop string), so its cost does not grow with the
    answer. transformers' own ``stop_strings`` matching misses byte-level BPE tokens, hence this one."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    stops = [s for s in stop if s]
    window = max(len(s) for s in stops) + 4

    class _StopStrings(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: object, **kwargs: object) -> torch.Tensor:
            tails = tokenizer.batch_decode(input_ids[:, prompt_len:][:, -window:].tolist(), skip_special_tokens=True)
            return torch.tensor([any(s in t for s in stops) for t in tails], dtype=torch.bool,
                                device=input_ids.device)

    return StoppingCriteriaList([_StopStrings()])


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text up to (not including) the earliest stop string, and whether one occurred."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def add_stop_criteria(kwargs: GenerateKwargs, tokenizer: Decoder, stop: Sequence[str], prompt_len: int = 0
                      ) -> GenerateKwargs:
    """``kwargs`` with a :func:`stop_criteria` for the stop strings, if any. ``prompt_len`` is 0 for models that
    generate from ``inputs_embeds`` (the upstream LLaVA-style ones), whose ids hold the generated tokens only."""
    if any(stop):
        kwargs["stopping_criteria"] = stop_criteria(tokenizer, stop, prompt_len)
    return kwargs


def finish(text: str, gen: GenSettings, n_out: int | None, *, hit_eos: bool = False) -> tuple[str, str]:
    """The answer cut at its earliest stop string, and its finish reason: 'length' only when ``n_out`` (the new
    tokens) reached max_new_tokens with neither EOS nor a stop string, else 'stop'."""
    text, hit_stop = cut_at_stop(text, gen.stop)
    length = not hit_eos and not hit_stop and n_out is not None and n_out >= gen.max_new_tokens
    return text, "length" if length else "stop"


def load_device_map(device: str) -> str | dict[str, str]:
    """The ``device_map`` a model is loaded with: ``auto`` spreads it over the GPUs (accelerate); one device gets
    every weight straight from the checkpoint file onto it (``{"": "cuda:0"}``), never through a full copy in
    host memory first (a 32B model in bf16 would need about 64 GB of RAM for that copy)."""
    if device == "auto":
        return "auto"
    return {"": "cuda:0" if device == "cuda" else device}


class TransformersBackend:
    """Answers requests with a local model through transformers (``device='auto'``: accelerate device_map).

    Batches of ``batch_size`` requests with equal GenSettings are generated together with left padding;
    ``on_result`` is called for each request right after its batch. Sampling (temperature > 0) seeds torch
    with ``GenSettings.seed`` before every batch, so sampled answers depend on the batch composition.
    """

    name = "transformers"

    def __init__(self, model_id_or_path: str, *, dtype: str = "auto", device: str = "cpu", batch_size: int = 1,
                 lora_path: str | None = None, trust_remote_code: bool = False,
                 attn_implementation: str | None = None, revision: str | None = None,
                 chat_template_kwargs: JsonObject | None = None) -> None:
        if dtype not in DTYPES:
            raise UserError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if device not in DEVICES:
            raise UserError(f"--device {device!r} is not one of {', '.join(DEVICES)}")
        if int(batch_size) < 1:
            raise UserError(f"batch size must be at least 1, got {batch_size}")
        self.model_id_or_path = model_id_or_path
        self.batch_size = int(batch_size)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.processor: ChatProcessor | None = load_processor(model_id_or_path, revision=revision,
                                                              trust_remote_code=trust_remote_code)
        tokenizer: Tokenizer | None = getattr(self.processor, "tokenizer", None)
        if tokenizer is None:
            raise UserError(f"{model_id_or_path} has no multimodal processor with a tokenizer")
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.tokenizer = tokenizer
        self.model: GeneratingModel | None = self._load_model(
            model_id_or_path, dtype=dtype, device=device, revision=revision, trust_remote_code=trust_remote_code,
            attn_implementation=attn_implementation)
        if lora_path:
            self.model = self._apply_lora(self.model, lora_path)
        self.model.eval()
        self._eos_ids = self._collect_eos_ids(self.model)

    # ------------------------------------------------------------------------------------------ loading
    @staticmethod
    def _load_model(model_id_or_path: str, *, dtype: str, device: str, revision: str | None,
                    trust_remote_code: bool, attn_implementation: str | None) -> GeneratingModel:
        import torch
        from transformers import AutoModelForImageTextToText

        if device == "cuda" and not torch.cuda.is_available():
            raise UserError("--device cuda was asked for but torch sees no CUDA device; use --device cpu")
        source = _check_source(model_id_or_path)
        kwargs: dict[str, object] = {"revision": revision, "trust_remote_code": trust_remote_code,
                                     "dtype": dtype if dtype == "auto" else getattr(torch, dtype)}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        kwargs["device_map"] = load_device_map(device)
        try:
            model: GeneratingModel = AutoModelForImageTextToText.from_pretrained(source, **kwargs)
        except (OSError, ValueError, KeyError, ImportError) as exc:
            raise _load_error("model", model_id_or_path, exc) from exc
        return model

    @staticmethod
    def _apply_lora(model: GeneratingModel, lora_path: str) -> GeneratingModel:
        try:
            from peft import PeftModel
        except ImportError as exc:
            raise UserError("--lora_path needs the peft package, which is not installed in this environment; "
                            "install it (pip install peft) or drop --lora_path") from exc
        if not Path(lora_path).expanduser().is_dir():
            raise UserError(f"--lora_path {lora_path} is not a folder")
        try:
            # by construction a torch Module: the transformers model _load_model loaded
            peft_model = PeftModel.from_pretrained(cast("torch.nn.Module", model),
                                                   str(Path(lora_path).expanduser()))
        except (OSError, ValueError, KeyError) as exc:
            raise _load_error("LoRA adapter", lora_path, exc) from exc
        # by construction the model passed in, its adapter weights merged (peft types it as any torch Module)
        return cast("GeneratingModel", peft_model.merge_and_unload())

    def _collect_eos_ids(self, model: GeneratingModel) -> set[int]:
        ids: set[int] = set()
        eos = model.generation_config.eos_token_id
        for value in (eos if isinstance(eos, list) else [eos]):
            if value is not None:
                ids.add(int(value))
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return ids

    # --------------------------------------------------------------------------------------- generation
    def _batches(self, requests: Sequence[GenRequest]) -> list[list[GenRequest]]:
        batches: list[list[GenRequest]] = []
        for req in requests:
            last = batches[-1] if batches else None
            if last and len(last) < self.batch_size and last[0].gen == req.gen:
                last.append(req)
            else:
                batches.append([req])
        return batches

    def generate(self, requests: Sequence[GenRequest], on_result: ResultSink) -> None:
        for batch in self._batches(requests):
            for res in self._run_batch_or_split(batch):
                on_result(res)

    def _run_batch_or_split(self, batch: list[GenRequest]) -> list[GenResult]:
        t0 = time.perf_counter()
        try:
            return self._run_batch(batch)
        except Exception as exc:
            self._free_memory()
            if len(batch) > 1:  # e.g. out of memory: the items one by one, each failing alone if it must
                return [r for req in batch for r in self._run_batch_or_split([req])]
            return [GenResult(batch[0].key, None, RequestError("backend", f"{type(exc).__name__}: {exc}",
                                                               retryable=True),
                              latency_s=time.perf_counter() - t0)]

    @staticmethod
    def _free_memory() -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _loaded(self) -> tuple[ChatProcessor, GeneratingModel]:
        if self.processor is None or self.model is None:
            raise RuntimeError("the backend is closed")
        return self.processor, self.model

    def _run_batch(self, batch: list[GenRequest]) -> list[GenResult]:
        import torch

        processor, model = self._loaded()
        gen = batch[0].gen
        t0 = time.perf_counter()
        texts = [processor.apply_chat_template(build_messages(r), add_generation_prompt=True, tokenize=False,
                                               **self.chat_template_kwargs) for r in batch]
        images = [img for r in batch for img in r.get_images()]
        # Templates that write the BOS token themselves (Gemma's, MedGemma's) must not get a second one.
        bos = self.tokenizer.bos_token
        own_bos = bos is not None and bool(bos) and all(t.startswith(bos) for t in texts)
        inputs = processor(text=texts, images=images or None, padding=True, return_tensors="pt",
                           **({"add_special_tokens": False} if own_bos else {}))
        inputs = inputs.to(model.device)
        if "pixel_values" in inputs and inputs["pixel_values"].is_floating_point():
            inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
        prompt_len = inputs["input_ids"].shape[1]
        kwargs = add_stop_criteria(generation_kwargs(gen), self.tokenizer, gen.stop, prompt_len)
        if kwargs["do_sample"] and gen.seed is not None:
            torch.manual_seed(int(gen.seed))
        with torch.inference_mode():
            output = model.generate(**inputs, **kwargs, pad_token_id=self.tokenizer.pad_token_id)
        elapsed = time.perf_counter() - t0
        input_counts = inputs["attention_mask"].sum(dim=1).tolist()
        return [self._result(req, output[i, prompt_len:].tolist(), int(input_counts[i]), gen, elapsed)
                for i, req in enumerate(batch)]

    def _result(self, req: GenRequest, new_ids: list[int], n_input: int, gen: GenSettings,
                elapsed: float) -> GenResult:
        """Decode one row of new tokens: it ends at the first EOS (kept in the count), else trailing padding
        (rows that stopped early are padded) is dropped; 'length' only when max_new_tokens tokens came out
        without EOS or a stop string."""
        eos_at = next((i for i, t in enumerate(new_ids) if t in self._eos_ids), None)
        if eos_at is not None:
            kept, hit_eos = new_ids[: eos_at + 1], True
        else:
            pad = self.tokenizer.pad_token_id
            end = len(new_ids)
            while end > 0 and new_ids[end - 1] == pad:
                end -= 1
            kept, hit_eos = new_ids[:end], False
        text, reason = finish(self.tokenizer.decode(kept, skip_special_tokens=True), gen, len(kept), hit_eos=hit_eos)
        return GenResult(req.key, text, finish_reason=reason, usage=Usage(input_tokens=n_input, output_tokens=len(kept)),
                         latency_s=elapsed)

    def engine_info(self) -> JsonObject:
        """The settings this backend generates with, as every stored answer records them."""
        import torch
        import transformers

        model = self.model
        device = getattr(model, "device", None)
        device_map = getattr(model, "hf_device_map", None) or {}
        devices: list[JsonValue] = list(sorted({str(d) for d in device_map.values()}))
        info: JsonObject = {
            "engine": "transformers", "batch_size": self.batch_size,
            "device": device.type if device is not None else None,
            "devices": devices or ([str(device)] if device is not None else []),
            "dtype": str(getattr(model, "dtype", "")).removeprefix("torch."),
            "attn_implementation": getattr(getattr(model, "config", None), "_attn_implementation", None),
            "torch": torch.__version__, "transformers": transformers.__version__,
        }
        if device is not None and device.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(device)
        return info

    def close(self) -> None:
        self.model = None
        self.processor = None
        self._free_memory()

