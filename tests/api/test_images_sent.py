"""What a served or API model decodes is the slice the prompt describes: same pixels, same size."""

from __future__ import annotations

import base64
import io
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from medvision_bm.data.docs import RunDoc
from medvision_bm.data.layout import DataDir
from medvision_bm.data.planner import DatasetContract
from medvision_bm.models.api import images as images_mod
from medvision_bm.models.api.images import encode_image, png_gray
from medvision_bm.tasks import hooks
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
    # a grey picture with one pixel off-grey is colour: sent RGB, every value kept
    arr = np.repeat(rng.integers(0, 255, (9, 7, 1), dtype=np.uint8), 3, axis=2)
    arr[4, 3, 2] ^= 1
    back = _decode(encode_image(Image.fromarray(arr, "RGB"), "png").b64)
    assert back.mode == "RGB" and np.array_equal(np.asarray(back), arr)


@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (13, 1), (31, 47), (512, 512)])
@pytest.mark.parametrize("deflate", ["isal", "stdlib"])
def test_png_writer_is_lossless_for_any_grey_array(shape, deflate, monkeypatch):
    import zlib

    if deflate == "stdlib":
        monkeypatch.setattr(images_mod, "_DEFLATE", lambda data: zlib.compress(data, 1))
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    pixels[: shape[0] // 2] = 0  # flat and noisy regions, as a windowed CT slice has
    img = Image.open(io.BytesIO(png_gray(pixels)))
    img.load()  # PIL checks every chunk's CRC and the zlib stream while decoding
    assert img.mode == "L" and img.size == (shape[1], shape[0])
    assert np.array_equal(np.asarray(img), pixels)


@pytest.mark.parametrize("bad", [np.zeros((3, 4), np.uint16), np.zeros((3, 4, 1), np.uint8), np.zeros((0, 4), np.uint8)])
def test_png_writer_refuses_what_it_cannot_write(bad):
    with pytest.raises(ValueError, match="2-D uint8"):
        png_gray(bad)


@pytest.mark.parametrize("encoder", ["installed", "stdlib"])
def test_base64_text_is_the_standard_padded_alphabet_whichever_encoder(encoder, monkeypatch):
    import builtins

    if encoder == "stdlib":  # pybase64 missing (a plain install without the api extra)
        real_import = builtins.__import__

        def no_pybase64(name, *args, **kwargs):
            if name == "pybase64":
                raise ImportError(name)
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_pybase64)
    b64 = images_mod._b64encoder()
    rng = np.random.default_rng(1)
    for n in (0, 1, 2, 3, 4, 57, 160_001):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        text = b64(data)
        assert isinstance(text, str) and text == base64.b64encode(data).decode("ascii")
    if encoder == "installed":
        pytest.importorskip("pybase64")
        assert b64.__module__.startswith("pybase64")  # the fast encoder is the one used where the api extra is in


def test_off_grey_by_one_value_in_one_channel_is_sent_as_rgb():
    gray = np.random.default_rng(2).integers(0, 256, (33, 47), dtype=np.uint8)
    rgb = np.repeat(gray[:, :, None], 3, axis=2)
    for channel in (1, 2):
        off = rgb.copy()
        off[32, 46, channel] ^= 1
        assert images_mod.gray_pixels(Image.fromarray(off, "RGB")) is None
        sent = _decode(encode_image(Image.fromarray(off, "RGB")).b64)
        assert sent.mode == "RGB" and np.array_equal(np.asarray(sent), off)
    same = images_mod.gray_pixels(Image.fromarray(rgb, "RGB"))
    assert same is not None and same.shape == (33, 47) and np.array_equal(same, gray)


