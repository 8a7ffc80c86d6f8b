"""Bootstrap replicates of one family's tasks, label groups and aggregate rows (``report.groups``' rules applied to
every resample), computed for all the stores of a task at once.

The resampling counts of a task (``bootstrap.Resampler``) are drawn once and shared by every store holding that
task's samples (runs of one task on the same samples: a bucket). Each bucket is one matrix product per label-group
segment over all its stores' columns; each store's part is added to the sums of its run's group (a slot) in bucket
order (the same sums, in the same order, as one store at a time). A slot's sums are held from its first part to its
last only: then its stats go to its run's aggregate rows (added in key order, ``_RowSums``) and its intervals are
taken with those of other finished slots, so no accumulator of every group of every run is held (a finished group's
stats wait only until the groups before it in its run's key order are done). The open slots' sums (``_SlotSums``) are
shared by the slots whose parts come in together, so a segment's parts go to their slots in one addition. The per-store statistics are taken
per bucket, written with those of other buckets (and the finished groups' with other groups) into one array a row
per statistic, whose percentile intervals are taken a few thousand rows at a time (``_StatRows``); a summary keeps
of each store's replicates only the asked ``store_columns``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import polars as pl

from medvision_bm.report.bootstrap import row_percentile_interval
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

    def row_stats_of(self, sums: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """(G, width, B) sums -> (G, J, B) stats, as ``stats_of`` (the same quotients), resamples along
        rows; written into ``out`` when given."""
        num, den = sums[:, :self.J], sums[:, self.den_index]
        if out is None:
            out = np.empty(num.shape)
        out.fill(np.nan)
        return np.divide(num, den, out=out, where=den > 0)


_NONE = np.empty(0)  # no weights kept (the rows' total counts only transect/length rows)


class _RowSums:
    """One run's aggregate rows (B, J), with the point estimate's rules, summed over its groups as each group's
    sums complete: per row, its groups' weighted stats are added in key order (a group that completes early waits
    for those before it), the same sums in the same order as over all the run's groups at once.

    A row's sums over groups run over its own groups only: the groups left out would add only zeros (a weight of 0
    times a finite, non-negative statistic), so the sums are the same to the bit. Transect/length rows (``axes``):
    groups drop in and out per resample, so every group enters, weighted by whether it is kept."""

    def __init__(self, family: str, stats: Sequence[Stat], keys: list[str], rr: RunRows, n_boot: int) -> None:
        index = {g: i for i, g in enumerate(keys)}
        J = len(stats)
        self.axes = family_spec(family).axes
        if self.axes:
            names = [s.name for s in stats]
            self.mre = names.index("avgMRE")
            self.total_for = (names.index("avgMAE"), self.mre, names.index("SuccessRate"))
            self.in_rows = np.zeros(len(keys), bool)
            self.in_rows[[index[g] for g in rr.per_group]] = True
            self.order = {"overall": list(range(len(keys)))}
            self.total = np.zeros(n_boot)
        else:
            self.order = {name: sorted({index[g] for g in sel_keys if g in index})
                          for name, sel_keys in rr.selections.items()}
        self.num = {name: np.zeros((J, n_boot)) for name in self.order}
        self.den = {name: np.zeros((J, n_boot)) for name in self.order}
        self.next = dict.fromkeys(self.order, 0)
        self.uses = np.zeros(len(keys), np.int64)  # rows each group enters
        for order in self.order.values():
            self.uses[order] += 1
        self.ready: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # group -> (stats x w, finite x w, w)

    def add(self, i: int, v: np.ndarray, sums: np.ndarray, den_index: Sequence[int]) -> None:
        """Group i's (J, B) stats ``v`` and (width, B) ``sums`` (``den_index``: each stat's count column)."""
        if not self.uses[i]:
            return
        w = sums[-1]
        finite = np.isfinite(v)
        if self.axes:
            keep = (sums[den_index[self.mre]] > 0) & (w > 0)
            w = w * (keep & self.in_rows[i])
        # its weighted stats and counts, the same products for every row it enters
        self.ready[i] = (np.where(finite, v, 0.0) * w, finite * w, w if self.axes else _NONE)
        for name, order in self.order.items():
            while self.next[name] < len(order) and order[self.next[name]] in self.ready:
                g = order[self.next[name]]
                weighted, counted, ww = self.ready[g]
                self.num[name] += weighted
                self.den[name] += counted
                if self.axes:
                    self.total += ww
                self.next[name] += 1
                self.uses[g] -= 1
                if not self.uses[g]:
                    del self.ready[g]

    def rows(self) -> dict[str, np.ndarray]:
        """Per aggregate row its (B, J) replicates (once every group was added)."""
        assert all(self.next[name] == len(order) for name, order in self.order.items())
        if self.axes:
            for j in self.total_for:
                self.den["overall"][j] = self.total
        return {name: _ratio(self.num[name].T, self.den[name].T) for name in self.order}


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
        at = 0
        name_at = {g: i for i, g in enumerate(names)}
        for r, keys in enumerate(run_keys):
            slot[r, [name_at[g] for g in keys]] = np.arange(at, at + len(keys))
            at += len(keys)
        return cls(ids, starts, ends, run, labels, names, code, run_keys, slot)

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
    width, n_boot, J = cols.width, resampler.n_boot, cols.J
    plans = [_Plan.of(st, task, n, members) for task, n, members in st.buckets(store_task)]
    # per slot (a run's group): its (width, B) sums, made at its first part and let go once its last part is in
    # (each bucket's products added in bucket order); its stats then go to its run's rows and intervals
    left = np.zeros(st.n_slots, np.int64)  # parts still to come
    for plan in plans:
        for slots in plan.slots:
            np.add.at(left, slots, 1)
    slot_run = np.repeat(np.arange(len(st.labels)), [len(k) for k in st.run_keys])
    slot_group = np.concatenate([np.arange(len(k)) for k in st.run_keys]) if st.run_keys else slot_run
    row_sums = {r: _RowSums(family, stats, st.run_keys[r], run_rows_of[label], n_boot)
                for r, label in enumerate(st.labels) if label in run_rows_of}
    group_stats = [np.empty((len(k), J, n_boot)) for k in st.run_keys] if level is None else []
    group_lo = [[np.empty(0)] * len(k) for k in st.run_keys]
    group_hi = [[np.empty(0)] * len(k) for k in st.run_keys]

    def group_intervals(keys: list[tuple[int, int]], lo: np.ndarray, hi: np.ndarray) -> None:
        for k, (r, i) in enumerate(keys):
            group_lo[r][i], group_hi[r][i] = lo[k * J:(k + 1) * J], hi[k * J:(k + 1) * J]

    store_cis: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def store_intervals(keys: list[int], lo: np.ndarray, hi: np.ndarray) -> None:
        for k, sid in enumerate(keys):
            store_cis[sid] = (lo[k * J:(k + 1) * J], hi[k * J:(k + 1) * J])

    # the stats of finished groups and of stores, a row per statistic, written where their intervals are taken
    group_rows = _StatRows(n_boot, J, level, group_intervals)
    store_rows = _StatRows(n_boot, J, level, store_intervals)
    pool = _SlotSums(width, n_boot)
    store_reps: dict[int, np.ndarray] = {}
    for plan in plans:
        totals = _bucket(st, values, pool, resampler, f"{family}/{plan.task}", plan, width)
        m = len(plan.members)
        ids = st.ids[plan.members].tolist()
        # per store its (J, B) stats: the quotients of ``stats_of`` over the totals, a row per statistic
        per_store = cols.row_stats_of(np.ascontiguousarray(totals.T).reshape(m, width, n_boot), store_rows.room(ids))
        for i, sid in enumerate(ids):
            store_reps[sid] = per_store[i].T if store_columns is None else per_store[i, list(store_columns)].T
        done = []  # the slots whose last part this bucket held, in slot order within each segment
        for slots in plan.slots:
            for slot in slots:
                left[slot] -= 1
                if not left[slot]:
                    done.append(slot)
        if not done:
            continue
        finished = [(int(slot_run[slot]), int(slot_group[slot])) for slot in done]
        stats_of = group_rows.room(finished)
        at = 0
        for piece in pool.close(done):  # (slots, width, B) views, valid until the next bucket's segments
            piece = np.ascontiguousarray(piece)  # one copy, then the quotients run along rows (faster, measured)
            v_of = cols.row_stats_of(piece, stats_of[at:at + len(piece)])
            for sums, v in zip(piece, v_of):
                r, i = finished[at]
                if level is None:
                    group_stats[r][i] = v
                if r in row_sums:
                    row_sums[r].add(i, v, sums, cols.den_index)
                at += 1
    store_rows.flush()
    group_rows.flush()
    out_groups: dict[str, tuple[list[str], np.ndarray]] = {}
    group_cis: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for r, label in enumerate(st.labels):
        keys = st.run_keys[r]
        if level is None:
            out_groups[label] = (keys, group_stats[r].transpose(2, 0, 1))  # (B, G, J)
        else:
            group_cis[label] = {g: (group_lo[r][i], group_hi[r][i]) for i, g in enumerate(keys)}
    out_rows = {st.labels[r]: sums.rows() for r, sums in row_sums.items()}
    return Replicates(stats, store_reps, out_groups, out_rows, store_cis, group_cis)


#: Rows of stats (groups or stores x stats) whose intervals are taken in one call: each ``_StatRows`` array is
#: this many rows of resamples (8 MB at 1,000), written row by row before its intervals are taken.
_INTERVAL_ROWS = 1024


@dataclass
class _Plan:
    """One bucket's layout: its samples in group order and, per group segment, the slot of each store's part."""

    task: str
    n: int
    members: np.ndarray  # store indices
    order: np.ndarray  # the samples in group order (groups numbered in first-seen order)
    bounds: np.ndarray  # per segment: first sample (in ``order``)
    ends: np.ndarray
    slots: list[list[int]]  # per segment: per store, its run's slot of the segment's group

    @classmethod
    def of(cls, st: _Stores, task: str, n: int, members: np.ndarray) -> _Plan:
        gvec = st.code[st.starts[members[0]]:st.ends[members[0]]]
        uniq, first = np.unique(gvec, return_index=True)
        local = np.empty(len(uniq), dtype=np.int64)
        local[np.argsort(first, kind="stable")] = np.arange(len(uniq))  # groups numbered in first-seen order
        gid = local[np.searchsorted(uniq, gvec)]
        order = np.argsort(gid, kind="stable")
        sorted_gid = gid[order]
        bounds = np.flatnonzero(np.r_[True, sorted_gid[1:] != sorted_gid[:-1]]) if n else np.array([], np.int64)
        runs = st.run[members]
        return cls(task, n, members, order, bounds, np.r_[bounds[1:], n],
                   [st.slot[runs, gvec[order[a]]].tolist() for a in bounds])


class _SlotSums:
    """The sums of the slots (a run's group) whose parts are still coming in, from a slot's first part to its last.

    The slots of a segment whose parts all come in together (the same slots, in the same order, in every bucket
    they are in: one group's slot in each run) share one (B, slots x width) array laid out as the product's part,
    so each part is added to it as a whole. A slot that comes in another company is moved to a row of its own,
    (B, width) of one growing array (a row taken at the slot's first part, given back at its last). Either way each
    part is added to its slot's sums once per element, in bucket order; a slot's first part is set as 0.0 + part,
    the sum a zeroed slot would hold."""

    def __init__(self, width: int, n_boot: int) -> None:
        self.width, self.n_boot = width, n_boot
        self.sums = np.empty((16, n_boot, width))
        self.row: dict[int, int] = {}  # slot -> its row of ``sums``
        self.free = list(range(15, -1, -1))
        self.shared: dict[int, tuple[int, int]] = {}  # slot -> (its shared array, its place there)
        self.arrays: dict[int, tuple[np.ndarray, tuple[int, ...]]] = {}  # id -> (array, its slots)
        self.live: dict[int, int] = {}  # id -> slots still open in it
        self.next_id = 0

    def segment(self, slots: Sequence[int]) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, bool]:
        """How a bucket's segment adds to its slots: (the shared array, or None: the slots' rows), the rows, per
        slot whether its part is its first, and whether the shared array is new (set, not added to)."""
        key = tuple(slots)
        first = np.array([s not in self.row and s not in self.shared for s in key], dtype=bool)
        if first.all() and len(set(key)) == len(key):
            at = self.next_id
            self.next_id += 1
            self.arrays[at] = (np.empty((self.n_boot, len(key) * self.width)), key)
            self.live[at] = len(key)
            self.shared.update((s, (at, i)) for i, s in enumerate(key))
            return self.arrays[at][0], np.empty(0, np.int64), first, True
        home = self.shared.get(key[0])
        if home is not None and self.arrays[home[0]][1] == key:
            return self.arrays[home[0]][0], np.empty(0, np.int64), first, False
        for s in key:  # another company: every slot gets a row of its own
            if s in self.shared:
                self._to_rows(self.shared[s][0])
        first = np.zeros(len(key), dtype=bool)
        for k, slot in enumerate(key):
            if slot in self.row:
                continue
            if not self.free:
                n = len(self.sums)
                self.sums = np.concatenate([self.sums, np.empty_like(self.sums)])
                self.free = list(range(2 * n - 1, n - 1, -1))
            self.row[slot] = self.free.pop()
            first[k] = True
        return None, np.fromiter((self.row[s] for s in key), dtype=np.int64, count=len(key)), first, False

    def _to_rows(self, at: int) -> None:
        """Move the open slots of shared array ``at`` to rows of their own (the same sums)."""
        array, key = self.arrays.pop(at)
        del self.live[at]
        w = self.width
        for i, slot in enumerate(key):
            if self.shared.get(slot) != (at, i):
                continue
            del self.shared[slot]
            if not self.free:
                n = len(self.sums)
                self.sums = np.concatenate([self.sums, np.empty_like(self.sums)])
                self.free = list(range(2 * n - 1, n - 1, -1))
            self.row[slot] = self.free.pop()
            self.sums[self.row[slot]] = array[:, i * w:(i + 1) * w]

    def close(self, slots: Sequence[int]) -> list[np.ndarray]:
        """The slots' sums as (slots, width, B) views, in order: a whole shared array at once where its slots are
        done together, in its order, else one slot a piece; their places are given back (the views hold until
        the next ``segment``)."""
        out: list[np.ndarray] = []
        w, k = self.width, 0
        while k < len(slots):
            slot = slots[k]
            if slot in self.shared:
                at, i = self.shared[slot]
                array, key = self.arrays[at]
                if i == 0 and tuple(slots[k:k + len(key)]) == key and self.live[at] == len(key):
                    out.append(array.reshape(self.n_boot, len(key), w).transpose(1, 2, 0))
                    for s in key:
                        del self.shared[s]
                    del self.arrays[at], self.live[at]
                    k += len(key)
                    continue
                del self.shared[slot]
                out.append(array[:, i * w:(i + 1) * w].T[None])
                self.live[at] -= 1
                if not self.live[at]:
                    del self.arrays[at], self.live[at]
            else:
                row = self.row.pop(slot)
                out.append(self.sums[row].T[None])
                self.free.append(row)
            k += 1
        return out


class _StatRows:
    """Stats laid out a row per statistic in one array, their percentile intervals taken (``take``: per key its J
    rows' (lo, hi)) once it holds ``_INTERVAL_ROWS`` rows; a new array then, so the rows written stay as they are.
    Without a level no interval is taken."""

    def __init__(self, n_boot: int, J: int, level: float | None,
                 take: Callable[[list[Any], np.ndarray, np.ndarray], None]) -> None:
        self.n_boot, self.J, self.level, self.take = n_boot, J, level, take
        self.rows = np.empty((0, n_boot))
        self.at = 0
        self.keys: list[Any] = []

    def room(self, keys: Sequence[Any]) -> np.ndarray:
        """(len(keys), J, B) rows to write the keys' stats in."""
        n = len(keys) * self.J
        if self.at + n > len(self.rows):
            self.flush()
            self.rows = np.empty((max(n, _INTERVAL_ROWS), self.n_boot))
        out = self.rows[self.at:self.at + n].reshape(len(keys), self.J, self.n_boot)
        self.at += n
        self.keys.extend(keys)
        return out

    def flush(self) -> None:
        if self.at and self.level is not None:
            lo, hi = row_percentile_interval(self.rows[:self.at], self.level)
            self.take(self.keys, lo, hi)
        self.rows, self.at, self.keys = np.empty((0, self.n_boot)), 0, []


def _bucket(st: _Stores, values: np.ndarray, pool: _SlotSums, resampler: CountBlocks, stream: str, plan: _Plan,
            width: int) -> np.ndarray:
    """Sum one bucket's stores under the task's resampling counts: one product per group segment over every
    store's columns, each store's part added to its run's group slot (``pool``: the open slots' sums; two stores
    of one run and task: in store order). Returns the (B, stores x width) task totals."""
    n_boot, m, n, order = resampler.n_boot, len(plan.members), plan.n, plan.order
    # every store of the bucket side by side, samples in group order: (n, stores x width)
    ys = np.ascontiguousarray(values[st.starts[plan.members][:, None] + order[None, :]].transpose(1, 0, 2)
                              ).reshape(n, m * width)
    totals = np.zeros((n_boot, m * width))
    segments = [pool.segment(slots) for slots in plan.slots]
    r0 = 0
    for ks in resampler.blocks(n, stream, order):  # float64, samples in group order
        r1 = r0 + ks.shape[0]
        for a, b, (shared, rows, first, new) in zip(plan.bounds, plan.ends, segments):
            part = ks[:, a:b] @ ys[a:b]
            totals[r0:r1] += part
            if shared is not None:
                if new:
                    np.add(part, 0.0, out=shared[r0:r1])
                else:
                    shared[r0:r1] += part
                continue
            block = part.reshape(r1 - r0, m, width).transpose(1, 0, 2)  # (stores, rows, width)
            for i, row in enumerate(rows.tolist()):  # in store order (a slot may be there twice)
                if first[i]:
                    pool.sums[row, r0:r1] = np.add(block[i], 0.0)
                else:
                    pool.sums[row, r0:r1] += block[i]
        r0 = r1
    if r0 != n_boot:
        raise ValueError(f"the resampler gave {r0} resamples of {stream}, not {n_boot}")
    return totals
