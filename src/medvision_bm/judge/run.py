"""`medvision-bm judge`: upstream's LLM-judge re-parse of stored raw answers, kept apart from the strict parse.

Upstream's paper numbers come from a second reading of every response by an LLM judge (``script/llm-parsing/`` at
2f20f64; judge ``gemma-4-31b`` = google/gemma-4-31B-it on vLLM; prompt and contract in ``judge/prompt.py``).
The rules followed here, in our own code (upstream's files in ``script/llm-parsing/`` @2f20f64 in brackets):

* the judge sees only the response text (windowed when very long) and returns ``{"final_answer": {status, span,
  values}, "steps": [...]}``; its reply is decoded tolerantly: the text after a harmony ``final`` channel marker,
  every balanced ``{...}`` candidate tried, the one holding ``final_answer`` preferred, LaTeX ``\\b``/``\\f``
  escapes kept literal and invalid escapes repaired, a stranded ``final_answer`` body re-wrapped
  (judge_decode.py); the shape is checked (statuses ``present`` | ``no_conclusion``, a present answer
  has a span and a non-empty list of real numbers; an all-zero list beside ``no_conclusion`` is the skeleton's
  echo and allowed);
* the judge is a pointer, not a transcriber: its values count only when they are a contiguous run of the numbers
  (upstream's newer number regex) in its quoted span, found in the response verbatim (tier ``exact``), after
  quoting-insensitive normalisation (``normalized``, numbers re-checked against the response) or, without the
  span, as a run in the response itself (``value_anchor``, never for all-zero values); the numbers scored are the
  ones read from the text, never the judge's floats (judge_verify.py);
* strict first: where the strict parse succeeded its answer stands, whatever the judge said; otherwise a verified
  judge answer is scored (``conclusion_off_format``), and a ``no_conclusion``, an unverifiable span, a judge reply
  that is not the contract (garbage) or no judge answer at all is a failure, counted as upstream counts a failed
  parse (judge_decision.py; apply_judge.py).

One difference from upstream's runs, recorded in the judge signature (``structured_output: none``): upstream's
``run_judge_vllm.py`` (@2f20f64) defaults to ``--structured auto``, constraining vLLM's decoding to a JSON schema
built from the contract (enum statuses, answer arity, span length); this suite sends the plain prompt and checks
the reply against the same contract afterwards (a reply outside it is ``invalid``, and the schema gate stops a run
where fewer than ``--min_valid_rate`` follow it). With a judge that follows the prompt the verdicts are the same;
with one that strays, upstream's decoding would have forced a contract-shaped reply where this one records invalid.

Layout (beside the strict ``parsed.jsonl``, which is never touched)::

    <store>/judged/<judge_sig[:12]>/
        judge.json          the judge signature: judge model, weights, backend, prompt version and fingerprint,
                            sampling, parser version
        answers/<writer>.jsonl   one line per judge reply (appended as they land: a killed run resumes where it
                            stopped; a sample is asked again only if its raw answer changed or its request failed)
        parsed.jsonl        the judged parse, in parsed.jsonl's row format (parser ``judge-1``, plus ``judge``)
        results.json        its metrics (upstream's, same code as the strict parse) and counts
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm.errors import UserError
from medvision_bm.io import dumps, iter_jsonl, write_json_atomic, write_text_atomic
from medvision_bm.judge import prompt as jp
from medvision_bm.judge.reply import decide, decode_reply, validate_reply, verify_span
from medvision_bm.models.base import GenRequest, GenSettings
from medvision_bm.score.rescore import store_docs
from medvision_bm.score.store_scoring import SCORING_VERSION, group_fields
from medvision_bm.store.judged import JUDGE_PARSER_VERSION, JUDGED_SCHEMA
from medvision_bm.store.samples import SampleStore
from medvision_bm.store.signature import digest
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scoring import (
    DEFAULT_METRIC_PATH,
    aggregate_rows,
    failed_score,
    protocol_settings,
    score_answer,
)
from medvision_bm.tasks.upstream_parse import is_request_failure

#: upstream's judge schema gate (run_judge_vllm.py @2f20f64: MIN_VALID_RATE_DEFAULT, VALID_RATE_PROBE_ROWS)
MIN_VALID_RATE = 0.95
GATE_REPLIES = 200


# ----------------------------------------------------------------------------------------------------------------
# the judge and its signature

@dataclass(frozen=True)
class JudgeSpec:
    """Who judges: the registry record, the backend kind and provider, the weights (model code or served name)."""

    record: str
    kind: str
    provider: str
    weights: str
    sampling: dict[str, Any]

    def inputs(self) -> dict[str, Any]:
        return {"parser_version": JUDGE_PARSER_VERSION, "judge_model": self.record, "weights": self.weights,
                "backend": self.kind, "provider": self.provider, "prompt_version": jp.PROMPT_VERSION,
                "prompt_fingerprint": jp.prompt_fingerprint(), "sampling": self.sampling,
                "structured_output": "none", "decision": "strict-first"}

    @property
    def signature(self) -> str:
        return digest(self.inputs())


def answer_sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# ----------------------------------------------------------------------------------------------------------------
# one store

@dataclass
class StoreJob:
    """A store's selected samples with their stored answers, and its judged folder."""

    ref: Any  # StoreRef
    rundocs: list[Any]
    shas: dict[str, str]
    state: Any  # StoreState
    protocol: str
    folder: Path  # <store>/judged/<sig12>
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> latest ok/invalid judge record
    bad_lines: int = 0

    def text(self, key: str) -> str | None:
        rec = self.state.answer(key, self.shas[key])
        return None if rec is None else rec.get("text")