@pytest.mark.parametrize(("reshape", "client"), [(None, None), ((64, 64), (56, 56)), ((50, 70), (33, 47))])
def test_grey_hand_over_is_upstreams_picture_in_one_channel(phantom_dir, reshape, client):
    """hooks.visual_gray (what API backends get) is upstream's picture in one channel: L -> RGB, then the client's
    LANCZOS resize to the provider's fixed point, the order of upstream's API model files (``_encode_image``, as
    data.docs.View records it); hooks.visual, what local models get, is that picture."""
    rd = _rundoc(phantom_dir, reshape, client)
    upstream = Image.fromarray(render_gray(rd)).convert("RGB")
    if client:
        upstream = upstream.resize((client[1], client[0]), Image.Resampling.LANCZOS)
    gray = hooks.visual_gray(rd)
    assert gray.mode == "L" and gray.size == upstream.size
    assert np.array_equal(np.asarray(hooks.visual(rd)), np.asarray(upstream))
    assert np.array_equal(np.repeat(np.asarray(gray)[:, :, None], 3, axis=2), np.asarray(upstream))
    assert _decode(encode_image(gray).b64).tobytes() == _decode(encode_image(upstream).b64).tobytes()


def test_lanczos_resize_treats_every_band_alike():
    """The ground the grey hand-over stands on: resizing L then copying to RGB equals copying then resizing."""
    rng = np.random.default_rng(3)
    for case in range(40):
        h, w = (int(v) for v in rng.integers(4, 300, 2))
        out_h, out_w = (int(v) for v in rng.integers(3, 400, 2))
        g = rng.integers(0, 256, (h, w), dtype=np.uint8) if case % 2 else \
            np.clip(rng.normal(110, 35, (h, w)), 0, 255).astype(np.uint8)
        img = Image.fromarray(g, "L")
        a = img.convert("RGB").resize((out_w, out_h), Image.Resampling.LANCZOS)
        b = img.resize((out_w, out_h), Image.Resampling.LANCZOS).convert("RGB")
        assert a.tobytes() == b.tobytes(), (h, w, out_h, out_w)


class _Inst:
    def __init__(self, args):
        self.args = args


class _Capture:
    """A backend that records the mode of the images it is handed."""

    name = "capture"

    def __init__(self, gray: bool) -> None:
        if gray:
            self.takes_gray_slices = True
        self.modes: list[str] = []

    def generate(self, requests, on_result):
        from medvision_bm.models.base import GenResult

        for r in requests:
            self.modes += [img.mode for img in r.get_images()]
            on_result(GenResult(r.key, "<answer>1, 2</answer>", finish_reason="stop"))

    def close(self):
        pass


@pytest.mark.parametrize("gray", [True, False])
def test_backends_that_take_grey_slices_are_handed_them_by_the_lmms_eval_hook(phantom_dir, gray):
    from medvision_bm.models.lmms_models import StreamingLMM

    rd = _rundoc(phantom_dir, None, (56, 56))
    row = rd.to_lmms_row()
    backend = _Capture(gray)
    lm = StreamingLMM(backend)
    lm.task_dict = {"t": {"test": {0: row}}}

    def foreign(r):  # a doc_to_visual that is not this suite's hook is always used as given
        return [Image.new("RGB", (8, 8))]

    class Task:  # what lmms-eval hands over: its task's bound doc_to_visual, calling the hook the template names
        config = SimpleNamespace(doc_to_visual=hooks.doc_to_visual)

        def doc_to_visual(self, doc):
            return self.config.doc_to_visual(doc)

    gen_kwargs = {"max_new_tokens": 8, "temperature": 0}
    out = lm.generate_until([_Inst(("p", gen_kwargs, hooks.doc_to_visual, 0, "t", "test")),
                             _Inst(("p", gen_kwargs, foreign, 0, "t", "test")),
                             _Inst(("p", gen_kwargs, Task().doc_to_visual, 0, "t", "test"))])
    assert out == ["<answer>1, 2</answer>"] * 3
    assert backend.modes == (["L", "RGB", "L"] if gray else ["RGB", "RGB", "RGB"])

