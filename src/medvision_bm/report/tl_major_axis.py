"""T/L metrics by the ground-truth major axis, in upstream's bins and print format (YongchengYAO/MedVision
``script/analyze/tl-major-axis/analyze_TL_by_major_axis.py`` @45fa8e5): every sample of a run binned by its major
axis in mm (the target the answer is scored against: a -CoT-scaledPS sample's scaled one) into ``(lo, hi]`` bins at
the edges 2, 5, 10, 20, 50, 100 mm (``<=2 mm`` first, ``>100 mm`` last), each bin's samples pooled into upstream's
T/L group dict (``summarize_TL_task.process_label_group_TL``: the report's ``groups.upstream_dicts``), then the
same for every sample above each edge (the metric a size floor of t would leave) and for all samples.

The major axis is read from each store's docs.jsonl, one row at a time (a float per sample is kept).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import orjson
import polars as pl

from medvision_bm.io import write_text_atomic
from medvision_bm.report.groups import era, upstream_dicts
from medvision_bm.report.upstream_summaries import dump_json
from medvision_bm.report.views import View, fmt
from medvision_bm.store.layout import DOCS, StoreLayout
from medvision_bm.tasks.families import family_spec

if TYPE_CHECKING:
    from medvision_bm.report.load import StoreInfo

#: Upstream's default ``--bin_edges`` (mm).
BIN_EDGES: tuple[float, ...] = (2, 5, 10, 20, 50, 100)
#: The columns of upstream's tables: (header, key of the group dict).
METRIC_COLUMNS = (("MAE", "avgMAE"), ("MRE", "avgMRE"), ("SR", "SuccessRate"), ("nMAE", "avgNMAE"),
                  ("MRE<0.1", "MRE<0.1"), ("MRE<0.2", "MRE<0.2"), ("MRE<0.3", "MRE<0.3"))
TEXT_FILE = "summary_TL_by_major_axis.txt"
JSON_FILE = "summary_TL_by_major_axis.json"
#: Upstream's T/L group dict over some samples (``groups.upstream_dicts``).
GroupDict = dict[str, float]


class BinEntry(TypedDict):
    """One row of a run's tables: the bin's name and its group dict (None: no sample in it)."""

    bin: str
    metrics: GroupDict | None


class ByMajor(TypedDict):
    """One run's results, as upstream's JSON nests them."""

    per_bin: list[BinEntry]
    above_threshold: list[BinEntry]
    all: GroupDict | None


def _edge(x: float) -> str:
    return f"{x:g}"


def bins(edges: Sequence[float] = BIN_EDGES) -> list[tuple[float | None, float | None, str]]:
    """(lo, hi, name) of upstream's per-bin rows: ``<=e0 mm``, ``e0-e1 mm``, ..., ``>en mm``."""
    e = sorted(edges)
    return [(None, e[0], f"<={_edge(e[0])} mm"),
            *[(lo, hi, f"{_edge(lo)}-{_edge(hi)} mm") for lo, hi in itertools.pairwise(e)],
            (e[-1], None, f">{_edge(e[-1])} mm")]


def major_of(line: bytes) -> tuple[str, float] | None:
    """(key, major axis mm) of a docs.jsonl row: the scaled target when the view has one, else the stored one."""
    row = orjson.loads(line)
    try:
        scaled = (row.get("view") or {}).get("scaled_target")
        if scaled:
            return row["key"], float(scaled[0])
        value = row["doc"]["biometric_profile"]["metric_value_major_axis"][0]
        return row["key"], float("nan") if value is None else float(value)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _first_majors(content: bytes) -> list[tuple[str, float]]:
    """(key, major axis) of each key's first row that gives one, in a docs.jsonl's order (``major_of``)."""
    out: dict[str, float] = {}
    for line in content.splitlines(keepends=True):
        got = major_of(line) if line.strip() else None
        if got is not None and got[0] not in out:
            out[got[0]] = got[1]
    return list(out.items())


