"""The slice as upstream MedVision renders it (medvision_bm.data.image) and upstream's config tables.

Pins (upstream YongchengYAO/MedVision):
* read + resize: ``src/medvision_bm/medvision_lmms-eval/lmms_eval/tasks/medvision/medvision_utils.py``
  ``_load_nifti_2d`` (master c221615, l.1027-1057: ``get_fdata().astype("float32")``, ``image_3d[k, :, :]`` /
  ``[:, k, :]`` / ``[:, :, k]``, pixel ``voxel_size[1:3]`` / ``voxel_size[0:1] + voxel_size[2:3]`` /
  ``voxel_size[0:2]``, ``zoom(image_2d, (new_h / H, new_w / W), order=1)``, pixel / factor); newest @0a4c5e2
  (the same loader in the viz scripts, e.g. ``script/visualization/viz_detection_responses.py`` @28f6c67):
  ``order=0 if len(np.unique(image_2d)) <= 2 else 1``.
* paper-era normalisation: master c221615 ``doc_to_visual`` l.89-96 (min-max x255 ``astype(np.uint8)``, flat ->
  zeros, ``Image.fromarray(..., mode="L").convert("RGB")``).
* newest normalisation: ``src/medvision_bm/sft/sft_utils.py`` ``normalize_ct_img``, ``normalize_general_img``,
  ``normalize_img`` @0a4c5e2: window ``[L - W/2, L + W/2]``,
  percentiles 0.5 / 99.5, ``image_modality.lower() in ["ct"]``, the forced-standard triple match, regroup "others".
* tables: ``src/medvision_bm/utils/configs.py`` (@9fff178; @1df0ffe; master c221615),
  ``HU_window_WL_map = {"soft_tissue": (400, 40), "lung": (1500, -600), "brain": (80, 40), "bone": (1800, 400)}``.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from medvision_bm.data import image as im
from medvision_bm.data import upstream_configs as cfg
from medvision_bm.errors import UserError

SLOPE, INTER = 2.0, -5.0
ZOOMS = (0.5, 0.75, 2.0)


@pytest.fixture(autouse=True)
def _fresh_cache():
    im.configure_cache(volume_bytes=im.DEFAULT_VOLUME_CACHE_BYTES, slice_bytes=im.DEFAULT_SLICE_CACHE_BYTES)
    yield
    im.configure_cache(volume_bytes=im.DEFAULT_VOLUME_CACHE_BYTES, slice_bytes=im.DEFAULT_SLICE_CACHE_BYTES)


def _affine(zooms=ZOOMS) -> np.ndarray:
    """A rotated (30 deg about z), scaled, shifted affine: the loader must not reorient by it."""
    c, s = math.cos(math.pi / 6), math.sin(math.pi / 6)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    aff = np.eye(4)
    aff[:3, :3] = rot @ np.diag(zooms)
    aff[:3, 3] = (-12.5, 30.0, 7.25)
    return aff


def _save(path, data, *, slope=None, inter=None, zooms=ZOOMS):
    """A single-file NIfTI-1 with exactly these stored values and scale factors (nib.save would rescale)."""
    if slope is None:
        nib.save(nib.Nifti1Image(data, _affine(zooms)), str(path))
        return path
    hdr = nib.Nifti1Header()
    hdr.set_data_shape(data.shape)
    hdr.set_data_dtype(data.dtype)
    hdr.set_qform(_affine(zooms), code=1)
    hdr.set_sform(_affine(zooms), code=1)
    hdr.set_slope_inter(slope, inter)
    hdr["vox_offset"] = 352
    blob = hdr.binaryblock + b"\0" * 4 + np.asarray(data).tobytes(order="F")
    path.write_bytes(gzip.compress(blob) if str(path).endswith(".gz") else blob)
    return path


@pytest.fixture()
def small_volume(tmp_path):
    """v[i, j, k] = 100 i + 10 j + k (int16, shape 3x4x5), stored with scl_slope 2 and scl_inter -5."""
    i, j, k = np.meshgrid(np.arange(3), np.arange(4), np.arange(5), indexing="ij")
    data = (100 * i + 10 * j + k).astype(np.int16)
    return _save(tmp_path / "small.nii.gz", data, slope=SLOPE, inter=INTER)


def _value(i, j, k):
    return SLOPE * (100 * i + 10 * j + k) + INTER


# ====================================================================== reading

def test_header_is_what_the_fixture_claims(small_volume):
    img = nib.load(str(small_volume))
    assert (img.dataobj.slope, img.dataobj.inter) == (SLOPE, INTER)  # nibabel moves them from header to proxy
    assert img.get_fdata()[1, 0, 0] == 195.0
    assert img.header.get_zooms() == pytest.approx(ZOOMS, abs=1e-6)
    assert not np.allclose(img.affine[:3, :3], np.diag(ZOOMS))  # rotated: a reorienting loader would differ


@pytest.mark.parametrize(("slice_dim", "slice_idx", "shape", "cells", "axes", "pixel_mm"), [
    # slice_dim 0: rows are axis 1, columns axis 2 (vol[1, 0, 0] is row 0 column 0, ...)
    (0, 1, (4, 5), {(0, 0): ((1, 0, 0), 195.0), (0, 4): ((1, 0, 4), 203.0), (3, 0): ((1, 3, 0), 255.0)}, (1, 2),
     (0.75, 2.0)),
    # slice_dim 1: rows are axis 0, columns axis 2
    (1, 2, (3, 5), {(0, 0): ((0, 2, 0), 35.0), (2, 0): ((2, 2, 0), 435.0), (0, 4): ((0, 2, 4), 43.0)}, (0, 2),
     (0.5, 2.0)),
    # slice_dim 2: rows are axis 0, columns axis 1
    (2, 3, (3, 4), {(0, 0): ((0, 0, 3), 1.0), (2, 0): ((2, 0, 3), 401.0), (0, 3): ((0, 3, 3), 61.0)}, (0, 1),
     (0.5, 0.75)),
])
def test_a_slice_keeps_the_other_two_axes_in_order_as_rows_and_columns(small_volume, slice_dim, slice_idx, shape,
                                                                        cells, axes, pixel_mm):
    plane, pixel = im.read_slice(small_volume, slice_dim, slice_idx)
    assert plane.shape == shape and plane.dtype == np.float32
    for (row, col), (voxel, value) in cells.items():
        assert plane[row, col] == _value(*voxel) == value, (row, col)
    zooms = nib.load(str(small_volume)).header.get_zooms()
    assert pixel == (zooms[axes[0]], zooms[axes[1]]) and all(type(p) is np.float32 for p in pixel)
    assert pixel == pytest.approx(pixel_mm, abs=1e-6)


CASES = [
    ("int16", 0.37, -1024.3),
    ("int16", None, None),
    ("uint8", 1.5, 0.25),
    ("int32", 1e-3, 7.0),
    ("float32", 3.3, 1.1),
    ("float64", None, None),
    ("uint16", 1.0, 0.0),  # scale factors that scale nothing
    ("float32", 1.0, 0.0),
]


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
@pytest.mark.parametrize(("dtype", "slope", "inter"), CASES)
@pytest.mark.parametrize("volume_cache", [True, False])
def test_slices_equal_get_fdata_bit_for_bit(tmp_path, suffix, dtype, slope, inter, volume_cache):
    """Upstream: ``img.get_fdata().astype("float32")`` then the raw slice; ours reads the slice alone."""
    rng = np.random.default_rng(7)
    if np.dtype(dtype).kind == "f":
        data = rng.normal(0, 500, (6, 7, 8)).astype(dtype)
    else:
        info = np.iinfo(dtype)
        data = rng.integers(max(info.min, -40000), min(info.max, 40000), (6, 7, 8), endpoint=True).astype(dtype)
    path = _save(tmp_path / f"v{suffix}", data, slope=slope, inter=inter)
    im.configure_cache(volume_bytes=im.DEFAULT_VOLUME_CACHE_BYTES if volume_cache else 0)
    full = nib.load(str(path)).get_fdata().astype("float32")
    for dim in range(3):
        for idx in (0, full.shape[dim] // 2, full.shape[dim] - 1):
            plane, _ = im.read_slice(path, dim, idx)
            ref = np.take(full, idx, axis=dim)
            assert plane.dtype == np.float32 and plane.shape == ref.shape
            assert plane.tobytes() == np.ascontiguousarray(ref).tobytes()


@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_big_endian_volumes_read_as_nibabel_reads_them(tmp_path, suffix):
    """A big-endian header and data block (as some scanners' exports): the cached inflate keeps the byte order."""
    data = np.random.default_rng(3).integers(-3000, 3000, (9, 10, 11)).astype(">i2")
    hdr = nib.Nifti1Header(endianness=">")
    hdr.set_data_shape(data.shape)
    hdr.set_data_dtype(data.dtype)
    hdr.set_slope_inter(0.5, -7.0)
    hdr["vox_offset"] = 352
    blob = hdr.binaryblock + b"\0" * 4 + data.tobytes(order="F")
    path = tmp_path / f"be{suffix}"
    path.write_bytes(gzip.compress(blob) if suffix.endswith(".gz") else blob)
    im.configure_cache(volume_bytes=im.DEFAULT_VOLUME_CACHE_BYTES)
    full = nib.load(str(path)).get_fdata().astype("float32")
    for dim in range(3):
        plane, _ = im.read_slice(path, dim, 4)
        assert plane.tobytes() == np.ascontiguousarray(np.take(full, 4, axis=dim)).tobytes()


def test_returned_slices_are_read_only_and_cached_in_bytes(small_volume, tmp_path):
    plane, _ = im.read_slice(small_volume, 2, 1)
    with pytest.raises(ValueError):
        plane[0, 0] = 0
    usage = im.cache_usage()
    assert usage["volume_entries"] == 1 and usage["volume_bytes"] == 3 * 4 * 5 * 2  # stored int16, not float
    assert usage["slice_bytes"] == 3 * 4 * 4
    # budgets are bytes: a 2-slice budget keeps the two most recent slices
    im.configure_cache(volume_bytes=0, slice_bytes=2 * 3 * 4 * 4)
    for k in range(5):
        im.read_slice(small_volume, 2, k)
    assert im.cache_usage()["slice_entries"] == 2 and im.cache_usage()["volume_entries"] == 0


def test_threads_reading_one_compressed_volume_at_once_decode_it_once(small_volume, monkeypatch):
    """Requests in flight load slices of one volume on several threads at once: the first decodes it, the others
    wait for its array (each still gets its own slice, with upstream's values)."""
    import threading
    import time

    decoded: list[str] = []
    real = im._inflate_volume

    def slow_inflate(path, info):
        decoded.append(path)
        time.sleep(0.2)  # the others arrive while this one decodes
        return real(path, info)

    monkeypatch.setattr(im, "_inflate_volume", slow_inflate)
    start = threading.Barrier(5)
    got: dict[int, np.ndarray] = {}

    def read(k: int) -> None:
        start.wait()
        got[k] = im.read_slice(small_volume, 2, k)[0]

    threads = [threading.Thread(target=read, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert decoded == [str(small_volume)]
    for k in range(5):
        assert got[k][2, 3] == _value(2, 3, k) and got[k][0, 1] == _value(0, 1, k)
    assert not im._DECODING, "no decoding lock is left behind"


def test_a_rewritten_file_is_read_again(tmp_path):
    path = _save(tmp_path / "v.nii.gz", np.zeros((2, 3, 4), np.int16) + 5)
    assert im.read_slice(path, 2, 0)[0][0, 0] == 5
    _save(path, np.zeros((2, 3, 4), np.int16) + 9)
    os.utime(path, ns=(1, 1))  # a new mtime even on coarse clocks
    assert im.read_slice(path, 2, 0)[0][0, 0] == 9


# ====================================================================== normalisation, by hand

def test_minmax_truncates_and_flat_is_black():
    img = np.array([[0.0, 1.0], [2.0, 0.5]], np.float32)
    # (x - 0) / 2 * 255: 0, 127.5 -> 127, 255, 63.75 -> 63
    assert im.normalize_minmax(img).tolist() == [[0, 127], [255, 63]]
    assert im.normalize_minmax(np.full((2, 3), 7.5, np.float32)).tolist() == [[0, 0, 0], [0, 0, 0]]


def test_window_bounds_of_each_preset():
    assert cfg.hu_window_presets() == {"soft_tissue": (400, 40), "lung": (1500, -600), "brain": (80, 40),
                                       "bone": (1800, 400)}
    bounds = {name: cfg.window_bounds(w, lvl) for name, (w, lvl) in cfg.hu_window_presets().items()}
    assert bounds == {"soft_tissue": (-160.0, 240.0), "lung": (-1350.0, 150.0), "brain": (0.0, 80.0),
                      "bone": (-500.0, 1300.0)}


@pytest.mark.parametrize(("preset", "values", "expected"), [
    # soft tissue [-160, 240]: clip, (x + 160) / 400 * 255: 40 -> 127.5 -> 127, 0 -> 102
    ("soft_tissue", [-1000.0, -160.0, 40.0, 240.0, 1000.0, 0.0], [0, 0, 127, 255, 255, 102]),
    # lung [-1350, 150]: -600 -> 750/1500 -> 127.5 -> 127, -975 -> 63.75 -> 63
    ("lung", [-2000.0, -600.0, -975.0, 150.0, 400.0, -1350.0], [0, 127, 63, 255, 255, 0]),
    # brain [0, 80]: 20 -> 63.75 -> 63, 40 -> 127, 60 -> 191.25 -> 191
    ("brain", [-50.0, 20.0, 40.0, 60.0, 80.0, 500.0], [0, 63, 127, 191, 255, 255]),
    # bone [-500, 1300]: 400 -> 127, -50 -> 63.75 -> 63
    ("bone", [-1000.0, 400.0, -50.0, 1300.0, 3000.0, -500.0], [0, 127, 63, 255, 255, 0]),
])
def test_window_pixels(preset, values, expected):
    width, level = cfg.hu_window_presets()[preset]
    img = np.array(values, np.float32).reshape(2, 3)
    assert im.normalize_window(img, width, level).ravel().tolist() == expected


def test_percentile_clip_by_hand():
    img = np.arange(201, dtype=np.float32).reshape(3, 67)
    # linear interpolation: 0.5th percentile at index 1.0 -> 1, 99.5th at index 199.0 -> 199
    assert np.percentile(img, 0.5) == 1.0 and np.percentile(img, 99.5) == 199.0
    out = im.normalize_percentile(img).ravel()
    assert out[0] == 0 and out[1] == 0  # 0 clipped up to 1
    assert out[100] == 127  # 99 / 198 * 255 = 127.5
    assert out[50] == 63  # 49 / 198 * 255 = 63.1
    assert out[199] == 255 and out[200] == 255
    assert im.normalize_percentile(np.full((4, 4), -3.0, np.float32)).max() == 0  # no spread -> black


# ====================================================================== the rule upstream picks

def test_ct_label_gets_its_groups_window():
    rule = im.intensity_rule("KiTS23", "01", "Box-Size", "CT", "kidney tumor", "current")
    assert (rule.kind, rule.group, rule.preset, rule.bounds) == ("window", "Kidney Tumor/Lesion", "soft_tissue",
                                                                  (-160.0, 240.0))
    assert im.intensity_rule("X", "01", "Box-Size", "CT", "left lung", "current").bounds == (-1350.0, 150.0)
    assert im.intensity_rule("X", "01", "Box-Size", "ct", "brain", "current").bounds == (0.0, 80.0)
    assert im.intensity_rule("X", "01", "Box-Size", "CT", "vertebra L1", "current").bounds == (-500.0, 1300.0)


def test_kipa22_task_01_is_forced_to_the_percentile_stretch():
    for task_type in ("Box-Size", "Tumor-Lesion-Size", "Mask-Size"):
        assert im.intensity_rule("KiPA22", "01", task_type, "CT", "tumor", "current") == im.PERCENTILE
        assert im.intensity_rule("KiPA22", 1, task_type, "CT", "renal vein", "current") == im.PERCENTILE
    # only that triple: another task of the dataset, or another task type, gets the window
    assert im.intensity_rule("KiPA22", "02", "Box-Size", "CT", "tumor", "current").preset == "soft_tissue"
    assert im.intensity_rule("KiPA22", "01", "Biometrics-From-Landmarks", "CT", "tumor", "current").kind == "window"


def test_others_group_and_non_ct_get_the_percentile_stretch():
    assert cfg.anatomy_group("sternum") == "Others"
    assert im.intensity_rule("TotalSegmentator", "01", "Box-Size", "CT", "sternum", "current") == im.PERCENTILE
    assert im.intensity_rule("ToothFairy2", "01", "Box-Size", "CT", "implant", "current") == im.PERCENTILE
    for modality in ("MRI", "X Ray", "", "PET", " CT"):  # only a modality equal to "ct" ignoring case is CT
        assert im.intensity_rule("BraTS24", "01", "Box-Size", modality, "liver", "current") == im.PERCENTILE
    assert im.intensity_rule("Ceph-Biometrics-400", "01", "Biometrics-From-Landmarks", "X Ray", None,
                             "current") == im.PERCENTILE


def test_paper_protocol_is_always_minmax():
    assert im.intensity_rule("KiTS23", "01", "Box-Size", "CT", "kidney tumor", "paper") == im.MINMAX
    assert im.intensity_rule("AMOS22", "01", "Box-Size", "CT", "no such label", "paper") == im.MINMAX


@pytest.mark.parametrize(("label", "words"), [
    ("no such label", ["'no such label'", "KiTS23", "label_map_regroup"]),
    (None, ["KiTS23", "no label name"]),
])
def test_where_upstream_crashes_we_say_so(label, words):
    with pytest.raises(UserError) as err:
        im.intensity_rule("KiTS23", "02", "Biometrics-From-Landmarks", "CT", label, "current")
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words)


def test_every_windowed_group_has_a_preset():
    groups = set(cfg.label_map_regroup().values()) - {"Others"}
    assert groups <= set(cfg.ct_window_presets_by_group())
    assert set(cfg.ct_window_presets_by_group().values()) <= set(cfg.hu_window_presets())


# ====================================================================== resize

def test_zoom_order_switch_binary_slice_goes_nearest():
    img = np.array([[0, 1000, 0], [1000, 0, 1000]], np.float32)
    assert im.zoom_order(img, "current") == 0 and im.zoom_order(img, "paper") == 1
    near, factors = im.resize_slice(img, (5, 7), "current")
    assert factors == (5 / 2, 7 / 3)
    assert set(np.unique(near).tolist()) <= {0.0, 1000.0}
    assert near.tobytes() == ndimage.zoom(img, factors, order=0).tobytes()
    lin, _ = im.resize_slice(img, (5, 7), "paper")
    assert lin.tobytes() == ndimage.zoom(img, factors, order=1).tobytes()
    assert len(np.unique(lin)) > 2  # bilinear makes in-between values
    three = img.copy()
    three[0, 0] = 500
    assert im.zoom_order(three, "current") == 1


def test_zoom_output_shape_is_the_requested_one():
    # scipy sizes the output round(n * (new / n)); this is `new` for every size a slice can have
    for n in range(1, 2049):
        for new in (224, 336, 448, 512, 560, 672, 896, 1024):
            assert round(n * (new / n)) == new
    for shape, new in (((512, 400), (336, 336)), ((333, 401), (512, 512)), ((7, 1), (896, 896))):
        out, _ = im.resize_slice(np.random.default_rng(0).random(shape, np.float32), new, "paper")
        assert out.shape == new and out.dtype == np.float32


def test_reshape_shape_and_pixel_size(small_volume):
    gray, pixel = im.render_gray(small_volume, 0, 1, reshape_hw=(336, 448), rule=im.MINMAX, protocol="paper")
    assert gray.shape == (336, 448) and gray.dtype == np.uint8
    zooms = nib.load(str(small_volume)).header.get_zooms()
    assert pixel == (zooms[1] / (336 / 4), zooms[2] / (448 / 5))
    assert pixel == pytest.approx((0.75 * 4 / 336, 2.0 * 5 / 448), rel=1e-6)
    assert type(pixel[0]) is type(np.float32(1) / 2.0)  # numpy's promotion, as upstream (float32 under numpy 2)
    _, native = im.render_gray(small_volume, 0, 1, rule=im.MINMAX, protocol="paper")
    assert native == (zooms[1], zooms[2])


@pytest.mark.parametrize("bad", [(0, 10), (10,), (10.5, 3), "512", None, (-1, 4)])
def test_bad_reshape_size(bad):
    with pytest.raises(UserError, match="reshape size"):
        im.resize_slice(np.zeros((4, 4), np.float32), bad, "paper")


# ====================================================================== rendered bytes

@pytest.fixture()
def ct_volume(tmp_path):
    """A 40x48x12 CT-like int16 volume (HU + 1024 stored, scl_inter -1024): air, soft tissue ramp, a bright block."""
    i, j, k = np.meshgrid(np.arange(40), np.arange(48), np.arange(12), indexing="ij")
    hu = np.where((i - 20) ** 2 + (j - 24) ** 2 < 300, -100 + 9 * i + 4 * j + 3 * k, -1000)
    hu = np.where((abs(i - 20) < 4) & (abs(j - 30) < 3), 900, hu)
    return _save(tmp_path / "ct.nii.gz", (hu + 1024).astype(np.int16), slope=1.0, inter=-1024.0,
                 zooms=(0.8, 0.6, 2.5))


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_render_checksum_paper(ct_volume):
    gray, _ = im.render_gray(ct_volume, 2, 5, reshape_hw=(64, 56), rule=im.MINMAX, protocol="paper")
    v = nib.load(str(ct_volume)).get_fdata().astype("float32")[:, :, 5]
    z = ndimage.zoom(v, (64 / 40, 56 / 48), order=1)
    expected = ((z - z.min()) / (z.max() - z.min()) * 255).astype(np.uint8)
    assert _sha(gray) == _sha(expected)
    pil, _ = im.render(ct_volume, 2, 5, reshape_hw=(64, 56), rule=im.MINMAX, protocol="paper")
    assert pil.mode == "RGB" and pil.size == (56, 64)
    rgb = np.asarray(pil)
    assert (rgb[..., 0] == gray).all() and (rgb[..., 1] == gray).all() and (rgb[..., 2] == gray).all()


def test_render_checksum_current_ct_window(ct_volume):
    rule = im.intensity_rule("AMOS22", "01", "Box-Size", "CT", "liver", "current")
    gray, _ = im.render_gray(ct_volume, 1, 30, reshape_hw=(64, 56), rule=rule, protocol="current")
    v = nib.load(str(ct_volume)).get_fdata().astype("float32")[:, 30, :]
    z = ndimage.zoom(v, (64 / 40, 56 / 12), order=1)  # many distinct values -> linear
    expected = ((np.clip(z, -160.0, 240.0) + 160.0) / 400.0 * 255.0).astype(np.uint8)
    assert _sha(gray) == _sha(expected)


def test_render_checksum_current_non_ct_percentile(ct_volume):
    rule = im.intensity_rule("BraTS24", "01", "Box-Size", "MRI", "edema", "current")
    gray, _ = im.render_gray(ct_volume, 0, 20, rule=rule, protocol="current")
    v = nib.load(str(ct_volume)).get_fdata().astype("float32")[20]
    lo, hi = np.percentile(v, [0.5, 99.5])
    expected = ((np.clip(v, lo, hi) - lo) / (hi - lo) * 255.0).astype(np.uint8)
    assert _sha(gray) == _sha(expected)


def test_render_checksum_pinned(ct_volume):
    """Literal digests of native-size renders (IEEE float32 arithmetic only): a change here changes every image."""
    paper, _ = im.render_gray(ct_volume, 2, 5, rule=im.MINMAX, protocol="paper")
    window = im.intensity_rule("AMOS22", "01", "Box-Size", "CT", "liver", "current")
    current, _ = im.render_gray(ct_volume, 2, 5, rule=window, protocol="current")
    assert _sha(paper) == PINNED["paper"]
    assert _sha(current) == PINNED["current"]


PINNED = {  # also equal to the hand expressions on the int HU array (checked when pinned)
    "paper": "8df336d1c3826bf83d44a9eabe203dd1fbb269ba051e3a8f5df0a59e2030cba7",
    "current": "691f8f6c9896a88cb7e90acb01ddc8b644bf3b5c7bc9f2bee6f34bf9c869ade7",
}


# ====================================================================== bad input

def _truncated(tmp_path, name, keep):
    src = _save(tmp_path / f"full_{name}", np.arange(20 * 30 * 40, dtype=np.int16).reshape(20, 30, 40))
    raw = src.read_bytes()
    dst = tmp_path / name
    dst.write_bytes(raw[: int(len(raw) * keep)])
    return dst


def _flipped(tmp_path, name):
    """A .nii.gz whose deflate stream is damaged in its middle (the header still reads)."""
    rng = np.random.default_rng(1)
    src = _save(tmp_path / f"full_{name}", rng.integers(-1000, 1000, (20, 30, 40), dtype=np.int16))
    raw = bytearray(src.read_bytes())
    for i in range(len(raw) // 2, len(raw) // 2 + 64):
        raw[i] ^= 0xA5
    dst = tmp_path / name
    dst.write_bytes(bytes(raw))
    return dst


@pytest.mark.parametrize("volume_cache", [True, False])
def test_bad_files_are_one_line_user_errors(tmp_path, volume_cache):
    im.configure_cache(volume_bytes=im.DEFAULT_VOLUME_CACHE_BYTES if volume_cache else 0)
    garbage = tmp_path / "garbage.nii.gz"
    garbage.write_bytes(os.urandom(4000))
    nan = np.ones((4, 5, 6), np.float32)
    nan[:, :, 2] = np.nan
    four_d = _save(tmp_path / "4d.nii.gz", np.zeros((4, 5, 6, 2), np.float32))
    two_d = _save(tmp_path / "2d.nii.gz", np.zeros((4, 5), np.float32))
    ok = _save(tmp_path / "ok.nii.gz", np.zeros((4, 5, 6), np.float32) + 1)
    cases = [
        (tmp_path / "missing.nii.gz", 2, 0, "does not exist"),
        (garbage, 2, 0, "corrupt"),
        (_truncated(tmp_path, "cut.nii.gz", 0.5), 0, 3, "truncated"),
        (_truncated(tmp_path, "cut.nii", 0.5), 2, 1, "truncated"),  # slice 1 is on disk, the volume is not
        (_flipped(tmp_path, "damaged.nii.gz"), 2, 39, "corrupt"),  # past the damage
        (four_d, 2, 0, "3D"),
        (two_d, 2, 0, "3D"),
        (_save(tmp_path / "nan.nii.gz", nan), 2, 2, "no finite value"),
        (ok, 2, 6, "outside"),
        (ok, 0, -1, "outside"),
        (ok, 3, 0, "slice_dim 3"),
        (ok, "1", 0, "integers"),
    ]
    for path, dim, idx, words in cases:
        with pytest.raises(UserError) as err:
            im.read_slice(path, dim, idx)
        msg = str(err.value)
        assert "\n" not in msg, msg
        assert words in msg and path.name in msg, msg
    assert im.read_slice(_save(tmp_path / "partial_nan.nii.gz", nan), 0, 1)[0].shape == (5, 6)  # kept, as upstream


def test_unknown_protocol_and_rule_kind():
    with pytest.raises(ValueError):
        im.zoom_order(np.zeros((2, 2), np.float32), "newest")
    with pytest.raises(ValueError):
        im.IntensityRule("gamma")
    with pytest.raises(ValueError):
        im.IntensityRule("window", width=400)


# ====================================================================== upstream tables

def test_config_tables_and_sources():
    src = cfg.source()
    assert src["file"] == "src/medvision_bm/utils/configs.py" and src["default"]["commit"].startswith("9fff178")
    assert cfg.excluded_keys() == ("miscellaneous", "others")
    assert cfg.tumor_lesion_group_keys() == ("tumor", "lesion", "metastatic")
    assert cfg.minimum_group_size() == 50 and cfg.ad_near_zero_gt_threshold() == 0.1
    assert cfg.seed() == 1024 and cfg.random_box_simulations() == 100
    assert cfg.dataset_package("OAIZIB-CM") == "OAIZIB_CM" and cfg.dataset_package("PI-CAI") == "PICAI"
    assert cfg.dataset_package("AbdomenAtlas1.0Mini") == "AbdomenAtlas__1_0__Mini"
    assert cfg.label_map_rename()["liver cancer"] == "liver tumor"
    # the paper era groups knee labels as "Knee"; the newer tables split bone and soft tissue
    assert cfg.anatomy_group("femur", "paper") == "Knee" and cfg.anatomy_group("femur") == "Knee Bone"
    assert cfg.anatomy_group("femoral cartilage") == "Knee Soft Tissue"
    assert cfg.anatomy_group("pulmonary vein", "paper") is None and cfg.anatomy_group("pulmonary vein") == "Vein"
    assert len(cfg.label_map_regroup("paper")) == 243 and len(cfg.label_map_regroup()) == 261
    assert cfg.is_forced_standard_normalization("KiPA22", "01", "Mask-Size")
    assert not cfg.is_forced_standard_normalization("KiPA22", "1", "Mask-Size")  # upstream compares strings
    with pytest.raises(TypeError):
        cfg.label_map_regroup()["x"] = "y"  # type: ignore[index]
