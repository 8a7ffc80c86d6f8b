"""The roster as upstream MedVision launches it: each registry record's defaults against upstream's values (the table
below names the upstream file and commit of each row), and every launcher's generated command line (MV_DRY_RUN=1)
resolved through the real parser and RunConfig, per task family.

Sources (repository YongchengYAO/MedVision, at the commits named):
  CAT   skills/medvision/sub-skills/benchmark-evaluation/scripts/model_catalog.json @39dd6bf ("distilled from the
        repository's script/benchmark-{detect,TL,AD}/eval__*.sh launchers"); used where no launcher is cited
  a launcher path @commit where one was read; the HuatuoGPT-Vision decoding from the lmms-eval wrapper
  src/medvision_bm/medvision_lmms_eval/lmms_eval/models/huatuogpt_vision.py @09206a2 (HuatuoChatbot's own
  gen_kwargs: do_sample True, temperature 0.2, repetition_penalty 1.2) and the Claude thinking switch from
  .../models/claude.py @783dddb (thinking on: {"type": "adaptive"}; off: not sent).
Batch sizes of the API records are not compared: upstream sends one request at a time (batch_size 1), ours' value is
the number of requests in flight, which does not change an answer.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models.registry import REGISTRY, TASK_FAMILIES, get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config

REPO = Path(__file__).resolve().parents[2]
CAT = "skills/medvision/sub-skills/benchmark-evaluation/scripts/model_catalog.json@39dd6bf"
ANSWER = ("</answer>",)


def _tokens(default: int, **family: int) -> dict[str, int]:
    return {fam: family.get(fam, default) for fam in TASK_FAMILIES}


#: record -> upstream's launcher defaults. weights: --model_hf_id (HealthGPT: --model_choice; API: the model code);
#: name: --model_name; bs/gmu: --batch_size_per_gpu / --gpu_memory_utilization; tokens: max new tokens per task
#: family; T/p/k/stop: sampling (T 0.0 = greedy, upstream's lmms-eval default; None = not sent); limit:
#: --sample_limit; flags: other flags upstream's launchers pass, as (dest, value) after parsing.
UPSTREAM: dict[str, dict] = {
    "qwen2_5_vl": dict(src=CAT, weights="Qwen/Qwen2.5-VL-7B-Instruct", name="Qwen2.5-VL-7B-Instruct", bs=10,
                       gmu=0.9, tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(), limit=1000),
    # upstream serves 7B and 32B through one launcher stem (model-roster.md @39dd6bf) and has no 32B launcher: the
    # 7B launcher's settings; the name is the published results folder's
    "qwen2_5_vl_32b": dict(src="script/benchmark-AD/eval__Qwen-2.5-VL__AD.sh@473a4fd + "
                               "Paper-results-backup/AD/summary_judge_task__llm-parsed_gemma-4-31b.txt@755a7bb",
                           weights="Qwen/Qwen2.5-VL-32B-Instruct", name="Qwen2.5-VL-32B-Instruct", bs=10, gmu=0.9,
                           tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(), limit=1000),
    "qwen3_vl": dict(src="script/benchmark-TL/eval__Qwen-3-VL-32B-Thinking__TL.sh@473a4fd",
                     weights="Qwen/Qwen3-VL-32B-Thinking", name="Qwen3-VL-32B-Thinking", bs=2, gmu=0.95,
                     tokens=_tokens(4096), T=0.8, p=0.95, k=20, stop=ANSWER, limit=1000),
    "intern_vl3": dict(src=CAT, weights="OpenGVLab/InternVL3-38B", name="InternVL3-38B", bs=2, gmu=0.9,
                       tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(), limit=1000),
    "gemma3": dict(src="script/benchmark-TL/eval__Gemma-3-27B-it__TL.sh@473a4fd", weights="google/gemma-3-27b-it",
                   name="Gemma-3-27b-it", bs=4, gmu=0.9, tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(),
                   limit=1000),
    "gemma4": dict(src=CAT, weights="google/gemma-4-31B-it", name="gemma-4-31B-it", bs=10, gmu=0.95,
                   tokens=_tokens(4096), T=0.0, p=None, k=None, stop=ANSWER, limit=1000,
                   flags=(("enable_thinking", False),)),
    "llama3_2_vision": dict(src=CAT, weights="meta-llama/Llama-3.2-11B-Vision-Instruct",
                            name="Llama-3.2-11B-Vision-Instruct", bs=4, gmu=0.9, tokens=_tokens(4096, detect=16000),
                            T=0.0, p=None, k=None, stop=(), limit=1000),
    "llava_onevision": dict(src="script/benchmark-TL/eval__LLaVA-OneVision__TL.sh@473a4fd",
                            weights="llava-hf/llava-onevision-qwen2-72b-ov-hf", name="LLaVA-OneVision", bs=1,
                            gmu=0.9, tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(), limit=1000),
    "glm4v": dict(src=CAT, weights="zai-org/GLM-4.6V", name="GLM-4.6V", bs=1, gmu=0.95,
                  tokens=_tokens(4096, AD=16000), T=0.8, p=0.6, k=2, stop=ANSWER, limit=1000,
                  flags=(("repetition_penalty", None),)),  # 1.1 is the record's gen default, not a flag value
    "glm4v_flash": dict(src="script/benchmark-AD/eval__GLM-4.6V-Flash__AD.sh@5f35017 (+ CAT for the A/D budget)",
                        weights="zai-org/GLM-4.6V-Flash", name="GLM-4.6V-Flash", bs=2, gmu=0.95,
                        tokens=_tokens(4096, AD=16000), T=0.8, p=0.6, k=2, stop=ANSWER, limit=1000,
                        flags=(("repetition_penalty", None),)),
    "minimax_m3": dict(src="script/benchmark-TL/eval__MiniMax-M3__TL.sh@91a0cc8",
                       weights="MiniMaxAI/MiniMax-M3-MXFP8", name="MiniMax-M3", bs=1, gmu=0.9,
                       tokens=_tokens(16384), T=1.0, p=0.95, k=40, stop=ANSWER, limit=1000),
    "minimax_m3_int4": dict(src="script/benchmark-TL/eval__MiniMax-M3-INT4__TL.sh@1e67af7",
                            weights="cyankiwi/MiniMax-M3-AWQ-INT4", name="MiniMax-M3-INT4", bs=1, gmu=0.9,
                            tokens=_tokens(16384), T=1.0, p=0.95, k=40, stop=ANSWER, limit=1000),
    "medvision-model-rft": dict(src=CAT, weights="YongchengYAO/MedVision-V0-7B", name="MedVision-V0-7B", bs=10,
                                gmu=0.9, tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(), limit=1000,
                                reshape=(512, 512), flags=(("use_system_prompt", True),)),
    "medgemma": dict(src=CAT, weights="google/medgemma-4b-it", name="MedGemma-4b-it", bs=10, gmu=None,
                     tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(), limit=1000),
    "medgemma_27b": dict(src="script/benchmark-TL/eval__MedGemma-27B__TL.sh@83e3187 (+ CAT for AD, detect)",
                         weights="google/medgemma-27b-it", name="MedGemma-27b-it", bs=2, gmu=None,
                         tokens=_tokens(4096, TL=16000, AD=16000), T=0.0, p=None, k=None, stop=(), limit=1000),
    "lingshu": dict(src="script/benchmark-TL/eval__Lingshu__TL.sh@28f6c67", weights="lingshu-medical-mllm/Lingshu-32B",
                    name="Lingshu-32b", bs=2, gmu=None, tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(),
                    limit=1000),
    "llava_med": dict(src=CAT, weights="microsoft/llava-med-v1.5-mistral-7b", name="LLaVA-Med", bs=20, gmu=None,
                      tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(), limit=1000),
    "meddr": dict(src=CAT, weights="Sunanhe/MedDr_0401", name="MedDr", bs=2, gmu=None, tokens=_tokens(4096), T=0.0,
                  p=None, k=None, stop=(), limit=1000),
    "huatuogpt_vision": dict(src="script/benchmark-TL/eval__HuatuoGPT-Vision-34B__TL.sh@09206a2",
                             weights="FreedomIntelligence/HuatuoGPT-Vision-34B", name="HuatuoGPT-Vision-34B", bs=2,
                             gmu=None, tokens=_tokens(4096), T=0.2, p=None, k=None, stop=ANSWER, limit=1000),
    "healthgpt": dict(src=CAT, weights="HealthGPT-L14", name="HealthGPT-L14", bs=10, gmu=None, tokens=_tokens(4096),
                      T=0.0, p=None, k=None, stop=(), limit=1000),
    # upstream has no HealthGPT-XL32 launcher; batch size 4 is its catalogue's stated guess
    "healthgpt_xl32": dict(src=CAT, weights="HealthGPT-XL32", name="HealthGPT-XL32", bs=4, gmu=None,
                           tokens=_tokens(4096), T=0.0, p=None, k=None, stop=(), limit=1000),
    "openai": dict(src="script/benchmark-TL/eval__GPT5.5__TL.sh@473a4fd", weights="gpt-5.5", name="GPT-5.5",
                   tokens=_tokens(4096), T=None, p=None, k=None, stop=(), limit=100,
                   flags=(("reasoning_effort", "low"),), reshape_families=("TL",)),
    "openai_pro": dict(src="script/benchmark-TL/eval__GPT5.5-Pro__TL.sh@473a4fd (+ __AD.sh@83e3187, "
                           "__detect.sh@473a4fd)", weights="gpt-5.5-pro", name="GPT-5.5-Pro",
                       tokens=_tokens(4096), T=None, p=None, k=None, stop=(), limit=100,
                       flags=(("reasoning_effort", "low"),), reshape_families=("TL", "AD")),
    "claude": dict(src="script/benchmark-TL/eval__Claude-Fable5__TL.sh@473a4fd", weights="claude-fable-5",
                   name="Claude-Fable-5", tokens=_tokens(16000), T=None, p=None, k=None, stop=(), limit=100,
                   reshape=(512, 512), flags=(("thinking", True), ("thinking_budget", None))),
    "gemini": dict(src=CAT, weights="gemini-3.1-pro-preview", name="Gemini-3.1-Pro", tokens=_tokens(16000), T=None,
                   p=None, k=None, stop=(), limit=100, reshape=(512, 512), flags=(("media_resolution", "high"),)),
    "kimi": dict(src=CAT, weights="kimi-k2.6", name="Kimi-K2.6", tokens=_tokens(16000), T=None, p=None, k=None,
                 stop=(), limit=100, reshape=(512, 512)),
}
#: Records upstream does not have (ours only): their launchers pass no --sample_limit.
OURS_ONLY = {"oracle", "mean", "random-box", "hf", "openai-compatible", "minimax_m3_api"}


def test_the_table_covers_every_record():
    assert set(UPSTREAM) | OURS_ONLY == set(REGISTRY)
    assert not set(UPSTREAM) & OURS_ONLY


def _code(record) -> str | None:
    return next((f.default for f in record.flags if f.dest.endswith("_model_code")), None)


@pytest.mark.parametrize("name", sorted(UPSTREAM), ids=str)
def test_record_defaults_equal_upstreams(name):
    up, rec = UPSTREAM[name], REGISTRY[name]
    weights = _code(rec) if rec.is_api else next(
        (f.default for f in rec.flags if f.dest == "model_choice"), rec.default_weights)
    assert weights == up["weights"], up["src"]
    assert {fam: rec.max_new_tokens_for(fam) for fam in TASK_FAMILIES} == up["tokens"], up["src"]
    assert (rec.gen.temperature, rec.gen.top_p, rec.gen.top_k, rec.gen.stop) == (up["T"], up["p"], up["k"],
                                                                                  up["stop"]), up["src"]
    assert rec.launcher_sample_limit == up["limit"], up["src"]
    if not rec.is_api:
        assert (rec.batch_size, rec.gpu_memory_utilization) == (up["bs"], up["gmu"]), up["src"]
    assert rec.reshape_hw == up.get("reshape"), up["src"]


# ------------------------------------------------------------------------------------------- launchers, dry run
LAUNCHERS = sorted((rec.name, fam) for rec in REGISTRY.values() for fam in TASK_FAMILIES)


def _dry_run(name: str, family: str, **env: str) -> list[str]:
    script = REPO / "script" / f"benchmark-{family}" / f"{REGISTRY[name].launcher}.sh"
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "MV_DRY_RUN": "1", **env})
    assert res.returncode == 0, (script, res.stderr[-2000:])
    return shlex.split(res.stdout.strip())


@pytest.fixture(scope="module")
def command_lines() -> dict[tuple[str, str], list[str]]:
    """Every launcher's dry-run command line (run four at a time: each one resolves its model in Python)."""
    with ThreadPoolExecutor(4) as pool:
        lines = pool.map(lambda key: _dry_run(*key), LAUNCHERS)
        return dict(zip(LAUNCHERS, lines, strict=True))


