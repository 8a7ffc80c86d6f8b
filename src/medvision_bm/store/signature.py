"""Run signatures: a hash of everything that changes an answer (answer signature) or a score (run signature).

The answer signature names the sample store: answers are reused only under an identical answer signature. The
run signature adds the sample selection and is what the status file and results record. Secrets never enter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

import orjson

from medvision_bm.data.docs import Doc, View
from medvision_bm.io import dumps
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.results_record import Selection

SIGNATURE_SCHEMA = 2
SHORT = 12


def digest(obj: object) -> str:
    return hashlib.sha256(dumps(obj).encode("utf-8")).hexdigest()


def answer_signature_inputs(*, model: Mapping[str, JsonValue], generation: Mapping[str, JsonValue], task: str,
                            task_version: str,
                            protocol: str, planner_version: str, plan_version: str, filtering: bool,
                            reshape_hw: list[int] | None, processed_hw_rule: str, system_prompt: str | None,
                            model_flags: Mapping[str, JsonValue], engine: Mapping[str, JsonValue] | None = None,
                            scaled_ps: list[float] | None = None,
                            visual_prompt: str | None = None) -> JsonObject:
    inputs: JsonObject = {
        "schema": SIGNATURE_SCHEMA,
        "model": dict(model),
        "generation": dict(generation),
        "task": task,
        "task_version": task_version,
        "protocol": protocol,
        "planner_version": planner_version,
        "plan_version": plan_version,
        "sample_filtering": filtering,
        "reshape_hw": None if reshape_hw is None else list(reshape_hw),
        "processed_hw_rule": processed_hw_rule,
        "system_prompt_sha256": hashlib.sha256(system_prompt.encode()).hexdigest() if system_prompt else None,
        "model_flags": dict(sorted(model_flags.items())),
    }
    if engine is not None:  # local engines only: API, served and baseline signatures stay as they were
        inputs["engine"] = dict(sorted(engine.items()))
    if scaled_ps is not None:  # -CoT-scaledPS tasks only: the range of their pixel-size factors
        inputs["scaled_ps_range"] = list(scaled_ps)
    if visual_prompt is not None:  # -VP/-VP-woMedImg tasks only: the rule (and its version) of what is drawn
        inputs["visual_prompt"] = visual_prompt
    return inputs


def selected_index(selection: Selection | None) -> Callable[[int], bool]:
    """Whether a doc index belongs to a recorded selection (``Selection.chosen``): every index for ``all`` (or no
    selection), the first ``limit``, or the ``indices`` listed. The runner sets apart the docs.jsonl rows at these
    indices that its selection no longer holds; parse, summarize and judge score the rows at them."""
    return selection.selected() if selection else lambda index: True


def run_signature(answer_sig: str, selection: Selection, doc_digest: str) -> str:
    return digest({"answer_signature": answer_sig, "selection": selection.to_json(), "docs": doc_digest})


def doc_sha(doc: Doc, view: View) -> str:
    """A short hash of one sample as asked (doc and view): a stored answer is reused only for the very same one."""
    # field order is the dataclass's and annotation key order is the plan's, both fixed: no key sorting needed
    payload = [doc.field_values(), view.field_values()]  # tuples: the same JSON arrays as lists
    return hashlib.blake2b(orjson.dumps(payload), digest_size=8).hexdigest()
