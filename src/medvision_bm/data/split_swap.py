"""The case-level train/test swap between two annotation releases of a data folder: which cases of one release's
test split are training cases in the other, pooled per dataset, with upstream's table.

Rule and table: YongchengYAO/MedVision script/analyze/compare-ds-release/count_case_split_swap.py @45fa8e5. A case
is its ``image_file``; its split is pooled over a dataset's tasks of one plan kind (a case in train in one task and
test in another is an error); counts run over the cases both releases hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medvision_bm.data.plan_files import plan_filename
from medvision_bm.data.plans import PlanError, plan_events
from medvision_bm.errors import UserError

KEYS = ("shared", "old_test", "old_train", "test_to_train", "train_to_test", "old_only", "new_only")


def case_splits(path: Path) -> dict[str, str]:
    """image_file -> "train" | "test", pooled over the plan's tasks (upstream ``case_splits``)."""
    splits: dict[str, str] = {}
    for ev in plan_events(path, lambda pos, split: True):
        if ev[0] != "case":
            continue
        img = ev[3].get("image_file")
        if not isinstance(img, str):
            raise PlanError(f"plan {path} has a case without an image_file string; fetch the plan again")
        if splits.setdefault(img, ev[2]) != ev[2]:
            raise UserError(f"plan {path}: {img} is in both train and test across tasks; it has no one split")
    return splits


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


def datasets_dir(data_dir: Path) -> Path:
    """``<Data>/Datasets`` when given the Data/ folder, else the folder itself (upstream's ``--data_dir``)."""
    return data_dir / "Datasets" if (data_dir / "Datasets").is_dir() else data_dir


def split_swap(data_dir: str | Path, old: str, new: str, kind: str = "biometry",
               datasets: list[str] | None = None) -> tuple[list[tuple[str, dict[str, int]]], list[str]]:
    """Per dataset (those with a ``new`` plan, sorted, unless named) its swap counts; and the datasets skipped
    because one release's plan is missing."""
    root = datasets_dir(Path(data_dir).expanduser())
    if not root.is_dir():
        raise UserError(f"data folder {data_dir} does not exist; pass the Data/ folder holding Datasets/")
    names = datasets or sorted(p.parent.name for p in root.glob(f"*/{plan_filename(kind, new)}"))
    rows: list[tuple[str, dict[str, int]]] = []
    skipped: list[str] = []
    for ds in names:
        a, b = root / ds / plan_filename(kind, old), root / ds / plan_filename(kind, new)
        if not (a.is_file() and b.is_file()):
            skipped.append(ds)
            continue
        rows.append((ds, count_case_swap(case_splits(a), case_splits(b))))
    return rows, skipped


def _frac(n: int, d: int) -> str:
    return f"{n:>5}/{d:<5} ({n / d if d else 0.0:.3f})"


def format_row(name: str, row: dict[str, Any]) -> str:
    changed = row["test_to_train"] + row["train_to_test"]
    return (f"{name:<18} | {row['shared']:>6} | {_frac(row['test_to_train'], row['old_test'])} | "
            f"{_frac(row['train_to_test'], row['old_train'])} | {_frac(changed, row['shared'])} | "
            f"{row['old_only']:>8} | {row['new_only']:>8}")


def report_lines(rows: list[tuple[str, dict[str, int]]], skipped: list[str], old: str, new: str) -> list[str]:
    """Upstream's printed table, line for line."""
    lines: list[str] = []
    if rows:
        header = (f"{'Dataset':<18} | {'Shared':>6} | {'Test -> Train':<19} | {'Train -> Test':<19} | "
                  f"{'Changed (both)':<19} | {'Old only':>8} | {'New only':>8}")
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
