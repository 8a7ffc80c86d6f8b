"""Every file and folder name of a sample store, spelled once.

    <results_dir>/<model_name>/<task>/<answer_sig[:12]>/
        signature.json           the answer-signature inputs (``records.SignatureRecord``)
        docs.jsonl               the samples selected here that the data last read still has (``records.DocRow``)
        docs.gone.jsonl          rows a later run found no longer in the data (set apart: never scored)
        .docs.merged.json        which selections docs.jsonl already holds (a rerun of one rewrites nothing)
        .docs.sums               the hash of every docs.jsonl line as the suite wrote it (an edited row is not trusted)
        .selection.npz           the last run's selection (keys, doc indices, doc hashes) under the digest of what it
                                 was made from (``runner.selection_cache``: a rerun of an unchanged plan reuses it)
        samples/<writer>.jsonl   one answer per line (``records.AnswerRecord``), a segment per writing process
        scores/<writer>.jsonl    the scores of a writer's answers, persisted as they land (``store.scores``): a
                                 resume after a kill scores only the answers that have none
        parsed.jsonl             per selected sample its parse and metrics (``records.ParsedRow`` per line)
        .parsed.index            what each parsed row was scored from, and what the task metrics add up from
                                 (``score.follow``: a resume re-scores only new or changed answers)
        results.json             the task's metrics and counts (``records.ResultsRecord``)
        .finished.json           what the files were when a run completed the task (``finish.FinishRecord``: a rerun
                                 finding them unchanged asks and scores nothing without reading the answers)
        claims/<writer>.lease, claims/<writer>.keys   what each live run is answering (``claims.Claims``)
        batches/<id>.json, batches/<id>.lock   each open provider batch: its id and the samples it covers
                                 (``batches.BatchRecord``; the lock is held by the run collecting it)
        lmms_eval/samples_<time>.jsonl   lmms-eval's own per-sample log of a run
        judged/<judge_sig[:12]>/ judge.json, parsed.jsonl, results.json, answers/*.jsonl   a judged parse

The image-dependence check keeps its answers apart, under a folder no store discovery walks into:

    <results_dir>/.check-vision/<model_name>/<task>/<check_sig[:12]>/
        check.json               the verdict and its numbers (``runner.vision_check.VisionCheck``)
        <condition>/             one sample store per image shown (real, blank, shuffled, real-again)

A cluster shard writes ``parsed.shard-<label>.jsonl``, ``results.shard-<label>.json`` (and their index) instead, so
that the unsharded names always describe a whole selection.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

SIGNATURE = "signature.json"
DOCS = "docs.jsonl"
DOCS_GONE = "docs.gone.jsonl"
DOCS_MEMO = ".docs.merged.json"
DOCS_SUMS = ".docs.sums"
DOCS_LOCK = ".docs.lock"
SELECTION_CACHE = ".selection.npz"
SAMPLES = "samples"
SEGMENT_SUFFIX = ".jsonl"
SCORES = "scores"
PARSED = "parsed.jsonl"
PARSED_INDEX = ".parsed.index"
RESULTS = "results.json"
FINISHED = ".finished.json"
CLAIMS = "claims"
CLAIMS_LOCK = ".claims.lock"
LEASE_SUFFIX = ".lease"
KEYS_SUFFIX = ".keys"
LMMS_LOG = "lmms_eval"
BATCHES = "batches"
BATCH_SUFFIX = ".json"
BATCH_LOCK_SUFFIX = ".lock"
JUDGED = "judged"
JUDGE_FILE = "judge.json"
#: ``signature.json``'s import block of a store made from upstream's per-sample files (``summary_values_*.json``)
#: and its key for the file's position of the store's first record (the order upstream summed its tasks in).
VALUES_IMPORT_FORMAT = "upstream-summary-values"
VALUES_FIRST_RECORD = "first_record"
JUDGE_ANSWERS = "answers"
#: The image-dependence check's folder below a results dir (a dot folder: discovery and reports never read it).
CHECK_VISION = ".check-vision"
CHECK_FILE = "check.json"
#: Folders inside a store that never hold a store (discovery does not walk into them).
NOT_STORES = frozenset({SAMPLES, SCORES, LMMS_LOG, BATCHES, "__pycache__"})


def segment_name(label: str = "") -> str:
    """A new answers segment's file name, unique to its writer: ``[<label>-]<host>-<pid>-<ns>.jsonl`` (a claim and
    its lease take the name without the suffix, so a live writer is known by host and pid)."""
    return f"{label + '-' if label else ''}{socket.gethostname()}-{os.getpid()}-{time.time_ns()}{SEGMENT_SUFFIX}"


def _listed(folder: Path) -> list[Path]:
    """The entries of ``folder`` named ``*.jsonl`` (what ``folder.glob("*.jsonl")`` lists, hidden names included), by
    name; none when it is not a folder. One directory read, without pathlib's glob machinery."""
    try:
        names = os.listdir(folder)
    except (NotADirectoryError, FileNotFoundError, PermissionError):
        return []
    return [folder / n for n in sorted(n for n in names if n.endswith(SEGMENT_SUFFIX))]


