"""The bootstrap's aggregate rows are summed group by group as each group's sums complete (``replicates._RowSums``):
whatever order the groups complete in, the rows are bit for bit the sums over all of a run's groups at once, in
key order (numpy's sum over the group axis), with the point estimate's rules."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from medvision_bm.report.groups import STATS, RunRows
from medvision_bm.report.replicates import _Columns, _ratio, _RowSums
from medvision_bm.tasks.families import family_spec


def _rows_at_once(family: str, cols: _Columns, sums: np.ndarray, v: np.ndarray, keys: list[str],
                  rr: RunRows) -> dict[str, np.ndarray]:
    """The rows over every group at once: (B, G, width) sums and their (B, G, J) stats."""
    names = [s.name for s in STATS[family]]
    w = sums[..., -1]
    finite = np.isfinite(v)
    vf = np.where(finite, v, 0.0)
    index = {g: i for i, g in enumerate(keys)}
    if family_spec(family).axes:
        keep = (sums[..., cols.den_index[names.index("avgMRE")]] > 0) & (w > 0)
        in_rows = np.zeros(len(keys), bool)
        in_rows[[index[g] for g in rr.per_group]] = True
        ww = w * (keep & in_rows[None, :])
        num, den = (vf * ww[..., None]).sum(axis=1), (finite * ww[..., None]).sum(axis=1)
        for name in ("avgMAE", "avgMRE", "SuccessRate"):
            den[:, names.index(name)] = ww.sum(axis=1)
        return {"overall": _ratio(num, den)}
    out = {}
    for name, sel in rr.selections.items():
        at = np.array(sorted({index[g] for g in sel if g in index}), dtype=np.int64)
        ww = w[:, at][..., None]
        out[name] = _ratio((vf[:, at] * ww).sum(axis=1), (finite[:, at] * ww).sum(axis=1))
    return out


def _sums(rng: np.random.Generator, cols: _Columns, groups: int, n_boot: int) -> np.ndarray:
    """(G, width, B) group sums: counts in the mask and ones columns (some zero: stats without a value), values."""
    ones = rng.integers(0, 6, (groups, 1, n_boot)).astype(np.float64)
    masks = np.minimum(ones, rng.integers(0, 6, (groups, cols.width - cols.J - 1, n_boot)))
    values = rng.random((groups, cols.J, n_boot)) * 10.0 ** rng.integers(-3, 3, (groups, cols.J, 1))
    return np.concatenate([values, masks, ones], axis=1)


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_summed_as_groups_complete_equal_the_rows_at_once(family: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    stats = STATS[family]
    raw = rng.random((40, len(stats)))
    raw[rng.random(raw.shape) < 0.3] = np.nan  # stats valid on different samples: their own count columns
    cols = _Columns(stats, raw)
    n_boot, groups = 64, 9
    keys = [f"group{i}" for i in range(groups)]
    sums = _sums(rng, cols, groups, n_boot)
    v = cols.row_stats_of(sums)  # (G, J, B)
    selections: dict[str, Sequence[str]] = {"first": keys[:5], "some": keys[2:9:2], "all": keys, "none": [],
                                            "unknown": ["elsewhere", keys[3]]}
    rr = RunRows({g: {} for g in keys[1:]}, {}, {}, {k: list(s) for k, s in selections.items()})
    want = _rows_at_once(family, cols, sums.transpose(2, 0, 1), v.transpose(2, 0, 1), keys, rr)
    for order in (np.arange(groups), np.arange(groups)[::-1], rng.permutation(groups)):
        row_sums = _RowSums(family, stats, keys, rr, n_boot)
        for i in order.tolist():
            row_sums.add(i, v[i], sums[i], cols.den_index)
        got = row_sums.rows()
        assert got.keys() == want.keys()
        assert all(got[k].shape == want[k].shape and got[k].tobytes() == want[k].tobytes() for k in want), order
