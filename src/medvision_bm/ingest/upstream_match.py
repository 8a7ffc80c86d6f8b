"""Matching upstream's records to our docs: a record's identity (image file below ``Datasets/``, slice, label,
A/D metric key, dataset, task type), its target checked against ours, and docs rebuilt from the records where no
plan is at hand (the native view of each slice)."""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Generic, TypeGuard, TypeVar, cast

import numpy as np

from medvision_bm.data.docs import Doc, View
from medvision_bm.data.image import header_zooms
from medvision_bm.data.layout import TaskName
from medvision_bm.data.task_meta import TaskMeta
from medvision_bm.ingest.upstream_files import Candidate
from medvision_bm.io import dumps
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.paths import relative_path_problem, show
from medvision_bm.tasks.families import family_spec, per_metric
from medvision_bm.tasks.scaled_ps import VARIANT as SCALED_PS_VARIANT
from medvision_bm.tasks.scaled_ps import scaled_view
from medvision_bm.tasks.scoring import target
from medvision_bm.tasks.upstream_prompts import scaled_ps_factors

_NUM_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.IGNORECASE)

# ----------------------------------------------------------------------------------------------- matching


#: What identifies one sample (slice_dim, slice_idx, label, A/D metric key): hashed and compared only.
Identity = tuple[int | None, int | None, int | None, object]
_I = TypeVar("_I")


def _num(value: JsonValue) -> JsonValue:
    """A value as upstream wrote it, back to a number where it is one (``str()``-ed numpy scalars included)."""
    if isinstance(value, str):
        try:
            f = float(value)
        except ValueError:
            return value
        return int(f) if f.is_integer() and re.fullmatch(r"[-+]?\d+", value.strip()) else f
    if isinstance(value, list):
        return [_num(v) for v in value]
    if isinstance(value, dict):
        return {k: _num(v) for k, v in value.items()}
    return value


def _int_or_none(value: JsonValue) -> int | None:
    try:
        return int(float(value)) if isinstance(value, str | int | float) else None
    except ValueError:
        return None


def to_int(value: JsonValue) -> int:
    """``int(value)`` of a row's field: a list, an object or null refused as ``int()`` refuses them (TypeError)."""
    if isinstance(value, str | int | float):
        return int(value)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not "
                    f"'{type(value).__name__}'")


def to_float(value: JsonValue) -> float:
    """``float(value)`` of a row's field: a list, an object or null refused as ``float()`` refuses them."""
    if isinstance(value, str | int | float):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")


def items_of(value: JsonValue) -> list[JsonValue]:
    """What iterating a row's field gives (a list's items, a text's characters, an object's keys); a number or
    null refused as iterating it is (TypeError)."""
    if isinstance(value, list):
        return value
    if isinstance(value, str | dict):
        return list(value)
    raise TypeError(f"'{type(value).__name__}' object is not iterable")


def _member(value: JsonValue, key: str) -> JsonValue:
    """``value[key]`` of a row's object (KeyError when it lacks it; TypeError for anything but an object)."""
    if isinstance(value, dict):
        return value[key]
    raise TypeError(f"'{type(value).__name__}' object is not subscriptable by a name")


def _boxes(value: JsonValue) -> dict[str, list[list[float]]] | None:
    """A row's ``bounding_boxes`` (an object of lists of coordinate lists, or null); anything else refused
    (TypeError). The numbers are kept as they are (an integer stays an integer in the docs written)."""
    if value is None:
        return None
    if isinstance(value, dict) and all(isinstance(v, list) for v in value.values()):
        boxes = {k: v for k, v in value.items() if isinstance(v, list) and _coordinate_lists(v)}
        if len(boxes) == len(value):
            return boxes
    raise TypeError(f"bounding_boxes is {show(value)}, not an object of lists of coordinate lists")


def _coordinate_lists(value: list[JsonValue]) -> TypeGuard[list[list[float]]]:
    return all(isinstance(row, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in row)
               for row in value)


def _profile(value: JsonValue) -> JsonObject | None:
    """A row's ``biometric_profile`` (an object, or null); anything else refused (TypeError)."""
    if value is None or isinstance(value, dict):
        return value
    raise TypeError(f"biometric_profile is {show(value)}, not an object")


