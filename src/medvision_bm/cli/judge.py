"""`medvision-bm judge`: flags to a judge and its stores, the run, and the per-store digest it prints."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Sequence

from medvision_bm.cli import run_handler
from medvision_bm.cli.flag_types import csv_list, family_list
from medvision_bm.errors import UserError
from medvision_bm.judge import prompt as jp
from medvision_bm.judge.run import (
    GATE_REPLIES,
    MIN_VALID_RATE,
    STRUCTURED_CHOICES,
    JudgeSpec,
    gen_settings,
    structured_mode,
)
from medvision_bm.judge.session import (
    BackendFactory,
    JudgeOptions,
    JudgeOutcome,
    JudgePlan,
    load_jobs,
    plan_judging,
    run_judge,
)
from medvision_bm.models.api import MODEL_OPTION, PROVIDERS, build_api_backend
from medvision_bm.models.api.options import ApiOptions
from medvision_bm.models.registry import API_BACKENDS, get_record
from medvision_bm.secrets import SafeArgumentParser
from medvision_bm.store.discovery import discover
from medvision_bm.store.judged import JUDGED_DIR


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


def judge_spec(ns: argparse.Namespace) -> tuple[JudgeSpec, ApiOptions]:
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
    options = ApiOptions.of({MODEL_OPTION[kind]: code, "base_url": urls or None, "api_provider": ns.api_provider,
                             "batch_size": ns.concurrency, "max_retries": ns.max_retries,
                             "request_timeout": ns.request_timeout,
                             "sample_deadline": max(900.0, ns.request_timeout * (ns.max_retries + 1))})
    return JudgeSpec(record.name, kind, provider, str(code), sampling, structured_mode(ns.structured, kind)), options


def judge_options(ns: argparse.Namespace) -> JudgeOptions:
    """The run's options from its flags (the judge itself is :func:`judge_spec`'s)."""
    return JudgeOptions(concurrency=ns.concurrency, limit_rows=ns.limit_rows,
                        only_strict_failures=ns.only_strict_failures, redo_invalid=ns.redo_invalid,
                        min_valid_rate=ns.min_valid_rate)


def _plan_line(spec: JudgeSpec, plan: JudgePlan, limit_rows: int | None) -> str:
    sample = f"--limit_rows {limit_rows}: {plan.chosen} of {plan.stored} stored answers, evenly spaced; " \
        if limit_rows is not None else ""
    reused = f", {len(plan.reuse)} more share a response judged before (its verdict is reused)" if plan.reuse else ""
    return (f"judge {spec.record} ({spec.weights}, {spec.kind}, structured output: {spec.structured}); signature "
            f"{spec.signature[:12]}; {len(plan.jobs)} store(s); {sample}{plan.judged_before} answer(s) judged "
            f"before{reused}, {plan.n_answers} to judge in {len(plan.todo)} request(s) (identical responses are "
            "asked once)")


def _print_outcome(outcome: JudgeOutcome, signature: str, limit_rows: int | None) -> None:
    width = max(len(d.label) for d in outcome.stores)
    for d in outcome.stores:
        c, m, by_mode = d.counts, d.metrics, dict(d.counts.modes or {})
        modes = ", ".join(f"{k} {v}" for k, v in sorted(by_mode.items()))
        print(f"{d.label:<{width}}  {d.task}  {d.sig12}  judged {c.judged}/{c.answered}  "
              f"success strict -> judged: {by_mode.get('conclusion_in_format', 0)} -> {m['n_success']}  "
              f"({modes})  judge invalid {c.judge_invalid}")
    failed, incomplete = outcome.failed, outcome.incomplete
    print(f"wrote the judged parse of {len(outcome.stores)} store(s) under <store>/{JUDGED_DIR}/{signature[:12]}/"
          + (f"; {failed} judge request(s) failed: rerun the same command to ask them again" if failed else "")
          + (f"; {incomplete} store(s) judged in part (--limit_rows): rerun without it to judge the rest"
             if incomplete and limit_rows is not None else ""))


def judge_main(argv: Sequence[str], prog: str = "medvision-bm judge", *,
               backend_factory: BackendFactory | None = None) -> int:
    """Flags in, the judge run (:func:`medvision_bm.judge.session.run_judge`), a digest per store out."""
    ns = build_parser(prog).parse_args(list(argv))
    spec, options = judge_spec(ns)
    opts = judge_options(ns)
    refs, notes = discover(ns.results_dir, models=ns.models, tasks=ns.tasks, families=ns.families)
    started = time.time()  # replies other judge runs store from now on are theirs to give (JudgeClaims)
    jobs, unreadable = load_jobs(refs, spec.signature)
    for note in notes + unreadable:
        print(f"note: {note}", file=sys.stderr)
    if not jobs:
        raise UserError(f"results dir {ns.results_dir} holds no store the judge can read")
    plan = plan_judging(spec, jobs, opts)
    print(_plan_line(spec, plan, ns.limit_rows), file=sys.stderr)
    if ns.dry_run:
        return 0
    # built before anything is written: a missing key or a bad option fails with nothing on disk
    backend = (backend_factory or build_api_backend)(spec.kind, dataclasses.replace(options, gen=gen_settings(spec))) \
        if plan.todo else None
    outcome = run_judge(spec, plan, opts, backend, started=started)
    _print_outcome(outcome, spec.signature, ns.limit_rows)
    # a --limit_rows pilot leaves stores judged in part on purpose: only failed requests make it fail
    return 1 if outcome.failed or (outcome.incomplete and ns.limit_rows is None) else 0


def cli_main(argv: list[str]) -> int:

    return run_handler(lambda: judge_main(argv), prog="medvision-bm judge")
