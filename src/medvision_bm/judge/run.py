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

Structured output, as upstream's ``run_judge_vllm.py`` (@2f20f64) ``--structured auto``: a judge served at
``--base_url`` (vLLM's OpenAI-compatible server) is sent the contract as a JSON schema (``judge/prompt.py``
``response_schema``, upstream's ``build_schema``: enum statuses, at most the task's arity of numbers, spans of at
most 200 / 120 characters) in the request field ``structured_outputs`` (vLLM 0.12 and later), so its decoding is
constrained to a contract-shaped reply; the reply is decoded and checked against the contract all the same.
``--structured none`` sends no schema (upstream's opt-out, faster on a CPU-bound grammar), and API judges get none
(their providers' structured-output fields differ). Which one a judged parse used is in its judge signature
(``structured_output``: ``none``, or the mode, request field and schema fingerprint): the two never mix. A server
that does not take the field (vLLM before 0.12 took ``guided_json``) leaves the reply unconstrained, which the
schema gate below catches when the judge strays.

``--limit_rows N`` judges an evenly spaced sample of N of the stored answers (upstream's rule, ``rows[int(i *
len / N)]`` over every store in order, taken before the answers judged already are left out, so a rerun resumes the
same sample), and several ``--base_url`` spread the requests over several judge servers (the least busy first;
upstream shards its queue over one offline engine per GPU with ``--num_shards``).

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

import functools
import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from medvision_bm import limits
from medvision_bm.data.docs import RunDoc
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.judge import prompt as jp
from medvision_bm.judge.reply import SpanCheck, decide, decode_reply, validate_reply, verify_span
from medvision_bm.models.base import GenRequest, GenResult, GenSettings
from medvision_bm.score.judged import Decision, judged_row, judged_score, write_judged_parse
from medvision_bm.score.rescore import store_docs
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.judged import JUDGE_PARSER_VERSION, reply_time
from medvision_bm.store.layout import JudgedLayout, StoreLayout
from medvision_bm.store.records import ParsedRow, ResultsRecord
from medvision_bm.store.samples import SampleStore, StoreState
from medvision_bm.store.signature import digest
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scoring import (
    failed_score,
    protocol_settings,
    score_answer,
)
from medvision_bm.tasks.upstream_parse import is_request_failure, parse_upstream

#: upstream's judge schema gate (run_judge_vllm.py @2f20f64: MIN_VALID_RATE_DEFAULT, VALID_RATE_PROBE_ROWS)
MIN_VALID_RATE = 0.95
GATE_REPLIES = 200
#: ``--structured`` (upstream's flag and default): ``auto`` sends the contract's JSON schema where the judge is
#: served by vLLM, ``none`` never does.
STRUCTURED_CHOICES = ("auto", "none")
#: The guided decoding this judge asks for, as recorded in the judge signature: vLLM's OpenAI-compatible server
#: (0.12 and later; requirements/_vllm.in pins 0.33.0) takes the schema as the request field
#: ``structured_outputs: {"json": <schema>}`` (it replaced ``guided_json``, removed in 0.12.0).
STRUCTURED_VLLM = "vllm-structured_outputs-json"


def structured_mode(flag: str, kind: str) -> str:
    """The guided decoding a judge gets: the schema for a judge served at --base_url (the openai_compatible kind,
    vLLM's server) unless ``--structured none``; "none" for API providers, whose structured-output fields differ
    (the tolerant decoder reads their replies, as upstream's does when no grammar is available)."""
    if flag not in STRUCTURED_CHOICES:
        raise UserError(f"--structured {flag!r}: use one of {', '.join(STRUCTURED_CHOICES)}")
    return STRUCTURED_VLLM if flag == "auto" and kind == "openai_compatible" else "none"


# ----------------------------------------------------------------------------------------------------------------
# the judge and its signature

