"""`run --estimate`: what a run would cost before any paid request. Per task: the samples still to ask (as the run
would select them: what the store answered already is left out), their input tokens (the prompt's text at about four
characters a token, each image as sent by its provider's published rule), their output tokens (the task's max tokens
as the bound; the median of the answers already stored, where there are some) and the price live and batched from
the price table with its date. Nothing is sent, nothing is written."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from medvision_bm.data.layout import DataDir
from medvision_bm.errors import UserError
from medvision_bm.models.api import MODEL_OPTION, PROVIDERS
from medvision_bm.models.api.image_tokens import RULES, image_tokens, text_tokens
from medvision_bm.models.api.pricing import Price, PriceEntry, price_entry
from medvision_bm.runner.config import RunConfig
from medvision_bm.runner.loop import PreparedTask, prepare_task
from medvision_bm.store.samples import StoreState
from medvision_bm.tasks import hooks


@dataclass(frozen=True)
class TaskEstimate:
    """One task's figures: samples to ask, input tokens (text and images), output tokens (bound and median)."""

    task: str
    family: str
    to_ask: int
    text_tokens: int
    image_tokens: int | None  # None: no image rule known for the provider
    max_tokens: int
    median_output: float | None  # of the answers already stored for this task (None: none stored)

    @property
    def input_tokens(self) -> int:
        return self.text_tokens + (self.image_tokens or 0)

    def output_tokens(self, bound: bool) -> float:
        """The output tokens of the samples to ask: each at the max tokens (``bound``), else at the stored median
        (the bound where none is stored)."""
        per = self.max_tokens if bound or self.median_output is None else self.median_output
        return self.to_ask * per


@dataclass(frozen=True)
class RunEstimate:
    provider: str
    model_code: str | None
    image_rule: str | None
    price: PriceEntry | None
    tasks: list[TaskEstimate]

    def cost(self, price: Price | None, bound: bool) -> float | None:
        if price is None:
            return None
        return sum(price.cost_usd(t.input_tokens, int(t.output_tokens(bound))) for t in self.tasks)


def provider_of(cfg: RunConfig) -> tuple[str, str | None]:
    """The provider a run's requests go to and the model code they name."""
    kind = cfg.record.backend
    provider = str(cfg.model_flags.get("api_provider") or PROVIDERS[kind][0])
    code = cfg.model_flags.get(MODEL_OPTION[kind])
    return provider, (str(code) if code else None)


def _stored_outputs(prep: PreparedTask, state: StoreState, todo: set[int]) -> list[int]:
    out: list[int] = []
    for pos, (key, sha) in enumerate(zip(prep.samples.keys, prep.samples.shas)):
        if pos in todo:
            continue
        rec = state.answer(key, sha)
        tokens = rec.usage.get("output_tokens") if rec is not None else None
        if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0:
            out.append(tokens)
    return out


def estimate_task(cfg: RunConfig, data: DataDir, task: str, provider: str) -> TaskEstimate:
    prep = prepare_task(cfg, data, task)
    state = prep.store.read()
    todo = prep.samples.todo(state, cfg.keep_failed)
    system = text_tokens(cfg.system_prompt) if cfg.system_prompt else 0
    text = images = 0
    rule_known = provider in RULES
    for rd in prep.samples.rundocs(todo):
        row = rd.to_lmms_row()
        text += system + text_tokens(hooks.doc_to_text(row))
        if rule_known:
            for picture in hooks.doc_to_visual(row):
                images += image_tokens(provider, *picture.size) or 0
    stored = _stored_outputs(prep, state, set(todo))
    return TaskEstimate(task, prep.family, len(todo), text, images if rule_known else None, prep.gen.max_new_tokens,
                        statistics.median(stored) if stored else None)


def estimate_run(cfg: RunConfig, data: DataDir) -> RunEstimate:
    """The estimate of every task of a run of an API record (a UserError for another backend)."""
    if not cfg.record.is_api:
        raise UserError(f"--estimate prices API requests; {cfg.record.name} is a {cfg.record.backend} record (its "
                        "cost is the GPU time, not tokens)")
    provider, code = provider_of(cfg)
    f = cfg.model_flags
    price = price_entry(code, f.get("price_in"), f.get("price_out"), f.get("price_table"))
    tasks = [estimate_task(cfg, data, task, provider) for task in cfg.tasks]
    rule = RULES.get(provider)
    return RunEstimate(provider, code, rule.name if rule else None, price, tasks)
