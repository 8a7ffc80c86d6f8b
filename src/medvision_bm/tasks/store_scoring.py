"""Score the selected samples of a sample store from its stored answers: one code path for the runner (after a
task) and for `medvision-bm parse` (re-scoring old runs without asking any model).

It sits below the runner: it reads a store's answers through anything with the ``StoreState`` lookups
(``answer(key, doc_sha)`` and ``failed``), so the report never imports the runner's loop. The rows it returns are
what ``parsed.jsonl`` holds: the sample's place (index, family, task), upstream's grouping fields (dataset, label
name, modality, slice_dim; A/D metric type and key), the metric rules, and ``SampleScore.to_json()``.
"""

from __future__ import annotations

from typing import Any, Protocol

from medvision_bm.data.docs import Doc, RunDoc
from medvision_bm.tasks.scoring import SampleScore, failed_score, protocol_settings, score_answer

#: ``schema`` of every ``results.json`` (written by the runner and by `medvision-bm parse`).
RESULTS_SCHEMA = "medvision-results/1"


class AnswerLookup(Protocol):
    """What scoring reads of a store (``runner.store.StoreState`` provides it)."""

    failed: dict[str, dict[str, Any]]

    def answer(self, key: str, doc_sha: str) -> dict[str, Any] | None: ...


def group_fields(doc: Doc) -> dict[str, Any]:
    """What upstream's aggregation groups a sample by (label name, modality, plane; A/D metric)."""
    out: dict[str, Any] = {"dataset": doc.dataset_name, "label": doc.label, "label_name": doc.meta.get("label_name"),
                           "modality": doc.modality, "slice_dim": doc.slice_dim}
    if doc.family == "AD":
        bp = doc.biometric_profile or {}
        out.update(metric_type=bp.get("metric_type"), metric_key=bp.get("metric_key"))
    return out


def score_store(rundocs: list[RunDoc], shas: dict[str, str], state: AnswerLookup,
                parser: str | None = None) -> tuple[list[SampleScore], list[dict[str, Any]]]:
    """Score every selected sample from the store (the runner after a task; `medvision-bm parse` on old runs).

    ``parser`` overrides the protocol's parser (``medvision-bm parse --parser``); the metric rules stay the protocol's.
    """
    scores: list[SampleScore] = []
    rows: list[dict[str, Any]] = []
    for rd in rundocs:
        key = rd.doc.key
        settings = protocol_settings(rd.protocol)
        use_parser, rules = parser or settings["parser"], settings["rules"]
        rec = state.answer(key, shas[key])
        if rec is not None:
            sc = score_answer(rd.doc, rd.view, rec.get("text"), use_parser, rules)
        elif key in state.failed:
            sc = failed_score(rd.doc, rd.view, use_parser, rules, "request_failed",
                              str((state.failed[key] or {}).get("error") or "request failed")[:200])
        else:
            sc = failed_score(rd.doc, rd.view, use_parser, rules, "missing", "not answered yet")
        scores.append(sc)
        rows.append({"index": rd.doc.index, "family": rd.doc.family, "task": rd.doc.task, "rules": rules,
                     **group_fields(rd.doc), **sc.to_json()})
    return scores, rows
