"""What every third-party model adapter shares (``models/third_party.py``): the backend that answers through an
adapter, upstream's generation keyword arguments and seeding, the system-prompt and conversation helpers, the
token counting around ``generate`` and the dtype names."""

from __future__ import annotations

import contextlib
import inspect
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from medvision_bm.errors import UserError
from medvision_bm.models.base import GenRequest, GenResult, GenSettings, SyncBackend, Usage
from medvision_bm.models.hf_local import finish
from medvision_bm.models.hf_types import GenerateKwargs

if TYPE_CHECKING:
    import torch
    from PIL import Image


class Adapter(Protocol):
    """One upstream model's inference code behind one call: the answer text and its token counts (None: unknown)."""

    def answer(self, prompt: str, image: Image.Image, gen: GenSettings, system_prompt: str | None
               ) -> tuple[str, int | None, int | None]: ...


class Conversation(Protocol):
    """An upstream LLaVA-style ``Conversation`` template (``llava/conversation.py``)."""

    system: str
    roles: Sequence[str]

    def copy(self) -> Conversation: ...

    def append_message(self, role: str, message: str | None) -> None: ...

    def get_prompt(self) -> str: ...


class ForwardModel(Protocol):
    """An upstream model as ``generate`` drives it: the step inputs' builder and ``forward``."""

    forward: Callable[..., object]
    prepare_inputs_for_generation: Callable[..., Mapping[str, object]]


class GenerateModel(Protocol):
    """An upstream model whose ``generate`` is wrapped while it answers."""

    generate: Callable[..., object]


class UpstreamModel(ForwardModel, GenerateModel, Protocol):
    """An upstream model both patched for ``forward`` and counted around ``generate``."""


class ThirdPartyBackend(SyncBackend):
    """One answer at a time through an adapter that wraps the upstream inference code.

    An adapter's ``answer(prompt, image, gen, system_prompt)`` returns ``(text, input_tokens, output_tokens)``
    (counts may be None); stop strings are cut here and decide the finish reason with the token count."""

    def __init__(self, name: str, adapter: Adapter) -> None:
        self.name = name
        self.adapter = adapter

    def answer(self, request: GenRequest) -> GenResult:
        images = request.get_images()
        if len(images) != 1:
            raise ValueError(f"{self.name} takes exactly one image per question, got {len(images)}")
        gen = request.gen
        text, n_in, n_out = self.adapter.answer(request.prompt, images[0], gen, request.system_prompt)
        text, reason = finish(text, gen, n_out)
        return GenResult(request.key, text, finish_reason=reason, usage=Usage(n_in, n_out))


def upstream_generate_kwargs(gen: GenSettings, *, min_new_tokens: int | None = None) -> GenerateKwargs:
    """``generate`` keyword arguments for the upstream models from our GenSettings: greedy at temperature 0/None;
    when sampling, top_p/top_k are always given (None = off) so a checkpoint's generation_config never adds its own.
    ``min_new_tokens`` is the adapter's floor when the settings give none."""
    sampling = bool(gen.temperature)
    kw: GenerateKwargs = {"max_new_tokens": int(gen.max_new_tokens), "do_sample": sampling, "num_beams": 1}
    if gen.temperature:  # i.e. if sampling
        kw["temperature"] = float(gen.temperature)
        kw["top_p"] = float(gen.top_p) if gen.top_p is not None else None
        kw["top_k"] = int(gen.top_k) if gen.top_k is not None else None
    if gen.repetition_penalty is not None:
        kw["repetition_penalty"] = float(gen.repetition_penalty)
    floor = gen.min_new_tokens or min_new_tokens
    if floor:
        kw["min_new_tokens"] = int(floor)
    return kw


def seed_generation(gen: GenSettings) -> None:
    """Sampling is reproducible per request: the torch generators restart from the run's seed."""
    if gen.temperature and gen.seed is not None:
        import torch

        torch.manual_seed(int(gen.seed))


