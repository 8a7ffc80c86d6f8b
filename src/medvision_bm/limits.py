"""The one place for the sizes and the value types the suite accepts from outside, and the readers that hold a file
and its fields to them.

Every file read from outside (plans, upstream samples and results files, trackers, volumes) is read only when it
is a regular file (a FIFO would block the run, a link to ``/dev/zero`` would fill memory) and no larger than its
limit, checked before anything is allocated. A JSON text nested deeper than the parser can follow is refused with
its name, never a RecursionError. A number, text or flag read from a file goes through the typed field readers
(:func:`int_field`, :func:`float_field`, :func:`text_field`, :func:`bool_field`): the wrong type, a non-finite
number or one outside its field's bounds is a :class:`BadField` naming the field, which each caller turns into a
per-sample reason or a one-line error naming the file. Each limit is far above what upstream's data and runs hold, so only a broken or
hostile input reaches it. Stdlib-only (the environment builder imports what it needs of :mod:`medvision_bm.io`).
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar, overload

from medvision_bm.errors import UserError

_T = TypeVar("_T")
_J = TypeVar("_J", bound="Mapping[str, object] | Sequence[object]")

MiB = 1 << 20
GiB = 1 << 30

#: Longest answer text stored (characters). A longer one keeps its first and last halves around ANSWER_CUT_MARK,
#: and its sample record says how many characters were cut (``truncated_chars``). Far above what the largest
#: --max_new_tokens (runner.config.MAX_NEW_TOKENS_CAP) can produce, so only a misbehaving server (or an imported
#: file) reaches it. The run path and the import path both cut here.
MAX_ANSWER_CHARS = 2_000_000
ANSWER_CUT_MARK = "\n[... answer cut here by medvision-bm: longer than its stored maximum ...]\n"

#: A plan's task header (every task key but the case lists), inflated: upstream's are a few kB.
MAX_PLAN_HEADER_BYTES = 16 * MiB
#: One case of a plan, inflated: upstream's largest (whole-body CT detection, every label's boxes per slice) are a
#: few MB.
MAX_PLAN_CASE_BYTES = 64 * MiB
#: One task of a plan read by the full parser (keys not in upstream's order), inflated.
MAX_PLAN_TASK_BYTES = 1 * GiB
#: A JSON file read whole (results.json, signature.json, a tracker, an upstream results file).
MAX_JSON_FILE_BYTES = 64 * MiB
#: One upstream samples file (lmms-eval ``*_samples_<task>.jsonl``) and the records read from it: upstream's
#: largest task (AbdomenAtlas1.0Mini_BoxCoordinate_Task01_Axial) has 916,437 samples, each a few kB.
MAX_SAMPLES_FILE_BYTES = 16 * GiB
MAX_SAMPLES_RECORDS = 1_000_000
#: One line of a samples file (one record): an answer over MAX_ANSWER_CHARS is stored cut, a line over this is
#: reported malformed without being parsed.
MAX_RECORD_BYTES = 256 * MiB
#: The largest sample index ``--sample_indices`` takes (upstream's largest task has 916,437 samples).
MAX_SAMPLE_INDEX = 1_999_999
#: Decoded volume bytes a NIfTI header may claim, and the most a gzip stream can inflate to per stored byte
#: (deflate's limit is about 1032:1), so that a 1 kB file claiming 8e9 voxels is refused before any allocation.
MAX_VOLUME_BYTES = 32 * GiB
MAX_DEFLATE_RATIO = 1032
#: Nesting a JSON reply, record or file may have (Python's parser recurses per level; orjson stops at 1024).
MAX_JSON_DEPTH = 512
#: The largest integer a JSON line of a store may hold: orjson, which reads the store back, reads 64-bit integers.
MAX_JSON_INT = (1 << 63) - 1
#: Per request: tokens in one usage field, seconds of latency, attempts. Far above any real request, and low enough
#: that the totals over MAX_SAMPLES_RECORDS requests stay exact 64-bit integers and finite floats.
MAX_TOKENS = 10**12
MAX_LATENCY_S = 1e7
MAX_ATTEMPTS = 1_000_000
#: A sample count read from a file (a reference's ``n``).
MAX_COUNT = 10**9
#: Decimal places a number read from a file may ask to be shown with (a reference's ``decimals``).
MAX_DECIMALS = 12
#: A file of reference numbers (`--reference`): the packaged leaderboard is about 1 MB.
MAX_REFERENCE_BYTES = 64 * MiB


class TooLarge(UserError):
    """An input over its limit (this module's constants); the message names the input, its size and the limit."""


def cap_answer(text: str, limit: int | None = None) -> tuple[str, int]:
    """``text`` whole when it fits, else its head and tail around ANSWER_CUT_MARK; and the characters cut."""
    limit = MAX_ANSWER_CHARS if limit is None else limit
    if len(text) <= limit:
        return text, 0
    half = limit // 2
    return text[:half] + ANSWER_CUT_MARK + text[-half:], len(text) - 2 * half


def size_text(n: int) -> str:
    """Bytes as people read them: '64 MiB', '1.5 GiB', '812 bytes'."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def non_regular_problem(mode: int) -> str | None:
    """Why a file of this ``st_mode`` is not read (a FIFO, a device, a socket, a folder), or None for a regular one."""
    if stat.S_ISREG(mode):
        return None
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")
    return f"is {kind}, not a regular file"


def open_regular(path: str | os.PathLike[str], what: str, limit: int | None = None) -> IO[bytes]:
    """``path`` opened for reading in binary, when it is a regular file (links followed) of at most ``limit``
    bytes; else a one-line UserError naming ``what``. A FIFO is refused without blocking on it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise UserError(f"{what} {path} cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        why = non_regular_problem(st.st_mode)
        if why:
            raise UserError(f"{what} {path} {why}; pass the file itself")
        if limit is not None and st.st_size > limit:
            raise TooLarge(f"{what} {path} has {size_text(st.st_size)}, over the {size_text(limit)} this suite "
                           "reads of it; it is not a file of this kind, or is damaged")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str | os.PathLike[str], what: str, limit: int | None = None) -> int:
    """The size of ``path`` when :func:`open_regular` would open it (the same checks, nothing read)."""
    with open_regular(path, what, limit) as fh:
        return os.fstat(fh.fileno()).st_size


def read_bytes(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes (a file that grows past it meanwhile is cut there
    and refused)."""
    with open_regular(path, what, limit) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"{what} {path} grew past the {size_text(limit)} this suite reads of it")
    return data


def loads_json(text: str | bytes, what: str) -> Any:
    """``json.loads`` (NaN accepted, as upstream's files have it) with a nesting past MAX_JSON_DEPTH or the
    parser's recursion refused as a ValueError naming ``what``, like any other text that is not JSON."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"{what} is nested too deep to read") from None
    if not json_depth_ok(value):
        raise ValueError(f"{what} is nested more than {MAX_JSON_DEPTH} levels deep")
    return value


QUICK_MISS = object()  # loads_quick: decode with json instead
#: Every byte to ``.`` but the digits, to ``0``: a run of 19 digits (a number that may be an integer past 64 bits,
#: which orjson reads as a float where json reads an int) shows as 19 ``0`` in a text so translated.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= b <= 0x39 else 0x2E for b in range(256))
_LONG_DIGITS = b"0" * 19


def loads_quick(data: bytes) -> object:
    """``data`` decoded by orjson when it is strict UTF-8 JSON without a run of 19 digits (what ``json.loads`` reads
    alike, and holding no NaN or infinity), else ``QUICK_MISS``: the caller decodes it with ``json`` (NaN, big
    integers, another encoding, no JSON; or orjson is not installed). The nesting is not checked here."""
    try:
        import orjson  # a dependency of the package, absent while an environment's own packages install
    except ImportError:
        return QUICK_MISS
    if _LONG_DIGITS in data.translate(_DIGITS_ONLY):
        return QUICK_MISS
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return QUICK_MISS


def read_json_file(path: str | os.PathLike[str], what: str, limit: int | None = None) -> Any:
    """A JSON file read whole through :func:`read_bytes` and :func:`loads_json`: a one-line UserError naming the
    file when it is missing, not regular, too large, not UTF-8, not JSON or nested too deep."""
    data = read_bytes(path, what, MAX_JSON_FILE_BYTES if limit is None else limit)
    try:
        return loads_json(data.decode("utf-8"), f"{what} {path}")
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not UTF-8 text") from None
    except ValueError as exc:
        message = str(exc) if str(exc).startswith(f"{what} ") else f"{what} {path} is not JSON ({_first(exc)})"
        raise UserError(message) from None


def json_depth_ok(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a parsed value nests at most ``limit`` levels (iterative: never recurses itself)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return True


@overload
def finite_only(value: float) -> float | None: ...
@overload
def finite_only(value: _J) -> _J: ...
def finite_only(value: object) -> object:
    """A parsed JSON value with every NaN and infinity replaced by None (iterative; ``value`` itself is changed and
    returned): what a record of ours holds where a number is not finite."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            pairs = list(item.items())
        elif isinstance(item, list):
            pairs = list(enumerate(item))
        else:
            continue
        for k, v in pairs:
            if isinstance(v, float) and not math.isfinite(v):
                item[k] = None
            elif isinstance(v, dict | list):
                stack.append(v)
    return value


def _first(exc: BaseException) -> str:
    return (str(getattr(exc, "msg", "") or exc).strip().splitlines() or [""])[0][:80]


class BadField(ValueError):
    """A value read from outside that is not of its field's type or lies outside its bounds; the message names the
    field and shows the value cut short."""


def shown(value: object, limit: int = 40) -> str:
    """A value as a message quotes it: its repr cut to ``limit`` characters (a 5,000-digit integer is not printed
    whole, and Python refuses to turn one into text)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def int_field(value: object, field: str, lo: int = 0, hi: int = MAX_JSON_INT, *, lenient: bool = False) -> int:
    """``value`` as an integer of ``field`` in [lo, hi]; else BadField. ``lenient`` also takes what Python's
    ``int()`` takes where the format's writer applies it (a whole finite float, a short decimal text): never a
    bool, NaN, an infinity or a fraction."""
    x = value
    if lenient and isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) <= 2.0**63:
        x = int(x)
    elif lenient and isinstance(x, str) and 0 < len(x.strip()) <= 20 and x.strip().lstrip("+-").isdigit():
        x = int(x.strip())
    if type(x) is not int:
        raise BadField(f"{field} is {shown(value)}, not an integer")
    if not lo <= x <= hi:
        raise BadField(f"{field} is {shown(value)}, outside {lo}..{hi}")
    return x


def float_field(value: object, field: str, lo: float = -math.inf, hi: float = math.inf) -> float:
    """``value`` as a finite number of ``field`` in [lo, hi]; else BadField (a bool, a text, NaN, an infinity, an
    integer too large to be a float are not numbers of a field)."""
    if type(value) not in (int, float) or not isinstance(value, int | float):
        raise BadField(f"{field} is {shown(value)}, not a number")
    try:
        x = float(value)
    except OverflowError:
        raise BadField(f"{field} is {shown(value)}, not a finite number") from None
    if not math.isfinite(x):
        raise BadField(f"{field} is {shown(value)}, not a finite number")
    if not lo <= x <= hi:
        raise BadField(f"{field} is {shown(value)}, outside {lo:g}..{hi:g}")
    return x


def text_field(value: object, field: str, max_chars: int | None = None, *, blank: bool = True) -> str:
    """``value`` as a text of ``field`` of at most ``max_chars`` characters (``blank=False``: not empty); else
    BadField."""
    if type(value) is not str:
        raise BadField(f"{field} is {shown(value)}, not a text")
    if max_chars is not None and len(value) > max_chars:
        raise BadField(f"{field} has {len(value)} characters, over its {max_chars}")
    if not blank and not value.strip():
        raise BadField(f"{field} is empty")
    return value


def object_field(value: object, field: str) -> dict[str, object]:
    """``value`` as a JSON object of ``field`` (its keys texts); else BadField."""
    if type(value) is not dict:
        raise BadField(f"{field} is {shown(value)}, not an object")
    return value


def list_field(value: object, field: str, max_items: int | None = None) -> list[object]:
    """``value`` as a JSON list of ``field`` of at most ``max_items`` items; else BadField."""
    if type(value) is not list:
        raise BadField(f"{field} is {shown(value)}, not a list")
    if max_items is not None and len(value) > max_items:
        raise BadField(f"{field} has {len(value)} items, over its {max_items}")
    return value


def bool_field(value: object, field: str) -> bool:
    """``value`` as true or false of ``field``; else BadField."""
    if type(value) is not bool:
        raise BadField(f"{field} is {shown(value)}, not true or false")
    return value


def count_or_none(value: object, hi: int) -> int | None:
    """A count a server or backend reported, kept when it is an integer in 0..``hi`` (a server's 10**30 tokens is
    not stored: nothing stored is out of its reader's bounds), else None (not reported)."""
    return value if type(value) is int and 0 <= value <= hi else None


def seconds_within(value: float, hi: float = MAX_LATENCY_S) -> float:
    """A measured duration as a record keeps it: in 0..``hi``, rounded to microseconds (NaN: 0)."""
    return round(min(value, hi), 6) if value >= 0 else 0.0


def optional(read: Callable[..., _T], value: object, *args: object, **kw: object) -> _T | None:
    """None for None (a field left out or null), else ``read(value, ...)``."""
    return None if value is None else read(value, *args, **kw)


def within(path: Path, root: Path) -> bool:
    """Whether ``path`` (resolved) lies inside ``root`` (resolved)."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
