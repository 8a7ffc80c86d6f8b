"""The model registry: one typed record per model (backend, default weights, flags, environment)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from medvision_bm.data.docs import FAMILIES
from medvision_bm.errors import UserError
from medvision_bm.models.base import GenSettings
from medvision_bm.models.processing import API_RULES, GENERIC_HF_RULES, canonical_rule

API_BACKENDS = ("openai_compatible", "openai", "anthropic", "gemini", "kimi", "minimax")
#: Records that run any model the user names: the only ones (with the baselines) whose perceived-size rule may be
#: "none" (or, for "hf", "auto"), each a choice the user can change with --processor_resize.
GENERIC_RECORDS = ("hf", "openai-compatible")
#: The task families a tasks list holds (one family per launcher, as upstream's script/benchmark-<family>/).
TASK_FAMILIES = FAMILIES
#: What upstream's launchers pass as ``--sample_limit``: 1000 for open weights, 100 for the API models.
LAUNCHER_SAMPLE_LIMIT_OPEN, LAUNCHER_SAMPLE_LIMIT_API = 1000, 100


@dataclass(frozen=True)
class FlagSpec:
    """A flag that only some models take. ``affects_answer`` puts its value into the run signature."""

    name: str  # e.g. "--thinking"
    type: str = "str"  # "str" | "int" | "float" | "bool" (store_true) | "tristate" (--x/--no-x) | "list"
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] | None = None
    affects_answer: bool = True
    # flags added after runs were stored: the value enters the signature only when the flag is given, so runs
    # without it keep the signature they had
    signature_when_given: bool = False

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class EnvSpec:
    """The environment a model runs in: its name, frozen requirements and lmms-eval extras."""

    name: str  # e.g. "eval-qwen25vl"
    lmms_eval_extras: tuple[str, ...] = ()
    python: str = "3.11"
    gpu: bool = True

    @property
    def family(self) -> str:
        return self.name.removeprefix("eval-")

    @property
    def _stem(self) -> str:  # requirements_eval_<family> for a model env, requirements_<name> otherwise
        return f"eval_{self.family}" if self.name.startswith("eval-") else self.name

    @property
    def requirements(self) -> str:
        return f"requirements/requirements_{self._stem}.txt"

    @property
    def requirements_in(self) -> str:
        return f"requirements/requirements_{self._stem}.in"


@dataclass(frozen=True)
class ThirdParty:
    """Upstream code a model needs, cloned at a pinned commit and put on the import path."""

    repo_url: str
    commit: str
    import_subdir: str = ""


@dataclass(frozen=True)
class ModelRecord:
    name: str  # registry key and eval__<name> module
    display_name: str
    backend: str
    env: EnvSpec
    launcher: str  # script/benchmark-*/<launcher>.sh
    default_weights: str | None = None
    gen: GenSettings = field(default_factory=GenSettings)
    batch_size: int = 1
    gpu_memory_utilization: float | None = None
    dtype: str = "auto"
    reshape_hw: tuple[int, int] | None = None  # default reshape (user may override unless pinned)
    reshape_pinned: bool = False
    # the perceived-size rule (models/processing.py RULES; upstream get_resized_img_shape): what image size and
    # pixel size T/L and A/D prompts state. Required: a record without one is refused when it is built. "fixed" and
    # "pad_square" take their size from engine_kwargs["processor_resize_hw"]; the API rules ("claude", "openai",
    # "gemini", "kimi") need the provider's model code; "none" (the image as sent) only for the baselines and the
    # generic records, "auto" (read from the model folder) only for the generic "hf" record
    processor_resize: str = ""
    # the paper protocol's rule where upstream's paper-era master (c221615 ``get_resized_img_shape``) had another:
    # fixed canvases ("fixed" + paper_processor_resize_hw: LLaVA-Med, HuatuoGPT-Vision, HealthGPT-L14 336x336,
    # InternVL3 448x448) and LLaVA-OneVision's "llava_onevision_master"; "" = processor_resize under both protocols
    paper_processor_resize: str = ""
    paper_processor_resize_hw: tuple[int, int] | None = None
    max_model_len: int | None = None
    thinking: bool | None = None
    prompt_variant: str = "plain"
    system_prompt: str | None = None
    flags: tuple[FlagSpec, ...] = ()
    lmmseval_modules: tuple[str, ...] = ()
    third_party: tuple[ThirdParty, ...] = ()
    api_key_envs: tuple[str, ...] = ()
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    launcher_flags: tuple[str, ...] = ()  # flags the launchers pass, as upstream's launchers do
    # per task family ("detect" | "TL" | "AD") token budgets that replace gen.max_new_tokens for the tasks of that
    # family (upstream's launchers of some families pass another --max_new_tokens); --max_new_tokens wins over both
    family_max_new_tokens: dict[str, int] = field(default_factory=dict)
    # the results folder / status entry name when --model_name is not given: upstream's launchers' model_name
    default_model_name: str | None = None
    notes: str = ""
    # the annotation release the default weights were trained on (None: unknown; docs/spec/training-release.md)
    training_release: str | None = None

    def __post_init__(self) -> None:
        rule = self.processor_resize
        if not rule:
            raise ValueError(f"model record {self.name!r} has no perceived-size rule (processor_resize); every model "
                             "must state how its processor resizes images")
        if rule != "auto":
            name = canonical_rule(rule)  # ValueError for an unknown rule
            if name in ("fixed", "pad_square") and not self.engine_kwargs.get("processor_resize_hw"):
                raise ValueError(f"model record {self.name!r}: rule {rule!r} needs engine_kwargs processor_resize_hw")
            if name in API_RULES and not self.is_api:
                raise ValueError(f"model record {self.name!r}: rule {rule!r} is for API models")
        if self.paper_processor_resize:
            paper = canonical_rule(self.paper_processor_resize)
            if (paper in ("fixed", "pad_square")) != (self.paper_processor_resize_hw is not None):
                raise ValueError(f"model record {self.name!r}: paper rule {paper!r} and paper_processor_resize_hw "
                                 "go together (a size only for the fixed and pad_square rules)")
        elif self.paper_processor_resize_hw is not None:
            raise ValueError(f"model record {self.name!r}: paper_processor_resize_hw without paper_processor_resize")
        if rule == "none" and not (self.backend == "baseline" or self.name in GENERIC_RECORDS):
            raise ValueError(f"model record {self.name!r}: rule 'none' is only for the baselines and the generic "
                             "records; give the model's own rule")
        if rule == "auto" and not (self.backend == "hf" and self.name in GENERIC_RECORDS):
            raise ValueError(f"model record {self.name!r}: rule 'auto' is only for the generic transformers record")
        unknown = set(self.family_max_new_tokens) - set(TASK_FAMILIES)
        if unknown:
            raise ValueError(f"model record {self.name!r}: family_max_new_tokens names {sorted(unknown)}, not one of "
                             f"{', '.join(TASK_FAMILIES)}")

    def max_new_tokens_for(self, family: str) -> int:
        """The record's token budget for a task of ``family``: its per-family value, else gen.max_new_tokens."""
        return int(self.family_max_new_tokens.get(family, self.gen.max_new_tokens))

    @property
    def launcher_sample_limit(self) -> int | None:
        """``--sample_limit`` the launchers pass (upstream's: 1000 open weights, 100 API models); None for the
        baselines and the generic records, which upstream does not have (their launchers evaluate every sample)."""
        if self.backend == "baseline" or self.name in GENERIC_RECORDS:
            return None
        return LAUNCHER_SAMPLE_LIMIT_API if self.is_api else LAUNCHER_SAMPLE_LIMIT_OPEN

    @property
    def module(self) -> str:
        return f"medvision_bm.benchmark.eval__{self.name}"

    @property
    def is_api(self) -> bool:
        return self.backend in API_BACKENDS