@contextlib.contextmanager
def python_random(seed: int) -> Iterator[None]:
    """Python's ``random`` seeded for a block, its previous state restored after (LLaVA-Med's pad-to-square picks
    the paste offset with ``random.randint``)."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def system_for_template(template_system: str, system_prompt: str) -> str:
    """The ``system`` field of an upstream conversation template with our system prompt in place of its text.

    Chat-markup templates keep their header line (``<|im_start|>system<|im_sep|>`` for phi4_instruct,
    ``<|im_start|>system`` for qwen_2) and get the prompt on the next line; plain templates (mistral_instruct's empty
    system, which LLAMA_2-style rendering wraps in ``<<SYS>>``) take the prompt as is."""
    head, newline, _ = template_system.partition("\n")
    if newline and head.lstrip().startswith("<|"):
        return f"{head}\n{system_prompt}"
    return system_prompt


def llava_conversation_prompt(conv_templates: Mapping[str, Conversation], template: str, question: str,
                              image_token: str, system_prompt: str | None = None) -> str:
    """A single-turn prompt through an upstream LLaVA-style ``Conversation`` template: image token, newline,
    question as the user turn, an open assistant turn."""
    try:
        conv = conv_templates[template].copy()
    except KeyError:
        raise UserError(f"the upstream code has no conversation template {template!r} "
                        f"(it has: {', '.join(sorted(conv_templates))})") from None
    if system_prompt:
        conv.system = system_for_template(conv.system, system_prompt)
    conv.append_message(conv.roles[0], f"{image_token}\n{question}")
    conv.append_message(conv.roles[1], None)
    return conv.get_prompt()


def with_system_text(question: str, system_prompt: str | None) -> str:
    """For upstream APIs without a system turn (MedDr's ``chat``, Huatuo's ``inference``): the system prompt leads
    the user text, a blank line before the question."""
    return f"{system_prompt}\n\n{question}" if system_prompt else question


def accept_only_forward_kwargs(model: ForwardModel) -> None:
    """Make ``generate`` pass ``forward`` only the inputs it declares.

    transformers >= 4.38 adds ``cache_position`` to the step inputs; LLaVA-style ``forward`` methods written for
    4.37 have no ``**kwargs`` and fail with "unexpected keyword argument 'cache_position'"
    (huggingface/transformers#29426). Where ``forward`` takes ``**kwargs`` nothing changes."""
    params = inspect.signature(model.forward).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    prepare = model.prepare_inputs_for_generation

    def prepare_declared(*args: object, **kwargs: object) -> dict[str, object]:
        return {k: v for k, v in prepare(*args, **kwargs).items() if k in params}

    model.prepare_inputs_for_generation = prepare_declared


@contextlib.contextmanager
def counting_generate(model: GenerateModel) -> Iterator[dict[str, int]]:
    """Record the prompt and output lengths of the ``model.generate`` calls made inside the block (for upstream
    APIs that return only text): ``counts["in"]`` and ``counts["out"]`` after the call."""
    counts: dict[str, int] = {}
    own = vars(model).get("generate")
    original = model.generate

    def generate(*args: object, **kwargs: object) -> object:
        ids = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
        out = original(*args, **kwargs)
        in_shape, out_shape = getattr(ids, "shape", None), getattr(out, "shape", None)
        if in_shape is not None:
            counts["in"] = int(in_shape[-1])
        if out_shape is not None:
            counts["out"] = int(out_shape[-1])
        return out

    model.generate = generate
    try:
        yield counts
    finally:
        if own is None:
            vars(model).pop("generate", None)
        else:
            model.generate = own


def torch_dtype(name: str | None, default: torch.dtype) -> torch.dtype:
    import torch

    if not name or name == "auto":
        return default
    table = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in table:
        raise UserError(f"dtype {name!r} is not one of {', '.join(table)} (or auto)")
    return table[name]
