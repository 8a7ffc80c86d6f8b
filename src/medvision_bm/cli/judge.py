"""`medvision-bm judge`: flags to a judge and its stores, the run, and the per-store digest it prints."""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from medvision_bm.cli import run_handler
from medvision_bm.cli.flag_types import csv_list, family_list
from medvision_bm.errors import UserError
from medvision_bm.io import JsonlAppender
from medvision_bm.judge import prompt as jp
from medvision_bm.judge.run import (
    GATE_REPLIES,
    MIN_VALID_RATE,
    STRUCTURED_CHOICES,
    JudgeClaims,
    JudgeSpec,
    StoreJob,
    ValidRateGate,
    _gen,
    _request,
    answer_sha,
    load_store,
    reply_record,
    structured_mode,
    verdict,
    write_judged,
)
from medvision_bm.models.api import MODEL_OPTION, PROVIDERS, build_api_backend
from medvision_bm.models.registry import API_BACKENDS, get_record
from medvision_bm.score.rescore import StoreProblem
from medvision_bm.secrets import SafeArgumentParser
from medvision_bm.store.discovery import discover
from medvision_bm.store.judged import JUDGED_DIR, read_judged
from medvision_bm.store.layout import JudgedLayout, StoreLayout
from medvision_bm.store.records import JudgeFile
from medvision_bm.tasks.scoring import protocol_settings, score_answer
from medvision_bm.tasks.upstream_parse import is_request_failure


def build_parser(prog: str = "medvision-bm judge") -> argparse.ArgumentParser:

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
    p.add_argument("--models", type=csv_list, default=None, help="comma-separated model folder names (default: all)")
    p.add_argument("--tasks", type=csv_list, default=None, help="comma-separated task names (default: all)")
    p.add_argument("--families", type=family_list, default=None, help="comma-separated: detect,TL,AD (default: all)")
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
    p.add_argument("--structured", choices=STRUCTURED_CHOICES, default="auto",
                   help="auto (upstream's default): send the judge contract as a JSON schema for guided decoding "
                   "(vLLM's structured_outputs field) to a judge served at --base_url; API judges get none. none: "
                   "never (faster where the grammar is CPU-bound); the choice is part of the judge signature")
    p.add_argument("--limit_rows", type=int, default=None,
                   help="judge an evenly spaced sample of this many stored answers across every store (upstream's "
                   "--limit_rows: a pilot that spans every model and task, not the first ones); a rerun with the "
                   "same number resumes the same sample")
    p.add_argument("--dry_run", action="store_true", help="say how many answers would be judged; ask nothing")
    return p


def evenly_spaced(items: Sequence[Any], n: int | None) -> list[Any]:
    """``n`` items spread over the whole sequence (upstream's ``--limit_rows``: ``rows[int(i * len / n)]``); all of
    them when ``n`` is None or not smaller."""
    if n is None or len(items) <= n:
        return list(items)
    stride = len(items) / n
    return [items[int(i * stride)] for i in range(n)]


def judge_spec(ns: argparse.Namespace) -> tuple[JudgeSpec, dict[str, Any]]:
    """The judge's identity and the options of its API backend (a UserError for an unusable choice)."""

    record = get_record(ns.judge_model)
    urls = [u for arg in (ns.base_url or []) for u in csv_list(arg)]
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
    if ns.limit_rows is not None and ns.limit_rows < 1:
        raise UserError(f"--limit_rows {ns.limit_rows}: give at least 1 (or leave it out to judge every answer)")
    provider = "server" if kind == "openai_compatible" else (ns.api_provider or PROVIDERS[kind][0])
    sampling = dict(jp.SAMPLING) if kind in ("openai_compatible", "openai") else \
        {"temperature": jp.SAMPLING["temperature"], "max_tokens": jp.SAMPLING["max_tokens"]}
    options: dict[str, Any] = {MODEL_OPTION[kind]: code, "base_url": urls or None, "api_provider": ns.api_provider,
                               "batch_size": ns.concurrency, "max_retries": ns.max_retries,
                               "request_timeout": ns.request_timeout,
                               "sample_deadline": max(900.0, ns.request_timeout * (ns.max_retries + 1))}
    return JudgeSpec(record.name, kind, provider, str(code), sampling, structured_mode(ns.structured, kind)), options


