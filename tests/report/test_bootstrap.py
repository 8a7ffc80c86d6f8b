"""The bootstrap: replicate means, intervals and seeding, on known data and on the phantom summaries."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from medvision_bm.report.bootstrap import (
    BootstrapSpec,
    block_rows,
    blocked_replicate_means,
    count_blocks,
    percentile_interval,
    replicate_means,
    resample_counts,
    two_sided_p,
)
from phantom_runs import run_cli


def test_resample_counts_are_seeded_multinomial_draws() -> None:
    spec = BootstrapSpec(n_boot=300, seed=7)
    a = resample_counts(50, spec, "task-a")
    assert a.shape == (300, 50) and np.all(a.sum(axis=1) == 50) and a.min() >= 0
    assert np.array_equal(a, resample_counts(50, spec, "task-a"))
    assert not np.array_equal(a, resample_counts(50, spec, "task-b"))
    assert not np.array_equal(a, resample_counts(50, BootstrapSpec(300, 8), "task-a"))
    assert abs(a.mean() - 1.0) < 1e-9 and 0.8 < a.var() < 1.2  # multinomial(n, 1/n): mean 1, variance ~1


@pytest.mark.parametrize(("n", "max_cells"), [(1, 1), (7, 7), (50, 49), (50, 333), (997, 5000), (2, 10**9)])
def test_count_blocks_are_the_rows_of_the_whole_matrix(n: int, max_cells: int) -> None:
    """Drawn block by block, the counts are exactly the rows of the one-block matrix: the same resamples for the
    same seed whatever the block size, each block at most max_cells counts (one row at least)."""
    spec = BootstrapSpec(n_boot=130, seed=3)
    blocks = list(count_blocks(n, spec, "t", max_cells))
    assert all(b.shape[0] * n <= max(max_cells, n) and b.dtype == np.float32 for b in blocks)
    assert [b.shape[0] for b in blocks[:-1]] == [block_rows(n, 130, max_cells)] * (len(blocks) - 1)
    whole = resample_counts(n, spec, "t")
    assert np.array_equal(np.vstack(blocks), whole) and whole.shape == (130, n)
    assert len(list(count_blocks(n, spec, "t"))) == 1  # small tasks: one block, as before
    order = np.random.default_rng(n).permutation(n)
    permuted = np.vstack(list(count_blocks(n, spec, "t", max_cells, order=order, dtype=np.float64)))
    assert permuted.dtype == np.float64 and np.array_equal(permuted, whole[:, order])
    assert np.array_equal(next(count_blocks(0, spec, "t")), np.zeros((130, 0)))


def test_large_tasks_are_resampled_in_bounded_blocks() -> None:
    """upstream's largest detection task (about 916k samples): 18 resamples per block at the default budget, so a
    block holds 16.5M counts instead of 916M for the whole matrix."""
    assert block_rows(916_000, 1000) == 18 and block_rows(16_777, 1000) == 1000 and block_rows(16_778, 1000) == 999


def test_blocked_replicate_means_are_the_dense_ones() -> None:
    rng = np.random.default_rng(4)
    values = rng.normal(size=(300, 3))
    values[::5, 1] = np.nan
    spec = BootstrapSpec(n_boot=200, seed=2)
    dense = replicate_means(resample_counts(300, spec, "p"), values)
    assert np.array_equal(blocked_replicate_means(300, spec, "p", values), dense, equal_nan=True)  # one block
    small = blocked_replicate_means(300, spec, "p", values, max_cells=900)  # 3 resamples per block
    assert small.shape == dense.shape and np.allclose(small, dense, rtol=1e-12, atol=0, equal_nan=True)


def test_replicate_means_skip_missing_values() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=(40, 3))
    values[::4, 1] = np.nan  # e.g. MRE undefined for some samples
    values[:, 2] = np.nan
    counts = resample_counts(40, BootstrapSpec(200, 1), "x")
    reps = replicate_means(counts, values)
    for b in (0, 17, 199):
        w = counts[b]
        assert reps[b, 0] == pytest.approx((w * values[:, 0]).sum() / w.sum(), rel=1e-6)
        ok = ~np.isnan(values[:, 1])
        assert reps[b, 1] == pytest.approx((w[ok] * values[ok, 1]).sum() / w[ok].sum(), rel=1e-6)
    assert np.isnan(reps[:, 2]).all()


def test_percentile_interval_matches_numpy_and_ignores_nan() -> None:
    rng = np.random.default_rng(3)
    reps = rng.normal(size=(500, 4))
    reps[:30, 2] = np.nan
    reps[:, 3] = np.nan
    lo, hi = percentile_interval(reps, 0.9)
    for j in range(3):
        col = reps[~np.isnan(reps[:, j]), j]
        assert (lo[j], hi[j]) == pytest.approx(tuple(np.quantile(col, [0.05, 0.95])))
    assert np.isnan(lo[3]) and np.isnan(hi[3])
    p = two_sided_p(np.column_stack([rng.normal(5, 1, 1000), rng.normal(0, 1, 1000)]))
    assert p[0] < 0.01 and p[1] > 0.2


@pytest.mark.parametrize("n_boot", [1, 2, 3, 100, 1000, 1001])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_percentile_interval_without_nan_equals_numpy_exactly(n_boot: int, level: float) -> None:
    """The partial-sort path (no NaN anywhere) gives bit for bit what the full sort gives (forced here by a NaN in an
    extra column), ties included, and numpy's quantiles up to rounding."""
    rng = np.random.default_rng(n_boot)
    reps = np.column_stack([rng.normal(size=n_boot), rng.integers(0, 4, n_boot).astype(float),
                            np.full(n_boot, 0.25), rng.exponential(size=n_boot)])
    lo, hi = percentile_interval(reps, level)
    sorted_lo, sorted_hi = percentile_interval(np.column_stack([reps, np.full(n_boot, np.nan)]), level)
    assert np.array_equal(lo, sorted_lo[:4]) and np.array_equal(hi, sorted_hi[:4])
    want = np.quantile(reps, [(1 - level) / 2, (1 + level) / 2], axis=0)
    assert lo == pytest.approx(want[0], rel=1e-12, abs=1e-15) and hi == pytest.approx(want[1], rel=1e-12, abs=1e-15)


