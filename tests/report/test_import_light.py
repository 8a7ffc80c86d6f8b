"""The parse and summarize paths import neither torch, transformers nor lmms-eval, nor the runner's loop."""

from __future__ import annotations

import subprocess
import sys

from mvtest_support import REPO

MODULES = [
    "medvision_bm.report.parse_cli", "medvision_bm.report.summarize_cli", "medvision_bm.report.compare_cli",
    "medvision_bm.report.rescore", "medvision_bm.report.load", "medvision_bm.report.tables",
    "medvision_bm.report.summarize", "medvision_bm.report.browser", "medvision_bm.report.html",
    "medvision_bm.report.plots", "medvision_bm.report.compare", "medvision_bm.report.groups",
    "medvision_bm.report.views", "medvision_bm.tasks.store_scoring", "medvision_bm.tasks.hooks",
    "medvision_bm.benchmark.parse_outputs",
    "medvision_bm.benchmark.summarize_detection_task", "medvision_bm.benchmark.summarize_TL_task",
    "medvision_bm.benchmark.summarize_AD_task",
]


def test_report_path_imports_no_heavy_packages() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {MODULES!r}: importlib.import_module(m)\n"
        "import matplotlib; matplotlib.use('Agg')\n"
        "from medvision_bm.report.plots import draw_bars\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'lmms_eval', 'vllm', 'datasets'})\n"
        "heavy += [m for m in ('medvision_bm.runner.loop',) if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "", f"imported: {res.stdout.strip()}"
