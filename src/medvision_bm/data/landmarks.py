"""The landmarks of one slice, read from a case's landmark file as upstream reads them (``sft_utils.py`` @0a4c5e2,
``_get_landmarks_coords`` and ``_extract_3dCoor_to_2dCoor``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from medvision_bm.errors import UserError

_AXIS_KEYS = ("slice_landmarks_x", "slice_landmarks_y", "slice_landmarks_z")


def slice_landmarks(path: str | Path, slice_dim: int, slice_idx: int) -> dict[str, tuple[float, float]]:
    """Landmark key -> (row, col) on one slice: every entry of ``slice_landmarks_<axis>`` for that slice merged (a
    T/L entry's list holds one lesion: its first item), the slice axis dropped from each 3-D coordinate; entries that
    are not 3-D coordinates are left out."""
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise UserError(f"landmark file {path} cannot be read ({exc}); re-download the dataset") from None
    merged: dict[str, Any] = {}
    entries = [e for e in data.get(_AXIS_KEYS[slice_dim], []) if e.get("slice_idx") == slice_idx]
    if not entries:
        raise UserError(f"landmark file {path} has no entry for slice {slice_idx} of axis {'xyz'[slice_dim]}; "
                        "the plan and the landmark files disagree: re-download the dataset")
    for entry in entries:
        marks = entry.get("landmarks")
        merged.update(marks[0] if isinstance(marks, list) else marks)
    keep = [a for a in range(3) if a != slice_dim]
    # a T/L lesion entry also carries numbers that are no landmark (``ROI_pixels_count``)
    return {k: (float(v[keep[0]]), float(v[keep[1]])) for k, v in merged.items()
            if isinstance(v, list) and len(v) == 3}
