"""Judged parses in a results folder: where the judge writes them (``<store>/judged/<sig12>/``), their schema and
parser version, and how a summary finds the one it uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from medvision_bm.io import iter_jsonl
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.discovery import StoreRef
from medvision_bm.store.layout import JUDGED, JudgedLayout, StoreLayout
from medvision_bm.store.records import JUDGED_SCHEMA, JudgeFile

__all__ = ["JUDGED_DIR", "JUDGED_SCHEMA", "JUDGE_PARSER_VERSION", "judge_description", "judge_inputs",
           "judge_weights", "judged_parses", "pick_judged", "read_judged", "reply_time"]

#: The judged parse's parser version (decision table, decoding and span verification: ``medvision_bm.judge``).
JUDGE_PARSER_VERSION = "judge-1"
JUDGED_DIR = JUDGED


def judged_parses(store_folder: Path) -> list[tuple[Path, JsonObject]]:
    """The judged parses of a store: (folder, judge.json) for every judged/<sig>/ holding a parsed.jsonl."""
    base = StoreLayout(store_folder).judged
    out: list[tuple[Path, JsonObject]] = []
    if base.is_dir():
        for sub in sorted(base.iterdir()):
            jl = JudgedLayout(sub)
            if jl.parsed.is_file() and jl.judge_file.is_file():
                try:
                    out.append((sub, JudgeFile.read(jl.judge_file).to_json()))
                except (OSError, ValueError):
                    continue
    return out


def pick_judged(store_folder: Path, judge: str | None) -> tuple[Path | None, str]:
    """The judged parse a summary uses for one store (``judge``: a judge model, weights or signature prefix), or
    (None, why not)."""
    found = judged_parses(store_folder)
    if judge:
        found = [(p, j) for p, j in found if judge in (str(j.get("judge_signature", "")), p.name)
                 or str(j.get("judge_signature", "")).startswith(judge)
                 or judge in (_inputs(j).get("judge_model"), _inputs(j).get("weights"))]
    if not found:
        return None, "no judged parse" + (f" by {judge}" if judge else "") + "; run `medvision-bm judge` on it"
    if len(found) > 1:
        names = ", ".join(f"{p.name} ({_inputs(j).get('weights')})" for p, j in found)
        return None, f"several judged parses ({names}); pick one with --judge"
    return found[0][0], ""


def _inputs(judge_json: JsonObject) -> JsonObject:
    """A judge.json's inputs (an object as ``JudgeFile`` writes it)."""
    inputs = judge_json.get("inputs")
    return inputs if isinstance(inputs, dict) else {}


class LoadedStore(Protocol):
    """What is read of a loaded store (``report.load.StoreInfo``): its ref and where its rows came from."""

    @property
    def ref(self) -> StoreRef: ...

    @property
    def source(self) -> str: ...


def judge_inputs(store: LoadedStore) -> JsonObject | None:
    """The judge.json inputs of the judged parse a loaded store (``StoreInfo``) came from; None for a strict one."""
    parts = str(store.source).split("/")
    if len(parts) < 2 or parts[0] != JUDGED_DIR:
        return None
    try:
        return dict(JudgeFile.read(JudgedLayout(StoreLayout(store.ref.folder).judged / parts[1]).judge_file).inputs)
    except (OSError, ValueError, AttributeError):
        return None


def judge_weights(store: LoadedStore) -> str | None:
    """The judge weights named in the judge.json inputs of a loaded store's judged parse (None for a strict one)."""
    weights = (judge_inputs(store) or {}).get("weights")
    return weights if isinstance(weights, str) else None


def judge_description(stores: Sequence[LoadedStore]) -> str:
    """The judges behind loaded judged parses (``StoreInfo`` list), e.g. ``gemma4 google/gemma-4-31B-it (3f2a...)``."""
    seen: list[str] = []
    for s in stores:
        inputs = judge_inputs(s)
        if inputs is None:
            continue
        sig = str(s.source).split("/")[1]
        text = f"{inputs.get('judge_model')} {inputs.get('weights')} (judge signature {sig}, " \
               f"{inputs.get('prompt_version')})"
        if text not in seen:
            seen.append(text)
    return "; ".join(seen) or "-"


def read_judged(folder: Path, signature: str) -> tuple[dict[str, JsonObject], int]:
    """Per key the newest usable judge record (ok or invalid, this signature; by its ``time``, file order on a
    tie); and the unreadable lines."""
    out: dict[str, JsonObject] = {}
    bad = 0
    answers = JudgedLayout(folder).answers
    if not answers.is_dir():
        return out, 0

    def on_bad(lineno: int, text: str) -> None:
        nonlocal bad
        bad += 1

    for seg in sorted(answers.glob("*.jsonl")):
        for rec in iter_jsonl(seg, on_bad_line=on_bad):
            if rec.get("judge_signature") != signature or not isinstance(rec.get("key"), str):
                bad += 1
                continue
            if rec.get("status") in ("ok", "invalid"):
                prev = out.get(rec["key"])
                if prev is None or reply_time(rec) >= reply_time(prev):  # the newest verdict wins (a repair pass's)
                    out[rec["key"]] = rec
    return out, bad


def reply_time(rec: Mapping[str, JsonValue]) -> float:
    """A judge reply's ``time`` (0 when it has none): the newest reply of a key wins."""
    t = rec.get("time")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0
