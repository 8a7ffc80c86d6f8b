"""Upstream's judge report over judged parses: how much of the strict parser's failure was format, how many answers
were never given, whether the judge agrees with the strict parser where that parser succeeded, which spans it could
not point at, and whether the recovered answers are longer than the ones parsed at once; per run and pooled.

Upstream: YongchengYAO/MedVision ``script/llm-parsing/summarize_judge_task.py`` and ``judge_stats.py`` @2f20f64
(``decompose_failures``, ``judge_validity``, ``length_stratification``); the text format is the one that printed
``Paper-results-backup/Detect/summary_judge_task__llm-parsed_gemma-4-31b.txt`` @755a7bb. Each judged row's ``judge``
block carries what those read of upstream's ``llm-parsed`` records: the answer mode (``LLM_judge_answer_mode``),
the reason, ``strict_pred`` and ``judge_pred`` (``LLM_judge``) and the response length (``len(resps[0][0])``).
Upstream's Job B coverage block is not computed: the judge's step extractions are stored but not span-checked here.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np

from medvision_bm.io import write_text_atomic
from medvision_bm.report.upstream_summaries import _folder
from medvision_bm.report.views import FAMILY_NAMES, View, fmt
from medvision_bm.score.judged import ANSWER_MODES
from medvision_bm.store.records import ParsedRow, iter_lines
from medvision_bm.tasks.families import family_spec

#: upstream's task type per family (the report's title) and its per-model file (judge_config.py @2f20f64)
METRICS_FILE = "summary_metrics_judge_Task.json"
#: the fields of a judged row's ``judge`` block the report reads (judged parses older than the report lack them)
NEEDED = ("mode", "reason", "strict_pred", "judge_pred", "response_chars")
EXAMPLES = 20
NAN = float("nan")


def _rate(num: int, den: int) -> float:
    return num / den if den else NAN


def _chars(v: object) -> int:
    """A block's ``response_chars`` as ``int()`` reads it (and refuses it)."""
    if isinstance(v, (int, float, str)):
        return int(v)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not "
                    f"'{type(v).__name__}'")


#: A judged row's ``judge`` block (the fields of NEEDED, as the judge stage wrote them).
Block = Mapping[str, object]


class FailureDecomposition(TypedDict):
    """The strict parser's failures split by the judge (upstream's ``decompose_failures``)."""

    n_samples: int
    n_strict_parsed: int
    n_judge_parsed: int
    n_strict_failed: int
    n_format_failure: int
    n_genuine_non_answer: int
    success_rate_strict: float
    success_rate_judge: float
    delta_success_rate: float
    format_failure_share: float
    non_answer_rate: float
    n_no_conclusion: int
    n_undetermined: int
    no_conclusion_rate: float
    undetermined_rate: float
    by_mode: dict[str, int]


class JudgeValidity(TypedDict):
    """The judge's agreement with the strict parser and its unusable replies (``judge_validity``)."""

    n_reference: int
    n_agree: int
    agreement_rate: float
    n_value_disagreement: int
    n_no_value_disagreement: int
    no_value_disagreement_reasons: dict[str, int]
    judge_invalid_rate: float
    span_unverified_rate: float
    judge_missing_rate: float
    n_span_rejected: int
    span_rejection_reasons: dict[str, int]
    disagreement_examples: list[dict[str, str | None]]


class LengthStat(TypedDict):
    """The response lengths of one set of answers."""

    n: int
    mean: float
    median: float


class ResponseLength(TypedDict):
    """Response lengths parsed at once against recovered (``length_stratification``)."""

    originally_parsed: LengthStat
    judge_recovered: LengthStat
    parsed_quantiles: NotRequired[list[float]]


class ModelStats(TypedDict):
    """A run's ``summary_metrics_judge_Task.json`` (keys in upstream's order)."""

    failure_decomposition: FailureDecomposition
    judge_validity: JudgeValidity
    step_extraction_coverage: None
    response_length: ResponseLength


class Pooled(TypedDict):
    """Upstream's TOTAL lines: the runs' counts summed."""

    n_samples: int
    n_strict_parsed: int
    n_judge_parsed: int
    success_rate_strict: float
    success_rate_judge: float
    delta_success_rate: float
    n_format_failure: int
    n_genuine_non_answer: int
    by_mode: dict[str, int]
    n_reference: int
    n_agree: int
    agreement_rate: float
    n_span_rejected: int
    span_rejection_reasons: dict[str, int]
    span_rejected_rate: float


