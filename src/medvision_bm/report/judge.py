"""`medvision-bm judge`: upstream's LLM-judge re-parse of stored raw answers, kept apart from the strict parse.

Upstream's paper numbers come from a second reading of every response by an LLM judge (``script/llm-parsing/`` at
2f20f64; judge ``gemma-4-31b`` = google/gemma-4-31B-it on vLLM; prompt and contract in ``report/judge_prompt.py``).
The rules followed here, in our own code (search-index ids of upstream's files in brackets):

* the judge sees only the response text (windowed when very long) and returns ``{"final_answer": {status, span,
  values}, "steps": [...]}``; its reply is decoded tolerantly: the text after a harmony ``final`` channel marker,
  every balanced ``{...}`` candidate tried, the one holding ``final_answer`` preferred, LaTeX ``\\b``/``\\f``
  escapes kept literal and invalid escapes repaired, a stranded ``final_answer`` body re-wrapped
  (judge_decode.py 63526950599); the shape is checked (statuses ``present`` | ``no_conclusion``, a present answer
  has a span and a non-empty list of real numbers; an all-zero list beside ``no_conclusion`` is the skeleton's
  echo and allowed);
* the judge is a pointer, not a transcriber: its values count only when they are a contiguous run of the numbers
  (upstream's newer number regex) in its quoted span, found in the response verbatim (tier ``exact``), after
  quoting-insensitive normalisation (``normalized``, numbers re-checked against the response) or, without the
  span, as a run in the response itself (``value_anchor``, never for all-zero values); the numbers scored are the
  ones read from the text, never the judge's floats (judge_verify.py 63236333635);
* strict first: where the strict parse succeeded its answer stands, whatever the judge said; otherwise a verified
  judge answer is scored (``conclusion_off_format``), and a ``no_conclusion``, an unverifiable span, a judge reply
  that is not the contract (garbage) or no judge answer at all is a failure, counted as upstream counts a failed
  parse (judge_decision.py 63153672172; apply_judge.py 63480500711).

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

import argparse
import hashlib
import json
import math
import os
import re
import socket
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm.errors import UserError
from medvision_bm.io import JsonlAppender, dumps, iter_jsonl, read_json, write_json_atomic, write_text_atomic
from medvision_bm.report import judge_prompt as jp
from medvision_bm.report.summarize_cli import _csv
from medvision_bm.tasks.upstream_parse import STRICT_NUMBER_RE

#: The judged parse's parser version (decision table, decoding and span verification as described above).
JUDGE_PARSER_VERSION = "judge-1"
JUDGED_DIR = "judged"
JUDGED_SCHEMA = "medvision-judged/1"
#: upstream's judge schema gate (run_judge_vllm.py @2f20f64: MIN_VALID_RATE_DEFAULT, VALID_RATE_PROBE_ROWS)
MIN_VALID_RATE = 0.95
GATE_REPLIES = 200

# ----------------------------------------------------------------------------------------------------------------
# decoding the judge's reply

_FINAL_MARKERS = ("<|channel|>final<|message|>", "assistantfinal")
_END_TOKENS = ("<|return|>", "<|end|>", "<|endoftext|>")
_MAX_STARTS = 64
_MAX_SCAN = 400_000
_SIMPLE_ESCAPES = set('"\\/bfnrt')
_HEX = set("0123456789abcdefABCDEF")


def final_channel(text: str | None) -> str:
    """The judge's final channel: the text after the last harmony final marker (if any), end tokens cut."""
    text = text or ""
    for marker in _FINAL_MARKERS:
        if marker in text:
            text = text.rsplit(marker, 1)[1]
            break
    for tok in _END_TOKENS:
        at = text.find(tok)
        if at >= 0:
            text = text[:at]
    return text.strip()


def _balanced_end(text: str, start: int, budget: int) -> tuple[int | None, int]:
    depth, in_str, esc = 0, False, False
    stop = min(len(text), start + budget)
    for i in range(start, stop):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1, i + 1 - start
    return None, stop - start


