"""Bootstrap replicates of one family's tasks, label groups and aggregate rows (``report.groups``' rules applied to
every resample), computed for all the stores of a task at once.

The resampling counts of a task (``bootstrap.Resampler``) are drawn once and shared by every store holding that
task's samples (runs of one task on the same samples: a bucket). Each bucket is one matrix product per label-group
segment over all its stores' columns; the products are added into one accumulator of every run's groups in bucket
order (the same sums, in the same order, as one store at a time), and the per-store statistics and their percentile
intervals are taken per bucket, so a summary holds one bucket's store replicates at a time when asked to
(``store_columns``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import polars as pl

from medvision_bm.report.bootstrap import percentile_interval, row_percentile_interval
from medvision_bm.report.groups import STATS, RunRows, stat_matrix
from medvision_bm.tasks.families import family_spec
from medvision_bm.tasks.metrics import Stat


@dataclass
class Replicates:
    """Bootstrap replicates of one family: per store (task) the J stats, per run the per-group and row stats.

    ``store_cis``, ``group_cis``: per store, and per run and group, the percentile interval (lo, hi) of each stat,
    when ``replicates`` was given a level; ``store`` then holds only the asked ``store_columns`` of each store's
    replicates, and ``groups`` nothing (each run's group replicates are dropped once their intervals are taken)."""

    stats: tuple[Stat, ...]
    store: dict[int, np.ndarray]  # store -> (B, J), or (B, len(store_columns))
    groups: dict[str, tuple[list[str], np.ndarray]]  # run label -> (group keys, (B, G, J))
    rows: dict[str, dict[str, np.ndarray]]  # run label -> aggregate -> (B, J)
    store_cis: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    group_cis: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)  # run -> group


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den where den > 0, else NaN (one pass; laid out as ``num``)."""
    out = np.full_like(num, np.nan, dtype=np.float64)
    return np.divide(num, den, out=out, where=den > 0)


class _Columns:
    """Layout of the summed columns: J filled stat values, then one validity mask per distinct validity pattern of
    the "mean" stats (a stat valid on every sample shares the last column, the ones: its count is N), then ones."""

    def __init__(self, stats: Sequence[Stat], values: np.ndarray) -> None:
        self.J = len(stats)
        valid = ~np.isnan(values)
        masks: list[np.ndarray] = []
        self.mask_of: dict[int, int] = {}  # mean stat -> index of its mask column; -1: the ones column
        for j, s in enumerate(stats):
            if s.kind != "mean":
                continue
            col = valid[:, j]
            if col.all():
                self.mask_of[j] = -1
                continue
            same = next((i for i, m in enumerate(masks) if np.array_equal(m, col)), None)
            if same is None:
                masks.append(col)
                same = len(masks) - 1
            self.mask_of[j] = same
        self.masks = masks
        self.width = self.J + len(masks) + 1
        self.den_index = [self._den_index(j) for j in range(self.J)]

    def build(self, values: np.ndarray) -> np.ndarray:
        parts = [np.nan_to_num(values, nan=0.0)]
        if self.masks:
            parts.append(np.column_stack(self.masks).astype(np.float64))
        parts.append(np.ones((values.shape[0], 1)))
        return np.hstack(parts)

    def _den_index(self, j: int) -> int:
        m = self.mask_of.get(j, -1)
        return self.width - 1 if m < 0 else self.J + m

    def stats_of(self, sums: np.ndarray) -> np.ndarray:
        """(..., width) sums -> (..., J) stats: mean stats over their valid count, rates over N."""
        return _ratio(sums[..., :self.J], sums[..., self.den_index])

    def row_stats_of(self, sums: np.ndarray) -> np.ndarray:
        """(G, width, B) sums -> (G, J, B) stats, as ``stats_of`` (the same quotients), resamples along rows."""
        return _ratio(sums[:, :self.J], sums[:, self.den_index])

    def counts_of(self, sums: np.ndarray, j: int) -> np.ndarray:
        """The denominator of stat j (valid count for a mean stat, N for a rate)."""
        return sums[..., self.den_index[j]]


def _rows_from_groups(family: str, stats: Sequence[Stat], cols: _Columns, sums: np.ndarray, v: np.ndarray,
                      keys: list[str], rr: RunRows) -> dict[str, np.ndarray]:
    """(B, G, width) per-group sums of one run and their (B, G, J) stats ``v`` (``cols.stats_of(sums)``) -> per
    aggregate row (B, J), with the point estimate's rules.

    A row's sums over groups run over its own groups only, in key order: the groups left out added only zeros
    (a weight of 0 times a finite, non-negative statistic), so the sums are the same to the bit."""
    w = sums[..., -1]  # (B, G)
    finite = np.isfinite(v)
    index = {g: i for i, g in enumerate(keys)}
    out: dict[str, np.ndarray] = {}
    vf = np.where(finite, v, 0.0)

    if family_spec(family).axes:  # groups drop in and out per resample: every group in, weighted by whether it is kept

        def weighted(sel: np.ndarray, total_for: Sequence[int] = ()) -> np.ndarray:
            ww = w * sel  # (B, G)
            num = (vf * ww[..., None]).sum(axis=1)
            den = (finite * ww[..., None]).sum(axis=1)
            total = ww.sum(axis=1)
            for j in total_for:
                den[:, j] = total
            return _ratio(num, den)

        mre = next(j for j, s in enumerate(stats) if s.name == "avgMRE")
        keep = (cols.counts_of(sums, mre) > 0) & (w > 0)
        in_rows = np.zeros(len(keys), bool)
        in_rows[[index[g] for g in rr.per_group]] = True
        mae = next(j for j, s in enumerate(stats) if s.name == "avgMAE")
        sr = next(j for j, s in enumerate(stats) if s.name == "SuccessRate")
        out["overall"] = weighted(keep & in_rows[None, :], total_for=(mae, mre, sr))
        return out
    for name, sel_keys in rr.selections.items():
        at = np.array(sorted({index[g] for g in sel_keys if g in index}), dtype=np.int64)
        ww = w[:, at][..., None]  # (B, g, 1)
        out[name] = _ratio((vf[:, at] * ww).sum(axis=1), (finite[:, at] * ww).sum(axis=1))
    return out


class CountBlocks(Protocol):
    """Resampling counts of a task as blocks of resamples (``bootstrap.Resampler``)."""

    @property
    def n_boot(self) -> int: ...

    def blocks(self, n: int, stream: str, order: np.ndarray | None = None) -> Iterable[np.ndarray]: ...


_NO_GROUP = "\x00"  # a row without a group key, while the keys are numbered


@dataclass
class _Stores:
    """The frame's stores (runs of rows of one store id, in frame order) and every run's label groups."""

    ids: np.ndarray  # per store: its id
    starts: np.ndarray  # per store: first row
    ends: np.ndarray
    run: np.ndarray  # per store: index of its run label in ``labels``
    labels: list[str]  # run labels in first-seen order
    names: list[str]  # group names; ``code`` indexes them
    code: np.ndarray  # per row: its group's index in ``names``
    run_keys: list[list[str]]  # per run: its group keys in first-seen order
    slot: np.ndarray  # (runs, groups) -> the accumulator slot of (run, group); -1 where the run lacks the group
    run_base: list[int]  # per run: its first slot

    @classmethod
    def of(cls, frame: pl.DataFrame, store_label: Mapping[int, str]) -> _Stores:
        ids_all = frame["store"].to_numpy()
        n = len(ids_all)
        starts = np.flatnonzero(np.r_[True, ids_all[1:] != ids_all[:-1]]) if n else np.array([], np.int64)
        ends = np.r_[starts[1:], n].astype(np.int64)
        ids = ids_all[starts]
        groups = frame["group"].fill_null(_NO_GROUP)
        names = groups.unique(maintain_order=True).to_list()
        code = (groups.replace_strict(names, list(range(len(names))), return_dtype=pl.Int64).to_numpy()
                if n else np.array([], np.int64))
        names = [None if g == _NO_GROUP else g for g in names]
        label_index: dict[str, int] = {}
        run = np.fromiter((label_index.setdefault(store_label[int(s)], len(label_index)) for s in ids),
                          dtype=np.int64, count=len(ids))
        labels = list(label_index)
        # (run, group) pairs in first-seen row order: each run's group keys, then the accumulator's slots
        n_groups = max(len(names), 1)
        pair = np.repeat(run, ends - starts) * n_groups + code
        uniq, first = np.unique(pair, return_index=True)
        seen = uniq[np.argsort(first, kind="stable")]
        run_keys: list[list[str]] = [[] for _ in labels]
        for p in seen.tolist():
            run_keys[p // n_groups].append(names[p % n_groups])
        slot = np.full((len(labels), n_groups), -1, dtype=np.int64)
        run_base, at = [], 0
        name_at = {g: i for i, g in enumerate(names)}
        for r, keys in enumerate(run_keys):
            run_base.append(at)
            slot[r, [name_at[g] for g in keys]] = np.arange(at, at + len(keys))
            at += len(keys)
        return cls(ids, starts, ends, run, labels, names, code, run_keys, slot, run_base)

    @property
    def n_slots(self) -> int:
        return sum(len(k) for k in self.run_keys)

    def buckets(self, store_task: Mapping[int, str]) -> list[tuple[str, int, np.ndarray]]:
        """(task, n, store indices) per bucket, the stores of one task with the same samples' groups in the same
        order; ordered by (task, n), then first seen."""
        found: dict[tuple[str, int, bytes], list[int]] = {}
        code = self.code
        for i, (s, e) in enumerate(zip(self.starts.tolist(), self.ends.tolist())):
            found.setdefault((store_task[int(self.ids[i])], e - s, code[s:e].tobytes()), []).append(i)
        keys = sorted(found, key=lambda k: (k[0], k[1]))
        return [(k[0], k[1], np.array(found[k], dtype=np.int64)) for k in keys]


def replicates(family: str, frame: pl.DataFrame, store_label: Mapping[int, str], store_task: Mapping[int, str],
               run_rows_of: Mapping[str, RunRows], resampler: CountBlocks, level: float | None = None,
               store_columns: Sequence[int] | None = None) -> Replicates:
    """Bootstrap replicates of every task, group and aggregate row of one family.

    ``frame``: the scored rows, sorted by (store, index), with the ``group`` column. ``resampler.blocks(n, stream,
    order)`` gives the (B, n) resampling counts of a task's n samples, columns in ``order``, as consecutive blocks of
    rows, B = ``resampler.n_boot`` in all (``bootstrap.Resampler``; tests pass one block of ones to get the point
    estimate back): every block is summed on its own, so memory holds one block of counts, not all of them.
    ``level``: also each store's percentile intervals (``store_cis``, taken per bucket) and each run's groups'
    (``group_cis``, in place of their replicates); ``store_columns``: keep only these stat columns of each store's
    replicates (default: all).
    """
    stats = STATS[family]
    raw = stat_matrix(frame, family)
    cols = _Columns(stats, raw)
    values = cols.build(raw)
    st = _Stores.of(frame, store_label)
    width, n_boot = cols.width, resampler.n_boot
    # every run's groups in one accumulator laid out (slot, width, B): a slot (a run's group) holds its sums in one
    # contiguous block, resamples innermost (the layout every later sum over a run's groups is made with, so a
    # run's (B, G, width) sums are a view of it), each bucket's products added in bucket order
    acc = np.zeros((st.n_slots, width, n_boot)) if st.n_slots else None
    store_reps: dict[int, np.ndarray] = {}
    store_cis: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    group_cis: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for task, n, members in st.buckets(store_task):
        assert acc is not None
        totals = _bucket(st, values, acc, resampler, f"{family}/{task}", n, members, width)
        per_store = cols.stats_of(totals.reshape(n_boot, len(members), width))  # (B, stores, J)
        ids = st.ids[members].tolist()
        if level is not None:
            lo, hi = percentile_interval(per_store.reshape(n_boot, -1), level)
            for i, sid in enumerate(ids):
                store_cis[sid] = (lo[i * cols.J:(i + 1) * cols.J], hi[i * cols.J:(i + 1) * cols.J])
        for i, sid in enumerate(ids):
            store_reps[sid] = per_store[:, i, :] if store_columns is None else per_store[:, i, list(store_columns)]
    out_groups: dict[str, tuple[list[str], np.ndarray]] = {}
    out_rows: dict[str, dict[str, np.ndarray]] = {}
    for r, label in enumerate(st.labels):
        if acc is None:
            break
        group_keys, base = st.run_keys[r], st.run_base[r]
        slots = acc[base:base + len(group_keys)]  # (G, width, B)
        # (G, J, B): a row of resamples per group and stat, the layout the intervals are taken in; as (B, G, J)
        # (resamples innermost in memory) the layout every later sum over groups is made with
        by_row = cols.row_stats_of(slots)
        group_stats = by_row.transpose(2, 0, 1)
        if level is None:
            out_groups[label] = (group_keys, group_stats)
        else:
            lo, hi = row_percentile_interval(by_row.reshape(-1, n_boot), level)
            J = cols.J
            group_cis[label] = {g: (lo[i * J:(i + 1) * J], hi[i * J:(i + 1) * J]) for i, g in enumerate(group_keys)}
        if label in run_rows_of:
            out_rows[label] = _rows_from_groups(family, stats, cols, slots.transpose(2, 0, 1), group_stats,
                                                group_keys, run_rows_of[label])
    return Replicates(stats, store_reps, out_groups, out_rows, store_cis, group_cis)


def _bucket(st: _Stores, values: np.ndarray, acc: np.ndarray, resampler: CountBlocks, stream: str, n: int,
            members: np.ndarray, width: int) -> np.ndarray:
    """Sum one bucket's stores under the task's resampling counts: one product per group segment over every
    store's columns, each store's part added to its run's group slot (two stores of one run and task: in store
    order). Returns the (B, stores x width) task totals."""
    n_boot, m = resampler.n_boot, len(members)
    gvec = st.code[st.starts[members[0]]:st.ends[members[0]]]
    uniq, first = np.unique(gvec, return_index=True)
    local = np.empty(len(uniq), dtype=np.int64)
    local[np.argsort(first, kind="stable")] = np.arange(len(uniq))  # groups numbered in first-seen order
    gid = local[np.searchsorted(uniq, gvec)]
    order = np.argsort(gid, kind="stable")
    sorted_gid = gid[order]
    bounds = np.flatnonzero(np.r_[True, sorted_gid[1:] != sorted_gid[:-1]]) if n else np.array([], np.int64)
    seg_ends = np.r_[bounds[1:], n]
    # every store of the bucket side by side, samples in group order: (n, stores x width)
    ys = np.ascontiguousarray(values[st.starts[members][:, None] + order[None, :]].transpose(1, 0, 2)
                              ).reshape(n, m * width)
    runs = st.run[members]
    seg_slots = [st.slot[runs, gvec[order[a]]].tolist() for a in bounds]
    totals = np.zeros((n_boot, m * width))
    r0 = 0
    for ks in resampler.blocks(n, stream, order):  # float64, samples in group order
        r1 = r0 + ks.shape[0]
        for a, b, slots in zip(bounds, seg_ends, seg_slots):
            part = ks[:, a:b] @ ys[a:b]
            totals[r0:r1] += part
            block = part.reshape(r1 - r0, m, width).transpose(1, 2, 0)  # (stores, width, rows)
            # one slot at a time (a plain slice: added in place; a gather and scatter of every store's slot
            # at once costs several times more), in store order
            for i, slot in enumerate(slots):
                acc[slot, :, r0:r1] += block[i]
        r0 = r1
    if r0 != n_boot:
        raise ValueError(f"the resampler gave {r0} resamples of {stream}, not {n_boot}")
    return totals