# ---------------------------------------------------------------- shared flag groups
API_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("--max_retries", "int", 6, "retries per sample after the first attempt", affects_answer=False),
    FlagSpec("--request_timeout", "float", 120.0, "seconds per attempt", affects_answer=False),
    FlagSpec("--sample_deadline", "float", 900.0, "seconds per sample across all attempts", affects_answer=False),
    FlagSpec("--price_in", "float", None, "USD per 1M input tokens (cost report)", affects_answer=False),
    FlagSpec("--price_out", "float", None, "USD per 1M output tokens (cost report)", affects_answer=False),
    FlagSpec("--price_table", "str", None, "YAML/JSON file: model code -> price_in/price_out", affects_answer=False),
    FlagSpec("--image_format", "str", "png", "how slices are encoded for the request", choices=("png", "jpeg")),
    FlagSpec("--base_url", "list", None, "override the provider URL (repeatable or comma-separated)",
             affects_answer=False),
)
SERVE_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("--serve", "bool", False, "start the model's OpenAI-compatible server(s) and evaluate through them",
             affects_answer=False),
    FlagSpec("--serve_replicas", "int", None, "server replicas (default: one per GPU group)", affects_answer=False),
    FlagSpec("--serve_command", "str", None, "server command template ({model} {port} {host} ...)",
             affects_answer=False),
    FlagSpec("--serve_gpus_per_replica", "int", 1, "GPUs per server replica", affects_answer=False),
    FlagSpec("--serve_timeout", "float", 1800.0, "seconds to wait for the servers to become healthy",
             affects_answer=False),
    FlagSpec("--base_url", "list", None, "evaluate through already running OpenAI-compatible server(s)",
             affects_answer=False),
)
THINKING = FlagSpec("--thinking", "tristate", None, "turn the model's thinking mode on or off")
MAX_MODEL_LEN = FlagSpec("--max_model_len", "int", None, "vLLM context length", affects_answer=False)
MIN_NEW_TOKENS = FlagSpec("--min_new_tokens", "int", None, "minimum generated tokens")
REPETITION_PENALTY = FlagSpec("--repetition_penalty", "float", None, "repetition penalty")
PACE = FlagSpec("--pace_s", "float", 0.0, "seconds to wait per answer (simulates a slow model: resume drills)",
                affects_answer=False)
THIRD_PARTY_DIR = FlagSpec("--dir_third_party", "str", None, "folder to clone the upstream code into",
                           affects_answer=False)


def _vllm(name: str, display: str, env: str, launcher: str, weights: str, **kw: Any) -> ModelRecord:
    kw.setdefault("batch_size", 10)
    kw.setdefault("gpu_memory_utilization", 0.9)
    kw.setdefault("gen", GenSettings(max_new_tokens=4096, temperature=0.0))
    flags = kw.pop("flags", ())
    extras = kw.pop("extras", ())
    return ModelRecord(name, display, "vllm", EnvSpec(env, extras), launcher, weights,
                       flags=(*flags, *SERVE_FLAGS), **kw)


