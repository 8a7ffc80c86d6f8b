"""The sample browser's content: for chosen samples, the slice as sent (``tasks.hooks.visual``), the prompt
(``tasks.hooks.prompt``), and per run the raw answer, the parsed numbers, the target and upstream's per-sample
metrics; the target and each parsed answer as shapes over the slice (boxes; T/L axes and A/D lines from the slice's
landmarks, resolved through the task's maps as upstream's prompt does). Raw answers and docs are found by searching
the store files for the chosen keys, so the stores are never parsed whole."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import polars as pl

from medvision_bm import limits
from medvision_bm.data.docs import Doc, RunDoc
from medvision_bm.errors import UserError
from medvision_bm.io import atomic_path
from medvision_bm.jsontypes import JsonMapping, JsonValue
from medvision_bm.report.groups import unit_name
from medvision_bm.report.load import VALUES, Loaded, collection_paused
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import AnswerText, DocRow, NewerRecord, answer_text
from medvision_bm.tasks import hooks
from medvision_bm.tasks.families import FamilyView, family_spec
from medvision_bm.tasks.scoring import SAMPLE_METRICS, score_answer, target
from medvision_bm.tasks.upstream_parse import SampleStatus

if TYPE_CHECKING:
    from medvision_bm.data.task_meta import TaskMeta


@dataclass(frozen=True)
class Shape:
    """One thing drawn over a slice, in pixels of the slice as sent (x right, y down): a ``box`` (x0, y0, x1, y1),
    a ``segment`` (x0, y0, x1, y1) or a ``point`` (x, y); ``name`` says what it is (legend and tooltip)."""

    kind: str
    coords: tuple[float, ...]
    name: str


@dataclass
class RunAnswer:
    """One run's answer to a browsed sample."""

    label: str
    status: str
    raw: str | None
    values: list[float] | None
    metrics: dict[str, float | None]
    parser: str = ""
    shapes: list[Shape] = field(default_factory=list)  # the parsed answer drawn over the slice
    worst: bool = False  # this run's worst error on the task among the browsed samples


@dataclass
class SampleCard:
    """One browsed sample (one view of it: runs that saw the image differently get cards of their own)."""

    family: str
    task: str
    key: str
    doc: JsonMapping
    view: JsonMapping
    prompt: str
    target: list[float]
    image: str | None  # path relative to the report folder
    image_note: str
    group: str = ""  # upstream's label group
    unit: str = ""  # unit of the target and of MAE
    answers: list[RunAnswer] = field(default_factory=list)
    image_size: tuple[int, int] | None = None  # (width, height) of the slice as sent
    target_shapes: list[Shape] = field(default_factory=list)  # the target drawn over the slice
    overlay_note: str = ""  # what of the target or the answers cannot be drawn, and why

    @property
    def failed(self) -> bool:
        """Some run has no successful answer to this sample."""
        return any(a.status != SampleStatus.OK for a in self.answers)

    @property
    def parse_failed(self) -> bool:
        return any(a.status == SampleStatus.PARSE_FAILED for a in self.answers)

    @property
    def worst(self) -> bool:
        return any(a.worst for a in self.answers)


#: The per-sample error the browser ranks by, per family, and whether a higher value is better.
WORST_BY: Mapping[str, tuple[str, bool]] = FamilyView(lambda s: s.ranked_by)


def _notable(frame: pl.DataFrame, family: str, n: int) -> dict[str, set[str]]:
    """Per task: the ``n`` samples with the worst errors (each sample ranked by the worst error any run made on it:
    lowest IoU, highest MRE, among the scored answers) and the first sample whose answer no parser read, so the
    browser's filters find them."""
    metric, higher = WORST_BY[family]
    out: dict[str, set[str]] = {}
    if metric in frame.columns:
        bad = (-pl.col(metric) if higher else pl.col(metric)).alias("bad")
        scored = frame.filter((pl.col("status") == SampleStatus.OK.value) & pl.col(metric).is_not_null()
                              & pl.col(metric).is_finite())
        ranked = scored.group_by("task", "key").agg(bad.max(), pl.col("index").min()) \
            .sort(["task", "bad", "index"], descending=[False, True, False])
        for row in ranked.group_by("task", maintain_order=True).head(n).iter_rows(named=True):
            out.setdefault(row["task"], set()).add(row["key"])
    failed = frame.filter(pl.col("status") == SampleStatus.PARSE_FAILED.value).sort("task", "index")
    for row in failed.group_by("task", maintain_order=True).first().iter_rows(named=True):
        out.setdefault(row["task"], set()).add(row["key"])
    return out


