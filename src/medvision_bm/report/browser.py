"""The sample browser's content: for chosen samples, the slice as sent, the prompt, and per run the raw answer,
parsed numbers, target and error. Raw answers are found by searching the segments for the chosen keys, so the
stores are never parsed whole."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from medvision_bm.data.docs import Doc, View
from medvision_bm.data.planner import ENV_DATA_DIR
from medvision_bm.errors import UserError
from medvision_bm.io import iter_jsonl
from medvision_bm.report.load import Loaded, StoreInfo
from medvision_bm.report.tables import DISPLAY
from medvision_bm.tasks.metrics import score_answer, target
from medvision_bm.tasks.parse import PARSER_VERSION
from medvision_bm.tasks.prompts import build_prompt


@dataclass
class RunAnswer:
    """One run's answer to a browsed sample."""

    label: str
    status: str
    raw: str | None
    values: list[float] | None
    metrics: dict[str, float | None]


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
    answers: list[RunAnswer] = field(default_factory=list)


def resolve_data_dir(option: str | None, stores: list[StoreInfo]) -> tuple[Path | None, str]:
    """--data_dir, else MedVision_DATA_DIR, else the --data_dir recorded in a run's results.json."""
    candidates: list[tuple[str, str]] = []
    if option:
        candidates.append((option, "--data_dir"))
    elif os.environ.get(ENV_DATA_DIR, "").strip():
        candidates.append((os.environ[ENV_DATA_DIR].strip(), ENV_DATA_DIR))
    else:
        for s in stores:
            path = s.ref.folder / "results.json"
            try:
                argv = json.loads(path.read_text(encoding="utf-8")).get("argv") or []
            except (OSError, ValueError):
                continue
            argv = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv]
            for i, arg in enumerate(argv):
                if arg == "--data_dir" and i + 1 < len(argv):
                    candidates.append((argv[i + 1], "the run's --data_dir"))
                elif arg.startswith("--data_dir="):
                    candidates.append((arg.split("=", 1)[1], "the run's --data_dir"))
            if candidates:
                break
    for value, source in candidates:
        path = Path(value).expanduser()
        if (path / "Datasets").is_dir():
            return path, f"slices rendered from {path} ({source})"
        if option:
            raise UserError(f"--data_dir {value} has no Datasets/ folder; point it at the data folder the runs used")
    return None, ("slices not rendered: no data folder known (pass --data_dir DIR or set "
                  f"{ENV_DATA_DIR} to the folder the runs used)")


def choose_samples(loaded: Loaded, per_task: int, keys: list[str], seed: int) -> dict[str, list[str]]:
    """Per task: ``per_task`` keys drawn with the seed (in index order), plus any keys asked for by name."""
    out: dict[str, list[str]] = {}
    stores = loaded.store_frame()
    wanted = set(keys)
    for frame in loaded.samples.values():
        per = frame.join(stores.select("store", "task"), on="store").group_by("task", "key") \
            .agg(pl.col("index").min()).sort("task", "index", "key")
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


def _find_lines(path: Path, keys: set[str]) -> dict[str, list[dict[str, Any]]] | None:
    """Records of ``path`` whose key is one of ``keys``, found by a byte search for each key (file order);
    None when the file is not in the compact form the runner writes (then it must be read whole)."""
    data = path.read_bytes()
    if b'"key":' not in data and data.strip():
        return None
    found: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for key in keys:
        # the runner writes non-ASCII as is (medvision_bm.io.dumps); other writers may escape it
        for text in {json.dumps(key, ensure_ascii=False), json.dumps(key)}:
            needle = b'"key":' + text.encode("utf-8")
            pos = data.find(needle)
            while pos >= 0:
                start = data.rfind(b"\n", 0, pos) + 1
                end = data.find(b"\n", pos)
                end = len(data) if end < 0 else end
                try:
                    rec = json.loads(data[start:end])
                except (ValueError, UnicodeDecodeError):
                    rec = None
                if isinstance(rec, dict) and rec.get("key") == key:
                    found.setdefault(key, []).append((start, rec))
                pos = data.find(needle, end)
    return {k: [r for _, r in sorted(v, key=lambda t: t[0])] for k, v in found.items()}


