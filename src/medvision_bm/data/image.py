"""The 2D slice exactly as upstream MedVision shows it to a model.

Upstream (``medvision_lmms_eval/.../tasks/medvision/medvision_utils.py``: master c221615 ``_load_nifti_2d`` +
``doc_to_visual``; newest @0a4c5e2, with ``normalize_img`` and helpers from ``src/medvision_bm/sft/sft_utils.py``
@0a4c5e2; tables in ``upstream_configs.json``; spec: docs/spec/image-and-prompts.md, part 1):

1. Read: the volume as ``get_fdata()`` -> float32 (NIfTI ``scl_slope``/``scl_inter`` applied, on-disk voxel order, no
   reorientation), then the raw array slice: ``slice_dim`` 0 -> ``vol[k, :, :]``, 1 -> ``vol[:, k, :]``, 2 ->
   ``vol[:, :, k]``. Rows (height) = the first remaining volume axis, columns (width) = the second; no transpose, flip
   or rotation. The pixel size (height, width) is the header's voxel spacing of those two axes (``np.float32``).
2. Optional resize (``reshape_hw``), **before** normalisation: ``scipy.ndimage.zoom`` of the float slice with factors
   ``new / old`` (true division); order 1 in the paper era; in the newest code order 0 when the slice holds at most
   two distinct values, else 1. Pixel size / factor.
3. Normalise to uint8 (always truncation, ``astype(uint8)``): paper era per-slice min-max; newest: a CT HU window
   chosen by the label's anatomy group, or the 0.5/99.5 percentile stretch (see :func:`intensity_rule`).
4. PIL grey (``L``) -> ``RGB``.

Reading goes through nibabel's array proxy: a slice of an uncompressed file is read alone from a memory map (after
checking that the file is as long as its header says); a compressed file (``.nii.gz``, which can only be decompressed
from its start) is decoded once, in its stored dtype, into a cache bounded in bytes, and later slices are views of
it. A compressed volume larger than that budget is read slice by slice through the proxy; then a truncation past the
requested slice goes unnoticed (upstream, reading it all, fails). Scaling is applied to the slice only, with
nibabel's own ``get_fdata`` arithmetic, so the values equal upstream's ``get_fdata().astype("float32")[...]`` bit for
bit. Returned arrays are read-only (they may be cached). A window over stored integers of at most 16 bits (no resize)
is applied in one pass: each pixel looked up in a table of that same arithmetic over every value of the stored type.
"""

from __future__ import annotations

import os
import threading
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal, SupportsInt

import numpy as np

from medvision_bm.data import upstream_configs as cfg
from medvision_bm.data.byte_lru import ByteLRU
from medvision_bm.data.docs import RunProtocol
from medvision_bm.data.volume_header import check_header
from medvision_bm.errors import UserError

if TYPE_CHECKING:
    from nibabel.arrayproxy import ArrayProxy
    from nibabel.spatialimages import SpatialImage
    from PIL.Image import Image as PILImage

PROTOCOLS: tuple[str, ...] = tuple(RunProtocol)
RULE_KINDS: tuple[str, ...] = ("minmax", "window", "percentile")
PERCENTILES: tuple[float, float] = (0.5, 99.5)
_COMPRESSED_SUFFIXES = (".gz", ".bz2", ".zst")

#: A NIfTI scale factor as nibabel's array proxy holds it (``scl_slope``, ``scl_inter``)
Scale = float | np.floating
#: A pixel size (height, width): the header's ``np.float32`` spacing, divided by a resize's factors
PixelSize = tuple[np.floating, np.floating]

DEFAULT_VOLUME_CACHE_BYTES = 1 << 30  # decoded volumes (stored dtype), e.g. six 512x512x300 int16 CTs
DEFAULT_SLICE_CACHE_BYTES = 64 << 20  # float32 slices, e.g. 64 slices of 512x512


_VOLUMES = ByteLRU(DEFAULT_VOLUME_CACHE_BYTES)  # decoded volumes, by file version
_SLICES = ByteLRU(DEFAULT_SLICE_CACHE_BYTES)  # float32 slices, by file version, axis and index