def choose_samples(loaded: Loaded, per_task: int, keys: list[str], seed: int) -> dict[str, list[str]]:
    """Per task: ``per_task`` keys drawn with the seed (in index order), plus any keys asked for by name, the
    ``per_task`` samples with the worst errors and the first parse failure."""
    out: dict[str, list[str]] = {}
    wanted = set(keys)
    for family, frame in loaded.samples.items():
        notable = _notable(frame, family, per_task) if per_task else {}
        per = frame.group_by("task", "key").agg(pl.col("index").min()).sort("task", "index", "key")
        for (task,), sub in per.group_by("task", maintain_order=True):
            all_keys = sub["key"].to_list()
            rng = random.Random(f"{seed}:{task}")
            pick = set(rng.sample(all_keys, min(per_task, len(all_keys)))) | (wanted & set(all_keys))
            pick |= notable.get(task, set())
            if pick:
                out[task] = [k for k in all_keys if k in pick]
    missing = wanted - {k for ks in out.values() for k in ks}
    if missing:
        raise UserError(f"--sample_keys {sorted(missing)[0]!r} is not a sample key of any run in the results; "
                        "copy a key from parsed.jsonl or docs.jsonl")
    return out


@functools.lru_cache(maxsize=4096)
def _needles(key: str) -> frozenset[bytes]:
    """The ways a JSON writer may spell ``key`` as a string: non-ASCII as is (``medvision_bm.io.dumps``) or escaped,
    ``/`` as is or escaped. Each is a long needle: a miss costs one fast scan (far less than looking for any
    escaped slash in the file first). Kept per key: every store of a task is searched for the same keys."""
    out = set()
    for text in {json.dumps(key, ensure_ascii=False), json.dumps(key)}:
        out.add(text.encode("utf-8"))
        out.add(text.replace("/", "\\/").encode("utf-8"))
    return frozenset(out)


def _loads_line(line: bytes) -> JsonValue:
    """A JSON line decoded as ``json.loads`` decodes it: quickly when it can (``limits.loads_quick``), else by
    ``json.loads`` (its ValueError for a line that is no JSON)."""
    obj = limits.loads_quick(line)
    return json.loads(line) if obj is limits.QUICK_MISS else obj  # type: ignore[return-value]


R = TypeVar("R", AnswerText, DocRow)


def _find_lines(path: Path, keys: set[str], record: Callable[[JsonValue], R]) -> dict[str, list[R]]:
    """Records of ``path`` whose key is one of ``keys`` (file order), found by a byte search for each key's JSON
    string, whatever the JSON spacing around it (``"key":"k"``, ``"key": "k"``, ``"key" : "k"``); each line found is
    parsed (``record``: the file's ``from_json``) and kept only when its ``key`` field is that key."""
    with open(path, "rb", buffering=0) as fh:  # the whole file in one read, without a buffer
        data = fh.readall()
    found: dict[str, dict[int, R]] = {}
    escapes = b"\\" in data  # a needle spelled with an escape can only be found in a file holding one
    for key in keys:
        for needle in _needles(key):
            if not escapes and b"\\" in needle:
                continue
            pos = data.find(needle)
            while pos >= 0:
                start = data.rfind(b"\n", 0, pos) + 1
                end = data.find(b"\n", pos)
                end = len(data) if end < 0 else end
                if start not in found.get(key, {}):
                    try:
                        rec = record(_loads_line(data[start:end]))
                    except NewerRecord as exc:  # refused, naming the file it is in
                        raise NewerRecord(f"{path}: {exc}") from None
                    except (ValueError, UnicodeDecodeError):  # RecordError is a ValueError
                        rec = None
                    if rec is not None and rec.key == key:
                        found.setdefault(key, {})[start] = rec
                pos = data.find(needle, end)
    return {k: [v[s] for s in sorted(v)] for k, v in found.items()}