def test_intervals_of_many_arrays_equal_one_call_each(monkeypatch) -> None:
    """Batched intervals (several arrays per call, split at the column budget, arrays of other resample counts in
    their own calls, NaN columns beside full ones) are the very numbers of one call per array."""
    from medvision_bm.report import bootstrap

    monkeypatch.setattr(bootstrap, "_INTERVAL_BATCH_COLUMNS", 5)
    rng = np.random.default_rng(7)
    arrays: dict[str, np.ndarray | None] = {}
    for i in range(9):
        a = rng.normal(size=(200 if i != 4 else 150, 1 + i % 3))
        if i % 4 == 1:
            a[: 10 * i, 0] = np.nan
        arrays[f"a{i}"] = a
    arrays["none"], arrays["empty"] = None, np.zeros((200, 0))
    got = bootstrap.intervals_of(arrays, 0.9)
    assert set(got) == {f"a{i}" for i in range(9)}
    for key, (lo, hi) in got.items():
        want_lo, want_hi = percentile_interval(arrays[key], 0.9)
        assert np.array_equal(lo, want_lo, equal_nan=True) and np.array_equal(hi, want_hi, equal_nan=True), key


def test_row_intervals_in_chunks_equal_each_column_alone(monkeypatch) -> None:
    """Intervals of a row layout (a row per statistic), taken a few rows at a time, full rows and rows holding NaN
    (or nothing but NaN) mixed in a chunk, are the numbers of each column's own call in the column layout."""
    from medvision_bm.report import bootstrap

    monkeypatch.setattr(bootstrap, "_INTERVAL_CHUNK_ROWS", 3)
    rng = np.random.default_rng(11)
    reps = rng.normal(size=(120, 10))
    reps[:7, 2] = np.nan
    reps[:, 5] = np.nan
    reps[50:, 8] = np.nan
    lo, hi = bootstrap.row_percentile_interval(np.ascontiguousarray(reps.T), 0.9)
    for j in range(reps.shape[1]):
        want_lo, want_hi = percentile_interval(reps[:, [j]], 0.9)
        assert np.array_equal(lo[[j]], want_lo, equal_nan=True) and np.array_equal(hi[[j]], want_hi, equal_nan=True)
    assert np.isnan(lo[5]) and np.isnan(hi[5]) and not np.isnan(lo[2])


