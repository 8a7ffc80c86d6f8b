"""Models that need upstream code: clone it at the commit pinned in the record, put it on the import path, and
answer through a small adapter per model (LLaVA-Med, MedDr, HuatuoGPT-Vision, HealthGPT).

The clone and pin logic runs anywhere git does; the adapters need the upstream code, its pinned dependencies and a
GPU, so they are only imported when a run actually uses one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medvision_bm.errors import UserError
from medvision_bm.models.base import GenRequest, GenResult, SyncBackend, Usage
from medvision_bm.models.registry import ModelRecord, ThirdParty

if TYPE_CHECKING:
    from medvision_bm.runner.config import RunConfig

#: HealthGPT's --model_choice: weights repo, base language model, dtype (from the upstream instructions).
HEALTHGPT_CHOICES: dict[str, dict[str, str]] = {
    "HealthGPT-L14": {"weights": "lintw/HealthGPT-L14", "base": "microsoft/phi-4", "dtype": "float16"},
    "HealthGPT-XL32": {"weights": "lintw/HealthGPT-XL32", "base": "Qwen/Qwen2.5-32B-Instruct", "dtype": "float16"},
}


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def checkout(tp: ThirdParty, root: Path) -> Path:
    """Clone ``tp.repo_url`` into ``root/<name>`` at ``tp.commit`` (reusing a matching checkout); returns it."""
    name = tp.repo_url.rstrip("/").split("/")[-1].removesuffix(".git")
    dest = root / name
    if (dest / ".git").is_dir():
        head = _git("rev-parse", "HEAD", cwd=dest)
        if head.returncode == 0 and head.stdout.strip() == tp.commit:
            return dest
        fetched = _git("checkout", "--quiet", tp.commit, cwd=dest)
        if fetched.returncode != 0:
            _git("fetch", "--quiet", "origin", cwd=dest)
            fetched = _git("checkout", "--quiet", tp.commit, cwd=dest)
        if fetched.returncode != 0:
            raise UserError(f"{dest} exists but commit {tp.commit[:12]} of {tp.repo_url} cannot be checked out there; "
                            "remove the folder or fix its remote")
        return dest
    root.mkdir(parents=True, exist_ok=True)
    try:
        cloned = _git("clone", "--quiet", tp.repo_url, str(dest))
    except FileNotFoundError:
        raise UserError("git is not on PATH; install git to fetch third-party model code") from None
    if cloned.returncode != 0:
        reason = (cloned.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise UserError(f"cannot clone {tp.repo_url} into {dest} ({reason}); check the network, or clone it there "
                        f"yourself at commit {tp.commit}")
    pinned = _git("checkout", "--quiet", tp.commit, cwd=dest)
    if pinned.returncode != 0:
        raise UserError(f"commit {tp.commit} is not in {tp.repo_url}; the record's pin is wrong or the repository "
                        "was rewritten")
    return dest


def prepare_third_party(record: ModelRecord, dir_third_party: str | None) -> list[Path]:
    """Check out every upstream repository of the record and put it on ``sys.path`` (and PYTHONPATH)."""
    if not record.third_party:
        return []
    if not dir_third_party:
        raise UserError(f"{record.display_name} needs its upstream code: pass --dir_third_party DIR "
                        "(it is cloned there at the pinned commit)")
    paths = []
    for tp in record.third_party:
        path = checkout(tp, Path(dir_third_party).expanduser().resolve())
        import_path = path / tp.import_subdir if tp.import_subdir else path
        if str(import_path) not in sys.path:
            sys.path.insert(0, str(import_path))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(import_path), os.environ.get("PYTHONPATH")) if p)
        paths.append(import_path)
    return paths


class ThirdPartyBackend(SyncBackend):
    """One answer at a time through an adapter that wraps the upstream inference code."""

    def __init__(self, name: str, adapter: Any) -> None:
        self.name = name
        self.adapter = adapter

    def answer(self, request: GenRequest) -> GenResult:
        text, n_in, n_out = self.adapter.answer(request.prompt, request.get_images()[0], request.gen,
                                                request.system_prompt)
        cut = n_out is not None and n_out >= request.gen.max_new_tokens
        return GenResult(request.key, text, finish_reason="length" if cut else "stop", usage=Usage(n_in, n_out))


class LlavaMedAdapter:
    """LLaVA-Med v1.5 through its `llava` package (conversation template mistral_instruct)."""

    def __init__(self, weights: str, conv_mode: str) -> None:
        from llava.mm_utils import get_model_name_from_path
        from llava.model.builder import load_pretrained_model

        self.tokenizer, self.model, self.processor, _ = load_pretrained_model(
            weights, None, get_model_name_from_path(weights))
        self.conv_mode = conv_mode

    def answer(self, prompt, image, gen, system_prompt):
        import torch
        from llava.constants import DEFAULT_IMAGE_TOKEN, IMAGE_TOKEN_INDEX
        from llava.conversation import conv_templates
        from llava.mm_utils import process_images, tokenizer_image_token

        conv = conv_templates[self.conv_mode].copy()
        conv.append_message(conv.roles[0], f"{DEFAULT_IMAGE_TOKEN}\n{prompt}")
        conv.append_message(conv.roles[1], None)
        ids = tokenizer_image_token(conv.get_prompt(), self.tokenizer, IMAGE_TOKEN_INDEX, return_tensors="pt")
        ids = ids.unsqueeze(0).to(self.model.device)
        pixels = process_images([image], self.processor, self.model.config).to(self.model.device, torch.float16)
        with torch.inference_mode():
            out = self.model.generate(ids, images=pixels, do_sample=bool(gen.temperature),
                                      temperature=gen.temperature or None, max_new_tokens=gen.max_new_tokens)
        new = out[0][ids.shape[1]:] if out.shape[1] > ids.shape[1] else out[0]
        return self.tokenizer.decode(new, skip_special_tokens=True).strip(), int(ids.shape[1]), int(new.shape[0])


class HuatuoAdapter:
    """HuatuoGPT-Vision through the upstream `cli.HuatuoChatbot`."""

    def __init__(self, weights: str) -> None:
        from cli import HuatuoChatbot

        self.bot = HuatuoChatbot(weights)

    def answer(self, prompt, image, gen, system_prompt):
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".png") as fh:
            image.save(fh.name)
            text = self.bot.inference(prompt, [fh.name], max_new_tokens=gen.max_new_tokens)
        return (text[0] if isinstance(text, list) else text), None, None


class MedDrAdapter:
    """MedDr (an InternVL chat model) through its remote code's `chat`."""

    def __init__(self, weights: str) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.model = AutoModel.from_pretrained(weights, torch_dtype=torch.bfloat16, trust_remote_code=True,
                                               device_map="auto").eval()
        self.tokenizer = AutoTokenizer.from_pretrained(weights, trust_remote_code=True)

    def answer(self, prompt, image, gen, system_prompt):
        import torch
        from internvl.train.dataset import build_transform

        pixels = build_transform(is_train=False, input_size=448)(image).unsqueeze(0)
        pixels = pixels.to(self.model.device, torch.bfloat16)
        config = {"max_new_tokens": gen.max_new_tokens, "do_sample": bool(gen.temperature)}
        return self.model.chat(self.tokenizer, pixels, f"<image>\n{prompt}", config), None, None