def _third_party(name: str, display: str, env: EnvSpec, launcher: str, weights: str | None,
                 tp: tuple[ThirdParty, ...], **kw: Any) -> ModelRecord:
    flags = kw.pop("flags", ())
    return ModelRecord(name, display, "third_party", env, launcher, weights, third_party=tp,
                       gen=kw.pop("gen", GenSettings(max_new_tokens=4096, temperature=0.0)),
                       flags=(THIRD_PARTY_DIR, *flags), batch_size=kw.pop("batch_size", 2),
                       dtype=kw.pop("dtype", "bfloat16"), **kw)


def _api(name: str, display: str, backend: str, launcher: str, model_flag: FlagSpec, keys: tuple[str, ...],
         extra: tuple[FlagSpec, ...] = (), **kw: Any) -> ModelRecord:
    return ModelRecord(name, display, backend, EnvSpec("eval-api", gpu=False), launcher,
                       gen=kw.pop("gen", GenSettings(max_new_tokens=16000, temperature=None, seed=None)),
                       batch_size=kw.pop("batch_size", 16), api_key_envs=keys,
                       flags=(model_flag, *extra, *API_FLAGS), **kw)


#: The flags of upstream's eval__openai besides the model code (every GPT record).
OPENAI_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("--api_provider", "str", "openai", "openai or openrouter", choices=("openai", "openrouter")),
    FlagSpec("--reasoning_effort", "str", None, "sent only when set", choices=("low", "medium", "high")),
)

#: The verl RFT training system prompt MedVision-V0 was trained with; upstream sends it as a separate system message
#: when ``--use_system_prompt`` is given, which its MedVision-V0 launchers pass (``src/medvision_bm/rft/verl/
#: rft_prompts.py`` SYSTEM_PROMPT @f1102c5; ``eval__medvision-model-rft.py`` @742c484). Upstream's text, verbatim.
MEDVISION_V0_SYSTEM_PROMPT = (
    "A conversation between a User and an Assistant. The User asks a question, and the Assistant solves it. The "
    "Assistant first thinks through the reasoning process internally, then provides the User with the answer. The "
    "reasoning process and the final answer must be enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively. For example: <think> reasoning process here </think> <answer> answer here </answer>. Within the "
    "<think> </think> tags, report the reasoning process for each step inside <step-k-reasoning> "
    "</step-k-reasoning> tags, followed by the intermediate results in <step-k-answer> </step-k-answer> tags. For "
    "example: <think> <step-1-reasoning> reasoning for step 1 </step-1-reasoning> <step-1-answer> intermediate "
    "result from step 1 </step-1-answer> </think>."
)

#: The engine flags of upstream's eval__minimax_m3 (@1e67af7): weights offloaded to CPU RAM (vLLM cpu_offload_gb;
#: upstream passes 0, vLLM's default) and the vLLM release the run needs (upstream installs it; here the
#: environment's lock pins vLLM, so the flag is checked against the installed one).
MINIMAX_M3_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec("--cpu_offload_gb", "int", None, "GiB of weights vLLM offloads to CPU RAM (0: none, vLLM's default)",
             signature_when_given=True),
    FlagSpec("--vllm_version", "str", None, "the vLLM release this run needs; refused when the environment holds "
             "another (default: the environment's)", affects_answer=False),
)

#: vLLM engine settings upstream's vllm_minimax_m3 wrapper always passes (@1e67af7): 128-token KV blocks (MiniMax
#: Sparse Attention's block size, required for every checkpoint) and the checkpoint's configuration code.
MINIMAX_M3_ENGINE: dict[str, object] = {"block_size": 128, "trust_remote_code": True}

