"""The -VP and -VP-woMedImg pictures, pixel for pixel against upstream's drawing rule: the reference, written from
upstream's files (YongchengYAO/MedVision medvision_utils.py and sft_utils.py @0a4c5e2, YongchengYAO/biometric_vqa
doc_to_visual_utils.py @7eb775b) and calling PIL and OpenCV with upstream's parameters, is
tests/upstream_visual_prompt.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medvision_bm.data.docs import Overlay, RunDoc, View
from medvision_bm.data.layout import DataDir
from medvision_bm.data.overlay import RULE, draw, overlay_for
from medvision_bm.data.planner import DatasetContract
from medvision_bm.errors import UserError
from medvision_bm.tasks import hooks
from upstream_visual_prompt import ref_line_with_points, upstream_picture

pytest.importorskip("cv2")

TASKS = {
    "detect": "PhantomCT_BoxCoordinate_Task01_Axial",
    "TL": "PhantomCT_TumorLesionSize_Task01_Axial",
    "distance": "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal",
    "angle": "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal",
}
RESHAPES = [None, (70, 130), (41, 37)]


# ---------------------------------------------------------------------------------------------- the suite's


def _rundocs(phantom_dir: Path, task: str, variant: str, reshape, n: int = 4) -> list[RunDoc]:
    data = DataDir(DatasetContract(phantom_dir.resolve(), "1.0.0", "1.4.0"))
    samples = data.samples(task + variant)
    out = []
    for doc in samples.docs(list(range(min(n, len(samples))))):
        h, w = reshape or doc.image_size_2d
        view = View(image_hw=(h, w), pixel_hw_mm=(1.0, 1.0), canvas_hw=(h, w), content_hw=(h, w),
                    stated_pixel_hw_mm=(1.0, 1.0), header_pixel_hw=(1.0, 1.0), reshape_hw=reshape,
                    overlay=overlay_for(doc, phantom_dir.resolve(), variant, reshape, samples.meta_header))
        out.append(RunDoc(doc, view, "current", variant, str(phantom_dir.resolve())))
    return out


@pytest.mark.parametrize("reshape", RESHAPES)
@pytest.mark.parametrize("variant", ["-VP", "-VP-woMedImg"])
@pytest.mark.parametrize("kind", list(TASKS))
def test_every_drawn_picture_is_upstreams_pixel_for_pixel(phantom_dir, kind, variant, reshape):
    family = "AD" if kind in ("distance", "angle") else kind
    rds = _rundocs(phantom_dir, TASKS[kind], variant, reshape)
    assert rds
    for rd in rds:
        row = rd.doc.upstream_row(phantom_dir.resolve())
        plain = hooks.render_gray(rd)
        expected = upstream_picture(family, variant, row, phantom_dir.resolve(), reshape, plain)
        sent = hooks.visual(rd)
        assert sent.mode == "RGB" and sent.size == expected.size
        assert np.array_equal(np.asarray(sent), np.asarray(expected)), (kind, variant, reshape, rd.doc.key)
        arr = np.asarray(sent)
        colour = ~((arr[..., 0] == arr[..., 1]) & (arr[..., 1] == arr[..., 2]))
        assert colour.any(), "something is drawn"
        if variant == "-VP-woMedImg":
            assert not arr[~colour].any(), "the rest of a woMedImg picture is the black canvas"
        else:
            assert np.array_equal(arr[~colour][:, 0], plain[~colour]), "the rest is the slice as shown"
        # API backends are handed the same colour picture (never a grey slice)
        assert np.array_equal(np.asarray(hooks.visual_gray(rd)), arr)


def test_the_tl_woMedImg_picture_draws_the_mask_contour_under_the_axes(phantom_dir):
    def count(arr, rgb):
        return int(((arr[..., 0] == rgb[0]) & (arr[..., 1] == rgb[1]) & (arr[..., 2] == rgb[2])).sum())

    drawn = [np.asarray(hooks.visual(rd)) for rd in _rundocs(phantom_dir, TASKS["TL"], "-VP-woMedImg", None, n=8)]
    on_slice = [np.asarray(hooks.visual(rd)) for rd in _rundocs(phantom_dir, TASKS["TL"], "-VP", None, n=8)]
    assert all(count(a, (0, 255, 0)) > 10 for a in drawn), "every woMedImg picture has its contour"
    assert any(count(a, (0xF5, 0x8D, 0x31)) for a in drawn), "the major axis is drawn over it"
    assert any(count(a, (0, 0, 0xFF)) for a in drawn) and all(count(a, (0xFF, 0, 0)) for a in drawn)
    assert sum(count(a, (0, 255, 0)) for a in on_slice) == 0, "-VP draws the axes only"


def test_a_reshape_scales_the_coordinates_with_upstreams_truncation(phantom_dir):
    rd = _rundocs(phantom_dir, TASKS["detect"], "-VP", (41, 37), n=1)[0]
    h, w = rd.doc.image_size_2d
    lo, hi = rd.doc.bounding_boxes["min_coords"][0], rd.doc.bounding_boxes["max_coords"][0]
    assert rd.view.overlay.box == ((int(lo[0] * (41 / h)), int(lo[1] * (37 / w))),
                                   (int(hi[0] * (41 / h)), int(hi[1] * (37 / w))))


def test_fractional_coordinates_near_the_edges_draw_as_pil_draws_them():
    """Landmarks need not be whole pixels (fitted ellipse axes); the suite passes them to PIL as read."""
    rng = np.random.default_rng(7)
    for case in range(60):
        h, w = (int(v) for v in rng.integers(8, 90, 2))
        base = rng.integers(0, 256, (h, w), dtype=np.uint8)
        pts = [(float(rng.uniform(-2, h + 2)), float(rng.uniform(-2, w + 2))) for _ in range(4)]
        if case % 3 == 0:
            pts = [(round(r), round(c)) for r, c in pts]
        lines = ((pts[0], pts[1], "#F58D31"), (pts[2], pts[3], "#0000FF"))
        canvas = "black" if case % 2 else "slice"
        ours = draw(base, Overlay(RULE, canvas, lines=lines))
        ref = Image.fromarray(np.zeros_like(base) if canvas == "black" else base, "L").convert("RGB")
        for a, b, colour in lines:
            ref_line_with_points(ref, a, b, colour, "#FF0000")
        assert np.array_equal(np.asarray(ours), np.asarray(ref)), case


def test_the_overlay_is_part_of_the_doc_hash_and_survives_the_store_row(phantom_dir):
    from medvision_bm.data.docs import rundoc_from_store_row
    from medvision_bm.store.signature import doc_sha

    rd = _rundocs(phantom_dir, TASKS["angle"], "-VP", (70, 130), n=1)[0]
    row = {"doc": rd.doc.to_json(), "view": json.loads(json.dumps(rd.view.to_json())), "protocol": "current",
           "variant": "-VP"}
    back = rundoc_from_store_row(row)
    assert back.view == rd.view and doc_sha(back.doc, back.view) == doc_sha(rd.doc, rd.view)
    plain = dataclasses.replace(rd.view, overlay=None)
    assert doc_sha(rd.doc, plain) != doc_sha(rd.doc, rd.view)
    assert "overlay" not in plain.to_json()


def test_a_visual_prompt_sample_without_its_drawing_is_refused_never_sent_plain(phantom_dir):
    rd = _rundocs(phantom_dir, TASKS["distance"], "-VP-woMedImg", None, n=1)[0]
    bare = dataclasses.replace(rd, view=dataclasses.replace(rd.view, overlay=None))
    for hook in (hooks.visual, hooks.visual_gray):
        with pytest.raises(UserError, match="no drawn visual prompt"):
            hook(bare)


def test_an_ad_sample_whose_landmarks_cannot_be_named_is_a_one_line_error(phantom_dir):
    data = DataDir(DatasetContract(phantom_dir.resolve(), "1.0.0", "1.4.0"))
    samples = data.samples(TASKS["distance"] + "-VP")
    doc = samples.docs([0])[0]
    bad = dataclasses.replace(doc, biometric_profile={**doc.biometric_profile, "metric_key": "L-9-9"})
    with pytest.raises(UserError, match="landmarks cannot be named") as exc:
        overlay_for(bad, phantom_dir, "-VP", None, samples.meta_header)
    assert "\n" not in str(exc.value)
    assert overlay_for(doc, phantom_dir, "-CoT", None, samples.meta_header) is None


def test_api_models_get_the_drawn_picture_resized_after_drawing(phantom_dir):
    """Upstream's API clients resize what doc_to_visual returns (LANCZOS, to the provider's size): the drawing first,
    then the resize; the encoded PNG is colour and decodes to that picture."""
    import base64
    import io

    from medvision_bm.models.api.images import encode_image

    for rd in _rundocs(phantom_dir, TASKS["angle"], "-VP", (70, 130), n=2):
        rd = dataclasses.replace(rd, view=dataclasses.replace(rd.view, client_resize_hw=(56, 88)))
        row = rd.doc.upstream_row(phantom_dir.resolve())
        upstream = upstream_picture("AD", "-VP", row, phantom_dir.resolve(), (70, 130), hooks.render_gray(rd))
        expected = np.asarray(upstream.resize((88, 56), Image.Resampling.LANCZOS))
        for hook in (hooks.visual, hooks.visual_gray):
            enc = encode_image(hook(rd), "png")
            back = Image.open(io.BytesIO(base64.b64decode(enc.b64)))
            assert back.mode == "RGB" and np.array_equal(np.asarray(back), expected)


def test_the_api_image_cache_never_serves_one_samples_drawing_for_another(phantom_dir):
    """Two metrics of one slice share its pixels but not their drawing: the encoded-image cache keys them apart."""
    from medvision_bm.models.api.images import ImageCache
    from medvision_bm.models.base import GenRequest, GenSettings

    data = DataDir(DatasetContract(phantom_dir.resolve(), "1.0.0", "1.4.0"))
    rds = _rundocs(phantom_dir, TASKS["angle"], "-VP", None, n=len(data.samples(TASKS["angle"] + "-VP")))
    by_slice: dict = {}
    for rd in rds:
        by_slice.setdefault((rd.doc.image_file, rd.doc.slice_idx), []).append(rd)
    pair = next(v for v in by_slice.values() if len(v) > 1 and v[0].view.overlay != v[1].view.overlay)
    cache = ImageCache("png")
    keys = [cache.key_for(GenRequest(rd.doc.key, "q", rd, GenSettings())) for rd in pair[:2]]
    assert keys[0] != keys[1]
    plain = [dataclasses.replace(rd, variant="", view=dataclasses.replace(rd.view, overlay=None)) for rd in pair[:2]]
    assert cache.key_for(GenRequest("a", "q", plain[0], GenSettings())) == \
        cache.key_for(GenRequest("b", "q", plain[1], GenSettings()))


def test_a_damaged_or_oversized_landmark_file_is_its_one_line_error(tmp_path):
    import gzip

    from medvision_bm import limits
    from medvision_bm.data.landmarks import slice_landmarks

    good = {"slice_landmarks_x": [{"slice_idx": 3, "landmarks": [{"P1": [3, 1.5, 2], "ROI_pixels_count": 9}]}]}
    ok = tmp_path / "ok.json.gz"
    ok.write_bytes(gzip.compress(json.dumps(good).encode()))
    assert slice_landmarks(ok, 0, 3) == {"P1": (1.5, 2.0)}  # a lesion's pixel count is no landmark
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(ok.read_bytes()[:-12])
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (limits.MAX_JSON_FILE_BYTES + 10)))
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    for path, why in ((cut, "cut short"), (bomb, "inflates past"), (listed, "not a JSON object")):
        with pytest.raises(UserError, match=why) as exc:
            slice_landmarks(path, 0, 3)
        assert "\n" not in str(exc.value) and str(path) in str(exc.value)
