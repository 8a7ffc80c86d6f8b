"""The harnesses that run a task's samples: lmms-eval for models, a direct loop for the baselines.

lmms-eval (pinned, from PyPI) runs the task loop over the docs and calls our hooks. For a local model it runs in this
process (``LmmsHarness``, imported in a thread while the weights load: ``preload_lmms``): our ``StreamingLMM`` hands
each request to the backend and passes every answer to a callback the moment it lands (the runner appends it to the
sample store). For an API model it runs in a process of its own (``runner.lmms_process``), so that its import never
holds this process while the requests go out. The baselines (oracle, mean, random box) answer from the annotations
and generate nothing: ``DirectHarness`` asks them the same requests through the same claims and scores each answer
with the same hook, without importing lmms-eval (seconds of start-up and a few hundred MB that a baseline has no use
for).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import sys
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from medvision_bm.data.docs import RunDoc
from medvision_bm.models.base import Backend, GenRequest, GenResult, GenSettings
from medvision_bm.models.claimed import ClaimSource

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

#: One row of lmms-eval's per-sample log (``doc_id``, ``target``, ``resps``, ``filtered_resps``, the metrics, ...).
LogRow = dict[str, object]


def template_path(family: str) -> Path:
    return Path(str(resources.files("medvision_bm.tasks") / "templates" / f"_medvision_{family}.yaml"))


def write_task_yaml(folder: Path, task: str, family: str, rows_path: Path) -> Path:
    """One small YAML per task: include the family template, name the task, point at its rows."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{task}.yaml"
    path.write_text(
        f"include: {json.dumps(str(template_path(family)))}\n"
        f"task: {json.dumps(task)}\n"
        "dataset_kwargs:\n"
        "  data_files:\n"
        f"    test: {json.dumps(str(rows_path))}\n",
        encoding="utf-8",
    )
    return path


@dataclass
class TaskRun:
    """What the harness needs for one task."""

    task: str
    family: str
    rundocs: Sequence[RunDoc]
    gen: GenSettings
    system_prompt: str | None
    on_result: Callable[[GenResult], None]
    claims: ClaimSource | None = None  # concurrent runs of the task share its samples
    chunk: int = 256  # samples claimed at a time
    first_row: int = 0  # the position of the first rundoc in the task's to-do (its part's offset)


def datasets_cache(workdir: Path) -> str:
    """Where lmms-eval's dataset loader caches a run's parts (below the run's work folder, unless the user set one)."""
    return str(workdir / "hf_datasets_cache")


def request_for(rd: RunDoc, gen: GenSettings, system_prompt: str | None, backend: Backend,
                row: Mapping[str, str] | None = None) -> GenRequest:
    """The request lmms-eval makes of a sample's row with this suite's templates: the prompt and the image from the
    hooks of the task (the grey slice where the backend takes it), so an answer asked outside lmms-eval's own loop
    (by the API harness, or in a provider batch) is the answer to the very request lmms-eval's loop makes. ``row``:
    the sample's row (``rd.to_lmms_row()``) when it is made already. The row is ``rd`` written out, and reads back
    as ``rd`` (``RunDoc.from_lmms_row``): the prompt is made of ``rd`` itself, the row is not parsed again."""
    from medvision_bm.tasks import hooks

    row = rd.to_lmms_row() if row is None else row
    visual = hooks.doc_to_visual_gray if getattr(backend, "takes_gray_slices", False) else hooks.doc_to_visual
    return GenRequest(key=rd.doc.key, prompt=hooks.prompt(rd), rundoc=rd, gen=gen, system_prompt=system_prompt,
                      image_loader=functools.partial(visual, row))