_RECORDS: tuple[ModelRecord, ...] = (
    # ------------------------------------------------------------- baselines and generic local models (CPU)
    ModelRecord("oracle", "Oracle", "baseline", EnvSpec("eval-cpu", gpu=False), "oracle", flags=(PACE,),
                processor_resize="none", notes="answers with the annotation: every metric must be perfect"),
    ModelRecord("mean", "Train mean", "baseline", EnvSpec("eval-cpu", gpu=False), "mean", flags=(PACE,),
                processor_resize="none", notes="answers each task with the mean target of its train split"),
    ModelRecord("random-box", "Random box", "baseline", EnvSpec("eval-cpu", gpu=False), "random-box",
                flags=(FlagSpec("--baseline_seed", "int", 0, "seed of the random answers"), PACE),
                processor_resize="none", notes="uniformly random boxes (detection); random values in the train range otherwise"),
    ModelRecord("hf", "Transformers (local folder)", "hf", EnvSpec("eval-cpu", gpu=False), "hf",
                gen=GenSettings(max_new_tokens=64, temperature=0.0), batch_size=4, processor_resize="auto",
                flags=(FlagSpec("--device", "str", "auto", "cpu, cuda or auto (accelerate device_map)",
                                affects_answer=False),
                       FlagSpec("--processor_resize", "str", "auto",
                                "how the processor resizes images (auto: read from the model folder)",
                                choices=("auto", *GENERIC_HF_RULES)),
                       FlagSpec("--trust_remote_code", "bool", False, "allow model code from the folder")),
                notes="any transformers image-text-to-text model from --model_hf_id (folder or hub id)"),
    ModelRecord("openai-compatible", "OpenAI-compatible server", "openai_compatible",
                EnvSpec("eval-api", gpu=False), "openai-compatible",
                gen=GenSettings(max_new_tokens=1024, temperature=0.0), batch_size=16, processor_resize="none",
                flags=(FlagSpec("--processor_resize", "str", "none", "how the served model's processor resizes",
                                choices=("none", "qwen2_5", "qwen3")), *API_FLAGS),
                notes="any OpenAI-compatible chat server: --base_url URL --model_name NAME"),
    # ------------------------------------------------------------- open weights, vLLM
    _vllm("qwen2_5_vl", "Qwen2.5-VL", "eval-qwen25vl", "qwen25vl", "Qwen/Qwen2.5-VL-7B-Instruct",
          processor_resize="qwen2_5", extras=("qwen",), lmmseval_modules=("vllm_qwen25vl",), flags=(MAX_MODEL_LEN,),
          default_model_name="Qwen2.5-VL-7B-Instruct"),
    # Qwen2.5-VL-32B-Instruct: upstream runs it through the same entry point and launcher stem as the 7B (model
    # roster "Qwen-2.5-VL (7B / 32B)", skills/medvision/references/model-roster.md @39dd6bf) with the 7B launcher's
    # settings; it has no launcher of its own. Its results folder is "Qwen2.5-VL-32B-Instruct" in every published
    # table (Paper-results-backup/*/summary_judge_task__llm-parsed_gemma-4-31b.txt @755a7bb), no budget suffix
    _vllm("qwen2_5_vl_32b", "Qwen2.5-VL-32B", "eval-qwen25vl", "qwen25vl-32b", "Qwen/Qwen2.5-VL-32B-Instruct",
          processor_resize="qwen2_5", extras=("qwen",), lmmseval_modules=("vllm_qwen25vl",), flags=(MAX_MODEL_LEN,),
          default_model_name="Qwen2.5-VL-32B-Instruct"),
    _vllm("qwen3_vl", "Qwen3-VL", "eval-qwen3vl", "qwen3vl", "Qwen/Qwen3-VL-32B-Thinking",
          processor_resize="qwen3", thinking=True, extras=("qwen",), lmmseval_modules=("vllm_qwen3vl",),
          gen=GenSettings(max_new_tokens=4096, temperature=0.8, top_p=0.95, top_k=20, stop=("</answer>",)),
          batch_size=2, gpu_memory_utilization=0.95, flags=(MAX_MODEL_LEN,), default_model_name="Qwen3-VL-32B-Thinking",
          notes="thinking weights: sampling defaults, never temperature 0"),
    _vllm("intern_vl3", "InternVL3", "eval-internvl3", "internvl3", "OpenGVLab/InternVL3-38B", batch_size=2,
          processor_resize="internvl", paper_processor_resize="fixed", paper_processor_resize_hw=(448, 448),
          engine_kwargs={"trust_remote_code": True}, lmmseval_modules=("vllm_internvl3",), flags=(MAX_MODEL_LEN,),
          default_model_name="InternVL3-38B"),
    _vllm("gemma3", "Gemma-3", "eval-gemma3", "gemma3", "google/gemma-3-27b-it", processor_resize="fixed",
          engine_kwargs={"processor_resize_hw": [896, 896]}, batch_size=4, lmmseval_modules=("vllm_gemma3",),
          flags=(MAX_MODEL_LEN,), default_model_name="Gemma-3-27b-it"),
    _vllm("gemma4", "Gemma-4", "eval-gemma4", "gemma4", "google/gemma-4-31B-it", max_model_len=8192, thinking=False,
          gpu_memory_utilization=0.95, processor_resize="gemma4", lmmseval_modules=("vllm_gemma4",),
          gen=GenSettings(max_new_tokens=4096, temperature=0.0, stop=("</answer>",)),
          flags=(FlagSpec("--enable_thinking", "tristate", None, "turn Gemma-4's thinking mode on or off"),
                 MAX_MODEL_LEN, MIN_NEW_TOKENS),
          launcher_flags=("--no-enable_thinking",), default_model_name="gemma-4-31B-it"),
    _vllm("llama3_2_vision", "Llama-3.2-Vision", "eval-llama3-vision", "llama3_2_vision",
          "meta-llama/Llama-3.2-11B-Vision-Instruct", batch_size=4, processor_resize="mllama", lmmseval_modules=("vllm_llama_3_2_vision",),
          flags=(MAX_MODEL_LEN,), family_max_new_tokens={"detect": 16000},
          default_model_name="Llama-3.2-11B-Vision-Instruct"),
    _vllm("llava_onevision", "LLaVA-OneVision", "eval-llava-onevision", "llava_onevision",
          "llava-hf/llava-onevision-qwen2-72b-ov-hf", batch_size=1, processor_resize="llava_onevision",
          paper_processor_resize="llava_onevision_master",
          lmmseval_modules=("vllm_llava_onevision",),
          flags=(MAX_MODEL_LEN,), default_model_name="LLaVA-OneVision"),
    _vllm("glm4v", "GLM-4.6V", "eval-glm4v", "glm4v", "zai-org/GLM-4.6V", batch_size=1, gpu_memory_utilization=0.95,
          processor_resize="glm4v", lmmseval_modules=("vllm_glm4v",),
          gen=GenSettings(max_new_tokens=4096, temperature=0.8, top_p=0.6, top_k=2, repetition_penalty=1.1,
                          stop=("</answer>",)),
          flags=(MAX_MODEL_LEN, REPETITION_PENALTY), family_max_new_tokens={"AD": 16000}, default_model_name="GLM-4.6V",
          notes="GLM-4.6V: sampling with repetition penalty"),
    # GLM-4.6V-Flash (10.3B dense) through the same entry point and environment as GLM-4.6V, with its own launchers
    # (eval__GLM-4.6V-Flash__AD.sh @5f35017): batch 2, gpu_memory_utilization 0.95, the same sampling
    _vllm("glm4v_flash", "GLM-4.6V-Flash", "eval-glm4v", "glm4v-flash", "zai-org/GLM-4.6V-Flash", batch_size=2,
          gpu_memory_utilization=0.95, processor_resize="glm4v", lmmseval_modules=("vllm_glm4v",),
          gen=GenSettings(max_new_tokens=4096, temperature=0.8, top_p=0.6, top_k=2, repetition_penalty=1.1,
                          stop=("</answer>",)),
          flags=(MAX_MODEL_LEN, REPETITION_PENALTY), family_max_new_tokens={"AD": 16000},
          default_model_name="GLM-4.6V-Flash", notes="GLM-4.6V-Flash: sampling with repetition penalty"),
    # MiniMax-M3 on local vLLM as upstream's eval__minimax_m3 (module vllm_minimax_m3): the official MXFP8 weights
    # (upstream's launchers eval__MiniMax-M3__*.sh) and the AWQ-INT4 weights the paper evaluated
    # (eval__MiniMax-M3-INT4__*.sh); the provider's API stays available as minimax_m3_api
    _vllm("minimax_m3", "MiniMax-M3", "eval-minimax-m3", "minimax-m3", "MiniMaxAI/MiniMax-M3-MXFP8",
          processor_resize="minimax_m3", thinking=True, lmmseval_modules=("vllm_minimax_m3",), batch_size=1,
          gen=GenSettings(max_new_tokens=16384, temperature=1.0, top_p=0.95, top_k=40, stop=("</answer>",)),
          flags=(MAX_MODEL_LEN, *MINIMAX_M3_FLAGS), default_model_name="MiniMax-M3",
          engine_kwargs=MINIMAX_M3_ENGINE,
          notes="reasoning model (MXFP8 weights, ~428 GB): sampling defaults, never temperature 0"),
    _vllm("minimax_m3_int4", "MiniMax-M3-INT4", "eval-minimax-m3", "minimax-m3-int4", "cyankiwi/MiniMax-M3-AWQ-INT4",
          processor_resize="minimax_m3", thinking=True, lmmseval_modules=("vllm_minimax_m3",), batch_size=1,
          gen=GenSettings(max_new_tokens=16384, temperature=1.0, top_p=0.95, top_k=40, stop=("</answer>",)),
          flags=(MAX_MODEL_LEN, *MINIMAX_M3_FLAGS), default_model_name="MiniMax-M3-INT4",
          engine_kwargs=MINIMAX_M3_ENGINE,
          notes="reasoning model (AWQ-INT4 weights, ~214 GB; the paper's MiniMax-M3): sampling, never temperature 0; "
                "shares the MXFP8 record's environment (vLLM 0.33.0), where upstream's INT4 launcher builds its own "
                "(eval-minimax-m3-int4: Python 3.12 and a patched vLLM); loading AWQ-INT4 in ours is untested"),
    _vllm("medvision-model-rft", "MedVision-V0", "eval-medvision-v0", "medvision-v0", "YongchengYAO/MedVision-V0-7B",
          reshape_hw=(512, 512), reshape_pinned=True, system_prompt=MEDVISION_V0_SYSTEM_PROMPT, extras=("qwen",),
          processor_resize="qwen2_5", lmmseval_modules=("vllm_qwen25vl",),
          flags=(FlagSpec("--use_system_prompt", "bool", False, "send the training system prompt"), MAX_MODEL_LEN),
          launcher_flags=("--use_system_prompt",), default_model_name="MedVision-V0-7B", training_release="1.0.0",
          notes="fine-tuned Qwen2.5-VL; images pinned at 512x512 as in training"),
    # ------------------------------------------------------------- open weights, transformers
    ModelRecord("medgemma", "MedGemma", "hf", EnvSpec("eval-medgemma"), "medgemma", "google/medgemma-4b-it",
                gen=GenSettings(max_new_tokens=4096, temperature=0.0), batch_size=10, dtype="bfloat16",
                processor_resize="fixed", engine_kwargs={"processor_resize_hw": [896, 896]},
                lmmseval_modules=("medgemma",), default_model_name="MedGemma-4b-it",
                flags=(FlagSpec("--device", "str", "auto", "cpu, cuda or auto", affects_answer=False),)),
    ModelRecord("medgemma_27b", "MedGemma-27B", "hf", EnvSpec("eval-medgemma"), "medgemma-27b",
                "google/medgemma-27b-it", gen=GenSettings(max_new_tokens=4096, temperature=0.0), batch_size=2,
                dtype="bfloat16", processor_resize="fixed", engine_kwargs={"processor_resize_hw": [896, 896]},
                lmmseval_modules=("medgemma",), family_max_new_tokens={"TL": 16000, "AD": 16000},
                default_model_name="MedGemma-27b-it",
                flags=(FlagSpec("--device", "str", "auto", "cpu, cuda or auto", affects_answer=False),),
                notes="T/L and A/D tasks get 16000 tokens, as upstream's MedGemma-27B launchers"),
    ModelRecord("lingshu", "Lingshu", "hf", EnvSpec("eval-lingshu", ("qwen",)), "lingshu",
                "lingshu-medical-mllm/Lingshu-32B", gen=GenSettings(max_new_tokens=4096, temperature=0.0),
                batch_size=2, dtype="bfloat16", processor_resize="qwen2_5", lmmseval_modules=("lingshu",),
                default_model_name="Lingshu-32b",
                flags=(FlagSpec("--device", "str", "auto", "cpu, cuda or auto", affects_answer=False),)),
    # ------------------------------------------------------------- open weights, third-party code
    _third_party("llava_med", "LLaVA-Med", EnvSpec("eval-llavamed", python="3.10"), "llava_med",
                 "microsoft/llava-med-v1.5-mistral-7b",
                 (ThirdParty("https://github.com/microsoft/LLaVA-Med", "30697ca50b5c29a8e955c99330b259776aef27b9"),),
                 batch_size=20, lmmseval_modules=("llava_med",), processor_resize="pad_square",
                 paper_processor_resize="fixed", paper_processor_resize_hw=(336, 336),
                 engine_kwargs={"conv_mode": "mistral_instruct", "processor_resize_hw": [336, 336],
                                "adapter_min_new_tokens": 16}, default_model_name="LLaVA-Med"),
    _third_party("meddr", "MedDr", EnvSpec("eval-meddr", python="3.10"), "meddr", "Sunanhe/MedDr_0401",
                 (ThirdParty("https://github.com/OpenGVLab/InternVL", "2410d1dbf208f0e799459aff9376e5747dbf41a2",
                             "internvl_chat"),
                  ThirdParty("https://github.com/sunanhe/MedDr", "48d7cd7078c406cf1f59d5ade207f8cce49bd21e")),
                 lmmseval_modules=("meddr",), processor_resize="fixed",
                 engine_kwargs={"processor_resize_hw": [448, 448]}, default_model_name="MedDr"),
    _third_party("huatuogpt_vision", "HuatuoGPT-Vision", EnvSpec("eval-huatuogpt-vision"),
                 "huatuogpt_vision", "FreedomIntelligence/HuatuoGPT-Vision-34B",
                 (ThirdParty("https://github.com/FreedomIntelligence/HuatuoGPT-Vision",
                             "e1a52dcf6c0417f4b6ac1d378b01147280192fca"),),
                 lmmseval_modules=("huatuogpt_vision",), processor_resize="pad_square",
                 paper_processor_resize="fixed", paper_processor_resize_hw=(336, 336),
                 engine_kwargs={"processor_resize_hw": [336, 336], "adapter_repetition_penalty": 1.2},
                 flags=(FlagSpec("--do_sample", "str", None, "decoding mode, as upstream's flag: false = greedy; "
                                 "unset or true = the model's sampling recipe (temperature 0.2)",
                                 choices=("true", "false"), signature_when_given=True),),
                 # upstream's recipe: HuatuoChatbot samples at temperature 0.2 (repetition penalty 1.2, from the
                 # chatbot's own gen_kwargs); its launchers pass --stop_strings '</answer>' and 4096 tokens
                 gen=GenSettings(max_new_tokens=4096, temperature=0.2, stop=("</answer>",)),
                 default_model_name="HuatuoGPT-Vision-34B"),
    _third_party("healthgpt", "HealthGPT", EnvSpec("eval-healthgpt"), "healthgpt", None,
                 (ThirdParty("https://github.com/DCDmllm/HealthGPT", "c044a13254b76c5eec8c2e6c55e3324318c27940"),),
                 batch_size=10, dtype="float16", lmmseval_modules=("healthgpt",),
                 processor_resize="pad_square", engine_kwargs={"processor_resize_hw": [336, 336]},
                 # master's healthgpt_l14 rule, whatever --model_choice (master knew no XL32; the XL32 record keeps
                 # the newer rule under both protocols)
                 paper_processor_resize="fixed", paper_processor_resize_hw=(336, 336),
                 flags=(FlagSpec("--model_choice", "str", "HealthGPT-L14", "weights, base model and dtype",
                                 choices=("HealthGPT-L14", "HealthGPT-XL32")),)),
    # HealthGPT-XL32 (Qwen2.5-32B base): upstream's eval__healthgpt takes it through --model_choice but has no
    # launcher for it; batch size 4 is upstream's model catalogue's guess, not a launcher value
    _third_party("healthgpt_xl32", "HealthGPT-XL32", EnvSpec("eval-healthgpt"), "healthgpt-xl32", None,
                 (ThirdParty("https://github.com/DCDmllm/HealthGPT", "c044a13254b76c5eec8c2e6c55e3324318c27940"),),
                 batch_size=4, dtype="float16", lmmseval_modules=("healthgpt",),
                 processor_resize="pad_square",
                 engine_kwargs={"processor_resize_hw": [336, 336], "adapter": "healthgpt"},
                 flags=(FlagSpec("--model_choice", "str", "HealthGPT-XL32", "weights, base model and dtype",
                                 choices=("HealthGPT-L14", "HealthGPT-XL32")),)),
    # ------------------------------------------------------------- API models
    _api("openai", "OpenAI GPT", "openai", "gpt",
         FlagSpec("--openai_model_code", "str", "gpt-5.5", "OpenAI model code (upstream launchers: gpt-5.5)"),
         ("OPENAI_API_KEY", "OPENROUTER_API_KEY"), OPENAI_FLAGS, processor_resize="openai",
         gen=GenSettings(max_new_tokens=4096, temperature=None, seed=None),
         launcher_flags=("--reasoning_effort", "low"), default_model_name="GPT-5.5"),
    # GPT-5.5-Pro: upstream's eval__openai with its own launchers (eval__GPT5.5-Pro__{detect,TL}.sh @473a4fd,
    # __AD.sh @83e3187): 4096 tokens, reasoning effort low, model name GPT-5.5-Pro
    _api("openai_pro", "OpenAI GPT-5.5-Pro", "openai", "gpt-pro",
         FlagSpec("--openai_model_code", "str", "gpt-5.5-pro", "OpenAI model code (upstream launchers: gpt-5.5-pro)"),
         ("OPENAI_API_KEY", "OPENROUTER_API_KEY"), OPENAI_FLAGS, processor_resize="openai",
         gen=GenSettings(max_new_tokens=4096, temperature=None, seed=None),
         launcher_flags=("--reasoning_effort", "low"), default_model_name="GPT-5.5-Pro"),

    _api("claude", "Anthropic Claude", "anthropic", "claude",
         FlagSpec("--anthropic_model_code", "str", "claude-fable-5", "Anthropic model code (upstream launchers: claude-fable-5)"),
         ("ANTHROPIC_API_KEY", "OPENROUTER_API_KEY"),
         (FlagSpec("--api_provider", "str", "anthropic", "anthropic or openrouter", choices=("anthropic", "openrouter")),
          FlagSpec("--thinking", "tristate", True, "extended thinking on or off"),
          FlagSpec("--thinking_budget", "int", None, "a fixed thinking budget in tokens, sent as thinking type "
                   "enabled (models before adaptive thinking); unset: adaptive thinking, as upstream")),
         thinking=True, reshape_hw=(512, 512), processor_resize="claude", default_model_name="Claude-Fable-5"),
    _api("gemini", "Google Gemini", "gemini", "gemini",
         FlagSpec("--google_model_code", "str", "gemini-3.1-pro-preview", "Gemini model code"),
         ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY"),
         (FlagSpec("--api_provider", "str", "google", "google or openrouter", choices=("google", "openrouter")),
          FlagSpec("--thinking_level", "str", None, "Gemini thinking level",
                   choices=("minimal", "low", "medium", "high")),
          FlagSpec("--thinkingBudget", "int", None, "Gemini 2.5 thinking budget in tokens, as upstream's flag: -1 "
                   "dynamic (what 2.5 gets when unset), 0 off (Flash/Flash-Lite); Gemini 3 takes --thinking_level",
                   signature_when_given=True),
          FlagSpec("--media_resolution", "str", "high", "Gemini media resolution", choices=("low", "medium", "high")),
          FlagSpec("--use_tool", "bool", False, "let the model use a code tool"),
          FlagSpec("--json_output", "bool", False, "ask for JSON output")), reshape_hw=(512, 512),
         processor_resize="gemini", default_model_name="Gemini-3.1-Pro"),
    _api("kimi", "Kimi", "kimi", "kimi", FlagSpec("--kimi_model_code", "str", "kimi-k2.6", "Kimi model code"),
         ("MOONSHOT_API_KEY", "OPENROUTER_API_KEY"),
         (FlagSpec("--api_provider", "str", "moonshot", "moonshot or openrouter", choices=("moonshot", "openrouter")),),
         reshape_hw=(512, 512), processor_resize="kimi", default_model_name="Kimi-K2.6"),
    # not upstream's route (upstream runs MiniMax-M3 on local vLLM: minimax_m3); kept for users without the GPUs
    _api("minimax_m3_api", "MiniMax-M3 (API)", "minimax", "minimax-m3-api",
         FlagSpec("--minimax_model_code", "str", "MiniMax-M3", "MiniMax model code"), ("MINIMAX_API_KEY",),
         processor_resize="minimax_m3"),
)