def relative_data_path(path: object) -> str | None:
    """A path of upstream's row relative to ``<data_dir>/Datasets`` (the text after the last ``/Datasets/``)."""
    if not isinstance(path, str) or not path:
        return None
    p = path.replace("\\", "/")
    marker = "/Datasets/"
    if marker in p:
        p = p.rsplit(marker, 1)[1]
    elif p.startswith("Datasets/"):
        p = p[len("Datasets/"):]
    # what is left must stay below Datasets/: an absolute path or a '..' part is no file of the data (never read)
    return None if relative_path_problem(p) else p


def _metric_key(doc: Mapping[str, JsonValue]) -> str | None:
    bp = doc.get("biometric_profile")
    key = bp.get("metric_key") if isinstance(bp, dict) else None
    return key if isinstance(key, str) else None


def identity(doc: Mapping[str, JsonValue]) -> Identity:
    """What identifies one sample in upstream's row and in ours (image file matched separately, by path suffix)."""
    return (_int_or_none(doc.get("slice_dim")), _int_or_none(doc.get("slice_idx")), _int_or_none(doc.get("label")),
            _metric_key(doc))


def _targets_equal(upstream_target: str | None, ours: Sequence[float]) -> bool:
    if upstream_target is None:
        return True
    nums = [float(m) for m in _NUM_RE.findall(upstream_target)]
    if len(nums) != len(ours):
        return False
    return all(abs(a - b) <= 1e-6 + 1e-4 * abs(b) for a, b in zip(nums, ours))


class DocMatcher(Generic[_I]):
    """Our docs of one task, looked up by an upstream row; ``target_of(candidate, item)`` is the target a record must
    state (default: the doc's own; a -CoT-scaledPS record's is scaled by its factors: ``Views``).

    ``items`` are read once, in order, and only their identities are kept: per item, 64-bit hashes of (image path,
    slice_dim, slice_idx, label, A/D metric key) for its whole path and for each shorter tail of it, in two sorted
    arrays (a few bytes per item, whatever the items hold). ``fetch(position)`` gives an item back when a record
    points at it (default: ``items[position]``, for a held sequence), so a streamed selection of a million samples
    is matched without holding one doc. ``doc_of(item)`` is the item's Doc (default: the item itself).

    A record's image path (below ``Datasets/``) matches a doc whose path is the same, a tail of it or has it as a tail
    (each at a ``/``); of several docs the first in ``items``' order is taken."""

    def __init__(self, items: Iterable[_I], target_of: Callable[[Candidate, _I], list[float]] | None = None, *,
                 fetch: Callable[[int], _I] | None = None, doc_of: Callable[[_I], Doc] | None = None) -> None:
        # without doc_of the items are docs (every caller that leaves it out passes docs): each is its own doc
        self._doc_of: Callable[[_I], Doc] = doc_of if doc_of is not None else cast("Callable[[_I], Doc]", _itself)
        self._target_of = target_of or (lambda cand, item: target(self._doc_of(item)))
        if fetch is None:
            held = items if isinstance(items, Sequence) else list(items)
            items, fetch = held, held.__getitem__
        self._fetch: Callable[[int], _I] = fetch
        hashes: array[int] = array("q")
        places: array[int] = array("q")
        for pos, item in enumerate(items):
            d = self._doc_of(item)
            ident = _doc_identity(d)
            hashes.append(hash((0, d.image_file, *ident)))  # the whole path, then each shorter tail of it
            places.append(pos)
            for tail in _tails(d.image_file):
                hashes.append(hash((1, tail, *ident)))
                places.append(pos)
        order = np.argsort(np.frombuffer(hashes, dtype=np.int64), kind="stable")
        self._hashes = np.frombuffer(hashes, dtype=np.int64)[order]
        self._places = np.frombuffer(places, dtype=np.int64)[order]

    def _positions(self, rel: str, ident: Identity) -> list[int]:
        """The items whose path may match ``rel`` with this identity, in items' order (hash hits, checked after)."""
        wanted = [hash((0, rel, *ident)), hash((1, rel, *ident))]  # the same path; ``rel`` a tail of ours
        wanted += [hash((0, tail, *ident)) for tail in _tails(rel)]  # ours a tail of ``rel``
        keys = np.array(wanted, dtype=np.int64)
        lo, hi = np.searchsorted(self._hashes, keys, "left"), np.searchsorted(self._hashes, keys, "right")
        return sorted({int(p) for a, b in zip(lo.tolist(), hi.tolist()) for p in self._places[a:b].tolist()})

    def match_at(self, cand: Candidate) -> tuple[int | None, _I | None, str]:
        """(position, item, "") of the item ``cand`` is a sample of, or (None, None, why not)."""
        up = cand.doc
        slice_dim, slice_idx, label, metric_key = ident = identity(up)
        rel = relative_data_path(up.get("image_file"))
        hit: tuple[int, _I] | None = None
        for pos in self._positions(rel, ident) if rel is not None else ():
            item = self._fetch(pos)
            d = self._doc_of(item)
            if _doc_identity(d) == ident and _same_image(str(rel), d.image_file):
                hit = pos, item
                break
        if hit is None:
            return None, None, (f"no doc of ours has image {rel or '?'} slice_dim {slice_dim} slice_idx {slice_idx}"
                                + (f" label {label}" if label is not None else "")
                                + (f" metric {metric_key}" if metric_key else ""))
        pos, item = hit
        doc = self._doc_of(item)
        for name, mine in (("dataset_name", doc.dataset_name), ("taskType", doc.taskType)):
            theirs = up.get(name)
            if theirs is not None and str(theirs) != str(mine):
                return None, None, f"{name} {theirs!r} differs from ours ({mine!r})"
        ours = self._target_of(cand, item)
        if not _targets_equal(cand.target, ours):
            return None, None, f"target {cand.target} differs from ours {ours} ({_target_hint(doc)})"
        return pos, item, ""

    def match(self, cand: Candidate) -> tuple[_I | None, str]:
        """(item, "") of the item ``cand`` is a sample of, or (None, why not)."""
        _, item, why = self.match_at(cand)
        return item, why


