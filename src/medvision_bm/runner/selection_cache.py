"""A task's selection kept in its store between runs (``.selection.npz``): saved under the digest of everything it
was made from (the plan file, the data files its samples name, the task metadata, the settings a view depends on,
the selection flags, the code), and reused by a rerun only when that digest is the same; otherwise made again."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import medvision_bm
from medvision_bm.data.layout import TaskSamples
from medvision_bm.data.plan_files import plan_identity
from medvision_bm.io import atomic_path, jsonable
from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.processor_config import model_code_from_flags
from medvision_bm.runner.config import RunConfig
from medvision_bm.runner.selection import Materialise, StreamedSelection
from medvision_bm.store.packed import PackedTexts
from medvision_bm.store.records import Selection
from medvision_bm.store.signature import digest

#: Bumped when the saved file's contents or the key's inputs change meaning.
FORMAT = 1

#: What a saved file that cannot be read raises (it is then ignored and made again).
_DAMAGED = (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile)


def files_identity(paths: Iterable[Path]) -> str:
    """What identifies these files' contents to a cache: path, size, modification time and inode of each (a missing
    file as missing). A rewritten or replaced file changes at least one of them."""
    h = hashlib.blake2b(digest_size=16)
    for path in paths:
        try:
            st = os.stat(path)
            line = f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n"
        except OSError:
            line = f"{path}\0missing\n"
        h.update(line.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


@functools.cache
def code_identity() -> str:
    """The package's modules as they are on disk: an edit of the code that builds docs, views or doc hashes makes a
    saved selection stale."""
    root = Path(medvision_bm.__file__).resolve().parent
    return files_identity(sorted(root.rglob("*.py")))


def view_settings(cfg: RunConfig, variant: str) -> JsonObject:
    """The run settings a sample's view (sent size, stated size, drawn prompt, scaled pixel size) is made from (the
    model flags as the answer signature holds them, and the model code the stated size reads: never a key or URL)."""
    record = cfg.record
    rule = record.paper_processor_resize if cfg.paper_rule else cfg.processor_resize
    return jsonable({
        "record": record.name, "weights": cfg.weights, "revision": cfg.revision, "protocol": cfg.protocol,
        "processor_resize": cfg.processor_resize, "paper_rule": cfg.paper_rule,
        "paper_resize": [record.paper_processor_resize, record.paper_processor_resize_hw],
        "engine_kwargs": dict(record.engine_kwargs), "model_flags": cfg.answer_flags(),
        "model_code": model_code_from_flags(rule, cfg.model_flags),
        "reshape": cfg.reshape_for(variant), "api_pre_resize": cfg.api_pre_resize, "scaled_ps": list(cfg.scaled_ps),
    })


def selection_key(cfg: RunConfig, samples: TaskSamples, answer_sig: str, selection: Selection) -> str:
    """The digest a task's selection is saved and looked up under: the answer signature, the selection flags and
    the count they were applied to, the view settings, the data folder, the plan file and its index, the task
    metadata, every data file the task's cases name, and the code."""
    tn = samples.tn
    return digest({
        "format": FORMAT, "code": code_identity(), "answer_signature": answer_sig, "selection": selection.to_json(),
        "n": len(samples), "complete": samples.complete, "view": view_settings(cfg, tn.variant),
        "data_root": str(samples.data.root.resolve()), "task": tn.name, "filtering": samples.data.contract.filtering,
        "plan": plan_identity(samples.plan.path), "plan_version": samples.plan_version,
        "task_meta": repr(samples.meta_header), "files": files_identity(samples.case_files()),
    })


@dataclass(frozen=True)
class Selected:
    """A task's selection, its digest for the run signature (``digest`` of its sorted doc hashes), and whether it
    was taken from the store's saved copy."""

    samples: StreamedSelection
    shas_digest: str
    reused: bool


def load(path: Path, key: str, materialise: Materialise, protocol: str, variant: str) -> Selected | None:
    """The selection saved at ``path`` under ``key``; None when there is none, it was saved under another key, or the
    file is damaged (the zip's checksums are checked as it is read)."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            head = json.loads(saved["head"].tobytes())
            if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("key") != key:
                return None
            keys = PackedTexts.of_buffers(saved["keys"], saved["ends"])
            indices = np.asarray(saved["indices"], dtype=np.int64)
            codes = np.asarray(saved["codes"], dtype=np.uint64)
        n, shas_digest, docs_digest = int(head["n"]), str(head["shas_digest"]), str(head["docs_digest"])
        source = head.get("meta_source")
    except FileNotFoundError:
        return None
    except _DAMAGED:
        return None
    if not n == len(keys) == len(indices) == len(codes) or not (source is None or isinstance(source, str)):
        return None
    picked = StreamedSelection(keys, indices, codes, protocol, variant, materialise, source)
    picked.known_docs_digest = docs_digest
    return Selected(picked, shas_digest, True)


def persist(path: Path, key: str, selected: Selected) -> None:
    """Keep ``selected`` at ``path`` under ``key`` (atomically: a reader sees the old file or the new one). A file
    that cannot be written is left out (the next run makes the selection again)."""
    picked = selected.samples
    keys = picked.keys if isinstance(picked.keys, PackedTexts) else PackedTexts(picked.keys)
    buf, ends = keys.buffers()
    head = {"format": FORMAT, "key": key, "n": len(picked), "meta_source": picked.meta_source,
            "shas_digest": selected.shas_digest, "docs_digest": picked.docs_digest()}
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, head=np.frombuffer(json.dumps(head).encode(), dtype=np.uint8), keys=buf, ends=ends,
                     indices=np.asarray(picked.indices, dtype=np.int64), codes=picked.shas.codes)
    except OSError:
        return


def select(path: Path, key: str, indices: Callable[[], list[int]], materialise: Materialise, protocol: str,
           variant: str) -> Selected:
    """The saved selection when its key is ``key``, else the selection walked from the data (not saved yet: the
    store folder may not exist; ``persist`` once it does)."""
    found = load(path, key, materialise, protocol, variant)
    if found is not None:
        return found
    picked = StreamedSelection.walk(indices(), materialise, protocol, variant)
    return Selected(picked, digest(picked.sorted_shas()), False)
