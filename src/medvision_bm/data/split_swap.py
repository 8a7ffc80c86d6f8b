"""The case-level train/test swap between two annotation releases of a data folder: which cases of one release's
test split are training cases in the other, pooled per dataset (upstream's table), and per task (the suite's view).

Rule and table: YongchengYAO/MedVision script/analyze/compare-ds-release/count_case_split_swap.py @45fa8e5. A case
is its ``image_file``; its split is pooled over a dataset's tasks of one plan kind (a case in train in one task and
test in another is an error); counts run over the cases both releases hold. The per-task view is the suite's own:
a task (by its position in the plan, as a task name's ``Task<NN>`` picks it) counts the cases it lists in either
release, each with its pooled split in each release that holds it, by upstream's ``count_case_swap``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from medvision_bm.data.plan_files import plan_filename
from medvision_bm.data.plans import PlanError, plan_events
from medvision_bm.errors import UserError

KEYS = ("shared", "old_test", "old_train", "test_to_train", "train_to_test", "old_only", "new_only")


@dataclass(frozen=True)
class PlanCases:
    """One plan's cases: each ``image_file``'s split pooled over the plan's tasks, and per task position the
    cases that task lists."""

    splits: dict[str, str]
    tasks: dict[int, frozenset[str]]


def plan_cases(path: Path) -> PlanCases:
    """The cases of the plan at ``path`` (one streamed pass; upstream ``case_splits`` for the pooled splits)."""
    splits: dict[str, str] = {}
    tasks: dict[int, set[str]] = {}
    for ev in plan_events(path, lambda pos, split: True):
        if ev[0] == "header":
            tasks.setdefault(ev[1], set())
        if ev[0] != "case":
            continue
        case = ev[3]
        img = case.get("image_file") if isinstance(case, dict) else None
        if not isinstance(img, str):
            raise PlanError(f"plan {path} has a case without an image_file string; fetch the plan again")
        if splits.setdefault(img, ev[2]) != ev[2]:
            raise UserError(f"plan {path}: {img} is in both train and test across tasks; it has no one split")
        tasks.setdefault(ev[1], set()).add(img)
    return PlanCases(splits, {pos: frozenset(cases) for pos, cases in tasks.items()})


def case_splits(path: Path) -> dict[str, str]:
    """image_file -> "train" | "test", pooled over the plan's tasks (upstream ``case_splits``)."""
    return plan_cases(path).splits


def count_case_swap(old: dict[str, str], new: dict[str, str]) -> dict[str, int]:
    """Upstream ``count_case_swap``: the split moves over the shared cases, and the cases in one release only."""
    shared = old.keys() & new.keys()
    return {
        "shared": len(shared),
        "old_test": sum(old[c] == "test" for c in shared),
        "old_train": sum(old[c] == "train" for c in shared),
        "test_to_train": sum(old[c] == "test" and new[c] == "train" for c in shared),
        "train_to_test": sum(old[c] == "train" and new[c] == "test" for c in shared),
        "old_only": len(old.keys() - new.keys()),
        "new_only": len(new.keys() - old.keys()),
    }


def count_task_swap(old: PlanCases, new: PlanCases, pos: int) -> dict[str, int]:
    """The swap counts of task ``pos``: the cases it lists in either release, each with its pooled split in each
    release that holds it (a case the task lists in one release only is shared when the other holds it elsewhere)."""
    cases = old.tasks.get(pos, frozenset()) | new.tasks.get(pos, frozenset())
    return count_case_swap({c: old.splits[c] for c in cases if c in old.splits},
                           {c: new.splits[c] for c in cases if c in new.splits})


def datasets_dir(data_dir: Path) -> Path:
    """``<Data>/Datasets`` when given the Data/ folder, else the folder itself (upstream's ``--data_dir``)."""
    return data_dir / "Datasets" if (data_dir / "Datasets").is_dir() else data_dir


@dataclass
class Releases:
    """The plans of one data folder, each read once however many comparisons ask for it."""

    root: Path
    _read: dict[Path, PlanCases | None] = field(default_factory=dict)

    @classmethod
    def of(cls, data_dir: str | Path) -> Releases:
        root = datasets_dir(Path(data_dir).expanduser())
        if not root.is_dir():
            raise UserError(f"data folder {data_dir} does not exist; pass the Data/ folder holding Datasets/")
        return cls(root)

    def cases(self, dataset: str, kind: str, version: str) -> PlanCases | None:
        """The cases of ``dataset``'s plan of ``kind`` at ``version``; None when the folder has no such plan."""
        path = self.root / dataset / plan_filename(kind, version)
        if path not in self._read:
            self._read[path] = plan_cases(path) if path.is_file() else None
        return self._read[path]

    def pair(self, dataset: str, kind: str, old: str, new: str) -> tuple[PlanCases, PlanCases] | None:
        """The cases of both releases' plans; None (neither read) when one is missing."""
        if not all((self.root / dataset / plan_filename(kind, v)).is_file() for v in (old, new)):
            return None
        a, b = self.cases(dataset, kind, old), self.cases(dataset, kind, new)
        return None if a is None or b is None else (a, b)

    def task_swap(self, dataset: str, kind: str, old: str, new: str, pos: int) -> dict[str, int] | None:
        """``count_task_swap`` of task ``pos`` between releases ``old`` and ``new``; None when a plan is missing."""
        both = self.pair(dataset, kind, old, new)
        return None if both is None else count_task_swap(*both, pos)