def _config(argv: list[str], name: str, phantom_dir: Path, tmp_path: Path):
    """The RunConfig an entry point builds from a launcher's argv (data, results and status moved to tmp/phantom)."""
    assert argv[1] == "-m", argv
    rest = argv[3:] if argv[2] != "medvision_bm.cli" else argv[6:]
    module = argv[2]
    assert module in (f"medvision_bm.benchmark.eval__{name}", "medvision_bm.cli"), module
    record = get_record(name)
    rest += ["--data_dir", str(phantom_dir), "--results_dir", str(tmp_path / "res"),
             "--task_status_json_path", str(tmp_path / "status.json")]
    ns = build_parser(record, "t").parse_args(rest)
    return build_config(ns, record, rest), rest


@pytest.mark.parametrize("name,family", LAUNCHERS, ids=lambda v: str(v))
def test_launcher_command_line_carries_upstreams_defaults(command_lines, name, family, phantom_dir, tmp_path,
                                                          clean_env):
    argv = command_lines[(name, family)]
    if name in OURS_ONLY:  # baselines and generic records: every sample; the MiniMax API route: an API model's 100
        limit = {"minimax_m3_api": "100"}.get(name)
        assert (argv[argv.index("--sample_limit") + 1] if "--sample_limit" in argv else None) == limit
        return
    cfg, _ = _config(argv, name, phantom_dir, tmp_path)
    up = UPSTREAM[name]
    assert cfg.sample_limit == up["limit"]
    assert cfg.model_name == up["name"]
    if cfg.record.is_api:
        assert cfg.model_flags[next(k for k in cfg.model_flags if k.endswith("_model_code"))] == up["weights"]
    else:
        assert cfg.weights == up["weights"]
        assert (cfg.batch_size, cfg.gpu_memory_utilization) == (up["bs"], up["gmu"])
    gen = cfg.gen_for_task(family)
    assert gen.max_new_tokens == up["tokens"][family], (up["src"], family)
    assert (gen.temperature, gen.top_p, gen.top_k, gen.stop) == (up["T"], up["p"], up["k"], up["stop"])
    expected_reshape = up.get("reshape") or ((512, 512) if family in up.get("reshape_families", ()) else None)
    assert cfg.reshape_hw == expected_reshape
    for dest, value in up.get("flags", ()):
        assert cfg.model_flags[dest] == value, dest
    if name == "medvision-model-rft":
        assert cfg.system_prompt and cfg.system_prompt.startswith("A conversation between a User and an Assistant")
    assert cfg.lmmseval_module is None  # the record's own model class, as without the flag


