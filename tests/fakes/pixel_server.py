"""Served stubs for the image-dependence check: real OpenAI chat servers on 127.0.0.1 that answer from the pixels of
the image they receive, or from the prompt text alone (ignoring the image).

Both answer in the format the prompt asks for (four numbers for a box, two for major and minor axes, one otherwise)
inside ``<answer>`` tags, so the strict parser reads them.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import time
from typing import Any

from aiohttp import web

from fakes.provider_server import FakeProviderServer, Received, _App, _openai_answer


def _user_parts(body: dict[str, Any]) -> tuple[str, list[bytes]]:
    """The prompt text and the decoded image files of the last user message."""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content, []
    text = "".join(p.get("text", "") for p in content if p.get("type") == "text")
    images = [base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in content
              if p.get("type") == "image_url"]
    return text, images


def answer_count(prompt: str) -> int:
    if "bounding box" in prompt:
        return 4
    if "major and minor" in prompt:
        return 2
    return 1


def from_pixels(png: bytes, k: int) -> list[float]:
    """Numbers made from the picture: the box of its bright pixels (lower-left origin, relative), its size in pixels,
    or its mean brightness; a picture without bright pixels gives the whole frame."""
    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)
    h, w = a.shape
    rows, cols = np.nonzero(a > a.mean() + 2 * a.std())
    if not rows.size:
        rows, cols = np.array([0, h - 1]), np.array([0, w - 1])
    box = [cols.min() / w, (h - rows.max() - 1) / h, (cols.max() + 1) / w, (h - rows.min()) / h]
    if k == 4:
        return box
    if k == 2:
        return [float(cols.max() - cols.min() + 1), float(rows.max() - rows.min() + 1)]
    return [float(a.mean()) / 4 + 1]


def from_prompt(prompt: str, k: int) -> list[float]:
    """Numbers made from the prompt text alone (the same prompt always gets the same answer)."""
    seed = hashlib.sha256(prompt.encode()).digest()
    vals = sorted(b / 255 for b in seed[:k])
    return vals if k == 4 else [10 * v + 1 for v in vals]


class _Stub(_App):
    """Records each request and answers with ``numbers(body)``."""

    def numbers(self, prompt: str, images: list[bytes]) -> list[float]:
        raise NotImplementedError

    async def _handle(self, request: web.Request, flavor: str) -> web.StreamResponse:
        body = json.loads(await request.read())
        with self.lock:
            self.received.append(Received(request.method, request.path, dict(request.headers), body, time.time()))
        prompt, images = _user_parts(body)
        values = self.numbers(prompt, images)
        text = f"<think>looked</think> <answer>{', '.join(f'{v:.4f}' for v in values)}</answer>"
        return web.json_response(_openai_answer(body["model"], text, "stop"))


class PixelStub(_Stub):
    """Answers from the pixels of the image it receives."""

    def numbers(self, prompt: str, images: list[bytes]) -> list[float]:
        assert len(images) == 1, "one image per request"
        return from_pixels(images[0], answer_count(prompt))


class PromptOnlyStub(_Stub):
    """Answers from the prompt alone: whatever the image, the same prompt gets the same answer."""

    def numbers(self, prompt: str, images: list[bytes]) -> list[float]:
        return from_prompt(prompt, answer_count(prompt))


def serve(app: _App) -> FakeProviderServer:
    """A started server answering with ``app``."""
    server = FakeProviderServer()
    server.app = app
    return server.start()
