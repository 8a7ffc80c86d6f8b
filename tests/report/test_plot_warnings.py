"""The published-comparison plot draws without any library warning (the figure's layout engine owns its margins)."""

from __future__ import annotations

import warnings

from medvision_bm.report.plots import PlotJob, draw_against


def test_against_plot_draws_without_warnings(tmp_path):
    points = [{"label": f"model-{i}", "x": 1.0 + i, "y": 1.5 + i, "lo": 1.2 + i, "hi": 1.9 + i} for i in range(3)]
    job = PlotJob("against", str(tmp_path / "against.png"), "ours against published",
                  {"panels": [{"title": "MRE", "points": points}, {"title": "MAE (mm)", "points": points}]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        draw_against(job)
    assert [str(w.message) for w in caught] == []
    assert (tmp_path / "against.png").stat().st_size > 1000


def test_error_axes_are_padded_so_a_perfect_run_lies_inside(tmp_path):
    from medvision_bm.report.plots import ERROR_PERCENTILES, errors_figure

    n = len(ERROR_PERCENTILES)
    job = PlotJob("errors", str(tmp_path / "e.png"), "errors", {
        "labels": ["oracle", "mean"], "xlabel": "MRE",
        "panels": [{"title": "task", "q": [[0.0] * n, [0.2 + 0.1 * k for k in range(n)]], "mean": [0.0, 0.4]}]})
    ax = errors_figure(job).axes[0]
    left, right = ax.get_xlim()
    assert left < 0.0 < right  # the perfect run's zero is strictly inside the frame
    assert right > 0.2 + 0.1 * (n - 1)
