"""Run signatures: a hash of everything that changes an answer (answer signature) or a score (run signature).

The answer signature names the sample store: answers are reused only under an identical answer signature. The
run signature adds the sample selection and is what the status file and results record. Secrets never enter.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from medvision_bm.data.docs import Doc, View
from medvision_bm.io import dumps

SIGNATURE_SCHEMA = 2
SHORT = 12


def digest(obj: Any) -> str:
    return hashlib.sha256(dumps(obj).encode("utf-8")).hexdigest()


def answer_signature_inputs(*, model: dict[str, Any], generation: dict[str, Any], task: str, task_version: str,
                            protocol: str, planner_version: str, plan_version: str, filtering: bool,
                            reshape_hw: list[int] | None, processed_hw_rule: str, system_prompt: str | None,
                            model_flags: dict[str, Any], engine: dict[str, Any] | None = None,
                            scaled_ps: list[float] | None = None) -> dict[str, Any]:
    inputs = {
        "schema": SIGNATURE_SCHEMA,
        "model": model,
        "generation": generation,
        "task": task,
        "task_version": task_version,
        "protocol": protocol,
        "planner_version": planner_version,
        "plan_version": plan_version,
        "sample_filtering": filtering,
        "reshape_hw": reshape_hw,
        "processed_hw_rule": processed_hw_rule,
        "system_prompt_sha256": hashlib.sha256(system_prompt.encode()).hexdigest() if system_prompt else None,
        "model_flags": dict(sorted(model_flags.items())),
    }
    if engine is not None:  # local engines only: API, served and baseline signatures stay as they were
        inputs["engine"] = dict(sorted(engine.items()))
    if scaled_ps is not None:  # -CoT-scaledPS tasks only: the range of their pixel-size factors
        inputs["scaled_ps_range"] = list(scaled_ps)
    return inputs


# ------------------------------------------------------------------------------------------------ engine settings
#: Backends whose batching this process controls: their answers depend on the engine settings below.
LOCAL_ENGINES = ("hf", "vllm", "third_party")


def engine_signature(cfg: Any) -> dict[str, Any] | None:
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


def _visible_gpus() -> int:
    try:
        from medvision_bm.models.vllm_offline import visible_gpu_count

        return visible_gpu_count()
    except ImportError:
        return 0


def engine_record(cfg: Any, backend: Any) -> dict[str, Any]:
    """What every stored answer records about the engine that produced it: the backend's own report of its
    settings (device, dtype, attention implementation, versions ...) over the run's, plus the signature's part."""
    out: dict[str, Any] = {"backend": cfg.record.backend, "batch_size": int(cfg.batch_size), "dtype": cfg.dtype}
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


def selection_inputs(*, sample_indices: list[int] | None, sample_limit: int | None, n_available: int) -> dict[str, Any]:
    if sample_indices is not None:
        return {"indices": sorted(set(sample_indices))}
    if sample_limit is not None and sample_limit < n_available:
        return {"limit": sample_limit}
    return {"all": n_available}


def run_signature(answer_sig: str, selection: dict[str, Any], doc_digest: str) -> str:
    return digest({"answer_signature": answer_sig, "selection": selection, "docs": doc_digest})


def doc_sha(doc: Doc, view: View) -> str:
    """A short hash of one sample as asked (doc and view): a stored answer is reused only for the very same one."""
    # field order is the dataclass's and annotation key order is the plan's, both fixed: no key sorting needed
    payload = [doc.field_values(), view.field_values()]  # tuples: the same JSON arrays as lists
    return hashlib.blake2b(orjson.dumps(payload), digest_size=8).hexdigest()