class RunRow(TypedDict):
    """One run's (or the pooled) flat record of the report's table."""

    label: str
    n: int
    sr_strict: float
    sr_judged: float
    delta_sr: float
    format_failures: int
    non_answers: int
    undetermined: int
    n_reference: int
    agreement: float
    judge_invalid: float | None
    span_rejected: int
    parsed_mean_chars: float | None
    recovered_mean_chars: float | None


def decompose_failures(blocks: Sequence[Block]) -> FailureDecomposition:
    """The strict parser's failures split into format failures (a judge-verified answer the regex missed) and
    genuine non-answers (``no_conclusion``); success rates over every judged answer (upstream's
    ``decompose_failures``: strict = a strict prediction exists, judged = a success mode)."""
    n = len(blocks)
    strict_ok = sum(bool(str(b["strict_pred"] or "").strip()) for b in blocks)
    by_mode = dict.fromkeys(ANSWER_MODES, 0)
    for b in blocks:
        if b["mode"] in by_mode:
            by_mode[str(b["mode"])] += 1  # a key of by_mode: a text
    judge_ok = by_mode["conclusion_in_format"] + by_mode["conclusion_off_format"]
    recovered = by_mode["conclusion_off_format"]
    return {"n_samples": n, "n_strict_parsed": strict_ok, "n_judge_parsed": judge_ok,
            "n_strict_failed": n - strict_ok, "n_format_failure": recovered,
            "n_genuine_non_answer": by_mode["no_conclusion"],
            "success_rate_strict": _rate(strict_ok, n), "success_rate_judge": _rate(judge_ok, n),
            "delta_success_rate": _rate(judge_ok, n) - _rate(strict_ok, n),
            "format_failure_share": _rate(recovered, n - strict_ok),
            "non_answer_rate": _rate(by_mode["no_conclusion"], n),
            "n_no_conclusion": by_mode["no_conclusion"], "n_undetermined": by_mode["undetermined"],
            "no_conclusion_rate": _rate(by_mode["no_conclusion"], n),
            "undetermined_rate": _rate(by_mode["undetermined"], n), "by_mode": by_mode}


def judge_validity(blocks: Sequence[Block], keys: Sequence[str] | None = None) -> JudgeValidity:
    """Agreement of the judge's own verified numbers with the strict prediction where the strict parser succeeded
    (the two comma-joined strings compared, as upstream's ``judge_validity``), the two kinds of disagreement, and
    the rates at which the judge was unusable (invalid reply, no record, a span it could not point at) over every
    judged answer, with the span rejection reasons."""
    n_ref = agree = value_dis = empty_dis = 0
    invalid = missing = unverified = 0
    empty_reasons: Counter[str] = Counter()
    span_reasons: Counter[str] = Counter()
    examples: list[dict[str, str | None]] = []
    for i, b in enumerate(blocks):
        reason = str(b["reason"] or "")
        invalid += reason.startswith("judge_invalid")
        missing += reason == "no_judge_record"
        if reason.startswith("span_"):
            unverified += 1
            span_reasons[reason[len("span_"):]] += 1
        strict = str(b["strict_pred"] or "").strip()
        if not strict:
            continue
        n_ref += 1
        judged = str(b["judge_pred"] or "").strip()
        if strict == judged:
            agree += 1
        elif judged:
            value_dis += 1
            if len(examples) < EXAMPLES:
                examples.append({"key": keys[i] if keys else None, "strict": strict, "judge": judged,
                                 "reason": reason})
        else:
            empty_dis += 1
            empty_reasons[reason or "unknown"] += 1
    n = len(blocks)
    return {"n_reference": n_ref, "n_agree": agree, "agreement_rate": _rate(agree, n_ref),
            "n_value_disagreement": value_dis, "n_no_value_disagreement": empty_dis,
            "no_value_disagreement_reasons": dict(empty_reasons),
            "judge_invalid_rate": _rate(invalid, n), "span_unverified_rate": _rate(unverified, n),
            "judge_missing_rate": _rate(missing, n), "n_span_rejected": unverified,
            "span_rejection_reasons": dict(sorted(span_reasons.items(), key=lambda kv: -kv[1])),
            "disagreement_examples": examples}