class HealthGPTAdapter:
    """HealthGPT (L14 on phi-4, XL32 on Qwen2.5-32B) through the upstream inference helpers."""

    def __init__(self, choice: str) -> None:
        spec = HEALTHGPT_CHOICES[choice]
        from llava.demo.com_infer import load_healthgpt

        self.model = load_healthgpt(spec["base"], spec["weights"], spec["dtype"])

    def answer(self, prompt, image, gen, system_prompt):
        return self.model.generate(prompt, image, max_new_tokens=gen.max_new_tokens), None, None


def build_third_party_backend(cfg: RunConfig) -> ThirdPartyBackend:
    rec = cfg.record
    prepare_third_party(rec, cfg.model_flags.get("dir_third_party"))
    try:
        if rec.name == "llava_med":
            adapter: Any = LlavaMedAdapter(cfg.weights, rec.engine_kwargs.get("conv_mode", "mistral_instruct"))
        elif rec.name == "huatuogpt_vision":
            adapter = HuatuoAdapter(cfg.weights)
        elif rec.name == "meddr":
            adapter = MedDrAdapter(cfg.weights)
        elif rec.name == "healthgpt":
            adapter = HealthGPTAdapter(cfg.model_flags.get("model_choice") or "HealthGPT-L14")
        else:
            raise UserError(f"no third-party adapter for {rec.name}")
    except ImportError as exc:
        raise UserError(f"{rec.display_name}'s upstream code or its dependencies do not import ({exc}); build its "
                        f"environment with `medvision-bm envs build {rec.env.name}`") from None
    return ThirdPartyBackend(rec.name, adapter)