def _lookup(path: Path, keys: set[str], record: Callable[[JsonValue], R]) -> dict[str, list[R]]:
    """Records of ``path`` (in file order) whose key is one of ``keys``; a missing file has none."""
    try:
        return _find_lines(path, keys, record)
    except OSError:
        return {}


def _records(segments: list[Path], keys: set[str]) -> dict[str, list[AnswerText]]:
    """Sample records for ``keys`` across a store's ``segments`` (listed in the order the store reads them): what
    the browser reads of each (``records.answer_text``)."""
    out: dict[str, list[AnswerText]] = {}
    for seg in segments:
        for k, recs in _lookup(seg, keys, answer_text).items():
            out.setdefault(k, []).extend(recs)
    return out


def _raw_answer(records: list[AnswerText], sig: str, doc_sha: str | None) -> str | None:
    """The answer the store counts: the first ok record of this signature and doc; else the last failure."""
    mine = [r for r in records if r.answer_signature == sig]
    for r in mine:
        if r.ok and (doc_sha is None or r.doc_sha == doc_sha):
            return r.text
    failed = [r for r in mine if not r.ok]
    if failed:
        err = failed[-1].error or {}
        return f"[request failed] {err.get('message') or err}" if err else "[request failed]"
    return None


def _docs_of(cache: dict[int, dict[str, list[DocRow]]], sid: int, folder: Path,
             keys: set[str]) -> dict[str, list[DocRow]]:
    """A store's docs.jsonl rows for ``keys``, read once."""
    if sid not in cache:
        cache[sid] = _lookup(StoreLayout(folder).docs, keys, DocRow.from_json)
    return cache[sid]


class _Member(NamedTuple):
    """One run's row of a browsed sample (its store, run label and task; its status, parser and rules; its
    metrics), as the sample frame holds it (a tuple: one is made per run of every card)."""

    store: int
    label: str
    task: str
    key: str
    group: str | None
    status: str
    parser: str | None
    rules: str | None
    metrics: dict[str, float | None]
    values: object = None  # the parsed numbers the frame holds (a list or None); _NOT_HELD: the frame holds none


_NOT_HELD = object()  # a frame without the parsed answers' values (a judged parse's): the answer is parsed again


def _answer_values(doc: RunDoc, member: _Member, raw: str | None) -> list[float] | None:
    """The parsed numbers of a run's counted answer: the ones its parsed row holds (``load.VALUES``: the same
    parse of the same answer), else the answer parsed again with the row's parser; None for an answer that was not
    parsed (no answer found, a failed request) or parsed to nothing."""
    if raw is None or member.status not in (SampleStatus.OK, SampleStatus.PARSE_FAILED):
        return None
    held = member.values
    if held is None:
        return None
    if isinstance(held, list) and all(isinstance(v, float) for v in held):
        return [float(v) for v in held]
    sc = score_answer(doc.doc, doc.view, raw, member.parser or "strict-1", member.rules or "newer")
    return list(sc.values) if sc.values is not None else None


