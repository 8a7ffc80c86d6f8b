"""Our lmms-eval model classes: requests go to one of our backends, each result is streamed out as it lands.

``StreamingLMM`` is what the runner uses for a local model (results go to the sample store); ``RelayLMM`` is lmms-eval's
model in an API run's lmms-eval process, handed the answers the run's own process asked. ``MedVisionLMM`` is ``StreamingLMM``
made from lmms-eval ``model_args`` (``--model medvision --model_args record=oracle``), for users who drive
lmms-eval's own CLI; it then takes generation settings from the task's generation_kwargs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from lmms_eval.api.model import lmms

from medvision_bm.data.docs import RunDoc
from medvision_bm.errors import UserError
from medvision_bm.models.base import Backend, GenRequest, GenResult, GenSettings
from medvision_bm.models.claimed import ClaimSource, answer_text, ask_claimed
from medvision_bm.models.factory import backend_from_options
from medvision_bm.models.registry import get_record
from medvision_bm.tasks import hooks

if TYPE_CHECKING:
    from lmms_eval.api.instance import Instance


@dataclass
class StreamTarget:
    """Where answers of the current task go and with which settings (set by the runner per task)."""

    gen: GenSettings
    system_prompt: str | None
    on_result: Callable[[GenResult], None]
    claims: ClaimSource | None = None  # store.claims.Claims (handed to ask_claimed): ask only the samples this run claims (concurrent runs share a store)
    chunk: int = 256  # samples claimed at a time


def gen_from_kwargs(gen_kwargs: dict[str, Any]) -> GenSettings:
    """GenSettings from a task's generation_kwargs (``Any``: as lmms-eval read them from the task's YAML)."""
    until = gen_kwargs.get("until") or ()
    return GenSettings(max_new_tokens=int(gen_kwargs.get("max_new_tokens", 256)),
                       temperature=float(gen_kwargs.get("temperature", 0.0) or 0.0),
                       top_p=gen_kwargs.get("top_p"), top_k=gen_kwargs.get("top_k"),
                       stop=tuple([until] if isinstance(until, str) else until))


class StreamingLMM(lmms):
    """Forwards lmms-eval requests to a backend; failed requests become a failure marker, never an answer."""

    is_simple = True

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend
        self.target: StreamTarget | None = None

    def clean(self) -> None:
        """lmms-eval calls this after every task to free a judge's GPU memory (a full ``gc.collect`` and a CUDA cache
        flush, 0.46 s a task): our model object lives for the whole run and its backend manages its own memory."""

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:  # pragma: no cover - MedVision tasks only generate
        raise NotImplementedError("MedVision tasks only generate")

    def generate_until_multi_round(self, requests: list[Instance]) -> list[str]:  # pragma: no cover
        raise NotImplementedError("MedVision tasks are single-round")

    def generate_until(self, requests: list[Instance]) -> list[str]:
        gray = bool(getattr(self.backend, "takes_gray_slices", False))
        reqs: list[GenRequest] = []
        for inst in requests:
            context, gen_kwargs, doc_to_visual, doc_id, task, split = inst.args
            row = self.task_dict[task][split][doc_id]
            rd = RunDoc.from_lmms_row(row)
            gen = self.target.gen if self.target else gen_from_kwargs(gen_kwargs)
            if gray and _is_our_visual(doc_to_visual):  # the same pixels, without upstream's RGB copy
                doc_to_visual = hooks.doc_to_visual_gray
            reqs.append(GenRequest(key=rd.doc.key, prompt=context, rundoc=rd, gen=gen,
                                   system_prompt=self.target.system_prompt if self.target else None,
                                   image_loader=functools.partial(doc_to_visual, row)))
        by_key = {r.key: r for r in reqs}
        texts: dict[str, str] = {}

        def on_result(res: GenResult) -> None:
            by_key[res.key].release_images()
            texts[res.key] = answer_text(res)
            if self.target is not None:
                self.target.on_result(res)

        target = self.target
        pending = dict(by_key)
        if target is None or target.claims is None:  # every request as lmms-eval made it (a doc asked twice, twice)
            self.backend.generate([r for r in reqs if r.key in pending], on_result)
        else:
            ask_claimed(self.backend, pending, on_result, target.claims, target.chunk, texts)
        missing = [r.key for r in reqs if r.key not in texts]
        if missing:
            raise RuntimeError(f"backend {self.backend.name} returned no result for {len(missing)} requests")
        return [texts[r.key] for r in reqs]


class RelayedAnswer(Protocol):
    """One answer asked by the process that runs this one (``runner.lmms_worker``): the prompt it was asked with and
    the text lmms-eval gets (the answer, or the failure marker)."""

    @property
    def prompt(self) -> str: ...

    @property
    def text(self) -> str: ...


class AnswerInbox(Protocol):
    """Where a relayed task's answers arrive (``runner.lmms_worker.Inbox``)."""

    def wait_for(self, keys: Sequence[str]) -> Mapping[str, RelayedAnswer]:
        """The answers of ``keys``, once every one has come (raises if the asking ended without one)."""
        ...


