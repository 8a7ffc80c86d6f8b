"""Benchmark: a resume with a fraction of a task left, against a from-scratch run, a no-op rerun and a key-set floor.

Two stores of --n samples are built once (4 segments, as several runs leave them). The finished one: --left of the
samples (every 1/left-th) ended in a failed request, and it is finalised as the runner does (docs.jsonl, parsed.jsonl,
results.json). The killed one, as a run killed with --left of its samples to go leaves it: the answers of the others
stored and their scores persisted as they landed (``scores/<writer>.jsonl``), no parsed.jsonl, no results.json.
Both are written by the store's and the scoring's own writers; while they are built each distinct answer to each
distinct target is scored once and handed to every sample that has them (``scored_once_per_target``: the same bytes
as a plain build, which the bench's test compares; a 1M-sample store in minutes instead of over 20).
Then, in rounds of fresh processes (sides in a rotated order each round, --pairs rounds), each side runs
``Runner._run_task`` (the runner's whole task path: doc hashing, store reading, to-do, docs.jsonl, the asking,
scoring, parsed.jsonl, results.json) with the oracle backend (all bookkeeping, no model) behind a direct harness
that scores every answer through lmms-eval's ``process_results`` hook, as lmms-eval's loop does:
  * resume   : a copy of the finished store; asks the left samples (its failed requests);
  * killed   : a copy of the killed store; asks the left samples (never asked), takes the persisted scores;
  * unscored : the killed store without its persisted scores (as a run killed before scores were persisted left
               it): every stored answer is scored again;
  * scratch  : an empty store; asks all n samples;
  * noop     : the resumed copy rerun (nothing left to ask), timed all in: its selection taken from the store's
               saved copy (``runner.selection_cache``) and the task found unchanged since its finish
               (``store.finish``), besides the child process's whole wall time (interpreter, imports, selection,
               checking);
  * walk     : a from-scratch selection alone (keys, indices and doc hashes of every sample walked from the docs, as
               ``prepare_task`` makes it when nothing is saved): the floor a no-op rerun is measured against;
  * keyset   : the strongest simple alternative to a resume: the keys of the ok lines of the segments as a set,
               the selection minus that set asked, the answers appended, those answers alone scored (once) and their
               rows appended to parsed.jsonl; no doc hashes checked, no task metrics, no index.
Each side's time excludes making the selection (``prepare_task`` walks the plan for it: keys, indices and doc hashes,
the docs built a chunk at a time and dropped; the keyset floor holds every doc), except the noop side's and the walk
side's, which are the selection (and the noop's checking); every side's selection time is printed apart, and every
side's process wall time. Its peak RSS is the process's own (VmHWM) and includes what the selection holds (printed
apart). Its CPU time is the process's own and that of the processes it ended and waited for (lmms-eval's process of
the api harness: every side closes its runner as a run does) over the same span. Ratios are printed round by round.
Run: python benchmarks/bench_resume.py [--n 100000] [--left 0.1] [--pairs 3]
     [--sides resume,killed,scratch,noop,walk,keyset] [--harness hook|lmms|api]
     (--harness lmms: every side that asks goes through lmms-eval's own loop in the process, its import included, as
      a local model's run; api: asked in the process while lmms-eval's loop runs in a process of its own, as an API
      model's run; the default hook harness scores each answer through the same hook without lmms-eval)
     [--workdir DIR]   (1M samples: about 4 GB of disk per copy)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from _peak import peak_rss_mb, reset_peak, rss_mb
from medvision_bm.data.docs import Doc, RunDoc, View
from medvision_bm.io import JsonlAppender
from medvision_bm.models.base import GenRequest, GenResult, GenSettings, RequestError, Usage
from medvision_bm.models.baselines import OracleBackend
from medvision_bm.runner import selection_cache
from medvision_bm.runner.harness import LmmsHarness
from medvision_bm.runner.lmms_process import ProcessHarness
from medvision_bm.runner.loop import PreparedTask, Runner
from medvision_bm.score import checkpoint, store_scoring
from medvision_bm.score.checkpoint import ScoreCheckpoint
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import ParsedRow, Selection
from medvision_bm.store.samples import SampleStore, StoreWriter
from medvision_bm.store.signature import digest, doc_sha, run_signature
from medvision_bm.tasks.hooks import process_results
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, SampleScore, protocol_settings, score_answer

SIG = "bench-answer-signature"
TASK = "Bench_BoxCoordinate_Task01_Axial"
SIDES = ("resume", "killed", "unscored", "scratch", "noop", "walk", "keyset")
#: The ratios printed (side / side): the finished and the killed store's resume beside each other; the no-op rerun
#: all in against a from-scratch selection.
RATIOS = (("resume", "scratch"), ("killed", "scratch"), ("unscored", "scratch"), ("resume", "noop"),
          ("resume", "keyset"), ("killed", "keyset"), ("noop", "walk"))


VIEW = View(image_hw=(512, 512), pixel_hw_mm=(0.8, 0.8), canvas_hw=(512, 512), content_hw=(512, 512),
            stated_pixel_hw_mm=(0.8, 0.8), header_pixel_hw=(0.8, 0.8))
META = {"image_description": "abdominal CT", "image_modality": "CT", "label_name": "liver",
        "source": "benchmarks/bench_resume.py"}  # one per task and label, as the data layer shares it


#: The samples' boxes: the targets differ from sample to sample (one of 7 by doc index, shared by the docs that have it)
BOXES = tuple({"min_coords": [[20 + b, 10]], "max_coords": [[219, 109]], "center_coords": [[119, 59]],
               "dimensions": [[200, 100]], "sizes": [[160.0, 80.0]]} for b in range(7))


def make_rundocs(indices: list[int]) -> list[RunDoc]:
    """The samples of the given doc indices (the same doc for the same index, as a plan gives them)."""
    out = []
    for i in indices:
        case, s = i // 40, i % 40
        doc = Doc(key=f"Bench/Images/case{case:05d}.nii.gz:d2:s{s}:l1", task=TASK,
                  family="detect", plane="Axial", split="test", index=i, dataset_name="Bench", taskID="01",
                  taskType="Box-Size", image_file=f"Bench/Images/case{case:05d}.nii.gz",
                  mask_file=f"Bench/Masks/case{case:05d}.nii.gz", landmark_file=None, slice_dim=2, slice_idx=s,
                  label=1, image_size_2d=(512, 512), pixel_size=(0.8, 0.8), image_size_3d=(512, 512, 40),
                  voxel_size=(0.8, 0.8, 2.5),
                  bounding_boxes=BOXES[i % 7], meta=META)
        out.append(RunDoc(doc, VIEW))
    return out


def make_docs(n: int) -> list[RunDoc]:
    return make_rundocs(list(range(n)))


def prepared(n: int, store: SampleStore) -> PreparedTask:
    """The task as ``prepare_task`` leaves it: the selection taken from the store's saved copy when it was saved
    under the same key, else walked (keys, indices, doc hashes), no doc kept."""
    inputs = {"task_version": "bench", "plan_version": "bench"}
    key = digest({"bench": TASK, "n": n, "code": selection_cache.code_identity()})
    got = selection_cache.select(StoreLayout(store.folder).selection_cache, key, lambda: list(range(n)), make_rundocs,
                                 "current", "")
    return PreparedTask(task=TASK, family="detect", samples=got.samples, answer_sig=SIG, answer_inputs=inputs,
                        run_sig=run_signature(SIG, Selection(), got.shas_digest), selection=Selection(), store=store,
                        gen=GenSettings(),
                        selection_key=key, selection_reused=got.reused, shas_digest=got.shas_digest)


class HookHarness:
    """Asks the backend for every rundoc of a task and hands each answer to lmms-eval's ``process_results`` hook,
    as lmms-eval's loop does (without lmms-eval's own per-sample overhead)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def run(self, spec: Any) -> list[dict[str, Any]]:
        answers: dict[str, str | None] = {}

        def on_result(res: GenResult) -> None:
            spec.on_result(res)
            answers[res.key] = res.text

        reqs = [GenRequest(key=rd.doc.key, prompt="", rundoc=rd, gen=spec.gen) for rd in spec.rundocs]
        self.backend.generate(reqs, on_result)
        for rd in spec.rundocs:
            process_results(rd.to_lmms_row(), [answers.get(rd.doc.key) or ""])
        return []


