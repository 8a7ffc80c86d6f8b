"""Seeded percentile bootstrap for means over successful samples, as matrix products over resampling counts.

Samples are resampled with replacement over *all* samples of a task (failures included), and a metric's mean is
taken over the successful samples of each resample, so the interval also carries the uncertainty of the success
rate. The counts depend only on (seed, task, n): every run of one task shares them, which makes two runs on the
same samples a paired comparison, while different tasks get independent draws (a stratified bootstrap for means
over tasks).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from medvision_bm.errors import UserError

DEFAULT_N_BOOT = 1000
DEFAULT_SEED = 0
#: Most resamples accepted (--n_boot): intervals stop moving long before, and memory grows with it.
MAX_N_BOOT = 20_000
DEFAULT_LEVEL = 0.95


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
        if self.n_boot > MAX_N_BOOT:  # resample matrices are n_boot x samples: memory grows with both
            raise UserError(f"--n_boot {self.n_boot} is too large; use at most {MAX_N_BOOT} (default 1000)")
        if self.seed < 0:
            raise UserError(f"--seed {self.seed} must be 0 or more")
        if not 0.5 <= self.level < 1:
            raise UserError(f"--ci {self.level} must be between 0.5 and 1 (e.g. 0.95)")


def resample_counts(n: int, spec: BootstrapSpec, stream: str) -> np.ndarray:
    """A (n_boot, n) float matrix: how often each sample is drawn in each resample."""
    rng = np.random.default_rng([spec.seed, zlib.crc32(stream.encode("utf-8")), n])
    if n == 0:
        return np.zeros((spec.n_boot, 0))
    draws = rng.integers(0, n, size=(spec.n_boot, n), dtype=np.int64)
    draws += np.arange(spec.n_boot, dtype=np.int64)[:, None] * n
    return np.bincount(draws.ravel(), minlength=spec.n_boot * n).reshape(spec.n_boot, n).astype(np.float32)


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


def percentile_interval(reps: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Per column of (n_boot, k) replicates: the (1-level)/2 and (1+level)/2 percentiles over non-NaN values
    (linear interpolation, as numpy's default); NaN for a column without values.

    Replicates without NaN (the usual case) need only the two order statistics around each percentile: a partial
    sort (``np.partition``) gives exactly the values a full sort would, at a fraction of its cost."""
    n_valid = np.sum(~np.isnan(reps), axis=0)
    cols = np.arange(reps.shape[1])
    qs = ((1 - level) / 2, (1 + level) / 2)
    last = np.maximum(n_valid - 1, 0)
    spots = [(np.floor(last * q).astype(np.int64), last * q) for q in qs]
    if reps.shape[0] and bool(np.all(n_valid == reps.shape[0])):
        kth = sorted({int(i) for below, _ in spots for i in (below[0], min(below[0] + 1, reps.shape[0] - 1))})
        srt = np.partition(reps, kth, axis=0)  # rows in kth hold their sorted values, in every column
    else:
        srt = np.sort(reps, axis=0)  # NaN sorts last
    out = []
    for below, h in spots:
        above = np.minimum(below + 1, last)
        frac = h - below
        with np.errstate(invalid="ignore"):
            val = srt[below, cols] * (1 - frac) + srt[above, cols] * frac
        out.append(np.where(n_valid > 0, val, np.nan))
    return out[0], out[1]


def two_sided_p(reps: np.ndarray) -> np.ndarray:
    """Per column: twice the smaller share of replicates on either side of zero (capped at 1)."""
    valid = ~np.isnan(reps)
    n = valid.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        le = np.where(valid, reps <= 0, False).sum(axis=0) / n
        ge = np.where(valid, reps >= 0, False).sum(axis=0) / n
        return np.minimum(1.0, 2 * np.minimum(le, ge))