def _lookup(path: Path, keys: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Records of ``path`` (in file order) whose key is one of ``keys``; a file written some other way (spacing)
    is read whole."""
    hits = _find_lines(path, keys)
    if hits is None:
        hits = {}
        for rec in iter_jsonl(path):
            if rec.get("key") in keys:
                hits.setdefault(rec["key"], []).append(rec)
    return hits


def _records(folder: Path, keys: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Sample records for ``keys`` across segments in the order the store reads them."""
    out: dict[str, list[dict[str, Any]]] = {}
    for seg in sorted((folder / "samples").glob("*.jsonl")):
        for k, recs in _lookup(seg, keys).items():
            out.setdefault(k, []).extend(recs)
    return out


def _raw_answer(records: list[dict[str, Any]], sig: str, doc_sha: str | None) -> str | None:
    """The answer the store counts: the first ok record of this signature and doc; else the last failure."""
    mine = [r for r in records if r.get("answer_signature") == sig]
    for r in mine:
        if r.get("status") == "ok" and (doc_sha is None or r.get("doc_sha") == doc_sha):
            return r.get("text")
    failed = [r for r in mine if r.get("status") != "ok"]
    if failed:
        err = failed[-1].get("error") or {}
        return f"[request failed] {err.get('message') or err}" if err else "[request failed]"
    return None


def build_cards(loaded: Loaded, chosen: dict[str, list[str]], data_dir: Path | None, image_note: str,
                out_dir: Path) -> list[SampleCard]:
    """Cards for the chosen samples; slices are written as PNG under ``out_dir/slices`` when data is known."""
    stores = loaded.store_frame()
    by_id = {s.id: s for s in loaded.stores}
    wanted = [k for keys in chosen.values() for k in keys]
    cards: list[SampleCard] = []
    for family, frame in loaded.samples.items():
        metrics = list(DISPLAY[family])
        rows = frame.filter(pl.col("key").is_in(wanted)).join(stores.select("store", "label", "task"), on="store") \
            .filter(pl.col("task").is_in(list(chosen))).select(
                "store", "label", "task", "key", "doc_sha", "status", *metrics).sort("task", "key", "label")
        groups: dict[tuple[str, str, str | None], list[dict[str, Any]]] = {}
        for r in rows.iter_rows(named=True):
            if r["key"] in chosen.get(r["task"], ()):
                groups.setdefault((r["task"], r["key"], r["doc_sha"]), []).append(r)
        keys_by_store: dict[int, set[str]] = {}
        for members in groups.values():
            for r in members:
                keys_by_store.setdefault(r["store"], set()).add(r["key"])
        raw_by_store = {sid: _records(by_id[sid].ref.folder, keys) for sid, keys in keys_by_store.items()}
        # parsed numbers: from parsed.jsonl when another (or an unrecorded) parser wrote it; else the current parser
        # on the raw answer gives the very same numbers without reading the file
        parsed_by_store = {sid: _lookup(by_id[sid].ref.folder / "parsed.jsonl", keys)
                           for sid, keys in keys_by_store.items()
                           if by_id[sid].source == "parsed.jsonl" and by_id[sid].parser_version != PARSER_VERSION}
        docs_path = {group: by_id[members[0]["store"]].ref.folder / "docs.jsonl" for group, members in groups.items()}
        keys_by_docs: dict[Path, set[str]] = {}
        for (_, key, _), path in docs_path.items():
            keys_by_docs.setdefault(path, set()).add(key)
        doc_rows = {path: _lookup(path, keys) for path, keys in keys_by_docs.items()}  # one read per docs.jsonl
        for (task, key, sha), members in groups.items():
            found = doc_rows[docs_path[(task, key, sha)]].get(key)
            if not found:
                continue
            drow = found[0]
            card, doc, view = _card(family, task, key, drow, data_dir, image_note, out_dir)
            for r in members:
                store = by_id[r["store"]]
                raw = _raw_answer(raw_by_store[r["store"]].get(key, []), store.ref.answer_signature, sha)
                if r["store"] in parsed_by_store:
                    values = ((parsed_by_store[r["store"]].get(key) or [{}])[0]).get("values")
                else:
                    values = score_answer(doc, view, raw).values if r["status"] in ("ok", "parse_failed") else None
                card.answers.append(RunAnswer(r["label"], r["status"], raw,
                                              list(values) if values is not None else None,
                                              {m: r.get(m) for m in metrics}))
            cards.append(card)
    return cards


def _card(family: str, task: str, key: str, drow: dict[str, Any], data_dir: Path | None, note: str,
          out_dir: Path) -> tuple[SampleCard, Doc, View]:
    doc, view = Doc.from_json(drow["doc"]), View.from_json(drow["view"])
    prompt = build_prompt(doc, view, drow.get("prompt_variant") or "plain")
    image, image_note = None, note
    if data_dir is not None:
        image_path = data_dir / "Datasets" / doc.dataset / doc.image
        name = hashlib.sha256(f"{task}|{key}|{drow.get('doc_sha')}".encode()).hexdigest()[:16]
        rel = Path("slices") / f"{name}.png"
        try:
            from medvision_bm.data.slices import render_slice

            img = render_slice(image_path, doc.slice_dim, doc.slice_idx, reshape_hw=view.reshape_hw,
                               window=doc.window)
            (out_dir / "slices").mkdir(parents=True, exist_ok=True)
            img.save(out_dir / rel)
            image = rel.as_posix()
            w, h = img.size
            image_note = f"the slice as sent: {w}×{h} px (the model sees {view.seen_hw[1]}×{view.seen_hw[0]})"
            if family == "detect":
                image_note += "; green: the target box (drawn over it here, not sent)"
        except (UserError, OSError, ValueError) as exc:
            image_note = f"slice not rendered: {exc}"
    card = SampleCard(family, task, key, drow["doc"], drow["view"], prompt, target(doc), image, image_note)
    return card, doc, view
