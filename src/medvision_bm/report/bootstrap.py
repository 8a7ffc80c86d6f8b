"""Seeded percentile bootstrap for means over successful samples, as matrix products over resampling counts.

Samples are resampled with replacement over *all* samples of a task (failures included), and a metric's mean is
taken over the successful samples of each resample, so the interval also carries the uncertainty of the success
rate. The counts depend only on (seed, task, n): every run of one task shares them, which makes two runs on the
same samples a paired comparison, while different tasks get independent draws (a stratified bootstrap for means
over tasks).

Memory: the counts of a task are a resamples x samples matrix (1,000 x 916k for upstream's largest detection task:
about 18 GB while they are drawn). They are therefore drawn in blocks of consecutive resamples
(:func:`count_blocks`), at most :data:`MAX_COUNT_CELLS` counts at a time, from one generator consumed in the same
order, so every block holds exactly the rows the whole matrix would: the same resamples for the same seed, whatever
the task's size. A task of up to ``MAX_COUNT_CELLS / n_boot`` samples (16,777 at the default 1,000 resamples) is a
single block, computed exactly as before; a larger one is summed block by block, so its replicate means can differ
from one dense product only in the last bits (the BLAS sums a product of fewer rows in another order), and its
intervals, order statistics of those replicates, likewise.

The products run on one BLAS thread (:func:`one_thread_sums`): a multi-threaded BLAS splits a product's sums by the
machine's core count, which moved the last bits of a replicate (and so of an interval) with the node's cores, and
its threads spin on the many small products of a summary. (A BLAS built for another CPU may still sum in another
order: one thread makes the bits independent of the core count, not of the BLAS kernel.)
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from medvision_bm.errors import UserError

K = TypeVar("K", bound=Hashable)

DEFAULT_N_BOOT = 1000
DEFAULT_SEED = 0
#: Most resamples accepted (--n_boot): intervals stop moving long before, and memory grows with it.
MAX_N_BOOT = 20_000
DEFAULT_LEVEL = 0.95


@contextmanager
def one_thread_sums() -> Iterator[None]:
    """The BLAS held to one thread while the block runs (restored after): the bootstrap's matrix products then sum
    in the same order whatever the machine's core count, so a summary's intervals do not move with it."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


@dataclass(frozen=True)
class BootstrapSpec:
    """How intervals are drawn: the number of resamples, the seed and the coverage."""

    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED
    level: float = DEFAULT_LEVEL

    def check(self) -> None:
        """Refuse settings that give no usable interval (the message names the flag: --n_boot, --seed, --ci)."""
        if self.n_boot < 100:
            raise UserError(f"--n_boot {self.n_boot} is too small for a 95% interval; use at least 100 (default 1000)")
        if self.n_boot > MAX_N_BOOT:  # replicate arrays are n_boot x statistics: memory grows with it
            raise UserError(f"--n_boot {self.n_boot} is too large; use at most {MAX_N_BOOT} (default 1000)")
        if self.seed < 0:
            raise UserError(f"--seed {self.seed} must be 0 or more")
        if not 0.5 <= self.level < 1:
            raise UserError(f"--ci {self.level} must be between 0.5 and 1 (e.g. 0.95)")


#: Most resampling counts (resamples x samples) drawn and held at once; see the module docstring.
MAX_COUNT_CELLS = 1 << 24