def majors(frame: pl.DataFrame, stores: Sequence[StoreInfo],
           docs: Callable[[str], bytes] | None = None) -> pl.DataFrame:
    """(store, key, major) of every sample of ``frame``: each distinct docs.jsonl (the runs of a task hold the same
    docs, byte for byte) read once; a store's rows in its docs' order, the stores in ``stores``' order; ``docs``:
    a docs file's content by its path, where another stage has read it (``upstream_values.DocsCache.content``)."""
    ids: list[int] = []
    keys: list[str] = []
    values: list[float] = []
    present = set(frame["store"].unique().to_list())
    read: dict[bytes, tuple[list[str], list[float]]] = {}
    for s in stores:
        if s.id not in present:
            continue
        if docs is not None:
            content = docs(os.path.join(s.ref.folder, DOCS))  # (``StoreLayout.docs``)
        else:
            with open(StoreLayout(s.ref.folder).docs, "rb", buffering=0) as fh:  # a docs file is small: read whole
                content = fh.read()
        first = read.get(content)  # each distinct content held once (hashing it is cheaper than a digest)
        if first is None:
            pairs = _first_majors(content)
            first = read[content] = ([k for k, _ in pairs], [v for _, v in pairs])
        ids += [s.id] * len(first[0])
        keys += first[0]
        values += first[1]
    every = pl.DataFrame({"store": ids, "key": keys, "major": values},
                         schema={"store": pl.Int64, "key": pl.Utf8, "major": pl.Float64})
    wanted = frame.select(pl.col("store").cast(pl.Int64), pl.col("key").cast(pl.Utf8)).unique()
    return every.join(wanted, on=["store", "key"], how="semi", maintain_order="left")  # the keys of its samples


def by_major_axis(frame: pl.DataFrame, stores: Sequence[StoreInfo], labels: dict[int, str],
                  edges: Sequence[float] = BIN_EDGES, docs: Callable[[str], bytes] | None = None
                  ) -> dict[str, ByMajor]:
    """Per run (label): upstream's ``{"per_bin": [...], "above_threshold": [...], "all": ...}`` (each entry
    ``{"bin": name, "metrics": group dict or None}``; ``docs``: as ``majors``)."""
    if frame.height == 0:
        return {}
    scored = frame.filter(pl.col("scored")).join(majors(frame, stores, docs), on=["store", "key"], how="inner")
    scored = scored.with_columns(pl.col("store").replace_strict(labels, default=None, return_dtype=pl.Utf8)
                                 .alias("label"))
    rules = {label: era(r) for label, r in scored.group_by("label", maintain_order=True).agg(
        pl.col("rules").drop_nulls().mode().sort().first()).iter_rows()}

    def dicts(subset: pl.DataFrame) -> dict[str, GroupDict]:
        return {k[0]: d for k, d in upstream_dicts(subset, "TL", ("label",), lambda key: rules[key[0]]).items()}

    out: dict[str, ByMajor] = {label: {"per_bin": [], "above_threshold": [], "all": None} for label in rules}
    major = pl.col("major")
    for lo, hi, name in bins(edges):
        cond = pl.lit(True)
        if lo is not None:
            cond = cond & (major > lo)
        if hi is not None:
            cond = cond & (major <= hi)
        got = dicts(scored.filter(cond))
        for label in out:
            out[label]["per_bin"].append({"bin": name, "metrics": got.get(label)})
    for t in sorted(edges):
        got = dicts(scored.filter(major > t))
        for label in out:
            out[label]["above_threshold"].append({"bin": f">{_edge(t)} mm", "metrics": got.get(label)})
    for label, d in dicts(scored).items():
        out[label]["all"] = d
    return out


def _table(title: str, rows: Sequence[BinEntry], total: float) -> list[str]:
    header = f"{'Major axis':<14} | {'Samples':>8} | {'Share':>6} | " + " | ".join(f"{c:>8}" for c, _ in METRIC_COLUMNS)
    lines = [title, header, "-" * len(header)]
    for row in rows:
        m = row["metrics"]  # the paper rules' dict has no avgNMAE: shown as nan
        n = m["num_samples"] if m else 0
        share = n / total if total else 0.0
        vals = " | ".join(f"{m.get(k, math.nan):>8.4f}" for _, k in METRIC_COLUMNS) if m else " | ".join(
            f"{'-':>8}" for _ in METRIC_COLUMNS)
        lines.append(f"{row['bin']:<14} | {n:>8} | {share:>6.3f} | {vals}")
    return lines