@dataclass(frozen=True)
class SwapReport:
    """Per dataset its swap counts (upstream's rows), per (dataset, task position) the suite's, and the datasets
    skipped because one release's plan is missing."""

    datasets: list[tuple[str, dict[str, int]]]
    tasks: list[tuple[str, int, dict[str, int]]]
    skipped: list[str]


def compare_releases(data_dir: str | Path, old: str, new: str, kind: str = "biometry",
                     datasets: list[str] | None = None) -> SwapReport:
    """The swap between releases ``old`` and ``new`` of every dataset with a ``new`` plan (sorted), unless named."""
    rel = Releases.of(data_dir)
    names = datasets or sorted(p.parent.name for p in rel.root.glob(f"*/{plan_filename(kind, new)}"))
    rows: list[tuple[str, dict[str, int]]] = []
    tasks: list[tuple[str, int, dict[str, int]]] = []
    skipped: list[str] = []
    for ds in names:
        both = rel.pair(ds, kind, old, new)
        if both is None:
            skipped.append(ds)
            continue
        a, b = both
        rows.append((ds, count_case_swap(a.splits, b.splits)))
        tasks += [(ds, pos, count_task_swap(a, b, pos)) for pos in sorted(a.tasks.keys() | b.tasks.keys())]
    return SwapReport(rows, tasks, skipped)


def split_swap(data_dir: str | Path, old: str, new: str, kind: str = "biometry",
               datasets: list[str] | None = None) -> tuple[list[tuple[str, dict[str, int]]], list[str]]:
    """Per dataset (those with a ``new`` plan, sorted, unless named) its swap counts; and the datasets skipped
    because one release's plan is missing."""
    report = compare_releases(data_dir, old, new, kind, datasets)
    return report.datasets, report.skipped


def _frac(n: int, d: int) -> str:
    return f"{n:>5}/{d:<5} ({n / d if d else 0.0:.3f})"


def _cells(row: dict[str, int]) -> str:
    changed = row["test_to_train"] + row["train_to_test"]
    return (f"{row['shared']:>6} | {_frac(row['test_to_train'], row['old_test'])} | "
            f"{_frac(row['train_to_test'], row['old_train'])} | {_frac(changed, row['shared'])} | "
            f"{row['old_only']:>8} | {row['new_only']:>8}")


def format_row(name: str, row: dict[str, int]) -> str:
    return f"{name:<18} | {_cells(row)}"


def _header(first: str) -> str:
    return (f"{first} | {'Shared':>6} | {'Test -> Train':<19} | {'Train -> Test':<19} | "
            f"{'Changed (both)':<19} | {'Old only':>8} | {'New only':>8}")


def report_lines(rows: list[tuple[str, dict[str, int]]], skipped: list[str], old: str, new: str) -> list[str]:
    """Upstream's printed table, line for line."""
    lines: list[str] = []
    if rows:
        header = _header(f"{'Dataset':<18}")
        lines += [f"Case-level train/test swap, v{old} -> v{new}",
                  f"(cases pooled over each dataset's tasks; Test -> Train over v{old} test cases, Train -> Test "
                  f"over v{old} train cases, Changed over all shared cases; Old/New only = case in one version's "
                  "plan only)", "", header, "-" * len(header)]
        lines += [format_row(ds, r) for ds, r in rows]
        total = {k: sum(r[k] for _, r in rows) for k in KEYS}
        lines += ["-" * len(header), format_row("All", total)]
    if skipped:
        lines += ["", f"Skipped (no v{old} or v{new} plan): {', '.join(skipped)}"]
    return lines


def task_label(pos: int) -> str:
    """A plan task's position as a task name spells it (``tasks[int(NN) - 1]``): ``Task01`` for position 0."""
    return f"Task{pos + 1:02d}"


def task_lines(tasks: list[tuple[str, int, dict[str, int]]], old: str, new: str) -> list[str]:
    """The suite's per-task table (not upstream's): one row per dataset and plan task."""
    if not tasks:
        return []
    header = _header(f"{'Dataset':<18} | {'Task':<6}")
    return [f"Per task (medvision-bm's view, not upstream's), v{old} -> v{new}",
            "(a task's cases: those it lists in either release, each with its split pooled over the dataset's "
            f"tasks; Test -> Train: v{old} test cases the v{new} plan holds as training cases)", "", header,
            "-" * len(header), *[f"{ds:<18} | {task_label(pos):<6} | {_cells(r)}" for ds, pos, r in tasks]]