def length_stratification(blocks: Sequence[Block], n_bins: int = 4) -> ResponseLength:
    """Response lengths (characters) of the answers parsed at once against the ones the judge recovered, with the
    parsed ones' quantile cut points (upstream's ``length_stratification``; numpy's default linear quantiles)."""
    parsed = [_chars(b["response_chars"]) for b in blocks if b["mode"] == "conclusion_in_format"]
    recovered = [_chars(b["response_chars"]) for b in blocks if b["mode"] == "conclusion_off_format"]

    def stat(xs: list[int]) -> LengthStat:
        if not xs:
            return {"n": 0, "mean": NAN, "median": NAN}
        a = np.asarray(xs, dtype=float)
        return {"n": len(xs), "mean": float(a.mean()), "median": float(np.median(a))}

    out: ResponseLength = {"originally_parsed": stat(parsed), "judge_recovered": stat(recovered)}
    if parsed:
        qs = np.quantile(np.asarray(parsed, dtype=float), [i / n_bins for i in range(1, n_bins)])
        out["parsed_quantiles"] = [float(q) for q in qs]
    return out


def model_stats(blocks: Sequence[Block], keys: Sequence[str] | None = None) -> ModelStats | None:
    """Upstream's per-model ``summary_metrics_judge_Task.json`` content; None without a judged answer."""
    if not blocks:
        return None
    return {"failure_decomposition": decompose_failures(blocks), "judge_validity": judge_validity(blocks, keys),
            "step_extraction_coverage": None, "response_length": length_stratification(blocks)}


@dataclass
class JudgeReport:
    """One family's report: per run (in order) its statistics, and the judged parses it read."""

    family: str
    parsed_dir: str
    models: dict[str, ModelStats] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def pooled(self) -> Pooled:
        """Upstream's TOTAL lines: counts summed over the runs, rates of the sums."""
        fd = [m["failure_decomposition"] for m in self.models.values()]
        jv = [m["judge_validity"] for m in self.models.values()]
        n = sum(f["n_samples"] for f in fd)
        s = sum(f["n_strict_parsed"] for f in fd)
        j = sum(f["n_judge_parsed"] for f in fd)
        modes = {m: sum(f["by_mode"].get(m, 0) for f in fd) for m in ANSWER_MODES}
        ref, agree = sum(v["n_reference"] for v in jv), sum(v["n_agree"] for v in jv)
        reasons: Counter[str] = Counter()
        for v in jv:
            reasons.update(v.get("span_rejection_reasons") or {})
        rejected = sum(v.get("n_span_rejected", 0) for v in jv)
        return {"n_samples": n, "n_strict_parsed": s, "n_judge_parsed": j,
                "success_rate_strict": _rate(s, n), "success_rate_judge": _rate(j, n),
                "delta_success_rate": _rate(j - s, n),
                "n_format_failure": sum(f["n_format_failure"] for f in fd),
                "n_genuine_non_answer": sum(f["n_genuine_non_answer"] for f in fd), "by_mode": modes,
                "n_reference": ref, "n_agree": agree, "agreement_rate": _rate(agree, ref),
                "n_span_rejected": rejected, "span_rejection_reasons": dict(reasons), "span_rejected_rate":
                _rate(rejected, n)}


def judged_blocks(path: Path) -> tuple[list[Block], list[str], bool]:
    """The ``judge`` blocks of one judged ``parsed.jsonl`` (rows with an answer) and their sample keys; False when
    the parse predates the fields the report reads."""
    blocks: list[Block] = []
    keys: list[str] = []
    for row in iter_lines(path, ParsedRow.from_json):
        b = row.judge
        if not isinstance(b, dict):
            continue
        if any(k not in b for k in NEEDED):
            return [], [], False
        blocks.append(b)
        keys.append(row.key)
    return blocks, keys, True


def build(family: str, parsed_dir: str, parses: Iterable[tuple[str, Path]]) -> JudgeReport:
    """The report of one family from (run label, judged parsed.jsonl) pairs; a run's stores are pooled."""
    rep = JudgeReport(family, parsed_dir)
    per_label: dict[str, tuple[list[Block], list[str]]] = {}
    for label, path in parses:
        blocks, keys, ok = judged_blocks(path)
        if not ok:
            rep.notes.append(f"{path}: judged before the judge report existed (no strict_pred/judge_pred); rerun "
                             "`medvision-bm judge` (it asks nothing again and rewrites the judged parse)")
            continue
        b, k = per_label.setdefault(label, ([], []))
        b.extend(blocks)
        k.extend(keys)
    for label in sorted(per_label):
        stats = model_stats(*per_label[label])
        if stats is not None:
            rep.models[label] = stats
    return rep


def _pct(x: float) -> float:
    return x * 100


