"""lmms-eval hooks for the three families; plain functions of one row, testable without lmms-eval.

A row is ``{"key": ..., "payload": "<json of RunDoc>"}``: the doc, the view (the image size and pixel size the
model receives) and the prompt variant, all fixed by the runner before lmms-eval sees the row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medvision_bm.data.docs import RunDoc
from medvision_bm.data.slices import render_slice
from medvision_bm.tasks.metrics import SAMPLE_METRICS, score_answer, target
from medvision_bm.tasks.prompts import build_prompt


def rundoc(row: dict[str, Any]) -> RunDoc:
    return RunDoc.from_lmms_row(row)


def visual(rd: RunDoc):
    """The slice as a PIL RGB image, resized when the run reshapes images."""
    d = rd.doc
    return render_slice(Path(rd.data_root) / d.image, d.slice_dim, d.slice_idx,
                        reshape_hw=rd.view.reshape_hw, window=d.window)


def doc_to_visual(row: dict[str, Any]) -> list:
    return [visual(rundoc(row))]


def doc_to_text(row: dict[str, Any], lmms_eval_specific_kwargs: dict[str, Any] | None = None) -> str:
    rd = rundoc(row)
    return build_prompt(rd.doc, rd.view, rd.prompt_variant)


def doc_to_target(row: dict[str, Any]) -> str:
    return ", ".join(f"{v:.6g}" for v in target(rundoc(row).doc))


def process_results(row: dict[str, Any], results: list[str]) -> dict[str, float | None]:
    rd = rundoc(row)
    score = score_answer(rd.doc, rd.view, results[0] if results else None)
    out: dict[str, float | None] = {"success": 1.0 if score.success else 0.0}
    for name in SAMPLE_METRICS[rd.doc.family]:
        out[name] = score.metrics.get(name)
    return out


def mean_over_success(values: list[float | None]) -> float | None:
    """lmms-eval aggregation: the mean of the values present (failed samples carry None)."""
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None
