"""Builds the backend a registry record asks for, from a resolved RunConfig (each backend's module loads torch, vLLM
or an SDK only when the backend is built)."""

from __future__ import annotations

import dataclasses

from medvision_bm.data.layout import DataDir, parse_task_name
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.api import build_api_backend
from medvision_bm.models.api.options import ApiOptions
from medvision_bm.models.api.serve import served_backend
from medvision_bm.models.base import Backend, required_weights
from medvision_bm.models.baselines import (
    MeanBackend,
    OracleBackend,
    PacedBackend,
    RandomBoxBackend,
    train_statistics,
)
from medvision_bm.models.hf_local import TransformersBackend
from medvision_bm.models.third_party import build_third_party_backend
from medvision_bm.models.vllm_offline import VLLMBackend, check_vllm_version
from medvision_bm.runner.config import RunConfig


def build_backend(cfg: RunConfig, data: DataDir) -> Backend:
    rec = cfg.record
    if rec.backend == "baseline":
        return _baseline(cfg, data)
    if rec.backend == "hf":
        return TransformersBackend(required_weights(cfg), dtype=cfg.dtype, device=cfg.model_flags.get("device") or "auto",
                                   batch_size=cfg.batch_size, lora_path=cfg.lora_path,
                                   trust_remote_code=bool(cfg.model_flags.get("trust_remote_code")),
                                   revision=cfg.revision, chat_template_kwargs=chat_template_kwargs(cfg))
    if rec.backend == "vllm":
        if cfg.model_flags.get("base_url") or cfg.model_flags.get("serve"):
            return _served(cfg)
        check_vllm_version(cfg.model_flags.get("vllm_version"))
        return VLLMBackend(required_weights(cfg), batch_size=cfg.batch_size, gpu_memory_utilization=cfg.gpu_memory_utilization,
                           dtype=cfg.dtype, max_model_len=cfg.model_flags.get("max_model_len") or rec.max_model_len,
                           lora_path=cfg.lora_path, revision=cfg.revision, engine_kwargs=_engine_kwargs(cfg),
                           seed=cfg.gen.seed, chat_template_kwargs=chat_template_kwargs(cfg))
    if rec.backend == "third_party":
        return build_third_party_backend(cfg)
    if rec.is_api:
        return build_api_backend(rec.backend, api_options(cfg))
    raise UserError(f"model {rec.name} has backend {rec.backend!r}, which this version cannot run")


def chat_template_kwargs(cfg: RunConfig) -> JsonObject:
    """Chat-template switches a record exposes as flags (Gemma-4's thinking toggle)."""
    flag = cfg.model_flags.get("enable_thinking")
    return {} if flag is None else {"enable_thinking": bool(flag)}


def api_options(cfg: RunConfig) -> ApiOptions:
    """The API backend's options: the record's flags, the run's generation settings, concurrency and name."""
    return ApiOptions.of({**cfg.model_flags, "gen": cfg.gen, "batch_size": cfg.batch_size,
                          "model_name": getattr(cfg, "served_model_name", None) or cfg.model_name,
                          "thinking": cfg.model_flags.get("thinking", cfg.record.thinking)})


def _engine_kwargs(cfg: RunConfig) -> dict[str, object]:
    kw = {k: v for k, v in cfg.record.engine_kwargs.items() if k != "processor_resize_hw"}
    if cfg.model_flags.get("cpu_offload_gb") is not None:  # MiniMax-M3's flag (vLLM's cpu_offload_gb)
        kw["cpu_offload_gb"] = int(cfg.model_flags["cpu_offload_gb"])
    return kw


def _served(cfg: RunConfig) -> Backend:
    """vLLM models evaluated through OpenAI-compatible servers (given, or started by --serve)."""
    opts = dataclasses.replace(api_options(cfg), model_name=cfg.weights)
    if cfg.model_flags.get("serve"):
        return served_backend(cfg, opts)
    return build_api_backend("openai_compatible", opts)


def _baseline(cfg: RunConfig, data: DataDir) -> Backend:
    backend = _baseline_backend(cfg, data)
    backend.pace_s = float(cfg.model_flags.get("pace_s") or 0.0)
    return backend


def _baseline_backend(cfg: RunConfig, data: DataDir) -> PacedBackend:
    name = cfg.record.name
    if name == "oracle":
        return OracleBackend()
    train = {}
    for task in cfg.tasks:
        try:
            tn = parse_task_name(task)
            train[task] = data.samples(tn.base.removesuffix("_Test") + "_Train").docs()
        except UserError:
            train[task] = []
    means, ranges = train_statistics(train)
    if name == "mean":
        missing = [t for t in cfg.tasks if t not in means]
        if missing:
            raise UserError(f"the mean baseline needs a train split; task {missing[0]} has none")
        return MeanBackend(means)
    if name == "random-box":
        return RandomBoxBackend(seed=int(cfg.model_flags.get("baseline_seed") or 0), train_ranges=ranges)
    raise UserError(f"unknown baseline {name!r}")
