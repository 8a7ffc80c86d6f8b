"""Reporting after the runs: upstream MedVision's tables first, bootstrap CIs, plots, the HTML report and its sample
browser, paired comparison of two runs.

Reads stores only (``medvision_bm.store``) and re-scores stale ones through ``medvision_bm.score``; reaches no
backend, runner, judge or importer (checked by the import contracts). Needs the `report` extra (polars,
matplotlib), never torch, transformers or lmms-eval.
"""
