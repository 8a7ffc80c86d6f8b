"""Image payloads: each rendered slice is encoded once (PNG or JPEG, base64) and reused by every request for it.

The cache key is what determines the pixels the runner renders: dataset root, image file, slice axis and index,
the label name and protocol (they pick the intensity rule), requested reshape, the encoding, the variant and what a
visual prompt draws on the picture (data.docs.Overlay), plus the task and
family (so a renderer that ever differs per task can never be served another task's pixels; labels of one task
with one intensity rule still share their slices). One entry holds all images of a request. Entries are evicted
least-recently-used beyond a byte budget.
"""

from __future__ import annotations

import base64
import functools
import io
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from medvision_bm.errors import UserError
from medvision_bm.models.base import GenRequest

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from _typeshed import ReadableBuffer
    from PIL import Image

FORMATS: dict[str, tuple[str, str]] = {"png": ("PNG", "image/png"), "jpeg": ("JPEG", "image/jpeg")}


def _b64encoder() -> Callable[[bytes], str]:
    """Standard base64 (RFC 4648, padded) as ``str``: pybase64's SIMD encoder where installed (the ``api`` extra;
    about 40x the stdlib's speed, and the stdlib's holds the GIL the request loop needs), else the stdlib's."""
    try:
        import pybase64

        return pybase64.b64encode_as_string
    except ImportError:
        return lambda data: base64.b64encode(data).decode("ascii")


b64_text = _b64encoder()


@dataclass(frozen=True)
class EncodedImage:
    mime: str
    b64: str
    width: int
    height: int

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{self.b64}"

    @functools.cached_property
    def data_url_bytes(self) -> bytes:
        """The data URL as ASCII bytes, kept: it is also its own JSON string body (base64 needs no escaping)."""
        return self.data_url.encode("ascii")

    def raw(self) -> bytes:
        return base64.b64decode(self.b64)


def check_format(image_format: str | None) -> str:
    fmt = (image_format or "png").lower()
    fmt = "jpeg" if fmt == "jpg" else fmt
    if fmt not in FORMATS:
        raise UserError(f"--image_format {image_format!r} is not supported; use png or jpeg")
    return fmt


#: zlib level of the PNGs sent: lossless at any level. Grey slices go through :func:`png_gray` (rows unfiltered,
#: deflated by python-isal when present: about 1 ms for a 512-px slice against 16 ms for PIL at level 1, and a
#: smaller payload on CT-like slices); colour images through PIL at this level (benchmarks/bench_api_throughput.py).
PNG_COMPRESS_LEVEL = 1


def gray_pixels(image: Image.Image) -> npt.NDArray[np.uint8] | None:
    """The 2-D uint8 pixels of a grey picture (mode ``L``, or RGB with three equal channels as upstream's
    ``L`` -> ``RGB`` slices are), or None for anything else."""
    import numpy as np

    mode = getattr(image, "mode", None)
    if mode == "L":
        return np.asarray(image)
    if mode != "RGB":
        return None
    arr = np.asarray(image)
    first = arr[..., 0]
    if np.array_equal(first, arr[..., 1]) and np.array_equal(first, arr[..., 2]):
        return np.ascontiguousarray(first)
    return None


def _deflate() -> Callable[[ReadableBuffer], bytes]:
    try:
        from isal import isal_zlib

        return lambda data: isal_zlib.compress(data, 1)
    except ImportError:  # pragma: no cover - isal is a core dependency; stdlib zlib is the fallback
        import zlib

        return lambda data: zlib.compress(data, PNG_COMPRESS_LEVEL)


class _Crc32(Protocol):
    """zlib's ``crc32(data, value=0)``."""

    def __call__(self, data: ReadableBuffer, value: int = 0, /) -> int: ...


def _crc32() -> _Crc32:
    """CRC-32 as zlib computes it (PNG's chunk checksum): isal's where present (about 8x faster), else zlib's."""
    try:
        from isal import isal_zlib

        return isal_zlib.crc32
    except ImportError:  # pragma: no cover - isal is a core dependency
        import zlib

        return zlib.crc32


_DEFLATE = _deflate()
_CRC32 = _crc32()
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_chunk(parts: list[bytes], kind: bytes, data: bytes) -> None:
    """Append one PNG chunk (length, type, data, CRC of type and data) to ``parts``."""
    parts += [len(data).to_bytes(4, "big"), kind, data, _CRC32(data, _CRC32(kind)).to_bytes(4, "big")]


