"""Contract of the vLLM path against the real vllm package, on CPU, stopping before the device.

For every vLLM record of the registry, the runner's own configuration (the launcher's flags, then every engine and
sampling knob, LoRA included) is turned into the backend call runner.backends makes; that call then runs in the vLLM
contract environment (medvision_bm.envs.vllm_contract: vllm as the vLLM families' lock pins it) through
tests/models/vllm_contract_probe.py, whose docstring says exactly what runs for real and what is stood in for.
The server mode's command line (models/api/serve.py) goes through vLLM's own ``vllm serve`` parser. Deliberately
wrong names and values are sent the same way and must be refused, so these checks can fail.

``MEDVISION_VLLM_CONTRACT_PYTHON`` names an already built environment's interpreter (script/run_tests.sh builds it
first); without it the environment is built or reused here. ``MEDVISION_VLLM_CONTRACT=0`` skips these tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models import vllm_offline
from medvision_bm.models.registry import REGISTRY, TASK_FAMILIES, ModelRecord, launcher_args
from mvtest_support import REPO

VLLM_RECORDS = [r for r in REGISTRY.values() if r.backend == "vllm"]
PROBE = Path(__file__).with_name("vllm_contract_probe.py")
VISIBLE_GPUS = "0,1"
SERVE_PORT = 8001
LORA_RANK = 16


@pytest.fixture(scope="module")
def contract_python() -> Path:
    given = os.environ.get("MEDVISION_VLLM_CONTRACT_PYTHON")
    if given:
        return Path(given)
    if os.environ.get("MEDVISION_VLLM_CONTRACT") == "0":
        pytest.skip("MEDVISION_VLLM_CONTRACT=0: the vLLM contract tests are turned off")
    from medvision_bm.envs.vllm_contract import ensure_env

    try:
        return ensure_env(REPO)
    except UserError as exc:
        pytest.fail(f"cannot build the vLLM contract environment: {exc}")


def _knobs(rec: ModelRecord) -> list[str]:
    """Every engine and sampling flag the record takes, each at a value other than its default."""
    names = {f.name for f in rec.flags}
    flags = ["--seed", "7", "--dtype", "bfloat16", "--revision", "main", "--gpu_memory_utilization", "0.85",
             "--batch_size", "3", "--temperature", "0.7", "--top_p", "0.9", "--top_k", "20",
             "--stop_strings", "</answer>", "</s>", "--max_new_tokens", "64"]
    if "--max_model_len" in names:
        flags += ["--max_model_len", "16384"]
    if "--repetition_penalty" in names:
        flags += ["--repetition_penalty", "1.05"]
    if "--min_new_tokens" in names:
        flags += ["--min_new_tokens", "4"]
    if "--enable_thinking" in names:
        flags += ["--enable_thinking"]
    return flags


def _config(rec: ModelRecord, *flags: str):
    """A RunConfig as the runner resolves it from the launcher's flags and then ``flags``."""
    from medvision_bm.runner.args import build_parser
    from medvision_bm.runner.config import build_config

    ns = build_parser(rec, "t").parse_args(["--tasks_list_json_path", "x.json", *launcher_args(rec), *flags])
    return build_config(ns, rec, [])


def _backend_call(cfg) -> tuple[list[Any], dict[str, Any]]:
    """The arguments medvision_bm.runner.backends hands VLLMBackend for ``cfg``."""
    from medvision_bm.runner import backends

    calls: list[tuple[tuple, dict]] = []

    class Recorder:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            calls.append((args, kwargs))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backends, "VLLMBackend", Recorder)
        backends.build_backend(cfg, None)
    (args, kwargs), = calls
    return list(args), kwargs


def _gens(cfg) -> dict[str, dict[str, Any]]:
    return {f: {**dataclasses.asdict(cfg.gen_for_task(f)), "stop": list(cfg.gen_for_task(f).stop)}
            for f in TASK_FAMILIES}


