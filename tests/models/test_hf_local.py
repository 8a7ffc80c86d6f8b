"""TransformersBackend on CPU with the tiny VLMs: order, streaming, determinism, batching, settings, errors."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models.base import GenRequest, GenSettings
from medvision_bm.models.hf_local import TransformersBackend, build_messages, cut_at_stop, generation_kwargs


def test_one_result_per_request_in_order_streamed_per_batch(backend, make_requests) -> None:
    backend.batch_size = 3
    requests = make_requests(5)
    events: list[str] = []
    original = backend.model.generate

    def traced_generate(*args, **kwargs):
        events.append("generate")
        return original(*args, **kwargs)

    backend.model.generate = traced_generate
    try:
        results = []
        backend.generate(requests, lambda r: (events.append(r.key), results.append(r)))
    finally:
        del backend.model.generate
    assert [r.key for r in results] == [r.key for r in requests]
    # each batch's results are reported before the next batch starts
    assert events == ["generate", "k0", "k1", "k2", "generate", "k3", "k4"]
    for r in results:
        assert r.ok and isinstance(r.text, str) and r.error is None
        assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0 and r.latency_s > 0


def test_greedy_is_deterministic_and_batch_size_does_not_change_answers(backend, make_requests, collect) -> None:
    requests = make_requests(5, GenSettings(max_new_tokens=12))
    backend.batch_size = 1
    one = collect(backend, requests)
    again = collect(backend, requests)
    backend.batch_size = 3
    three = collect(backend, requests)
    assert [r.text for r in one] == [r.text for r in again]
    assert [r.text for r in one] == [r.text for r in three]
    assert [r.usage.input_tokens for r in one] == [r.usage.input_tokens for r in three]  # padding not counted
    assert len({r.text for r in one}) > 1  # different inputs, different answers: the inputs reach the model


def test_images_from_a_loader_reach_the_model(backend, make_requests, collect) -> None:
    """The runner (lmms_models) passes an image_loader instead of images; the answer must be the same."""
    eager = make_requests(2)
    lazy = [dataclasses.replace(r, images=[], image_loader=lambda imgs=r.images: list(imgs)) for r in eager]
    want, got = collect(backend, eager), collect(backend, lazy)
    assert [r.usage.input_tokens for r in got] == [r.usage.input_tokens for r in want]
    assert [r.text for r in got] == [r.text for r in want]
    text_only = collect(backend, [dataclasses.replace(r, images=[]) for r in eager])
    assert [r.usage.input_tokens for r in text_only] != [r.usage.input_tokens for r in want]  # the image counts


def test_length_finish_and_token_counts(backend, make_requests, collect) -> None:
    results = collect(backend, make_requests(3, GenSettings(max_new_tokens=3)))
    for r in results:
        assert r.finish_reason == "length" and r.usage.output_tokens == 3
    # the prompt (and, for Qwen, the image) sets the input count: longer prompts, more tokens
    assert results[0].usage.input_tokens < results[1].usage.input_tokens


def test_stop_string_cuts_the_text_and_ends_early(backend, make_requests, collect) -> None:
    free = collect(backend, make_requests(1, GenSettings(max_new_tokens=16)))[0]
    assert free.finish_reason == "length"
    stop = free.text[len(free.text) // 2: len(free.text) // 2 + 2]
    cut = collect(backend, make_requests(1, GenSettings(max_new_tokens=16, stop=(stop,))))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.find(stop)]
    assert cut.usage.output_tokens < 16


def test_sampling_is_seeded(backend, make_requests, collect) -> None:
    def run(seed: int) -> list[str]:
        gen = GenSettings(max_new_tokens=10, temperature=1.0, top_p=0.95, top_k=100, seed=seed)
        return [r.text for r in collect(backend, make_requests(3, gen))]

    backend.batch_size = 3
    assert run(1) == run(1)
    assert run(1) != run(2)
    greedy = [r.text for r in collect(backend, make_requests(3, GenSettings(max_new_tokens=10)))]
    assert run(1) != greedy


def test_system_prompt_reaches_the_template(backend, make_requests, collect) -> None:
    plain = collect(backend, make_requests(1))[0]
    with_system = collect(backend, make_requests(1, system_prompt="You are a radiologist."))[0]
    assert with_system.usage.input_tokens > plain.usage.input_tokens


def test_qwen_input_tokens_follow_the_image_size(_backends, make_requests, make_image, collect) -> None:
    """Dynamic resolution: a larger image becomes more image tokens (merged 28x28 blocks)."""
    backend = _backends["qwen2_5_vl"]
    small, large = make_requests(2, prefix="s")
    large = dataclasses.replace(small, key="large", images=[make_image(224, 224)])
    small = dataclasses.replace(small, images=[make_image(56, 56)])
    a, b = collect(backend, [small, large])
    assert b.usage.input_tokens - a.usage.input_tokens == (224 // 28) ** 2 - (56 // 28) ** 2


def test_a_failing_request_fails_alone(_backends, make_requests, make_image, collect) -> None:
    backend = _backends["qwen2_5_vl"]
    backend.batch_size = 3
    try:
        requests = make_requests(3)
        # an aspect ratio over 200 is refused by the Qwen processor
        requests[1] = dataclasses.replace(requests[1], images=[make_image(2, 500)])
        results = collect(backend, requests)
    finally:
        backend.batch_size = 1
    assert [r.key for r in results] == ["k0", "k1", "k2"]
    assert results[0].ok and results[2].ok
    assert not results[1].ok and results[1].error.kind == "backend" and results[1].error.retryable
    alone = collect(backend, [requests[0], requests[2]])
    assert [r.text for r in alone] == [results[0].text, results[2].text]


def test_bfloat16_on_cpu(tiny_llava_dir: Path, make_requests, collect) -> None:
    import torch

    be = TransformersBackend(str(tiny_llava_dir), dtype="bfloat16", batch_size=2)
    assert be.model.dtype == torch.bfloat16
    results = collect(be, make_requests(2, GenSettings(max_new_tokens=2)))
    assert [r.usage.output_tokens for r in results] == [2, 2]


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_lora_adapter_changes_answers(tiny_llava_dir: Path, tmp_path: Path, make_requests, collect) -> None:
    pytest.importorskip("peft")
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(tiny_llava_dir)
    torch.manual_seed(0)
    cfg = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, cfg).save_pretrained(tmp_path / "adapter")

    requests = make_requests(2, GenSettings(max_new_tokens=8))
    plain = collect(TransformersBackend(str(tiny_llava_dir)), requests)
    tuned = collect(TransformersBackend(str(tiny_llava_dir), lora_path=str(tmp_path / "adapter")), requests)
    assert [r.text for r in plain] != [r.text for r in tuned]
    assert all(r.ok for r in tuned)


def test_lora_needs_peft_and_a_folder(tiny_llava_dir: Path, tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(UserError, match="is not a folder"):
        TransformersBackend(str(tiny_llava_dir), lora_path=str(tmp_path / "missing"))
    monkeypatch.setitem(sys.modules, "peft", None)  # as if peft were not installed
    with pytest.raises(UserError, match="needs the peft package"):
        TransformersBackend(str(tiny_llava_dir), lora_path=str(tmp_path))


@pytest.mark.parametrize(("source", "message"), [
    ("./no/such/model", "does not exist"),
    ("medvision-test/not-a-real-model", "HF_HUB_OFFLINE"),
])
def test_unloadable_models_are_user_errors(source: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        TransformersBackend(source)


def test_folder_without_model_files_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot load the processor"):
        TransformersBackend(str(tmp_path))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dtype": "float8"}, "--dtype"),
    ({"device": "tpu"}, "--device"),
    ({"batch_size": 0}, "batch size"),
])
def test_bad_options_are_user_errors(tiny_llava_dir: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        TransformersBackend(str(tiny_llava_dir), **kwargs)


def test_cuda_without_a_gpu_is_a_user_error(tiny_llava_dir: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(UserError, match="no CUDA device"):
        TransformersBackend(str(tiny_llava_dir), device="cuda")


def test_generation_kwargs_state_every_knob() -> None:
    greedy = generation_kwargs(GenSettings(max_new_tokens=5, temperature=0.0, top_p=0.5, top_k=3))
    assert greedy["do_sample"] is False
    assert greedy["temperature"] is None and greedy["top_p"] is None and greedy["top_k"] is None
    assert greedy["repetition_penalty"] is None and greedy["min_new_tokens"] is None
    sampled = generation_kwargs(GenSettings(max_new_tokens=5, temperature=0.7, top_p=0.9, top_k=20,
                                            repetition_penalty=1.05, min_new_tokens=2))
    assert sampled == {**sampled, "do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 20,
                       "repetition_penalty": 1.05, "min_new_tokens": 2,
                       "max_new_tokens": 5}
    assert generation_kwargs(GenSettings(temperature=None))["do_sample"] is False


def test_messages_and_stop_cutting() -> None:
    req = GenRequest("k", "How long?", None, GenSettings(), system_prompt="Be exact.", images=["IMG"])
    msgs = build_messages(req)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[1]["content"] == [{"type": "image"}, {"type": "text", "text": "How long?"}]
    assert build_messages(dataclasses.replace(req, system_prompt=None))[0]["role"] == "user"
    assert cut_at_stop("a</answer>b<x>", ["<x>", "</answer>"]) == ("a", True)
    assert cut_at_stop("abc", ["", "z"]) == ("abc", False)


def test_template_with_its_own_bos_gets_no_second_one(tiny_llava_dir: Path, tmp_path: Path, make_requests,
                                                      collect) -> None:
    """Gemma-style templates write BOS themselves; the tokenizer must then not add another."""
    import shutil

    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_llava_dir)
    assert processor.tokenizer("x")["input_ids"][0] == processor.tokenizer.bos_token_id  # adds BOS itself
    own = tmp_path / "own_bos"
    shutil.copytree(tiny_llava_dir, own)
    template = (own / "chat_template.jinja").read_text()
    (own / "chat_template.jinja").write_text("{{ bos_token }}" + template)

    requests = make_requests(2)
    plain = collect(TransformersBackend(str(tiny_llava_dir)), requests)
    with_bos = collect(TransformersBackend(str(own)), requests)
    assert [r.usage.input_tokens for r in with_bos] == [r.usage.input_tokens for r in plain]
    assert [r.text for r in with_bos] == [r.text for r in plain]


def test_checkpoint_generation_config_never_changes_answers(backend, make_requests, collect) -> None:
    """None in GenSettings means off, whatever the checkpoint's generation_config.json says."""
    gen = GenSettings(max_new_tokens=12)
    baseline = [r.text for r in collect(backend, make_requests(3, gen))]
    cfg = backend.model.generation_config
    saved = (cfg.repetition_penalty, cfg.do_sample, cfg.top_k, cfg.no_repeat_ngram_size)
    cfg.repetition_penalty, cfg.do_sample, cfg.top_k, cfg.no_repeat_ngram_size = 5.0, True, 3, 1
    try:
        assert [r.text for r in collect(backend, make_requests(3, gen))] == baseline
    finally:
        cfg.repetition_penalty, cfg.do_sample, cfg.top_k, cfg.no_repeat_ngram_size = saved
    penalised = [r.text for r in collect(backend, make_requests(3, GenSettings(max_new_tokens=12,
                                                                               repetition_penalty=5.0)))]
    assert penalised != baseline  # while the setting itself does reach generate()


def test_accelerate_device_map_on_cpu(tiny_qwen_dir: Path, make_requests, collect) -> None:
    be = TransformersBackend(str(tiny_qwen_dir), device="auto", batch_size=2)
    assert be.model.device.type == "cpu"
    assert [r.usage.output_tokens for r in collect(be, make_requests(2, GenSettings(max_new_tokens=2)))] == [2, 2]
