"""Clinical decision agreement statistics: a measurement's category from a cutoff table, the agreement numbers of one
confusion matrix, and the percentile bootstrap over whole imaging volumes with its one-sided p-value.

The rules are upstream's (YongchengYAO/MedVision ``script/analyze/clinical-decision-analysis/cda_stats.py`` @2beef50:
``categorize``, ``cohen_kappa``, ``weighted_kappa``, ``cal_clinical_agreement``; ``cda_uncertainty.py`` @2beef50:
``bootstrap_ci``, ``_cluster_index``). Every statistic is computed from the count matrix ``M[gt, pred]`` with
upstream's operations in upstream's order, so the numbers agree to the bit. A bootstrap resample is the sum of the
count matrices of the volumes it draws: the same matrix upstream builds from the concatenated records, without
holding a record per draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

import numpy as np

NAN = float("nan")
#: The method fields of upstream's ``summary_CDA_uncertainty*.json`` (``cda_uncertainty.py`` @2beef50), verbatim.
CI_METHOD = ("percentile bootstrap; paired, resampling whole imaging volumes (clusters) with replacement, not "
             "individual records")
P_METHOD = ("one-sided test of kappa > 0 by inverting the same clustered bootstrap: (#{replicate <= 0} + 1) / "
            "(n_boot_valid + 1)")
CLUSTER_NOTE = ("n counts scored records; n_clusters counts the independent imaging volumes they came from. Where "
                "n_clusters < n the records are correlated and n overstates the information.")


def categorize(value: float | None, cutoffs: Sequence[float], right_closed: Sequence[bool]) -> int | None:
    """The category index of ``value`` (0 .. len(cutoffs)); None for no value or a non-finite one.

    Walking the ascending cutoffs, the index advances past a right-closed cutoff when ``value > cutoff`` (a value on
    it stays in the lower category, AJCC's "<= x") and past a left-closed one when ``value >= cutoff`` (it goes to
    the upper category: the lower edge of a closed normal band)."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    if len(right_closed) != len(cutoffs):
        raise ValueError(f"{len(right_closed)} boundary rules for {len(cutoffs)} cutoffs")
    idx = 0
    for cut, closed in zip(cutoffs, right_closed):
        if (v > cut) if closed else (v >= cut):
            idx += 1
        else:
            break
    return idx


def confusion(gt: Sequence[int], pred: Sequence[int], k: int) -> np.ndarray:
    """The ``k x k`` count matrix ``M[gt, pred]`` (int64)."""
    mat = np.zeros((k, k), dtype=np.int64)
    if len(gt):
        np.add.at(mat, (np.asarray(gt, dtype=np.intp), np.asarray(pred, dtype=np.intp)), 1)
    return mat


def cohen_kappa(mat: np.ndarray) -> float:
    """Cohen's kappa of a count matrix; NaN without samples or when chance agreement is 1 (both raters use one
    category only), as upstream's (and sklearn's)."""
    m = np.asarray(mat).astype(np.float64)
    n = m.sum()
    if n == 0:
        return NAN
    po = np.trace(m) / n
    row = m.sum(axis=1) / n
    col = m.sum(axis=0) / n
    pe = float(np.sum(row * col))
    if pe >= 1.0:
        return NAN
    return float((po - pe) / (1.0 - pe))


def weighted_kappa(mat: np.ndarray) -> float:
    """Quadratic-weighted kappa of a count matrix whose categories are in ordinal order, weights
    ``((i - j) / (k - 1))**2``; NaN without samples, with fewer than two categories, or when the expected
    disagreement is 0 (one occupied category), as upstream's."""
    m = np.asarray(mat).astype(np.float64)
    k = m.shape[0]
    n = m.sum()
    if n == 0 or k < 2:
        return NAN
    idx = np.arange(k)
    weights = ((idx[:, None] - idx[None, :]) / (k - 1)) ** 2
    expected = np.outer(m.sum(axis=1), m.sum(axis=0)) / n
    denom = float(np.sum(weights * expected))
    if denom == 0:
        return NAN
    return float(1.0 - np.sum(weights * m) / denom)