def quiet_environment() -> None:
    """Offline hub, no third-party progress bars; set before tqdm or lmms-eval are imported."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # lmms-eval's own bars; ours passes disable=False explicitly


def silence_bars(*modules: types.ModuleType) -> None:
    """lmms-eval's own bars (``Postprocessing``, building requests) pass ``disable=(RANK != 0)``, which overrides
    TQDM_DISABLE: give those modules a tqdm that is always off (the run's own bar, or --no_progress, decides)."""
    for module in modules:
        real = getattr(module, "tqdm", None)
        if real is None or getattr(real, "_medvision_quiet", False):
            continue
        vars(module)["tqdm"] = _QuietTqdm(real)


#: Modules lmms-eval imports at start-up and this suite's tasks never use: HF ``evaluate`` (lmms-eval's registry
#: imports it for ``get_metric``'s fallback to ``evaluate.load``, which a task whose ``process_results`` scores its
#: own samples never reaches), whose import pulls ``transformers.pipelines``: seconds of CPU a run has no use for.
DEFERRED_MODULES = ("evaluate",)


class _Deferred(types.ModuleType):
    """A stand-in for a module not imported yet: the real module is imported at the first use of any attribute the
    stand-in lacks (a submodule's import asks for ``__path__``), and serves it and every later one; what looks modules
    over (``inspect.getmodule`` reads every module's ``__file__``) finds the module's own ``__file__`` and
    ``__spec__`` without importing it."""

    def __getattr__(self, name: str) -> object:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def defer_imports(names: Sequence[str] = DEFERRED_MODULES) -> None:
    """Put a stand-in for each module of ``names`` that is installed and not imported yet (see ``_Deferred``)."""
    for name in names:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        stand_in = _Deferred(name)
        stand_in.__file__ = spec.origin
        stand_in.__spec__ = spec
        stand_in.__loader__ = spec.loader
        sys.modules[name] = stand_in


#: The modules a model run's harness needs (lmms-eval's evaluator, task classes and task manager, and this suite's
#: lmms-eval model class), in the order ``LmmsHarness`` imports them.
HARNESS_MODULES = ("medvision_bm.models.lmms_models", "lmms_eval.evaluator", "lmms_eval.api.task", "lmms_eval.tasks")

_preload: threading.Thread | None = None


def preload_lmms() -> None:
    """Import lmms-eval in a background thread, once per process: a local model's weights load meanwhile (reading
    and copying tensors releases the GIL), so the import is off the run's critical path. ``LmmsHarness`` waits for
    it; an import that failed there fails again, with its own error, when the harness imports the module itself."""
    global _preload
    if _preload is not None or all(name in sys.modules for name in HARNESS_MODULES):
        return
    quiet_environment()  # before tqdm or lmms-eval are imported
    defer_imports()

    def work() -> None:
        for name in HARNESS_MODULES:
            try:
                importlib.import_module(name)
            except Exception:
                return

    _preload = threading.Thread(target=work, name="medvision-harness-import", daemon=True)
    _preload.start()


def _await_preload() -> None:
    if _preload is not None:
        _preload.join()


def _cache_run_constants(module: types.ModuleType) -> None:
    """lmms-eval asks git for its own commit and branch in every ``simple_evaluate`` (a few subprocesses, about 30 ms
    a task, for the results' header, which the runner does not keep): asked once per process, the same answers."""
    for name in ("get_git_commit_hash", "get_git_branch_name", "get_lmms_eval_version_string"):
        real = getattr(module, name, None)
        if callable(real) and not hasattr(real, "cache_info"):
            setattr(module, name, functools.cache(real))


class _QuietTqdm:
    """A module's ``tqdm``, called with ``disable=True`` whatever the caller passes."""

    _medvision_quiet = True

    def __init__(self, real: Callable[..., object]) -> None:
        self._real = real

    def __call__(self, *args: object, **kwargs: object) -> object:
        kwargs["disable"] = True
        return self._real(*args, **kwargs)


class DirectHarness:
    """Runs a baseline's tasks without lmms-eval: each sample's request (the prompt and picture the suite's own
    hooks make, as lmms-eval asks with them; the picture made only if the backend reads it), claimed and asked as
    ``StreamingLMM`` asks it (``models.claimed``), every answer handed to the runner as it lands and scored by the
    ``process_results`` hook lmms-eval calls. Its per-sample log has the rows' core fields as lmms-eval writes them
    (``doc_id``, ``target``, ``resps``, ``filtered_resps`` and the hook's metrics; not lmms-eval's hashes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def run(self, spec: TaskRun) -> list[LogRow]:
        from medvision_bm.models.base import GenRequest
        from medvision_bm.models.claimed import answer_text, ask_claimed
        from medvision_bm.tasks import hooks

        pending = {rd.doc.key: GenRequest(key=rd.doc.key, prompt=hooks.prompt(rd), rundoc=rd, gen=spec.gen,
                                          system_prompt=spec.system_prompt,
                                          image_loader=functools.partial(_picture, rd))  # (read only if asked)
                   for rd in spec.rundocs}
        texts: dict[str, str] = {}

        def on_result(res: GenResult) -> None:
            texts[res.key] = answer_text(res)
            spec.on_result(res)

        ask_claimed(self.backend, pending, on_result, spec.claims, spec.chunk, texts)
        log: list[LogRow] = []
        for rd in spec.rundocs:  # as lmms-eval's loop does once every answer is in, and its per-sample log's rows
            row, text = rd.to_lmms_row(), texts.get(rd.doc.key, "")
            metrics = hooks.process_results(row, [text])
            log.append({"doc_id": rd.doc.index, "target": hooks.doc_to_target(row), "resps": [[text]],
                        "filtered_resps": [text], **metrics})
        return log


def _picture(rd: RunDoc) -> list[PILImage]:
    from medvision_bm.tasks import hooks

    return [hooks.visual(rd)]


class LmmsHarness:
    """Runs tasks through lmms-eval's ``simple_evaluate`` with one model instance for the whole run."""

    def __init__(self, backend: Backend, workdir: Path) -> None:
        quiet_environment()
        defer_imports()
        _await_preload()
        from medvision_bm.models.lmms_models import StreamingLMM  # deferred: imports lmms-eval and torch

        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("HF_DATASETS_CACHE", datasets_cache(self.workdir))
        self._model = StreamingLMM(backend)

    def run(self, spec: TaskRun) -> list[LogRow]:
        """Answer every row of the task; returns lmms-eval's per-sample log (without the docs)."""
        from medvision_bm.models.lmms_models import StreamTarget  # deferred: imports lmms-eval and torch

        task_dir = write_part(self.workdir, spec)
        self._model.target = StreamTarget(spec.gen, spec.system_prompt, spec.on_result, spec.claims, spec.chunk)
        try:
            return evaluate_part(self._model, spec.task, task_dir, spec.first_row)
        finally:
            self._model.target = None


def part_rows_path(task_dir: Path, first_row: int) -> Path:
    """The rows file of a task's part: a file name of its own per part (lmms-eval's dataset cache would take an equal
    name, size and time as seen)."""
    return task_dir / (f"rows-{first_row}.jsonl" if first_row else "rows.jsonl")


def write_part(workdir: Path, spec: TaskRun, rows: Sequence[Mapping[str, str]] | None = None) -> Path:
    """The rows of a task's part as lmms-eval's dataset reads them (``rows``: the rundocs' rows when they are made
    already), and the task's YAML naming them; returns the task's folder (an earlier part's rows, never read again,
    are removed)."""
    task_dir = workdir / "tasks" / spec.task
    task_dir.mkdir(parents=True, exist_ok=True)
    for old in task_dir.glob("rows*.jsonl"):
        old.unlink()
    rows_path = part_rows_path(task_dir, spec.first_row)
    with open(rows_path, "w", encoding="utf-8") as fh:
        for row in (rd.to_lmms_row() for rd in spec.rundocs) if rows is None else rows:
            fh.write(json.dumps(row) + "\n")
    write_task_yaml(task_dir, spec.task, spec.family, rows_path)
    return task_dir


def evaluate_part(model: object, task: str, task_dir: Path, first_row: int) -> list[LogRow]:
    """lmms-eval's ``simple_evaluate`` of one task's part (written by :func:`write_part`) with ``model``; returns
    its per-sample log without the docs, the rows numbered by their place in the task's to-do."""
    from lmms_eval import evaluator
    from lmms_eval.api import task as lmms_task
    from lmms_eval.tasks import TaskManager

    silence_bars(evaluator, lmms_task)
    _cache_run_constants(evaluator)
    manager = TaskManager(include_path=str(task_dir), include_defaults=False)
    out = evaluator.simple_evaluate(model=model, tasks=[task], task_manager=manager, log_samples=True,
                                    bootstrap_iters=0, process_docs_parallel=1, verbosity="WARNING")
    if not out:
        raise RuntimeError(f"lmms-eval returned no results for {task}")
    samples = out.get("samples", {}).get(task, [])
    # lmms-eval numbers a part's rows from 0: the log numbers them by their place in the task's to-do
    return [{k: (v + first_row if k == "doc_id" and isinstance(v, int) else v) for k, v in s.items()
             if k not in ("doc", "arguments")} for s in samples]