@pytest.fixture(scope="module")
def contract(contract_python: Path, phantom_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Build every case here, run them all in one probe process, and return its report with the cases."""
    from medvision_bm.models.api.serve import replica_argv, spec_for

    work = tmp_path_factory.mktemp("vllm-contract")
    adapter = work / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": LORA_RANK, "lora_alpha": 32}))
    cases: dict[str, list[dict[str, Any]]] = {"backend": [], "serve": [], "sampling": []}
    configs: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MedVision_DATA_DIR", str(phantom_dir))
        mp.setattr("medvision_bm.runner.config.load_tasks_list", lambda path: {})
        mp.setenv("CUDA_VISIBLE_DEVICES", VISIBLE_GPUS)
        for rec in VLLM_RECORDS:
            for variant, flags in (("launcher", []), ("knobs", [*_knobs(rec), "--lora_path", str(adapter)])):
                cfg = _config(rec, *flags)
                args, kwargs = _backend_call(cfg)
                case_id = f"{rec.name}/{variant}"
                configs[case_id] = cfg
                cases["backend"].append({"id": case_id, "args": args, "kwargs": kwargs, "gens": _gens(cfg),
                                         "system_prompt": cfg.system_prompt})
            mp.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
            cfg = _config(rec, *_knobs(rec), "--serve", "--serve_gpus_per_replica", "2", "--results_dir", str(work))
            mp.setenv("CUDA_VISIBLE_DEVICES", VISIBLE_GPUS)
            configs[f"{rec.name}/serve"] = cfg
            cases["serve"].append({"id": rec.name, "argv": replica_argv(spec_for(cfg), 0, SERVE_PORT)})
    # deliberately wrong names, types and values, sent the same ways: each must be refused
    base = next(c for c in cases["backend"] if c["id"] == "qwen2_5_vl/launcher")
    for case_id, extra in (("wrong-name", {"gpu_memory_utilisation": 0.9}), ("wrong-type", {"max_model_len": "8k"}),
                           ("wrong-value", {"enable_lora": True, "max_lora_rank": 600})):
        cases["backend"].append({**base, "id": f"mutant/{case_id}",
                                 "kwargs": {**base["kwargs"], "engine_kwargs": extra}})
    cases["backend"].append({**base, "id": "mutant/image-part", "image_part": "image"})
    cases["sampling"] += [{"id": "wrong-name", "kwargs": {"max_new_tokens": 8}},
                          {"id": "wrong-value", "kwargs": {"max_tokens": 8, "top_p": 1.5}}]
    good = cases["serve"][0]["argv"]
    cases["serve"].append({"id": "mutant/wrong-flag", "argv": [*good, "--gpu-memory-utilisation", "0.9"]})
    cases_path, out_path = work / "cases.json", work / "report.json"
    cases_path.write_text(json.dumps(cases))
    # vLLM reads a hub id as a cached snapshot when offline mode is on: the probe runs with it off, the hub
    # unreachable (HF_ENDPOINT), since nothing before the device boundary may need it
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VIRTUAL_ENV")}
    env.update({"PYTHONPATH": str(REPO / "src"), "CUDA_VISIBLE_DEVICES": VISIBLE_GPUS, "VLLM_TARGET_DEVICE": "cpu",
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_ENDPOINT": "http://127.0.0.1:9",
                "HF_HOME": str(work / "hf")})
    res = subprocess.run([str(contract_python), str(PROBE), str(cases_path), str(out_path)], env=env, cwd=work,
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, f"the probe failed (exit {res.returncode}):\n{res.stderr[-6000:]}"
    return {"report": json.loads(out_path.read_text()), "configs": configs, "adapter": str(adapter)}


def _pin(name: str) -> str:
    text = (REPO / VLLM_RECORDS[0].env.requirements).read_text()
    return next(line.split("==")[1].split()[0] for line in text.splitlines() if line.startswith(f"{name}=="))


def test_the_probe_ran_the_locked_vllm(contract: dict[str, Any]) -> None:
    assert contract["report"]["vllm"] == _pin("vllm")
    assert set(contract["report"]["backend"]) >= {f"{r.name}/{v}" for r in VLLM_RECORDS for v in ("launcher", "knobs")}


@pytest.mark.parametrize("variant", ["launcher", "knobs"])
@pytest.mark.parametrize("rec", VLLM_RECORDS, ids=lambda r: r.name)
def test_engine_arguments_are_accepted_by_vllm(contract: dict[str, Any], rec: ModelRecord, variant: str) -> None:
    out = contract["report"]["backend"][f"{rec.name}/{variant}"]
    cfg = contract["configs"][f"{rec.name}/{variant}"]
    assert "error" not in out, out.get("error")
    assert out["engine_problems"] == []
    ea = out["engine_args"]
    assert ea["model"] == cfg.weights
    assert ea["tensor_parallel_size"] == len(VISIBLE_GPUS.split(","))
    assert ea["max_num_seqs"] == cfg.batch_size
    assert ea["gpu_memory_utilization"] == cfg.gpu_memory_utilization
    assert ea["dtype"] == cfg.dtype
    assert ea["limit_mm_per_prompt"] == {"image": 1}
    assert ea["seed"] == cfg.gen.seed
    assert ea["trust_remote_code"] is bool(rec.engine_kwargs.get("trust_remote_code"))
    # the record's own engine settings reach vLLM as they are (upstream vllm_minimax_m3.py @1e67af7 passes
    # block_size=128 and trust_remote_code=True for MiniMax-M3); processor_resize_hw is ours, never vLLM's
    for key, value in rec.engine_kwargs.items():
        if key != "processor_resize_hw":
            assert ea[key] == value, key
    assert "processor_resize_hw" not in ea
    max_len = cfg.model_flags.get("max_model_len") or rec.max_model_len
    assert ea.get("max_model_len") == max_len
    if variant == "knobs":
        assert ea["revision"] == "main" and ea["enable_lora"] is True and ea["max_lora_rank"] == LORA_RANK
    else:
        assert "enable_lora" not in ea and "revision" not in ea
    assert out["engine_info"]["vllm"] == _pin("vllm")


def _expected_sampling(gen) -> dict[str, Any]:
    """What SamplingParams must hold for ``gen``; knobs left out take vLLM's neutral values (top_p 1, top_k off,
    no penalty, no minimum), and sampling knobs are dropped when greedy, as sampling_kwargs documents."""
    temperature = float(gen.temperature or 0.0)
    sampling = temperature > 0
    return {"max_tokens": gen.max_new_tokens, "temperature": temperature,
            "top_p": gen.top_p if sampling and gen.top_p is not None else 1.0,
            "top_k": gen.top_k if sampling and gen.top_k is not None else None,
            "seed": gen.seed if sampling else None, "stop": list(gen.stop),
            "repetition_penalty": gen.repetition_penalty if gen.repetition_penalty is not None else 1.0,
            "min_tokens": gen.min_new_tokens or 0}


@pytest.mark.parametrize("variant", ["launcher", "knobs"])
@pytest.mark.parametrize("rec", VLLM_RECORDS, ids=lambda r: r.name)
def test_sampling_and_chat_requests_are_what_vllm_takes(contract: dict[str, Any], rec: ModelRecord,
                                                        variant: str) -> None:
    out = contract["report"]["backend"][f"{rec.name}/{variant}"]
    cfg = contract["configs"][f"{rec.name}/{variant}"]
    assert "error" not in out and "generate_error" not in out, out.get("error") or out.get("generate_error")
    assert out["sampling_problems"] == []
    # one LLM.chat call with the names and types its signature takes
    call, = out["chat_calls"]
    expected_call = {"messages": "list", "sampling_params": "list", "use_tqdm": "bool"}
    if cfg.model_flags.get("enable_thinking") is not None:
        expected_call["chat_template_kwargs"] = "dict"
    if variant == "knobs":
        expected_call["lora_request"] = "LoRARequest"
    assert call == expected_call
    # every request reached the engine with a real SamplingParams holding the run's settings
    assert len(out["requests"]) == len(TASK_FAMILIES)
    for family, request in zip(TASK_FAMILIES, out["requests"], strict=True):
        assert request["params_type"] == "SamplingParams"
        want = _expected_sampling(cfg.gen_for_task(family))
        got = dict(request["sampling"])
        if want["top_k"] is None:  # vLLM spells "top-k off" 0 or -1, depending on the version
            assert got.pop("top_k") in (0, -1)
            want.pop("top_k")
        assert got == want, family
        lora = request["lora"]
        if variant == "knobs":
            assert lora == {"type": "LoRARequest", "name": "medvision-lora", "id": 1, "path": contract["adapter"]}
        else:
            assert lora is None
    # each conversation, read by vLLM's own content-part parser: the system turn, then the image and the prompt
    thinking = cfg.model_flags.get("enable_thinking")
    for i, (family, rendered) in enumerate(zip(TASK_FAMILIES, out["rendered"], strict=True)):
        assert rendered["chat_template_kwargs"] == (None if thinking is None else {"enable_thinking": thinking})
        messages = rendered["messages"]
        if cfg.system_prompt:
            system, user = messages
            assert system["role"] == "system" and system["keys"] == ["content", "role"]
            assert system["parts"] == [{"type": "text", "known": True, "extra_fields": [], "text": cfg.system_prompt}]
        else:
            user, = messages
        assert user["role"] == "user" and user["keys"] == ["content", "role"]
        image, text = user["parts"]
        assert image == {"type": "image_pil", "known": True, "extra_fields": [],
                         "image": {"mode": "RGB", "size": [64 + 8 * i, 48]}}
        assert text == {"type": "text", "known": True, "extra_fields": [], "text": f"{family}: measure it."}
    # vLLM's RequestOutput objects mapped back: text and token counts, 'abort' a retryable failure
    results = out["results"]
    assert [r["key"] for r in results] == [f"{f}-0" for f in TASK_FAMILIES]
    for n, r in enumerate(results):
        assert r["output_tokens"] == n + 2 and r["input_tokens"] == n + 5
    assert [(r["ok"], r["finish_reason"]) for r in results] == [(True, "stop"), (True, "length"), (False, None)]
    assert results[0]["text"] == "<answer>0</answer>" and "'abort'" in results[2]["error"]


@pytest.mark.parametrize("rec", VLLM_RECORDS, ids=lambda r: r.name)
def test_server_command_line_parses_with_vllm_serve(contract: dict[str, Any], rec: ModelRecord) -> None:
    out = contract["report"]["serve"][rec.name]
    cfg = contract["configs"][f"{rec.name}/serve"]
    assert "error" not in out, out.get("error")
    assert out["engine_problems"] == []
    assert (out["host"], out["port"]) == ("127.0.0.1", SERVE_PORT)
    ea = out["engine_args"]
    assert ea["model"] == cfg.weights and ea["served_model_name"] == [cfg.weights]
    assert ea["tensor_parallel_size"] == 2  # --serve_gpus_per_replica
    assert (ea["gpu_memory_utilization"], ea["dtype"], ea["seed"], ea["revision"]) == (0.85, "bfloat16", 7, "main")
    assert ea["max_model_len"] == 16384
    # the server gets the same record engine settings as the offline engine
    offline = contract["report"]["backend"][f"{rec.name}/knobs"]["engine_args"]
    for key in ("model", "gpu_memory_utilization", "dtype", "seed", "revision", "trust_remote_code",
                "max_model_len", *(k for k in rec.engine_kwargs if k != "processor_resize_hw")):
        assert ea[key] == offline[key], key


def test_wrong_names_types_and_values_are_refused(contract: dict[str, Any]) -> None:
    backend, report = contract["report"]["backend"], contract["report"]
    assert "unexpected keyword argument 'gpu_memory_utilisation'" in backend["mutant/wrong-name"]["error"]
    assert any(p.startswith("max_model_len='8k'") for p in backend["mutant/wrong-type"]["engine_problems"])
    assert any(p.startswith("max_lora_rank=600") for p in backend["mutant/wrong-value"]["engine_problems"])
    assert any("LoRAConfig" in p for p in backend["mutant/wrong-value"]["engine_problems"])
    image = backend["mutant/image-part"]["rendered"][0]["messages"][0]["parts"][0]
    assert image["type"] == "image" and image["known"] is False
    assert "unexpected keyword argument 'max_new_tokens'" in report["sampling"]["wrong-name"]["error"].lower()
    assert "top_p" in report["sampling"]["wrong-value"]["error"]
    assert "unrecognized arguments: --gpu-memory-utilisation" in report["serve"]["mutant/wrong-flag"]["error"]


def test_lora_ranks_are_the_ones_vllm_sizes_buffers_for(contract: dict[str, Any]) -> None:
    """The ranks engine_kwargs rounds an adapter's r up to are exactly vLLM's MaxLoRARanks (an adapter above the
    largest is refused by engine_kwargs with a one-line error: tests/models/test_vllm_offline.py)."""
    assert list(vllm_offline.VLLM_LORA_RANKS) == contract["report"]["max_lora_ranks"]