@dataclass(frozen=True)
class Agreement:
    """Upstream's ``cal_clinical_agreement`` of one group: over the parsed samples and over all (a parse failure
    counted as a disagreement)."""

    accuracy: float
    cohen_kappa: float
    weighted_kappa: float | None  # ordinal proxies only
    flip_rate: float
    n_parsed: int
    n_total: int
    accuracy_coverage_adjusted: float
    flip_rate_coverage_adjusted: float
    confusion: tuple[tuple[int, ...], ...]

    def to_upstream(self, name: str, ordinal: bool, labels: Sequence[str]) -> AgreementJson:
        """The entry of ``summary_metrics_CDA_Task*.json`` (upstream's key order; ``confusion`` as gt -> pred ->
        count)."""
        out: AgreementJson = {
            "name": name, "ordinal": ordinal, "accuracy": self.accuracy, "cohen_kappa": self.cohen_kappa,
            "confusion": {g: {p: self.confusion[i][j] for j, p in enumerate(labels)} for i, g in enumerate(labels)},
            "flip_rate": self.flip_rate, "n_parsed": self.n_parsed, "n_total": self.n_total,
            "accuracy_coverage_adjusted": self.accuracy_coverage_adjusted,
            "flip_rate_coverage_adjusted": self.flip_rate_coverage_adjusted}
        if ordinal:
            out["weighted_kappa"] = self.weighted_kappa
        return out


class AgreementJson(TypedDict):
    """An entry of ``summary_metrics_CDA_Task*.json`` (upstream's key order; ``weighted_kappa`` for ordinal proxies)."""

    name: str
    ordinal: bool
    accuracy: float
    cohen_kappa: float
    confusion: dict[str, dict[str, int]]
    flip_rate: float
    n_parsed: int
    n_total: int
    accuracy_coverage_adjusted: float
    flip_rate_coverage_adjusted: float
    weighted_kappa: NotRequired[float | None]


def agreement(mat: np.ndarray, n_failed: int, ordinal: bool) -> Agreement:
    """The agreement numbers of the parsed samples' count matrix ``mat`` and ``n_failed`` samples whose prediction
    has no category (not parsed)."""
    n_parsed = int(np.asarray(mat).sum())
    n_total = n_parsed + int(n_failed)
    agree = int(np.trace(mat))
    accuracy = agree / n_parsed if n_parsed > 0 else NAN
    return Agreement(
        accuracy=accuracy, cohen_kappa=cohen_kappa(mat), weighted_kappa=weighted_kappa(mat) if ordinal else None,
        flip_rate=(1.0 - accuracy) if n_parsed > 0 else NAN, n_parsed=n_parsed, n_total=n_total,
        accuracy_coverage_adjusted=agree / n_total if n_total > 0 else NAN,
        flip_rate_coverage_adjusted=1.0 - agree / n_total if n_total > 0 else NAN,
        confusion=tuple(tuple(int(c) for c in row) for row in np.asarray(mat)))