def _same_image(rel: str, ours: str) -> bool:
    """A record's image path (below ``Datasets/``) names our doc's image: the same path, or one a tail of the other
    at a ``/``."""
    return rel == ours or rel.endswith("/" + ours) or ours.endswith("/" + rel)


def _itself(doc: Doc) -> Doc:
    """``DocMatcher``'s ``doc_of`` when its items are docs."""
    return doc


def _doc_identity(d: Doc) -> Identity:
    """A doc's identity as ``identity`` reads it from upstream's row."""
    return (d.slice_dim, d.slice_idx, d.label,
            (d.biometric_profile or {}).get("metric_key") if per_metric(d.family) else None)


def _tails(path: str) -> Iterator[str]:
    """Each shorter tail of a path, after each ``/`` in it."""
    start = path.find("/")
    while start >= 0:
        yield path[start + 1:]
        start = path.find("/", start + 1)


def _target_hint(doc: Doc) -> str:
    return ("a -CoT-scaledPS run asked with another factor range? pass its --scaled_ps_low/--scaled_ps_high"
            if doc.task.endswith(SCALED_PS_VARIANT) else "another annotation version?")


class Views:
    """The view of each matched record, made once: the native slice's (``native_view``), and for a -CoT-scaledPS
    T/L or A/D task also upstream's per-sample factors and the scaled target (upstream's
    ``doc_to_target_*_scaledPS``, ``tasks/scaled_ps.py``). The factors are drawn from the record's own doc fields,
    the image path exactly as upstream's loader wrote it (``_get_pixel_size_scale_factor`` hashes that path), in
    the factor range the run was asked with (``MEDVISION_SCALED_PS_LOW/HIGH`` upstream; not in its files)."""

    def __init__(self, tn: TaskName, data_root: Path | None, meta: TaskMeta | None,
                 scaled_ps: tuple[float, float]) -> None:
        self.scaled = tn.variant == SCALED_PS_VARIANT and family_spec(tn.family).measure
        self.data_root, self.meta, self.scaled_ps = data_root, meta, scaled_ps

    def of(self, cand: Candidate, doc: Doc) -> View:
        """The view of ``cand`` as a sample of ``doc`` (made once, kept on the record: records are dropped as they
        are read, so no table of them may outlive one)."""
        if cand.view is None or cand.view[0] is not doc:
            view = native_view(doc, self.data_root)
            if self.scaled:
                up = cand.doc  # the fields as written: taskID "01" stays a string, as the seed hashes it
                label, task_id = up.get("label"), up.get("taskID")
                factors = scaled_ps_factors(str(up.get("image_file")), int(to_float(up["slice_dim"])),
                                            int(to_float(up["slice_idx"])),
                                            task_id if isinstance(task_id, str) else doc.taskID,
                                            None if label is None else str(label), doc.family, *self.scaled_ps)
                view = scaled_view(view, doc, self.data_root, self.scaled_ps, self.meta, factors=factors)
            cand.view = (doc, view)
        return cand.view[1]

    def target(self, cand: Candidate, doc: Doc) -> list[float]:
        return target(doc, self.of(cand, doc)) if self.scaled else target(doc)