@dataclass(frozen=True)
class JudgeSpec:
    """Who judges: the registry record, the backend kind and provider, the weights (model code or served name)."""

    record: str
    kind: str
    provider: str
    weights: str
    sampling: JsonObject
    structured: str = "none"  # "none" | STRUCTURED_VLLM

    def inputs(self) -> JsonObject:
        structured: JsonValue = "none" if self.structured == "none" else {
            "mode": self.structured, "request_field": "structured_outputs.json",
            "schema_fingerprint": jp.schema_fingerprint()}
        return {"parser_version": JUDGE_PARSER_VERSION, "judge_model": self.record, "weights": self.weights,
                "backend": self.kind, "provider": self.provider, "prompt_version": jp.PROMPT_VERSION,
                "prompt_fingerprint": jp.prompt_fingerprint(), "sampling": self.sampling,
                "structured_output": structured, "decision": "strict-first"}

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

    ref: StoreRef
    rundocs: list[RunDoc]
    shas: dict[str, str]
    state: StoreState
    protocol: str
    folder: Path  # <store>/judged/<sig12>
    done: dict[str, JsonObject] = field(default_factory=dict)  # key -> latest ok/invalid judge record
    bad_lines: int = 0

    def text(self, key: str) -> str | None:
        rec = self.state.answer(key, self.shas[key])
        return None if rec is None else rec.text


def load_store(ref: StoreRef) -> tuple[list[RunDoc], dict[str, str], StoreState, str]:
    """The store's selected samples (as `medvision-bm parse` selects them: ``rescore.store_docs``), their doc
    hashes, its answers, protocol."""

    sd = store_docs(ref)
    return sd.rundocs, sd.shas, SampleStore(ref.folder, ref.answer_signature).read(), sd.protocol


def judged_rows(job: StoreJob) -> tuple[list[ParsedRow], JsonObject]:
    """The judged parse of one store (parsed.jsonl's row format) and its counts."""

    settings = protocol_settings(job.protocol)
    parser, rules = settings.parser, settings.rules
    rows: list[ParsedRow] = []
    modes: dict[str, int] = {}
    counts = {"selected": 0, "answered": 0, "judged": 0, "judge_invalid": 0, "not_judged": 0, "recovered": 0}
    for rd in job.rundocs:
        doc, key = rd.doc, rd.doc.key
        counts["selected"] += 1
        text = job.text(key)
        if text is None:
            status = "request_failed" if key in job.state.failed else "missing"
            sc = failed_score(doc, rd.view, JUDGE_PARSER_VERSION, rules, status,
                              "request failed" if status == "request_failed" else "not answered yet")
            rows.append(judged_row(doc, rules, sc, None, None, None))
            continue
        counts["answered"] += 1
        strict = score_answer(doc, rd.view, text, parser, rules)
        rec = job.done.get(key)
        if rec is not None and rec.get("answer_sha") != answer_sha(text):
            rec = None  # judged an older answer of this sample
        verified: SpanCheck | None = None
        if rec is not None:
            counts["judged"] += 1
            counts["judge_invalid"] += rec.get("status") != "ok"
            fa = rec.get("final_answer")
            if not isinstance(fa, dict):
                fa = {}
            if rec.get("status") == "ok" and fa.get("status") == "present":
                verified = verify_span(text, fa.get("span"), fa.get("values"), family_spec(doc.family).arity)
        elif not is_request_failure(text) and not strict.success:
            counts["not_judged"] += 1  # a strict failure the judge has not read yet (a strict success stands)
        mode, reason = decide(strict.success, rec, verified)
        numbers = tuple(verified["numbers"]) if verified and verified.get("ok") else None
        strict_pred = parse_upstream(text, family_spec(doc.family).arity, parser).filtered_resps if strict.success else ""
        answer = tuple(strict_pred.split(",")) if mode == "conclusion_in_format" else \
            numbers if mode == "conclusion_off_format" else None
        tier = verified.get("tier") if numbers and verified is not None else None
        decision = Decision(mode, reason, strict_pred, answer, numbers, tier)
        sc, decision = judged_score(doc, rd.view, rules, strict, decision)
        counts["recovered"] += decision.mode == "conclusion_off_format"
        modes[decision.mode] = modes.get(decision.mode, 0) + 1
        rows.append(judged_row(doc, rules, sc, strict, decision, text))
    modes_out: JsonObject = {mode: n for mode, n in modes.items()}
    out: JsonObject = {**counts, "modes": modes_out}
    return rows, out


