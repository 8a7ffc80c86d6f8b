"""NIfTI slices as images: pick the axis and index, orient, normalise to 8-bit RGB, optionally resize; cached.

Orientation (shared by the loader and the planner, so annotations and pixels always agree): for a volume
indexed [i, j, k] and slice axis ``d``, the two remaining axes (a, b) in order become the image's columns (a)
and rows (b, reversed so the highest index is at the top). The native pixel is ``spacing[b]`` mm high and
``spacing[a]`` mm wide.
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from medvision_bm.errors import UserError


def remaining_axes(slice_dim: int) -> tuple[int, int]:
    a, b = (ax for ax in range(3) if ax != slice_dim)
    return a, b


def to_display(plane2d: np.ndarray) -> np.ndarray:
    """Rows = second remaining axis reversed, columns = first remaining axis."""
    return np.flipud(plane2d.T)


def slice_to_display(volume: np.ndarray, slice_dim: int, slice_idx: int) -> np.ndarray:
    return to_display(np.take(volume, slice_idx, axis=slice_dim))


def voxel_to_display_xy(ijk: tuple[float, float, float], slice_dim: int, shape: tuple[int, int, int]) -> tuple[float, float]:
    """A voxel centre (integer indices) -> (x, y) in the display pixel frame (pixel centres at +0.5)."""
    a, b = remaining_axes(slice_dim)
    x = ijk[a] + 0.5
    y = (shape[b] - 1 - ijk[b]) + 0.5
    return float(x), float(y)


def pixel_hw_mm(spacing: tuple[float, float, float], slice_dim: int) -> tuple[float, float]:
    a, b = remaining_axes(slice_dim)
    return float(spacing[b]), float(spacing[a])


def load_volume(path: str | Path) -> tuple[np.ndarray, tuple[float, float, float]]:
    """Load a 3D (or 2D, treated as one slice) NIfTI volume and its voxel spacing; one-line errors for bad files."""
    return _load_volume_cached(str(Path(path).resolve()), _mtime(path))


def _mtime(path: str | Path) -> float:
    try:
        return Path(path).stat().st_mtime
    except FileNotFoundError:
        raise UserError(f"image file {path} does not exist; check --data_dir or regenerate the data") from None


@lru_cache(maxsize=4)
def _load_volume_cached(path: str, mtime: float) -> tuple[np.ndarray, tuple[float, float, float]]:
    import nibabel as nib
    from nibabel.filebasedimages import ImageFileError

    try:
        img = nib.load(path)
        data = np.asanyarray(img.dataobj)
        zooms = tuple(float(z) for z in img.header.get_zooms()[:3])
    except (ImageFileError, OSError, EOFError, zlib.error, ValueError) as exc:
        raise UserError(f"cannot read NIfTI file {path} ({type(exc).__name__}: {str(exc)[:120]}); "
                        "the file is corrupt or truncated: regenerate or re-download it") from None
    if data.ndim == 2:
        data = data[:, :, None]
    if data.ndim == 4 and data.shape[3] == 1:
        data = data[..., 0]
    if data.ndim != 3:
        raise UserError(f"NIfTI file {path} has shape {data.shape}; a 3D volume (or one 2D image) is required")
    while len(zooms) < 3:
        zooms = (*zooms, 1.0)
    return np.asarray(data, dtype=np.float32), zooms  # type: ignore[return-value]


def normalize_to_uint8(plane: np.ndarray, window: tuple[float, float] | None = None,
                       low_pct: float = 0.5, high_pct: float = 99.9) -> np.ndarray:
    """Clip to a fixed window (e.g. CT HU) or to the [low, high] percentiles of the slice; scale to 0..255."""
    finite = plane[np.isfinite(plane)]
    if finite.size == 0:
        return np.zeros(plane.shape, dtype=np.uint8)
    lo, hi = window if window else np.percentile(finite, [low_pct, high_pct])
    if hi <= lo:
        lo, hi = float(finite.min()), float(finite.max())
    if hi <= lo:
        return np.zeros(plane.shape, dtype=np.uint8)
    scaled = (np.nan_to_num(plane, nan=lo) - lo) / (hi - lo)
    return np.clip(np.rint(scaled * 255.0), 0, 255).astype(np.uint8)


def render_slice(image_path: str | Path, slice_dim: int, slice_idx: int, reshape_hw: tuple[int, int] | None = None,
                 window: tuple[float, float] | None = None):
    """The slice as a PIL RGB image, resized to ``reshape_hw`` (rows, cols) when given. Cached; returns a copy."""
    key = (str(Path(image_path).resolve()), _mtime(image_path), int(slice_dim), int(slice_idx),
           tuple(reshape_hw) if reshape_hw else None, tuple(window) if window else None)
    return _render_cached(*key).copy()


@lru_cache(maxsize=512)
def _render_cached(path: str, mtime: float, slice_dim: int, slice_idx: int, reshape_hw: tuple[int, int] | None,
                   window: tuple[float, float] | None):
    from PIL import Image

    volume, _ = _load_volume_cached(path, mtime)
    if not 0 <= slice_dim < 3 or not 0 <= slice_idx < volume.shape[slice_dim]:
        raise UserError(f"slice {slice_idx} on axis {slice_dim} is outside image {path} of shape {volume.shape}; "
                        "the plan does not match the image: regenerate the data")
    gray = normalize_to_uint8(slice_to_display(volume, slice_dim, slice_idx), window)
    img = Image.fromarray(gray).convert("RGB")
    if reshape_hw:
        h, w = reshape_hw
        img = img.resize((int(w), int(h)), Image.Resampling.BILINEAR)
    return img


def clear_caches() -> None:
    _load_volume_cached.cache_clear()
    _render_cached.cache_clear()