def text(rep: JudgeReport, task_dir: str, limit: int | None = None) -> str:
    """``summary_judge_task__<parsed dir>.txt`` as upstream's ``summarize_judge_task.py`` prints it."""
    out: list[str] = [f"========== JUDGE REPORT: {family_spec(rep.family).upstream_name} ==========",
                      f"task_dir       : {task_dir}", f"parsed_dirname : {rep.parsed_dir}", f"limit          : {limit}",
                      "", "FAILURE DECOMPOSITION -- what the strict parser's failures actually were",
                      f"{'model':<44}{'SR strict':>10}{'SR judge':>10}{'dSR':>8}{'fmt-fail':>10}{'non-answer':>12}",
                      "-" * 94]
    for model, res in rep.models.items():
        f = res["failure_decomposition"]
        out.append(f"{model[:43]:<44}{_pct(f['success_rate_strict']):>9.1f}%{_pct(f['success_rate_judge']):>9.1f}%"
                   f"{_pct(f['delta_success_rate']):>+7.1f}{f['n_format_failure']:>10,}"
                   f"{f['n_genuine_non_answer']:>12,}")
    tot = rep.pooled()
    if tot["n_samples"]:
        out += ["-" * 94,
                f"{'TOTAL':<44}{_pct(tot['success_rate_strict']):>9.1f}%{_pct(tot['success_rate_judge']):>9.1f}%"
                f"{_pct(tot['delta_success_rate']):>+7.1f}{tot['n_format_failure']:>10,}"
                f"{tot['n_genuine_non_answer']:>12,}"]
    out += ["", "ANSWER MODE -- the four categories LLM_judge_answer_mode assigns",
            "(the two conclusion_* modes count as a successful answer; the rest do not.",
            " no-concl does not distinguish 'ran out of room' from 'declined' -- that",
            " needs the generation config, so the judge is not asked to guess it)",
            f"{'model':<44}{'in-format':>11}{'off-format':>12}{'no-concl':>10}{'undet':>8}", "-" * 85]

    def modes_line(name: str, bm: Mapping[str, int]) -> str:
        return (f"{name[:43]:<44}{bm['conclusion_in_format']:>11,}{bm['conclusion_off_format']:>12,}"
                f"{bm['no_conclusion']:>10,}{bm['undetermined']:>8,}")

    out += [modes_line(model, res["failure_decomposition"]["by_mode"]) for model, res in rep.models.items()]
    if tot["n_samples"]:
        out += ["-" * 85, modes_line("TOTAL", tot["by_mode"])]
    out += ["", "JUDGE VALIDITY -- agreement with the strict parser on ITS successes",
            "(the strict parser is near-perfect on the rows it accepts, so this is a",
            " real reliability check; it is free only because we judge 100% of rows)",
            "(agree% is over n_ref; invalid% and unverif% are over ALL records)",
            f"{'model':<44}{'n_ref':>9}{'agree':>9}{'agree%':>9}{'invalid%':>10}{'unverif%':>10}", "-" * 89]
    for model, res in rep.models.items():
        v = res["judge_validity"]
        out.append(f"{model[:43]:<44}{v['n_reference']:>9,}{v['n_agree']:>9,}{_pct(v['agreement_rate']):>8.2f}%"
                   f"{_pct(v['judge_invalid_rate']):>9.2f}%{_pct(v['span_unverified_rate']):>9.2f}%")
    if tot["n_reference"]:
        out += ["-" * 89, f"{'TOTAL':<44}{tot['n_reference']:>9,}{tot['n_agree']:>9,}"
                f"{_pct(tot['agreement_rate']):>8.3f}%"]
    out += ["", "SPAN VERIFICATION -- answers the judge asserted but could not point at",
            "(the judge quotes; the benchmark's own _NUM_RE re-derives the numbers from",
            " that quote. A mismatch means the answer is DISCARDED rather than trusted,",
            " which is what makes a hallucinated digit structurally impossible)"]
    rejected = tot["n_span_rejected"]
    if rejected:
        out += [f"{'rejection reason':<44}{'count':>10}{'share':>10}", "-" * 64]
        for k, c in sorted(tot["span_rejection_reasons"].items(), key=lambda kv: -kv[1]):
            out.append(f"{k:<44}{c:>10,}{c / rejected * 100:>9.1f}%")
        share = rejected / tot["n_samples"] * 100 if tot["n_samples"] else 0
        out += ["-" * 64, f"{'TOTAL rejected':<44}{rejected:>10,}{share:>9.2f}% of records"]
    else:
        out.append("  no span was rejected -- verify this is real and not a disabled check")
    out += ["", "RESPONSE LENGTH -- recovered vs originally-parsed (survivorship check)",
            "(strict failures are systematically longer; if recovered rows are much",
            " longer, format-robust error is computed over a harder subset)",
            f"{'model':<44}{'parsed mean':>13}{'recovered mean':>16}", "-" * 73]
    for model, res in rep.models.items():
        a, b = res["response_length"]["originally_parsed"], res["response_length"]["judge_recovered"]
        if b["n"]:
            out.append(f"{model[:43]:<44}{a['mean']:>13,.0f}{b['mean']:>16,.0f}")
    return "\n".join(out) + "\n"


