"""The landmarks of one slice, read from a case's landmark file as upstream reads them (``sft_utils.py`` @0a4c5e2,
``_get_landmarks_coords`` and ``_extract_3dCoor_to_2dCoor``)."""

from __future__ import annotations

import zlib
from functools import lru_cache
from pathlib import Path

from medvision_bm import limits
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject

_AXIS_KEYS = ("slice_landmarks_x", "slice_landmarks_y", "slice_landmarks_z")


@lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int, size: int) -> JsonObject:
    """One landmark file's JSON (gzip or plain, at most limits.MAX_JSON_FILE_BYTES of text), kept for the next
    samples of its case (they come in case order); keyed by the file's version. Not to be changed by callers."""
    del mtime_ns, size  # cache key only
    what = f"landmark file {path}"
    raw = limits.read_bytes(path, "landmark file", limits.MAX_JSON_FILE_BYTES)
    if path.endswith(".gz"):
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        raw = inflate.decompress(raw, limits.MAX_JSON_FILE_BYTES + 1)
        if len(raw) > limits.MAX_JSON_FILE_BYTES:
            raise ValueError(f"it inflates past {limits.size_text(limits.MAX_JSON_FILE_BYTES)}")
        if not inflate.eof:
            raise ValueError("the gzip stream is cut short")
    data = limits.loads_json(raw, what)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def slice_landmarks(path: str | Path, slice_dim: int, slice_idx: int) -> dict[str, tuple[float, float]]:
    """Landmark key -> (row, col) on one slice: every entry of ``slice_landmarks_<axis>`` for that slice merged (a
    T/L entry's list holds one lesion: its first item), the slice axis dropped from each 3-D coordinate; entries that
    are not 3-D coordinates are left out."""
    path = Path(path)
    try:
        st = path.stat()
        data = _read(str(path), st.st_mtime_ns, st.st_size)
    except (OSError, ValueError, EOFError, zlib.error) as exc:
        raise UserError(f"landmark file {path} cannot be read ({exc}); re-download the dataset") from None
    try:
        merged = _merged(data, path, slice_dim, slice_idx)
        keep = [a for a in range(3) if a != slice_dim]
        # a T/L lesion entry also carries numbers that are no landmark (``ROI_pixels_count``)
        return {k: (_coord(v[keep[0]], k), _coord(v[keep[1]], k)) for k, v in merged.items()
                if isinstance(v, list) and len(v) == 3}
    except limits.BadField as exc:
        raise UserError(f"landmark file {path} cannot be read ({exc}); re-download the dataset") from None


def _merged(data: JsonObject, path: Path, slice_dim: int, slice_idx: int) -> dict[str, object]:
    """Every landmark of the entries of ``slice_idx`` on axis ``slice_dim``, merged in file order."""
    key = _AXIS_KEYS[slice_dim]
    entries = [e for e in (limits.object_field(item, f"an entry of {key}")
                           for item in limits.list_field(data.get(key, []), key))
               if e.get("slice_idx") == slice_idx]
    if not entries:
        raise UserError(f"landmark file {path} has no entry for slice {slice_idx} of axis {'xyz'[slice_dim]}; "
                        "the plan and the landmark files disagree: re-download the dataset")
    merged: dict[str, object] = {}
    for entry in entries:
        marks = entry.get("landmarks")
        merged.update(limits.object_field(marks[0] if isinstance(marks, list) else marks, "landmarks"))
    return merged


def _coord(value: object, key: str) -> float:
    """One coordinate of landmark ``key`` (a number, or its text, as ``float()`` reads it)."""
    if isinstance(value, int | float | str):
        return float(value)
    raise limits.BadField(f"landmark {key} has {limits.shown(value)}, not a number")
