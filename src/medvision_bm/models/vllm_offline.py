"""Local-model backend on vLLM's offline engine (LLM.chat), with the flag-to-engine mapping as pure functions."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from medvision_bm.errors import UserError
from medvision_bm.io import read_json
from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.base import GenRequest, GenResult, GenSettings, RequestError, ResultSink, Usage

if TYPE_CHECKING:
    from vllm import RequestOutput

#: The LoRA ranks vLLM sizes its LoRA buffers for (``vllm.config.lora.MaxLoRARanks`` of the vLLM the locks pin;
#: tests/models/test_vllm_contract.py compares the two): max_lora_rank must be one of them.
VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def import_vllm() -> ModuleType:
    """The vllm module, or a one-line UserError where it is missing (it ships CUDA wheels only)."""
    try:
        import vllm
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] != "vllm":
            raise UserError(f"vllm is installed but cannot be imported: {exc}") from exc
        raise UserError(
            "vllm is not installed in this environment; run this model in its own environment "
            "(medvision-bm sets it up unless --skip_env_setup is given) on a machine with a CUDA GPU"
        ) from exc
    except ImportError as exc:
        raise UserError(f"vllm is installed but cannot be imported: {exc}") from exc
    return vllm


def check_vllm_version(wanted: str | None, installed: str | None = None) -> None:
    """``--vllm_version``: the run needs that vLLM release. Upstream's entry point installs it; here the environment's
    lock pins vLLM, so another release than the installed one is a one-line error naming both."""
    if not wanted:
        return
    if installed is None:
        from importlib import metadata

        try:
            installed = metadata.version("vllm")
        except metadata.PackageNotFoundError:
            installed = None
    if installed is None:
        raise UserError(f"--vllm_version {wanted}: vllm is not installed in this environment; run the model in its "
                        "own environment (medvision-bm sets it up unless --skip_env_setup is given)")
    if installed != wanted.strip():
        raise UserError(f"--vllm_version {wanted}: this environment holds vLLM {installed}, pinned by its lock; "
                        f"drop the flag to run with {installed}, or pin vllm=={wanted} in the family's "
                        "requirements .in file and rebuild the lock (`medvision-bm envs lock`)")


def visible_gpu_count(environ: Mapping[str, str] | None = None,
                      device_count: Callable[[], int] | None = None) -> int:
    """GPUs this process may use: the entries of CUDA_VISIBLE_DEVICES when it is set, else what torch counts."""
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [v.strip() for v in visible.split(",") if v.strip()]
        # a negative id hides itself and every device after it
        count = 0
        for entry in entries:
            if entry.lstrip("-").isdigit() and int(entry) < 0:
                break
            count += 1
        return count
    if device_count is None:
        import torch

        device_count = torch.cuda.device_count
    return int(device_count())


def lora_rank(lora_path: str | Path) -> int | None:
    """The rank ``r`` of a PEFT LoRA adapter folder (vLLM must be started with max_lora_rank >= r)."""
    cfg = Path(lora_path).expanduser() / "adapter_config.json"
    if not cfg.is_file():
        raise UserError(f"--lora_path {lora_path} has no adapter_config.json")
    try:
        data = read_json(cfg)
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {cfg}: {exc}") from exc
    rank = data.get("r") if isinstance(data, dict) else None
    if rank is not None and not (isinstance(rank, int) and rank > 0):
        raise UserError(f"{cfg} gives the LoRA rank r={rank!r}; it must be a positive integer")
    return rank


def engine_kwargs(model: str, *, revision: str | None = None, batch_size: int = 16,
                  gpu_memory_utilization: float = 0.9, dtype: str = "auto", max_model_len: int | None = None,
                  seed: int | None = 0, trust_remote_code: bool = False, images_per_prompt: int = 1,
                  tensor_parallel_size: int | None = None, lora_path: str | None = None,
                  extra: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None,
                  device_count: Callable[[], int] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` from a registry record's flags (``Any``: vLLM's to read, each its own type).

    Tensor parallelism spans every visible GPU (CUDA_VISIBLE_DEVICES, else torch's count) unless
    ``tensor_parallel_size`` is given; ``batch_size`` is the engine's max_num_seqs; ``extra`` (the record's
    own engine kwargs, e.g. mm_processor_kwargs or enforce_eager) is applied last and wins.
    """
    if not 0 < float(gpu_memory_utilization) <= 1:
        raise UserError(f"--gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if int(batch_size) < 1:
        raise UserError(f"batch size must be at least 1, got {batch_size}")
    tp = tensor_parallel_size if tensor_parallel_size is not None else visible_gpu_count(environ, device_count)
    if int(tp) < 1:
        raise UserError("no GPU is visible (CUDA_VISIBLE_DEVICES hides them all or torch sees none); "
                        "vLLM needs at least one")
    kw: dict[str, object] = {
        "model": model,
        "tensor_parallel_size": int(tp),
        "max_num_seqs": int(batch_size),
        "gpu_memory_utilization": float(gpu_memory_utilization),
        "dtype": dtype,
        "limit_mm_per_prompt": {"image": int(images_per_prompt)},
        "seed": seed,
        "trust_remote_code": bool(trust_remote_code),
    }
    if revision:
        kw["revision"] = revision
    if max_model_len:
        kw["max_model_len"] = int(max_model_len)
    if lora_path:
        kw["enable_lora"] = True
        rank = lora_rank(lora_path)
        if rank:
            # vLLM sizes its LoRA buffers from a fixed list of ranks; the smallest listed one that fits
            fit = next((r for r in VLLM_LORA_RANKS if r >= rank), None)
            if fit is None:
                raise UserError(f"--lora_path {lora_path}: the adapter's rank r={rank} is above the largest vLLM "
                                f"supports ({VLLM_LORA_RANKS[-1]}); use an adapter of a smaller rank")
            kw["max_lora_rank"] = fit
    kw.update(dict(extra or {}))
    return kw


def sampling_kwargs(gen: GenSettings) -> dict[str, object]:
    """Keyword arguments for ``vllm.SamplingParams``. Temperature is always explicit (0 = greedy); knobs left
    None are omitted, which in vLLM means off (top_p 1, top_k disabled, no penalty, min_tokens 0), so the
    checkpoint's generation_config never changes an answer behind the run signature's back."""
    temperature = float(gen.temperature or 0.0)
    kw: dict[str, object] = {"max_tokens": int(gen.max_new_tokens), "temperature": temperature}
    sampling = temperature > 0
    if sampling and gen.top_p is not None:
        kw["top_p"] = float(gen.top_p)
    if sampling and gen.top_k is not None:
        kw["top_k"] = int(gen.top_k)
    if sampling and gen.seed is not None:
        kw["seed"] = int(gen.seed)
    if gen.stop:
        kw["stop"] = list(gen.stop)
    if gen.repetition_penalty is not None:
        kw["repetition_penalty"] = float(gen.repetition_penalty)
    if gen.min_new_tokens:
        kw["min_tokens"] = int(gen.min_new_tokens)
    return kw


def chat_messages(request: GenRequest) -> list[dict[str, object]]:
    """An OpenAI-style conversation for ``LLM.chat``: optional system turn, then the PIL images and the text."""
    messages: list[dict[str, object]] = []
    if request.system_prompt:
        messages.append({"role": "system", "content": request.system_prompt})
    content: list[dict[str, object]] = [{"type": "image_pil", "image_pil": img} for img in request.get_images()]
    content.append({"type": "text", "text": request.prompt})
    messages.append({"role": "user", "content": content})
    return messages


def result_from_output(key: str, output: RequestOutput, latency_s: float) -> GenResult:
    """Map one ``vllm.RequestOutput`` to a GenResult: 'length' when max_tokens cut it, 'stop' on EOS or a stop
    string (whose text vLLM leaves out), an error when the engine aborted the request."""
    completion = output.outputs[0] if getattr(output, "outputs", None) else None
    prompt_ids = getattr(output, "prompt_token_ids", None)
    usage = Usage(input_tokens=len(prompt_ids) if prompt_ids is not None else None,
                  output_tokens=len(completion.token_ids) if completion is not None else None)
    reason = getattr(completion, "finish_reason", None)
    if completion is None or reason not in ("stop", "length"):
        return GenResult(key, None, RequestError("backend", f"vLLM finished the request with reason {reason!r}",
                                                 retryable=True), usage=usage, latency_s=latency_s)
    return GenResult(key, completion.text, finish_reason=reason, usage=usage, latency_s=latency_s)


_engine_kwargs = engine_kwargs  # the module function, reachable inside VLLMBackend.__init__


class VLLMBackend:
    """Answers requests with ``vllm.LLM.chat``. Requests go to the engine in chunks of ``chunk_size`` (default
    4 x max_num_seqs, so continuous batching stays fed) and each chunk's results are reported as it ends."""

    name = "vllm"

    def __init__(self, model: str, *, chunk_size: int | None = None,
                 chat_template_kwargs: JsonObject | None = None, lora_path: str | None = None,
                 engine_kwargs: Mapping[str, object] | None = None, **engine_options: Any) -> None:
        """``engine_options``: the keyword arguments of :func:`engine_kwargs` (batch_size,
        gpu_memory_utilization, dtype, max_model_len, seed, revision, trust_remote_code, ...; ``Any``: passed on
        as given, each checked there);
        ``engine_kwargs``: the record's extra ``vllm.LLM`` arguments, applied last."""
        vllm = import_vllm()
        self._engine = _engine_kwargs(model, lora_path=lora_path, extra=engine_kwargs, **engine_options)
        self.chunk_size = int(chunk_size or 4 * self._engine["max_num_seqs"])
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._sampling_params_cls = vllm.SamplingParams
        self._lora_request = None
        if lora_path:
            from vllm.lora.request import LoRARequest

            self._lora_request = LoRARequest("medvision-lora", 1, str(Path(lora_path).expanduser()))
        self.llm = vllm.LLM(**self._engine)

    def generate(self, requests: Sequence[GenRequest], on_result: ResultSink) -> None:
        for start in range(0, len(requests), self.chunk_size):
            chunk = list(requests[start:start + self.chunk_size])
            t0 = time.perf_counter()
            params = [self._sampling_params_cls(**sampling_kwargs(r.gen)) for r in chunk]
            kwargs: dict[str, object] = {"use_tqdm": False}
            if self.chat_template_kwargs:
                kwargs["chat_template_kwargs"] = self.chat_template_kwargs
            if self._lora_request is not None:
                kwargs["lora_request"] = self._lora_request
            try:
                outputs = self.llm.chat([chat_messages(r) for r in chunk], params, **kwargs)
            except Exception as exc:  # the engine failed this chunk: stored as retryable failures
                elapsed = time.perf_counter() - t0
                for req in chunk:
                    on_result(GenResult(req.key, None, RequestError("backend", f"{type(exc).__name__}: {exc}",
                                                                    retryable=True), latency_s=elapsed))
                continue
            elapsed = time.perf_counter() - t0
            for req, out in zip(chunk, outputs, strict=True):
                on_result(result_from_output(req.key, out, elapsed))

    def engine_info(self) -> JsonObject:
        """The engine settings every stored answer records (vLLM batches continuously: max_num_seqs and the KV
        cache size decide which requests run together)."""
        import vllm

        keys = ("tensor_parallel_size", "max_num_seqs", "gpu_memory_utilization", "dtype", "max_model_len", "seed")
        return {"engine": "vllm", "vllm": getattr(vllm, "__version__", None), "chunk_size": self.chunk_size,
                **{k: self._engine[k] for k in keys if k in self._engine}}

    def close(self) -> None:
        self.llm = None