def judge_main(argv: Sequence[str], prog: str = "medvision-bm judge", *, backend_factory: Any = None) -> int:

    ns = build_parser(prog).parse_args(list(argv))
    spec, options = judge_spec(ns)
    inputs, signature = spec.inputs(), spec.signature
    refs, notes = discover(ns.results_dir, models=ns.models, tasks=ns.tasks, families=ns.families)
    started = time.time()  # replies other judge runs store from now on are theirs to give (JudgeClaims)
    jobs: list[StoreJob] = []
    for ref in refs:
        try:
            rundocs, shas, state, protocol = load_store(ref)
        except StoreProblem as exc:
            notes.append(str(exc))
            continue
        folder = StoreLayout(ref.folder).judged_parse(signature).folder
        done, bad = read_judged(folder, signature)
        jobs.append(StoreJob(ref, rundocs, shas, state, protocol, folder, done, bad))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not jobs:
        raise UserError(f"results dir {ns.results_dir} holds no store the judge can read")


    gen = _gen(spec)
    todo: list[Any] = []
    # the judge reads only the response: identical responses of one task type are asked once (as upstream's cache)
    asked: dict[tuple[str, str | None, str], str] = {}
    meta: dict[str, list[tuple[StoreJob, Any, str]]] = {}
    stored = [(i, rd, text) for i, job in enumerate(jobs) for rd in job.rundocs
              if (text := job.text(rd.doc.key)) is not None and not is_request_failure(text)]
    # a verdict on a response judged before counts for every sample with the same response (upstream's by_key
    # fan-out in run_judge_vllm.py @2f20f64): a rerun asks about it again only with --redo_invalid on an invalid one
    verdicts: dict[tuple[str, str | None, str], dict[str, Any]] = {}
    for i, rd, text in stored:
        prev = jobs[i].done.get(rd.doc.key)
        if prev is not None and prev.get("answer_sha") == answer_sha(text):
            task_type = jp.TASK_TYPE[rd.doc.family]
            verdicts.setdefault((task_type, jp.step_key(task_type, rd.doc.metric_type), text), prev)
    chosen = evenly_spaced(stored, ns.limit_rows)
    reuse: list[tuple[StoreJob, Any, dict[str, Any]]] = []
    for i, rd, text in chosen:
        job = jobs[i]
        prev = job.done.get(rd.doc.key)
        if prev is not None and prev.get("answer_sha") == answer_sha(text) \
                and not (ns.redo_invalid and prev.get("status") == "invalid"):
            continue
        if ns.only_strict_failures:
            parser, rules = (protocol_settings(job.protocol)[k] for k in ("parser", "rules"))
            if score_answer(rd.doc, rd.view, text, parser, rules).success:
                continue
        task_type = jp.TASK_TYPE[rd.doc.family]
        same = (task_type, jp.step_key(task_type, rd.doc.metric_type), text)
        known = verdicts.get(same)
        if known is not None and not (ns.redo_invalid and known.get("status") == "invalid"):
            reuse.append((job, rd, known))
            continue
        if same not in asked:
            req = _request(i, rd, text, gen, spec.structured)
            todo.append(req)
            asked[same] = req.key
            meta[req.key] = []
        meta[asked[same]].append((job, rd, text))
    already = sum(len(j.done) for j in jobs)
    n_answers = sum(len(m) for m in meta.values())
    sample = f"--limit_rows {ns.limit_rows}: {len(chosen)} of {len(stored)} stored answers, evenly spaced; " \
        if ns.limit_rows is not None else ""
    reused = f", {len(reuse)} more share a response judged before (its verdict is reused)" if reuse else ""
    print(f"judge {spec.record} ({spec.weights}, {spec.kind}, structured output: {spec.structured}); signature "
          f"{signature[:12]}; {len(jobs)} store(s); {sample}{already} answer(s) judged before{reused}, {n_answers} "
          f"to judge in {len(todo)} request(s) (identical responses are asked once)", file=sys.stderr)
    if ns.dry_run:
        return 0
    # built before anything is written: a missing key or a bad option fails with nothing on disk
    backend = (backend_factory or build_api_backend)(spec.kind, {**options, "gen": gen}) if todo else None
    for job in jobs:
        job.folder.mkdir(parents=True, exist_ok=True)
        judge_file = JudgedLayout(job.folder).judge_file
        if not judge_file.is_file():
            JudgeFile(signature, inputs).write(judge_file)
        else:
            try:
                held = JudgeFile.read(judge_file)
            except (OSError, ValueError):
                raise UserError(f"{judge_file} is unreadable (not a JSON object); move {job.folder} "
                                "away and rerun") from None
            if held.judge_signature != signature:
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

    def writer(job: StoreJob) -> JsonlAppender:
        w = writers.get(id(job))
        if w is None:
            w = writers[id(job)] = JsonlAppender(JudgedLayout(job.folder).answers / writer_name)
        return w

    def store_result(result: Any) -> None:
        nonlocal failed
        for job, rd, text in meta[result.key]:
            rec = reply_record(rd.doc.key, text, signature, result, rd.doc.family, rd.doc.metric_type)
            writer(job).append(rec)
            if rec["status"] == "failed":
                failed += 1
            else:
                job.done[rd.doc.key] = rec

    def store_reused(job: StoreJob, rd: Any, known: dict[str, Any]) -> None:
        rec = {**known, "key": rd.doc.key, "time": time.time(), "reused_from": known.get("reused_from") or known["key"]}
        writer(job).append(rec)
        job.done[rd.doc.key] = rec

    def release_gate() -> None:
        for held in gate.release():  # judged on the replies that came back so far
            store_result(held)

    claims = JudgeClaims(jobs, signature, writer_name, started) if backend is not None else None
    try:
        for job, rd, known in reuse:  # the same response's verdict, stored for this sample without asking
            store_reused(job, rd, known)
        if backend is not None and claims is not None:
            try:
                # as the runner does: claim a chunk, ask it, claim the next; wait while another live judge run
                # holds what is left (its replies are then reused, never asked again)
                chunk, pending = max(32, 8 * ns.concurrency), list(todo)
                while pending:
                    mine: list[Any] = []
                    waiting: list[Any] = []
                    for req in pending:
                        if len(mine) >= chunk:
                            waiting.append(req)
                            continue
                        state, rest, known = claims.claim(meta[req.key])
                        if state == "held":
                            waiting.append(req)
                        elif state == "mine":
                            meta[req.key] = rest
                            mine.append(req)
                        elif known is not None:
                            for job, rd, _ in rest:
                                store_reused(job, rd, known)
                    if mine:
                        backend.generate(mine, on_result)
                    elif waiting:
                        release_gate()  # what this run holds back must land before it waits on another run
                        claims.wait()
                    pending = waiting
                release_gate()  # a run with fewer replies than the probe
            finally:
                backend.close()
    finally:
        if claims is not None:
            claims.close()
        for w in writers.values():
            w.close()
    for job in jobs:  # what other judge runs stored meanwhile counts as judged
        job.done, job.bad_lines = read_judged(job.folder, signature)
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
          + (f"; {failed} judge request(s) failed: rerun the same command to ask them again" if failed else "")
          + (f"; {incomplete} store(s) judged in part (--limit_rows): rerun without it to judge the rest"
             if incomplete and ns.limit_rows is not None else ""))
    # a --limit_rows pilot leaves stores judged in part on purpose: only failed requests make it fail
    return 1 if failed or (incomplete and ns.limit_rows is None) else 0


def cli_main(argv: list[str]) -> int:

    return run_handler(lambda: judge_main(argv), prog="medvision-bm judge")
