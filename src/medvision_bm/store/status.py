"""The status file: which tasks are done per model, shared by many processes.

Shape: ``{model: {task: entry}}``. An entry is ``true`` (the older shape, still read) or an object with
``done``, ``run_signature``, ``answer_signature``, ``n``, ``results`` (path relative to the status file's
results dir) and ``time``. Every update is a read-modify-write under an exclusive lock, written atomically.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

from medvision_bm import limits
from medvision_bm.errors import UserError
from medvision_bm.io import file_lock, write_json_atomic
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.layout import SIGNATURE
from medvision_bm.store.records import SignatureRecord
from medvision_bm.store.samples import SampleStore

#: ``is_done``'s reason for an entry in upstream's shape (``{model: {task: true}}``): done, but nothing says with what.
LEGACY_ENTRY = "legacy entry (no signature)"


def results_hold_answers(results_dir: str | Path, model: str, task: str) -> bool:
    """Whether any sample store of ``model`` and ``task`` under ``results_dir`` holds a successful answer (under any
    answer signature, imported ones included). Upstream's status files mark tasks done whose answers live only in
    upstream's own results folder: such an entry alone is no evidence that this suite can report the task."""
    base = Path(results_dir) / model / task
    if not base.is_dir():
        return False
    for sig_path in sorted(base.glob("*/" + SIGNATURE)):
        try:
            answer_sig = SignatureRecord.read(sig_path).answer_signature
        except (OSError, ValueError):
            continue
        if SampleStore(sig_path.parent, answer_sig).read().ok:
            return True
    return False


class StatusFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    def read(self) -> dict[str, JsonObject]:
        if not self.path.exists():
            return {}
        try:
            raw = limits.read_bytes(self.path, "status file", limits.MAX_JSON_FILE_BYTES).decode("utf-8")
            data: JsonValue = limits.loads_json(raw or "{}", f"status file {self.path}")
        except json.JSONDecodeError as exc:
            raise UserError(f"status file {self.path} is not valid JSON ({exc.msg}); fix or delete it") from None
        except ValueError as exc:
            if "nested" in str(exc):
                raise UserError(f"{exc}; fix or delete it") from None
            raise UserError(f"status file {self.path} is not UTF-8 JSON text (binary data?); fix or delete it") from None
        except UnicodeDecodeError:  # binary garbage
            raise UserError(f"status file {self.path} is not UTF-8 JSON text (binary data?); fix or delete it") from None
        models = {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}
        if not isinstance(data, dict) or len(models) != len(data):
            raise UserError(f"status file {self.path} must be an object of model -> {{task: entry}}; fix or delete it")
        return models

    def is_done(self, model: str, task: str, run_signature: str) -> tuple[bool, str]:
        """(done, why) for one model and task under the current run signature."""
        entry = self.read().get(model, {}).get(task)
        if entry is True:
            return True, LEGACY_ENTRY
        if isinstance(entry, dict) and entry.get("done"):
            if entry.get("run_signature") == run_signature:
                return True, "done"
            return False, "done under another run signature"
        return False, "not done"

    def mark(self, model: str, task: str, entry: Mapping[str, JsonValue]) -> None:
        with file_lock(self.lock_path):
            data = self.read()
            data.setdefault(model, {})[task] = {**entry, "done": True, "time": time.time()}
            write_json_atomic(self.path, data)