@collection_paused
def build_cards(loaded: Loaded, chosen: dict[str, list[str]], data_dir: Path | None, image_note: str,
                out_dir: Path) -> list[SampleCard]:
    """Cards for the chosen samples; slices are written as PNG under ``out_dir/slices`` when data is known."""
    stores = loaded.store_frame()
    by_id = {s.id: s for s in loaded.stores}
    wanted = [k for keys in chosen.values() for k in keys]
    cards: list[SampleCard] = []
    for family, frame in loaded.samples.items():
        metrics = list(SAMPLE_METRICS[family])
        held = VALUES in frame.columns
        rows = frame.filter(pl.col("key").is_in(wanted) & pl.col("task").is_in(list(chosen))) \
            .join(stores.select("store", "label"), on="store") \
            .select("store", "label", "task", "key", "group", "status", "parser", "rules", *metrics,
                    *([VALUES] if held else [])) \
            .sort("task", "key", "label")
        keys_by_store: dict[int, set[str]] = {}
        members_of: list[_Member] = []
        col = {c: rows[c].to_list() for c in rows.columns}  # column-wise: far cheaper than a dict per row
        metric_rows = ([dict(zip(metrics, found)) for found in zip(*(col[m] for m in metrics))] if metrics
                       else [{} for _ in range(rows.height)])
        values_col = col[VALUES] if held else None
        picked = {task: set(keys) for task, keys in chosen.items()}
        for n, (task, key) in enumerate(zip(col["task"], col["key"])):
            if key in picked.get(task, ()):
                r = _Member(col["store"][n], col["label"][n], task, key, col["group"][n], col["status"][n],
                            col["parser"][n], col["rules"][n], metric_rows[n],
                            values_col[n] if values_col is not None else _NOT_HELD)
                keys_by_store.setdefault(r.store, set()).add(r.key)
                members_of.append(r)
        raw_by_store = {sid: _records(by_id[sid].answer_segments(), keys) for sid, keys in keys_by_store.items()}
        metas: dict[str, TaskMeta | Exception] = {}
        docs_by_store: dict[int, dict[str, list[DocRow]]] = {}

        # docs.jsonl of the first store of each task; another store whose counted answer was given on the very same
        # doc (same doc_sha) shares its row, so most stores' docs.jsonl is never read
        first_of_task: dict[str, int] = {}
        for r in members_of:
            first_of_task.setdefault(r.task, r.store)
        groups: dict[tuple[str, str, str | None], list[tuple[_Member, DocRow]]] = {}
        for r in members_of:
            sid, key = r.store, r.key
            first = first_of_task[r.task]
            first_docs = _docs_of(docs_by_store, first, by_id[first].ref.folder, keys_by_store[first]).get(key)
            ref = first_docs[-1] if first_docs else None
            sig = by_id[sid].ref.answer_signature
            same = ref is not None and any(rec.answer_signature == sig and rec.ok and rec.doc_sha == ref.doc_sha
                                           for rec in raw_by_store[sid].get(key, []))
            found = [ref] if same and ref is not None else _docs_of(docs_by_store, sid, by_id[sid].ref.folder, keys_by_store[sid]).get(key)
            if not found:
                continue
            drow = found[-1]
            groups.setdefault((r.task, key, drow.doc_sha), []).append((r, drow))
        for (task, key, sha), members in groups.items():
            drow = members[0][1]
            try:
                rd = drow.rundoc()
            except (KeyError, TypeError, ValueError, IndexError):
                continue
            card = _card(family, task, key, drow, rd, data_dir, image_note, out_dir, members[0][0].group or "")
            geometry = _Geometry.of(card, rd, data_dir, by_id[members[0][0].store].ref.inputs, metas)
            for r, _ in members:
                store = by_id[r.store]
                raw = _raw_answer(raw_by_store[r.store].get(key, []), store.ref.answer_signature, sha)
                values = _answer_values(rd, r, raw)
                card.answers.append(RunAnswer(r.label, r.status, raw, values, dict(r.metrics), r.parser or "",
                                              geometry.answer(values, raw)))
            cards.append(card)
    mark_worst(cards)
    return cards