def text(results: dict[str, ByMajor], datasets: dict[str, list[str]], n_files: dict[str, int]) -> str:
    """Upstream's printout, one block per run (``Model``, ``Path`` (here: the run), ``Files``, the two tables)."""
    lines: list[str] = []
    for label, summary in results.items():
        total = summary["all"]["num_samples"] if summary["all"] else 0
        lines += [f"Model: {label}", f"Path : {label}",
                  f"Files: {n_files.get(label, 0)} (" + ", ".join(sorted(datasets.get(label, []))) + ")", ""]
        lines += _table("Per bin (GT major axis in (lo, hi] mm)",
                        [*summary["per_bin"], {"bin": "All", "metrics": summary["all"]}], total)
        lines.append("")
        lines += _table("Above threshold (GT major axis > t mm)", summary["above_threshold"], total)
        lines.append("\n" + "=" * 120 + "\n")
    return "\n".join(lines) + "\n"


def write(out: Path, results: dict[str, ByMajor], datasets: dict[str, list[str]],
          n_files: dict[str, int]) -> list[str]:
    """The text and JSON under ``out/upstream/TL/``; their paths relative to ``out``."""
    folder = out / "upstream" / "TL"
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / TEXT_FILE, text(results, datasets, n_files))
    write_text_atomic(folder / JSON_FILE, dump_json(results))  # json.dumps(results, indent=2)'s text
    return [f"upstream/TL/{TEXT_FILE}", f"upstream/TL/{JSON_FILE}"]


def view(results: dict[str, ByMajor]) -> View:
    """The report's table: per run and bin (then above each edge, then all) the samples, share and metrics."""
    rows = []
    for label, summary in results.items():
        total = summary["all"]["num_samples"] if summary["all"] else 0
        everything: list[BinEntry] = [{"bin": "All", "metrics": summary["all"]}]
        for entries in (summary["per_bin"], summary["above_threshold"], everything):
            for e in entries:
                m = e["metrics"] or {}
                n = m.get("num_samples", 0)
                rows.append([label, e["bin"], str(n), fmt(n / total if total else None),
                             *[fmt(m.get(k)) for _, k in METRIC_COLUMNS]])
    return View("T/L by ground-truth major axis", ["Run", "Major axis", "N", "Share", *[c for c, _ in METRIC_COLUMNS]],
                rows, "Every sample binned by its ground-truth major axis (mm) into (lo, hi] bins, then every sample "
                "above each edge (the numbers a size floor of that edge would leave), then all; each row is "
                "upstream's T/L group dict over those samples (script/analyze/tl-major-axis/"
                "analyze_TL_by_major_axis.py). MAE in mm; the others unitless.",
                [False, False, *([True] * (2 + len(METRIC_COLUMNS)))])


def run_stage(out: Path, samples: dict[str, pl.DataFrame], stores: Sequence[StoreInfo],
              docs: Callable[[str], bytes] | None = None) -> tuple[dict[str, ByMajor], list[str], View | None]:
    """The T/L runs of a summary by major axis: (results per run, files written, the report's table or None;
    ``docs``: as ``majors``)."""
    frame = samples.get("TL")
    tl = [s for s in stores if family_spec(s.ref.family).axes]
    if frame is None or frame.height == 0 or not tl:
        return {}, [], None
    labels = {s.id: s.ref.label for s in tl}
    results = by_major_axis(frame, tl, labels, docs=docs)
    if not results:
        return {}, [], None
    datasets: dict[str, list[str]] = {}
    for store, ds in frame.select("store", "dataset").unique().iter_rows():
        if store in labels and ds and ds not in datasets.setdefault(labels[store], []):
            datasets[labels[store]].append(ds)
    n_files: dict[str, int] = {}
    for s in tl:
        n_files[s.ref.label] = n_files.get(s.ref.label, 0) + 1
    return results, write(out, results, datasets, n_files), view(results)
