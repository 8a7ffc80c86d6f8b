"""RunConfig: every setting of one evaluation run, resolved once from flags, the registry record and the env."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm.data.docs import Doc, View
from medvision_bm.data.layout import load_tasks_list
from medvision_bm.data.planner import DatasetContract
from medvision_bm.errors import UserError
from medvision_bm.models.base import GenSettings
from medvision_bm.models.registry import ModelRecord
from medvision_bm.secrets import redact_argv


@dataclass(frozen=True)
class RunConfig:
    record: ModelRecord
    model_name: str
    weights: str | None
    revision: str | None
    lora_path: str | None
    dtype: str
    lmmseval_module: str | None
    batch_size: int
    gpu_memory_utilization: float | None
    contract: DatasetContract
    tasks_list_path: Path
    tasks: dict[str, int]
    results_dir: Path
    status_path: Path | None
    sample_limit: int | None
    sample_indices: list[int] | None
    reshape_hw: tuple[int, int] | None
    processor_resize: str
    gen: GenSettings
    gen_explicit: frozenset[str]
    system_prompt: str | None
    log_sys_prompt: bool
    prompt_variant: str
    keep_failed: bool
    force: bool
    shard: str | None
    progress: bool
    model_flags: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ derived
    def gen_for_task(self, task_plan: dict[str, Any]) -> GenSettings:
        """A task's own max_new_tokens wins over the model default, but never over an explicit flag."""
        task_max = task_plan.get("max_new_tokens")
        if task_max and "max_new_tokens" not in self.gen_explicit:
            return dataclasses.replace(self.gen, max_new_tokens=int(task_max))
        return self.gen

    def view_for(self, doc: Doc) -> View:
        sent_hw = tuple(self.reshape_hw or doc.image_hw)
        return View.for_doc(doc, self.reshape_hw, processed_hw_for(self.record, self.processor_resize, sent_hw,
                                                                   self.weights, self.revision))

    def signature_model(self) -> dict[str, Any]:
        weights = self.weights
        if self.record.backend == "openai_compatible":
            weights = self.model_name
        return {"record": self.record.name, "backend": self.record.backend, "weights": weights,
                "revision": self.revision, "lora": self.lora_path, "dtype": self.dtype,
                "lmmseval_module": self.lmmseval_module, "engine_kwargs": self.record.engine_kwargs}

    def answer_flags(self) -> dict[str, Any]:
        """Values of the record's own flags that change answers."""
        by_dest = {f.dest: f for f in self.record.flags}
        return {k: v for k, v in self.model_flags.items() if k in by_dest and by_dest[k].affects_answer}


def processed_hw_for(record: ModelRecord, rule: str, sent_hw: tuple[int, int], weights: str | None = None,
                     revision: str | None = None) -> tuple[int, int] | None:
    """The size the model's processor turns the sent image into (None: it keeps the sent size)."""
    if rule == "none":
        return None
    size = record.engine_kwargs.get("processor_resize_hw")
    if rule == "fixed" and size:
        return int(size[0]), int(size[1])
    if rule == "pad_square" and size:
        # padded to a square of side max(H, W), then resized to S: the content is scaled by S / max(H, W)
        scale = int(size[0]) / max(sent_hw)
        return max(1, round(sent_hw[0] * scale)), max(1, round(sent_hw[1] * scale))
    overrides = tuple(sorted((record.engine_kwargs.get("mm_processor_kwargs") or {}).items()))
    return _processed_hw_cached(rule, weights, revision, int(sent_hw[0]), int(sent_hw[1]), overrides)


@functools.lru_cache(maxsize=4096)
def _processed_hw_cached(rule: str, weights: str | None, revision: str | None, h: int, w: int,
                         overrides: tuple) -> tuple[int, int]:
    from medvision_bm.models.processing import processed_hw_for_model

    return processed_hw_for_model(rule, weights, h, w, revision=revision, **dict(overrides))


def default_status_path(tasks_list_path: Path) -> Path:
    tag = tasks_list_path.stem.removeprefix("tasks_")
    return Path("completed_tasks") / f"completed_tasks_{tag}.json"


