"""Reference baselines usable as models: oracle (the annotation), mean (train-split mean), random-box."""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Mapping, Sequence

from medvision_bm.data.docs import Doc
from medvision_bm.models.base import GenRequest, GenResult, ResultSink, SyncBackend
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scoring import format_answer, target


class PacedBackend(SyncBackend):
    """A synchronous backend that can wait a fixed time per answer, like a slow model (for resume drills)."""

    pace_s: float = 0.0

    def generate(self, requests: Sequence[GenRequest], on_result: ResultSink) -> None:
        if self.pace_s <= 0:
            return super().generate(requests, on_result)

        def paced(res: GenResult) -> None:
            time.sleep(self.pace_s)
            on_result(res)

        return super().generate(requests, paced)


class OracleBackend(PacedBackend):
    """Answers with the target itself: every metric must come out perfect."""

    name = "oracle"

    def answer(self, request: GenRequest) -> GenResult:
        return GenResult(request.key, format_answer(target(request.rundoc.doc, request.rundoc.view)),
                         finish_reason="stop")


class MeanBackend(PacedBackend):
    """Answers every sample of a task with the mean target of that task's train split."""

    name = "mean"

    def __init__(self, train_means: Mapping[str, Sequence[float]]) -> None:
        self.train_means = train_means

    def answer(self, request: GenRequest) -> GenResult:
        task = request.rundoc.doc.task
        if task not in self.train_means:
            raise KeyError(f"no train split for task {task}")
        return GenResult(request.key, format_answer(self.train_means[task]), finish_reason="stop")


class RandomBoxBackend(PacedBackend):
    """Uniformly random boxes (detection) seeded per sample; for other families, a random value in the train range."""

    name = "random-box"

    def __init__(self, seed: int = 0, train_ranges: dict[str, tuple[list[float], list[float]]] | None = None) -> None:
        self.seed = seed
        self.train_ranges = train_ranges or {}

    def answer(self, request: GenRequest) -> GenResult:
        doc = request.rundoc.doc
        digest = hashlib.sha256(f"{self.seed}:{doc.task}:{doc.key}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        if family_spec(doc.family).has_boxes:
            x0, x1 = sorted((rng.random(), rng.random()))
            y0, y1 = sorted((rng.random(), rng.random()))
            values: list[float] = [x0, y0, x1, y1]
        else:
            lo, hi = self.train_ranges.get(doc.task, ([0.0] * len(target(doc)), [1.0] * len(target(doc))))
            values = [rng.uniform(a, b) for a, b in zip(lo, hi)]
            if family_spec(doc.family).axes:
                values = sorted(values, reverse=True)
        return GenResult(request.key, format_answer(values), finish_reason="stop")


def train_statistics(train_docs: Mapping[str, Sequence[Doc]]) -> tuple[dict[str, list[float]], dict[str, tuple[list[float], list[float]]]]:
    """Per task: the mean target and the (min, max) range of targets over the train split."""
    means: dict[str, list[float]] = {}
    ranges: dict[str, tuple[list[float], list[float]]] = {}
    for task, docs in train_docs.items():
        targets = [t for t in (target(d) for d in docs) if all(math.isfinite(v) for v in t)]  # NaN: no range
        if not targets:
            continue
        k = len(targets[0])
        means[task] = [sum(t[i] for t in targets) / len(targets) for i in range(k)]
        ranges[task] = ([min(t[i] for t in targets) for i in range(k)], [max(t[i] for t in targets) for i in range(k)])
    return means, ranges