def write_judged(job: StoreJob, spec_inputs: JsonObject, signature: str) -> ResultsRecord:
    """Write parsed.jsonl and results.json of the judged parse (atomically); return the results record written."""

    rows, counts = judged_rows(job)
    rules = protocol_settings(job.protocol).rules
    return write_judged_parse(job.folder, job.ref, job.protocol, rules, rows, {**counts, "bad_lines": job.bad_lines},
                              signature, spec_inputs, complete=counts["not_judged"] == 0)


def gen_settings(spec: JudgeSpec) -> GenSettings:
    """The judge's generation settings, from its signature's sampling."""
    s = spec.sampling
    return GenSettings(max_new_tokens=limits.int_field(s["max_tokens"], "max_tokens", lenient=True),
                       temperature=limits.optional(limits.float_field, s.get("temperature"), "temperature"),
                       top_p=limits.optional(limits.float_field, s.get("top_p"), "top_p"),
                       seed=limits.optional(limits.int_field, s.get("seed"), "seed"))


@functools.cache
def _schema_field(task_type: str, key: str | None) -> JsonObject:
    """The request field carrying the response schema of one kind of prompt (built once, shared read-only)."""
    return {"structured_outputs": {"json": jp.response_schema(task_type, key)}}


def judge_request(job_id: int, rd: RunDoc, text: str, gen: GenSettings, structured: str = "none") -> GenRequest:
    """The judge's request about one stored response (keyed by store index and sample key)."""
    doc = rd.doc
    task_type = jp.TASK_TYPE[doc.family]
    key = jp.step_key(task_type, doc.metric_type)
    system, user = jp.build_messages(task_type, key, text)
    return GenRequest(key=f"{job_id}\x1f{doc.key}", prompt=user, rundoc=None, gen=gen,  # type: ignore[arg-type]
                      system_prompt=system,
                      extra_body=_schema_field(task_type, key) if structured == STRUCTURED_VLLM else None)


def verdict(raw: str, family: str, metric_type: str | None) -> tuple[str, str, JsonObject | None]:
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
        self.held: list[GenResult] = []
        self.replies = self.valid = 0
        self.reasons: Counter[str] = Counter()

    def admit(self, result: GenResult, status: str, reason: str = "") -> list[GenResult]:
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

    def release(self) -> list[GenResult]:
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


def reply_record(key: str, text: str, signature: str, result: GenResult, family: str,
                 metric_type: str | None) -> JsonObject:
    """One line of answers/*.jsonl: the judge's decoded reply (ok | invalid), or a failed request. Every value in it
    is of a type and within the bounds its reader takes (``limits``; the reply as ``reply.decode_reply`` keeps it),
    so a stored reply always reads back."""
    usage: JsonObject = {k: limits.count_or_none(v, limits.MAX_TOKENS) for k, v in result.usage.to_json().items()}
    rec: JsonObject = {"key": key, "answer_sha": answer_sha(text), "judge_signature": signature,
                           "finish_reason": result.finish_reason, "usage": usage,
                           "attempts": limits.count_or_none(result.attempts, limits.MAX_ATTEMPTS),
                           "latency_s": limits.seconds_within(float(result.latency_s)), "time": time.time()}
    if not result.ok:
        rec.update(status="failed", reason=(result.error.to_json() if result.error else None))
        return rec
    raw = (result.text or "").encode("utf-8", "replace").decode("utf-8")  # a lone surrogate cannot be stored
    status, why, obj = verdict(raw, family, metric_type)
    rec.update(status=status, reason=why, raw=raw)
    if obj is not None:
        rec["final_answer"] = obj.get("final_answer")
        if obj.get("steps") is not None:
            rec["steps"] = obj.get("steps")
    return rec


