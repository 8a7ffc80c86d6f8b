"""Reporting after the runs: re-parse stored answers, summarize with bootstrap CIs, plot, write the HTML report.

Nothing here imports torch, transformers or lmms-eval: it runs on any CPU with the `report` extra installed.
"""
