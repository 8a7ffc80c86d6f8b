"""The image-dependence check: K samples of a task asked with their real slice, a blank and a shuffled one.

A wrong processor, a dropped image or an adapter that ignores the image still gives plausible T/L and A/D numbers
(the prompt states the image and pixel size, so a text-only prior scores), and shows only after a whole sweep.
The check asks the same K samples several times, each time with another picture and the very same prompt:

``real``        the slice as a run shows it (``tasks.hooks.doc_to_visual``, or its grey twin for API engines)
``blank``       an image of the same size and mode, every pixel the constant grey ``BLANK_GREY``
``shuffled``    the real slice of the next sample of the check (the last takes the first's), resized to this
                sample's size (bilinear) so the prompt's stated size still holds; with one sample only, this
                slice's own pixels permuted (seed ``SHUFFLE_SEED``)
``real-again``  the real slice asked once more, only when the model samples (temperature above 0): how far two
                askings of the same picture land apart, which another picture must beat

The K samples are spread evenly over the task (``spread_indices``), so they come from several volumes. Answers are
parsed and scored as a run's are. The answers to each picture go to a sample store of their own, under
``<results_dir>/.check-vision/`` (``store.layout.CheckLayout``) and with a signature of their own: a run's store never
holds them and a rerun of the check asks only what is missing.

The verdict: ``unreadable`` when no answer to the real slice parses (the check cannot see an effect),
``incomplete`` when a request failed, else ``depends`` or ``ignores``. A greedy model depends on the image when the
parsed answer to the blank or the shuffled picture differs from the real one's in at least one sample (the same
prompt and picture give the same answer). A sampling model's answers differ anyway: per sample, the answer to the
other picture must land farther from the real one's (sum of absolute differences of the parsed values; a parse
failure on one side only is infinitely far) than the real-again answer does, in so many samples that a one-sided
sign test gives p <= ``SAMPLING_P`` for the blank or the shuffled picture (at least 5 samples are needed). The
metric on each picture (detection IoU, else MRE) and a paired sign test (real against blank) go with it: a model
that sees the image should do better on it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from medvision_bm.data.docs import RunDoc
from medvision_bm.data.layout import DataDir
from medvision_bm.io import write_json_atomic
from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.base import Backend, GenRequest, GenResult
from medvision_bm.runner.config import RunConfig
from medvision_bm.runner.loop import PreparedTask, prepare_task
from medvision_bm.store.layout import CheckLayout
from medvision_bm.store.samples import SampleStore
from medvision_bm.store.signature import digest
from medvision_bm.tasks import hooks
from medvision_bm.tasks.families import FamilyView
from medvision_bm.tasks.scoring import SampleScore, protocol_settings, score_answer

if TYPE_CHECKING:  # PIL loads only where a picture is made
    from PIL.Image import Image as PILImage

#: Bumped whenever the pictures, the selection or the verdict rule change (it enters the check's signature).
CHECK_VERSION = 1
BLANK_GREY = 128
SHUFFLE_SEED = 0
#: The one-sided sign-test level a sampling model's answers must reach to be shown to follow the image.
SAMPLING_P = 0.05
REAL, BLANK, SHUFFLED, REAL_AGAIN = "real", "blank", "shuffled", "real-again"
DEPENDS, IGNORES, UNREADABLE, INCOMPLETE = "depends", "ignores", "unreadable", "incomplete"
#: Verdicts that stop a preflight: the answers are not shown to follow the image.
FLAGGED = frozenset({IGNORES, UNREADABLE, INCOMPLETE})
#: The metric the check compares per family, and whether higher is better.
CHECK_METRIC: Mapping[str, tuple[str, bool]] = FamilyView(lambda s: s.ranked_by)


def spread_indices(n: int, k: int, among: Sequence[int] | None = None) -> list[int]:
    """``k`` doc indices spread evenly over a task of ``n`` samples (or over the indices ``among``), the first
    included; all of them when there are at most ``k``."""
    pool = list(among) if among is not None else list(range(n))
    if len(pool) <= k:
        return pool
    return [pool[(i * len(pool)) // k] for i in range(k)]


def one_sided_p(wins: int, n: int) -> float:
    """P(at least ``wins`` of ``n`` fair coin flips): the one-sided sign test."""
    return sum(math.comb(n, i) for i in range(wins, n + 1)) / 2**n if n else 1.0


def sign_test_p(wins: int, losses: int) -> float | None:
    """Two-sided exact sign test of ``wins`` against ``losses`` (ties left out); None without a pair."""
    n = wins + losses
    if n == 0:
        return None
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class VisionCheck:
    """One task's check: the verdict and the numbers behind it (written as ``check.json``)."""

    VERSION = 1

    task: str
    family: str
    model_name: str
    k: int
    conditions: tuple[str, ...]
    verdict: str
    parsed: dict[str, int]  # condition -> answers that parse
    failed: dict[str, int]  # condition -> requests without an answer
    changed: dict[str, int]  # condition -> samples whose parsed answer differs from the real slice's
    texts_changed: dict[str, int]  # condition -> samples whose raw answer text differs from the real slice's
    metric: str
    higher_is_better: bool
    metric_means: dict[str, float | None]  # condition -> mean metric over the samples that have it
    #: sampling models: condition -> samples whose answer lands farther from the real one's than the real-again one
    farther: dict[str, int]
    farther_p: float | None  # the one-sided sign test of the better of blank and shuffled (sampling models)
    real_better: int  # pairs (real, blank) where the real slice's metric is better
    blank_better: int
    sign_p: float | None
    check_signature: str
    folder: Path
    keys: list[str] = field(default_factory=list)

    @property
    def flagged(self) -> bool:
        return self.verdict in FLAGGED

    def line(self) -> str:
        """The verdict in one line, with its numbers."""
        k = self.k
        head = {DEPENDS: "answers depend on the image",
                IGNORES: "ANSWERS DO NOT DEPEND ON THE IMAGE",
                UNREADABLE: f"CANNOT TELL: none of the {k} answers to the real slice parse",
                INCOMPLETE: "INCOMPLETE: some requests failed (rerun to ask them again)"}[self.verdict]
        parts = [f"{self.task}: {head}", f"K={k}"]
        changes = [f"{self.changed[c]}/{k} changed with a {c} slice" for c in (BLANK, SHUFFLED)]
        if REAL_AGAIN in self.changed:
            changes.append(f"{self.changed[REAL_AGAIN]}/{k} on asking the real one again; farther than that: "
                           f"blank {self.farther[BLANK]}/{k}, shuffled {self.farther[SHUFFLED]}/{k} "
                           f"(one-sided sign test p={_fmt(self.farther_p)})")
        parts.append(", ".join(changes) + f" (texts: {self.texts_changed[BLANK]}/{k}, "
                                          f"{self.texts_changed[SHUFFLED]}/{k})")
        parts.append(f"parsed {self.parsed[REAL]}/{k} real, {self.parsed[BLANK]}/{k} blank, "
                     f"{self.parsed[SHUFFLED]}/{k} shuffled")
        means = ", ".join(f"{c} {_fmt(self.metric_means.get(c))}" for c in (REAL, BLANK, SHUFFLED))
        parts.append(f"{self.metric} {means}")
        p = "n/a" if self.sign_p is None else f"{self.sign_p:.3g}"
        parts.append(f"real better than blank in {self.real_better} of {self.real_better + self.blank_better} "
                     f"untied pairs (sign test p={p})")
        failed = sum(self.failed.values())
        if failed:
            parts.append(f"{failed} request(s) failed")
        return "; ".join(parts)

    def to_json(self) -> JsonObject:
        """What ``check.json`` holds (no absolute path: the results folder moves as a whole)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "folder"}
        out.update(version=self.VERSION, conditions=list(self.conditions), flagged=self.flagged)
        return out


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def check_conditions(cfg: RunConfig, family: str) -> tuple[str, ...]:
    """The pictures asked: real, blank, shuffled, and the real one again when the model samples."""
    gen = cfg.gen_for_task(family)
    return (REAL, BLANK, SHUFFLED) + ((REAL_AGAIN,) if gen.temperature else ())


def check_inputs(prep: PreparedTask, conditions: Sequence[str]) -> JsonObject:
    """What the check's signature is made of: the run's answer-signature inputs and the check's own rules."""
    return {"answer": prep.answer_inputs,
            "image_check": {"version": CHECK_VERSION, "conditions": list(conditions), "blank_grey": BLANK_GREY,
                            "shuffle": "next sample's slice, bilinear to this size; one sample: pixels permuted",
                            "shuffle_seed": SHUFFLE_SEED, "doc_shas": [*prep.samples.sorted_shas()]}}