def bench_runner(harness: str = "hook", workdir: Path | None = None) -> Runner:
    """The runner's own task code, without a data folder or a model download (the oracle answers), behind the hook
    harness or (``lmms``) lmms-eval's own loop as a local model's run has it (``LmmsHarness``: the task built from its
    YAML, every request through ``StreamingLMM``, every answer scored by lmms-eval calling the hooks; its files under
    ``workdir``) or (``api``) as an API model's run has it (``ProcessHarness``: asked here, lmms-eval's loop over the
    relayed answers in a process of its own)."""
    runner = object.__new__(Runner)
    runner.cfg = SimpleNamespace(force=True, keep_failed=False, shard=None, protocol="current", model_name="bench",
                                 record=SimpleNamespace(name="oracle", is_api=False, backend="baseline"), argv=["bench"],
                                 contract=SimpleNamespace(planner_version="bench", filtering=True, data_dir="(none)"),
                                 system_prompt=None, log_sys_prompt=False, progress=False, batch_size=1, dtype=None,
                                 perceived_size_rule="none", batch=False)
    runner.status = None
    runner.cost_cap = None
    runner._harness = None  # (closed by ``Runner.close`` as a run closes it: lmms-eval's process ends there)
    runner._tmp = None
    backend = OracleBackend()
    runner._backend = backend
    runner.backend = lambda: backend  # type: ignore[method-assign]
    def work_folder() -> tempfile.TemporaryDirectory[str]:  # removed by ``Runner.close``, as a run's is
        runner._tmp = tempfile.TemporaryDirectory(prefix="lmms-", dir=workdir)
        return runner._tmp

    if harness == "lmms":
        made: list[LmmsHarness] = []

        def lmms() -> LmmsHarness:  # lmms-eval imported when the first task has samples left, as the runner does
            if not made:
                made.append(LmmsHarness(backend, Path(work_folder().name)))
            return made[0]

        runner.harness = lmms  # type: ignore[method-assign]
    elif harness == "api":
        procs: list[ProcessHarness] = []

        def api() -> ProcessHarness:  # an API model's run: asked here, lmms-eval's loop in a process of its own
            if not procs:
                procs.append(ProcessHarness(backend, Path(work_folder().name)))
                runner._harness = procs[0]
            return procs[0]

        runner.cfg.record.is_api = True  # the runner starts lmms-eval's process as an API model's run does
        runner.harness = api  # type: ignore[method-assign]
    else:
        runner.harness = lambda: HookHarness(backend)  # type: ignore[method-assign]
    runner._provenance = {"versions": {}, "environment": None, "git_commit": None}
    return runner


