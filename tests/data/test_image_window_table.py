"""A CT window rendered through the per-type table (medvision_bm.data.image) gives upstream's pixels bit for bit.

Upstream's newest normalisation (YongchengYAO/MedVision ``src/medvision_bm/sft/sft_utils.py`` ``normalize_ct_img``
@0a4c5e2) windows ``get_fdata().astype("float32")`` of the slice: clip to ``[L - W/2, L + W/2]``, shift, divide by
the width, x255, ``astype(np.uint8)``. The reference below is that arithmetic on nibabel's own ``get_fdata``.
"""

from __future__ import annotations

import gzip

import nibabel as nib
import numpy as np
import pytest

from medvision_bm.data import image as im
from medvision_bm.data import upstream_configs as cfg
from medvision_bm.errors import UserError


@pytest.fixture(autouse=True)
def _fresh_cache():
    im.configure_cache(volume_bytes=im.DEFAULT_VOLUME_CACHE_BYTES, slice_bytes=im.DEFAULT_SLICE_CACHE_BYTES)
    yield
    im.configure_cache(volume_bytes=im.DEFAULT_VOLUME_CACHE_BYTES, slice_bytes=im.DEFAULT_SLICE_CACHE_BYTES)


def _save(path, data, slope, inter):
    """A single-file NIfTI-1 with exactly these stored values and scale factors."""
    hdr = nib.Nifti1Header()
    hdr.set_data_shape(data.shape)
    hdr.set_data_dtype(data.dtype)
    hdr.set_qform(np.diag([0.7, 0.8, 2.5, 1.0]), code=1)
    hdr.set_sform(np.diag([0.7, 0.8, 2.5, 1.0]), code=1)
    hdr.set_slope_inter(slope, inter)
    hdr["vox_offset"] = 352
    blob = hdr.binaryblock + b"\0" * 4 + np.asarray(data).tobytes(order="F")
    path.write_bytes(gzip.compress(blob) if str(path).endswith(".gz") else blob)
    return path


def _upstream(path, dim, idx, width, level):
    vol = nib.load(str(path)).get_fdata().astype("float32")
    plane = vol[idx] if dim == 0 else vol[:, idx] if dim == 1 else vol[:, :, idx]
    lo, hi = level - width / 2, level + width / 2
    return (((np.clip(plane, lo, hi) - lo) / (hi - lo)) * 255.0).astype(np.uint8)


def _volume(dtype, rng):
    """Every value of ``dtype`` once (in a 3D shape with odd sides), shuffled; 16-bit types over 64 x 64 x 16."""
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1, dtype=np.int64)
    rng.shuffle(values)
    shape = (64, 64, 16) if values.size == 1 << 16 else (8, 8, 4)
    return values.astype(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.int8, np.uint8])
@pytest.mark.parametrize(("slope", "inter"), [(None, None), (2.0, -5.0), (0.37, -1024.25)])
@pytest.mark.parametrize("suffix", [".nii.gz", ".nii"])
def test_every_stored_value_gets_upstreams_pixel(tmp_path, dtype, slope, inter, suffix):
    data = _volume(dtype, np.random.default_rng(7))
    path = _save(tmp_path / f"v{suffix}", data, 1.0 if slope is None else slope, 0.0 if inter is None else inter)
    for preset in ("soft_tissue", "lung", "brain", "bone"):
        width, level = cfg.hu_window_presets()[preset]
        rule = im.IntensityRule("window", width=width, level=level)
        for dim in range(3):
            for idx in (0, data.shape[dim] - 1):
                got, pixel = im.render_gray(path, dim, idx, rule=rule, protocol="current")
                want = _upstream(path, dim, idx, width, level)
                assert got.dtype == np.uint8 and got.shape == want.shape
                assert np.array_equal(got, want), (preset, dim, idx)
                assert pixel == im.read_slice(path, dim, idx)[1]


def test_the_table_and_the_plane_give_the_same_pixels(tmp_path):
    """A CT-like int16 volume rendered with the table, then again with the table out of the way (a float32 volume
    of the same values takes the plane path): the same pixels on every slice."""
    rng = np.random.default_rng(3)
    ct = np.rint(rng.normal(0, 400, size=(32, 24, 6))).clip(-1024, 3071).astype(np.int16)
    table = _save(tmp_path / "ct.nii.gz", ct, 1.0, 0.0)
    plane = _save(tmp_path / "ct_f32.nii.gz", ct.astype(np.float32), 1.0, 0.0)
    rule = im.intensity_rule("AMOS22", "01", "Box-Size", "CT", "liver", "current")
    for k in range(ct.shape[2]):
        assert np.array_equal(im.render_gray(table, 2, k, rule=rule, protocol="current")[0],
                              im.render_gray(plane, 2, k, rule=rule, protocol="current")[0])


def test_scaled_values_past_float32_take_the_plane_path_with_upstreams_pixels(tmp_path):
    """A slope that sends part of the type's range to inf in float32: that slice is rendered from the plane (as
    upstream: inf clipped to the window's top), the pixels still upstream's."""
    data = np.array([[[-32768, 32767], [0, 100]], [[-1, 1], [5, -5]]], np.int16)
    path = _save(tmp_path / "big.nii.gz", data, 1e37, 0.0)
    rule = im.IntensityRule("window", width=400, level=40)
    with np.errstate(over="ignore"):
        want = _upstream(path, 2, 0, 400, 40)
        got, _ = im.render_gray(path, 2, 0, rule=rule, protocol="current")
    assert np.array_equal(got, want) and want.max() == 255 and want.min() == 0


def test_a_bad_index_is_refused_as_before(tmp_path):
    path = _save(tmp_path / "v.nii.gz", np.zeros((4, 4, 2), np.int16), 1.0, 0.0)
    rule = im.IntensityRule("window", width=400, level=40)
    with pytest.raises(UserError, match="outside image"):
        im.render_gray(path, 2, 2, rule=rule, protocol="current")