def write_files(rep: JudgeReport, out: Path, task_dir: str) -> list[str]:
    """Upstream's files under ``out/<Detect|TL|AD>/``: the text report and each run's JSON; paths relative to out."""
    folder = out / family_spec(rep.family).upstream_folder
    written: list[str] = []

    def put(rel: str, content: str) -> None:
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, content)
        written.append(path.relative_to(out).as_posix())

    for model, res in rep.models.items():
        put(f"{_folder(model)}/{rep.parsed_dir}/{METRICS_FILE}", json.dumps(res, indent=2))
    put(f"summary_judge_task__{rep.parsed_dir}.txt", text(rep, task_dir))
    return written


def _cell(x: float | None, pct: bool = True) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else (f"{x * 100:.1f}" if pct else fmt(x))


HEADERS = ["Run", "N", "SR strict %", "SR judged %", "ΔSR", "Format failures", "Non-answers", "Undetermined",
           "N ref", "Agree %", "Invalid %", "Span rejected", "Parsed mean chars", "Recovered mean chars"]


def rows(rep: JudgeReport) -> list[RunRow]:
    """One flat record per run and the pooled one (the CSV and the JSON of the summary)."""
    out: list[RunRow] = []
    for model, res in rep.models.items():
        f, v, ln = res["failure_decomposition"], res["judge_validity"], res["response_length"]
        out.append({"label": model, "n": f["n_samples"], "sr_strict": f["success_rate_strict"],
                    "sr_judged": f["success_rate_judge"], "delta_sr": f["delta_success_rate"],
                    "format_failures": f["n_format_failure"], "non_answers": f["n_genuine_non_answer"],
                    "undetermined": f["n_undetermined"], "n_reference": v["n_reference"],
                    "agreement": v["agreement_rate"], "judge_invalid": v["judge_invalid_rate"],
                    "span_rejected": v["n_span_rejected"], "parsed_mean_chars": ln["originally_parsed"]["mean"],
                    "recovered_mean_chars": ln["judge_recovered"]["mean"]})
    if rep.models:
        t = rep.pooled()
        out.append({"label": "TOTAL", "n": t["n_samples"], "sr_strict": t["success_rate_strict"],
                    "sr_judged": t["success_rate_judge"], "delta_sr": t["delta_success_rate"],
                    "format_failures": t["n_format_failure"], "non_answers": t["n_genuine_non_answer"],
                    "undetermined": t["by_mode"]["undetermined"], "n_reference": t["n_reference"],
                    "agreement": t["agreement_rate"], "judge_invalid": None, "span_rejected": t["n_span_rejected"],
                    "parsed_mean_chars": None, "recovered_mean_chars": None})
    return out


def view(rep: JudgeReport, judge: str) -> View:
    body = []
    for r in rows(rep):
        body.append([r["label"], str(r["n"]), _cell(r["sr_strict"]), _cell(r["sr_judged"]),
                     f"{r['delta_sr'] * 100:+.1f}" if r["delta_sr"] == r["delta_sr"] else "–",
                     str(r["format_failures"]), str(r["non_answers"]), str(r["undetermined"]), str(r["n_reference"]),
                     "–" if r["agreement"] != r["agreement"] else f"{r['agreement'] * 100:.2f}",
                     _cell(r["judge_invalid"]) if r["judge_invalid"] is not None else "–", str(r["span_rejected"]),
                     _cell(r["parsed_mean_chars"], pct=False), _cell(r["recovered_mean_chars"], pct=False)])
    return View(f"Judge report: {FAMILY_NAMES[rep.family]}", HEADERS, body,
                "Upstream's judge report (script/llm-parsing/summarize_judge_task.py) over the judged parses "
                f"(judge: {judge}), per run and pooled (TOTAL): success rate of the strict parser and after the judge "
                "(a judge-verified answer the strict parser missed is a format failure, recovered; an answer the "
                "judge found none in is a non-answer; an unusable judge reply or span is undetermined), the judge's "
                "agreement with the strict parser on the strict parser's successes, its invalid replies and "
                "rejected spans, and the mean response length of answers parsed at once and of recovered ones.",
                [False, *([True] * (len(HEADERS) - 1))])
