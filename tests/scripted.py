"""A scripted model for the golden-file tests: per sample, by its position in the task, an exact answer, the target
plus 1 (T/L both axes, A/D the value), or no answer at all; detection: the target box, or no answer every fourth.

The answers are chosen so that every number of upstream's summary texts can be worked out by hand from the targets
(tests/report/fixtures/upstream_summaries/README.md)."""

from __future__ import annotations

from medvision_bm.models.base import GenRequest, GenResult, SyncBackend
from medvision_bm.tasks.scoring import format_answer, target

MODEL = "scripted"
#: Per family the tasks and the samples asked of each (``--sample_limit``): few enough to work out by hand.
TASKS = {
    "TL": {"PhantomCT_TumorLesionSize_Task02_Axial": 9, "PhantomMR_TumorLesionSize_Task01_Coronal": 9},
    "AD": {"PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal": 8,
           "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal": 8},
    "detect": {"PhantomCT_BoxCoordinate_Task01_Axial": 135},
}
LIMIT = {"TL": 9, "AD": 8, "detect": 135}


def scripted_answer(family: str, index: int, values: list[float]) -> str:
    """The answer to the ``index``-th sample of a task whose target is ``values``."""
    if family == "detect":
        return "I cannot tell." if index % 4 == 3 else format_answer(values)
    kind = index % 3
    if kind == 0:
        return format_answer(values)
    if kind == 1:
        return format_answer([v + 1.0 for v in values])
    return "The lesion is not measurable here."


class ScriptedBackend(SyncBackend):
    name = "scripted"

    def answer(self, request: GenRequest) -> GenResult:
        doc = request.rundoc.doc
        return GenResult(request.key, scripted_answer(doc.family, doc.index, list(target(doc))), finish_reason="stop")


def scripted_factory(cfg, data) -> ScriptedBackend:
    return ScriptedBackend()


class NothingParses(SyncBackend):
    """A model whose every answer is prose without a number: all of its samples fail to parse."""

    name = "nothing-parses"

    def answer(self, request: GenRequest) -> GenResult:
        return GenResult(request.key, "I cannot measure this.", finish_reason="stop")