def test_a_later_flag_and_sample_limit_all_override_the_launchers_limit(phantom_dir, tmp_path, clean_env):
    argv = [*_dry_run("gemma3", "AD"), "--sample_limit", "7"]
    assert _config(argv, "gemma3", phantom_dir, tmp_path)[0].sample_limit == 7
    argv = _dry_run("gemma3", "AD", SAMPLE_LIMIT="all")
    assert "--sample_limit" not in argv and _config(argv, "gemma3", phantom_dir, tmp_path)[0].sample_limit is None
    argv = _dry_run("claude", "TL", SAMPLE_LIMIT="25")
    assert _config(argv, "claude", phantom_dir, tmp_path)[0].sample_limit == 25


def test_a_bad_sample_limit_is_one_line_and_exit_2():
    script = REPO / "script" / "benchmark-TL" / "gemma3.sh"
    res = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MV_DRY_RUN": "1", "SAMPLE_LIMIT": "ten"})
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == ["gemma3.sh: error: SAMPLE_LIMIT=ten is not a positive integer; use a "
                                               "number of samples per task or all"]


# ------------------------------------------------------------------------------------------- flags
def _cfg(name: str, phantom_dir: Path, tmp_path: Path, *extra: str):
    tasks = REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json"
    argv = ["--tasks_list_json_path", str(tasks), *extra]
    return _config(["py", "-m", f"medvision_bm.benchmark.eval__{name}", *argv], name, phantom_dir, tmp_path)[0]