def keyset_resume(folder: Path, rundocs: list[RunDoc]) -> int:
    """The floor: ok keys of every segment as a set, the rest asked, appended, scored once, rows appended."""
    done: set[str] = set()
    for seg in StoreLayout(folder).segments():
        with open(seg, "rb") as fh:
            for line in fh:
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if rec.get("status") == "ok" and rec.get("answer_signature") == SIG:
                    done.add(rec["key"])
    todo = [rd for rd in rundocs if rd.doc.key not in done]
    settings = protocol_settings("current")
    writer = StoreWriter(JsonlAppender(StoreLayout(folder).samples / "keyset.jsonl"), SIG)
    rows: list[bytes] = []
    by_key = {rd.doc.key: rd for rd in todo}

    def on_result(res: GenResult) -> None:
        rd = by_key[res.key]
        writer.append(res, index=rd.doc.index, doc_sha="unchecked")
        sc = score_answer(rd.doc, rd.view, res.text, settings.parser, settings.rules)
        rows.append(ParsedRow.of_score(rd.doc, sc, settings.rules).line())

    OracleBackend().generate([GenRequest(key=rd.doc.key, prompt="", rundoc=rd, gen=GenSettings()) for rd in todo],
                             on_result)
    writer.close()
    with open(StoreLayout(folder).parsed(), "ab") as fh:
        fh.writelines(rows)
    return len(todo)


