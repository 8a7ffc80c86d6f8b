"""Reporting after the runs: re-score stored answers (`parse`), summarize with upstream MedVision's tables first and
bootstrap CIs, plot, write the HTML report, compare two runs.

Nothing here imports torch, transformers or lmms-eval, nor the runner's task loop: scoring goes through
``tasks.store_scoring`` (the runner's own code path) and the store format through ``runner.store``. It runs on any
CPU with the `report` extra installed.
"""