REGISTRY: dict[str, ModelRecord] = {r.name: r for r in _RECORDS}
#: Short names users know from launchers and older scripts.
ALIASES: dict[str, str] = {"qwen25vl": "qwen2_5_vl", "qwen3vl": "qwen3_vl", "internvl3": "intern_vl3",
                           "llama32v": "llama3_2_vision", "llavaov": "llava_onevision", "gpt": "openai",
                           "huatuogpt": "huatuogpt_vision", "llavamed": "llava_med",
                           "medvision-v0": "medvision-model-rft", "medvision_model_rft": "medvision-model-rft",
                           "random_box": "random-box", "openai_compatible": "openai-compatible",
                           "minimax-m3": "minimax_m3", "minimax-m3-int4": "minimax_m3_int4",
                           "minimax-m3-api": "minimax_m3_api", "medgemma-27b": "medgemma_27b",
                           "healthgpt-xl32": "healthgpt_xl32", "qwen25vl-32b": "qwen2_5_vl_32b",
                           "glm4v-flash": "glm4v_flash", "gpt-pro": "openai_pro"}


def get_record(name: str) -> ModelRecord:
    key = ALIASES.get(name, name)
    if key not in REGISTRY:
        close = [n for n in REGISTRY if name.lower()[:3] in n.lower()]
        hint = f" (did you mean {', '.join(close[:3])}?)" if close else ""
        raise UserError(f"unknown model {name!r}{hint}; `medvision-bm models` lists the registry")
    return REGISTRY[key]


