"""The tiny random-weight VLM folders: seeded, marked as random, loadable offline with the Auto classes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from medvision_bm.models import tiny


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_same_seed_same_files_other_seed_other_weights(arch: str, tmp_path: Path) -> None:
    a = tiny.make_tiny(arch, tmp_path / "a", seed=7)
    b = tiny.make_tiny(arch, tmp_path / "b", seed=7)
    c = tiny.make_tiny(arch, tmp_path / "c", seed=8)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()  # seed is weights only


@pytest.mark.parametrize("fixture", ["tiny_llava_dir", "tiny_qwen_dir"])
def test_folder_is_marked_random_and_small(fixture: str, request: pytest.FixtureRequest) -> None:
    folder: Path = request.getfixturevalue(fixture)
    marker = json.loads((folder / tiny.MARKER_FILE).read_text())
    assert marker["random_weights"] is True and marker["seed"] == 0
    assert json.loads((folder / "config.json").read_text())["medvision_tiny"]["random_weights"] is True
    assert "RANDOM WEIGHTS" in (folder / "README.md").read_text()
    assert tiny.is_tiny_model(folder)
    assert _folder_bytes(folder) < 2_000_000


def test_llava_loads_with_plain_auto_classes(tiny_llava_dir: Path) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_llava_dir)
    model = AutoModelForImageTextToText.from_pretrained(tiny_llava_dir)
    assert type(processor).__name__ == "LlavaProcessor"
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert processor.chat_template and processor.tokenizer.convert_tokens_to_ids("<image>") == model.config.image_token_id


def test_qwen_has_published_layout_and_loads(tiny_qwen_dir: Path) -> None:
    from transformers import AutoModelForImageTextToText

    from medvision_bm.models.hf_local import load_processor

    pre = json.loads((tiny_qwen_dir / "preprocessor_config.json").read_text())
    assert pre["processor_class"] == "Qwen2_5_VLProcessor" and pre["image_processor_type"] == "Qwen2VLImageProcessor"
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    processor = load_processor(str(tiny_qwen_dir))
    assert isinstance(processor, __import__("transformers").Qwen2_5_VLProcessor)
    assert processor.image_token_id == model.config.image_token_id
    if importlib.util.find_spec("torchvision") is None:
        assert not hasattr(processor, "video_processor")  # the image-only fallback was needed and used


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="only meaningful without torchvision")
def test_plain_auto_processor_needs_torchvision_for_qwen(tiny_qwen_dir: Path) -> None:
    """Why load_processor has its fallback: the stock Qwen processor builds a video processor first."""
    from transformers import AutoProcessor

    with pytest.raises(ImportError, match=r"(?i)torchvision"):
        AutoProcessor.from_pretrained(tiny_qwen_dir)


def test_cli_builds_and_refuses_foreign_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    assert tiny.main(["--arch", "llava", "--out", str(out)]) == 0
    assert "random weights" in capsys.readouterr().out
    assert tiny.is_tiny_model(out)
    (out / "stale.txt").write_text("left over")
    assert tiny.main(["--arch", "qwen2_5_vl", "--out", str(out)]) == 0  # a tiny model folder is replaced whole
    assert not (out / "stale.txt").exists() and not (out / "processor_config.json").exists()
    assert json.loads((out / tiny.MARKER_FILE).read_text())["arch"] == "qwen2_5_vl"

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert tiny.main(["--arch", "llava", "--out", str(foreign)]) == 2
    assert "non-empty folder" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "mine" and not (foreign / "config.json").exists()

    (tmp_path / "a_file").write_text("")
    assert tiny.main(["--arch", "llava", "--out", str(tmp_path / "a_file" / "m")]) == 2
    assert "cannot create --out" in capsys.readouterr().err

    with pytest.raises(SystemExit):
        tiny.main(["--arch", "gpt5", "--out", str(tmp_path / "x")])
