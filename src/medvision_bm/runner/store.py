"""The sample store: one folder per (model, task, answer signature), answers appended as they land.

    <results_dir>/<model_name>/<task>/<answer_sig[:12]>/
        signature.json       the answer-signature inputs (never secrets)
        docs.jsonl           every sample ever selected here (doc + view), relative paths only
        samples/<writer>.jsonl   one JSON line per answer; each process appends to a segment of its own
        results.json         metrics of the latest completed selection
        parsed.jsonl         per-sample parse and metrics (rewritten by `medvision-bm parse`)

A sample counts as answered when any segment holds an ``ok`` record with its key and its current ``doc_sha`` (the
first such record wins; later ones are counted as duplicates). Failed records are retried unless the run keeps them. Torn last lines and foreign lines are skipped.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medvision_bm.io import (
    JsonlAppender,
    dumps,
    file_lock,
    iter_jsonl,
    read_json,
    write_json_atomic,
    write_text_atomic,
)
from medvision_bm.models.base import GenResult

STORE_SCHEMA = 1


@dataclass
class StoreState:
    """What a store holds: per key and doc hash the first ok record, per key the latest failed record."""

    ok: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # key -> doc_sha -> record
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)
    bad_lines: int = 0
    foreign_lines: int = 0
    duplicates: int = 0

    def answer(self, key: str, doc_sha: str) -> dict[str, Any] | None:
        """The stored successful answer for this very sample (same key and doc hash), if any."""
        return self.ok.get(key, {}).get(doc_sha)

    def answered(self, key: str, doc_sha: str) -> bool:
        return self.answer(key, doc_sha) is not None


class SampleStore:
    def __init__(self, folder: str | Path, answer_signature: str) -> None:
        self.folder = Path(folder)
        self.answer_signature = answer_signature

    @property
    def samples_dir(self) -> Path:
        return self.folder / "samples"

    def init(self, signature_inputs: dict[str, Any]) -> None:
        """Create the folder and its signature file; refuse a folder that belongs to another signature."""
        self.folder.mkdir(parents=True, exist_ok=True)
        sig_path = self.folder / "signature.json"
        if sig_path.exists():
            existing = read_json(sig_path)
            if existing.get("answer_signature") != self.answer_signature:
                raise RuntimeError(f"store {self.folder} belongs to answer signature "
                                   f"{existing.get('answer_signature')}, not {self.answer_signature}")
        else:
            write_json_atomic(sig_path, {"answer_signature": self.answer_signature, "inputs": signature_inputs,
                                         "schema": STORE_SCHEMA})

    def read(self) -> StoreState:
        state = StoreState()
        if not self.samples_dir.is_dir():
            return state

        def bad(lineno: int, text: str) -> None:
            state.bad_lines += 1

        for seg in sorted(self.samples_dir.glob("*.jsonl")):
            for rec in iter_jsonl(seg, on_bad_line=bad):
                key = rec.get("key")
                if not isinstance(key, str) or rec.get("answer_signature") != self.answer_signature:
                    state.foreign_lines += 1
                    continue
                if rec.get("status") == "ok":
                    by_sha = state.ok.setdefault(key, {})
                    if rec.get("doc_sha") in by_sha:
                        state.duplicates += 1
                    else:
                        by_sha[rec.get("doc_sha")] = rec
                else:
                    state.failed[key] = rec
        return state

    def writer(self, label: str = "") -> StoreWriter:
        name = f"{label + '-' if label else ''}{socket.gethostname()}-{os.getpid()}-{time.time_ns()}.jsonl"
        return StoreWriter(JsonlAppender(self.samples_dir / name), self.answer_signature)

    # ------------------------------------------------------------ docs snapshot
    def write_docs(self, rows: Iterable[dict[str, Any]]) -> None:
        """Merge rows ({key, index, doc, view, doc_sha}) into docs.jsonl under a lock (shards share it)."""
        path = self.folder / "docs.jsonl"
        with file_lock(self.folder / ".docs.lock"):
            merged: dict[str, dict[str, Any]] = {}
            if path.exists():
                for rec in iter_jsonl(path):
                    merged[rec["key"]] = rec
            changed = False
            for row in rows:
                if merged.get(row["key"]) != row:
                    merged[row["key"]] = row
                    changed = True
            if changed or not path.exists():
                ordered = sorted(merged.values(), key=lambda r: (r.get("index", 0), r["key"]))
                write_text_atomic(path, "".join(dumps(r) + "\n" for r in ordered))


class StoreWriter:
    """Appends one record per finished request; flushed to the OS at once so a kill loses nothing stored."""

    def __init__(self, appender: JsonlAppender, answer_signature: str) -> None:
        self._appender = appender
        self.answer_signature = answer_signature

    def append(self, result: GenResult, *, index: int, doc_sha: str) -> dict[str, Any]:
        rec = {
            "key": result.key,
            "index": index,
            "doc_sha": doc_sha,
            "status": "ok" if result.ok else "failed",
            "text": result.text if result.ok else None,
            "error": result.error.to_json() if result.error else None,
            "finish_reason": result.finish_reason,
            "usage": result.usage.to_json(),
            "latency_s": round(result.latency_s, 6),
            "attempts": result.attempts,
            "answer_signature": self.answer_signature,
            "time": time.time(),
        }
        self._appender.append(rec)
        return rec

    def close(self) -> None:
        self._appender.close()
