"""RunConfig: every setting of one evaluation run, resolved once from flags, the registry record and the env."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm.data.docs import Doc, View
from medvision_bm.data.image import header_zooms
from medvision_bm.data.layout import RESOLUTION_VARIANTS, load_tasks_list
from medvision_bm.data.overlay import is_drawn, overlay_for
from medvision_bm.data.planner import DatasetContract
from medvision_bm.data.task_meta import TaskMeta
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.base import GenSettings
from medvision_bm.models.processing import API_RULES, StatedSize, canonical_rule
from medvision_bm.models.processor_config import model_code_from_flags, stated_size_for_model
from medvision_bm.models.registry import ModelRecord, default_model_name, lmmseval_module_for
from medvision_bm.paths import safe_component
from medvision_bm.runner.args import stop_strings
from medvision_bm.secrets import redact_argv
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scaled_ps import DEFAULT_RANGE as DEFAULT_SCALED_PS_RANGE
from medvision_bm.tasks.scaled_ps import VARIANT as SCALED_PS_VARIANT
from medvision_bm.tasks.scaled_ps import check_range, scaled_view


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
    protocol: str
    keep_failed: bool
    force: bool
    shard: str | None
    progress: bool
    model_flags: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    #: openai-compatible: the model name the server serves when it is not a folder name (``org/model``);
    #: model_name is then that name with '/' as '_' (the results folder and status key).
    served_model_name: str | None = None
    #: --upstream_results: where legacy status entries without answers here are imported from
    upstream_results: Path | None = None
    #: --scaled_ps_low/--scaled_ps_high: the range of the -CoT-scaledPS pixel-size factors
    scaled_ps: tuple[float, float] = DEFAULT_SCALED_PS_RANGE
    #: --max_cost: USD this run may spend on API requests (None: no cap)
    max_cost: float | None = None
    #: --batch: ask through the provider's batch interface; --batch_poll: seconds between looks at open batches
    batch: bool = False
    batch_poll_s: float = 60.0
    #: --batch_phase: "all" submits and collects; "submit" only submits, "collect" only re-attaches and collects
    batch_phase: str = "all"

    # ------------------------------------------------------------------ derived
    def gen_for_task(self, family: str) -> GenSettings:
        """The generation settings of a task of ``family`` (a record's per-family budget unless a flag is given).

        A baseline's answers depend on no generation setting, so its tasks always take the record's: flags that it
        ignores never enter its signature (``ignored_generation_flags`` names them for a note)."""
        if self.record.backend == "baseline":
            return self.record.gen
        if family in self.record.family_max_new_tokens and "max_new_tokens" not in self.gen_explicit:
            return dataclasses.replace(self.gen, max_new_tokens=self.record.max_new_tokens_for(family))
        return self.gen

    def ignored_generation_flags(self) -> list[str]:
        """The generation flags given to a baseline, which answers without generating (empty for other models)."""
        if self.record.backend != "baseline":
            return []
        changed = [f.name for f in dataclasses.fields(self.gen)
                   if getattr(self.gen, f.name) != getattr(self.record.gen, f.name)]
        flags = {"max_new_tokens": "--max_new_tokens", "stop": "--stop_strings"}
        return [flags.get(name, f"--{name}") for name in changed]

    @property
    def paper_rule(self) -> bool:
        """Whether the run states pixel sizes with the record's paper-era rule (``--protocol paper`` and a record
        whose master rule differs from the newer one; models/registry.py ``paper_processor_resize``)."""
        return self.protocol == "paper" and bool(self.record.paper_processor_resize)

    @property
    def perceived_size_rule(self) -> str:
        """The perceived-size rule in use, as recorded (results.json, the answer signature): the record's rule, or
        ``paper:<rule>[-HxW]`` for the paper-era rule of :attr:`paper_rule`."""
        if not self.paper_rule:
            return self.processor_resize
        size = self.record.paper_processor_resize_hw
        return f"paper:{self.record.paper_processor_resize}" + (f"-{size[0]}x{size[1]}" if size else "")

    @property
    def api_pre_resize(self) -> bool:
        """Whether the client resizes images to the perceived size before sending (upstream's API model files)."""
        rule = self.processor_resize
        return self.record.is_api and rule not in ("none", "auto") and canonical_rule(rule) in API_RULES

    def reshape_for(self, variant: str) -> tuple[int, int] | None:
        """The reshape of a task: the run's (flag or record), else a resolution variant's for the Qwen2.5-VL record
        (upstream's -336x336/-560x560/-896x896 YAMLs set reshape_image_hw for the Qwen2.5-VL model keys only)."""
        if self.reshape_hw:
            return self.reshape_hw
        if variant in RESOLUTION_VARIANTS and self.record.name in RESOLUTION_VARIANT_RECORDS:
            return RESOLUTION_VARIANTS[variant]
        return None

    def view_for(self, doc: Doc, data_root: Path, variant: str = "", meta: TaskMeta | None = None) -> View:
        """The image a sample is asked about: sent size and pixel size (upstream: header spacing / reshape zoom), and
        what the prompt states (the model's perceived canvas and the pixel size scaled by content / sent); for a
        -CoT-scaledPS sample also its pixel-size factors and scaled target, for a visual-prompt sample (-VP,
        -VP-woMedImg) what is drawn on its picture (A/D: ``meta``, the task metadata, names the metric's
        landmarks)."""
        import numpy as np


        zooms = header_zooms(data_root / "Datasets" / doc.image_file)
        keep = [a for a in range(3) if a != doc.slice_dim]
        ph, pw = zooms[keep[0]], zooms[keep[1]]
        native = tuple(int(v) for v in doc.image_size_2d)
        reshape = self.reshape_for(variant)
        sent = tuple(reshape) if reshape else native
        px_h, px_w = (ph / (sent[0] / native[0]), pw / (sent[1] / native[1])) if reshape else (ph, pw)
        stated = stated_size_for(self, (int(sent[0]), int(sent[1])), (px_h, px_w))
        content = (int(stated.content_hw[0]), int(stated.content_hw[1]))
        client_resize = content if self.api_pre_resize and content != (int(sent[0]), int(sent[1])) else None
        view = View(image_hw=(int(sent[0]), int(sent[1])), pixel_hw_mm=(float(px_h), float(px_w)),
                    canvas_hw=(int(stated.image_hw[0]), int(stated.image_hw[1])), content_hw=content,
                    stated_pixel_hw_mm=(float(np.float32(stated.pixel_hw_mm[0])) if isinstance(
                        stated.pixel_hw_mm[0], np.floating) else float(stated.pixel_hw_mm[0]),
                        float(stated.pixel_hw_mm[1])),
                    header_pixel_hw=(float(ph), float(pw)), reshape_hw=reshape or None,
                    client_resize_hw=client_resize)
        if variant == SCALED_PS_VARIANT and family_spec(doc.family).measure:
            return scaled_view(view, doc, data_root, self.scaled_ps, meta)
        if is_drawn(variant):  # what upstream draws on the picture, in the sent image's pixels
            return dataclasses.replace(view, overlay=overlay_for(doc, data_root, variant, reshape, meta))
        return view

    def signature_model(self) -> JsonObject:
        weights = self.weights
        served: dict[str, str] = {}
        if self.record.backend == "openai_compatible":
            name = self.served_model_name or self.model_name
            if weights:  # --model_hf_id: the weights the server serves, under the name it is asked by
                served = {"served_name": name}
            else:
                weights = name
        return {"record": self.record.name, "backend": self.record.backend, "weights": weights, **served,
                "revision": self.revision, "lora": self.lora_path, "dtype": self.dtype,
                "lmmseval_module": self.lmmseval_module, "engine_kwargs": self.record.engine_kwargs}

    def answer_flags(self) -> JsonObject:
        """Values of the record's own flags that change answers."""
        by_dest = {f.dest: f for f in self.record.flags}
        return {k: v for k, v in self.model_flags.items() if k in by_dest and by_dest[k].affects_answer
                and not (by_dest[k].signature_when_given and v is None)}


#: Records upstream's resolution variants (-336x336 ...) reshape images for: those of lmms-eval model key
#: vllm_qwen25vl (7B and 32B share it).
RESOLUTION_VARIANT_RECORDS = ("qwen2_5_vl", "qwen2_5_vl_32b")


def stated_size_for(cfg: RunConfig, sent_hw: tuple[int, int], pixel_hw: tuple[Any, Any]) -> StatedSize:
    """What a T/L or A/D prompt states for an image sent at ``sent_hw`` (the record's perceived-size rule; under
    the paper protocol its paper-era rule where it has one)."""
    overrides = dict(cfg.record.engine_kwargs.get("mm_processor_kwargs") or {})
    rule, size = cfg.processor_resize, cfg.record.engine_kwargs.get("processor_resize_hw")
    if cfg.paper_rule:
        rule, size = cfg.record.paper_processor_resize, cfg.record.paper_processor_resize_hw
    if size and rule in ("fixed", "pad_square") and cfg.paper_rule:
        overrides.update(height=int(size[0]), width=int(size[1]))  # master's canvas, whatever else is configured
    elif size and rule in ("fixed", "pad_square"):
        overrides.setdefault("height", int(size[0]))
        overrides.setdefault("width", int(size[1]))
    return _stated_cached(rule, cfg.weights, cfg.revision, model_code_from_flags(rule, cfg.model_flags), sent_hw,
                          tuple(pixel_hw), tuple(sorted(overrides.items())))


@functools.lru_cache(maxsize=4096)
def _stated_cached(rule: str, weights: str | None, revision: str | None, code: str | None, sent_hw: tuple[int, int],
                   pixel_hw: tuple[Any, Any], overrides: tuple[Any, ...]) -> StatedSize:
    return stated_size_for_model(rule, weights, sent_hw, pixel_hw, revision=revision, model_code=code,
                                 **dict(overrides))


def default_status_path(tasks_list_path: Path) -> Path:
    tag = safe_component(tasks_list_path.stem.removeprefix("tasks_"),
                         f"the tag of tasks list {tasks_list_path.name!r} (its name without tasks_ and .json)")
    return Path("completed_tasks") / f"completed_tasks_{tag}.json"


def build_config(ns: argparse.Namespace, record: ModelRecord, argv: list[str],
                 tasks: dict[str, int] | None = None) -> RunConfig:
    """The run's settings; ``tasks`` (named on the command line) stands in for the tasks list when given."""
    check_path_flags(ns, record)
    contract = DatasetContract.resolve(ns.data_dir)
    tasks_list_path = Path(ns.tasks_list_json_path or "--tasks")
    tasks = load_tasks_list(tasks_list_path) if tasks is None else tasks
    weights = ns.model_hf_id or record.default_weights
    model_flags = {f.dest: getattr(ns, f.dest, f.default) for f in record.flags}
    if record.backend == "hf" and not weights:
        raise UserError(f"model {record.name} needs weights: pass --model_hf_id FOLDER_OR_HUB_ID")
    if record.backend == "openai_compatible":
        if not ns.model_name:
            raise UserError("openai-compatible needs --model_name NAME (the model name the server serves)")
        if not model_flags.get("base_url"):
            raise UserError("openai-compatible needs --base_url URL (repeatable or comma-separated)")
    if ns.gpu_memory_utilization is not None and record.backend != "vllm":
        raise UserError(f"--gpu_memory_utilization is a vLLM setting; {record.name} runs on the {record.backend} "
                        "backend, which has no such setting: drop it")
    if "model_choice" in model_flags:  # HealthGPT: the choice names the weights
        weights = model_flags.get("model_choice")
    pinned = record.reshape_hw if record.reshape_pinned else None
    if pinned is not None and ns.reshape_image_hw and tuple(ns.reshape_image_hw) != pinned:
        raise UserError(f"{record.display_name} is pinned to {pinned[0]}x{pinned[1]} images "
                        "(its training size); drop --reshape_image_hw")
    explicit = {name for name in ("max_new_tokens", "temperature", "top_p", "top_k", "seed")
                if getattr(ns, name) is not None}
    gen = dataclasses.replace(
        record.gen,
        **{name: getattr(ns, name) for name in explicit},
        stop=stop_strings(ns.stop_strings) or record.gen.stop,
        **{k: model_flags[k] for k in ("repetition_penalty", "min_new_tokens") if model_flags.get(k) is not None},
    )
    gen = _decoding_mode(gen, model_flags.get("do_sample"), "temperature" in explicit)
    offload = model_flags.get("cpu_offload_gb")
    if offload is not None and offload < 0:
        raise UserError(f"--cpu_offload_gb {offload}: give the GiB of weights to offload to CPU RAM (0 or more)")
    if record.thinking and record.backend == "vllm" and not gen.temperature:
        raise UserError(f"{record.display_name} thinking weights must sample: give --temperature > 0 "
                        f"(default {record.gen.temperature}), never 0")
    system_prompt = record.system_prompt if (record.name != "medvision-model-rft"
                                             or model_flags.get("use_system_prompt")) else None
    model_name = ns.model_name if ns.model_name is not None else _default_model_name(record, weights, model_flags)
    served_model_name = None
    if record.backend == "openai_compatible" and "/" in model_name:  # the served name, e.g. Qwen/Qwen2.5-VL-7B
        served_model_name, model_name = model_name, model_name.replace("/", "_")
    model_name = safe_component(model_name, "--model_name" if ns.model_name is not None else
                                "the results folder name taken from --model_hf_id or the model code (give --model_name)")
    if ns.shard is not None:
        safe_component(ns.shard, "--shard")
    check_generation(gen, record)
    results_dir = Path(ns.results_dir).expanduser().resolve()
    status_path = None if ns.skip_update_status else Path(
        ns.task_status_json_path or default_status_path(tasks_list_path)).expanduser().resolve()
    upstream = getattr(ns, "upstream_results", None)
    return RunConfig(
        record=record, model_name=model_name, weights=weights, revision=ns.revision, lora_path=ns.lora_path,
        dtype=ns.dtype or record.dtype, lmmseval_module=lmmseval_module_for(record, ns.lmmseval_module),
        batch_size=ns.batch_size or record.batch_size,
        gpu_memory_utilization=ns.gpu_memory_utilization or record.gpu_memory_utilization,
        contract=contract, tasks_list_path=tasks_list_path, tasks=tasks, results_dir=results_dir,
        status_path=status_path, sample_limit=ns.sample_limit, sample_indices=ns.sample_indices,
        reshape_hw=tuple(ns.reshape_image_hw) if ns.reshape_image_hw else record.reshape_hw,
        processor_resize=model_flags.get("processor_resize") or record.processor_resize,
        gen=gen, gen_explicit=frozenset(explicit), system_prompt=system_prompt, log_sys_prompt=ns.log_sys_prompt,
        protocol=ns.protocol or "current", keep_failed=ns.keep_failed, force=ns.force,
        shard=ns.shard, progress=not ns.no_progress,
        model_flags=model_flags, argv=redact_argv(list(argv)), served_model_name=served_model_name,
        upstream_results=Path(upstream).expanduser() if upstream else None,
        scaled_ps=check_range(getattr(ns, "scaled_ps_low", None), getattr(ns, "scaled_ps_high", None)),
        max_cost=getattr(ns, "max_cost", None),
        batch=bool(getattr(ns, "batch", False)), batch_poll_s=float(getattr(ns, "batch_poll", 60.0) or 60.0),
        batch_phase=check_batch_phase(ns),
    )


def check_batch_phase(ns: argparse.Namespace) -> str:
    """``--batch_phase``, checked against the flags it needs and the ones it cannot serve."""
    phase = str(getattr(ns, "batch_phase", None) or "all")
    if phase == "all":
        return phase
    if not getattr(ns, "batch", False):
        raise UserError(f"--batch_phase {phase}: a phase of a batch run; give --batch too")
    if getattr(ns, "max_cost", None) is not None:
        raise UserError(f"--batch_phase {phase} with --max_cost: the budget submits in rounds as the answers land, "
                        "so one run must submit and collect; drop --batch_phase (or --max_cost)")
    return phase


def check_path_flags(ns: argparse.Namespace, record: ModelRecord) -> None:
    """Refuse a flag naming a file or folder that is missing or of the wrong kind, before any weights load: one
    line naming the flag and the path. (The tasks list is checked as it is read, the data folder by ``DataDir``,
    both before a backend is built.)"""

    def refuse(flag: str, value: str, what: str, fix: str) -> UserError:
        return UserError(f"{flag} {value} {what}; {fix}")

    def path(value: str) -> Path:
        return Path(value).expanduser()

    weights = ns.model_hf_id or record.default_weights
    if weights and weights.startswith(("/", "./", "../", "~")) and not path(weights).exists():
        raise refuse("--model_hf_id", weights, "looks like a local folder but does not exist",
                     "check the path or give a hub id like org/name")
    lora = ns.lora_path
    if lora:
        if not path(lora).is_dir():
            raise refuse("--lora_path", lora, "does not exist" if not path(lora).exists() else "is not a folder",
                         "pass the LoRA adapter folder (the one holding adapter_config.json)")
        if not (path(lora) / "adapter_config.json").is_file():
            raise refuse("--lora_path", lora, "has no adapter_config.json",
                         "pass the folder a PEFT LoRA adapter was saved to")
    if path(ns.results_dir).exists() and not path(ns.results_dir).is_dir():
        raise refuse("--results_dir", ns.results_dir, "is a file, not a folder", "pass a folder for the results")
    status = ns.task_status_json_path
    if status and not ns.skip_update_status and path(status).is_dir():
        raise refuse("--task_status_json_path", status, "is a folder", "pass the status JSON file's path")
    upstream = getattr(ns, "upstream_results", None)
    if upstream and not path(upstream).is_dir():
        raise refuse("--upstream_results", upstream, "is not a folder", "pass upstream's Results/<task_tag> folder")
    flags = {f.dest for f in record.flags}
    table = getattr(ns, "price_table", None) if "price_table" in flags else None
    if table and not path(table).is_file():
        raise refuse("--price_table", table, "does not exist" if not path(table).exists() else "is not a file",
                     "pass a YAML/JSON file of model code -> price_in/price_out")
    third = getattr(ns, "dir_third_party", None) if "dir_third_party" in flags else None
    if third and path(third).exists() and not path(third).is_dir():
        raise refuse("--dir_third_party", third, "is a file, not a folder",
                     "pass a folder to clone the upstream code into")


def _decoding_mode(gen: GenSettings, do_sample: str | None, temperature_given: bool) -> GenSettings:
    """A record's --do_sample (HuatuoGPT-Vision, as upstream's eval__huatuogpt_vision @09206a2): ``false`` decodes
    greedily (temperature 0), ``true`` or unset keeps the record's sampling; a contradicting --temperature is
    refused rather than one of the two silently winning."""
    if do_sample is None:
        return gen
    if do_sample == "false":
        if temperature_given and gen.temperature:
            raise UserError(f"--do_sample false decodes greedily but --temperature {gen.temperature:g} asks to "
                            "sample; drop one of them")
        return dataclasses.replace(gen, temperature=0.0)
    if not gen.temperature:
        raise UserError("--do_sample true needs a temperature above 0 (--temperature 0 is greedy); drop one of them")
    return gen


#: Bounds of the sampling settings (docs/running-evaluations.md): what every supported provider accepts.
MAX_NEW_TOKENS_CAP = 262_144
TEMPERATURE_MAX = 2.0
SEED_MAX = 2**31 - 1


def check_generation(gen: GenSettings, record: ModelRecord) -> None:
    """Refuse sampling settings no provider accepts (nan, inf, negative temperature, top_p outside (0, 1], ...)."""
    import math

    def bad(flag: str, value: object, allowed: str) -> UserError:
        return UserError(f"{flag} {value!r} is out of range; it must be {allowed}")

    def finite(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    if not isinstance(gen.max_new_tokens, int) or not 1 <= gen.max_new_tokens <= MAX_NEW_TOKENS_CAP:
        raise bad("--max_new_tokens", gen.max_new_tokens, f"an integer from 1 to {MAX_NEW_TOKENS_CAP}")
    if gen.temperature is not None and not (finite(gen.temperature) and 0 <= gen.temperature <= TEMPERATURE_MAX):
        raise bad("--temperature", gen.temperature, f"a number from 0 (greedy) to {TEMPERATURE_MAX:g}")
    if gen.top_p is not None and not (finite(gen.top_p) and 0 < gen.top_p <= 1):
        raise bad("--top_p", gen.top_p, "a number in (0, 1]")
    if gen.top_k is not None and not (isinstance(gen.top_k, int) and gen.top_k >= 1):
        raise bad("--top_k", gen.top_k, "an integer of 1 or more (leave it out to turn top-k off)")
    if gen.seed is not None and not (isinstance(gen.seed, int) and 0 <= gen.seed <= SEED_MAX):
        raise bad("--seed", gen.seed, f"an integer from 0 to {SEED_MAX}")
    if gen.repetition_penalty is not None and not (finite(gen.repetition_penalty) and 0 < gen.repetition_penalty <= 10):
        raise bad("--repetition_penalty", gen.repetition_penalty, "a number in (0, 10]")
    if gen.min_new_tokens is not None and not (isinstance(gen.min_new_tokens, int)
                                               and 0 <= gen.min_new_tokens <= gen.max_new_tokens):
        raise bad("--min_new_tokens", gen.min_new_tokens, f"an integer from 0 to --max_new_tokens ({gen.max_new_tokens})")


def _default_model_name(record: ModelRecord, weights: str | None, flags: dict[str, object]) -> str:
    """Results folder name when --model_name is not given (models/registry.py default_model_name)."""
    return default_model_name(record, weights, flags)