_STEP_ANSWER = {k: re.compile(rf"<step-{k}-answer>(.*?)</step-{k}-answer>", re.S) for k in (1, 2)}
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def step_endpoints(raw: str, family: str, metric_type: str = "") -> list[tuple[tuple[float, float], ...]] | None:
    """The positions a chain-of-thought answer gives in its first two step answers, as upstream's visualisation reads
    them (``script/visualization/viz_tl_axes.py`` @28f6c67 ``parse_axis_coords``: per step the last numbers in
    [0, 1], relative (x, y) with the origin at the lower-left corner): T/L the major then the minor axis, A/D angle
    line 1 then line 2 (two endpoints each), A/D distance landmark 1 then landmark 2 (one line). None when the answer
    has no such steps."""
    if family_spec(family).has_boxes:
        return None
    if "<step-1-answer>" not in raw:  # what the first step's pattern needs: most answers have no steps
        return None
    per_step = 2 if family_spec(family).per_metric and metric_type == "distance" else 4
    found = []
    for k in (1, 2):
        m = _STEP_ANSWER[k].search(raw)
        if m is None:
            return None
        values = [float(t.replace(",", "")) for t in _NUMBER.findall(m.group(1))]
        values = [v for v in values if 0.0 <= v <= 1.0]
        if len(values) < per_step:
            return None
        found.append(values[-per_step:])
    if per_step == 2:
        return [((found[0][0], found[0][1]), (found[1][0], found[1][1]))]
    return [((v[0], v[1]), (v[2], v[3])) for v in found]


def mark_worst(cards: list[SampleCard]) -> None:
    """Per task and run: mark the answer with the worst error among the browsed samples (``WORST_BY``), unless the
    run does equally well on all of them."""
    worst: dict[tuple[str, str], tuple[float, RunAnswer]] = {}
    least: dict[tuple[str, str], float] = {}
    for card in cards:
        metric, higher = WORST_BY[card.family]
        for a in card.answers:
            value = a.metrics.get(metric)
            if a.status != SampleStatus.OK or value is None or not math.isfinite(float(value)):
                continue
            badness = -float(value) if higher else float(value)
            key = (card.task, a.label)
            least[key] = min(least.get(key, badness), badness)
            if key not in worst or badness > worst[key][0]:
                worst[key] = (badness, a)
    for key, (badness, answer) in worst.items():
        answer.worst = badness > least[key]  # a run that is as good on every browsed sample has no worst one


def _meta_for(metas: dict[str, TaskMeta | Exception], data_dir: Path, inputs: JsonMapping,
              doc: Doc) -> TaskMeta | Exception:
    """The task's prompt metadata (its maps name the landmarks of each line): upstream's dataset module in the data
    folder, else the plan's task header at the store's annotation version; an exception says why there is none."""
    if doc.task not in metas:
        from medvision_bm.data.layout import DataDir, parse_task_name
        from medvision_bm.data.planner import LATEST_RELEASE, DatasetContract
        from medvision_bm.data.task_meta import load_task_meta

        tn = parse_task_name(doc.task)
        try:
            metas[doc.task] = load_task_meta(data_dir, tn.dataset, tn.kind, tn.task_id)
        except (FileNotFoundError, ValueError, OSError):
            try:  # the run that made the store acknowledged its annotation version: read the plan it read
                contract = DatasetContract(data_dir, str(inputs["planner_version"]), LATEST_RELEASE,
                                           bool(inputs.get("sample_filtering", True)))
                metas[doc.task] = DataDir(contract).samples(doc.task).meta_header
            except (UserError, KeyError, ValueError, OSError) as exc:
                metas[doc.task] = exc
    return metas[doc.task]