def test_family_budget_yields_to_an_explicit_max_new_tokens(phantom_dir, tmp_path, clean_env):
    cfg = _cfg("glm4v", phantom_dir, tmp_path)
    assert [cfg.gen_for_task(f).max_new_tokens for f in TASK_FAMILIES] == [4096, 4096, 16000]
    cfg = _cfg("glm4v", phantom_dir, tmp_path, "--max_new_tokens", "512")
    assert [cfg.gen_for_task(f).max_new_tokens for f in TASK_FAMILIES] == [512, 512, 512]


def test_stop_strings_take_several_values_as_upstream(phantom_dir, tmp_path, clean_env):
    cfg = _cfg("gemma3", phantom_dir, tmp_path, "--stop_strings", "</answer>", "</s>")
    assert cfg.gen.stop == ("</answer>", "</s>")
    cfg = _cfg("qwen3_vl", phantom_dir, tmp_path, "--stop_strings", "</answer>")
    default = _cfg("qwen3_vl", phantom_dir, tmp_path)
    assert cfg.gen == default.gen  # upstream's launcher value is the record's default: the same answers
    with pytest.raises(UserError, match=r"--stop_strings '</answer>,</s>' is ambiguous.*'</answer>' '</s>'"):
        _cfg("gemma3", phantom_dir, tmp_path, "--stop_strings", "</answer>,</s>")