def load_store(ref: Any) -> tuple[list[Any], dict[str, str], Any, str]:
    """The store's selected samples (as `medvision-bm parse` selects them: ``rescore.store_docs``), their doc
    hashes, its answers, protocol."""

    sd = store_docs(ref)
    return sd.rundocs, sd.shas, SampleStore(ref.folder, ref.answer_signature).read(), sd.protocol


def read_judged(folder: Path, signature: str) -> tuple[dict[str, dict[str, Any]], int]:
    """Per key the newest usable judge record (ok or invalid, this signature; by its ``time``, file order on a
    tie); and the unreadable lines."""
    out: dict[str, dict[str, Any]] = {}
    bad = 0
    answers = folder / "answers"
    if not answers.is_dir():
        return out, 0

    def on_bad(lineno: int, text: str) -> None:
        nonlocal bad
        bad += 1

    for seg in sorted(answers.glob("*.jsonl")):
        for rec in iter_jsonl(seg, on_bad_line=on_bad):
            if rec.get("judge_signature") != signature or not isinstance(rec.get("key"), str):
                bad += 1
                continue
            if rec.get("status") in ("ok", "invalid"):
                prev = out.get(rec["key"])
                if prev is None or _stamp(rec) >= _stamp(prev):  # the newest verdict wins (a repair pass's)
                    out[rec["key"]] = rec
    return out, bad


def _stamp(rec: dict[str, Any]) -> float:
    t = rec.get("time")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0


