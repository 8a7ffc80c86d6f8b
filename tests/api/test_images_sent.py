"""What a served or API model decodes is the slice the prompt describes: same pixels, same size (issue 14)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from medvision_bm.data.docs import RunDoc
from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract
from medvision_bm.models.api.images import PNG_COMPRESS_LEVEL, encode_image
from medvision_bm.tasks.hooks import render_gray, visual


def _decode(b64: str) -> Image.Image:
    img = Image.open(io.BytesIO(base64.b64decode(b64)))
    img.load()
    return img


def _rundoc(phantom_dir, reshape=None, client=None) -> RunDoc:
    data = DataDir(DatasetContract(phantom_dir.resolve(), "1.0.0", "1.4.0"))
    doc = data.samples("PhantomCT_TumorLesionSize_Task01_Axial").docs([0])[0]
    h, w = reshape or doc.image_size_2d
    from medvision_bm.data.docs import View

    view = View(image_hw=(h, w), pixel_hw_mm=(1.0, 1.0), canvas_hw=client or (h, w), content_hw=client or (h, w),
                stated_pixel_hw_mm=(1.0, 1.0), header_pixel_hw=(1.0, 1.0), reshape_hw=reshape,
                client_resize_hw=client)
    return RunDoc(doc, view, "current", "", str(phantom_dir.resolve()))


@pytest.mark.parametrize("reshape", [None, (50, 70)])
def test_grey_slice_is_sent_single_channel_and_decodes_to_the_same_pixels(phantom_dir, reshape):
    rd = _rundoc(phantom_dir, reshape)
    gray = render_gray(rd)
    sent = visual(rd)  # what lmms-eval / the API backend gets: upstream's L -> RGB picture
    enc = encode_image(sent, "png")
    back = _decode(enc.b64)
    assert back.mode == "L"  # one channel on the wire: the same values, a third of the bytes to compress
    assert np.array_equal(np.asarray(back), gray)
    assert (enc.height, enc.width) == rd.view.image_hw == gray.shape
    assert np.array_equal(np.asarray(back.convert("RGB")), np.asarray(sent))


def test_client_pre_resize_is_what_is_sent(phantom_dir):
    rd = _rundoc(phantom_dir, reshape=(64, 64), client=(56, 56))
    enc = encode_image(visual(rd), "png")
    back = np.asarray(_decode(enc.b64))
    expected = np.asarray(Image.fromarray(render_gray(rd)).convert("RGB").resize((56, 56), Image.Resampling.LANCZOS))
    assert back.shape == (56, 56) and np.array_equal(back, expected[..., 0])


def test_colour_images_stay_rgb_and_jpeg_is_rgb():
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8), "RGB")
    back = _decode(encode_image(rgb, "png").b64)
    assert back.mode == "RGB" and np.array_equal(np.asarray(back), np.asarray(rgb))
    grey_rgb = Image.fromarray(np.stack([np.asarray(rgb)[..., 0]] * 3, axis=-1), "RGB")
    assert _decode(encode_image(grey_rgb, "jpeg").b64).mode == "RGB"
    assert PNG_COMPRESS_LEVEL == 1
