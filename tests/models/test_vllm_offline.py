"""vLLM backend: flag-to-engine and settings-to-sampling mapping, messages, results, and the import guard."""

from __future__ import annotations

import builtins
import importlib.util
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models import vllm_offline as vo
from medvision_bm.models.base import GenRequest, GenSettings

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAVE_VLLM, reason="vllm is installed here")
def test_missing_vllm_is_a_one_line_user_error() -> None:
    with pytest.raises(UserError, match=r"^vllm is not installed in this environment; ") as info:
        vo.VLLMBackend("Qwen/Qwen2.5-VL-7B-Instruct")
    assert "\n" not in str(info.value)


def test_import_guard_tells_missing_from_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if vllm were not installed
    with pytest.raises(UserError, match="vllm is not installed"):
        vo.import_vllm()

    real_import = builtins.__import__

    def import_with_missing_dependency(name, *args, **kwargs):
        if name == "vllm":
            raise ModuleNotFoundError("No module named 'xformers'", name="xformers")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "vllm")
    monkeypatch.setattr(builtins, "__import__", import_with_missing_dependency)
    with pytest.raises(UserError, match=r"installed but cannot be imported.*xformers"):
        vo.import_vllm()


@pytest.mark.parametrize(("visible", "expected"), [
    ("0,1,2", 3), ("3", 1), ("GPU-1a2b,GPU-3c4d", 2), ("0,-1,2", 1), (" 0 , 1 ", 2), ("", 0), ("-1", 0),
])
def test_visible_gpus_come_from_cuda_visible_devices(visible: str, expected: int) -> None:
    assert vo.visible_gpu_count({"CUDA_VISIBLE_DEVICES": visible}, lambda: 99) == expected


def test_all_gpus_when_cuda_visible_devices_is_unset() -> None:
    assert vo.visible_gpu_count({}, lambda: 4) == 4


def test_engine_kwargs_from_record_flags(tmp_path: Path) -> None:
    kw = vo.engine_kwargs("Qwen/Qwen2.5-VL-7B-Instruct", batch_size=8, gpu_memory_utilization=0.8,
                          dtype="bfloat16", max_model_len=16384, seed=3, environ={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert kw == {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "tensor_parallel_size": 2, "max_num_seqs": 8,
                  "gpu_memory_utilization": 0.8, "dtype": "bfloat16", "max_model_len": 16384,
                  "limit_mm_per_prompt": {"image": 1}, "seed": 3, "trust_remote_code": False}

    kw = vo.engine_kwargs("m", environ={}, device_count=lambda: 8, revision="abc123", tensor_parallel_size=2,
                          extra={"mm_processor_kwargs": {"max_pixels": 1003520}, "max_num_seqs": 2})
    assert kw["tensor_parallel_size"] == 2 and kw["revision"] == "abc123"
    assert kw["max_num_seqs"] == 2 and kw["mm_processor_kwargs"] == {"max_pixels": 1003520}  # extra wins
    assert "max_model_len" not in kw

    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 64, "lora_alpha": 16}))
    kw = vo.engine_kwargs("m", environ={"CUDA_VISIBLE_DEVICES": "0"}, lora_path=str(tmp_path))
    assert kw["enable_lora"] is True and kw["max_lora_rank"] == 64
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 4}))
    assert vo.engine_kwargs("m", environ={"CUDA_VISIBLE_DEVICES": "0"}, lora_path=str(tmp_path))["max_lora_rank"] == 8
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 1}))
    assert vo.engine_kwargs("m", environ={"CUDA_VISIBLE_DEVICES": "0"}, lora_path=str(tmp_path))["max_lora_rank"] == 1
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 600}))
    with pytest.raises(UserError, match=r"rank r=600 is above the largest vLLM supports \(512\)"):
        vo.engine_kwargs("m", environ={"CUDA_VISIBLE_DEVICES": "0"}, lora_path=str(tmp_path))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"environ": {"CUDA_VISIBLE_DEVICES": ""}}, "no GPU is visible"),
    ({"environ": {"CUDA_VISIBLE_DEVICES": "0"}, "gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"environ": {"CUDA_VISIBLE_DEVICES": "0"}, "batch_size": 0}, "batch size"),
    ({"environ": {"CUDA_VISIBLE_DEVICES": "0"}, "lora_path": "/no/such/adapter"}, "adapter_config.json"),
])
def test_engine_kwargs_refuse_bad_flags(kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        vo.engine_kwargs("m", **kwargs)


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "cannot read"), ('{"r": "sixteen"}', "positive integer"), ('{"r": 0}', "positive integer"),
])
def test_a_bad_adapter_config_is_a_user_error(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "adapter_config.json").write_text(content)
    with pytest.raises(UserError, match=message):
        vo.lora_rank(tmp_path)
    (tmp_path / "adapter_config.json").write_text("[]")
    assert vo.lora_rank(tmp_path) is None  # no rank given: vLLM's default applies


