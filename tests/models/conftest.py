"""Shared fixtures for the local-model tests: tiny random-weight VLMs built once per session, offline."""

from __future__ import annotations

import os

# Before anything imports huggingface_hub: nothing in these tests may reach the hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine threads spinning against
# other processes make each forward pass ~10x slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medvision_bm.data.docs import RunDoc
from medvision_bm.models.base import GenRequest, GenSettings


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_llava_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from medvision_bm.models.tiny import make_tiny_llava

    return make_tiny_llava(tmp_path_factory.mktemp("tiny") / "llava", seed=0)


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from medvision_bm.models.tiny import make_tiny_qwen2_5_vl

    return make_tiny_qwen2_5_vl(tmp_path_factory.mktemp("tiny") / "qwen2_5_vl", seed=0)


@pytest.fixture(scope="session")
def _backends(tiny_llava_dir: Path, tiny_qwen_dir: Path) -> dict[str, object]:
    from medvision_bm.models.hf_local import TransformersBackend

    return {"llava": TransformersBackend(str(tiny_llava_dir), device="cpu"),
            "qwen2_5_vl": TransformersBackend(str(tiny_qwen_dir), device="cpu")}


@pytest.fixture(params=["llava", "qwen2_5_vl"])
def backend(request: pytest.FixtureRequest, _backends: dict[str, object]) -> Iterator[object]:
    """A loaded TransformersBackend per tiny architecture; batch_size is reset after each test."""
    be = _backends[request.param]
    yield be
    be.batch_size = 1


def _image(h: int, w: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8), mode="RGB")


def _rundoc(key: str, hw: tuple[int, int]) -> RunDoc:
    from fakes.samples import make_rundoc

    return make_rundoc(0, family="detect", hw=hw, image=f"{key}.nii.gz", key=key)


#: Different prompt lengths and image shapes (non-square, one tiny), so batches need padding.
SIZES: tuple[tuple[int, int], ...] = ((100, 70), (64, 64), (300, 120), (20, 33), (57, 200))


def _make_requests(n: int = 3, gen: GenSettings | None = None, system_prompt: str | None = None,
                  prefix: str = "k") -> list[GenRequest]:
    gen = gen or GenSettings(max_new_tokens=8)
    reqs = []
    for i in range(n):
        hw = SIZES[i % len(SIZES)]
        reqs.append(GenRequest(
            key=f"{prefix}{i}", prompt="Give the bounding box of the liver. " * (i + 1), rundoc=_rundoc(f"{prefix}{i}", hw),
            gen=gen, system_prompt=system_prompt, images=[_image(*hw, seed=i)],
        ))
    return reqs


def _collect(backend: object, requests: list[GenRequest]) -> list:
    results: list = []
    backend.generate(requests, results.append)
    return results


@pytest.fixture
def make_image():
    """``make_image(h, w, seed=0)``: a seeded random RGB PIL image."""
    return _image


@pytest.fixture
def make_requests():
    """``make_requests(n=3, gen=None, system_prompt=None, prefix='k')``: requests with varied prompts and images."""
    return _make_requests


@pytest.fixture
def collect():
    """``collect(backend, requests)``: run ``generate`` and return the results in the order reported."""
    return _collect