def judged_rows(job: StoreJob) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The judged parse of one store (parsed.jsonl's row format) and its counts."""

    settings = protocol_settings(job.protocol)
    parser, rules = settings["parser"], settings["rules"]
    rows: list[dict[str, Any]] = []
    modes: dict[str, int] = {}
    counts = {"selected": 0, "answered": 0, "judged": 0, "judge_invalid": 0, "not_judged": 0, "recovered": 0}
    for rd in job.rundocs:
        doc, key = rd.doc, rd.doc.key
        counts["selected"] += 1
        text = job.text(key)
        judge: dict[str, Any] | None = None
        if text is None:
            status = "request_failed" if key in job.state.failed else "missing"
            sc = failed_score(doc, rd.view, JUDGE_PARSER_VERSION, rules, status,
                              "request failed" if status == "request_failed" else "not answered yet")
        else:
            counts["answered"] += 1
            strict = score_answer(doc, rd.view, text, parser, rules)
            rec = job.done.get(key)
            if rec is not None and rec.get("answer_sha") != answer_sha(text):
                rec = None  # judged an older answer of this sample
            verified = None
            if rec is not None:
                counts["judged"] += 1
                counts["judge_invalid"] += rec.get("status") != "ok"
                fa = rec.get("final_answer") if isinstance(rec.get("final_answer"), dict) else {}
                if rec.get("status") == "ok" and fa.get("status") == "present":
                    verified = verify_span(text, fa.get("span"), fa.get("values"), family_spec(doc.family).arity)
            elif not is_request_failure(text) and not strict.success:
                counts["not_judged"] += 1  # a strict failure the judge has not read yet (a strict success stands)
            mode, reason = decide(strict.success, rec, verified)
            sc = strict
            if mode == "conclusion_off_format" and verified is not None:
                sc = score_answer(doc, rd.view, "<answer>" + ", ".join(verified["numbers"]) + "</answer>",
                                  "strict-1", rules)
                if not sc.success:
                    mode, reason = "undetermined", f"judged answer not scorable: {sc.reason}"
                    sc = strict
                else:
                    counts["recovered"] += 1
            elif mode != "conclusion_in_format" and strict.status == "parse_failed":
                sc = failed_score(doc, rd.view, JUDGE_PARSER_VERSION, rules, "parse_failed",
                                  f"judge: {mode} ({reason})")
            modes[mode] = modes.get(mode, 0) + 1
            judge = {"mode": mode, "reason": reason, "strict_values": list(strict.values) if strict.values else None,
                     "judge_numbers": verified["numbers"] if verified and verified.get("ok") else None,
                     "tier": verified.get("tier") if verified and verified.get("ok") else None}
        row = {"index": doc.index, "family": doc.family, "task": doc.task, "rules": rules, **group_fields(doc),
               **sc.to_json(), "parser": JUDGE_PARSER_VERSION}
        if judge is not None:
            row["judge"] = judge
        rows.append(row)
    counts["modes"] = modes
    return rows, counts


def write_judged(job: StoreJob, spec_inputs: dict[str, Any], signature: str) -> dict[str, Any]:
    """Write parsed.jsonl and results.json of the judged parse (atomically); return results.json's content."""

    rows, counts = judged_rows(job)
    rules = protocol_settings(job.protocol)["rules"]
    write_text_atomic(job.folder / "parsed.jsonl", "".join(dumps(r) + "\n" for r in rows))
    ref = job.ref
    results = {"schema": JUDGED_SCHEMA, "model_name": ref.model, "task": ref.task, "family": ref.family,
               "answer_signature": ref.answer_signature, "judge_signature": signature, "judge": spec_inputs,
               "parser_version": JUDGE_PARSER_VERSION, "protocol": job.protocol, "metric_rules": rules,
               "metric_path": DEFAULT_METRIC_PATH, "scoring_version": SCORING_VERSION,
               "metrics": aggregate_rows(ref.family, rows, rules), "counts": {**counts, "bad_lines": job.bad_lines},
               "complete": counts["not_judged"] == 0,
               "parsed_at": time.time()}
    write_json_atomic(job.folder / "results.json", results)
    return results


def _gen(spec: JudgeSpec) -> Any:
    s = spec.sampling
    return GenSettings(max_new_tokens=int(s["max_tokens"]), temperature=s.get("temperature"), top_p=s.get("top_p"),
                       seed=s.get("seed"))


def _request(job_id: int, rd: Any, text: str, gen: Any) -> Any:
    doc = rd.doc
    task_type = jp.TASK_TYPE[doc.family]
    system, user = jp.build_messages(task_type, jp.step_key(task_type, doc.metric_type), text)
    return GenRequest(key=f"{job_id}\x1f{doc.key}", prompt=user, rundoc=None, gen=gen,  # type: ignore[arg-type]
                      system_prompt=system)


def verdict(raw: str, family: str, metric_type: str | None) -> tuple[str, str, dict[str, Any] | None]:
    """A judge reply read against the contract: ("ok" | "invalid", the reason, the decoded object or None)."""
    obj, why = decode_reply(raw)
    if obj is None:
        return "invalid", why, None
    ok, why = validate_reply(obj, jp.step_key(jp.TASK_TYPE[family], metric_type) is not None)
    return ("ok" if ok else "invalid"), why, obj


class ValidRateGate:
    """Upstream's schema gate (``run_judge_vllm.gate_valid_rate`` @2f20f64): the first ``probe`` judge replies of a
    run are held back, not stored; if fewer than ``min_rate`` of them follow the contract the run stops with none
    of them stored (a judge that invents its own output format is caught after a few hundred requests, not after a
    whole sweep), else everything held is let through and the gate stays open. Failed requests are held with the
    replies but do not count. ``min_rate`` 0 (or nothing to probe) opens it from the start."""

    def __init__(self, min_rate: float, probe: int) -> None:
        self.min_rate, self.probe = min_rate, probe
        self.open = min_rate <= 0 or probe <= 0
        self.held: list[Any] = []
        self.replies = self.valid = 0
        self.reasons: Counter[str] = Counter()

    def admit(self, result: Any, status: str, reason: str = "") -> list[Any]:
        """What may be stored now, ``result`` included once the gate is open (raises when the probe fails)."""
        if self.open:
            return [result]
        self.held.append(result)
        if status != "failed":
            self.replies += 1
            self.valid += status == "ok"
            if status != "ok":
                self.reasons[reason.split(":")[0] or "invalid"] += 1
        return self.release() if self.replies >= self.probe else []

    def release(self) -> list[Any]:
        """Decide on the replies held so far (the end of a run shorter than the probe) and let them through."""
        if not self.open and self.replies:
            rate = self.valid / self.replies
            if rate < self.min_rate:
                top = ", ".join(f"{k} {v}" for k, v in self.reasons.most_common(3))
                raise UserError(f"only {self.valid} of the first {self.replies} judge replies follow the judge "
                                f"contract ({rate:.0%} < --min_valid_rate {self.min_rate:g}; invalid: {top}), so "
                                "none was stored: check that --base_url serves the judge model and that its chat "
                                "template returns plain text, or rerun with --min_valid_rate 0 to store them anyway")
        self.open = True
        out, self.held = self.held, []
        return out


def reply_record(key: str, text: str, signature: str, result: Any, family: str, metric_type: str | None) -> dict[str, Any]:
    """One line of answers/*.jsonl: the judge's decoded reply (ok | invalid), or a failed request."""
    rec: dict[str, Any] = {"key": key, "answer_sha": answer_sha(text), "judge_signature": signature,
                           "finish_reason": result.finish_reason, "usage": result.usage.to_json(),
                           "attempts": result.attempts, "latency_s": round(result.latency_s, 6), "time": time.time()}
    if not result.ok:
        rec.update(status="failed", reason=(result.error.to_json() if result.error else None))
        return rec
    raw = result.text or ""
    status, why, obj = verdict(raw, family, metric_type)
    rec.update(status=status, reason=why, raw=raw)
    if obj is not None:
        rec["final_answer"] = obj.get("final_answer")
        if obj.get("steps") is not None:
            rec["steps"] = obj.get("steps")
    return rec
