"""The task loop: select samples, skip what is answered, ask the model for the rest, score, record status."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm.data.catalogue import check_tasks_at_release
from medvision_bm.data.docs import Doc, RunDoc
from medvision_bm.data.layout import RESOLUTION_VARIANTS, DataDir
from medvision_bm.data.overlay import BLACK_CANVAS_VARIANT, is_drawn, require_contour_drawer
from medvision_bm.data.overlay import RULE as VISUAL_PROMPT_RULE
from medvision_bm.errors import UserError
from medvision_bm.ingest.upstream import import_upstream
from medvision_bm.io import DISK_FULL_ERRNOS, run_tmpdir
from medvision_bm.models.base import Backend, GenResult, GenSettings
from medvision_bm.provenance import current_env_info, installed_versions
from medvision_bm.runner import parts as task_parts
from medvision_bm.runner import selection_cache
from medvision_bm.runner.batch_run import BatchRun
from medvision_bm.runner.config import RunConfig
from medvision_bm.runner.cost_cap import CappedClaims, cost_cap_of, run_price
from medvision_bm.runner.engine import engine_record, engine_signature
from medvision_bm.runner.harness import DirectHarness, LmmsHarness, TaskRun, preload_lmms, quiet_environment
from medvision_bm.runner.lmms_process import PendingPart, ProcessHarness
from medvision_bm.runner.parts import SamplesLog
from medvision_bm.runner.selection import StreamedSelection, selection_holds
from medvision_bm.runner.tally import Tally, finished_results, scoring_of
from medvision_bm.score.checkpoint import ScoreCheckpoint
from medvision_bm.score.follow import follow
from medvision_bm.score.store_scoring import SCORING_VERSION
from medvision_bm.secrets import redact
from medvision_bm.store.batches import batched_keys
from medvision_bm.store.claims import Claims, prune_score_files
from medvision_bm.store.finish import FileIds, file_ids, forget_finish, write_finish
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import Counts, ResultsRecord, Selection
from medvision_bm.store.samples import SampleStore, StoreState
from medvision_bm.store.signature import SHORT, answer_signature_inputs, digest, run_signature
from medvision_bm.store.status import LEGACY_ENTRY, StatusFile, results_hold_answers
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.scaled_ps import VARIANT as SCALED_PS_VARIANT
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, ScoreMemo, memo_of_task, protocol_settings
from medvision_bm.tasks.upstream_prompts import prompt_version


@dataclass
class TaskOutcome:
    task: str
    state: str  # "done" | "skipped" | "incomplete" | "error" | "submitted" (--batch_phase submit: batches open)
    n_selected: int = 0
    n_asked: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    store_dir: Path | None = None


@dataclass
class PreparedTask:
    """One task of a run, resolved: the selected samples (keys, indices and doc hashes: their docs are built again
    only where needed), signatures and store."""

    task: str
    family: str
    samples: StreamedSelection
    answer_sig: str
    answer_inputs: dict[str, Any]
    run_sig: str
    selection: Selection
    store: SampleStore
    gen: GenSettings
    n_available: int = 0  # the samples the task has at the data read (``all`` of a whole selection)
    selection_key: str = ""  # what the selection was made from (``runner.selection_cache``; "": never saved)
    selection_reused: bool = False  # taken from the store's saved selection, not walked from the data
    shas_digest: str = ""  # the digest of the selection's sorted doc hashes (in the run signature)

    def keep_selection(self) -> None:
        """Keep a walked selection in its store (once the store folder exists) for the next run to reuse."""
        if self.selection_key and not self.selection_reused and self.store.folder.is_dir() \
                and isinstance(self.samples, StreamedSelection):
            selection_cache.persist(StoreLayout(self.store.folder).selection_cache, self.selection_key,
                                    selection_cache.Selected(self.samples, self.shas_digest, False))

    @property
    def rundocs(self) -> list[RunDoc]:
        """Every selected sample as asked, built together (for callers that need them all at once)."""
        return self.samples.all_rundocs()

    @property
    def shas(self) -> dict[str, str]:
        """The doc hash of every selected sample, by key."""
        return dict(zip(self.samples.keys, self.samples.shas))

    @property
    def selected(self) -> list[Doc]:
        return [rd.doc for rd in self.rundocs]


def select_indices(n: int, sample_indices: list[int] | None, sample_limit: int | None, task: str) -> list[int]:
    """doc_ids a run evaluates: --sample_indices as given, else the first --sample_limit, else all (upstream order)."""
    if sample_indices is not None:
        bad = [i for i in sample_indices if i >= n]
        if bad:
            raise UserError(f"--sample_indices {bad[0]} is out of range for task {task} ({n} samples: 0..{n - 1})")
        return list(sample_indices)
    if sample_limit is not None:
        return list(range(min(n, sample_limit)))
    return list(range(n))


def prepare_task(cfg: RunConfig, data: DataDir, task: str) -> PreparedTask:
    # a --sample_limit run on a plan not indexed yet reads only the first limit + 1 samples (n then stands for
    # "more than the limit", which is all the selection needs)
    try:
        samples = data.samples(task, limit=cfg.sample_limit if cfg.sample_indices is None else None)
    except UserError as exc:  # name the listed task, whatever part of the data refused it
        raise UserError(str(exc) if task in str(exc) else f"task {task}: {exc}") from None
    tn = samples.tn
    n = len(samples)
    if not n:
        raise UserError(f"task {task} has no {tn.split} samples at annotation version {data.planner_version} "
                        f"(plan {samples.plan.path.name}); remove it from the tasks list")
    expected = cfg.tasks.get(task)
    if expected is not None and expected != n and samples.complete:
        print(f"note: tasks list says {expected} samples for {task}; the data has {n} at annotation version "
              f"{samples.plan_version} (upstream reads only the task names; evaluating the data's samples)",
              file=sys.stderr)
    family = tn.family
    gen = cfg.gen_for_task(family)
    budget = cfg.model_flags.get("thinking_budget")
    if cfg.model_flags.get("thinking") and budget and budget >= gen.max_new_tokens:
        raise UserError(f"--thinking_budget {budget} must be below the max tokens of task {task} "
                        f"({gen.max_new_tokens}); lower the budget or raise --max_new_tokens")
    data_root = str(data.root.resolve())
    protocol = cfg.protocol
    if protocol == "paper" and tn.variant and tn.variant not in RESOLUTION_VARIANTS:
        raise UserError(f"task {task}: the paper protocol has only the plain prompts; drop the {tn.variant} suffix "
                        "or run with --protocol current")
    if tn.variant == BLACK_CANVAS_VARIANT and family_spec(family).axes:
        try:
            require_contour_drawer()
        except UserError as exc:
            raise UserError(f"task {task}: {exc}") from None

    def materialise(indices: list[int]) -> list[RunDoc]:  # the selection's samples as asked, built by doc index
        return [RunDoc(d, cfg.view_for(d, data.root, tn.variant, samples.meta_header), protocol, tn.variant,
                       data_root) for d in samples.docs(indices)]

    inputs = answer_signature_inputs(
        model=cfg.signature_model(), generation=gen.to_json(), task=task,
        task_version=task_version(protocol, family, tn.variant), protocol=protocol,
        planner_version=data.planner_version, plan_version=samples.plan_version,
        filtering=data.contract.filtering, reshape_hw=list(cfg.reshape_for(tn.variant) or []) or None,
        processed_hw_rule=cfg.perceived_size_rule, system_prompt=cfg.system_prompt, model_flags=cfg.answer_flags(),
        engine=engine_signature(cfg), scaled_ps=list(cfg.scaled_ps) if tn.variant == SCALED_PS_VARIANT else None,
        visual_prompt=VISUAL_PROMPT_RULE if is_drawn(tn.variant) else None,
    )
    answer_sig = digest(inputs)
    selection = Selection.chosen(sample_indices=cfg.sample_indices, sample_limit=cfg.sample_limit, n_available=n)
    store = SampleStore(cfg.results_dir / cfg.model_name / task / answer_sig[:SHORT], answer_sig)
    # the store's saved selection when nothing it was made from changed, else walked a chunk at a time (only each
    # sample's key, index and doc hash are kept)
    key = selection_cache.selection_key(cfg, samples, answer_sig, selection)
    got = selection_cache.select(StoreLayout(store.folder).selection_cache, key,
                                 lambda: select_indices(n, cfg.sample_indices, cfg.sample_limit, task), materialise,
                                 protocol, tn.variant)
    run_sig = run_signature(answer_sig, selection, got.shas_digest)
    return PreparedTask(task, family, got.samples, answer_sig, inputs, run_sig, selection, store, gen, n,
                        selection_key=key, selection_reused=got.reused, shas_digest=got.shas_digest)


def todo_rundocs(prep: PreparedTask, state: StoreState, keep_failed: bool) -> list[RunDoc]:
    """Samples still to ask: not answered under this signature and doc (failed ones unless kept), built now."""
    return list(prep.samples.rundocs(prep.samples.todo(state, keep_failed)))


def task_version(protocol: str, family: str, variant: str) -> str:
    """The version of the prompt text a task renders (bumped on any wording change)."""
    return prompt_version(protocol, family, variant)


class Progress:
    """A tqdm bar over the samples of a run; a no-op when disabled."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self.bar = None
        if enabled and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="sample", dynamic_ncols=True, file=sys.stderr, disable=False)
        self.failed = 0

    def update(self, result: GenResult, backend: Backend) -> None:
        if self.bar is None:
            return
        if not result.ok:
            self.failed += 1
        stats = getattr(backend, "stats", None)
        extra = {"failed": self.failed}
        if callable(stats):
            s = stats()
            extra.update({k: s[k] for k in ("retries", "in_flight") if k in s})
        self.bar.set_postfix(extra, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def environment_versions() -> dict[str, str | None]:
    """Python and the installed versions of the packages that change answers or scores."""
    return {"python": platform.python_version(), **installed_versions()}


def git_commit() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        res = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return res.stdout.strip() or None if res.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


#: The keys a run's results.json always holds, null or not (``"error": null`` says the task raised nothing).
RUN_RESULTS_KEYS = frozenset({
    "model_name", "record", "task", "family", "task_version", "protocol", "parser_version", "metric_rules",
    "metric_path", "scoring_version", "perceived_size_rule", "planner_version", "plan_version", "sample_filtering",
    "task_meta_source", "complete", "answer_signature", "run_signature", "signature_inputs", "selection", "counts",
    "metrics", "usage", "error", "versions", "environment", "git_commit", "argv", "data_dir", "cwd", "system_prompt",
    "timing"})


def note_open_batches(task: str, folder: Path, todo: Iterable[str]) -> None:
    """Say, in one line, how many samples of a live run are left to the store's open provider batches."""
    n = len(batched_keys(StoreLayout(folder)).intersection(todo))
    if n:
        print(f"{task}: {n} sample(s) are in an open provider batch of {folder} and were not asked; rerun with "
              "--batch to collect it (`medvision-bm status --batches` lists it)", file=sys.stderr)


def task_error(exc: BaseException) -> str | None:
    """A task's failure as its results record says it (the traceback printed), so the run goes on to the next task;
    None for what ends the run instead (the user's error or interrupt, a full disk no later task could store on)."""
    if isinstance(exc, UserError | KeyboardInterrupt) or not isinstance(exc, Exception) \
            or (isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS):
        return None
    traceback.print_exc(file=sys.stderr)
    return redact(f"{type(exc).__name__}: {exc}")


class Runner:
    """Evaluates the tasks of one RunConfig with one backend, loaded once."""

    def __init__(self, cfg: RunConfig, backend_factory: Callable[[RunConfig, DataDir], Backend]) -> None:
        self.cfg = cfg
        self.data = DataDir(cfg.contract)
        self.backend_factory = backend_factory
        self._provenance: dict[str, Any] | None = None
        self.status = StatusFile(cfg.status_path) if cfg.status_path else None
        self._backend: Backend | None = None
        self._harness: DirectHarness | LmmsHarness | ProcessHarness | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.cost_cap = cost_cap_of(cfg)

        quiet_environment()

    def provenance(self) -> dict[str, Any]:
        """Package versions, environment lock and git commit: the same for every task, read once per run."""
        if self._provenance is None:
            self._provenance = {"versions": environment_versions(), "environment": current_env_info(),
                                "git_commit": git_commit()}
        return self._provenance

    def backend(self) -> Backend:
        if self._backend is None:
            if self.cfg.record.backend != "baseline" and not self.cfg.record.is_api:  # a local model: lmms-eval is
                preload_lmms()  # imported while its weights load (an API run's is in a process of its own)
            self._backend = self.backend_factory(self.cfg, self.data)
        return self._backend

    def harness(self) -> DirectHarness | LmmsHarness | ProcessHarness:
        if self._harness is None:
            if self.cfg.record.backend == "baseline":  # nothing to generate: lmms-eval is not loaded
                self._harness = DirectHarness(self.backend())
                return self._harness
            self._tmp = run_tmpdir("medvision-run-")  # and removes what killed runs left there
            if self.cfg.record.is_api:  # asked here while lmms-eval loads and runs in a process of its own
                self._harness = ProcessHarness(self.backend(), Path(self._tmp.name))
            else:
                self._harness = LmmsHarness(self.backend(), Path(self._tmp.name))
        return self._harness

    def close(self) -> None:
        if isinstance(self._harness, ProcessHarness):
            self._harness.close()
        if self._backend is not None:
            self._backend.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def run(self) -> list[TaskOutcome]:
        cfg = self.cfg
        check_tasks_at_release(cfg.tasks, cfg.contract.planner_version, str(cfg.tasks_list_path))
        prepared = [prepare_task(cfg, self.data, task) for task in cfg.tasks]  # validates every task first
        outcomes: list[TaskOutcome] = []
        if cfg.record.is_api:
            backend = self.backend()  # cheap, and checks keys and URLs before any work
            if cfg.batch and getattr(backend, "batch_interface", None) is None:
                raise UserError(f"--batch: {backend.name} has no batch interface this suite drives (OpenAI's own "
                                "API has); drop --batch to ask live")
        try:
            for prep in prepared:
                outcomes.append(self._run_task(prep))
        finally:
            self.close()
        return outcomes

    def _legacy_entry_without_answers(self, prep: PreparedTask) -> tuple[bool, str]:
        """An upstream-shaped status entry (``true``) for a task this results folder holds no answers of: import the
        task from --upstream_results when given, else run it; one warning line says which."""
        cfg = self.cfg
        head = (f"warning: {prep.task}: the status file {self.status.path if self.status else '?'} marks it done for "
                f"{cfg.model_name} (an upstream entry without a signature) but "
                f"{cfg.results_dir / cfg.model_name / prep.task} holds no answers; ")
        if cfg.upstream_results is None:
            print(head + "running it (pass --upstream_results DIR to import upstream's answers instead)",
                  file=sys.stderr)
            return False, "not done"

        report = import_upstream(cfg.upstream_results, cfg.results_dir, models=[cfg.model_name], tasks=[prep.task],
                                 data=self.data)
        got = report.for_task(cfg.model_name, prep.task)
        if got is not None and results_hold_answers(cfg.results_dir, cfg.model_name, prep.task):
            n = got.added + got.replaced + got.unchanged
            print(head + f"imported {n} answer(s) from {cfg.upstream_results} into {', '.join(map(str, got.stores))}"
                  f" ({got.superseded} superseded, {len(got.unmatched)} unmatched, {len(report.malformed)} malformed "
                  "line(s))", file=sys.stderr)
            return True, "imported from upstream results"
        print(head + f"{cfg.upstream_results} holds no answers of {cfg.model_name} for it either; running it",
              file=sys.stderr)
        return False, "not done"

    def _run_task(self, prep: PreparedTask) -> TaskOutcome:
        cfg = self.cfg
        if self.status and not cfg.force:
            done, why = self.status.is_done(cfg.model_name, prep.task, prep.run_sig)
            if done and why == LEGACY_ENTRY and not results_hold_answers(cfg.results_dir, cfg.model_name, prep.task):
                done, why = self._legacy_entry_without_answers(prep)
            if done:
                prep.keep_selection()  # the next no-op rerun takes it from the store
                print(f"{prep.task}: already done for {cfg.model_name} ({why}); skipping", file=sys.stderr)
                return TaskOutcome(prep.task, "skipped", len(prep.samples))
        started = time.time()
        files = StoreLayout(prep.store.folder)
        answers = file_ids(files, answers=True)  # before the store is read: a line written after shows next time
        kept = None if cfg.shard else finished_results(files, prep.run_sig, scoring_of(prep.family, cfg.protocol),
                                                        answers)
        if kept is not None:  # every answer of it scored, nothing changed since: no answer is read
            prep.store.init(prep.answer_inputs)
            prep.keep_selection()
            return self._finish(prep, None, started, 0, None, None, answers=answers, kept=kept)
        harness = self.harness() if cfg.record.is_api and not cfg.batch and not cfg.shard else None
        if isinstance(harness, ProcessHarness):  # not finished: samples are most likely left; lmms-eval's import
            harness.start()  # starts now, beside the store's reading and the asking (a shard's are known after it)
        state = prep.store.read()  # refuses answer lines of a newer version; the store's other records next
        prep.store.refuse_newer(cfg.shard)
        picked = prep.samples
        todo_pos = picked.todo(state, cfg.keep_failed)
        # the model is loaded (and refuses bad settings) before the store folder exists: a run refused there leaves
        # no half-made results folder behind
        backend = self.backend() if todo_pos else None  # loaded on the first task that has samples left
        prep.store.init(prep.answer_inputs)
        try:  # an unchanged selection: nothing rewritten, no doc built (else the rows streamed a chunk at a time)
            written = prep.store.write_docs(picked.doc_rows(), selection_digest=picked.docs_digest(),
                                            selection=prep.selection)
            if written.set_apart:  # counted and named in one line
                gone, plan = written.set_apart, prep.answer_inputs["plan_version"]
                print(f"{prep.task}: {len(gone)} sample(s) of {prep.store.folder} are no longer in the data (plan "
                      f"{plan}): set apart in {StoreLayout(prep.store.folder).docs_gone.name}, never scored "
                      f"({', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''})", file=sys.stderr)
            prep.keep_selection()  # the next rerun of an unchanged plan takes it from the store
            return self._ask(prep, state, started, todo_pos, backend, answers)
        finally:
            picked.release()

    def _ask(self, prep: PreparedTask, state: StoreState, started: float, todo_pos: list[int],
             backend: Backend | None, answers: FileIds) -> TaskOutcome:
        cfg = self.cfg
        error: str | None = None
        if not todo_pos or backend is None:
            return self._finish(prep, state, started, 0, error, None, answers=answers)
        picked = prep.samples
        print(f"{prep.task}: {len(todo_pos)} of {len(picked)} samples to answer "
              f"({len(picked) - len(todo_pos)} reused from {prep.store.folder.name})", file=sys.stderr)
        writer = prep.store.writer(cfg.shard or "")
        writer.engine = engine_record(cfg, backend)  # every stored answer says which engine settings made it
        keys, shas = picked.keys, picked.shas
        progress = Progress(len(todo_pos), cfg.progress, prep.task)
        # concurrent runs of this task share the work: each sample is asked by the one run that claims it
        claims: Claims[StoreState] | CappedClaims = Claims(prep.store, state, writer.name)
        if self.cost_cap is not None:
            claims = CappedClaims(claims, self.cost_cap)
        asked = 0
        memo = ScoreMemo()  # the scores of the new answers, made as they land and taken by the hooks and _finish
        # persisted a checkpoint at a time beside the answers: a run killed before _finish leaves them behind
        checkpoint = ScoreCheckpoint(StoreLayout(prep.store.folder), writer.name, prep.family, cfg.protocol, memo)
        log = SamplesLog(StoreLayout(prep.store.folder).lmms_log, cfg.system_prompt, cfg.log_sys_prompt)
        chunk = max(32, 8 * (cfg.batch_size or 1))  # samples claimed at a time
        by_key: dict[str, RunDoc] = {}  # the part being asked (every to-do sample in a batch run)
        sha_of: dict[str, str] = {}
        pending: PendingPart | None = None  # the last part, its log still being made by lmms-eval's process
        try:
            def on_result(res: GenResult) -> None:
                nonlocal asked
                rd = by_key[res.key]
                checkpoint.add(rd, sha_of[res.key], writer.append(res, index=rd.doc.index, doc_sha=sha_of[res.key]))
                asked += 1
                if self.cost_cap is not None:
                    self.cost_cap.landed(res)
                progress.update(res, backend)

            def store_result(res: GenResult, index: int, sha: str) -> None:  # a batch item's, by its record
                nonlocal asked
                rec = writer.append(res, index=index, doc_sha=sha)
                rd = by_key.get(res.key)  # (a re-attached batch's sample may be outside this run's to-do)
                if rd is not None:
                    checkpoint.add(rd, sha, rec)
                asked += 1
                if self.cost_cap is not None:
                    self.cost_cap.landed(res)
                progress.update(res, backend)

            if cfg.batch:  # scored from the store by _finish: lmms-eval is not needed
                todo = list(picked.rundocs(todo_pos))
                by_key, sha_of = {rd.doc.key: rd for rd in todo}, {keys[p]: shas[p] for p in todo_pos}
                BatchRun(backend, StoreLayout(prep.store.folder), claims, store_result,  # type: ignore[arg-type]
                         poll_s=cfg.batch_poll_s, task=prep.task, phase=cfg.batch_phase
                         ).run(todo, prep.gen, cfg.system_prompt, sha_of)
            else:  # a part at a time: what lmms-eval and this run hold is bounded by the part, not the task
                size = task_parts.TASK_PART
                single = len(todo_pos) <= size
                for offset, part in task_parts.parts(todo_pos, size):
                    if self.cost_cap is not None and self.cost_cap.reached:
                        break
                    todo = list(picked.rundocs(part))  # only the samples to ask are built, a part at a time
                    if single:
                        picked.hold(part, todo)  # and scored from these very objects
                    by_key = {rd.doc.key: rd for rd in todo}  # (the callbacks look the part's up)
                    sha_of = {keys[p]: shas[p] for p in part}
                    spec = TaskRun(prep.task, prep.family, todo, prep.gen, cfg.system_prompt, on_result, claims, chunk,
                                   first_row=offset)
                    harness = self.harness()
                    with memo_of_task(memo):  # the hooks take the scores made as the answers landed
                        if isinstance(harness, ProcessHarness):
                            asked_part = harness.ask(spec)
                            if offset + len(part) < len(todo_pos) or not asked:
                                log.add_lines(asked_part.log_lines())
                            else:  # the last part's log is taken by _finish once it has scored the task
                                pending = asked_part  # (lmms-eval's process runs its loop over it meanwhile)
                        else:
                            log.add(harness.run(spec))
                    if not single:  # the part's scores are persisted by the checkpoints: _finish takes them there
                        memo.clear()
        except BaseException as exc:
            error = task_error(exc)
            if error is None:
                log.discard()
                raise
        finally:
            progress.close()
            writer.close()
            checkpoint.close()
            claims.close()
        cap = self.cost_cap
        if cap is not None and cap.reached:
            print(f"{prep.task}: --max_cost ${cap.cap:,.2f} reached (this run spent ${cap.spent:,.2f}); the "
                  "samples left are not asked: rerun with a larger --max_cost to go on", file=sys.stderr)
        if claims.taken_over:
            print(f"{prep.task}: took over the claims of a run that stopped", file=sys.stderr)
        if not cfg.batch:
            note_open_batches(prep.task, prep.store.folder, (keys[p] for p in todo_pos))
        if cfg.batch and cfg.batch_phase == "submit" and error is None:  # the collect phase stores and scores
            return TaskOutcome(prep.task, "submitted", len(prep.samples), asked, {}, None, prep.store.folder)
        try:
            answers = file_ids(StoreLayout(prep.store.folder), answers=True)  # before the last read, as above
            prep.store.refresh(state)  # only what was appended since (this run's and concurrent runs' answers)
            return self._finish(prep, state, started, asked, error, log, memo, checkpoint.scored,
                                own_scores=writer.name, answers=answers, pending=pending)
        finally:
            if pending is not None:  # (taken by _finish unless it stopped first)
                pending.abandon()

    def _wider_selection(self, prep: PreparedTask, files: StoreLayout) -> ResultsRecord | None:
        """The store's results.json when it reports a finished selection that takes in every sample of this run's
        and is not this run's (a ``--sample_limit 8`` rerun over a complete store): the store keeps reporting it."""
        old = ResultsRecord.read(files.results())
        if old is None or not old.complete or old.error or old.answer_signature != prep.answer_sig:
            return None
        if old.selection == prep.selection or not selection_holds(old.selection, prep.samples.indices):
            return None
        # chosen from other data (the task has more or fewer samples now): never kept over what this run read
        wide = old.selection or Selection()
        if wide.all not in (None, prep.n_available) or (wide.limit or 0) > prep.n_available \
                or any(i >= prep.n_available for i in wide.indices or ()):
            return None
        return old

    def _finish(self, prep: PreparedTask, state: StoreState | None, started: float, n_asked: int, error: str | None,
                log: SamplesLog | None, memo: ScoreMemo | None = None, scored_early: int = 0,
                own_scores: str | None = None, answers: FileIds | None = None,
                kept: ResultsRecord | None = None, pending: PendingPart | None = None) -> TaskOutcome:
        cfg = self.cfg
        rules = protocol_settings(cfg.protocol).rules
        folder = prep.store.folder
        files = StoreLayout(folder)
        # a smaller selection never shrinks what a finished store reports: when this run asked nothing and the
        # store's complete selection takes in all of its samples, parsed.jsonl and results.json stay the wider one
        wider = None if cfg.shard or n_asked or error else self._wider_selection(prep, files)
        if wider is not None:
            n_wide = wider.counts.selected if wider.counts and wider.counts.selected is not None else "?"
            shown = wider.selection.to_json() if wider.selection else "every sample"
            print(f"{prep.task}: all {len(prep.samples)} samples of this run are answered in the store's finished "
                  f"selection of {n_wide} ({shown}); the store keeps reporting those "
                  f"{n_wide} ({folder})", file=sys.stderr)
            if self.status is not None:
                self.status.mark(cfg.model_name, prep.task, {
                    "run_signature": prep.run_sig, "answer_signature": prep.answer_sig, "n": len(prep.samples),
                    "results": str(Path(cfg.model_name) / prep.task / folder.name / files.results().name)})
            if log is not None:  # (the rows of samples other runs answered: the store reports the wider selection)
                log.discard()
            return TaskOutcome(prep.task, "done", len(prep.samples), 0, {}, None, folder)
        # a cluster shard scores only its part of the selection: its files carry the shard label, so results.json
        # and parsed.jsonl always describe a whole selection (written by an unsharded or finalizing run)
        results_path = files.results(cfg.shard)
        # only the samples whose answer or doc changed since parsed.jsonl was written are scored (each answer once:
        # this run's answers were scored as they landed, persisted in the store's score files and kept in ``memo``;
        # a killed run's persisted scores are taken too); an unchanged task rewrites nothing
        tally = Tally.of_results(kept) if kept is not None or state is None else Tally.of_followed(
            follow(files, prep.samples, state, prep.family, cfg.protocol, shard=cfg.shard, memo=memo), state)
        metrics, counts, usage = tally.metrics, tally.counts, tally.usage
        if pending is not None and log is not None:  # the last part's log, made by lmms-eval's process meanwhile
            try:
                log.add_lines(pending.log_lines())
            except BaseException as exc:
                error = task_error(exc)
                if error is None:
                    log.discard()
                    raise
        n_selected, n_answered = counts["selected"], counts["answered"]
        complete = n_answered == n_selected and error is None
        if log is not None:  # lmms-eval's per-sample rows of the parts asked, spooled as they came
            log.commit()
        price = getattr(self._backend, "price", None)  # API backends: from --price_in/--price_out or a table
        if cfg.batch:
            price = run_price(cfg)[1] or price
        prov = self.provenance()
        results = ResultsRecord(
            model_name=cfg.model_name, record=cfg.record.name, task=prep.task, family=prep.family,
            task_version=prep.answer_inputs["task_version"], protocol=cfg.protocol,
            parser_version=protocol_settings(cfg.protocol).parser, metric_rules=rules,
            metric_path=DEFAULT_METRIC_PATH, scoring_version=SCORING_VERSION,
            perceived_size_rule=cfg.perceived_size_rule, planner_version=cfg.contract.planner_version,
            plan_version=prep.answer_inputs["plan_version"], sample_filtering=cfg.contract.filtering,
            task_meta_source=prep.samples.meta_source, complete=complete,
            answer_signature=prep.answer_sig, run_signature=prep.run_sig, signature_inputs=prep.answer_inputs,
            selection=prep.selection,
            counts=Counts.of_run(selected=n_selected, answered=n_answered, request_failed=counts["request_failed"],
                                 pending=counts["pending"], asked=n_asked, scored=scored_early + tally.rescored,
                                 bad_lines=counts["store_bad_lines"], foreign_lines=counts["store_foreign_lines"],
                                 duplicates=counts["store_duplicates"]),
            metrics=metrics, usage=usage, error=error, versions=prov["versions"], environment=prov["environment"],
            git_commit=prov["git_commit"], argv=[*cfg.argv], data_dir=str(cfg.contract.data_dir), cwd=os.getcwd(),
            system_prompt=cfg.system_prompt if cfg.log_sys_prompt else None,
            timing={"started": started, "finished": time.time(), "seconds": round(time.time() - started, 3)},
            cost_usd=round(price.cost_usd(usage.input_tokens or 0, usage.output_tokens or 0), 6) if price is not None
            else None, nulls=RUN_RESULTS_KEYS)
        results.write(results_path)
        if not cfg.shard:  # parsed.jsonl now holds what stopped runs' persisted scores were kept for
            prune_score_files(files, keep=() if own_scores is None else (own_scores,))
            if complete and answers is not None:  # a rerun finding these files unchanged reads no answer
                write_finish(files, prep.run_sig, scoring_of(prep.family, cfg.protocol), answers)
            else:
                forget_finish(files)
        if complete and self.status is not None and not cfg.shard:
            self.status.mark(cfg.model_name, prep.task, {
                "run_signature": prep.run_sig, "answer_signature": prep.answer_sig, "n": n_selected,
                "results": str(Path(cfg.model_name) / prep.task / folder.name / files.results().name)})
        state_name = "done" if complete else ("error" if error else "incomplete")
        return TaskOutcome(prep.task, state_name, n_selected, n_asked, metrics, error, folder)
