"""Weights load straight onto the device asked for: a device map for one device, never a full copy
in host memory followed by ``model.to(device)`` (for the registry's 32B models that copy is ~64 GB of RAM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from medvision_bm.models import hf_local
from medvision_bm.models.hf_local import TransformersBackend, load_device_map


class _Spy:
    """Wraps ``AutoModelForImageTextToText.from_pretrained``: records its keyword arguments, then loads (or stops)."""

    def __init__(self, real: Any, stop: bool = False) -> None:
        self.real, self.stop, self.calls = real, stop, []

    def __call__(self, source: Any, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if self.stop:
            raise _Stop
        return self.real(source, **kwargs)


class _Stop(Exception):
    pass


@pytest.fixture
def spy(monkeypatch):
    from transformers import AutoModelForImageTextToText

    def install(stop: bool = False) -> _Spy:
        s = _Spy(AutoModelForImageTextToText.from_pretrained, stop)
        monkeypatch.setattr(AutoModelForImageTextToText, "from_pretrained", s)
        return s

    return install


def test_cpu_load_goes_through_a_single_device_map_and_no_move(tiny_qwen_dir: Path, spy, monkeypatch,
                                                                 make_requests, collect) -> None:
    s = spy()
    import torch

    moved: list[Any] = []
    real_to = torch.nn.Module.to
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: moved.append(a) or real_to(self, *a, **k))
    be = TransformersBackend(str(tiny_qwen_dir), device="cpu", batch_size=2)
    assert s.calls and s.calls[0]["device_map"] == {"": "cpu"}
    assert not moved  # no model.to(device) after loading
    assert {p.device.type for p in be.model.parameters()} == {"cpu"}
    assert all(r.ok for r in collect(be, make_requests(2)))


def test_cuda_load_asks_for_the_gpu_in_from_pretrained(tiny_llava_dir: Path, spy, monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    s = spy(stop=True)
    with pytest.raises(_Stop):  # stopped inside from_pretrained: the device was asked for there, not after
        hf_local.TransformersBackend._load_model(str(tiny_llava_dir), dtype="bfloat16", device="cuda", revision=None,
                                                 trust_remote_code=False, attn_implementation=None)
    assert s.calls[0]["device_map"] == {"": "cuda:0"} and s.calls[0]["dtype"] is torch.bfloat16


def test_device_maps() -> None:
    assert load_device_map("auto") == "auto"
    assert load_device_map("cuda") == {"": "cuda:0"}
    assert load_device_map("cpu") == {"": "cpu"}