def test_sampling_kwargs() -> None:
    greedy = vo.sampling_kwargs(GenSettings(max_new_tokens=64, temperature=0.0, top_p=0.9, top_k=5, seed=1))
    assert greedy == {"max_tokens": 64, "temperature": 0.0}  # sampling knobs are meaningless when greedy
    assert vo.sampling_kwargs(GenSettings(temperature=None))["temperature"] == 0.0
    full = vo.sampling_kwargs(GenSettings(max_new_tokens=32, temperature=0.6, top_p=0.95, top_k=20, seed=7,
                                          stop=("</answer>", "\n\n"), repetition_penalty=1.05, min_new_tokens=4))
    assert full == {"max_tokens": 32, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "seed": 7,
                    "stop": ["</answer>", "\n\n"], "repetition_penalty": 1.05, "min_tokens": 4}


def test_chat_messages_carry_system_image_and_text() -> None:
    img = object()
    req = GenRequest("k", "Measure it.", None, GenSettings(), system_prompt="You are precise.", images=[img])
    assert vo.chat_messages(req) == [
        {"role": "system", "content": "You are precise."},
        {"role": "user", "content": [{"type": "image_pil", "image_pil": img}, {"type": "text", "text": "Measure it."}]},
    ]
    req.system_prompt = None
    assert [m["role"] for m in vo.chat_messages(req)] == ["user"]
    # the runner passes a loader instead of images (lmms_models): the images still reach the engine
    lazy = GenRequest("k", "Measure it.", None, GenSettings(), image_loader=lambda: [img])
    assert vo.chat_messages(lazy)[0]["content"][0] == {"type": "image_pil", "image_pil": img}


def _output(text: str, reason: str | None, n_prompt: int = 5, n_out: int = 3) -> SimpleNamespace:
    return SimpleNamespace(prompt_token_ids=list(range(n_prompt)),
                           outputs=[SimpleNamespace(text=text, token_ids=list(range(n_out)), finish_reason=reason)])


def test_result_from_output() -> None:
    r = vo.result_from_output("a", _output("1, 2", "length", 7, 4), 0.5)
    assert (r.text, r.finish_reason, r.usage.input_tokens, r.usage.output_tokens, r.latency_s) == ("1, 2", "length", 7, 4, 0.5)
    assert vo.result_from_output("b", _output("x", "stop"), 0.1).finish_reason == "stop"
    aborted = vo.result_from_output("c", _output("", "abort"), 0.1)
    assert not aborted.ok and aborted.error.kind == "backend" and aborted.error.retryable
    assert not vo.result_from_output("d", SimpleNamespace(prompt_token_ids=None, outputs=[]), 0.1).ok