def block_rows(n: int, n_boot: int, max_cells: int | None = None) -> int:
    """Resamples per block for a task of ``n`` samples (all of them when they fit in ``max_cells`` counts)."""
    cells = MAX_COUNT_CELLS if max_cells is None else max_cells
    return max(1, min(n_boot, cells // max(n, 1)))


def count_blocks(n: int, spec: BootstrapSpec, stream: str, max_cells: int | None = None,
                 order: np.ndarray | None = None, dtype: type = np.float32) -> Iterator[np.ndarray]:
    """The (n_boot, n) resampling counts (how often each sample is drawn in each resample) as consecutive blocks of
    rows, at most ``max_cells`` (default :data:`MAX_COUNT_CELLS`) counts each; stacked, they are
    :func:`resample_counts` bit for bit (one generator, consumed row after row in either case).

    ``order`` (a permutation of the samples) puts the columns in that order: ``counts[:, order]``, counted from
    the permuted draws instead of gathered from the matrix (the same integers)."""
    rng = np.random.default_rng([spec.seed, zlib.crc32(stream.encode("utf-8")), n])
    if n == 0:
        yield np.zeros((spec.n_boot, 0))
        return
    inverse = None
    if order is not None:
        inverse = np.empty(n, dtype=np.int64)
        inverse[np.asarray(order, dtype=np.int64)] = np.arange(n, dtype=np.int64)
    rows = block_rows(n, spec.n_boot, max_cells)
    for start in range(0, spec.n_boot, rows):
        b = min(rows, spec.n_boot - start)
        draws = rng.integers(0, n, size=(b, n), dtype=np.int64)
        if inverse is not None:
            draws = inverse[draws]
        draws += np.arange(b, dtype=np.int64)[:, None] * n
        counts = np.bincount(draws.ravel(), minlength=b * n).reshape(b, n)
        del draws
        yield counts.astype(dtype)


def resample_counts(n: int, spec: BootstrapSpec, stream: str) -> np.ndarray:
    """A (n_boot, n) float matrix: how often each sample is drawn in each resample (one block: all of it in memory)."""
    return next(count_blocks(n, spec, stream, max_cells=max(n, 1) * spec.n_boot))


@dataclass(frozen=True)
class Resampler:
    """The resampling counts of a task as blocks of resamples (``count_blocks``), for ``groups.replicates``."""

    spec: BootstrapSpec
    max_cells: int | None = None  # default: MAX_COUNT_CELLS when drawn

    @property
    def n_boot(self) -> int:
        return self.spec.n_boot

    def blocks(self, n: int, stream: str, order: np.ndarray | None = None) -> Iterator[np.ndarray]:
        """float64 blocks, columns in ``order`` when given (see :func:`count_blocks`)."""
        return count_blocks(n, self.spec, stream, self.max_cells, order=order, dtype=np.float64)


def replicate_means(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Bootstrap replicates of the mean of each column of ``values`` (n, k) over its non-NaN entries.

    Returns (n_boot, k); NaN where a resample holds no value for that column.
    """
    valid = ~np.isnan(values)
    filled = np.where(valid, values, 0.0).astype(np.float32)
    # columns with the same validity share one denominator (usually: every metric of a run = its success mask)
    index: dict[bytes, int] = {}
    inverse = np.array([index.setdefault(np.packbits(valid[:, j]).tobytes(), len(index))
                        for j in range(valid.shape[1])], dtype=np.int64)
    first = np.array([int(np.flatnonzero(inverse == m)[0]) for m in range(len(index))], dtype=np.int64)
    masks = valid[:, first].astype(np.float32)
    both = (counts @ np.hstack([filled, masks])).astype(np.float64)
    k = values.shape[1]
    num, den = both[:, :k], both[:, k:][:, inverse]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def blocked_replicate_means(n: int, spec: BootstrapSpec, stream: str, values: np.ndarray,
                            max_cells: int | None = None) -> np.ndarray:
    """``replicate_means(resample_counts(n, spec, stream), values)`` with the counts drawn block by block."""
    return np.vstack([replicate_means(counts, values) for counts in count_blocks(n, spec, stream, max_cells)])


def percentile_interval(reps: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Per column of (n_boot, k) replicates: the (1-level)/2 and (1+level)/2 percentiles over non-NaN values
    (linear interpolation, as numpy's default); NaN for a column without values.

    Columns without NaN (the usual case) need only the two order statistics around each percentile: a partial
    sort (``np.partition``) gives exactly the values a full sort would, at a fraction of its cost; only columns
    holding NaN are sorted whole. Each column's result depends on that column alone."""
    return row_percentile_interval(reps.T, level)


#: Rows of replicates taken at once by ``row_percentile_interval``: bounds its temporary copies (256 rows of 1,000
#: resamples, 2 MB, about the second-level cache: measured faster than 128 or 512 rows).
_INTERVAL_CHUNK_ROWS = 256


def row_percentile_interval(rows: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """``percentile_interval`` of (k, n_boot) replicates laid out a row per statistic (resamples along the last
    axis): the same numbers, without transposing a row layout first. Rows are taken a chunk at a time.

    Each percentile needs two order statistics of a row's valid values, a few ranks from either end: they are
    selected from the row's tails (``_tail_values``), and the rows the tails cannot settle exactly (a tail too
    full, a zero of either sign among tied values) are partitioned or sorted as a whole (``_sorted_interval``)."""
    k, b = rows.shape
    lo, hi = np.full(k, np.nan), np.full(k, np.nan)
    if not k or not b:
        return lo, hi
    qs = ((1 - level) / 2, (1 + level) / 2)
    for start in range(0, k, _INTERVAL_CHUNK_ROWS):
        chunk = np.ascontiguousarray(rows[start:start + _INTERVAL_CHUNK_ROWS])  # a column layout: copied
        missing = np.isnan(chunk)
        n_valid = b - _count_true(missing)
        last = np.maximum(n_valid - 1, 0)
        at = [_positions(last, q) for q in qs]  # per percentile: (below, above, frac)
        # ranks from the bottom (the lower percentile) and from the top (the upper one) of the valid values
        low_ranks, high_ranks = at[0][:2], (last - at[1][0], last - at[1][1])
        ranks = max(int(r.max()) for r in (*low_ranks, *high_ranks)) + 1
        if ranks * _TAIL_SHARE > b:
            chunk_lo, chunk_hi = _sorted_interval(chunk, n_valid, qs)
        else:
            low, high = _tail_values(chunk, low_ranks, ranks, False), _tail_values(chunk, high_ranks, ranks, True)
            picked = [low[0], low[1], high[0], high[1]]
            redo = low[2] | high[2] | _mixed_zeros(chunk, np.logical_or.reduce([v == 0 for v in picked]))
            chunk_lo, chunk_hi = (_interpolated(picked[2 * i], picked[2 * i + 1], at[i][2], n_valid)
                                  for i in range(2))
            if redo.any():
                again = np.flatnonzero(redo)
                chunk_lo[again], chunk_hi[again] = _sorted_interval(chunk[again], n_valid[again], qs)
        lo[start:start + len(chunk)], hi[start:start + len(chunk)] = chunk_lo, chunk_hi
    return lo, hi


#: The tails are selected when the ranks they need are at most this share of a row (1 in 8); else rows are sorted.
_TAIL_SHARE = 8
#: Most values below a tail's threshold taken per row; a row with more is partitioned or sorted whole.
_TAIL_WIDTH = 160
#: Blocks whose minima set a tail's threshold (more, when a tail needs more ranks): the reduction runs on
#: contiguous runs of this many values, and about a 1/128 quantile of 1,000 values lies below the threshold.
_TAIL_BLOCKS = 64


def _positions(last: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row (``last``: its count of valid values less one): the two sorted positions around percentile ``q``
    and the weight of the upper one (linear interpolation, as numpy's default)."""
    h = last * q
    below = np.floor(h).astype(np.int64)
    return below, np.minimum(below + 1, last), h - below


def _interpolated(below: np.ndarray, above: np.ndarray, frac: np.ndarray, n_valid: np.ndarray) -> np.ndarray:
    """The percentile between the order statistics ``below`` and ``above``; NaN for a row without values."""
    with np.errstate(invalid="ignore"):
        val = below * (1 - frac) + above * frac
    return np.where(n_valid > 0, val, np.nan)


def _count_true(mask: np.ndarray) -> np.ndarray:
    """Per row of a boolean matrix its count of True (int64), summed as bytes into 16 bits (several times faster
    than ``np.count_nonzero`` along an axis; rows are at most ``MAX_N_BOOT`` long, below 65,536)."""
    dtype = np.uint16 if mask.shape[1] < 1 << 16 else np.int64
    return np.add.reduce(mask.view(np.uint8), axis=1, dtype=dtype).astype(np.int64)


def _tail_values(y: np.ndarray, ranks: Sequence[np.ndarray], count: int, largest: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``y``, the values of the two given ranks among its valid (non-NaN) values, counted from the
    smallest (from the largest when ``largest``), both below ``count`` and below the row's count of valid values;
    and whether the row must be sorted instead (more than ``_TAIL_WIDTH`` values past its threshold).

    The threshold is the ``count``-th smallest (largest) of the minima (maxima) of disjoint blocks of the row: at
    least ``count`` valid values are at most (at least) it, so a rank below ``count`` is one of the values past the
    threshold (sorted) or the threshold itself. A block of NaN only has +inf (-inf) for its end: a threshold of
    +inf (-inf) has every valid value within it."""
    n, b = y.shape
    blocks = min(max(2 * count, _TAIL_BLOCKS), b // 2)  # at least ``count`` (count <= b / _TAIL_SHARE)
    size = b // blocks
    end_of = np.fmax if largest else np.fmin  # NaN ignored, unless a block holds nothing else
    ends = y[:, :blocks].copy()  # block j: values j, j + blocks, j + 2 blocks, ...
    for at in range(blocks, size * blocks, blocks):
        end_of(ends, y[:, at:at + blocks], out=ends)
    outside = -np.inf if largest else np.inf
    np.copyto(ends, outside, where=np.isnan(ends))
    kth = blocks - count if largest else count - 1
    threshold = np.partition(ends, kth, axis=1)[:, kth]
    past = y > threshold[:, None] if largest else y < threshold[:, None]  # NaN never
    in_tail = _count_true(past)
    too_many = in_tail > _TAIL_WIDTH
    if too_many.any():
        past[too_many] = False
        in_tail[too_many] = 0
    width = max(int(in_tail.max()), 1)
    values = y.ravel()[np.flatnonzero(past)]  # row after row
    # the values' places in a (n, width) array padded with values beyond them: row r's i-th value at r * width + i
    place = np.arange(len(values)) + np.repeat(np.arange(n) * width - (np.cumsum(in_tail) - in_tail), in_tail)
    tail = np.full((n, width), outside)
    tail.ravel()[place] = values
    tail.sort(axis=1)  # largest: the pads first, the values' largest last
    index = np.arange(n)
    first, second = (np.where(r < in_tail, tail[index, np.clip(width - 1 - r if largest else r, 0, width - 1)],
                              threshold) for r in ranks)
    return first, second, too_many


def _mixed_zeros(chunk: np.ndarray, zero_picked: np.ndarray) -> np.ndarray:
    """Rows where a picked order statistic is zero and the row holds both 0.0 and -0.0: which of the tied zeros a
    partition or sort puts there is its own, so such rows are sorted as before."""
    out = np.zeros(len(chunk), dtype=bool)
    at = np.flatnonzero(zero_picked)
    if len(at):
        sub = chunk[at]
        zero, negative = sub == 0, np.signbit(sub)
        out[at] = (zero & negative).any(axis=1) & (zero & ~negative).any(axis=1)
    return out


def _sorted_interval(chunk: np.ndarray, n_valid: np.ndarray, qs: Sequence[float]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The interval of each row from a partial sort (rows without NaN: only the positions needed) or a full sort
    (rows holding NaN, NaN last)."""
    k, b = chunk.shape
    out = (np.full(k, np.nan), np.full(k, np.nan))
    kth = sorted({int(i) for q in qs for i in (np.floor((b - 1) * q), min(np.floor((b - 1) * q) + 1, b - 1))})
    full = n_valid == b
    for at, partial in ((np.flatnonzero(full), True), (np.flatnonzero(~full), False)):
        if not len(at):
            continue
        sub = chunk if len(at) == len(chunk) else chunk[at]
        # partial: the columns in kth hold their sorted values, in every row; else sorted whole, NaN last
        srt = np.partition(sub, kth, axis=-1) if partial else np.sort(sub, axis=-1)
        nv = n_valid[at]
        index = np.arange(len(at))
        for q, dest in zip(qs, out):
            below, above, frac = _positions(np.maximum(nv - 1, 0), q)
            dest[at] = _interpolated(srt[index, below], srt[index, above], frac, nv)
    return out


#: Columns of replicates taken per ``percentile_interval`` call by ``intervals_of``: a batch of 1,000 resamples
#: x 128 columns (1 MB) is partitioned in cache, about 1.6x faster per column than 4,096 columns at once.
_INTERVAL_BATCH_COLUMNS = 128


def intervals_of(reps: Mapping[K, np.ndarray | None], level: float = DEFAULT_LEVEL
                 ) -> dict[K, tuple[np.ndarray, np.ndarray]]:
    """``percentile_interval`` of many (n_boot, J) replicate arrays, computed a batch of columns at a time
    instead of one call per array; the same numbers. Entries that are None or empty get no interval."""
    out: dict[K, tuple[np.ndarray, np.ndarray]] = {}
    batch: list[tuple[K, np.ndarray]] = []
    width = 0

    def flush() -> None:
        nonlocal batch, width
        if batch:
            lo, hi = percentile_interval(np.hstack([r for _, r in batch]), level)
            at = 0
            for key, r in batch:
                out[key] = (lo[at:at + r.shape[1]], hi[at:at + r.shape[1]])
                at += r.shape[1]
        batch, width = [], 0

    for key, r in reps.items():
        if r is None or not r.size:
            continue
        if batch and (r.shape[0] != batch[0][1].shape[0] or width + r.shape[1] > _INTERVAL_BATCH_COLUMNS):
            flush()
        batch.append((key, r))
        width += r.shape[1]
    flush()
    return out


def two_sided_p(reps: np.ndarray) -> np.ndarray:
    """Per column: twice the smaller share of replicates on either side of zero (capped at 1)."""
    valid = ~np.isnan(reps)
    n = valid.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        le = np.where(valid, reps <= 0, False).sum(axis=0) / n
        ge = np.where(valid, reps >= 0, False).sum(axis=0) / n
        return np.minimum(1.0, 2 * np.minimum(le, ge))