def png_gray(pixels: npt.ArrayLike) -> bytes:
    """A lossless 8-bit greyscale PNG of a 2-D uint8 array (PNG 1.2: colour type 0, filter 0 on every row).

    The scanlines are deflated straight from the array and the file is joined once: the only copies of the pixels
    are the filter-byte layout and the compressed stream (the encoder threads hold the GIL for copies)."""
    import numpy as np

    pixels = np.asarray(pixels)
    if pixels.ndim != 2 or pixels.dtype != np.uint8 or 0 in pixels.shape:
        raise ValueError(f"png_gray needs a non-empty 2-D uint8 array, got {pixels.dtype} {pixels.shape}")
    h, w = pixels.shape
    rows = np.zeros((h, w + 1), np.uint8)  # each scanline starts with its filter type byte: 0 (None)
    rows[:, 1:] = pixels
    header = w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, 0, 0, 0, 0])  # depth 8, grey, no interlace
    parts = [_PNG_SIGNATURE]
    _png_chunk(parts, b"IHDR", header)
    _png_chunk(parts, b"IDAT", _DEFLATE(rows.data))  # the array's buffer: no bytes copy of the scanlines
    _png_chunk(parts, b"IEND", b"")
    return b"".join(parts)


def encode_image(image: Image.Image, image_format: str = "png", jpeg_quality: int = 95) -> EncodedImage:
    """Encode one PIL image to base64: PNG (lossless; grey slices single-channel) or JPEG (RGB)."""
    pil_format, mime = FORMATS[check_format(image_format)]
    if pil_format == "PNG":
        gray = gray_pixels(image)
        if gray is not None:
            h, w = gray.shape
            return EncodedImage(mime, b64_text(png_gray(gray)), int(w), int(h))
    buf = io.BytesIO()
    image = image if getattr(image, "mode", "RGB") == "RGB" else image.convert("RGB")
    if pil_format == "JPEG":
        image.save(buf, format="JPEG", quality=jpeg_quality)
    else:
        image.save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    width, height = image.size
    return EncodedImage(mime, b64_text(buf.getvalue()), int(width), int(height))


class ImageCache:
    """Thread-safe LRU of encoded images per slice, bounded by the total size of the base64 text."""

    def __init__(self, image_format: str | None = "png", *, max_bytes: int = 256 * 1024 * 1024,
                 jpeg_quality: int = 95) -> None:
        self.image_format = check_format(image_format)
        self.max_bytes = max_bytes
        self.jpeg_quality = jpeg_quality
        self._items: OrderedDict[Hashable, tuple[EncodedImage, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.encoded = 0  # images encoded so far

    def key_for(self, request: GenRequest) -> Hashable | None:
        """The slice identity of a request's images, or None when the request carries none."""
        rundoc = getattr(request, "rundoc", None)
        doc = getattr(rundoc, "doc", None)
        if rundoc is None or doc is None:
            return None
        reshape = rundoc.view.reshape_hw
        # the intensity rule follows the task (dataset, task id and type, modality), the label's name (CT windows
        # per anatomy) and the protocol (which also fixes the zoom order of a reshape); a visual prompt's picture
        # also what is drawn on it (samples of one slice draw other boxes or lines)
        return (rundoc.data_root, doc.task, doc.family, doc.image_file, doc.slice_dim, doc.slice_idx,
                doc.meta.get("label_name"), getattr(rundoc, "protocol", "current"),
                tuple(reshape) if reshape else None, rundoc.view.client_resize_hw, self.image_format,
                getattr(rundoc, "variant", ""), rundoc.view.overlay, getattr(request, "image_variant", None))

    def lookup(self, key: Hashable | None) -> list[EncodedImage] | None:
        """The encoded images cached under ``key`` (from :meth:`key_for`), if any; no pixels are loaded."""
        if key is None:
            return None
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return list(item)

    def encode(self, request: GenRequest, key: Hashable | None) -> list[EncodedImage]:
        """Encode the request's images (loading them if needed), cache them under ``key`` (from :meth:`key_for`),
        and let the request drop its pixels."""
        out = tuple(encode_image(img, self.image_format, self.jpeg_quality) for img in request.get_images())
        with self._lock:
            self.encoded += len(out)
            if key is not None:
                old = self._items.pop(key, None)
                if old is not None:
                    self._bytes -= sum(len(i.b64) for i in old)
                self._items[key] = out
                self._bytes += sum(len(i.b64) for i in out)
                while self._bytes > self.max_bytes and len(self._items) > 1:
                    _, evicted = self._items.popitem(last=False)
                    self._bytes -= sum(len(i.b64) for i in evicted)
        request.release_images()
        return list(out)

