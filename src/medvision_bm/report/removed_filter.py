"""Upstream's T/L removed-samples filter on the report's sample frames: which runs it applies to, which samples it
drops, and the counts every table and note shows.

The rule is ``data.removed_samples`` (upstream ``summarize_TL_task.py`` @28f6c67). Here: on by default for T/L stores
at annotation pin 1.0.0 (the leaderboard's; ``--no_tl_filter`` turns it off); stores at other pins are not filtered
(from 1.1.0 upstream's loader drops those slices itself). The lists are read from ``--removed_samples_dir`` (upstream's
flag: the ``Data/Datasets`` root), else ``<data folder>/Datasets``. A dataset without its list is summarized
unfiltered, with a note; a summary or comparison with no data folder known for a store at pin 1.0.0 stops with a
one-line error (``--no_tl_filter`` lets it through unfiltered). Stored answers and ``parsed.jsonl`` are never
changed: the filter acts on what is read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from medvision_bm.data.layout import parse_task_name
from medvision_bm.data.removed_samples import FILTER_PIN, LIST_FILENAME, RemovedKey, RemovedLists, sample_key
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.report.data_dir import StoreFolder, resolve_data_dir
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import DocRow, ParsedRow, iter_lines
from medvision_bm.tasks.families import family_spec

if TYPE_CHECKING:  # polars (the report extra) only where frames are filtered: `parse` runs on a plain install
    import polars as pl

    from medvision_bm.report.load import Loaded
    from medvision_bm.report.tables import FamilyTables
    from medvision_bm.report.views import View
    from medvision_bm.store.discovery import StoreRef

#: Statuses of a T/L store under the filter.
FILTERED = "filtered"
NO_LIST = "unfiltered: no list file"
NO_DATA = "unfiltered: no data folder"
OFF = "unfiltered: --no_tl_filter"
OTHER_PIN = "unfiltered: annotation pin"  # + the store's pin

#: Where a summary lists what the filter did, as its note says (compare and parse, which write no such file, drop it).
TABLE_POINTER = "; per task and dataset in tl_filter.csv"

#: The sample key of a store row (data.layout): ``<image below Datasets>:d<slice_dim>:s<slice_idx>[:l<label>]``.
_KEY_RE = re.compile(r"^(?P<image>.+):d(?P<dim>\d+):s(?P<idx>-?\d+)(?::l-?\d+)?$")


@dataclass(frozen=True)
class FilterSettings:
    """Whether to filter and where the lists are (``datasets_root`` None: no data folder known; ``from_flag``: the
    root was given as ``--removed_samples_dir``)."""

    enabled: bool = True
    datasets_root: Path | None = None
    filename: str = LIST_FILENAME
    from_flag: bool = False


def settings_for(*, no_filter: bool, removed_samples_dir: str | None, filename: str | None, data_dir: str | None,
                 folders: Iterable[StoreFolder]) -> FilterSettings:
    """The settings from the flags: ``--removed_samples_dir`` (a Datasets root), else the data folder the sample
    browser finds (``--data_dir``, the data folder the run recorded, MedVision_DATA_DIR) + ``/Datasets``."""
    name = filename or LIST_FILENAME
    if no_filter:
        return FilterSettings(False, None, name)
    if removed_samples_dir:
        root = Path(removed_samples_dir).expanduser()
        if not root.is_dir():
            raise UserError(f"--removed_samples_dir {removed_samples_dir} is not a folder; pass the Data/Datasets "
                            "folder that holds <dataset>/" + name)
        return FilterSettings(True, root, name, from_flag=True)

    found, _ = resolve_data_dir(data_dir, folders)
    return FilterSettings(True, found / "Datasets" if found is not None else None, name)


@dataclass(frozen=True)
class FilterRow:
    """One T/L store under the filter (``dataset``: the task name's, whose folder holds the list)."""

    label: str
    task: str
    dataset: str
    planner_version: str
    status: str
    list_file: str
    listed: int | None  # entries in the dataset's list (None: no list read)
    n_before: int  # samples read
    removed: int

    def to_json(self) -> JsonObject:
        return {"label": self.label, "task": self.task, "dataset": self.dataset,
                "planner_version": self.planner_version, "status": self.status, "list_file": self.list_file,
                "listed": self.listed, "n_before": self.n_before, "removed": self.removed,
                "n_after": self.n_before - self.removed}


def _status_words(statuses: set[str]) -> str:
    """The one status of a run or task, or the reasons some of its stores were not filtered ("" for none)."""
    found = sorted(statuses)
    if not found:
        return ""
    return found[0] if len(found) == 1 else "partly filtered (" + "; ".join(found) + ")"


@dataclass
class FilterReport:
    """What the filter did to one loaded set: per T/L store, per run and label group, and the notes."""

    rows: list[FilterRow] = field(default_factory=list)
    by_group: dict[tuple[str, str], int] = field(default_factory=dict)  # (run label, group) -> samples removed
    notes: list[str] = field(default_factory=list)
    flag_given: bool = False  # --removed_samples_dir given (and the filter on)

    def removed_of(self, label: str, task: str | None = None) -> int:
        return sum(r.removed for r in self.rows if r.label == label and (task is None or r.task == task))

    def status_of(self, label: str, task: str | None = None) -> str:
        """``filtered`` when every T/L store of the run (or task) was, else the reasons it was not."""
        return _status_words({r.status for r in self.rows if r.label == label and (task is None or r.task == task)})

    def statuses(self) -> tuple[dict[tuple[str, str], str], dict[str, str]]:
        """``status_of`` of every (run, task) and of every run, in one pass over the rows."""
        per_task: dict[tuple[str, str], set[str]] = {}
        per_run: dict[str, set[str]] = {}
        for r in self.rows:
            per_task.setdefault((r.label, r.task), set()).add(r.status)
            per_run.setdefault(r.label, set()).add(r.status)
        return ({k: _status_words(v) for k, v in per_task.items()}, {k: _status_words(v) for k, v in per_run.items()})

    @property
    def total_removed(self) -> int:
        return sum(r.removed for r in self.rows)

    @property
    def applied(self) -> bool:
        return any(r.status == FILTERED for r in self.rows)

    @property
    def filtered_name(self) -> bool:
        """Whether upstream's summary files take the ``_filtered`` suffix. Upstream keys it on the flag alone:
        ``--removed_samples_dir`` given means ``_filtered`` whether or not a list file was found
        (``summarize_TL_task.py`` @28f6c67, ``_suffix`` in ``print_model_summaries``); here also whenever the
        filter was applied with the lists of the data folder (the default, which upstream reaches by the flag)."""
        return self.flag_given or self.applied

    def frame(self) -> pl.DataFrame:
        import polars as pl

        schema = {"label": pl.Utf8, "task": pl.Utf8, "dataset": pl.Utf8, "planner_version": pl.Utf8,
                  "status": pl.Utf8, "list_file": pl.Utf8, "listed": pl.Int64, "n_before": pl.Int64,
                  "removed": pl.Int64, "n_after": pl.Int64}
        return pl.DataFrame([r.to_json() for r in self.rows], schema=schema).sort("label", "task")


def row_key(key: str, dataset: str, task: str) -> RemovedKey | None:
    """Upstream's removed-set key of one stored sample (None: a key of another shape)."""
    m = _KEY_RE.match(key or "")
    if m is None:
        return None
    return sample_key(m["image"], dataset, int(m["dim"]), int(m["idx"]), parse_task_name(task).task_id)


def _store_status(settings: FilterSettings, pin: str) -> str | None:
    if not settings.enabled:
        return OFF
    if pin != FILTER_PIN:
        return f"{OTHER_PIN} {pin or '?'}"
    if settings.datasets_root is None:
        return NO_DATA
    return None


def _listed_keys(lists: RemovedLists | None, dataset: str) -> tuple[str, frozenset[RemovedKey] | None]:
    if lists is None:
        return "", None
    found = lists.get(dataset)
    return str(found.path), found.keys


def filter_notes(report: FilterReport, settings: FilterSettings) -> list[str]:
    """One line per problem (missing list, no data folder) and one for what was removed."""
    notes: list[str] = []
    missing = sorted({(r.dataset, r.list_file) for r in report.rows if r.status == NO_LIST})
    notes += [f"T/L: dataset {ds} has no removed-samples list ({path} is missing); its samples are summarized "
              "unfiltered, unlike upstream's leaderboard" for ds, path in missing]
    if any(r.status == NO_DATA for r in report.rows):
        notes.append("T/L: no data folder known, so upstream's removed-samples filter could not be applied; pass "
                     "--data_dir or --removed_samples_dir (the Data/Datasets folder), or --no_tl_filter")
    if report.applied:
        labels = dict.fromkeys(r.label for r in report.rows if r.status == FILTERED)
        per = ", ".join(f"{label}: {report.removed_of(label)}" for label in labels)
        notes.append(f"T/L: upstream's removed-samples filter ({settings.filename}, annotation pin {FILTER_PIN}) "
                     f"dropped {report.total_removed} sample(s) ({per}){TABLE_POINTER}")
    return notes


def decide(stores: Sequence[tuple[int, str, str, str]], store_ids: Sequence[int], keys: Sequence[str],
           settings: FilterSettings) -> tuple[FilterReport, list[int]]:
    """The filter over samples given as parallel ``store_ids`` and ``keys``: the report and the positions dropped.

    ``stores``: (store id, run label, task, annotation pin) of the T/L stores."""
    lists = RemovedLists(settings.datasets_root, settings.filename) if settings.datasets_root is not None else None
    report = FilterReport()
    rows_of: dict[int, list[int]] = {}
    for i, sid in enumerate(store_ids):
        rows_of.setdefault(sid, []).append(i)
    drop_ids: list[int] = []
    for sid, label, task, pin in stores:
        idx = rows_of.get(sid, [])
        dataset = parse_task_name(task).dataset  # upstream: the samples file name's dataset token
        status = _store_status(settings, pin)
        path, listed = ("", None) if status else _listed_keys(lists, dataset)
        if status is None and listed is None:
            status = NO_LIST
        dropped = [] if status or listed is None else [i for i in idx if row_key(keys[i], dataset, task) in listed]
        drop_ids += dropped
        report.rows.append(FilterRow(label, task, dataset, pin, status or FILTERED, path,
                                     None if listed is None else len(listed), len(idx), len(dropped)))
    report.notes = filter_notes(report, settings)
    return report, drop_ids


def filter_frame(frame: pl.DataFrame, stores: Sequence[tuple[int, str, str, str]],
                 settings: FilterSettings) -> tuple[pl.DataFrame, FilterReport]:
    """Drop the listed samples of ``frame`` (a T/L sample frame: store and key columns; group: counted per group).

    ``stores``: (store id, run label, task, annotation pin) of the frame's T/L stores."""
    import polars as pl

    report, drop_ids = decide(stores, frame["store"].to_list() if frame.height else [],
                              frame["key"].to_list() if frame.height else [], settings)
    if drop_ids:
        flags = [False] * frame.height
        for i in drop_ids:
            flags[i] = True
        mask = pl.Series("_drop", flags, dtype=pl.Boolean)
        labels = dict((sid, label) for sid, label, _, _ in stores)
        if "group" in frame.columns:
            gone = frame.filter(mask)
            for sid, group, n in gone.group_by("store", "group").len().iter_rows():
                k = (labels[sid], group)
                report.by_group[k] = report.by_group.get(k, 0) + int(n)
        frame = frame.filter(~mask)
    return frame, report


def filter_stores(refs: Sequence[StoreRef], settings: FilterSettings) -> FilterReport:
    """The filter's counts for T/L stores on disk (``StoreRef`` list; `medvision-bm parse`): per store, the samples of
    its ``parsed.jsonl`` (else ``docs.jsonl``) its dataset's list drops. Nothing is changed."""
    tl = [(i, r) for i, r in enumerate(refs) if family_spec(r.family).axes]
    ids: list[int] = []
    keys: list[str] = []
    for i, r in tl:
        files = StoreLayout(r.folder)
        record: Callable[[JsonValue], ParsedRow | DocRow] = ParsedRow.from_json
        path = files.parsed()
        if not path.is_file():
            path, record = files.docs, DocRow.from_json
        if not path.is_file():
            continue
        for row in iter_lines(path, record):
            ids.append(i)
            keys.append(row.key)
    stores = [(i, r.label, r.task, str(r.inputs.get("planner_version") or "")) for i, r in tl]
    return decide(stores, ids, keys, settings)[0]


def apply_tl_filter(loaded: Loaded, settings: FilterSettings) -> FilterReport:
    """Filter the T/L samples of ``loaded`` in place; the report of what was dropped (empty without T/L)."""
    frame = loaded.samples.get("TL")
    if frame is None:
        return FilterReport()
    stores = [(s.id, s.ref.label, s.ref.task, str(s.ref.inputs.get("planner_version") or ""))
              for s in loaded.stores if family_spec(s.ref.family).axes]
    kept, report = filter_frame(frame, stores, settings)
    unreadable = [r for r in report.rows if r.status == NO_DATA]
    if unreadable:  # a pin-1.0.0 number without the filter is not the leaderboard's: say so rather than print it
        first = unreadable[0]
        raise UserError(f"T/L: upstream's removed-samples filter applies to {len(unreadable)} task run(s) at annotation "
                        f"pin {FILTER_PIN} (first: {first.label} {first.task}) but no data folder is known to read "
                        "its lists from; pass --data_dir (the data folder the runs read) or --removed_samples_dir "
                        "(its Datasets folder), or --no_tl_filter to summarize them unfiltered")
    report.flag_given = settings.enabled and settings.from_flag
    if kept.height:
        loaded.samples["TL"] = kept
    else:
        del loaded.samples["TL"]
        report.notes.append("T/L: upstream's removed-samples filter dropped every T/L sample; no T/L tables")
    return report


# --------------------------------------------------------------------------------------------- in the tables


def with_filter_columns(ft: FamilyTables, report: FilterReport) -> FamilyTables:
    """The T/L tables (``tables.FamilyTables``) with ``tl_filter`` (the status in words) and ``n_removed`` columns:
    per run and task, per run and label group, per run."""
    import dataclasses

    import polars as pl

    if not report.rows:
        return ft
    task_status, run_status = report.statuses()
    removed_of_run: dict[str, int] = {}
    for r in report.rows:
        removed_of_run[r.label] = removed_of_run.get(r.label, 0) + r.removed
    per_task = pl.DataFrame([{"label": r.label, "task": r.task, "n_removed": r.removed,
                              "tl_filter": task_status[(r.label, r.task)]} for r in report.rows],
                            schema={"label": pl.Utf8, "task": pl.Utf8, "n_removed": pl.Int64, "tl_filter": pl.Utf8})
    labels = list(dict.fromkeys(r.label for r in report.rows))
    per_run = pl.DataFrame({"label": labels, "n_removed": [removed_of_run[lb] for lb in labels],
                            "tl_filter": [run_status[lb] for lb in labels]},
                           schema={"label": pl.Utf8, "n_removed": pl.Int64, "tl_filter": pl.Utf8})
    groups = ft.groups.join(per_run.select("label", "tl_filter"), on="label", how="left", maintain_order="left")
    removed = [report.by_group.get((lb, g), 0) for lb, g in zip(groups["label"].to_list(), groups["group"].to_list())]
    groups = groups.with_columns(pl.Series("n_removed", removed, dtype=pl.Int64))
    return dataclasses.replace(
        ft, tasks=ft.tasks.join(per_task, on=["label", "task"], how="left", maintain_order="left"),
        leaderboard=ft.leaderboard.join(per_run, on="label", how="left", maintain_order="left"), groups=groups)


def caption(report: FilterReport) -> str:
    """The sentence under every T/L table: which sample set it shows."""
    if not report.rows:
        return ""
    filtered = sum(r.status == FILTERED for r in report.rows)
    other = sorted({r.status for r in report.rows if r.status != FILTERED})
    text = (f"Sample set: upstream's T/L removed-samples filter ({FILTER_PIN} pin) dropped {report.total_removed} "
            f"sample(s) from {filtered} of {len(report.rows)} task run(s) (_filtered, as upstream's leaderboard; "
            "per run and task in tl_filter.csv)")
    return text + (f"; the others are {', '.join(other)}." if other else ".")


def view(report: FilterReport) -> View:
    """The table of what the filter did, per run, task and dataset."""
    from medvision_bm.report.views import (
        View,  # deferred: polars, which `parse` (a plain install) never needs
    )

    headers = ["Run", "Task", "Dataset", "Annotation pin", "Status", "List entries", "Samples read", "Removed",
               "Kept", "List file"]
    rows = [[r.label, r.task, r.dataset, r.planner_version or "–", r.status,
             "–" if r.listed is None else str(r.listed), str(r.n_before), str(r.removed),
             str(r.n_before - r.removed), r.list_file or "–"] for r in sorted(report.rows, key=lambda x: (x.label, x.task))]
    return View("T/L removed samples (upstream's filter)", headers, rows,
                "Upstream's leaderboard leaves out the T/L slices its removed-samples list names (summarize_TL_task "
                f"--removed_samples_dir, {LIST_FILENAME}); on here for T/L runs at annotation pin {FILTER_PIN}, off "
                "with --no_tl_filter. Removed samples enter no table of this report.",
                [False, False, False, False, False, True, True, True, True, False])
