"""Which tasks of a run hold test cases that its model was trained on: for every store whose registry record names
the annotation release its weights were trained on (``ModelRecord.training_release``), the split swap of the
store's task (``data.split_swap``, from the data folder's plans) between the release the store was evaluated at and
that training release. A task is marked when one of its evaluated cases was a training case there.

Which release upstream's models were trained on: ``docs/spec/training-release.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from medvision_bm.data.layout import parse_task_name
from medvision_bm.data.split_swap import Releases
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonMapping
from medvision_bm.models.registry import REGISTRY
from medvision_bm.report.against_published import weights_of_model
from medvision_bm.report.load import StoreInfo
from medvision_bm.report.views import View
from medvision_bm.store.discovery import signature_object

TITLE = "Test cases held for training"


@dataclass(frozen=True)
class Overlap:
    """One store's task against its model's training release: of the ``cases`` the task evaluates (its test cases
    at the evaluated release; its train cases for a ``_Train`` task), ``seen`` were training cases there."""

    label: str
    task: str
    record: str
    evaluated: str
    training: str
    cases: int
    seen: int

    @property
    def marked(self) -> bool:
        return self.seen > 0

    def to_json(self) -> dict[str, object]:
        return {**asdict(self), "marked": self.marked}


def training_release_of(model: JsonMapping) -> tuple[str, str] | None:
    """(record, training release) of a run's signature ``model`` inputs, when its record names one and the run
    read the record's default weights (other weights of the same record were trained on something else)."""
    record = REGISTRY.get(str(model.get("record") or ""))
    if record is None or record.training_release is None:
        return None
    weights = weights_of_model(model)
    if weights and record.default_weights and weights.lower() != record.default_weights.lower():
        return None
    return record.name, record.training_release


def _evaluated_release(store: StoreInfo) -> str | None:
    """The plan version the store's task was read at (its signature, else its results.json)."""
    version = store.ref.inputs.get("plan_version")
    if not version:
        results = store.results_record()
        version = results.plan_version if results is not None else None
    return str(version) if version else None


def _check(releases: Releases, store: StoreInfo, evaluated: str, training: str) -> tuple[int, int] | str:
    """(cases the store's task evaluates, of them training cases at ``training``), or why it cannot be told."""
    try:
        tn = parse_task_name(store.ref.task)
        counts = releases.task_swap(tn.dataset, tn.kind, evaluated, training, tn.task_pos)
    except UserError as exc:
        return str(exc)
    if counts is None:
        return f"the data folder lacks the v{evaluated} or v{training} {tn.kind} plan of {tn.dataset}"
    if tn.split == "test":
        return counts["old_test"], counts["test_to_train"]
    return counts["old_train"], counts["old_train"] - counts["train_to_test"]


def overlaps(stores: Sequence[StoreInfo], data_dir: Path | None) -> tuple[list[Overlap], list[str]]:
    """Per store with a known training release its ``Overlap``; and one note per run and reason for the stores that
    cannot be checked."""
    rows: list[Overlap] = []
    unchecked: dict[tuple[str, str, str], int] = {}  # (run, training release, why) -> tasks
    releases: Releases | None = None
    for s in stores:
        known = training_release_of(signature_object(s.ref.inputs, "model"))
        if known is None:
            continue
        record, training = known
        evaluated = _evaluated_release(s)
        got: tuple[int, int] | str
        if data_dir is None:
            got = "no data folder is known (pass --data_dir)"
        elif evaluated is None:
            got = "its plan version is not recorded"
        else:
            try:
                releases = releases or Releases.of(data_dir)
                got = _check(releases, s, evaluated, training)
            except UserError as exc:
                got = str(exc)
        if isinstance(got, str) or evaluated is None:
            key = (s.ref.label, training, str(got))
            unchecked[key] = unchecked.get(key, 0) + 1
            continue
        rows.append(Overlap(s.ref.label, s.ref.task, record, evaluated, training, *got))
    notes = [f"{label}: {n} task(s) not checked against training release {training} ({why})"
             for (label, training, why), n in unchecked.items()]
    return rows, notes


def view(rows: Sequence[Overlap]) -> View:
    """The report's table: one row per run and task, the marked ones flagged."""
    return View(TITLE, ["Run", "Task", "Evaluated release", "Training release", "Cases seen in training", "Marked"],
                [[r.label, r.task, r.evaluated, r.training, f"{r.seen} / {r.cases}",
                  "yes: trained on its test cases" if r.marked else "no"] for r in rows],
                "Per run whose registry record names the annotation release its weights were trained on: of the "
                "cases its task evaluates (test cases at the evaluated release, by image), those the training "
                "release's plans hold in their training split (the per-task split swap of `medvision-bm data "
                "split-swap`). A marked task's numbers rest partly on cases the model was trained on.",
                [False, False, False, False, True, False], row_classes=["trained-on" if r.marked else "" for r in rows])


def summary_lines(rows: Sequence[Overlap]) -> list[str]:
    """One line per run with a training release: how many of its tasks are marked, and which."""
    runs: dict[tuple[str, str], list[Overlap]] = {}
    for r in rows:
        runs.setdefault((r.label, r.training), []).append(r)
    lines = []
    for (label, training), items in runs.items():
        marked = [r.task for r in items if r.marked]
        which = f": {', '.join(marked)}" if marked else ""
        lines.append(f"  {label} (trained on release {training}): {len(marked)} of {len(items)} task(s) hold test "
                     f"cases of its training split{which}")
    return lines