def configure_cache(*, volume_bytes: int | None = None, slice_bytes: int | None = None) -> None:
    """Set the byte budgets of the decoded-volume and slice caches (0 disables one); empties both."""
    if volume_bytes is not None:
        _VOLUMES.max_bytes = max(0, int(volume_bytes))
    if slice_bytes is not None:
        _SLICES.max_bytes = max(0, int(slice_bytes))
    clear_cache()


def clear_cache() -> None:
    _VOLUMES.clear()
    _SLICES.clear()
    _file_info.cache_clear()


def cache_usage() -> dict[str, int]:
    """Bytes and entries held now, and the budgets."""
    return {"volume_bytes": _VOLUMES.nbytes, "volume_entries": len(_VOLUMES), "volume_max_bytes": _VOLUMES.max_bytes,
            "slice_bytes": _SLICES.nbytes, "slice_entries": len(_SLICES), "slice_max_bytes": _SLICES.max_bytes}


# ====================================================================== reading

def _one_line(text: object, limit: int = 160) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _unreadable(path: str, exc: BaseException) -> UserError:
    return UserError(f"cannot read NIfTI file {path} ({type(exc).__name__}: {_one_line(exc)}); the file is corrupt or "
                     "truncated: re-download or regenerate it")


def _read_errors() -> tuple[type[BaseException], ...]:
    from nibabel.filebasedimages import ImageFileError

    errors: tuple[type[BaseException], ...] = (ImageFileError, OSError, EOFError, zlib.error, ValueError, TypeError)
    try:
        from isal.isal_zlib import error as isal_error

        # isal's stub declares ``error`` an exception instance; it is the exception class IsalError
        errors += (isal_error,)  # type: ignore[operator]
    except ImportError:  # pragma: no cover - isal is a core dependency
        pass
    return errors