def json_candidates(text: str) -> Iterator[str]:
    """Every balanced ``{...}`` substring, one independent scan per opening brace (bounded)."""
    budget, starts, pos = _MAX_SCAN, 0, 0
    while starts < _MAX_STARTS and budget > 0:
        start = text.find("{", pos)
        if start < 0:
            return
        starts += 1
        end, used = _balanced_end(text, start, budget)
        budget -= used
        if end is not None:
            yield text[start:end]
        pos = start + 1


def _keep_latex(blob: str) -> str:
    """``\\b`` and ``\\f`` are legal JSON escapes but in a quoted response they are LaTeX (``\\boxed``, ``\\frac``)."""
    out, i = [], 0
    while i < len(blob):
        ch = blob[i]
        nxt = blob[i + 1] if i + 1 < len(blob) else ""
        if ch == "\\" and nxt == "\\":
            out.append("\\\\")
            i += 2
        elif ch == "\\" and nxt in "bf" and nxt:
            out.append("\\\\" + nxt)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _repair_escapes(blob: str) -> tuple[str, bool]:
    out, i, changed = [], 0, False
    while i < len(blob):
        ch = blob[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = blob[i + 1] if i + 1 < len(blob) else ""
        if nxt in _SIMPLE_ESCAPES and nxt:
            out.append(ch + nxt)
            i += 2
        elif nxt == "u" and len(blob) >= i + 6 and all(c in _HEX for c in blob[i + 2:i + 6]):
            out.append(blob[i:i + 6])
            i += 6
        else:
            out.append("\\\\")
            changed = True
            i += 1
    return "".join(out), changed


def _load(blob: str) -> Any:
    blob = _keep_latex(blob)
    try:
        return json.loads(blob)
    except ValueError:
        pass
    repaired, changed = _repair_escapes(blob)
    if not changed:
        return None
    try:
        return json.loads(repaired)
    except ValueError:
        return None


def decode_reply(raw: str | None) -> tuple[dict[str, Any] | None, str]:
    """The judge's object from its reply, or (None, why)."""
    text = final_channel(raw)
    if not text:
        return None, "empty_output"
    fallback, seen = None, False
    for blob in json_candidates(text):
        seen = True
        obj = _load(blob)
        if not isinstance(obj, dict):
            continue
        if "final_answer" in obj:
            return obj, "ok"
        if fallback is None:
            fallback = obj
    if fallback is not None:
        if "index" not in fallback and "status" in fallback and ("span" in fallback or "values" in fallback):
            return {"final_answer": fallback}, "ok"  # the body of a final_answer whose outer object was cut
        return fallback, "ok"
    return None, "json_decode_error" if seen else "no_json_object"


def _numbers_list(values: Any) -> bool:
    return isinstance(values, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def validate_reply(obj: dict[str, Any], expects_steps: bool) -> tuple[bool, str]:
    """The contract's shape (not its plausibility: the span check settles that)."""
    fa = obj.get("final_answer")
    if not isinstance(fa, dict):
        return False, "missing_final_answer"
    status = fa.get("status")
    if status not in jp.FINAL_ANSWER_STATUSES:
        return False, "bad_status"
    values = fa.get("values")
    if status == "present":
        if not isinstance(fa.get("span"), str) or not fa["span"].strip():
            return False, "missing_span"
        if not isinstance(values, list) or not values:
            return False, "missing_values"
        if not _numbers_list(values):
            return False, "non_numeric_values"
    elif values and not (_numbers_list(values) and all(v == 0 for v in values)):
        return False, "values_with_non_present_status"
    if expects_steps and obj.get("steps") is not None and not isinstance(obj.get("steps"), list):
        return False, "bad_steps"
    return True, "ok"


# ----------------------------------------------------------------------------------------------------------------
# span verification

_WS = re.compile(r"\s+")
_TRAILING_TAG = re.compile(r"\s*</[A-Za-z][\w-]*>\s*$")
_QUOTES = (('"', '"'), ("'", "'"), ("\u201c", "\u201d"), ("\u2018", "\u2019"), ("`", "`"))
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_DELIMS = (("\\[", "["), ("\\]", "]"), ("\\(", "("), ("\\)", ")"))
_CTRL = (("\x08", "\\b"), ("\x0c", "\\f"))


def find_numbers(text: str | None) -> list[str]:
    return [m.replace(",", "") for m in STRICT_NUMBER_RE.findall(text or "")]


def _close(a: float, b: float) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _run_at(found: list[float], want: list[float]) -> int:
    """Start of ``want`` as a contiguous run in ``found``, searching from the end; -1 when absent."""
    n, k = len(found), len(want)
    for start in range(n - k, -1, -1) if 0 < k <= n else ():
        if all(_close(found[start + j], want[j]) for j in range(k)):
            return start
    return -1


def _floats(tokens: list[str]) -> list[float] | None:
    try:
        return [float(t) for t in tokens]
    except ValueError:
        return None


def _uncontrol(text: str) -> str:
    for ctrl, lit in _CTRL:
        text = text.replace(ctrl, lit)
    return text


def _key(text: str) -> str:
    text = _BOXED.sub(r"\1", _uncontrol(str(text)))
    for a, b in _DELIMS:
        text = text.replace(a, b)
    return _WS.sub("", text).casefold()


def _span_variants(span: str) -> list[str]:
    base = _uncontrol(str(span)).strip()
    unquoted = base
    for a, b in _QUOTES:
        if len(unquoted) >= 2 and unquoted.startswith(a) and unquoted.endswith(b):
            unquoted = unquoted[1:-1].strip()
            break
    out: list[str] = []
    for c in (base, unquoted, _TRAILING_TAG.sub("", base).strip(), _TRAILING_TAG.sub("", unquoted).strip()):
        if c and c not in out:
            out.append(c)
    return out


def verify_span(response: str, span: Any, values: Any, arity: int) -> dict[str, Any]:
    """Whether the judge's values are in its quoted span (or, failing that, in the response); the numbers to score
    are transcribed from the text. Returns {ok, reason, tier?, numbers}."""
    def fail(why: str) -> dict[str, Any]:
        return {"ok": False, "reason": why, "numbers": []}

    if not isinstance(span, str) or not span.strip():
        return fail("empty_span")
    if not isinstance(values, list) or len(values) != arity:
        return fail(f"arity_mismatch:{len(values) if isinstance(values, list) else 0}!={arity}")
    try:
        want = [float(v) for v in values]
    except (TypeError, ValueError):
        return fail("non_numeric")

    def accept(source: str, tier: str) -> dict[str, Any]:
        tokens = find_numbers(source)
        found = _floats(tokens)
        if not tokens or found is None:
            return fail("no_numbers_in_span")
        at = _run_at(found, want)
        if at < 0:
            return fail("values_not_in_span")
        return {"ok": True, "reason": "ok", "tier": tier, "numbers": tokens[at:at + len(want)]}

    located = False
    if _WS.sub(" ", span).strip() in _WS.sub(" ", response).strip():
        exact = accept(span, "exact")
        if exact["ok"]:
            return exact
        located = True
    resp_key = _key(response)
    resp_numbers = _floats(find_numbers(response)) or []
    for variant in _span_variants(span):
        if _key(variant) in resp_key:
            got = accept(variant, "normalized")
            if got["ok"]:
                nums = _floats(got["numbers"]) or []
                return got if _run_at(resp_numbers, nums) >= 0 else fail("normalized_values_not_in_response")
            located = True
            break
    if all(v == 0 for v in want):
        return fail("all_zero_value_anchor")
    anchored = accept(response, "value_anchor")
    if anchored["ok"]:
        return anchored
    return fail("values_not_in_span" if located else "span_not_found")


def decide(strict_ok: bool, rec: dict[str, Any] | None, verified: dict[str, Any] | None) -> tuple[str, str]:
    """(answer mode, reason) by upstream's decision table: strict first; then only a verified judge answer."""
    if rec is None:
        reason = "no_judge_record"
    elif rec.get("status") != "ok":
        reason = f"judge_invalid:{rec.get('reason') or 'unknown'}"
    elif (rec.get("final_answer") or {}).get("status") == "no_conclusion":
        reason = "judge_no_conclusion"
    elif verified is None:
        reason = "span_not_checked"
    else:
        reason = "ok" if verified.get("ok") else f"span_{verified.get('reason') or 'unverified'}"
    if strict_ok:
        return "conclusion_in_format", reason
    if rec is None or rec.get("status") != "ok":
        return "undetermined", reason
    if (rec.get("final_answer") or {}).get("status") == "no_conclusion":
        return "no_conclusion", reason
    if verified is not None and verified.get("ok"):
        return "conclusion_off_format", reason
    return "undetermined", reason


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
        from medvision_bm.runner.signature import digest

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
    from medvision_bm.report.rescore import store_docs
    from medvision_bm.runner.store import SampleStore

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
    from medvision_bm.tasks.scoring import failed_score, protocol_settings, score_answer
    from medvision_bm.tasks.store_scoring import group_fields
    from medvision_bm.tasks.upstream_parse import K_PER_FAMILY, is_request_failure

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
                    verified = verify_span(text, fa.get("span"), fa.get("values"), K_PER_FAMILY[doc.family])
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
    from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, aggregate_rows, protocol_settings
    from medvision_bm.tasks.store_scoring import SCORING_VERSION

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


# ----------------------------------------------------------------------------------------------------------------
# the command

def build_parser(prog: str = "medvision-bm judge") -> argparse.ArgumentParser:
    from medvision_bm.report.summarize_cli import _families
    from medvision_bm.secrets import SafeArgumentParser

    p = SafeArgumentParser(prog=prog, description="Re-read the stored raw answers with an LLM judge, as "
                                "upstream MedVision's paper numbers were (script/llm-parsing: its prompt, answer "
                                "contract, span check and strict-first rule), and store the judged parse beside "
                                "the strict one (<store>/judged/<judge signature>/). Resumable: a rerun asks only "
                                "samples not judged yet. `medvision-bm summarize --parse judged|both` reports it.")
    p.add_argument("--results_dir", required=True, help="results folder (as given to `medvision-bm run`)")
    p.add_argument("--judge_model", required=True,
                   help="registry model that judges: an API record (openai, claude, gemini, kimi, minimax_m3_api), "
                   "openai-compatible with --base_url and --judge_model_code, or an open-weights record served "
                   "by vLLM at --base_url (upstream's judge: gemma4 = google/gemma-4-31B-it)")
    p.add_argument("--judge_model_code", default=None,
                   help="the served model name or the provider's model code (default: the record's weights or "
                   "model code)")
    p.add_argument("--base_url", action="append", default=None,
                   help="OpenAI-compatible server URL(s) of the judge (repeatable or comma-separated)")
    p.add_argument("--api_provider", default=None, help="provider of an API judge (e.g. openrouter)")
    p.add_argument("--models", type=_csv, default=None, help="comma-separated model folder names (default: all)")
    p.add_argument("--tasks", type=_csv, default=None, help="comma-separated task names (default: all)")
    p.add_argument("--families", type=_families, default=None, help="comma-separated: detect,TL,AD (default: all)")
    p.add_argument("--concurrency", type=int, default=16, help="judge requests in flight (default 16)")
    p.add_argument("--max_retries", type=int, default=6, help="retries per request after the first (default 6)")
    p.add_argument("--request_timeout", type=float, default=300.0, help="seconds per attempt (default 300)")
    p.add_argument("--only_strict_failures", action="store_true",
                   help="ask the judge only about answers the strict parser failed on (the judged numbers are "
                   "the same: a strict success always stands; upstream asks about every answer)")
    p.add_argument("--redo_invalid", action="store_true",
                   help="ask again about answers whose stored judge reply is invalid (not the contract); the new "
                   "reply is appended and the newest one counts (upstream's repair pass). Without it an invalid "
                   "reply counts as judged")
    p.add_argument("--min_valid_rate", type=float, default=MIN_VALID_RATE,
                   help=f"stop, writing no reply, when fewer than this share of the first {GATE_REPLIES} judge "
                   f"replies of a run follow the contract (default {MIN_VALID_RATE}, upstream's; 0 turns the "
                   "check off, e.g. for a --redo_invalid pass over answers the judge failed on before)")
    p.add_argument("--dry_run", action="store_true", help="say how many answers would be judged; ask nothing")
    return p


def judge_spec(ns: argparse.Namespace) -> tuple[JudgeSpec, dict[str, Any]]:
    """The judge's identity and the options of its API backend (a UserError for an unusable choice)."""
    from medvision_bm.models.api import MODEL_OPTION, PROVIDERS
    from medvision_bm.models.registry import API_BACKENDS, get_record

    record = get_record(ns.judge_model)
    urls = [u for arg in (ns.base_url or []) for u in _csv(arg)]
    if record.backend in API_BACKENDS:
        kind = record.backend
        code = ns.judge_model_code
        if code is None and kind != "openai_compatible":
            flag = next((f for f in record.flags if f.dest == MODEL_OPTION[kind]), None)
            code = flag.default if flag else None
        if kind == "openai_compatible" and not code:
            raise UserError("--judge_model openai-compatible needs --judge_model_code (the served model name) and "
                            "--base_url")
    elif record.default_weights or ns.judge_model_code:
        if not urls:
            raise UserError(f"--judge_model {record.name} runs on a GPU: serve it (e.g. `vllm serve "
                            f"{record.default_weights or 'WEIGHTS'}`) and pass --base_url URL, or judge with an API "
                            "model")
        kind, code = "openai_compatible", ns.judge_model_code or record.default_weights
    else:
        raise UserError(f"--judge_model {record.name} cannot judge (it is a {record.backend} record); choose an "
                        "API record, openai-compatible, or a served open-weights record")
    if ns.concurrency < 1:
        raise UserError(f"--concurrency {ns.concurrency}: give at least 1")
    if ns.max_retries < 0:
        raise UserError(f"--max_retries {ns.max_retries}: give 0 or more")
    if not (math.isfinite(ns.request_timeout) and ns.request_timeout > 0):
        raise UserError(f"--request_timeout {ns.request_timeout}: give a number of seconds above 0")
    if not (math.isfinite(ns.min_valid_rate) and 0 <= ns.min_valid_rate <= 1):
        raise UserError(f"--min_valid_rate {ns.min_valid_rate}: give a share from 0 (no check) to 1")
    provider = "server" if kind == "openai_compatible" else (ns.api_provider or PROVIDERS[kind][0])
    sampling = dict(jp.SAMPLING) if kind in ("openai_compatible", "openai") else \
        {"temperature": jp.SAMPLING["temperature"], "max_tokens": jp.SAMPLING["max_tokens"]}
    options: dict[str, Any] = {MODEL_OPTION[kind]: code, "base_url": urls or None, "api_provider": ns.api_provider,
                               "batch_size": ns.concurrency, "max_retries": ns.max_retries,
                               "request_timeout": ns.request_timeout,
                               "sample_deadline": max(900.0, ns.request_timeout * (ns.max_retries + 1))}
    return JudgeSpec(record.name, kind, provider, str(code), sampling), options


def _gen(spec: JudgeSpec) -> Any:
    from medvision_bm.models.base import GenSettings

    s = spec.sampling
    return GenSettings(max_new_tokens=int(s["max_tokens"]), temperature=s.get("temperature"), top_p=s.get("top_p"),
                       seed=s.get("seed"))


def _request(job_id: int, rd: Any, text: str, gen: Any) -> Any:
    from medvision_bm.models.base import GenRequest

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


def judge_main(argv: Sequence[str], prog: str = "medvision-bm judge", *, backend_factory: Any = None) -> int:
    from medvision_bm.models.api import build_api_backend
    from medvision_bm.report.rescore import StoreProblem
    from medvision_bm.report.stores import discover

    ns = build_parser(prog).parse_args(list(argv))
    spec, options = judge_spec(ns)
    inputs, signature = spec.inputs(), spec.signature
    refs, notes = discover(ns.results_dir, models=ns.models, tasks=ns.tasks, families=ns.families)
    jobs: list[StoreJob] = []
    for ref in refs:
        try:
            rundocs, shas, state, protocol = load_store(ref)
        except StoreProblem as exc:
            notes.append(str(exc))
            continue
        folder = ref.folder / JUDGED_DIR / signature[:12]
        done, bad = read_judged(folder, signature)
        jobs.append(StoreJob(ref, rundocs, shas, state, protocol, folder, done, bad))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not jobs:
        raise UserError(f"results dir {ns.results_dir} holds no store the judge can read")

    from medvision_bm.tasks.scoring import protocol_settings, score_answer
    from medvision_bm.tasks.upstream_parse import is_request_failure

    gen = _gen(spec)
    todo: list[Any] = []
    # the judge reads only the response: identical responses of one task type are asked once (as upstream's cache)
    asked: dict[tuple[str, str | None, str], str] = {}
    meta: dict[str, list[tuple[StoreJob, Any, str]]] = {}
    for i, job in enumerate(jobs):
        parser, rules = (protocol_settings(job.protocol)[k] for k in ("parser", "rules"))
        for rd in job.rundocs:
            text = job.text(rd.doc.key)
            if text is None or is_request_failure(text):
                continue
            prev = job.done.get(rd.doc.key)
            if prev is not None and prev.get("answer_sha") == answer_sha(text) \
                    and not (ns.redo_invalid and prev.get("status") == "invalid"):
                continue
            if ns.only_strict_failures and score_answer(rd.doc, rd.view, text, parser, rules).success:
                continue
            task_type = jp.TASK_TYPE[rd.doc.family]
            same = (task_type, jp.step_key(task_type, rd.doc.metric_type), text)
            if same not in asked:
                req = _request(i, rd, text, gen)
                todo.append(req)
                asked[same] = req.key
                meta[req.key] = []
            meta[asked[same]].append((job, rd, text))
    already = sum(len(j.done) for j in jobs)
    n_answers = sum(len(m) for m in meta.values())
    print(f"judge {spec.record} ({spec.weights}, {spec.kind}); signature {signature[:12]}; {len(jobs)} store(s); "
          f"{already} answer(s) judged before, {n_answers} to judge in {len(todo)} request(s) (identical responses "
          "are asked once)", file=sys.stderr)
    if ns.dry_run:
        return 0
    # built before anything is written: a missing key or a bad option fails with nothing on disk
    backend = (backend_factory or build_api_backend)(spec.kind, {**options, "gen": gen}) if todo else None
    for job in jobs:
        job.folder.mkdir(parents=True, exist_ok=True)
        if not (job.folder / "judge.json").is_file():
            write_json_atomic(job.folder / "judge.json", {"judge_signature": signature, "inputs": inputs,
                                                          "schema": 1})
        else:
            try:
                held = read_json(job.folder / "judge.json")
            except (OSError, ValueError):
                held = None
            if not isinstance(held, dict):
                raise UserError(f"{job.folder / 'judge.json'} is unreadable (not a JSON object); move {job.folder} "
                                "away and rerun")
            if held.get("judge_signature") != signature:
                raise UserError(f"{job.folder} belongs to another judge signature; move it away")
    writers: dict[int, JsonlAppender] = {}
    writer_name = f"{socket.gethostname()}-{os.getpid()}-{time.time_ns()}.jsonl"
    failed = 0
    gate = ValidRateGate(ns.min_valid_rate, min(GATE_REPLIES, len(todo)))

    def on_result(result: Any) -> None:
        if gate.open:
            store_result(result)
            return
        rd = meta[result.key][0][1]
        status, why, _ = verdict(result.text or "", rd.doc.family, rd.doc.metric_type) if result.ok \
            else ("failed", "", None)
        for held in gate.admit(result, status, why):
            store_result(held)

    def store_result(result: Any) -> None:
        nonlocal failed
        for job, rd, text in meta[result.key]:
            w = writers.get(id(job))
            if w is None:
                w = writers[id(job)] = JsonlAppender(job.folder / "answers" / writer_name)
            rec = reply_record(rd.doc.key, text, signature, result, rd.doc.family, rd.doc.metric_type)
            w.append(rec)
            if rec["status"] == "failed":
                failed += 1
            else:
                job.done[rd.doc.key] = rec

    if backend is not None:
        try:
            backend.generate(todo, on_result)
            for held in gate.release():  # a run with fewer replies than the probe: judged on what came back
                store_result(held)
        finally:
            backend.close()
            for w in writers.values():
                w.close()
    width = max(len(j.ref.label) for j in jobs)
    incomplete = 0
    for job in jobs:
        res = write_judged(job, inputs, signature)
        c, m = res["counts"], res["metrics"]
        incomplete += not res["complete"]
        modes = ", ".join(f"{k} {v}" for k, v in sorted(c["modes"].items()))
        print(f"{job.ref.label:<{width}}  {job.ref.task}  {job.ref.sig12}  judged {c['judged']}/{c['answered']}  "
              f"success strict -> judged: {c['modes'].get('conclusion_in_format', 0)} -> {m['n_success']}  "
              f"({modes})  judge invalid {c['judge_invalid']}")
    print(f"wrote the judged parse of {len(jobs)} store(s) under <store>/{JUDGED_DIR}/{signature[:12]}/"
          + (f"; {failed} judge request(s) failed: rerun the same command to ask them again" if failed else ""))
    return 1 if failed or incomplete else 0


def cli_main(argv: list[str]) -> int:
    from medvision_bm.cli import run_handler

    return run_handler(lambda: judge_main(argv), prog="medvision-bm judge")


# ----------------------------------------------------------------------------------------------------------------
# reading judged parses (for load/summarize)

def judged_parses(store_folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The judged parses of a store: (folder, judge.json) for every judged/<sig>/ holding a parsed.jsonl."""
    base = store_folder / JUDGED_DIR
    out = []
    if base.is_dir():
        for sub in sorted(base.iterdir()):
            if (sub / "parsed.jsonl").is_file() and (sub / "judge.json").is_file():
                try:
                    out.append((sub, read_json(sub / "judge.json")))
                except (OSError, ValueError):
                    continue
    return out


def pick_judged(store_folder: Path, judge: str | None) -> tuple[Path | None, str]:
    """The judged parse a summary uses for one store (``judge``: a judge model, weights or signature prefix), or
    (None, why not)."""
    found = judged_parses(store_folder)
    if judge:
        found = [(p, j) for p, j in found if judge in (str(j.get("judge_signature", "")), p.name)
                 or str(j.get("judge_signature", "")).startswith(judge)
                 or judge in ((j.get("inputs") or {}).get("judge_model"), (j.get("inputs") or {}).get("weights"))]
    if not found:
        return None, "no judged parse" + (f" by {judge}" if judge else "") + "; run `medvision-bm judge` on it"
    if len(found) > 1:
        names = ", ".join(f"{p.name} ({(j.get('inputs') or {}).get('weights')})" for p, j in found)
        return None, f"several judged parses ({names}); pick one with --judge"
    return found[0][0], ""


def judge_description(stores: Sequence[Any]) -> str:
    """The judges behind loaded judged parses (``StoreInfo`` list), e.g. ``gemma4 google/gemma-4-31B-it (3f2a...)``."""
    seen: list[str] = []
    for s in stores:
        parts = str(s.source).split("/")
        if len(parts) < 2 or parts[0] != JUDGED_DIR:
            continue
        try:
            info = read_json(s.ref.folder / JUDGED_DIR / parts[1] / "judge.json")
        except (OSError, ValueError):
            continue
        inputs = info.get("inputs") or {}
        text = f"{inputs.get('judge_model')} {inputs.get('weights')} (judge signature {parts[1]}, " \
               f"{inputs.get('prompt_version')})"
        if text not in seen:
            seen.append(text)
    return "; ".join(seen) or "-"