@dataclass
class _Geometry:
    """A card's target drawn over its slice, and how an answer of its family is drawn beside it."""

    family: str
    size: tuple[int, int]  # (width, height) of the slice as sent
    scale: tuple[float, float]  # native column and row -> sent x and y
    pixel_mm: tuple[float, float]  # native pixel height and width, mm
    axes: list[tuple[tuple[float, float], tuple[float, float]]] = field(default_factory=list)  # native (row, col)
    metric_type: str = ""

    @classmethod
    def of(cls, card: SampleCard, rd: RunDoc, data_dir: Path | None, inputs: JsonMapping,
           metas: dict[str, TaskMeta | Exception]) -> _Geometry:
        doc, view = rd.doc, rd.view
        native_h, native_w = (int(v) for v in doc.image_size_2d)
        w, h = card.image_size or (int(view.image_hw[1]), int(view.image_hw[0]))
        geo = cls(card.family, (w, h), (w / native_w, h / native_h),
                  (float(view.header_pixel_hw[0]), float(view.header_pixel_hw[1])),
                  metric_type=str(doc.metric_type or ""))
        if family_spec(card.family).has_boxes:
            if len(card.target) == 4:
                card.target_shapes = [Shape("box", geo._box(card.target), "target box")]
            return geo
        if data_dir is None or not doc.landmark_file:
            card.overlay_note = "target landmarks not drawn: no data folder (--data_dir) or landmark file"
            return geo
        try:
            geo.axes = geo._target_axes(doc, data_dir, inputs, metas)
        except (UserError, KeyError, ValueError, IndexError, TypeError) as exc:
            card.overlay_note = f"target landmarks not drawn: {exc}"
            return geo
        names = (["target major axis", "target minor axis"] if family_spec(card.family).axes
                 else [f"target line {i + 1}" for i in range(len(geo.axes))])
        for (a, b), name in zip(geo.axes, names):
            card.target_shapes.append(Shape("segment", (*geo._xy(a), *geo._xy(b)), name))
            card.target_shapes += [Shape("point", geo._xy(p), f"{name} endpoint") for p in (a, b)]
        if family_spec(card.family).per_metric and geo.metric_type == "angle":
            card.overlay_note = "a plain angle answer gives no positions: compare the numbers in the table"
        return geo

    def _xy(self, rc: tuple[float, float]) -> tuple[float, float]:
        """A native (row, col) landmark at its pixel's centre, in sent pixels (x, y)."""
        return ((rc[1] + 0.5) * self.scale[0], (rc[0] + 0.5) * self.scale[1])

    def _box(self, values: list[float]) -> tuple[float, ...]:
        """Relative corners (lower-left origin, either order) as a box in sent pixels, y down."""
        w, h = self.size
        x0, x1 = sorted((float(values[0]), float(values[2])))
        y0, y1 = sorted((float(values[1]), float(values[3])))
        return (x0 * w, (1 - y1) * h, x1 * w, (1 - y0) * h)

    def _target_axes(self, doc: Doc, data_dir: Path, inputs: JsonMapping,
                     metas: dict[str, TaskMeta | Exception]) -> list[tuple[tuple[float, float], tuple[float, float]]]:
        from medvision_bm.data.landmarks import slice_landmarks
        from medvision_bm.data.task_meta import resolve_ad_names

        meta = _meta_for(metas, data_dir, inputs, doc)
        if isinstance(meta, Exception):
            raise ValueError(f"no task metadata ({meta})")
        if doc.landmark_file is None:  # (the caller draws no target for such a doc)
            raise ValueError("the doc names no landmark file")
        points = slice_landmarks(Path(data_dir) / "Datasets" / doc.landmark_file, doc.slice_dim, doc.slice_idx)
        bp = doc.biometric_profile or {}
        if family_spec(doc.family).axes:
            lines = meta.map_named(bp["metric_map_name"][0])
            keys = [tuple(lines[bp[f"metric_key_{axis}_axis"][0]]["element_keys"]) for axis in ("major", "minor")]
        else:
            flat = resolve_ad_names(meta, bp).point_keys
            keys = [tuple(flat[i:i + 2]) for i in range(0, len(flat), 2)]
        return [(points[a], points[b]) for a, b in keys]

    def answer(self, values: list[float] | None, raw: str | None = None) -> list[Shape]:
        """An answer drawn: a box as given; the axes or lines its step answers locate (a chain-of-thought answer,
        ``step_endpoints``); else a length laid along the target's axis or line (centred on a T/L axis, from the
        first landmark of an A/D line), since the answer gives no positions; nothing for an angle."""
        if family_spec(self.family).has_boxes:
            return [Shape("box", self._box(values), "answer box")] if values and len(values) == 4 else []
        steps = step_endpoints(raw or "", self.family, self.metric_type)
        if steps is not None:
            w, h = self.size
            step_names = ("answer major axis", "answer minor axis") if family_spec(self.family).axes else \
                ("answer line 1", "answer line 2")
            out = []
            for ((x0, y0), (x1, y1)), name in zip(steps, step_names):
                a, b = (x0 * w, (1 - y0) * h), (x1 * w, (1 - y1) * h)
                out += [Shape("segment", (*a, *b), name), Shape("point", a, f"{name} endpoint"),
                        Shape("point", b, f"{name} endpoint")]
            return out
        if not values:
            return []
        if family_spec(self.family).per_metric and self.metric_type == "angle":
            return []
        lengths: list[Shape] = []
        names = ("answer major axis length", "answer minor axis length") if family_spec(self.family).axes else \
            ("answer distance", "")
        for (a, b), length, name in zip(self.axes, values, names):
            drow, dcol = (b[0] - a[0]) * self.pixel_mm[0], (b[1] - a[1]) * self.pixel_mm[1]
            norm = math.hypot(drow, dcol)
            if not norm or not math.isfinite(float(length)):
                continue
            ur, uc = drow / norm / self.pixel_mm[0], dcol / norm / self.pixel_mm[1]  # native pixels per mm
            if family_spec(self.family).axes:
                mid = ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
                half = float(length) / 2
                p, q = (mid[0] - half * ur, mid[1] - half * uc), (mid[0] + half * ur, mid[1] + half * uc)
            else:
                p, q = a, (a[0] + float(length) * ur, a[1] + float(length) * uc)
            lengths.append(Shape("segment", (*self._xy(p), *self._xy(q)), name))
        return lengths