def environments() -> dict[str, EnvSpec]:
    """Every environment the registry uses, by name."""
    envs = {r.env.name: r.env for r in _RECORDS}
    for spec in GPU_ENVS.values():
        envs.setdefault(spec.name, spec)
    envs.setdefault(DATA_ENV.name, DATA_ENV)
    return envs


#: GPU environments of records whose own (default) environment is the CPU one: the generic transformers record
#: runs in eval-cpu (CPU torch) without a GPU and in eval-hf-gpu (PyPI's CUDA torch) with one.
GPU_ENVS: dict[str, EnvSpec] = {"hf": EnvSpec("eval-hf-gpu")}
#: Where `medvision-bm data download` runs: upstream's dataset loading script needs `datasets` 3.x (no lmms-eval,
#: no torch); the command re-runs itself there when the running interpreter lacks it.
DATA_ENV = EnvSpec("data", gpu=False)
#: Picks the generic records' environment: gpu or cpu (default: by whether this machine has an NVIDIA GPU).
HF_ENV_VAR = "MEDVISION_HF_ENV"


def machine_has_gpu() -> bool:
    """Whether an NVIDIA GPU is visible here, without importing torch: the driver lists one (or nvidia-smi
    does), and CUDA_VISIBLE_DEVICES does not hide them all."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    gpus = "/proc/driver/nvidia/gpus"
    if os.path.isdir(gpus) and os.listdir(gpus):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        res = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return res.returncode == 0 and "GPU" in res.stdout


def record_env(record: ModelRecord, gpu: bool | None = None) -> EnvSpec:
    """The environment ``record`` runs in here. Records with a GPU environment beside their CPU one (``hf``) take
    it when ``gpu`` is True, or, when ``gpu`` is None, when $MEDVISION_HF_ENV says gpu (cpu: the CPU one) or, with
    that unset, when this machine has an NVIDIA GPU."""
    alt = GPU_ENVS.get(record.name)
    if alt is None:
        return record.env
    if gpu is None:
        choice = os.environ.get(HF_ENV_VAR, "").strip().lower()
        if choice not in ("", "gpu", "cpu"):
            raise UserError(f"{HF_ENV_VAR}={choice!r} is not gpu or cpu; set it to gpu, cpu or nothing (the GPU "
                            "environment where this machine has an NVIDIA GPU)")
        gpu = choice == "gpu" if choice else machine_has_gpu()
    return alt if gpu else record.env


#: lmms-eval model classes upstream's entry points accept that this suite does not implement, with why.
UNSUPPORTED_LMMSEVAL_MODULES: dict[str, str] = {
    "vllm_qwen25vl_tooluse": "upstream's two-phase tool-use variant (eval__qwen25vl_tooluse), which this suite "
                             "does not implement",
    "vllm_qwen3vl": "upstream's Qwen3-VL class for RFT models trained on Qwen3-VL, which the MedVision-V0 record "
                    "does not implement (evaluate such weights with --model qwen3_vl)",
}


def lmmseval_module_for(record: ModelRecord, value: str | None) -> str | None:
    """What ``--lmmseval_module`` selects for ``record``: None (the record's own model class, upstream's default key)
    when the flag is absent or names that default, so the answer signature and the results folder stay the same as
    without the flag; any other key is refused, since no other class is implemented here."""
    if value is None:
        return None
    known = record.lmmseval_modules
    if known and value == known[0]:
        return None
    if not known:
        raise UserError(f"--lmmseval_module {value}: {record.display_name} has no lmms-eval model class to choose; "
                        "drop the flag")
    why = UNSUPPORTED_LMMSEVAL_MODULES.get(value)
    reason = f" ({why})" if why else ""
    raise UserError(f"--lmmseval_module {value} is not available for {record.display_name}{reason}; known value: "
                    f"{', '.join(known)} (the default; the flag can be left out)")


def default_model_name(record: ModelRecord, weights: str | None, flags: dict[str, object]) -> str:
    """The results folder and status name when --model_name is not given: upstream's launchers' model_name for the
    record's default weights (or default API model code, also in OpenRouter's vendor/code form), else the weights'
    last path part or the API model code, so other weights never share a folder with the defaults."""
    if record.is_api:
        code = next((v for k, v in flags.items() if k.endswith("_model_code") and v), None)
        default = next((f.default for f in record.flags if f.dest.endswith("_model_code")), None)
        if record.default_model_name and code and str(code).split("/")[-1] == default:
            return record.default_model_name
        return str(code).replace("/", "_") if code else record.name
    if record.backend == "baseline" or not weights:
        return record.name
    if record.default_model_name and weights == record.default_weights:
        return record.default_model_name
    return weights.rstrip("/").split("/")[-1] or record.name


def launcher_args(record: ModelRecord) -> list[str]:
    """The runner flags a record's launchers add on their own (before the user's, which win): its launcher_flags and
    the launcher's --sample_limit (script/lib/launcher.sh, SAMPLE_LIMIT at its default)."""
    limit = record.launcher_sample_limit
    return [*record.launcher_flags, *(["--sample_limit", str(limit)] if limit else [])]
