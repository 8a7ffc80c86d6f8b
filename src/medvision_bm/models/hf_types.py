"""What the local backends call on transformers and torch objects (a tokenizer, a chat processor, a generating
model), as Protocols: their code is typed while torch and transformers are imported only when a model loads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from PIL import Image
    from transformers import BatchFeature, GenerationConfig

    from medvision_bm.jsontypes import JsonObject

#: The keyword arguments of one ``generate`` call (max_new_tokens, do_sample, stopping_criteria...).
GenerateKwargs = dict[str, object]


class Decoder(Protocol):
    """A tokenizer as the stop-string check and the upstream adapters use it: rows of ids back to texts."""

    def batch_decode(self, sequences: list[list[int]] | torch.Tensor, *, skip_special_tokens: bool = ...
                     ) -> list[str]: ...


class Tokenizer(Decoder, Protocol):
    """The parts of a transformers tokenizer the local backend reads and calls."""

    padding_side: str
    pad_token: str | None
    eos_token: str | None
    bos_token: str | None
    pad_token_id: int | None
    eos_token_id: int | None

    def decode(self, token_ids: Sequence[int] | torch.Tensor, *, skip_special_tokens: bool = ...) -> str: ...


class ChatProcessor(Protocol):
    """A multimodal processor: chat template to text, then text and images to model inputs."""

    def apply_chat_template(self, conversation: list[JsonObject], *, add_generation_prompt: bool, tokenize: bool,
                            **kwargs: object) -> str: ...

    def __call__(self, *, text: list[str], images: list[Image.Image] | None, padding: bool, return_tensors: str,
                 **kwargs: object) -> BatchFeature: ...


class GeneratingModel(Protocol):
    """A loaded transformers model that generates (its weights on ``device`` in ``dtype``)."""

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def generation_config(self) -> GenerationConfig: ...

    def eval(self) -> object: ...

    def generate(self, *args: torch.Tensor, **kwargs: object) -> torch.Tensor: ...
