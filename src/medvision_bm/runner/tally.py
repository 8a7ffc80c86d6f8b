"""What a task's finish reports (metrics, counts, usage): from parsed rows just brought up to date, or, when nothing
changed since the finish that completed it, from its results.json without reading an answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from medvision_bm.runner.selection_cache import code_identity
from medvision_bm.score.store_scoring import scoring_key
from medvision_bm.store.finish import FileIds, unchanged_since_finish
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import ResultsRecord, Usage
from medvision_bm.store.samples import StoreState
from medvision_bm.store.signature import digest

if TYPE_CHECKING:
    from medvision_bm.score.follow import Followed

#: The counts of a store's reading that results.json reports beside the selection's.
STORE_COUNTS = ("store_bad_lines", "store_foreign_lines", "store_duplicates")


@dataclass(frozen=True)
class Tally:
    """What a finish reports of a task's selection: its metrics, counts (the selection's and the store's) and usage,
    and how many answers it scored."""

    metrics: dict[str, float | None]
    counts: dict[str, int]
    usage: Usage
    rescored: int

    @classmethod
    def of_followed(cls, followed: Followed, state: StoreState) -> Tally:
        """Of parsed rows just brought up to date (``score.follow``) from the store as ``state`` read it."""
        store = {"store_bad_lines": state.bad_lines, "store_foreign_lines": state.foreign_lines,
                 "store_duplicates": state.duplicates}
        return cls(followed.metrics(), {**followed.counts(), **store}, followed.usage(), followed.rescored)

    @classmethod
    def of_results(cls, kept: ResultsRecord | None) -> Tally:
        """As the results.json of a finish that nothing changed since reports it (nothing scored again)."""
        if kept is None or kept.counts is None or kept.metrics is None:
            raise ValueError("a finish's tally needs the follow of a store state or a complete results.json")
        # a run's finish writes its metrics as numbers or null and its counts as integers (``finished_results``
        # checks the selection's before a finish is taken): nothing else is carried over
        metrics = {k: v for k, v in kept.metrics.items()
                   if v is None or (isinstance(v, int | float) and not isinstance(v, bool))}
        counts = {k: v for k, v in kept.counts.to_json().items() if isinstance(v, int) and not isinstance(v, bool)}
        return cls(metrics, counts, kept.usage or Usage(), 0)


def scoring_of(family: str, protocol: str) -> str:
    """What a task's parsed rows are scored by: their scoring key (parser, rules, versions) and the code."""
    return digest([scoring_key(family, protocol), code_identity()])


def finished_results(files: StoreLayout, run_sig: str, scoring: str, answers: FileIds) -> ResultsRecord | None:
    """The store's results.json when the run that wrote it completed ``run_sig`` under ``scoring`` and no answer
    segment (``answers``: as they are now), docs, parsed rows or results file changed since (``store.finish``)."""
    if not unchanged_since_finish(files, run_sig, scoring, answers):
        return None
    kept = ResultsRecord.read(files.results())
    if kept is None or not kept.complete or kept.error or kept.run_signature != run_sig:
        return None
    if kept.counts is None or not isinstance(kept.metrics, dict):
        return None
    counts = kept.counts.to_json()
    if any(not isinstance(counts.get(k), int) for k in ("selected", "answered", "request_failed", "pending",
                                                         *STORE_COUNTS)):
        return None
    return kept
