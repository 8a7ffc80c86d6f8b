"""The sample browser's content: for chosen samples, the slice as sent (``tasks.hooks.visual``), the prompt
(``tasks.hooks.prompt``), and per run the raw answer, the parsed numbers, the target and upstream's per-sample
metrics. Raw answers and docs are found by searching the store files for the chosen keys, so the stores are never
parsed whole."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from medvision_bm.errors import UserError
from medvision_bm.io import atomic_path
from medvision_bm.report.load import Loaded
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import AnswerRecord, DocRow, NewerRecord
from medvision_bm.tasks import hooks
from medvision_bm.tasks.scoring import SAMPLE_METRICS, score_answer, target
from medvision_bm.tasks.upstream_parse import SampleStatus


@dataclass
class RunAnswer:
    """One run's answer to a browsed sample."""

    label: str
    status: str
    raw: str | None
    values: list[float] | None
    metrics: dict[str, float | None]
    parser: str = ""


@dataclass
class SampleCard:
    """One browsed sample (one view of it: runs that saw the image differently get cards of their own)."""

    family: str
    task: str
    key: str
    doc: dict[str, Any]
    view: dict[str, Any]
    prompt: str
    target: list[float]
    image: str | None  # path relative to the report folder
    image_note: str
    group: str = ""  # upstream's label group
    unit: str = ""  # unit of the target and of MAE
    answers: list[RunAnswer] = field(default_factory=list)


def choose_samples(loaded: Loaded, per_task: int, keys: list[str], seed: int) -> dict[str, list[str]]:
    """Per task: ``per_task`` keys drawn with the seed (in index order), plus any keys asked for by name."""
    out: dict[str, list[str]] = {}
    wanted = set(keys)
    for frame in loaded.samples.values():
        per = frame.group_by("task", "key").agg(pl.col("index").min()).sort("task", "index", "key")
        for (task,), sub in per.group_by("task", maintain_order=True):
            all_keys = sub["key"].to_list()
            rng = random.Random(f"{seed}:{task}")
            pick = set(rng.sample(all_keys, min(per_task, len(all_keys)))) | (wanted & set(all_keys))
            if pick:
                out[task] = [k for k in all_keys if k in pick]
    missing = wanted - {k for ks in out.values() for k in ks}
    if missing:
        raise UserError(f"--sample_keys {sorted(missing)[0]!r} is not a sample key of any run in the results; "
                        "copy a key from parsed.jsonl or docs.jsonl")
    return out


def _needles(key: str) -> set[bytes]:
    """The ways a JSON writer may spell ``key`` as a string: non-ASCII as is (``medvision_bm.io.dumps``) or escaped,
    ``/`` as is or escaped. Each is a long needle: a miss costs one fast scan (far less than looking for any
    escaped slash in the file first)."""
    out = set()
    for text in {json.dumps(key, ensure_ascii=False), json.dumps(key)}:
        out.add(text.encode("utf-8"))
        out.add(text.replace("/", "\\/").encode("utf-8"))
    return out


R = TypeVar("R", AnswerRecord, DocRow)


def _find_lines(path: Path, keys: set[str], record: Callable[[Any], R]) -> dict[str, list[R]]:
    """Records of ``path`` whose key is one of ``keys`` (file order), found by a byte search for each key's JSON
    string, whatever the JSON spacing around it (``"key":"k"``, ``"key": "k"``, ``"key" : "k"``); each line found is
    parsed (``record``: the file's ``from_json``) and kept only when its ``key`` field is that key."""
    data = path.read_bytes()
    found: dict[str, dict[int, R]] = {}
    for key in keys:
        for needle in _needles(key):
            pos = data.find(needle)
            while pos >= 0:
                start = data.rfind(b"\n", 0, pos) + 1
                end = data.find(b"\n", pos)
                end = len(data) if end < 0 else end
                if start not in found.get(key, {}):
                    try:
                        rec = record(json.loads(data[start:end]))
                    except NewerRecord as exc:  # refused, naming the file it is in
                        raise NewerRecord(f"{path}: {exc}") from None
                    except (ValueError, UnicodeDecodeError):  # RecordError is a ValueError
                        rec = None
                    if rec is not None and rec.key == key:
                        found.setdefault(key, {})[start] = rec
                pos = data.find(needle, end)
    return {k: [v[s] for s in sorted(v)] for k, v in found.items()}


def _lookup(path: Path, keys: set[str], record: Callable[[Any], R]) -> dict[str, list[R]]:
    """Records of ``path`` (in file order) whose key is one of ``keys``; a missing file has none."""
    try:
        return _find_lines(path, keys, record)
    except OSError:
        return {}