def _blank(img: PILImage) -> PILImage:
    from PIL import Image

    fill: int | tuple[int, ...] = BLANK_GREY if img.mode == "L" else (BLANK_GREY,) * len(img.getbands())
    return Image.new(img.mode, img.size, fill)


def _shuffled(img: PILImage, other: PILImage | None) -> PILImage:
    from PIL import Image

    if other is not None:
        other = other.convert(img.mode)
        return other if other.size == img.size else other.resize(img.size, Image.Resampling.BILINEAR)
    import numpy as np

    pixels = np.asarray(img)
    flat = pixels.reshape(pixels.shape[0] * pixels.shape[1], -1)
    perm = np.random.default_rng(SHUFFLE_SEED).permutation(flat.shape[0])
    return Image.fromarray(flat[perm].reshape(pixels.shape), img.mode)


def _pictures(visual: Callable[[Mapping[str, object]], list[PILImage]], rows: Sequence[Mapping[str, object]],
              pos: int, condition: str) -> list[PILImage]:
    """The images of sample ``pos`` shown under ``condition``."""
    real = visual(rows[pos])
    if condition in (REAL, REAL_AGAIN):
        return real
    if condition == BLANK:
        return [_blank(img) for img in real]
    other: Sequence[PILImage | None] = visual(rows[(pos + 1) % len(rows)]) if len(rows) > 1 else [None] * len(real)
    return [_shuffled(img, o) for img, o in zip(real, other)]