def test_lmmseval_module_selects_upstreams_class_or_is_refused(phantom_dir, tmp_path, clean_env):
    plain = _cfg("qwen3_vl", phantom_dir, tmp_path)
    named = _cfg("qwen3_vl", phantom_dir, tmp_path, "--lmmseval_module", "vllm_qwen3vl")  # as upstream's launcher
    assert named.signature_model() == plain.signature_model()  # never a new results folder
    with pytest.raises(UserError, match=r"vllm_qwen25vl_tooluse is not available for Qwen2.5-VL \(upstream's "
                                        r"two-phase tool-use variant.*known value: vllm_qwen25vl"):
        _cfg("qwen2_5_vl", phantom_dir, tmp_path, "--lmmseval_module", "vllm_qwen25vl_tooluse")
    with pytest.raises(UserError, match="known value: vllm_gemma3"):
        _cfg("gemma3", phantom_dir, tmp_path, "--lmmseval_module", "vllm_gemma4")
    with pytest.raises(UserError, match="has no lmms-eval model class"):
        _cfg("claude", phantom_dir, tmp_path, "--lmmseval_module", "claude")


def test_other_weights_get_their_own_folder_name(phantom_dir, tmp_path, clean_env):
    assert _cfg("gemma3", phantom_dir, tmp_path, "--model_hf_id", "google/gemma-3-4b-it").model_name == "gemma-3-4b-it"
    assert _cfg("claude", phantom_dir, tmp_path, "--anthropic_model_code", "claude-opus-4-7").model_name == \
        "claude-opus-4-7"
    openrouter = _cfg("claude", phantom_dir, tmp_path, "--api_provider", "openrouter", "--anthropic_model_code",
                      "anthropic/claude-fable-5")
    assert openrouter.model_name == "Claude-Fable-5"  # upstream's launcher: the OpenRouter code, the same name
    assert _cfg("healthgpt", phantom_dir, tmp_path, "--model_choice", "HealthGPT-XL32").model_name == "HealthGPT-XL32"


def test_claude_sends_adaptive_thinking_and_a_budget_only_when_given(phantom_dir, tmp_path, clean_env):
    from medvision_bm.models.api.anthropic_messages import messages_kwargs
    from medvision_bm.models.base import GenRequest
    from medvision_bm.runner.backends import api_options

    def thinking(*extra: str):
        opts = api_options(_cfg("claude", phantom_dir, tmp_path, *extra))
        request = GenRequest(key="k", prompt="q", rundoc=None, gen=opts.gen)  # type: ignore[arg-type]
        return messages_kwargs("claude-fable-5", request, [], opts.thinking, opts.thinking_budget).get(
            "thinking")

    assert thinking() == {"type": "adaptive"}
    assert thinking("--thinking_budget", "2048") == {"type": "enabled", "budget_tokens": 2048}
    assert thinking("--no-thinking") is None