def side(name: str, folder: Path, n: int, harness: str = "hook") -> dict[str, float]:
    """In a fresh process: one side on ``folder``, timed after the selection is made (the keyset floor: its docs;
    the noop and walk sides: with it)."""
    t_select = time.perf_counter()
    if name == "keyset":
        rundocs = make_docs(n)
    else:
        prep = prepared(n, SampleStore(folder, SIG))
    select_s = time.perf_counter() - t_select
    docs_mb = rss_mb()
    reset_peak()
    cpu0 = os.times()
    t0 = time.perf_counter()
    if name == "walk":
        assert not prep.selection_reused
        asked, state = 0, "done"
    elif name == "keyset":
        asked = keyset_resume(folder, rundocs)
        state = "done"
    else:
        runner = bench_runner(harness, folder.parent)
        try:
            outcome = runner._run_task(prep)
        finally:
            runner.close()  # as a run ends: lmms-eval's process (the api harness) ends and is waited for
        asked, state = outcome.n_asked, outcome.state
    seconds = time.perf_counter() - t0 + (select_s if name in ("noop", "walk") else 0.0)
    cpu1 = os.times()  # this process's CPU and its children's that ended (lmms-eval's process of the api harness)
    cpu_s = cpu1.user + cpu1.system + cpu1.children_user + cpu1.children_system \
        - (cpu0.user + cpu0.system + cpu0.children_user + cpu0.children_system)
    assert state == "done", state
    if name == "noop":
        assert prep.selection_reused, "the no-op rerun walked its selection"
    return {"s": seconds, "cpu_s": cpu_s, "peak_mb": peak_rss_mb(), "docs_mb": docs_mb, "asked": asked,
            "select_s": select_s}


@contextmanager
def scored_once_per_target() -> Iterator[None]:
    """While a store is built: each distinct answer to each distinct target scored once (``score_answer`` of the
    store's scoring and of the score checkpoints, remembered by the doc's family, boxes and view, the answer, parser,
    rules and metric path) and that score handed to every sample that has them under the sample's own key. The
    bench's docs differ otherwise only in what names a sample (key, index, case files, slice), which scoring does not
    read: the store's files are the same bytes as a plain build's (``build(..., plain=True)``; a test compares them),
    written by the same writers, in a fraction of the time at 1M samples."""
    made: dict[tuple[Any, ...], SampleScore] = {}

    def once(doc: Doc, view: View, text: str | None, parser: str, rules: str,
             metric_path: str = DEFAULT_METRIC_PATH) -> SampleScore:
        key = (doc.family, doc.task, orjson.dumps(doc.bounding_boxes), view, text, parser, rules, metric_path)
        sc = made.get(key)
        if sc is None:
            sc = made[key] = score_answer(doc, view, text, parser, rules, metric_path)
        return dataclasses.replace(sc, key=doc.key)

    patched = (store_scoring, checkpoint)
    for module in patched:
        module.score_answer = once  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.score_answer = score_answer  # type: ignore[attr-defined]


def oracle_text(rd: RunDoc, by_boxes: dict[bytes, str | None]) -> str | None:
    """The oracle's answer to a sample (made once per distinct boxes: the oracle answers with the target)."""
    boxes = orjson.dumps(rd.doc.bounding_boxes)
    if boxes not in by_boxes:
        by_boxes[boxes] = OracleBackend().answer(GenRequest(key=rd.doc.key, prompt="", rundoc=rd,
                                                            gen=GenSettings())).text
    return by_boxes[boxes]


def build(folder: Path, n: int, left: float, killed: bool = False, plain: bool = False) -> dict[str, float]:
    """A store whose first run answered all but every 1/left-th sample (a failed request), finalised; ``killed``: a
    store whose first run was killed before it asked every 1/left-th sample, its answers' scores persisted as they
    landed (as the runner's checkpoints write them), never finalised. Each distinct answer is scored once
    (``scored_once_per_target``) unless ``plain``; the samples are made a segment at a time."""
    with nullcontext() if plain else scored_once_per_target():
        return _build(folder, n, left, killed)


