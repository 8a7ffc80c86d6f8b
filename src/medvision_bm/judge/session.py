"""One judge run over stores: which stored answers to ask about, the asking (claims, the valid-rate gate, verdict
reuse) and the judged parses written, returned as a typed outcome. The command line (`cli/judge.py`) only turns
flags into a :class:`~medvision_bm.judge.run.JudgeSpec` and :class:`JudgeOptions` and prints what comes back."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from medvision_bm.data.docs import RunDoc
from medvision_bm.errors import UserError
from medvision_bm.io import JsonlAppender
from medvision_bm.jsontypes import JsonMapping, JsonObject
from medvision_bm.judge import prompt as jp
from medvision_bm.judge.run import (
    GATE_REPLIES,
    JudgeClaims,
    JudgeSpec,
    StoreJob,
    ValidRateGate,
    answer_sha,
    gen_settings,
    judge_request,
    load_store,
    reply_record,
    verdict,
    write_judged,
)
from medvision_bm.models.api.options import ApiOptions
from medvision_bm.models.base import Backend, GenRequest, GenResult
from medvision_bm.score.rescore import StoreProblem
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.judged import read_judged
from medvision_bm.store.layout import JudgedLayout, StoreLayout, segment_name
from medvision_bm.store.records import Counts, JudgeFile
from medvision_bm.tasks.scoring import protocol_settings, score_answer
from medvision_bm.tasks.upstream_parse import is_request_failure

_T = TypeVar("_T")

#: a request's samples: (store, run doc, the stored response) for every sample holding that response
Holders = list[tuple[StoreJob, RunDoc, str]]
#: the judge backend's ``generate(requests, on_result)`` and ``close()`` (an API backend, or a test's)
BackendFactory = Callable[[str, ApiOptions], Backend]


@dataclass(frozen=True)
class JudgeOptions:
    """What to judge and how strictly (the command's flags, checked)."""

    concurrency: int = 16
    limit_rows: int | None = None
    only_strict_failures: bool = False
    redo_invalid: bool = False
    min_valid_rate: float = 0.95


@dataclass
class JudgePlan:
    """The requests to send (identical responses of one task type asked once), whose samples each covers, and the
    samples that reuse a verdict given before on the same response."""

    jobs: list[StoreJob]
    todo: list[GenRequest]
    holders: dict[str, Holders]
    reuse: list[tuple[StoreJob, RunDoc, JsonObject]]
    stored: int  # answers stored across the stores (request failures left out)
    chosen: int  # of those, the ones --limit_rows keeps (all without it)
    judged_before: int

    @property
    def n_answers(self) -> int:
        return sum(len(h) for h in self.holders.values())


@dataclass(frozen=True)
class StoreDigest:
    """One store's judged parse as written: its name, counts and metrics."""

    label: str
    task: str
    sig12: str
    counts: Counts
    metrics: JsonMapping
    complete: bool


@dataclass(frozen=True)
class JudgeOutcome:
    """What a judge run left: each store's digest and the requests that failed (asked again by a rerun)."""

    stores: list[StoreDigest] = field(default_factory=list)
    failed: int = 0

    @property
    def incomplete(self) -> int:
        return sum(not s.complete for s in self.stores)


def evenly_spaced(items: Sequence[_T], n: int | None) -> list[_T]:
    """``n`` items spread over the whole sequence (upstream's ``--limit_rows``: ``rows[int(i * len / n)]``); all of
    them when ``n`` is None or not smaller."""
    if n is None or len(items) <= n:
        return list(items)
    stride = len(items) / n
    return [items[int(i * stride)] for i in range(n)]


def load_jobs(refs: Sequence[StoreRef], signature: str) -> tuple[list[StoreJob], list[str]]:
    """Each store's samples, answers and the judge replies stored before; a store that cannot be read is a note."""
    jobs: list[StoreJob] = []
    notes: list[str] = []
    for ref in refs:
        try:
            rundocs, shas, state, protocol = load_store(ref)
        except StoreProblem as exc:
            notes.append(str(exc))
            continue
        folder = StoreLayout(ref.folder).judged_parse(signature).folder
        done, bad = read_judged(folder, signature)
        jobs.append(StoreJob(ref, rundocs, shas, state, protocol, folder, done, bad))
    return jobs, notes


def _same_response(rd: RunDoc, text: str) -> tuple[str, str | None, str]:
    task_type = jp.TASK_TYPE[rd.doc.family]
    return task_type, jp.step_key(task_type, rd.doc.metric_type), text


def plan_judging(spec: JudgeSpec, jobs: list[StoreJob], opts: JudgeOptions) -> JudgePlan:
    """The judge reads only the response: identical responses of one task type are asked once (as upstream's cache),
    and a verdict on a response judged before counts for every sample with the same response (upstream's by_key
    fan-out in ``run_judge_vllm.py`` @2f20f64): a rerun asks about it again only with ``redo_invalid`` on an invalid
    one."""
    gen = gen_settings(spec)
    stored = [(i, rd, text) for i, job in enumerate(jobs) for rd in job.rundocs
              if (text := job.text(rd.doc.key)) is not None and not is_request_failure(text)]
    verdicts: dict[tuple[str, str | None, str], JsonObject] = {}
    for i, rd, text in stored:
        prev = jobs[i].done.get(rd.doc.key)
        if prev is not None and prev.get("answer_sha") == answer_sha(text):
            verdicts.setdefault(_same_response(rd, text), prev)
    chosen = evenly_spaced(stored, opts.limit_rows)
    todo: list[GenRequest] = []
    asked: dict[tuple[str, str | None, str], str] = {}
    holders: dict[str, Holders] = {}
    reuse: list[tuple[StoreJob, RunDoc, JsonObject]] = []
    for i, rd, text in chosen:
        job = jobs[i]
        prev = job.done.get(rd.doc.key)
        if prev is not None and prev.get("answer_sha") == answer_sha(text) \
                and not (opts.redo_invalid and prev.get("status") == "invalid"):
            continue
        if opts.only_strict_failures:
            settings = protocol_settings(job.protocol)
            if score_answer(rd.doc, rd.view, text, settings.parser, settings.rules).success:
                continue
        same = _same_response(rd, text)
        known = verdicts.get(same)
        if known is not None and not (opts.redo_invalid and known.get("status") == "invalid"):
            reuse.append((job, rd, known))
            continue
        if same not in asked:
            req = judge_request(i, rd, text, gen, spec.structured)
            todo.append(req)
            asked[same] = req.key
            holders[req.key] = []
        holders[asked[same]].append((job, rd, text))
    return JudgePlan(jobs, todo, holders, reuse, len(stored), len(chosen), sum(len(j.done) for j in jobs))


def prepare_folders(jobs: list[StoreJob], spec: JudgeSpec) -> None:
    """Each store's judged folder with its ``judge.json``; a folder of another judge is refused before any request."""
    signature = spec.signature
    for job in jobs:
        job.folder.mkdir(parents=True, exist_ok=True)
        judge_file = JudgedLayout(job.folder).judge_file
        if not judge_file.is_file():
            JudgeFile(signature, spec.inputs()).write(judge_file)
            continue
        try:
            held = JudgeFile.read(judge_file)
        except (OSError, ValueError):
            raise UserError(f"{judge_file} is unreadable (not a JSON object); move {job.folder} away and "
                            "rerun") from None
        if held.judge_signature != signature:
            raise UserError(f"{job.folder} belongs to another judge signature; move it away")


class _ReplyWriter:
    """Stores judge replies as they land: one answers segment per store, each reply fanned out to every sample
    holding its response, the first replies held back by the valid-rate gate."""

    def __init__(self, plan: JudgePlan, signature: str, gate: ValidRateGate) -> None:
        self.plan, self.signature, self.gate = plan, signature, gate
        self.segment = segment_name()
        self.writers: dict[int, JsonlAppender] = {}
        self.failed = 0

    def _writer(self, job: StoreJob) -> JsonlAppender:
        w = self.writers.get(id(job))
        if w is None:
            w = self.writers[id(job)] = JsonlAppender(JudgedLayout(job.folder).answers / self.segment)
        return w

    def on_result(self, result: GenResult) -> None:
        if self.gate.open:
            self._store(result)
            return
        rd = self.plan.holders[result.key][0][1]
        status, why, _ = verdict(result.text or "", rd.doc.family, rd.doc.metric_type) if result.ok \
            else ("failed", "", None)
        for held in self.gate.admit(result, status, why):
            self._store(held)

    def _store(self, result: GenResult) -> None:
        for job, rd, text in self.plan.holders[result.key]:
            rec = reply_record(rd.doc.key, text, self.signature, result, rd.doc.family, rd.doc.metric_type)
            self._writer(job).append(rec)
            if rec["status"] == "failed":
                self.failed += 1
            else:
                job.done[rd.doc.key] = rec

    def reuse(self, job: StoreJob, rd: RunDoc, known: JsonObject) -> None:
        rec: JsonObject = {**known, "key": rd.doc.key, "time": time.time(),
                           "reused_from": known.get("reused_from") or known["key"]}
        self._writer(job).append(rec)
        job.done[rd.doc.key] = rec

    def release_gate(self) -> None:
        for held in self.gate.release():  # judged on the replies that came back so far
            self._store(held)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()


def _ask(plan: JudgePlan, backend: Backend, claims: JudgeClaims, out: _ReplyWriter, chunk: int) -> None:
    """As the runner does: claim a chunk, ask it, claim the next; wait while another live judge run holds what is
    left (its replies are then reused, never asked again)."""
    pending = list(plan.todo)
    while pending:
        mine: list[GenRequest] = []
        waiting: list[GenRequest] = []
        for req in pending:
            if len(mine) >= chunk:
                waiting.append(req)
                continue
            state, rest, known = claims.claim(plan.holders[req.key])
            if state == "held":
                waiting.append(req)
            elif state == "mine":
                plan.holders[req.key] = rest
                mine.append(req)
            elif known is not None:
                for job, rd, _ in rest:
                    out.reuse(job, rd, known)
        if mine:
            backend.generate(mine, out.on_result)
        elif waiting:
            out.release_gate()  # what this run holds back must land before it waits on another run
            claims.wait()
        pending = waiting
    out.release_gate()  # a run with fewer replies than the probe


def run_judge(spec: JudgeSpec, plan: JudgePlan, opts: JudgeOptions, backend: Backend | None, *,
              started: float) -> JudgeOutcome:
    """Ask the plan's requests through ``backend`` (None when there is nothing to ask), store every reply as it
    lands, then write each store's judged parse. ``started``: when the stores were read (replies other judge runs
    store from then on are theirs to give)."""
    signature = spec.signature
    prepare_folders(plan.jobs, spec)
    out = _ReplyWriter(plan, signature, ValidRateGate(opts.min_valid_rate, min(GATE_REPLIES, len(plan.todo))))
    claims = JudgeClaims(plan.jobs, signature, out.segment, started) if backend is not None else None
    try:
        for job, rd, known in plan.reuse:  # the same response's verdict, stored for this sample without asking
            out.reuse(job, rd, known)
        if backend is not None and claims is not None:
            try:
                _ask(plan, backend, claims, out, max(32, 8 * opts.concurrency))
            finally:
                backend.close()
    finally:
        if claims is not None:
            claims.close()
        out.close()
    digests = []
    for job in plan.jobs:  # what other judge runs stored meanwhile counts as judged
        job.done, job.bad_lines = read_judged(job.folder, signature)
        res = write_judged(job, spec.inputs(), signature)
        counts = res.counts if res.counts is not None else Counts()
        digests.append(StoreDigest(job.ref.label, job.ref.task, job.ref.sig12, counts, res.metrics or {},
                                   bool(res.complete)))
    return JudgeOutcome(digests, out.failed)