def build_config(ns: argparse.Namespace, record: ModelRecord, argv: list[str]) -> RunConfig:
    contract = DatasetContract.resolve(ns.data_dir)
    tasks_list_path = Path(ns.tasks_list_json_path)
    tasks = load_tasks_list(tasks_list_path)
    weights = ns.model_hf_id or record.default_weights
    model_flags = {f.dest: getattr(ns, f.dest, f.default) for f in record.flags}
    if record.backend == "hf" and not weights:
        raise UserError(f"model {record.name} needs weights: pass --model_hf_id FOLDER_OR_HUB_ID")
    if weights and weights.startswith(("/", "./", "../", "~")) and not Path(weights).expanduser().exists():
        raise UserError(f"--model_hf_id {weights} looks like a local folder but does not exist; "
                        "check the path or give a hub id like org/name")
    if record.backend == "openai_compatible":
        if not ns.model_name:
            raise UserError("openai-compatible needs --model_name NAME (the model name the server serves)")
        if not model_flags.get("base_url"):
            raise UserError("openai-compatible needs --base_url URL (repeatable or comma-separated)")
    if record.name == "healthgpt":
        weights = model_flags.get("model_choice")
    if record.reshape_pinned and ns.reshape_image_hw and tuple(ns.reshape_image_hw) != record.reshape_hw:
        raise UserError(f"{record.display_name} is pinned to {record.reshape_hw[0]}x{record.reshape_hw[1]} images "
                        "(its training size); drop --reshape_image_hw")
    explicit = {name for name in ("max_new_tokens", "temperature", "top_p", "top_k", "seed")
                if getattr(ns, name) is not None}
    gen = dataclasses.replace(
        record.gen,
        **{name: getattr(ns, name) for name in explicit},
        stop=tuple(s for s in (ns.stop_strings or "").split(",") if s) or record.gen.stop,
        **{k: model_flags[k] for k in ("repetition_penalty", "min_new_tokens") if model_flags.get(k) is not None},
    )
    if record.thinking and record.backend == "vllm" and not gen.temperature:
        raise UserError(f"{record.display_name} thinking weights must sample: give --temperature > 0 "
                        f"(default {record.gen.temperature}), never 0")
    system_prompt = record.system_prompt if (record.name != "medvision-model-rft"
                                             or model_flags.get("use_system_prompt")) else None
    model_name = ns.model_name or _default_model_name(record, weights, model_flags)
    results_dir = Path(ns.results_dir).expanduser().resolve()
    status_path = None if ns.skip_update_status else Path(
        ns.task_status_json_path or default_status_path(tasks_list_path)).expanduser().resolve()
    return RunConfig(
        record=record, model_name=model_name, weights=weights, revision=ns.revision, lora_path=ns.lora_path,
        dtype=ns.dtype or record.dtype, lmmseval_module=ns.lmmseval_module,
        batch_size=ns.batch_size or record.batch_size,
        gpu_memory_utilization=ns.gpu_memory_utilization or record.gpu_memory_utilization,
        contract=contract, tasks_list_path=tasks_list_path, tasks=tasks, results_dir=results_dir,
        status_path=status_path, sample_limit=ns.sample_limit, sample_indices=ns.sample_indices,
        reshape_hw=tuple(ns.reshape_image_hw) if ns.reshape_image_hw else record.reshape_hw,
        processor_resize=model_flags.get("processor_resize") or record.processor_resize,
        gen=gen, gen_explicit=frozenset(explicit), system_prompt=system_prompt, log_sys_prompt=ns.log_sys_prompt,
        prompt_variant=ns.prompt_variant or record.prompt_variant, keep_failed=ns.keep_failed, force=ns.force,
        shard=ns.shard, progress=not ns.no_progress,
        model_flags=model_flags, argv=redact_argv(list(argv)),
    )


def _default_model_name(record: ModelRecord, weights: str | None, flags: dict[str, Any]) -> str:
    """Results folder name when --model_name is not given: the weights' last path part, or the API model code."""
    if record.is_api:
        code = next((v for k, v in flags.items() if k.endswith("_model_code") and v), None)
        return str(code).replace("/", "_") if code else record.name
    if record.backend == "baseline" or not weights:
        return record.name
    return Path(weights.rstrip("/")).name or record.name
