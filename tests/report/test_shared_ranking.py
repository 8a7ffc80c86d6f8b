"""A leaderboard never ranks runs scored on different samples side by side as if they were comparable:
each row keeps its own N, and the ranks rest on the samples every run has (as `compare` pairs them)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from medvision_bm.models.base import GenRequest, GenResult, SyncBackend
from medvision_bm.report.bootstrap import BootstrapSpec
from medvision_bm.report.groups import PRIMARY
from medvision_bm.report.load import load
from medvision_bm.report.tables import family_tables
from medvision_bm.report.views import NO_SUCCESS, leaderboard_views
from medvision_bm.store.discovery import discover
from phantom_runs import run_baseline

FAMILY = "TL"
AGG = "overall"


def _board(results: Path) -> pl.DataFrame:
    loaded = load(discover(results, families=[FAMILY])[0])
    ft = family_tables(FAMILY, loaded.samples[FAMILY], loaded.store_frame(), BootstrapSpec(100), 2)
    return ft.leaderboard.filter(pl.col("aggregate") == AGG)


def _run(model_name: str, seed: int, limit: int | None, phantom_dir: Path, root: Path, lists: Path) -> None:
    extra = ["--model_name", model_name, "--baseline_seed", str(seed)] + (["--sample_limit", str(limit)] if limit
                                                                          else [])
    outcomes = run_baseline("random-box", FAMILY, phantom_dir, root / f"MedVision-Phantom-{FAMILY}", *extra,
                            lists=lists)
    assert all(o.state == "done" for o in outcomes), outcomes


def test_runs_on_different_samples_are_ranked_on_the_samples_they_share(tmp_path, phantom_dir, phantom_lists):
    """Three random-box runs with their own seeds: `wide` and `full` on every sample, `narrow` on the first 3 of
    each task (the issue's example: GPT-5.5 on 107 samples between baselines on 311). The order must be the order
    the same answers get when all three are scored on those 3 samples only."""
    mixed, same = tmp_path / "mixed", tmp_path / "same"
    for name, seed in (("wide", 11), ("full", 12)):
        _run(name, seed, None, phantom_dir, mixed, phantom_lists)
        _run(name, seed, 3, phantom_dir, same, phantom_lists)  # the same answers, on the shared samples only
    _run("narrow", 13, 3, phantom_dir, mixed, phantom_lists)
    _run("narrow", 13, 3, phantom_dir, same, phantom_lists)

    board = _board(mixed)
    reference = _board(same)
    n = dict(zip(board["label"], board["n"]))
    assert n["narrow"] < n["wide"] == n["full"]  # each row keeps its own N
    assert set(board["rank_n"]) == {reference["n"][0]} and set(reference["n"]) == {reference["n"][0]}
    primary = PRIMARY[FAMILY]
    assert dict(zip(board["label"], board["rank_value"])) == dict(zip(reference["label"], reference[primary]))
    assert board.sort("rank")["label"].to_list() == reference.sort("rank")["label"].to_list()
    # the setup discriminates: ranked on each run's own samples, the order would be another
    assert board.sort(primary)["label"].to_list() != board.sort("rank")["label"].to_list()

    view = next(v for v in leaderboard_views(FAMILY, _full_board(mixed), 0.95) if v.title.endswith(AGG))
    assert "Ranked on" in view.headers
    n_col = view.headers.index("N")
    marked = {row[1] for row in view.rows if row[n_col].endswith("†")}
    assert marked == {"wide", "full"}
    assert "samples every run has" in view.caption


def test_runs_on_the_same_samples_keep_their_table(tmp_path, phantom_dir, phantom_lists):
    for name, seed in (("a", 1), ("b", 2)):
        _run(name, seed, 3, phantom_dir, tmp_path, phantom_lists)
    board = _board(tmp_path)
    assert board["rank_n"].to_list() == board["n"].to_list()
    view = next(v for v in leaderboard_views(FAMILY, _full_board(tmp_path), 0.95) if v.title.endswith(AGG))
    assert "Ranked on" not in view.headers and not any("†" in cell for row in view.rows for cell in row)


def _full_board(results: Path) -> pl.DataFrame:
    loaded = load(discover(results, families=[FAMILY])[0])
    return family_tables(FAMILY, loaded.samples[FAMILY], loaded.store_frame(), BootstrapSpec(100), 2).leaderboard


class _Unreadable(SyncBackend):
    """A model whose every answer parses to nothing (no <answer> block)."""

    name = "unreadable"

    def answer(self, request: GenRequest) -> GenResult:
        return GenResult(request.key, "I cannot measure this.", finish_reason="stop")


def test_a_row_where_every_answer_failed_says_why_it_has_no_error(tmp_path, phantom_dir, phantom_lists):
    """The T/L overall row showed `-` where every answer failed, without saying why."""
    _run("seeded", 5, 3, phantom_dir, tmp_path, phantom_lists)
    outcomes = run_baseline("oracle", FAMILY, phantom_dir, tmp_path / f"MedVision-Phantom-{FAMILY}", "--model_name",
                            "unreadable", "--sample_limit", "3", lists=phantom_lists,
                            backend=lambda cfg, data: _Unreadable())
    assert all(o.state == "done" for o in outcomes)  # answered (parse failures are answers), so complete
    view = next(v for v in leaderboard_views(FAMILY, _full_board(tmp_path), 0.95) if v.title.endswith(AGG))
    row = next(r for r in view.rows if r[1] == "unreadable")
    mae = view.headers.index("avgMAE (mm)")
    assert row[mae] == NO_SUCCESS and row[view.headers.index("avgMRE")] == NO_SUCCESS
    assert row[view.headers.index("N")] == "0"  # upstream's T/L rows leave out a group without a success
    assert f"{NO_SUCCESS} = no answer of the run in this row succeeded" in view.caption
    other = next(r for r in view.rows if r[1] == "seeded")
    assert other[mae] != NO_SUCCESS