def _build(folder: Path, n: int, left: float, killed: bool) -> dict[str, float]:
    step = max(1, round(1 / left)) if left > 0 else 0
    store = SampleStore(folder, SIG)
    store.init({"task_version": "bench", "plan_version": "bench"})
    texts: dict[bytes, str | None] = {}
    t0 = time.perf_counter()
    for part in range(4):  # a resumed store usually holds several segments
        writer = StoreWriter(JsonlAppender(store.samples_dir / f"seg{part}.jsonl"), SIG)
        scores = ScoreCheckpoint(StoreLayout(folder), writer.name, "detect", "current") if killed else None
        for rd in make_rundocs(list(range(part, n, 4))):
            sha = doc_sha(rd.doc, rd.view)
            if step and rd.doc.index % step == 0:
                if killed:
                    continue  # never asked
                res = GenResult(rd.doc.key, None, RequestError("http", "HTTP 503", 503, True), latency_s=0.1)
            else:
                res = GenResult(rd.doc.key, oracle_text(rd, texts), finish_reason="stop", usage=Usage(812, 24),
                                latency_s=0.4)
            rec = writer.append(res, index=rd.doc.index, doc_sha=sha)
            if scores is not None:
                scores.add(rd, sha, rec)
        writer.close()
        if scores is not None:
            scores.close()
    write_s = time.perf_counter() - t0
    if killed:  # the run wrote docs.jsonl before it asked anything, as the runner does
        prep = prepared(n, store)
        store.write_docs(prep.samples.doc_rows(), selection_digest=prep.samples.docs_digest(), selection=prep.selection)
        return {"write_s": write_s, "first_s": 0.0}
    runner = bench_runner()
    prep = prepared(n, store)
    runner.cfg.keep_failed = True  # the first run's finalisation: the failures stay failures
    t0 = time.perf_counter()
    outcome = runner._run_task(prep)
    assert outcome.n_asked == 0 and (outcome.state == "incomplete" or not step), outcome
    return {"write_s": write_s, "first_s": time.perf_counter() - t0}