class VolumeCounts:
    """Per imaging volume (the resampling cluster), the count matrix of its parsed samples, in order of first
    appearance (upstream's ``_cluster_index``); a sample without a volume is a cluster of its own."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._index: dict[str | tuple[str, int], int] = {}
        self._rows: list[np.ndarray] = []
        self.n = 0

    def add(self, volume: str | None, gt: int, pred: int) -> None:
        key: str | tuple[str, int] = volume if volume is not None else ("", self.n)
        at = self._index.get(key)
        if at is None:
            at = self._index[key] = len(self._rows)
            self._rows.append(np.zeros(self.k * self.k, dtype=np.int64))
        self._rows[at][gt * self.k + pred] += 1
        self.n += 1

    @property
    def n_clusters(self) -> int:
        return len(self._rows)

    def matrix(self) -> np.ndarray:
        """The count matrix of all samples."""
        if not self._rows:
            return np.zeros((self.k, self.k), dtype=np.int64)
        return np.sum(self._rows, axis=0).reshape(self.k, self.k)

    def stacked(self) -> np.ndarray:
        """``(clusters, k * k)`` counts."""
        if not self._rows:
            return np.zeros((0, self.k * self.k), dtype=np.int64)
        return np.stack(self._rows)


#: Cells (draws x volumes) of one block of bootstrap counts: 4M float64, 32 MB.
MAX_BLOCK_CELLS = 1 << 22


def kappa_block(mats: np.ndarray, ordinal: bool) -> np.ndarray:
    """:func:`weighted_kappa` (``ordinal``) or :func:`cohen_kappa` of each ``k x k`` count matrix of a ``(b, k, k)``
    stack at once: the same float operations in the same order as on one matrix (each sum runs over the same
    contiguous cells), so every value equals the single-matrix one to the bit."""
    m = mats.astype(np.float64)
    b, k, _ = m.shape
    n = m.reshape(b, k * k).sum(axis=1)
    out = np.full(b, NAN)
    ok = n > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        if ordinal:
            if k < 2:
                return out
            idx = np.arange(k)
            weights = ((idx[:, None] - idx[None, :]) / (k - 1)) ** 2
            expected = (m.sum(axis=2)[:, :, None] * m.sum(axis=1)[:, None, :]) / n[:, None, None]
            denom = (weights * expected).reshape(b, k * k).sum(axis=1)
            val = 1.0 - (weights * m).reshape(b, k * k).sum(axis=1) / denom
            good = ok & (denom != 0)
        else:
            po = m[:, np.arange(k), np.arange(k)].sum(axis=1) / n
            pe = ((m.sum(axis=2) / n[:, None]) * (m.sum(axis=1) / n[:, None])).sum(axis=1)
            val = (po - pe) / (1.0 - pe)
            good = ok & (pe < 1.0)
    out[good] = val[good]
    return out


@dataclass(frozen=True)
class Uncertainty:
    """One row of ``summary_CDA_uncertainty*.json``: the statistic (weighted kappa for an ordinal proxy, else
    Cohen's), its percentile CI over resampled volumes and the one-sided p of kappa > 0 from the same resamples."""

    statistic: str
    n: int
    n_clusters: int
    point_estimate: float
    ci_lower: float
    ci_upper: float
    p_kappa_gt_zero: float
    low_n: bool
    n_boot_valid: int


def bootstrap(volumes: VolumeCounts, ordinal: bool, n_boot: int, seed: int, alpha: float = 0.05,
              min_informative_n: int = 10) -> Uncertainty:
    """Upstream's ``bootstrap_ci``: ``n_boot`` times draw as many volumes as there are, with replacement
    (``default_rng(seed).integers(0, C, C)`` per draw, so the draws are upstream's), recompute the statistic, drop
    the undefined ones; CI: the ``alpha/2`` and ``1 - alpha/2`` percentiles (numpy's linear rule); p:
    ``(#{replicate <= 0} + 1) / (n_valid + 1)``."""
    stat = weighted_kappa if ordinal else cohen_kappa
    name = "weighted_kappa" if ordinal else "cohen_kappa"
    n, n_clusters = volumes.n, volumes.n_clusters
    low = n < min_informative_n
    if n == 0:
        return Uncertainty(name, 0, 0, NAN, NAN, NAN, NAN, low, 0)
    observed = stat(volumes.matrix())
    stacked_f = volumes.stacked().astype(np.float64)
    k = volumes.k
    rng = np.random.default_rng(seed)
    block = max(1, min(512, MAX_BLOCK_CELLS // n_clusters))  # draws per block: bounded memory
    parts = []
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        counts = np.empty((b, n_clusters), dtype=np.float64)
        for j in range(b):  # one integers() call per draw, as upstream: the draws are its draws
            counts[j] = np.bincount(rng.integers(0, n_clusters, n_clusters), minlength=n_clusters)
        # integer counts in float64 (exact below 2**53): the product is the count matrix, through BLAS
        parts.append(kappa_block((counts @ stacked_f).reshape(b, k, k), ordinal))
    drawn = np.concatenate(parts)
    vals = [float(v) for v in drawn[np.isfinite(drawn)]]
    if not vals:
        return Uncertainty(name, n, n_clusters, float(observed), NAN, NAN, NAN, low, 0)
    lo, hi = np.percentile(vals, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    p = (sum(1 for v in vals if v <= 0.0) + 1) / (len(vals) + 1)
    return Uncertainty(name, n, n_clusters, float(observed), float(lo), float(hi), float(p), low, len(vals))
