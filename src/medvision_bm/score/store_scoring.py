"""Score the selected samples of a sample store from its stored answers: one code path for the runner (after a
task), for `medvision-bm parse` (re-scoring old runs without asking any model) and for the judge's strict parse.

It sits below the runner: it reads a store's answers through anything with the ``StoreState`` lookups
(``answer(key, doc_sha)`` and ``failed``), so the report never imports the runner's loop. The rows it returns are
``parsed.jsonl``'s records (``store.records.ParsedRow``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Protocol

import orjson

from medvision_bm import __version__
from medvision_bm.data.docs import RunDoc
from medvision_bm.store.records import RESULTS_SCHEMA, AnswerRecord, ParsedRow, ResultsRecord
from medvision_bm.tasks.scoring import (
    DEFAULT_METRIC_PATH,
    METRIC_PATHS,
    PARSERS,
    ProtocolSettings,
    SampleScore,
    ScoreMemo,
    check_metric_path,
    failed_score,
    protocol_settings,
    score_answer,
)
from medvision_bm.tasks.upstream_parse import PARSER_VERSIONS, SampleStatus

#: Bumped whenever how a stored answer becomes a score changes in code not named by the parser or the metric rules
#: (it enters ``scoring_key``: rows scored under another version are scored again). 2: the metric path (a negative
#: A/D prediction is a success on the default post-hoc path).
SCORING_VERSION = 2


class AnswerLookup(Protocol):
    """What scoring reads of a store (``store.samples.StoreState`` provides it)."""

    failed: dict[str, AnswerRecord]

    def answer(self, key: str, doc_sha: str) -> AnswerRecord | None: ...


def failure_reason(rec: AnswerRecord) -> str:
    """What a failed request's row says of it (its error, cut to 200 characters)."""
    return str(rec.error or "request failed")[:200]


def score_sample(rd: RunDoc, doc_sha: str, state: AnswerLookup, parser: str, rules: str, metric_path: str,
                 memo: ScoreMemo | None = None) -> tuple[SampleScore, AnswerRecord | None]:
    """One selected sample's score and the record it was made from (its stored answer, else its failed request,
    else None). A score the task run already made of this very answer (``memo``) is taken instead of scoring it
    again."""
    key = rd.doc.key
    rec = state.answer(key, doc_sha)
    if rec is not None:
        sc = memo.take(key, rec.text, parser, rules, metric_path) if memo is not None else None
        return sc or score_answer(rd.doc, rd.view, rec.text, parser, rules, metric_path), rec
    failed = state.failed.get(key)
    if failed is not None:
        return failed_score(rd.doc, rd.view, parser, rules, SampleStatus.REQUEST_FAILED, failure_reason(failed),
                            metric_path), failed
    return failed_score(rd.doc, rd.view, parser, rules, SampleStatus.MISSING, "not answered yet", metric_path), None


def score_store(rundocs: list[RunDoc], shas: dict[str, str], state: AnswerLookup, parser: str | None = None,
                metric_path: str = DEFAULT_METRIC_PATH) -> tuple[list[SampleScore], list[ParsedRow]]:
    """Score every selected sample from the store (`medvision-bm parse` on old runs, summaries of stale stores).

    ``parser`` overrides the protocol's parser (``medvision-bm parse --parser``); the metric rules stay the protocol's.
    ``metric_path`` picks upstream's post-hoc (default) or eval-time scoring (``tasks.scoring.METRIC_PATHS``).
    """
    scores: list[SampleScore] = []
    rows: list[ParsedRow] = []
    for sc, row in iter_scores(rundocs, shas, state, parser, metric_path):
        scores.append(sc)
        rows.append(row)
    return scores, rows


def iter_scores(rundocs: list[RunDoc], shas: dict[str, str], state: AnswerLookup, parser: str | None = None,
                metric_path: str = DEFAULT_METRIC_PATH) -> Iterator[tuple[SampleScore, ParsedRow]]:
    """``score_store`` one sample at a time: (score, parsed.jsonl row) per selected sample, in selection order."""
    check_metric_path(metric_path)
    settings_of: dict[str, ProtocolSettings] = {}
    for rd in rundocs:
        settings = settings_of.get(rd.protocol)
        if settings is None:
            settings = settings_of[rd.protocol] = protocol_settings(rd.protocol)
        rules = settings.rules
        sc, _ = score_sample(rd, shas[rd.doc.key], state, parser or settings.parser, rules, metric_path)
        yield sc, ParsedRow.of_score(rd.doc, sc, rules)


def scoring_key(family: str, protocol: str, parser: str | None = None,
                metric_path: str = DEFAULT_METRIC_PATH) -> str:
    """A hash of everything besides a sample's doc and answer that its parsed row depends on: the results schema,
    ``SCORING_VERSION``, this package's version, upstream's parser versions, the parser, the protocol's metric
    rules, the metric path and the family. Rows scored under another key are scored again."""
    settings = protocol_settings(protocol)
    return hashlib.blake2b(orjson.dumps([
        RESULTS_SCHEMA, SCORING_VERSION, __version__, PARSER_VERSIONS, family, protocol,
        parser or settings.parser, settings.rules, check_metric_path(metric_path)]), digest_size=16).hexdigest()


def current_scoring(results: ResultsRecord | None) -> bool:
    """Whether a results.json says its parse was made by this version's upstream scoring: a parser of ``PARSERS``,
    metric rules, a metric path of ``METRIC_PATHS`` and this ``SCORING_VERSION`` (``store.freshness``'s scoring
    check; None: there is no results.json, so nothing says which scoring made the parse)."""
    return results is not None and results.parser_version in PARSERS and bool(results.metric_rules) \
        and results.metric_path in METRIC_PATHS and results.scoring_version == SCORING_VERSION