def run_side(name: str, folder: Path, n: int, harness: str = "hook") -> dict[str, float]:
    """One side in a fresh process; ``proc_s`` is the child's whole wall time (interpreter start to exit)."""
    t0 = time.perf_counter()
    child = subprocess.run([sys.executable, __file__, "--n", str(n), "--side", name, "--folder", str(folder),
                            "--harness", harness], capture_output=True, text=True)
    proc_s = time.perf_counter() - t0
    if child.returncode:
        raise SystemExit(f"side {name} failed:\n{child.stderr[-3000:]}")
    return {**json.loads(child.stdout.strip().splitlines()[-1]), "proc_s": proc_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--left", type=float, default=0.1, help="fraction of the samples the resume asks")
    ap.add_argument("--pairs", type=int, default=3, help="rounds of interleaved sides (at least 3 for figures)")
    ap.add_argument("--sides", default=",".join(SIDES), help="which sides to run (comma-separated)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the stores are written (default: a temp dir)")
    ap.add_argument("--harness", choices=("hook", "lmms", "api"), default="hook",
                    help="hook: answers scored by the hook as lmms-eval would; lmms: lmms-eval's own loop; api: "
                    "lmms-eval's loop in a process of its own, as an API model's run")
    ap.add_argument("--side", default=None, help=argparse.SUPPRESS)  # the child process
    ap.add_argument("--folder", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side is not None:
        print(json.dumps(side(args.side, args.folder, args.n, args.harness)))
        return
    sides = [s for s in args.sides.split(",") if s]
    if unknown := set(sides) - set(SIDES):
        raise SystemExit(f"--sides: unknown {', '.join(sorted(unknown))}; known: {', '.join(SIDES)}")
    n = args.n
    results: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    if args.workdir:
        Path(args.workdir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        base, killed_base = Path(tmp) / "base", Path(tmp) / "killed"
        built = build(base, n, args.left)
        size_mb = sum(p.stat().st_size for p in base.rglob("*") if p.is_file()) / 2**20
        print(f"samples: {n}, left: {args.left:g} (every {max(1, round(1 / args.left)) if args.left else 0}th); "
              f"store {size_mb:.0f} MB, answers written in {built['write_s']:.1f} s, first finalisation "
              f"{built['first_s']:.1f} s", flush=True)
        if "killed" in sides or "unscored" in sides:
            built = build(killed_base, n, args.left, killed=True)
            size_mb = sum(p.stat().st_size for p in killed_base.rglob("*") if p.is_file()) / 2**20
            print(f"killed store {size_mb:.0f} MB, answers written and scored in {built['write_s']:.1f} s", flush=True)
        for p in range(args.pairs):
            order = sides[p % len(sides):] + sides[:p % len(sides)]
            if "noop" in order and "resume" in order and order.index("noop") < order.index("resume"):
                order.remove("noop")  # the no-op rerun runs on the resumed copy
                order.insert(order.index("resume") + 1, "noop")
            work = Path(tmp) / f"round{p}"
            resumed = work / "resume"
            if "resume" in order or "noop" in order:
                shutil.copytree(base, resumed)
            if "noop" in order and "resume" not in order:  # bring the copy up to date first, untimed
                run_side("resume", resumed, n, args.harness)
            if "keyset" in order:
                shutil.copytree(base, work / "keyset")
            if "killed" in order:
                shutil.copytree(killed_base, work / "killed")
            if "unscored" in order:
                shutil.copytree(killed_base, work / "unscored")
                shutil.rmtree(StoreLayout(work / "unscored").scores)
            got: dict[str, dict[str, float]] = {}
            for s in order:
                folder = {"resume": resumed, "noop": resumed, "scratch": work / "scratch", "keyset": work / "keyset",
                          "killed": work / "killed", "unscored": work / "unscored", "walk": work / "walk"}[s]
                got[s] = run_side(s, folder, n, args.harness)
                results[s].append(got[s])
            shutil.rmtree(work)
            line = "  ".join(f"{s} {got[s]['s']:.2f} s (CPU {got[s]['cpu_s']:.2f} s) / {got[s]['peak_mb']:.0f} MB "
                             f"(asked {got[s]['asked']}) "
                             f"[selection {got[s]['select_s']:.2f} s, process {got[s]['proc_s']:.2f} s]" for s in order)
            ratios = [f"{r}/{o} {got[r]['s'] / got[o]['s']:.2f}" for r, o in RATIOS if r in got and o in got]
            print(f"round {p + 1} [{', '.join(order)}]: {line}" + (f"\n  ratios: {'  '.join(ratios)}" if ratios else ""),
                  flush=True)
    print("median over rounds:")
    for s in sides:
        rs = results[s]
        print(f"  {s:8s} {statistics.median(r['s'] for r in rs):8.2f} s (CPU "
              f"{statistics.median(r['cpu_s'] for r in rs):.2f} s)   peak RSS "
              f"{statistics.median(r['peak_mb'] for r in rs):6.0f} MB (the selection "
              f"{statistics.median(r['docs_mb'] for r in rs):.0f} MB of it)   selection "
              f"{statistics.median(r['select_s'] for r in rs):.2f} s   process "
              f"{statistics.median(r['proc_s'] for r in rs):.2f} s")
    for r, o in RATIOS:
        if r in results and o in results:
            per = [a['s'] / q['s'] for a, q in zip(results[r], results[o])]
            walls = [a['proc_s'] / q['proc_s'] for a, q in zip(results[r], results[o])]
            print(f"  {r} / {o}: per round {', '.join(f'{x:.2f}' for x in per)}; median "
                  f"{statistics.median(per):.2f}" + (f" (left fraction {args.left:g})" if o == "scratch" else "")
                  + f"; process wall per round {', '.join(f'{x:.2f}' for x in walls)}")


if __name__ == "__main__":
    main()
