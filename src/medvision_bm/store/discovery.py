"""Find the sample stores under a results folder and name each run so that different signatures never mix.

A store is any folder holding ``signature.json`` (see ``medvision_bm.store.samples``); the layouts
``<R>/<model>/<task>/<sig>`` and ``<R>/<task_tag>/<model>/<task>/<sig>`` (and deeper tags) are both found.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from medvision_bm.data.docs import FAMILIES, TASK_TYPES, RunProtocol
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonMapping, JsonObject, JsonValue
from medvision_bm.store.layout import NOT_STORES, SIGNATURE
from medvision_bm.store.record_base import read_file
from medvision_bm.store.records import RecordError, ResultsRecord, SignatureRecord
from medvision_bm.store.signature import digest


@dataclass(frozen=True)
class StoreRef:
    """One sample store: where it is, whose run it holds, and the label it is reported under."""

    folder: Path
    tag: str  # the path between the results root and the model folder ("" when there is none)
    model: str
    task: str
    family: str
    answer_signature: str
    inputs: JsonObject
    label: str = ""  # the run's name in every table: the model name, or model@config when one is ambiguous
    #: signature.json's ``imported`` block as discovery read it (None: not imported, or the ref was built elsewhere)
    imported: Mapping[str, JsonValue] | None = field(default=None, compare=False)

    @property
    def sig12(self) -> str:
        return self.answer_signature[:12]


def signature_object(inputs: JsonMapping, name: str) -> JsonObject:
    """A copy of the object ``name`` among a run's signature inputs (``model``, ``generation``): {} when it has
    none."""
    value = inputs.get(name)
    return dict(value) if isinstance(value, dict) else {}


def family_of(task: str, inputs: JsonMapping) -> str | None:
    """The task family from the recorded task version (``current-TL-1``; before the upstream prompts ``detect-1``),
    else from the task type in the name."""
    parts = str(inputs.get("task_version") or "").split("-")
    found = next((p for p in parts if p in FAMILIES), None)
    if found:
        return found
    return next((fam for task_type, fam in TASK_TYPES.items() if f"_{task_type}_" in task), None)


def protocol_of(ref: StoreRef, results: ResultsRecord | None = None) -> str:
    """The run's protocol (``current`` | ``paper``): from its signature, else its results.json, else ``current``
    (stores from before the upstream protocols were scored as ``current``)."""
    return str(ref.inputs.get("protocol") or (results.protocol if results is not None else None)
               or RunProtocol.CURRENT)


def _walk(root: Path) -> Iterable[tuple[str, str]]:
    """Every store folder below ``root`` (a folder whose files include signature.json: not entered further) and its
    path relative to ``root`` ("" for the root itself), both as text, in the order of ``os.walk`` over folders
    sorted by name, skipping NOT_STORES, hidden folders and linked folders (never entered), as ``os.walk`` does;
    each folder is read once (its entries' types come with the listing)."""
    pending: list[tuple[str, str]] = [(os.fspath(root), "")]
    while pending:
        top, rel = pending.pop()
        try:
            with os.scandir(top) as listing:
                entries = {entry.name: entry for entry in listing}
        except OSError:  # as os.walk: a folder that cannot be listed is passed over
            continue
        signature = entries.get(SIGNATURE)
        if signature is not None and not _is_dir(signature):
            yield top, rel
            continue
        inner = sorted(name for name, e in entries.items()
                       if name not in NOT_STORES and not name.startswith(".") and _is_dir(e))
        # depth first in name order: the last pushed is visited first; each path as ``Path`` spells it (a root of
        # "." adds no "./" before the names below it)
        pending += [(os.path.join(top, name) if top != "." else name, os.path.join(rel, name))
                    for name in reversed(inner) if not _linked(entries[name])]


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """Whether the entry is a folder or a link to one (one that cannot be told is not, as ``os.walk`` has it)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _linked(entry: os.DirEntry[str]) -> bool:
    """Whether the entry is a symbolic link (one that cannot be told is not, as ``os.path.islink`` has it)."""
    try:
        return entry.is_symlink()
    except OSError:
        return False


def _names_above(root_abs: Path, rel: str) -> tuple[str, str, str]:
    """(task folder, model folder, tag) of a store less than three folders below the (resolved) root: the names of
    the folders above it, outside the root where it has none below it."""
    # a linked folder is never entered: below the root, the path is already the resolved one
    folder_abs = root_abs / rel
    model_dir = folder_abs.parent.parent
    try:
        tag = str(model_dir.parent.relative_to(root_abs)) if model_dir != root_abs else ""
    except ValueError:  # the results dir is a model or task folder itself
        tag = ""
    return folder_abs.parent.name, model_dir.name, "" if tag == "." else tag


def discover(results_dir: str | Path, *, models: Sequence[str] | None = None, tasks: Sequence[str] | None = None,
             families: Sequence[str] | None = None) -> tuple[list[StoreRef], list[str]]:
    """Every store below ``results_dir`` (filtered), labelled; and the notes worth telling the user."""
    root = Path(results_dir)
    if not root.exists():
        raise UserError(f"results dir {root} does not exist; pass the folder given to `medvision-bm run --results_dir`")
    if not root.is_dir():
        raise UserError(f"results dir {root} is not a folder; pass the folder given to `medvision-bm run --results_dir`")
    notes: list[str] = []
    refs: list[StoreRef] = []
    root_abs = root.resolve()
    for top, rel in _walk(root):
        try:
            sig = read_file(SignatureRecord, os.path.join(top, SIGNATURE))
            answer_sig, inputs, imported = sig.answer_signature, dict(sig.inputs), sig.imported
        except (OSError, ValueError) as exc:
            why = str(exc) if isinstance(exc, RecordError) else type(exc).__name__
            notes.append(f"store {Path(top)}: signature.json is unreadable ({why}); skipped")
            continue
        parts = rel.split(os.sep)
        if len(parts) >= 3:  # <tag...>/<model>/<task>/<sig>: the names read off the relative path
            task_dir, model, tag = parts[-2], parts[-3], os.sep.join(parts[:-3])
        else:
            task_dir, model, tag = _names_above(root_abs, rel)
        task = str(inputs.get("task") or task_dir)
        family = family_of(task, inputs)
        if family is None:
            notes.append(f"store {Path(top)}: cannot tell the task family of {task!r}; skipped")
            continue
        refs.append(StoreRef(Path(top), tag, model, task, family, answer_sig, inputs, imported=imported))
    if not refs:
        raise UserError(f"results dir {root} holds no runs (no <model>/<task>/<signature>/signature.json below it); "
                        "pass the folder given to `medvision-bm run --results_dir` or a task-tag folder inside it")
    refs = [r for r in refs if (not models or r.model in models) and (not tasks or r.task in tasks)
            and (not families or r.family in families)]
    if not refs:
        wanted = "; ".join(f"{k}={','.join(v)}" for k, v in
                           (("models", models), ("tasks", tasks), ("families", families)) if v)
        raise UserError(f"results dir {root} holds no runs matching {wanted}; drop or fix the filter")
    labelled, label_notes = assign_labels(refs)
    return labelled, notes + label_notes


def _flatten(obj: JsonValue, prefix: str = "") -> JsonObject:
    if isinstance(obj, dict):
        out: JsonObject = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def describe_difference(a: JsonObject, b: JsonObject, limit: int = 3) -> str:
    """The signature inputs in which two runs differ, in words (``generation.temperature: 0.0 vs 0.7``)."""
    fa, fb = _flatten(a), _flatten(b)
    diffs = [f"{k}: {fa.get(k)!r} vs {fb.get(k)!r}" for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
    if not diffs:
        return "identical inputs (the same run stored twice)"
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more


def config_id(inputs: JsonMapping) -> str:
    """A short hash of a run's settings apart from the task itself (equal across the tasks of one run)."""
    return digest({k: v for k, v in inputs.items() if k not in ("task", "task_version")})[:6]


def assign_labels(refs: Sequence[StoreRef]) -> tuple[list[StoreRef], list[str]]:
    """Label every store with its model name; where a model has several stores for one task, split that model
    by configuration (``model@cfg``) so that different answer signatures are never averaged together."""
    notes: list[str] = []
    protocols: dict[str, set[str]] = defaultdict(set)
    for r in refs:
        protocols[r.model].add(protocol_of(r))
    by_model: dict[str, list[StoreRef]] = defaultdict(list)
    for r in refs:  # a model run under both protocols is two runs: model@current and model@paper
        by_model[f"{r.model}@{protocol_of(r)}" if len(protocols[r.model]) > 1 else r.model].append(r)
    out: list[StoreRef] = []
    for model, stores in sorted(by_model.items()):
        by_task: dict[str, list[StoreRef]] = defaultdict(list)
        for r in stores:
            by_task[r.task].append(r)
        clashes = {t: rs for t, rs in by_task.items() if len(rs) > 1}
        if not clashes:
            out.extend(replace(r, label=model) for r in stores)
            continue
        labelled = [replace(r, label=f"{model}@{config_id(r.inputs)}") for r in stores]
        seen: dict[tuple[str, str], int] = defaultdict(int)
        for r in labelled:
            seen[(r.label, r.task)] += 1
        labelled = [replace(r, label=f"{r.label}@{r.tag or r.sig12}") if seen[(r.label, r.task)] > 1 else r
                    for r in labelled]
        for task, rs in sorted(clashes.items()):
            rs_l = [x for x in labelled if x.task == task]
            notes.append(
                f"model {model} has {len(rs)} runs with different answer signatures for task {task} "
                f"({', '.join(x.sig12 for x in rs_l)}; they differ in {describe_difference(rs_l[0].inputs, rs_l[1].inputs)}); "
                f"reported separately as {', '.join(x.label for x in rs_l)}, never averaged together")
        out.extend(labelled)
    out.sort(key=lambda r: (r.family, r.task, r.label))
    return out, notes