def _file_key(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UserError(f"image file {path} does not exist; check the data directory (--data_dir) or re-download "
                        "the dataset") from None
    except OSError as exc:
        raise UserError(f"cannot open image file {path} ({_one_line(exc)}); check its permissions") from None
    if not p.is_file():
        raise UserError(f"image file {path} is not a file; check the data directory (--data_dir)")
    # not resolved: nibabel tells the format from the name, and a cache symlink (HF hub) points at a bare blob
    return os.path.abspath(p), st.st_mtime_ns, st.st_size


@dataclass(frozen=True)
class _Info:
    shape: tuple[int, ...]
    zooms: tuple[np.float32, ...]
    stored_dtype: np.dtype
    offset: int
    slope: Scale
    inter: Scale
    order: str
    compressed: bool
    proxy: bool


def _load_volume(path: str) -> SpatialImage:
    """The image nibabel reads from ``path`` (header only; voxels on demand), which must be a volume on a grid."""
    import nibabel as nib
    from nibabel.spatialimages import SpatialImage

    img = nib.load(path)
    if not isinstance(img, SpatialImage):
        raise UserError(f"{path} is not an image volume (nibabel reads it as a {type(img).__name__}); pass a NIfTI "
                        "file")
    return img


@lru_cache(maxsize=256)
def _file_info(key: tuple[str, int, int]) -> _Info:
    """Header facts of one file version (cheap: the header only)."""
    from nibabel.arrayproxy import ArrayProxy

    path = key[0]
    try:
        img = _load_volume(path)
        shape = tuple(int(n) for n in img.shape)
        zooms = tuple(img.header.get_zooms())
    except _read_errors() as exc:
        raise _unreadable(path, exc) from None
    dataobj = img.dataobj
    proxy = dataobj if isinstance(dataobj, ArrayProxy) else None
    compressed = path.lower().endswith(_COMPRESSED_SUFFIXES)
    check_header(path, shape, zooms, key[2], np.dtype(img.get_data_dtype()).itemsize)
    if proxy is not None and not compressed:
        needed = int(proxy.offset) + int(np.prod(shape, dtype=np.int64)) * np.dtype(proxy.dtype).itemsize
        if key[2] < needed:  # upstream reads the whole volume and would fail; a slice read alone might not notice
            raise UserError(f"cannot read NIfTI file {path} (it has {key[2]} bytes, its header needs {needed}); the "
                            "file is truncated: re-download or regenerate it")
    return _Info(
        shape=shape,
        # nibabel annotates get_zooms() as floats; a NIfTI header's are np.float32 (its pixdim dtype)
        zooms=zooms,  # type: ignore[arg-type]
        stored_dtype=np.dtype(proxy.dtype) if proxy is not None else np.dtype(img.get_data_dtype()),
        offset=int(proxy.offset) if proxy is not None else 0,
        slope=proxy.slope if proxy is not None else 1.0,
        inter=proxy.inter if proxy is not None else 0.0,
        order=str(getattr(dataobj, "order", "F")),
        compressed=compressed,
        proxy=proxy is not None,
    )


def _scaled_like_get_fdata(raw: np.ndarray, slope: Scale, inter: Scale) -> np.ndarray:
    """nibabel ``get_fdata()`` (float64) arithmetic on a raw block, then upstream's ``astype("float32")``.

    Follows ``ArrayProxy.__array__(dtype=float64)``: scale factors cast to float64, ``apply_read_scaling``, result
    promoted to float64; elementwise, so a slice of it equals the slice of the whole volume's result.
    """
    from nibabel.volumeutils import apply_read_scaling

    if (slope, inter) == (1, 0) and (raw.dtype.kind == "f" or (raw.dtype.kind in "iu" and raw.dtype.itemsize <= 2)):
        # no scaling: float64 holds these values exactly, so float64 then float32 rounds as float32 directly does
        return raw.astype(np.float32)
    f64 = np.dtype(np.float64)
    scl_slope = np.float64(slope) if np.can_cast(np.asanyarray(slope), f64) else slope
    scl_inter = np.float64(inter) if np.can_cast(np.asanyarray(inter), f64) else inter
    scaled = apply_read_scaling(raw, scl_slope, scl_inter)
    scaled = scaled.astype(np.promote_types(scaled.dtype, f64), copy=False)
    return scaled.astype(f64, copy=False).astype(np.float32)


def _raw_proxy(path: str, info: _Info) -> ArrayProxy:
    """An array proxy of the stored values (no scaling): slicing it reads only what the slice needs."""
    from nibabel.arrayproxy import ArrayProxy

    return ArrayProxy(path, (info.shape, info.stored_dtype, info.offset), order=info.order)


def _slicer(slice_dim: int, slice_idx: int) -> tuple[slice | int, ...]:
    sl: list[slice | int] = [slice(None)] * 3
    sl[slice_dim] = slice_idx
    return tuple(sl)


def _check_index(path: str, shape: tuple[int, ...], slice_dim: object, slice_idx: object) -> tuple[int, int]:
    if len(shape) != 3:
        raise UserError(f"image file {path} has shape {shape}; upstream slices 3D volumes only: use a 3D NIfTI "
                        "volume (re-download or regenerate the file)")
    try:
        if not isinstance(slice_dim, SupportsInt) or not isinstance(slice_idx, SupportsInt):
            raise TypeError  # (text, which int() would parse, never equals its number: refused below alike)
        dim, idx = int(slice_dim), int(slice_idx)
        if dim != slice_dim or idx != slice_idx or isinstance(slice_dim, bool) or isinstance(slice_idx, bool):
            raise ValueError
    except (TypeError, ValueError):
        raise UserError(f"slice_dim {slice_dim!r} / slice_idx {slice_idx!r} for {path} must be integers; "
                        "check the sample's plan") from None
    if dim not in (0, 1, 2):
        raise UserError(f"slice_dim {dim} for {path} must be 0, 1 or 2; check the sample's plan")
    if not 0 <= idx < shape[dim]:
        raise UserError(f"slice {idx} on axis {dim} is outside image {path} of shape {shape}; the plan does not "
                        "match the image: regenerate the plan or re-download the data")
    return dim, idx


def _read_raw_slice(key: tuple[str, int, int], info: _Info, dim: int, idx: int) -> np.ndarray:
    path = key[0]
    slicer = _slicer(dim, idx)
    try:
        if not info.proxy:  # not an array proxy (other formats): whole-volume read, as upstream
            return np.asanyarray(_load_volume(path).dataobj)[slicer]
        if not info.compressed:  # memory-mapped: only the pages the slice touches are read
            return np.array(_raw_proxy(path, info)[...][slicer])
        volume = _VOLUMES.get(key)
        if volume is not None:
            return volume[slicer]
        nbytes = int(np.prod(info.shape, dtype=np.int64)) * info.stored_dtype.itemsize
        if _VOLUMES.fits(nbytes):
            return _decoded_once(key, info)[slicer]
        return np.asarray(_raw_proxy(path, info)[slicer])
    except _read_errors() as exc:
        raise _unreadable(path, exc) from None


_DECODING: dict[tuple[str, int, int], threading.Lock] = {}  # file version -> the lock of the thread decoding it
_DECODING_LOCK = threading.Lock()


def _decoded_once(key: tuple[str, int, int], info: _Info) -> np.ndarray:
    """The decoded volume of a compressed file version, put in the volume cache. A compressed stream is
    decompressed from its start for every read, so it is decoded once, in its stored dtype; threads asking for a
    volume another thread is decoding wait for that one's array instead of decoding it again (requests in flight
    load slices of one volume on every encoder thread at once)."""
    path = key[0]
    with _DECODING_LOCK:
        lock = _DECODING.setdefault(key, threading.Lock())
    with lock:
        try:
            volume = _VOLUMES.get(key)  # decoded by the thread this one waited for
            if volume is None:
                volume = _inflate_volume(path, info) if path.lower().endswith(".gz") else np.asarray(
                    _raw_proxy(path, info)[...])
                volume.setflags(write=False)
                _VOLUMES.put(key, volume, volume.nbytes)
            return volume
        finally:
            with _DECODING_LOCK:  # a thread arriving later finds the volume in the cache (or decodes it anew)
                if _DECODING.get(key) is lock:
                    del _DECODING[key]


_INFLATE_CHUNK = 16 << 20


def _inflate_volume(path: str, info: _Info) -> np.ndarray:
    """The stored values of a gzipped volume, inflated straight into their array (python-isal when present, else
    the stdlib): about the volume's size in memory, where reading the stream whole first needs twice that."""
    try:
        from isal.igzip import open as gzip_open
    except ImportError:  # pragma: no cover - isal is a core dependency
        from gzip import open as gzip_open

    count = int(np.prod(info.shape, dtype=np.int64))
    flat = np.empty(count, info.stored_dtype)
    # numpy's stubs give ndarray its buffer protocol (__buffer__) on Python 3.12+ only
    view = memoryview(flat.view(np.uint8))  # type: ignore[arg-type]
    with gzip_open(path, "rb") as stream:
        skip = info.offset
        while skip > 0:
            got = len(stream.read(min(skip, _INFLATE_CHUNK)))
            if not got:
                break
            skip -= got
        done = 0
        while done < len(view):
            got = stream.readinto(view[done:done + _INFLATE_CHUNK])
            if not got:
                raise EOFError(f"the stream ends after {done} of {len(view)} data bytes")
            done += got
    volume = flat.reshape(info.shape, order="F" if info.order == "F" else "C")
    return volume


def read_slice(path: str | os.PathLike[str], slice_dim: int,
               slice_idx: int) -> tuple[np.ndarray, tuple[np.float32, np.float32]]:
    """The float32 2D slice upstream reads, and its pixel size (height, width) from the header (``np.float32``).

    ``slice_dim`` 0 -> ``vol[k, :, :]`` (pixel ``zooms[1], zooms[2]``), 1 -> ``vol[:, k, :]`` (``zooms[0],
    zooms[2]``), 2 -> ``vol[:, :, k]`` (``zooms[0], zooms[1]``), ``vol`` = ``get_fdata().astype("float32")``.
    One-line :class:`UserError` for a missing/unreadable/truncated file, a non-3D volume, a bad index and a slice
    without any finite value. The array is read-only.
    """
    key = _file_key(path)
    info = _file_info(key)
    dim, idx = _check_index(str(path), info.shape, slice_dim, slice_idx)
    zooms = info.zooms
    pixel_hw = (zooms[1], zooms[2]) if dim == 0 else (zooms[0], zooms[2]) if dim == 1 else (zooms[0], zooms[1])
    skey = (key, dim, idx)
    cached = _SLICES.get(skey)
    if cached is not None:
        return cached, pixel_hw
    raw = _read_raw_slice(key, info, dim, idx)
    plane = _scaled_like_get_fdata(raw, info.slope, info.inter)
    if not np.isfinite(plane).any():
        raise UserError(f"slice {idx} on axis {dim} of {path} has no finite value (all NaN/inf); the image is "
                        "corrupt: re-download it or drop the sample")
    plane.setflags(write=False)
    _SLICES.put(skey, plane, plane.nbytes)
    return plane, pixel_hw


# ====================================================================== a window through a table

def _window_by_table(path: str | os.PathLike[str], slice_dim: int, slice_idx: int,
                     rule: IntensityRule) -> tuple[np.ndarray, tuple[np.float32, np.float32]] | None:
    """``rule.apply(read_slice(...))`` for a window rule on stored integers of at most 16 bits, in one pass: each
    stored value's uint8 is looked up in a table made by the very same arithmetic (scaling as ``get_fdata``, float32,
    clip, shift, divide, multiply, truncate) applied to every value the stored type holds. The arithmetic is
    elementwise and its types follow the dtypes alone, so each pixel gets the bits it gets on the plane. None (the
    plane path) when the table does not apply: other stored types, a scaled value that is not finite, an empty
    slice. Reading, its checks and its errors are :func:`read_slice`'s."""
    key = _file_key(path)
    info = _file_info(key)
    dim, idx = _check_index(str(path), info.shape, slice_dim, slice_idx)
    if info.stored_dtype.kind not in "iu" or info.stored_dtype.itemsize > 2 or not info.stored_dtype.isnative:
        return None
    raw = _read_raw_slice(key, info, dim, idx)
    if raw.dtype != info.stored_dtype or raw.size == 0:
        return None
    table = _window_table(raw.dtype.str, info.slope, info.inter, rule.width, rule.level)
    if table is None:
        return None
    zooms = info.zooms
    pixel_hw = (zooms[1], zooms[2]) if dim == 0 else (zooms[0], zooms[2]) if dim == 1 else (zooms[0], zooms[1])
    return table[raw.view(f"u{raw.dtype.itemsize}")], pixel_hw


@lru_cache(maxsize=64)
def _window_table(dtype: str, slope: Scale, inter: Scale, width: float | None,
                  level: float | None) -> np.ndarray | None:
    """The uint8 of every value of the integer type ``dtype`` under a window, indexed by the value's unsigned bit
    pattern; None when a scaled value is not finite (the plane path says what it says of those)."""
    stored = np.dtype(dtype)
    values = np.arange(1 << (8 * stored.itemsize), dtype=f"u{stored.itemsize}").view(stored)
    scaled = _scaled_like_get_fdata(values, slope, inter)
    if width is None or level is None or not np.isfinite(scaled).all():
        return None
    table = normalize_window(scaled, width, level)
    table.setflags(write=False)
    return table


# ====================================================================== resize

def _check_protocol(protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")


def zoom_order(img: np.ndarray, protocol: str) -> Literal[0, 1]:
    """Interpolation order upstream uses: 1 (paper); newest: 0 for a slice with <= 2 distinct values, else 1."""
    _check_protocol(protocol)
    if protocol == "paper":
        return 1
    return 0 if len(np.unique(img)) <= 2 else 1


def resize_slice(img: np.ndarray, new_hw: tuple[int, int],
                 protocol: str) -> tuple[np.ndarray, tuple[float, float]]:
    """``scipy.ndimage.zoom`` of the float slice to ``new_hw`` (rows, cols); returns it and the zoom factors.

    Factors are ``(new_h / H, new_w / W)`` (Python true division); the caller divides the pixel size by them, as
    upstream does. scipy sizes the output ``round(H * f_h), round(W * f_w)``, which is ``new_hw`` for every size
    (checked here; upstream does not check and would carry on with zoom's shape while still dividing the pixel size by
    the requested factors).
    """
    from scipy.ndimage import zoom

    try:
        new_h, new_w = (int(v) for v in new_hw)
        if new_h <= 0 or new_w <= 0 or (new_h, new_w) != tuple(new_hw):
            raise ValueError
    except (TypeError, ValueError):
        raise UserError(f"reshape size {new_hw!r} must be two positive integers (rows, columns); fix "
                        "--reshape_image_hw") from None
    if img.ndim != 2:
        raise ValueError(f"resize_slice needs a 2D slice, got shape {img.shape}")
    old_h, old_w = img.shape
    factors = (new_h / old_h, new_w / old_w)
    out = zoom(img, factors, order=zoom_order(img, protocol))
    if out.shape != (new_h, new_w):
        raise RuntimeError(f"scipy.ndimage.zoom gave shape {out.shape} for {img.shape} -> {(new_h, new_w)}; "
                           "upstream would have used that shape: report this")
    return out, factors


# ====================================================================== intensity normalisation

def normalize_minmax(img: np.ndarray) -> np.ndarray:
    """Paper era: per-slice min-max over all pixels, x255 in the slice's dtype, truncated; a flat slice -> zeros."""
    lo, hi = img.min(), img.max()
    if hi > lo:
        return ((img - lo) / (hi - lo) * 255).astype(np.uint8)
    return np.zeros(img.shape, dtype=np.uint8)


def normalize_window(img: np.ndarray, width: float, level: float) -> np.ndarray:
    """Newest, CT: clip to ``[L - W/2, L + W/2]``, map to 0..255, truncated."""
    v_min, v_max = cfg.window_bounds(width, level)
    clipped = np.clip(img, v_min, v_max)
    return (((clipped - v_min) / (v_max - v_min)) * 255.0).astype(np.uint8)


def normalize_percentile(img: np.ndarray) -> np.ndarray:
    """Newest, non-window: clip to the slice's 0.5th..99.5th percentiles (numpy's default linear interpolation), map
    to 0..255, truncated; zero spread -> zeros."""
    v_min = np.percentile(img, PERCENTILES[0])
    v_max = np.percentile(img, PERCENTILES[1])
    if v_max - v_min == 0:
        return np.zeros(img.shape, dtype=np.uint8)
    clipped = np.clip(img, v_min, v_max)
    return (((clipped - v_min) / (v_max - v_min)) * 255.0).astype(np.uint8)


@dataclass(frozen=True)
class IntensityRule:
    """How a slice becomes 8-bit: ``kind`` "minmax" | "window" | "percentile"; a window carries (W, L), its preset
    name and the anatomy group that chose it."""

    kind: str
    width: float | None = None
    level: float | None = None
    preset: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in RULE_KINDS:
            raise ValueError(f"rule kind must be one of {RULE_KINDS}, not {self.kind!r}")
        if (self.kind == "window") != (self.width is not None and self.level is not None):
            raise ValueError("a window rule needs width and level; other rules take none")

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The window's clip range ``(L - W/2, L + W/2)``, or None."""
        if self.kind != "window" or self.width is None or self.level is None:  # a window rule has both
            return None
        return cfg.window_bounds(self.width, self.level)

    def apply(self, img: np.ndarray) -> np.ndarray:
        if self.kind == "minmax":
            return normalize_minmax(img)
        if self.kind == "window" and self.width is not None and self.level is not None:  # a window rule has both
            return normalize_window(img, self.width, self.level)
        return normalize_percentile(img)


MINMAX = IntensityRule("minmax")
PERCENTILE = IntensityRule("percentile")


def _task_id_text(task_id: str | int) -> str:
    if isinstance(task_id, bool):
        raise ValueError(f"task_id must be a string such as '01', not {task_id!r}")
    if isinstance(task_id, int | np.integer):
        return f"{int(task_id):02d}"
    return str(task_id)


def intensity_rule(dataset_name: str, task_id: str | int, task_type: str, image_modality: str | None,
                   label_name: str | None, protocol: str) -> IntensityRule:
    """The normalisation upstream applies to a sample (newest ``normalize_img`` for "current", min-max for "paper").

    Current: CT (``image_modality.lower() == "ct"``, exactly) with a label whose anatomy group (``label_map_regroup``)
    is not "Others" and a task not in ``TASK_LIST_FORCE_STANDARD_IMAGE_NORMALIZATION`` -> the group's HU window;
    any other CT sample and every non-CT sample -> the percentile stretch. ``task_id`` is the doc's string ("01");
    an int is written with two digits.

    Where upstream crashes (a CT sample without a label name, e.g. a CT A/D task; a CT label missing from
    ``label_map_regroup``; a group without a window) this raises a one-line UserError instead of choosing a rule.
    """
    _check_protocol(protocol)
    if protocol == "paper":
        return MINMAX
    if not isinstance(image_modality, str):
        raise UserError(f"{dataset_name} task {task_id} ({task_type}) has no image modality ({image_modality!r}); "
                        "upstream needs it to pick the normalisation: check the dataset's task metadata")
    if image_modality.lower() != "ct":
        return PERCENTILE
    tid = _task_id_text(task_id)
    where = f"{dataset_name} task {tid} ({task_type})"
    if label_name is None:
        raise UserError(f"CT sample of {where} has no label name, so upstream cannot choose its CT normalisation "
                        "(its normalize_img fails on it); render it with the paper protocol or leave the task out")
    group = cfg.anatomy_group(label_name)
    if group is None:
        raise UserError(f"CT label {label_name!r} of {where} is not in upstream's label_map_regroup, so upstream "
                        "cannot normalise it (its normalize_img fails); check the label name against the dataset "
                        "release")
    if cfg.is_forced_standard_normalization(dataset_name, tid, task_type) or group.lower() == "others":
        return PERCENTILE
    preset = cfg.ct_window_preset(group)
    if preset is None:
        raise UserError(f"anatomy group {group!r} of CT label {label_name!r} ({where}) has no HU window in upstream's "
                        "CT_HU_windows_WL (upstream asserts); check upstream_configs.json")
    width, level = cfg.hu_window_presets()[preset]
    return IntensityRule("window", width=width, level=level, preset=preset, group=group)


# ====================================================================== render

def render_gray(path: str | os.PathLike[str], slice_dim: int, slice_idx: int, *, reshape_hw: tuple[int, int] | None = None,
                rule: IntensityRule, protocol: str) -> tuple[np.ndarray, PixelSize]:
    """The uint8 grey slice (rows, cols) and its pixel size (height, width) after the optional resize.

    Order as upstream: read -> resize (float) -> normalise. The pixel size is the header's ``np.float32`` spacing
    divided by the zoom factors (numpy's own scalar promotion, as upstream: float32 under numpy 2). ``protocol`` picks
    the zoom order only; ``rule`` is applied as given (``intensity_rule(..., protocol)`` gives upstream's).
    """
    _check_protocol(protocol)
    if reshape_hw is None and rule.kind == "window":
        by_table = _window_by_table(path, slice_dim, slice_idx, rule)
        if by_table is not None:
            return by_table
    plane, (pixel_h, pixel_w) = read_slice(path, slice_dim, slice_idx)
    if reshape_hw is not None:
        plane, (f_h, f_w) = resize_slice(plane, reshape_hw, protocol)
        pixel_h, pixel_w = pixel_h / f_h, pixel_w / f_w
    return rule.apply(plane), (pixel_h, pixel_w)


def render(path: str | os.PathLike[str], slice_dim: int, slice_idx: int, *, reshape_hw: tuple[int, int] | None = None,
           rule: IntensityRule, protocol: str) -> tuple[PILImage, PixelSize]:
    """The slice as upstream's PIL image (grey ``L`` converted to ``RGB``) and its pixel size after the resize."""
    from PIL import Image

    gray, pixel_hw = render_gray(path, slice_dim, slice_idx, reshape_hw=reshape_hw, rule=rule, protocol=protocol)
    return Image.fromarray(np.ascontiguousarray(gray)).convert("RGB"), pixel_hw


def header_zooms(path: str | os.PathLike[str]) -> tuple[np.float32, np.float32, np.float32]:
    """The voxel spacing of a volume from its NIfTI header (``np.float32``, as ``get_zooms()``); header only."""
    zooms = _file_info(_file_key(path)).zooms
    return zooms[0], zooms[1], zooms[2]
