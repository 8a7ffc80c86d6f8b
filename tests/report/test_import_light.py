"""The parse and summarize paths import neither torch, transformers nor lmms-eval, nor the runner's loop."""

from __future__ import annotations

from mvtest_support import heavy_imports

MODULES = [
    "medvision_bm.cli.parse", "medvision_bm.cli.summarize", "medvision_bm.cli.compare",
    "medvision_bm.score.rescore", "medvision_bm.report.load", "medvision_bm.report.tables",
    "medvision_bm.report.summarize", "medvision_bm.report.browser", "medvision_bm.report.html",
    "medvision_bm.report.plots", "medvision_bm.report.compare", "medvision_bm.report.groups",
    "medvision_bm.report.views", "medvision_bm.score.store_scoring", "medvision_bm.tasks.hooks",
    "medvision_bm.benchmark.parse_outputs",
    "medvision_bm.benchmark.summarize_detection_task", "medvision_bm.benchmark.summarize_TL_task",
    "medvision_bm.benchmark.summarize_AD_task", "medvision_bm.report.published", "medvision_bm.report.against_published",
    "medvision_bm.report.removed_filter", "medvision_bm.report.upstream_summaries", "medvision_bm.data.removed_samples",
    "medvision_bm.report.cda", "medvision_bm.report.cda_stats", "medvision_bm.report.published_cda",
]


def test_report_path_imports_no_heavy_packages() -> None:
    setup = (f"import importlib\nfor m in {MODULES!r}: importlib.import_module(m)\n"
             "import matplotlib; matplotlib.use('Agg')\nfrom medvision_bm.report.plots import draw_bars\n"
             "from medvision_bm.report.published import aliases, published_rows\n"
             "names = [aliases(r) for r in published_rows()]\n")
    assert heavy_imports(setup) == []