def _records(folder: Path, keys: set[str]) -> dict[str, list[AnswerRecord]]:
    """Sample records for ``keys`` across segments in the order the store reads them."""
    out: dict[str, list[AnswerRecord]] = {}
    for seg in StoreLayout(folder).segments():
        for k, recs in _lookup(seg, keys, AnswerRecord.from_json).items():
            out.setdefault(k, []).extend(recs)
    return out


def _raw_answer(records: list[AnswerRecord], sig: str, doc_sha: str | None) -> str | None:
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


def build_cards(loaded: Loaded, chosen: dict[str, list[str]], data_dir: Path | None, image_note: str,
                out_dir: Path) -> list[SampleCard]:
    """Cards for the chosen samples; slices are written as PNG under ``out_dir/slices`` when data is known."""
    stores = loaded.store_frame()
    by_id = {s.id: s for s in loaded.stores}
    wanted = [k for keys in chosen.values() for k in keys]
    cards: list[SampleCard] = []
    for family, frame in loaded.samples.items():
        metrics = list(SAMPLE_METRICS[family])
        rows = frame.filter(pl.col("key").is_in(wanted) & pl.col("task").is_in(list(chosen))) \
            .join(stores.select("store", "label"), on="store") \
            .select("store", "label", "task", "key", "group", "status", "parser", "rules", *metrics) \
            .sort("task", "key", "label")
        keys_by_store: dict[int, set[str]] = {}
        members_of: list[dict[str, Any]] = []
        for r in rows.iter_rows(named=True):
            if r["key"] in chosen.get(r["task"], ()):
                keys_by_store.setdefault(r["store"], set()).add(r["key"])
                members_of.append(r)
        raw_by_store = {sid: _records(by_id[sid].ref.folder, keys) for sid, keys in keys_by_store.items()}
        docs_by_store: dict[int, dict[str, list[DocRow]]] = {}

        # docs.jsonl of the first store of each task; another store whose counted answer was given on the very same
        # doc (same doc_sha) shares its row, so most stores' docs.jsonl is never read
        first_of_task: dict[str, int] = {}
        for r in members_of:
            first_of_task.setdefault(r["task"], r["store"])
        groups: dict[tuple[str, str, str | None], list[tuple[dict[str, Any], DocRow]]] = {}
        for r in members_of:
            sid, key = r["store"], r["key"]
            first = first_of_task[r["task"]]
            first_docs = _docs_of(docs_by_store, first, by_id[first].ref.folder, keys_by_store[first]).get(key)
            ref = first_docs[-1] if first_docs else None
            sig = by_id[sid].ref.answer_signature
            same = ref is not None and any(rec.answer_signature == sig and rec.ok and rec.doc_sha == ref.doc_sha
                                           for rec in raw_by_store[sid].get(key, []))
            found = [ref] if same and ref is not None else _docs_of(docs_by_store, sid, by_id[sid].ref.folder, keys_by_store[sid]).get(key)
            if not found:
                continue
            drow = found[-1]
            groups.setdefault((r["task"], key, drow.doc_sha), []).append((r, drow))
        for (task, key, sha), members in groups.items():
            drow = members[0][1]
            try:
                rd = drow.rundoc()
            except (KeyError, TypeError, ValueError, IndexError):
                continue
            card = _card(family, task, key, drow, rd, data_dir, image_note, out_dir, members[0][0]["group"])
            for r, _ in members:
                store = by_id[r["store"]]
                raw = _raw_answer(raw_by_store[r["store"]].get(key, []), store.ref.answer_signature, sha)
                values = None
                if raw is not None and r["status"] in (SampleStatus.OK, SampleStatus.PARSE_FAILED):
                    sc = score_answer(rd.doc, rd.view, raw, r["parser"] or "strict-1", r["rules"] or "newer")
                    values = list(sc.values) if sc.values is not None else None
                card.answers.append(RunAnswer(r["label"], r["status"], raw, values, {m: r.get(m) for m in metrics},
                                              r["parser"] or ""))
            cards.append(card)
    return cards


def _card(family: str, task: str, key: str, drow: DocRow, rd, data_dir: Path | None, note: str,
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
            image_note = f"the slice as sent: {w}×{h} px"
            ch, cw = view.canvas_hw
            if (ch, cw) != (h, w):
                image_note += f" (the model perceives a {cw}×{ch} px canvas)"
            if family == "detect":
                image_note += "; green: the target box (drawn over it here, not sent)"
        except (UserError, OSError, ValueError) as exc:
            image_note = f"slice not rendered: {exc}"
    try:
        tgt = list(target(doc, view))
    except (KeyError, TypeError, ValueError, IndexError):
        tgt = []
    unit = {"detect": "relative coordinates", "TL": "mm"}.get(family) or \
        ("degrees" if doc.metric_type == "angle" else "mm")
    return SampleCard(family, task, key, dict(drow.doc), dict(drow.view), prompt, tgt, image, image_note, group or "",
                      unit)
