"""Score the selected samples of a sample store from its stored answers: one code path for the runner (after a
task) and for `medvision-bm parse` (re-scoring old runs without asking any model).

It sits below the runner: it reads a store's answers through anything with the ``StoreState`` lookups
(``answer(key, doc_sha)`` and ``failed``), so the report never imports the runner's loop. The rows it returns are
what ``parsed.jsonl`` holds: the sample's place (index, family, task), upstream's grouping fields (dataset, label
name, modality, slice_dim; A/D metric type and key), the metric rules, and ``SampleScore.to_json()`` (which names the
metric path it was scored on).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, Protocol

import orjson

from medvision_bm import __version__
from medvision_bm.data.docs import Doc, RunDoc
from medvision_bm.tasks.scoring import (
    DEFAULT_METRIC_PATH,
    SampleScore,
    check_metric_path,
    failed_score,
    protocol_settings,
    score_answer,
)
from medvision_bm.tasks.upstream_parse import PARSER_VERSIONS

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


def score_store(rundocs: list[RunDoc], shas: dict[str, str], state: AnswerLookup, parser: str | None = None,
                metric_path: str = DEFAULT_METRIC_PATH) -> tuple[list[SampleScore], list[dict[str, Any]]]:
    """Score every selected sample from the store (the runner after a task; `medvision-bm parse` on old runs).

    ``parser`` overrides the protocol's parser (``medvision-bm parse --parser``); the metric rules stay the protocol's.
    ``metric_path`` picks upstream's post-hoc (default) or eval-time scoring (``tasks.scoring.METRIC_PATHS``).
    """
    scores: list[SampleScore] = []
    rows: list[dict[str, Any]] = []
    for sc, row in iter_scores(rundocs, shas, state, parser, metric_path):
        scores.append(sc)
        rows.append(row)
    return scores, rows


def iter_scores(rundocs: list[RunDoc], shas: dict[str, str], state: AnswerLookup, parser: str | None = None,
                metric_path: str = DEFAULT_METRIC_PATH) -> Iterator[tuple[SampleScore, dict[str, Any]]]:
    """``score_store`` one sample at a time: (score, parsed.jsonl row) per selected sample, in selection order."""
    check_metric_path(metric_path)
    settings_of: dict[str, dict[str, Any]] = {}
    for rd in rundocs:
        key = rd.doc.key
        settings = settings_of.get(rd.protocol)
        if settings is None:
            settings = settings_of[rd.protocol] = protocol_settings(rd.protocol)
        use_parser, rules = parser or settings["parser"], settings["rules"]
        rec = state.answer(key, shas[key])
        if rec is not None:
            sc = score_answer(rd.doc, rd.view, rec.get("text"), use_parser, rules, metric_path)
        elif key in state.failed:
            sc = failed_score(rd.doc, rd.view, use_parser, rules, "request_failed",
                              str((state.failed[key] or {}).get("error") or "request failed")[:200], metric_path)
        else:
            sc = failed_score(rd.doc, rd.view, use_parser, rules, "missing", "not answered yet", metric_path)
        yield sc, {"index": rd.doc.index, "family": rd.doc.family, "task": rd.doc.task, "rules": rules,
                   **group_fields(rd.doc), **sc.to_json()}


#: Bumped whenever how a stored answer becomes a score changes in code not named by the parser or the metric rules:
#: results.json remembers the digest its scores were made from (``scoring_digest``), a rerun re-scores only when it
#: differs. 2: the metric path (a negative A/D prediction is a success on the default post-hoc path).
SCORING_VERSION = 2


def scoring_digest(rundocs: list[RunDoc], shas: dict[str, str], state: AnswerLookup, parser: str | None = None,
                   metric_path: str = DEFAULT_METRIC_PATH) -> str:
    """A hash of everything ``score_store`` reads: the code and rule versions, and per selected sample its key, doc
    hash, protocol, and the stored answer line's hash (or the failure, or nothing). Equal digests give equal scores."""
    h = hashlib.blake2b(digest_size=16)
    h.update(orjson.dumps([RESULTS_SCHEMA, SCORING_VERSION, __version__, parser, PARSER_VERSIONS,
                           check_metric_path(metric_path)]))
    answer_hash = getattr(state, "answer_hash", None)  # the runner's store state: lines are not read again
    settings_of: dict[str, str] = {}
    for rd in rundocs:
        key = rd.doc.key
        sha = shas[key]
        proto = settings_of.get(rd.protocol)
        if proto is None:
            st = protocol_settings(rd.protocol)
            proto = settings_of[rd.protocol] = f"{rd.protocol}\0{st['parser']}\0{st['rules']}"
        h.update(f"{key}\0{sha}\0{proto}\0".encode())
        if answer_hash is not None:
            line_hash = answer_hash(key, sha)
            line = None if line_hash is None else line_hash.to_bytes(8, "little")
        else:
            rec = state.answer(key, sha)
            line = None if rec is None else orjson.dumps(rec.get("text"))
        if line is not None:
            h.update(b"A")
            h.update(line)
        elif key in state.failed:
            h.update(b"F")
            h.update(orjson.dumps((state.failed[key] or {}).get("error")))
        else:
            h.update(b"M")
        h.update(b"\n")
    return h.hexdigest()