def _adversarial_rows(rng: np.random.Generator, kind: int, k: int, b: int) -> np.ndarray:
    """Replicate rows made to trip an order-statistic selection: ties, zeros of both signs, infinities, NaN in any
    number (none to all), sorted rows, constant rows."""
    if kind == 0:
        return rng.normal(size=(k, b))
    if kind == 1:  # few distinct values, zeros of both signs among them
        return rng.integers(-3, 4, size=(k, b)) * rng.choice([0.0, -0.0, 1.0], size=(k, b))
    if kind == 2:
        return np.sort(rng.normal(size=(k, b)), axis=1)
    if kind == 3:
        return -np.sort(rng.normal(size=(k, b)), axis=1)
    if kind == 4:
        return rng.choice([0.0, -0.0, np.inf, -np.inf, 1.0, np.nan], size=(k, b))
    if kind == 5:
        return np.full((k, b), rng.choice([0.0, -0.0, 1.0, np.inf]))
    if kind == 6:  # each row its own share of NaN, up to all
        x = rng.normal(size=(k, b))
        x[rng.random((k, b)) < rng.random((k, 1))] = np.nan
        return x
    if kind == 7:  # a success rate of 20 samples: 21 values, many ties
        x = rng.integers(0, 21, size=(k, b)) / 20.0
        x[rng.random((k, b)) < 0.02] = np.nan
        return x
    x = rng.normal(size=(k, b))
    x[rng.random((k, b)) < 0.5] = -0.0
    x[rng.random((k, b)) < 0.3] = 0.0
    x[rng.random((k, b)) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("b", [1, 2, 5, 64, 199, 200, 1000, 1001])
@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_row_intervals_from_the_tails_are_those_of_a_sort(b: int, level: float) -> None:
    """The order statistics picked from each row's tails are those a partition or sort of the whole row gives, to
    the bit (the sign of a zero included), on rows made to break the selection."""
    from medvision_bm.report import bootstrap

    rng = np.random.default_rng(b * 100 + int(level * 100))
    for kind in range(9):
        rows = _adversarial_rows(rng, kind, 300, b)
        lo, hi = bootstrap.row_percentile_interval(rows, level)
        want_lo, want_hi = bootstrap._sorted_interval(rows, b - np.isnan(rows).sum(axis=1), ((1 - level) / 2,
                                                                                             (1 + level) / 2))
        for got, want in ((lo, want_lo), (hi, want_hi)):
            assert np.array_equal(got.view(np.int64), want.view(np.int64)), (kind, b, level)


def test_row_intervals_of_crowded_tails_are_sorted(monkeypatch) -> None:
    """Rows with more values below a tail's threshold than ``_TAIL_WIDTH`` take the sort, with the same numbers."""
    from medvision_bm.report import bootstrap

    rng = np.random.default_rng(3)
    rows = rng.normal(size=(50, 1000))
    # the thresholds come from the minima of blocks of the first 960 values: the last 40 crowd both tails
    rows[:40, 960:980] -= 100
    rows[:40, 980:] += 100
    want = bootstrap._sorted_interval(rows, np.full(50, 1000), ((1 - 0.95) / 2, (1 + 0.95) / 2))
    sorted_rows: list[int] = []
    sort = bootstrap._sorted_interval

    def counted(chunk, n_valid, qs):
        sorted_rows.append(len(chunk))
        return sort(chunk, n_valid, qs)

    monkeypatch.setattr(bootstrap, "_TAIL_WIDTH", 40)
    monkeypatch.setattr(bootstrap, "_sorted_interval", counted)
    lo, hi = bootstrap.row_percentile_interval(rows, 0.95)
    assert sorted_rows and sorted_rows[0] >= 40
    assert np.array_equal(lo, want[0]) and np.array_equal(hi, want[1])


def _ci_columns(path: Path) -> list[tuple]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [(r["label"], r["task"], r["avgMAE_lo"], r["avgMAE_hi"], r["SuccessRate_lo"]) for r in rows]


def test_intervals_reproduce_with_the_seed_and_change_with_another(phantom_results: Path, tmp_path: Path) -> None:
    outs = {}
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        res = run_cli("summarize", "--results_dir", str(phantom_results / "MedVision-Phantom-AD"), "--output_dir",
                      str(tmp_path / name), "--seed", seed, "--n_boot", "300", "--no_plots", "--browse_per_task", "0")
        assert res.returncode == 0, res.stderr
        outs[name] = _ci_columns(tmp_path / name / "tasks_AD.csv")
    assert outs["a"] == outs["b"]
    mean_rows = [(a, c) for a, c in zip(outs["a"], outs["c"]) if a[0] == "mean"]
    assert mean_rows and all(a[:2] == c[:2] for a, c in mean_rows)
    assert any(a[2:4] != c[2:4] for a, c in mean_rows)


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]


def test_summary_products_run_on_one_blas_thread(phantom_results, tmp_path, monkeypatch) -> None:
    """A summary's bootstrap products run on one BLAS thread whatever the machine's default (the same bits on every
    node), and the caller's setting comes back after it."""
    from threadpoolctl import threadpool_limits

    from medvision_bm.report import tables
    from medvision_bm.report.bootstrap import one_thread_sums
    from medvision_bm.report.summarize import SummaryOptions, summarize

    seen: list[list[int]] = []
    real = tables.replicates

    def spy(*args, **kwargs):
        seen.append(_blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(tables, "replicates", spy)
    with threadpool_limits(limits=2, user_api="blas"):
        before = _blas_threads()
        assert before and all(n == 2 for n in before)
        with one_thread_sums():
            assert all(n == 1 for n in _blas_threads())
        assert _blas_threads() == before
        summarize(phantom_results, tmp_path / "out", SummaryOptions(plots=False, n_boot=100))
        assert _blas_threads() == before
    assert seen and all(n == [1] * len(before) for n in seen)