def _sharded(name: str, shard: str | None) -> str:
    if not shard:
        return name
    stem, dot, ext = name.partition(".")
    return f"{stem}.shard-{shard}.{ext}" if dot else f"{name}.shard-{shard}"


@dataclass(frozen=True, slots=True)
class StoreLayout:
    """The paths of one store folder (``folder`` is the ``<answer_sig[:12]>`` folder)."""

    folder: Path

    @property
    def signature(self) -> Path:
        return self.folder / SIGNATURE

    @property
    def docs(self) -> Path:
        return self.folder / DOCS

    @property
    def docs_gone(self) -> Path:
        return self.folder / DOCS_GONE

    @property
    def docs_memo(self) -> Path:
        return self.folder / DOCS_MEMO

    @property
    def docs_sums(self) -> Path:
        return self.folder / DOCS_SUMS

    @property
    def docs_lock(self) -> Path:
        return self.folder / DOCS_LOCK

    @property
    def selection_cache(self) -> Path:
        return self.folder / SELECTION_CACHE

    @property
    def samples(self) -> Path:
        return self.folder / SAMPLES

    def segments(self) -> list[Path]:
        """The answer segments in the order the store reads them (by name)."""
        return _listed(self.samples)

    @property
    def scores(self) -> Path:
        return self.folder / SCORES

    def score_file(self, writer: str) -> Path:
        """The persisted scores of the answers of writer ``writer`` (its segment's name without the suffix)."""
        return self.scores / (writer + SEGMENT_SUFFIX)

    def score_files(self) -> list[Path]:
        """Every writer's persisted scores (by name)."""
        return _listed(self.scores)

    def parsed(self, shard: str | None = None) -> Path:
        return self.folder / _sharded(PARSED, shard)

    def parsed_index(self, shard: str | None = None) -> Path:
        return self.folder / (PARSED_INDEX if not shard else f"{PARSED_INDEX}.shard-{shard}")

    def results(self, shard: str | None = None) -> Path:
        return self.folder / _sharded(RESULTS, shard)

    @property
    def finished(self) -> Path:
        return self.folder / FINISHED

    @property
    def claims(self) -> Path:
        return self.folder / CLAIMS

    @property
    def claims_lock(self) -> Path:
        return self.folder / CLAIMS_LOCK

    @property
    def lmms_log(self) -> Path:
        return self.folder / LMMS_LOG

    @property
    def batches(self) -> Path:
        return self.folder / BATCHES

    def batch(self, local_id: str) -> Path:
        return self.batches / (local_id + BATCH_SUFFIX)

    def batch_lock(self, local_id: str) -> Path:
        return self.batches / (local_id + BATCH_LOCK_SUFFIX)

    def batch_records(self) -> list[Path]:
        """The open batches' record files, oldest name first."""
        folder = self.batches
        return sorted(folder.glob("*" + BATCH_SUFFIX)) if folder.is_dir() else []

    @property
    def judged(self) -> Path:
        return self.folder / JUDGED

    def judged_parse(self, judge_sig: str) -> JudgedLayout:
        """The folder of the judged parse by judge signature ``judge_sig`` (its first 12 characters name it)."""
        return JudgedLayout(self.judged / judge_sig[:12])


@dataclass(frozen=True, slots=True)
class JudgedLayout:
    """The paths of one judged parse (``<store>/judged/<judge_sig[:12]>/``)."""

    folder: Path

    @property
    def judge_file(self) -> Path:
        return self.folder / JUDGE_FILE

    @property
    def parsed(self) -> Path:
        return self.folder / PARSED

    @property
    def results(self) -> Path:
        return self.folder / RESULTS

    @property
    def answers(self) -> Path:
        return self.folder / JUDGE_ANSWERS


@dataclass(frozen=True, slots=True)
class CheckLayout:
    """The paths of one image-dependence check (``<results_dir>/.check-vision/<model>/<task>/<check_sig[:12]>/``)."""

    folder: Path

    @classmethod
    def under(cls, results_dir: Path, model: str, task: str, check_sig: str) -> CheckLayout:
        return cls(results_dir / CHECK_VISION / model / task / check_sig[:12])

    @property
    def check_file(self) -> Path:
        return self.folder / CHECK_FILE

    def condition(self, name: str) -> Path:
        """The sample store of the answers to one kind of image."""
        return self.folder / name