class _FakeLLM:
    """Stands in for vllm.LLM (CUDA-only): records the engine kwargs and each chat call."""

    instances: ClassVar[list[_FakeLLM]] = []

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.calls: list[tuple[list, list, dict]] = []
        _FakeLLM.instances.append(self)

    def chat(self, conversations, params, **kwargs):
        self.calls.append((conversations, params, kwargs))
        if any("FAIL" in c[-1]["content"][-1]["text"] for c in conversations):
            raise RuntimeError("engine died")
        return [_output(f"answer {len(c)}", "stop") for c in conversations]


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("vllm")
    module.LLM = _FakeLLM
    module.SamplingParams = lambda **kw: kw
    lora = types.ModuleType("vllm.lora.request")
    lora.LoRARequest = lambda name, int_id, path: ("lora", name, int_id, path)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", types.ModuleType("vllm.lora"))
    monkeypatch.setitem(sys.modules, "vllm.lora.request", lora)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    _FakeLLM.instances.clear()
    return module


def test_backend_chunks_and_streams_results(fake_vllm: types.ModuleType) -> None:
    be = vo.VLLMBackend("some/model", batch_size=2, chat_template_kwargs={"enable_thinking": False})
    llm = _FakeLLM.instances[0]
    assert llm.kwargs["tensor_parallel_size"] == 2 and llm.kwargs["max_num_seqs"] == 2
    assert be.chunk_size == 8
    gen = GenSettings(max_new_tokens=16)
    requests = [GenRequest(f"k{i}", "FAIL" if i == 9 else f"q{i}", None, gen) for i in range(11)]
    seen: list[tuple[str, int]] = []
    be.generate(requests, lambda r: seen.append((r.key, len(llm.calls))))
    assert [k for k, _ in seen] == [r.key for r in requests]
    assert [n for _, n in seen] == [1] * 8 + [2] * 3  # each chunk reported before the next one starts
    conversations, params, kwargs = llm.calls[0]
    assert len(conversations) == 8 and params[0] == {"max_tokens": 16, "temperature": 0.0}
    assert kwargs == {"use_tqdm": False, "chat_template_kwargs": {"enable_thinking": False}}
    be.close()


def test_backend_failed_chunk_becomes_retryable_failures(fake_vllm: types.ModuleType) -> None:
    be = vo.VLLMBackend("m", batch_size=1, chunk_size=2)
    gen = GenSettings()
    results = []
    be.generate([GenRequest(k, p, None, gen) for k, p in [("a", "ok"), ("b", "FAIL"), ("c", "ok")]], results.append)
    assert [r.key for r in results] == ["a", "b", "c"]
    assert not results[0].ok and not results[1].ok and results[0].error.retryable  # a and b shared a chunk
    assert results[2].ok and results[2].text == "answer 1"


def test_backend_takes_the_runner_s_arguments(fake_vllm: types.ModuleType, tmp_path: Path) -> None:
    """The call medvision_bm.models.factory makes, record engine kwargs applied last."""
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 32}))
    be = vo.VLLMBackend("OpenGVLab/InternVL3-38B", batch_size=2, gpu_memory_utilization=0.95, dtype="bfloat16",
                   max_model_len=8192, lora_path=str(tmp_path), revision="r1",
                   engine_kwargs={"trust_remote_code": True, "enforce_eager": True}, seed=5)
    kw = _FakeLLM.instances[0].kwargs
    assert kw == {"model": "OpenGVLab/InternVL3-38B", "tensor_parallel_size": 2, "max_num_seqs": 2,
                  "gpu_memory_utilization": 0.95, "dtype": "bfloat16", "limit_mm_per_prompt": {"image": 1},
                  "seed": 5, "trust_remote_code": True, "revision": "r1", "max_model_len": 8192,
                  "enable_lora": True, "max_lora_rank": 32, "enforce_eager": True}
    be.generate([GenRequest("a", "q", None, GenSettings())], lambda r: None)
    assert _FakeLLM.instances[0].calls[0][2]["lora_request"] == ("lora", "medvision-lora", 1, str(tmp_path))