# ----------------------------------------------------------------------------------------------------------------
# concurrent judge runs: the runner's claims (store.claims.Claims) on each judged folder


class JudgedLanded:
    """A judged folder as :class:`~medvision_bm.store.claims.Claims` sees a store: its folder (where the claims
    live) and ``refresh``, every key another judge run stored a reply for at or after ``since`` (the time this run
    read the folder; a claim asks about one key at a time, so the set is kept whole); ``records`` keeps the newest
    of those replies per key, for reuse."""

    def __init__(self, folder: Path, signature: str, own_segment: str, since: float) -> None:
        self.folder = folder
        self.layout = StoreLayout(folder)  # where Claims keeps this folder's claims and their lock
        self.signature = signature
        self.own = own_segment
        self.since = since
        self.records: dict[str, JsonObject] = {}
        self.landed: set[str] = set()
        self._offsets: dict[str, int] = {}

    def refresh(self, state: object = None) -> set[str]:
        import orjson

        landed = self.landed
        answers = JudgedLayout(self.folder).answers
        for seg in sorted(answers.glob("*.jsonl")) if answers.is_dir() else ():
            if seg.name == self.own:
                continue
            start = self._offsets.get(seg.name, 0)
            try:
                with open(seg, "rb") as fh:
                    fh.seek(start)
                    data = fh.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1  # a line still being written is read next time
            self._offsets[seg.name] = start + end
            for line in data[:end].splitlines():
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and rec.get("judge_signature") == self.signature \
                        and isinstance(rec.get("key"), str) and reply_time(rec) >= self.since:
                    landed.add(rec["key"])  # a failed request too: that run asked it (a rerun asks again)
                    if rec.get("status") in ("ok", "invalid"):
                        self.records[rec["key"]] = rec
        return landed


class JudgeClaims:
    """Claims on judge requests across the judged folders they fill, so that two judge runs over one store never
    ask about the same answer twice (upstream judges one queue per run; here several runs may share stores).

    A request covers every sample with its response (several stores may hold it). It is this run's once each of
    those samples is claimed in its folder's :class:`~medvision_bm.store.claims.Claims`, taken in one fixed order
    (folder, then key) so that of two runs only one ever holds a whole request: the first sample held by another live
    run stops the claim and the request waits. Samples another run judged meanwhile are dropped from it; their reply
    is reused for the rest (the verdict on one response counts for every sample holding it)."""

    def __init__(self, jobs: list[StoreJob], signature: str, own_segment: str, since: float) -> None:
        from medvision_bm.store.claims import Claims

        self.landed = {id(j): JudgedLanded(j.folder, signature, own_segment, since) for j in jobs}
        self.claims = {id(j): Claims(self.landed[id(j)], None, own_segment.removesuffix(".jsonl"))
                       for j in jobs}

    def claim(self, pairs: list[tuple[StoreJob, RunDoc, str]]) -> tuple[str, list[tuple[StoreJob, RunDoc, str]],
                                                                            JsonObject | None]:
        """("mine" | "held" | "done", the samples still to judge, another run's reply to reuse for them or None)."""
        remaining: list[tuple[StoreJob, RunDoc, str]] = []
        reply: JsonObject | None = None
        for pair in sorted(pairs, key=lambda p: (str(p[0].folder), p[1].doc.key)):
            job, rd, text = pair
            _, elsewhere, held = self.claims[id(job)].take([rd.doc.key], 1)
            if held:
                return "held", pairs, None
            if elsewhere:
                rec = self.landed[id(job)].records.get(rd.doc.key)
                if rec is not None and rec.get("answer_sha") == answer_sha(text):
                    reply = rec
                continue
            remaining.append(pair)
        if not remaining:
            return "done", [], None
        return ("done" if reply is not None else "mine"), remaining, reply

    def wait(self) -> None:
        next(iter(self.claims.values())).wait()

    def close(self) -> None:
        for c in self.claims.values():
            c.close()
