"""A judged parse's rows and results from per-sample judge decisions: the scores the strict-first decision gives
(upstream's ``script/llm-parsing/apply_judge.py`` @2f20f64: a strict success stands, a verified judge answer is
scored with the same metrics, everything else is a failed parse), whoever decided them: ``medvision-bm judge`` or
an import of upstream's ``llm-parsed_<judge>/`` records."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.data.docs import Doc, View
from medvision_bm.io import write_lines_atomic
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.score.store_scoring import SCORING_VERSION
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.judged import JUDGE_PARSER_VERSION
from medvision_bm.store.layout import JudgedLayout
from medvision_bm.store.records import JUDGED_SCHEMA, Counts, ParsedRow, ResultsRecord, refuse_newer_lines
from medvision_bm.tasks.scoring import (
    DEFAULT_METRIC_PATH,
    ColumnsBuilder,
    SampleScore,
    aggregate_columns,
    failed_score,
    score_answer,
)

#: Upstream's answer modes (judge_config.py ANSWER_MODES @2f20f64); the first two count as a parsed answer.
ANSWER_MODES = ("conclusion_in_format", "conclusion_off_format", "no_conclusion", "undetermined")
SUCCESS_MODES = ANSWER_MODES[:2]


@dataclass(frozen=True)
class Decision:
    """What the judge step decided about one answered sample: upstream's answer mode and reason, the strict
    parser's prediction (its numbers joined by commas, "" when it failed), the numbers decided (upstream's
    ``LLM_filtered_resps``: the strict ones when the strict answer stands, the judge's verified ones for a
    recovery, None for a failure), the judge's own verified numbers whatever was decided (the evidence the
    judge's agreement with the strict parser is measured on) and the span tier that accepted them."""

    mode: str
    reason: str
    strict_pred: str
    answer: tuple[str, ...] | None = None
    judge_numbers: tuple[str, ...] | None = None
    tier: str | None = None

    def but(self, mode: str, reason: str) -> Decision:
        return Decision(mode, reason, self.strict_pred, None, self.judge_numbers, self.tier)


def judged_score(doc: Doc, view: View, rules: str, strict: SampleScore, decision: Decision) -> tuple[SampleScore,
                                                                                                        Decision]:
    """The score of one answered sample under its decision (and the decision, turned ``undetermined`` when the
    decided numbers cannot be scored): the strict score where the strict answer stands; otherwise the decided
    numbers scored as an ``<answer>`` of the strict parser (``", "``-joined: never read as one number with thousands
    separators), as upstream's ``cal_metrics`` scores ``LLM_filtered_resps``; a failed parse naming the mode when
    nothing was decided."""
    if decision.mode in SUCCESS_MODES:
        if decision.mode == "conclusion_in_format" and strict.success:
            return strict, decision
        if not decision.answer:
            decision = decision.but("undetermined", "judged answer not scorable: no numbers")
        else:
            sc = score_answer(doc, view, "<answer>" + ", ".join(decision.answer) + "</answer>", "strict-1", rules)
            if sc.success:
                return sc, decision
            decision = decision.but("undetermined", f"judged answer not scorable: {sc.reason}")
    if strict.status in ("parse_failed", "ok"):
        return failed_score(doc, view, JUDGE_PARSER_VERSION, rules, "parse_failed",
                            f"judge: {decision.mode} ({decision.reason})"), decision
    return strict, decision  # a request-failure marker stays a request failure


def judged_row(doc: Doc, rules: str, score: SampleScore, strict: SampleScore | None, decision: Decision | None,
               text: str | None) -> ParsedRow:
    """One row of a judged ``parsed.jsonl``: the strict parse's row (parser ``judge-1``) plus ``judge``, the
    decision and what upstream's judge report reads (``strict_pred`` and ``judge_pred`` as upstream's ``LLM_judge``
    block spells them, the response length); a sample without an answer has no ``judge``."""
    judge: JsonObject | None = None
    if decision is not None:
        nums = list(decision.judge_numbers) if decision.judge_numbers else None
        judge = {"mode": decision.mode, "reason": decision.reason,
                 "strict_values": list(strict.values) if strict is not None and strict.values else None,
                 "judge_numbers": list(nums) if nums else None, "tier": decision.tier if nums else None,
                 "strict_pred": decision.strict_pred, "judge_pred": ",".join(nums) if nums else "",
                 "response_chars": len(text or "")}
    return ParsedRow.of_score(doc, score, rules, parser=JUDGE_PARSER_VERSION, judge=judge)


def write_judged_parse(folder: Path, ref: StoreRef, protocol: str, rules: str, rows: Iterable[ParsedRow],
                       counts: Mapping[str, JsonValue], signature: str, inputs: Mapping[str, JsonValue],
                       complete: bool | Callable[[], bool]) -> ResultsRecord:
    """Write ``parsed.jsonl`` and ``results.json`` of a judged parse (atomically) for store ``ref``; return the
    results record written. ``rows`` may be made as they are written (the task metrics are gathered on the
    way, no row is kept): ``counts`` and ``complete`` (a bool, or a function asked once every row is written) are
    read after the last one."""
    files = JudgedLayout(folder)
    refuse_newer_lines(files.parsed, ParsedRow)  # a newer version's judged parse is refused, never rewritten
    ResultsRecord.read(files.results)
    cols = ColumnsBuilder(ref.family)

    def lines() -> Iterator[bytes]:
        for r in rows:
            cols.add(r.to_json())
            yield r.line()

    write_lines_atomic(files.parsed, lines())
    results = ResultsRecord(
        schema=JUDGED_SCHEMA, model_name=ref.model, task=ref.task, family=ref.family,
        answer_signature=ref.answer_signature, judge_signature=signature, judge=inputs,
        parser_version=JUDGE_PARSER_VERSION, protocol=protocol, metric_rules=rules,
        metric_path=DEFAULT_METRIC_PATH, scoring_version=SCORING_VERSION,
        metrics=aggregate_columns(ref.family, cols.columns(), rules), counts=Counts.of_judge(counts),
        complete=complete() if callable(complete) else complete, parsed_at=time.time())
    results.write(files.results)
    return results