def _card(family: str, task: str, key: str, drow: DocRow, rd: RunDoc, data_dir: Path | None, note: str,
          out_dir: Path, group: str) -> SampleCard:
    legacy = drow.legacy
    doc, view = rd.doc, rd.view
    if data_dir is not None:
        rd = dataclasses.replace(rd, data_root=str(data_dir.resolve()))
    try:
        prompt = hooks.prompt(rd)
    except Exception as exc:  # a variant whose prompt reads the image file, without the data
        prompt = f"(prompt not rebuilt: {type(exc).__name__}: {exc})"
    if legacy:
        prompt = ("(legacy store: this sample was asked with the suite's earlier wording; shown is upstream's prompt "
                  "for it today)\n" + prompt)
    image, image_note = None, note
    size: tuple[int, int] | None = None
    if legacy:
        image_note = "slice not rendered: a legacy store's doc does not locate the image in upstream's layout"
    elif data_dir is not None:
        name = hashlib.sha256(f"{task}|{key}|{drow.doc_sha}".encode()).hexdigest()[:16]
        rel = Path("slices") / f"{name}.png"
        try:
            img = hooks.visual(rd)
            (out_dir / "slices").mkdir(parents=True, exist_ok=True)
            with atomic_path(out_dir / rel) as tmp:  # never a partial PNG under its final name
                img.save(tmp, format="PNG")
            image = rel.as_posix()
            w, h = img.size
            size = (int(w), int(h))
            image_note = f"the slice as sent: {w}×{h} px"
            ch, cw = view.canvas_hw
            if (ch, cw) != (h, w):
                image_note += f" (the model perceives a {cw}×{ch} px canvas)"
            image_note += "; the target and the answers are drawn over it here, not sent"
        except (UserError, OSError, ValueError) as exc:
            image_note = f"slice not rendered: {exc}"
    try:
        tgt = list(target(doc, view))
    except (KeyError, TypeError, ValueError, IndexError):
        tgt = []
    unit = unit_name(family_spec(family).error_unit(doc.metric_type))
    return SampleCard(family, task, key, dict(drow.doc), dict(drow.view), prompt, tgt, image, image_note, group or "",
                      unit, image_size=size)
