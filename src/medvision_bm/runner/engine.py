"""The engine settings of a local model that enter its answer signature, and what every stored answer records
about the engine that produced it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.vllm_offline import visible_gpu_count

if TYPE_CHECKING:
    from medvision_bm.runner.config import RunConfig

#: Backends whose batching this process controls: their answers depend on the engine settings below.
LOCAL_ENGINES = ("hf", "vllm", "third_party")


def engine_signature(cfg: RunConfig) -> JsonObject | None:
    """The engine settings that change a local model's answers, or None where this process does not batch.

    Greedy answers of a local model depend on how it is batched and where it runs: left padding and batched
    bf16/fp16 kernels change the logits of a row with the rows beside it, and CPU and GPU kernels differ. So for
    the transformers backend the batch size and the device kind (``cpu`` or ``cuda``; ``--device auto`` resolved
    as it will load) enter the answer signature; for vLLM's offline engine ``max_num_seqs`` (the batch size),
    ``gpu_memory_utilization`` (it sizes the KV cache, so which requests run together) and the tensor-parallel
    size; for the upstream model code (third_party) the batch size. The dtype and the record's engine kwargs
    (attention implementation among them) are in the signature's ``model`` block already. API models, servers
    (``--serve``/``--base_url``) and baselines: None (the server batches; ``--batch_size`` is only concurrency),
    so their signatures are unchanged. Every stored answer records the full settings (:func:`engine_record`).
    """
    rec = cfg.record
    if rec.backend not in LOCAL_ENGINES:
        return None
    if rec.backend == "vllm" and (cfg.model_flags.get("base_url") or cfg.model_flags.get("serve")):
        return None
    if rec.backend == "hf":
        return {"batch_size": int(cfg.batch_size), "device": resolved_device(cfg.model_flags.get("device") or "auto")}
    if rec.backend == "vllm":
        tp = rec.engine_kwargs.get("tensor_parallel_size")
        return {"max_num_seqs": int(cfg.batch_size), "gpu_memory_utilization": cfg.gpu_memory_utilization,
                "tensor_parallel_size": int(tp) if tp is not None else _visible_gpus()}
    return {"batch_size": int(cfg.batch_size)}


def resolved_device(device: str) -> str:
    """``cpu`` or ``cuda``: what the transformers backend runs on for ``--device`` (auto: cuda when torch sees a
    GPU). Imports torch only for ``auto`` (the run loads it anyway)."""
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def engine_record(cfg: RunConfig, backend: object) -> JsonObject:
    """What every stored answer records about the engine that produced it: the backend's own report of its
    settings (device, dtype, attention implementation, versions ...) over the run's, plus the signature's part."""
    out: JsonObject = {"backend": cfg.record.backend, "batch_size": int(cfg.batch_size), "dtype": cfg.dtype}
    if cfg.record.backend == "vllm":
        out["gpu_memory_utilization"] = cfg.gpu_memory_utilization
    out.update(engine_signature(cfg) or {})
    info = getattr(backend, "engine_info", None)
    if callable(info):
        try:
            out.update(info())
        except Exception as exc:  # a report of the settings must never lose an answer
            out["engine_info_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _visible_gpus() -> int:
    try:
        return visible_gpu_count()
    except ImportError:  # no torch in this environment: no GPU to count
        return 0