#: The meta of every doc built from a record (one dict for all: a task holds up to ~900k of them; never changed)
_FROM_RECORD: JsonObject = {"source": "upstream record (imported without a data folder)"}


def doc_from_record(tn: TaskName, cand: Candidate,
                    target_of: Callable[[Candidate, Doc], list[float]] | None = None) -> tuple[Doc | None, str]:
    """Our Doc built from the row an upstream record carries (no data folder; ``tn`` the parsed task name), checked
    against the record's target (``target_of`` as for ``DocMatcher``); else None and the problem (file:line)."""
    c, task = cand, tn.name
    up = {k: _num(v) for k, v in c.doc.items()}
    try:
        image = relative_data_path(up["image_file"])
        if image is None:
            raise ValueError(f"image_file {show(up['image_file'])} is not a path below Datasets/ (absolute or "
                             "with '..')")
        label = _int_or_none(up.get("label"))
        slice_dim, slice_idx = to_int(up["slice_dim"]), to_int(up["slice_idx"])
        key = f"{image}:d{slice_dim}:s{slice_idx}" + (f":l{label}" if label is not None else "")
        spec = family_spec(tn.family)
        if spec.per_metric:
            key += f":{_member(up['biometric_profile'], 'metric_key')}"
        doc = Doc(
            key=key, task=task, family=tn.family, plane=tn.plane, split=tn.split,
            index=int(c.doc_id) if isinstance(c.doc_id, int) else -1, dataset_name=str(up["dataset_name"]),
            taskID=str(up.get("taskID") or tn.task_id), taskType=str(up.get("taskType") or tn.loader_task_type),
            image_file=image or "", mask_file=relative_data_path(up.get("mask_file")),
            landmark_file=relative_data_path(up.get("landmark_file")), slice_dim=slice_dim, slice_idx=slice_idx,
            label=label, image_size_2d=tuple(to_int(v) for v in items_of(up["image_size_2d"])),  # type: ignore[arg-type]
            pixel_size=tuple(to_float(v) for v in items_of(up["pixel_size"])),  # type: ignore[arg-type]
            image_size_3d=tuple(to_int(v) for v in items_of(up.get("image_size_3d") or [0, 0, 0])),  # type: ignore[arg-type]
            voxel_size=tuple(to_float(v) for v in items_of(up.get("voxel_size") or [0.0, 0.0, 0.0])),  # type: ignore[arg-type]
            bounding_boxes=_boxes(up.get("bounding_boxes")) if not spec.measure else None,
            biometric_profile=_profile(up.get("biometric_profile")) if spec.measure else None,
            meta=_FROM_RECORD)
        dumps(doc.to_json())  # NaN or infinity in the row: ValueError, reported below
        ours = target_of(c, doc) if target_of else target(doc)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        return None, f"{c.file.path}:{c.line}: doc lacks what a sample needs ({type(exc).__name__}: {exc})"
    if not _targets_equal(c.target, ours):
        return None, f"{c.file.path}:{c.line}: target {c.target} differs from its own doc's {ours}"
    return doc, ""


def native_view(doc: Doc, data_root: Path | None) -> View:
    """The slice as stored (no model resize): what scoring reads of a view is the header pixel size (nMAE's
    diagonal); the rest describes the native slice, not what upstream's model perceived (that is in the prompt)."""
    if data_root is not None:
        zooms = header_zooms(data_root / "Datasets" / doc.image_file)
        keep = [a for a in range(3) if a != doc.slice_dim]
        px = (float(zooms[keep[0]]), float(zooms[keep[1]]))
    else:  # the row's float16 pixel size: nMAE's diagonal then differs from upstream's in the 4th digit
        px = (float(doc.pixel_size[0]), float(doc.pixel_size[1]))
    hw = (int(doc.image_size_2d[0]), int(doc.image_size_2d[1]))
    return View(image_hw=hw, pixel_hw_mm=px, canvas_hw=hw, content_hw=hw, stated_pixel_hw_mm=px, header_pixel_hw=px)