def test_minimax_m3_engine_as_upstreams_wrapper():
    # upstream vllm_minimax_m3.py @1e67af7: LLM(..., block_size=128, trust_remote_code=True) for every checkpoint
    for name in ("minimax_m3", "minimax_m3_int4"):
        rec = REGISTRY[name]
        assert rec.backend == "vllm" and rec.lmmseval_modules == ("vllm_minimax_m3",)
        assert rec.engine_kwargs == {"block_size": 128, "trust_remote_code": True}
    assert REGISTRY["minimax_m3_api"].backend == "minimax"  # the API route, kept as its own record


def test_flags_added_later_enter_the_signature_only_when_given(phantom_dir, tmp_path, clean_env):
    # Gemini's answer flags before --thinkingBudget existed: a run without it keeps its stores
    assert set(_cfg("gemini", phantom_dir, tmp_path).answer_flags()) == {
        "google_model_code", "api_provider", "thinking_level", "media_resolution", "use_tool", "json_output",
        "image_format"}
    given = _cfg("gemini", phantom_dir, tmp_path, "--google_model_code", "gemini-2.5-flash", "--thinkingBudget", "0")
    assert given.answer_flags()["thinkingBudget"] == 0
    assert "cpu_offload_gb" not in _cfg("minimax_m3", phantom_dir, tmp_path).answer_flags()
    assert _cfg("minimax_m3", phantom_dir, tmp_path, "--cpu_offload_gb", "120").answer_flags()["cpu_offload_gb"] == 120


def test_huatuogpt_do_sample_false_decodes_greedily_as_upstream(phantom_dir, tmp_path, clean_env):
    # upstream eval__huatuogpt_vision.py @09206a2: --do_sample {true,false}; unset keeps HuatuoChatbot's sampling
    # (temperature 0.2), false decodes greedily
    from medvision_bm.models.third_party import upstream_generate_kwargs

    assert _cfg("huatuogpt_vision", phantom_dir, tmp_path).gen.temperature == 0.2
    assert _cfg("huatuogpt_vision", phantom_dir, tmp_path, "--do_sample", "true").gen.temperature == 0.2
    greedy = _cfg("huatuogpt_vision", phantom_dir, tmp_path, "--do_sample", "false")
    assert greedy.gen.temperature == 0.0 and upstream_generate_kwargs(greedy.gen)["do_sample"] is False
    assert greedy.answer_flags()["do_sample"] == "false"
    with pytest.raises(UserError, match=r"--do_sample false decodes greedily but --temperature 0\.5"):
        _cfg("huatuogpt_vision", phantom_dir, tmp_path, "--do_sample", "false", "--temperature", "0.5")
    with pytest.raises(UserError, match="--do_sample true needs a temperature above 0"):
        _cfg("huatuogpt_vision", phantom_dir, tmp_path, "--do_sample", "true", "--temperature", "0")


def test_minimax_m3_engine_flags_as_upstreams_entry_point(phantom_dir, tmp_path, clean_env):
    # upstream eval__minimax_m3.py @1e67af7: --cpu_offload_gb (vLLM cpu_offload_gb) and --vllm_version
    from medvision_bm.models.vllm_offline import check_vllm_version
    from medvision_bm.runner.backends import _engine_kwargs

    for name in ("minimax_m3", "minimax_m3_int4"):
        assert "cpu_offload_gb" not in _engine_kwargs(_cfg(name, phantom_dir, tmp_path))
        assert _engine_kwargs(_cfg(name, phantom_dir, tmp_path, "--cpu_offload_gb", "120"))["cpu_offload_gb"] == 120
    with pytest.raises(UserError, match="--cpu_offload_gb -1"):
        _cfg("minimax_m3", phantom_dir, tmp_path, "--cpu_offload_gb", "-1")
    check_vllm_version(None)  # unset: whatever the environment holds
    check_vllm_version("0.33.0", installed="0.33.0")
    with pytest.raises(UserError, match=r"--vllm_version 0\.11\.0: this environment holds vLLM 0\.33\.0"):
        check_vllm_version("0.11.0", installed="0.33.0")
    with pytest.raises(UserError, match="vllm is not installed"):
        check_vllm_version("0.11.0")  # the test environment has no vLLM (CUDA wheels only)
