"""The API clients' per-slice image cache never answers a stand-in picture (the image check's blank or shuffled
slice) with the cached real slice of the same sample, nor the other way round."""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

from medvision_bm.data.docs import RunDoc, View
from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract
from medvision_bm.models.api.images import ImageCache
from medvision_bm.models.base import GenRequest, GenSettings
from medvision_bm.tasks.hooks import visual_gray


def _rundoc(phantom_dir) -> RunDoc:
    doc = DataDir(DatasetContract(phantom_dir.resolve(), "1.0.0", "1.4.0")) \
        .samples("PhantomCT_BoxCoordinate_Task01_Axial").docs([0])[0]
    h, w = doc.image_size_2d
    view = View(image_hw=(h, w), pixel_hw_mm=(1.0, 1.0), canvas_hw=(h, w), content_hw=(h, w),
                stated_pixel_hw_mm=(1.0, 1.0), header_pixel_hw=(1.0, 1.0))
    return RunDoc(doc, view, "current", "", str(phantom_dir.resolve()))


def _pixels(b64: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))))


def test_a_stand_in_picture_is_cached_apart_from_the_real_slice(phantom_dir):
    rd = _rundoc(phantom_dir)
    real = visual_gray(rd)
    blank = Image.new("L", real.size, 128)
    cache = ImageCache("png")

    def request(images, variant=None):
        return GenRequest(key=rd.doc.key, prompt="p", rundoc=rd, gen=GenSettings(), images=list(images),
                          image_variant=variant)

    first = request([real])
    cache.encode(first, cache.key_for(first))
    stand_in = request([blank], "blank")
    assert cache.lookup(cache.key_for(stand_in)) is None, "the real slice is not handed out for the blank one"
    (sent,) = cache.encode(stand_in, cache.key_for(stand_in))
    assert np.unique(_pixels(sent.b64)).tolist() == [128]
    again = request([], None)  # the real slice asked again: its own cached picture, not the blank
    (cached,) = cache.lookup(cache.key_for(again)) or [None]
    assert cached is not None and np.array_equal(_pixels(cached.b64), np.asarray(real))
