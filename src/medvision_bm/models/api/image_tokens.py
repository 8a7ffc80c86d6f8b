"""How many input tokens a provider bills for one image of a given size, by its published rule (an estimate before
a run; the provider's usage figures are what a run records). Sources and dates: ``docs/spec/cost-estimate.md``."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ImageRule:
    """A provider's rule, named as the estimate prints it."""

    name: str

    def tokens(self, width: int, height: int) -> int:
        raise NotImplementedError


@dataclass(frozen=True)
class OpenAITiles(ImageRule):
    """OpenAI, ``detail: high`` (what the suite sends): fit in a 2048 px square, then the short side down to 768 px
    when longer; ``base`` tokens plus ``per_tile`` for each 512 px tile."""

    base: int = 70
    per_tile: int = 140

    def tokens(self, width: int, height: int) -> int:
        w, h = float(width), float(height)
        if max(w, h) > 2048:
            s = 2048 / max(w, h)
            w, h = w * s, h * s
        if min(w, h) > 768:
            s = 768 / min(w, h)
            w, h = w * s, h * s
        return self.base + self.per_tile * math.ceil(int(w) / 512) * math.ceil(int(h) / 512)


@dataclass(frozen=True)
class AnthropicArea(ImageRule):
    """Anthropic: ``width * height / 750`` tokens, after a resize (aspect kept) to a long side of at most 1568 px
    and at most about 1,600 tokens (1092x1092, its largest square kept as sent, is about 1,590)."""

    def tokens(self, width: int, height: int) -> int:
        w, h = float(width), float(height)
        scale = min(1.0, 1568 / max(w, h), math.sqrt(1600 * 750 / (w * h)))
        return math.ceil(int(w * scale) * int(h * scale) / 750)


@dataclass(frozen=True)
class GeminiTiles(ImageRule):
    """Gemini: 258 tokens for an image of at most 384 px on both sides; a larger one is cut into square tiles of
    side ``min(width, height) / 1.5`` kept within 256-768 px, 258 tokens each."""

    def tokens(self, width: int, height: int) -> int:
        if width <= 384 and height <= 384:
            return 258
        unit = max(256, min(768, int(min(width, height) / 1.5)))
        return 258 * math.ceil(width / unit) * math.ceil(height / unit)


#: The rule of each provider the registry's API records reach (``None``: no published rule known).
RULES: dict[str, ImageRule] = {
    "openai": OpenAITiles("openai tiles (GPT-5 family: 70 + 140 per 512 px tile)"),
    "anthropic": AnthropicArea("anthropic area (w*h/750)"),
    "google": GeminiTiles("gemini tiles (258 per tile)"),
}


def image_tokens(provider: str, width: int, height: int) -> int | None:
    """The tokens ``provider`` bills for a ``width`` x ``height`` image (None: no rule known for it)."""
    rule = RULES.get(provider)
    return None if rule is None else rule.tokens(width, height)


#: Text tokens per character where no tokenizer of the provider's runs here (none of them ships offline): the
#: usual English average of about 4 characters per token; the prompts are short beside the images.
CHARS_PER_TOKEN = 4.0


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)