class RelayLMM(lmms):
    """lmms-eval's model in an API run's lmms-eval process: the run's own process asks every request (its clients, its
    claims, its store) and relays each answer here; ``generate_until`` hands lmms-eval those answers. Each request
    lmms-eval makes must be the one asked (the prompt and this suite's image hook, which is what lmms-eval asks with
    for this suite's templates: zero-shot, no description, no chat template); one that differs ends the task with an
    error rather than scoring an answer to another question."""

    is_simple = True

    def __init__(self, inbox: AnswerInbox) -> None:
        super().__init__()
        self.inbox = inbox

    def clean(self) -> None:
        """Nothing held between tasks (lmms-eval's default frees a judge's GPU memory)."""

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:  # pragma: no cover - MedVision tasks only generate
        raise NotImplementedError("MedVision tasks only generate")

    def generate_until_multi_round(self, requests: list[Instance]) -> list[str]:  # pragma: no cover
        raise NotImplementedError("MedVision tasks are single-round")

    def generate_until(self, requests: list[Instance]) -> list[str]:
        keys: list[str] = []
        contexts: list[str] = []
        foreign = 0
        for inst in requests:
            context, _gen_kwargs, doc_to_visual, doc_id, task, split = inst.args
            # through the hooks' parser: in lmms-eval's process it holds the part's rows parsed once
            keys.append(hooks.rundoc(self.task_dict[task][split][doc_id]).doc.key)
            contexts.append(context)
            foreign += not _is_our_visual(doc_to_visual)
        answers = self.inbox.wait_for(keys)
        differ = foreign + sum(answers[k].prompt != c for k, c in zip(keys, contexts, strict=True))
        if differ:
            raise RuntimeError(f"{differ} request(s) lmms-eval made differ from the ones asked (prompt or image hook): "
                               "the task template is not this suite's own")
        return [answers[k].text for k in keys]


class MedVisionLMM(StreamingLMM):
    """``--model medvision --model_args record=NAME,opt=value,...`` for lmms-eval's own CLI."""

    def __init__(self, record: str = "oracle", **options: object) -> None:
        rec = get_record(record)
        if rec.name == "mean":
            raise UserError("the mean baseline needs the train split; run it through `medvision-bm run`")
        for drop in ("batch_size", "device", "max_batch_size"):
            if options.get(drop) is None:
                options.pop(drop, None)
        super().__init__(backend_from_options(rec, options))


def _is_our_visual(doc_to_visual: object) -> bool:
    """Whether an image function lmms-eval handed over makes the image with this suite's own ``doc_to_visual`` hook
    (the task templates name it): lmms-eval passes its task's bound ``doc_to_visual``, which calls the hook of the
    task's config."""
    hook = getattr(getattr(getattr(doc_to_visual, "__self__", None), "config", None), "doc_to_visual", doc_to_visual)
    return hook is hooks.doc_to_visual
