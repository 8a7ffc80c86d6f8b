"""The checks a NIfTI header passes before any voxel of it is read (medvision_bm.data.image reads the slices)."""

from __future__ import annotations

import math

import numpy as np

from medvision_bm import limits
from medvision_bm.errors import UserError


def check_header(path: str, shape: tuple[int, ...], zooms: tuple[float | np.floating, ...], file_bytes: int,
                 itemsize: int) -> None:
    """A header the suite can read a slice of: 3D (upstream slices 3D volumes only), finite positive voxel sizes, and
    no more voxel bytes than limits.MAX_VOLUME_BYTES or than a gzip file of its size can inflate to (deflate's
    limit, limits.MAX_DEFLATE_RATIO), so that a small file claiming billions of voxels is refused before any read."""
    fix = "re-download or regenerate the file"
    if len(shape) != 3 or len(zooms) < 3:
        raise UserError(f"image file {path} has shape {shape}; upstream slices 3D volumes only: use a 3D NIfTI volume "
                        f"({fix})")
    bad = [float(z) for z in zooms[:3] if not (np.isfinite(z) and float(z) > 0)]
    if bad:
        raise UserError(f"image file {path} has voxel sizes {tuple(float(z) for z in zooms[:3])} (pixdim); a pixel "
                        f"size must be a positive number: fix the header ({fix})")
    claimed = math.prod(shape) * itemsize
    can_hold = limits.MAX_VOLUME_BYTES
    if path.lower().endswith(".gz"):
        can_hold = min(can_hold, limits.MAX_DEFLATE_RATIO * file_bytes)
    if claimed > can_hold:
        raise UserError(f"image file {path}: its header claims {shape} voxels ({limits.size_text(claimed)}), more than "
                        f"a file of {limits.size_text(file_bytes)} can hold or this suite reads "
                        f"({limits.size_text(limits.MAX_VOLUME_BYTES)} at most); the header is damaged: {fix}")