def _distance(a: SampleScore, b: SampleScore) -> float:
    """How far two parsed answers lie apart: the sum of absolute differences of their values (0 when neither
    parses, infinite when one only does)."""
    if a.values is None or b.values is None or len(a.values) != len(b.values):
        return 0.0 if a.values is None and b.values is None else math.inf
    return float(sum(abs(float(x) - float(y)) for x, y in zip(a.values, b.values)))


def _outcome(score: SampleScore) -> tuple[object, ...]:
    """What counts as 'the same answer': the parsed values (rounded), or the parse status when none."""
    if score.values is not None:
        return ("ok", *(round(float(v), 6) for v in score.values))
    return (str(score.status),)


class VisionChecker:
    """Runs the check of the tasks of one RunConfig with one backend (made on first use by ``backend_factory``)."""

    def __init__(self, cfg: RunConfig, backend_factory: Callable[[RunConfig, DataDir], Backend], k: int,
                 log: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        self.data = DataDir(cfg.contract)
        self.backend_factory = backend_factory
        self.k = k
        self.log = log or (lambda line: print(line, file=sys.stderr))
        self._backend: Backend | None = None

    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.backend_factory(self.cfg, self.data)
        return self._backend

    def prepare(self, task: str) -> PreparedTask:
        """The task's K samples, resolved as a run resolves them (same docs, views, prompts and answer inputs)."""
        cfg = self.cfg
        n = len(self.data.samples(task)) if cfg.sample_indices is None else 0
        picked = spread_indices(n, self.k, cfg.sample_indices)
        return prepare_task(dataclasses.replace(cfg, sample_indices=picked, sample_limit=None, tasks={}), self.data, task)

    def check(self, task: str) -> VisionCheck:
        prep = self.prepare(task)
        conditions = check_conditions(self.cfg, prep.family)
        inputs = check_inputs(prep, conditions)
        check_sig = digest(inputs)
        layout = CheckLayout.under(self.cfg.results_dir, self.cfg.model_name, task, check_sig)
        rundocs = prep.rundocs
        rows = [rd.to_lmms_row() for rd in rundocs]
        texts: dict[str, list[str | None]] = {}
        failed: dict[str, int] = {}
        for condition in conditions:
            texts[condition], failed[condition] = self._ask(prep, layout, inputs, condition, rundocs, rows)
        return self._verdict(prep, conditions, rundocs, texts, failed, check_sig, layout)

    def _ask(self, prep: PreparedTask, layout: CheckLayout, inputs: JsonObject, condition: str,
             rundocs: Sequence[RunDoc], rows: Sequence[Mapping[str, object]]) -> tuple[list[str | None], int]:
        """Ask the samples not answered yet under ``condition``; the answer texts in selection order."""
        cond_inputs = {**inputs, "condition": condition}
        store = SampleStore(layout.condition(condition), digest(cond_inputs))
        store.init(cond_inputs)
        store.write_docs(prep.samples.doc_rows(), selection_digest=prep.samples.docs_digest())
        state = store.read()
        keys, shas = prep.samples.keys, prep.samples.shas
        todo = prep.samples.todo(state, keep_failed=False)
        if todo:
            backend = self.backend()
            visual = hooks.doc_to_visual_gray if getattr(backend, "takes_gray_slices", False) else hooks.doc_to_visual
            self.log(f"{prep.task}: asking {len(todo)} of {len(rundocs)} samples with the {condition} slice")
            requests = [GenRequest(key=keys[p], prompt=hooks.doc_to_text(rows[p]), rundoc=rundocs[p], gen=prep.gen,
                                   system_prompt=self.cfg.system_prompt,
                                   image_loader=functools.partial(_pictures, visual, rows, p, condition),
                                   image_variant=None if condition in (REAL, REAL_AGAIN) else condition)
                        for p in todo]
            by_key = {r.key: (p, r) for p, r in zip(todo, requests)}
            writer = store.writer("check")
            try:
                def on_result(res: GenResult) -> None:
                    p, request = by_key[res.key]
                    request.release_images()
                    writer.append(res, index=rundocs[p].doc.index, doc_sha=shas[p])

                backend.generate(requests, on_result)
            finally:
                writer.close()
            store.refresh(state)
        out: list[str | None] = []
        n_failed = 0
        for key, sha in zip(keys, shas):
            rec = state.answer(key, sha)
            out.append(rec.text if rec is not None else None)
            n_failed += rec is None
        state.close()
        return out, n_failed

    def _verdict(self, prep: PreparedTask, conditions: Sequence[str], rundocs: Sequence[RunDoc],
                 texts: dict[str, list[str | None]], failed: dict[str, int], check_sig: str,
                 layout: CheckLayout) -> VisionCheck:
        proto = protocol_settings(self.cfg.protocol)
        scores = {c: [score_answer(rd.doc, rd.view, t, proto.parser, proto.rules)
                      for rd, t in zip(rundocs, texts[c])] for c in conditions}
        metric, higher = CHECK_METRIC[prep.family]
        real = scores[REAL]
        changed = {c: sum(_outcome(a) != _outcome(b) for a, b in zip(real, scores[c])) for c in conditions
                   if c != REAL}
        texts_changed = {c: sum(a != b for a, b in zip(texts[REAL], texts[c])) for c in conditions if c != REAL}
        parsed = {c: sum(s.values is not None for s in scores[c]) for c in conditions}
        means: dict[str, float | None] = {}
        for c in conditions:
            vals = [s.metrics.get(metric) for s in scores[c]]
            present = [float(v) for v in vals if v is not None and math.isfinite(float(v))]
            means[c] = sum(present) / len(present) if present else None
        wins = losses = 0
        for a, b in zip(real, scores[BLANK]):
            va, vb = a.metrics.get(metric), b.metrics.get(metric)
            if va is None or vb is None or va == vb:
                continue
            if (va > vb) == higher:
                wins += 1
            else:
                losses += 1
        farther: dict[str, int] = {}
        farther_p: float | None = None
        if REAL_AGAIN in scores:
            again = [_distance(a, b) for a, b in zip(real, scores[REAL_AGAIN])]
            farther = {c: sum(_distance(a, b) > d for a, b, d in zip(real, scores[c], again)) for c in (BLANK, SHUFFLED)}
            farther_p = one_sided_p(max(farther.values()), len(real))
            follows = farther_p <= SAMPLING_P
        else:
            follows = max(changed[BLANK], changed[SHUFFLED]) > 0
        if any(failed.values()):
            verdict = INCOMPLETE
        elif parsed[REAL] == 0:
            verdict = UNREADABLE
        else:
            verdict = DEPENDS if follows else IGNORES
        result = VisionCheck(task=prep.task, family=prep.family, model_name=self.cfg.model_name, k=len(rundocs),
                             conditions=tuple(conditions), verdict=verdict, parsed=parsed, failed=failed,
                             changed=changed, texts_changed=texts_changed, metric=metric, higher_is_better=higher,
                             metric_means=means, farther=farther, farther_p=farther_p, real_better=wins, blank_better=losses,
                             sign_p=sign_test_p(wins, losses), check_signature=check_sig, folder=layout.folder,
                             keys=list(prep.samples.keys))
        write_json_atomic(layout.check_file, result.to_json())
        return result

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def run(self, tasks: Sequence[str], on_check: Callable[[VisionCheck], None] | None = None,
            close: bool = True) -> list[VisionCheck]:
        """Check every task in order (each task's line handed to ``on_check`` as it is made)."""
        out: list[VisionCheck] = []
        try:
            for task in tasks:
                result = self.check(task)
                out.append(result)
                if on_check is not None:
                    on_check(result)
        finally:
            if close:
                self.close()
        return out


def first_task_per_family(tasks: Sequence[str]) -> list[str]:
    """The tasks a preflight checks: the first of each family in the list's order."""
    from medvision_bm.data.layout import parse_task_name

    seen: set[str] = set()
    out: list[str] = []
    for task in tasks:
        family = parse_task_name(task).family
        if family not in seen:
            seen.add(family)
            out.append(task)
    return out
