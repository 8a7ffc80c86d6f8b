"""Upstream MedVision's LLM-judge prompt and answer contract, as data (the benchmark's text, kept verbatim).

Source: upstream YongchengYAO/MedVision ``script/llm-parsing/`` at commit 2f20f64e23860e4e5a9ac4a8d1df725d0b5cdea0
(``judge_prompts.py`` - SYSTEM_PROMPT, USER_TEMPLATE, STEPS_BLOCK_TEMPLATE, NO_STEPS_NOTE, the output
skeleton and the response window; ``judge_config.py`` - TASK_SPECS, STEP_SPECS, the statuses, the window
and span constants, the sampling JUDGE_TEMPERATURE 0.0 / JUDGE_TOP_P 1.0 / JUDGE_SEED 1024 and the decode budget
DEFAULT_JUDGE_MAX_TOKENS 4096; the judge upstream ran is ``gemma-4-31b`` = ``google/gemma-4-31B-it`` on offline vLLM,
max_model_len 12288, gpu_memory_utilization 0.90, tensor_parallel 2, prefix caching, no chat-template kwargs).

The strings below are upstream's rendered text: the one ``str.format`` brace escape upstream needs
(``\\boxed{{...}}``) is already resolved, and the two slots of the system prompt (``{min_ctx}``,
``{output_skeleton}``) are filled by :func:`build_messages` with ``str.replace``. Nothing here is upstream's code.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import TypedDict

from medvision_bm.jsontypes import JsonObject, JsonValue

#: Which upstream prompt this is (its folder and commit); bump the suffix if the text ever changes here.
PROMPT_VERSION = "upstream-llm-parsing-v2@2f20f64"

SYSTEM_PROMPT = """You extract numeric answers from a vision-language model's response to a medical measurement task.

You are given ONLY the response text. You never see the image and never see the ground truth. Do not judge correctness. Do not compute anything. Do not infer a value that is not written. Report only what the response literally states.

QUOTING
- Quote every span VERBATIM from the response, copied character for character. Never paraphrase, never reformat or round a number, never fix a typo.
- Include at least {min_ctx} characters of surrounding context in a span so it can be located unambiguously.
- The numbers you report must be exactly the numbers that appear in the span you quoted, in the order they are written there.

WHAT COUNTS AS A FINAL ANSWER
- A final answer counts as stated no matter how it is wrapped. All of these are stated answers: <answer>...</answer>, \\boxed{...}, **Answer:** ..., <final-answer>...</final-answer>, a LaTeX display, or a plain sentence such as "The major axis length is 20.0 mm and the minor axis length is 18.0 mm".
- The final answer is the quantity the TASK line asks for, in the unit it names. It is NOT an intermediate coordinate. If the response works through numbered steps, the final answer is the value the last step computes, never the (x, y) pairs an early step reports.
- If the response states several candidate answers and never settles on one, quote the LAST one stated.

CHOOSING final_answer.status -- exactly one of two values
- "present"        The response states a final answer. Use this even when the text is cut off AFTER the answer was stated, and even if the answer looks wrong. Once an answer is on the page, the status is "present".
- "no_conclusion"  No final answer is stated anywhere: the response refuses, only describes the image, says it cannot measure, is empty, stops part-way through its working, or simply ends without giving the requested quantity.

Do not try to work out WHY an answer is missing, and do not report it. Whether the response ran out of room or chose not to answer is decided elsewhere, from the generation settings; it cannot be read off the text and guessing at it is worse than leaving it alone. Your job is only whether an answer is there.

A line of the form
    ...[12345 characters elided]...
means WE removed the middle of a long response before showing it to you. The text after it is the model's real ending, so keep reading to the end before concluding that no answer is stated.

Set "span" to "" and "values" to [] whenever status is not "present".

OUTPUT
Return a single JSON object and nothing else: no prose, no markdown fence, no explanation, no trailing commentary. It must have exactly these keys, in this shape:

{output_skeleton}

Every key shown is required. Do not add keys. Do not rename keys. Do not replace an object with a string. "values" holds bare JSON numbers -- never strings, never tuples, never expressions."""

USER_TEMPLATE = """TASK: the model was asked to produce {description}.
EXPECTED_ANSWER_COUNT: {arity} number(s).
{steps_block}
RESPONSE:
<<<
{response}
>>>

Return only the JSON object."""

STEPS_BLOCK_TEMPLATE = """
The model was also instructed to show its work in {n_steps} numbered steps before answering. Extract what each step reports, or mark it absent if the response does not report it. A step counts as present however it is labelled -- "<step-2-answer>", "Step 2:", "**Step 2**", or an unlabelled paragraph that plainly does that step's work.
{step_lines}

IMPORTANT: these steps are INTERMEDIATE. Put them in "steps", never in "final_answer". In particular a <step-1-answer> block holds coordinates, not the answer -- taking it as the final answer is the single most common way to get this wrong.
"""

NO_STEPS_NOTE = """
This task prescribes a single reasoning step whose result IS the final answer, so a <step-1-answer> block here does hold the answer and counts as a stated final answer. Return no "steps" array.
"""

FINAL_ANSWER_STATUSES = ("present", "no_conclusion")
STEP_STATUSES = ("present", "absent")

#: Response window: a response longer than TRIGGER characters is shown as its first HEAD and last TAIL characters
#: with the marker between them (n = characters left out).
RESPONSE_WINDOW_TRIGGER = 8000
RESPONSE_WINDOW_HEAD = 2000
RESPONSE_WINDOW_TAIL = 6000
RESPONSE_ELISION_MARKER = "\n...[{n} characters elided]...\n"
MIN_SPAN_CONTEXT_CHARS = 12
#: Span lengths the response schema allows (judge_config.py MAX_ANSWER_SPAN_CHARS, MAX_STEP_SPAN_CHARS).
MAX_ANSWER_SPAN_CHARS = 200
MAX_STEP_SPAN_CHARS = 120

#: Upstream's judge sampling (judge_config.py): greedy, top_p 1, seed 1024, 4096 new tokens for every task.
SAMPLING: JsonObject = {"temperature": 0.0, "top_p": 1.0, "seed": 1024, "max_tokens": 4096}
#: Part of upstream's prompt fingerprint although its Gemma-4 judge is never sent it (no chat-template kwargs).
REASONING_EFFORT = "low"

#: Upstream task type per family of ours, and its TASK_SPECS (arity = the strict parser's k).
TASK_TYPE = {"detect": "Detection", "TL": "TL", "AD": "AD"}


class TaskSpec(TypedDict):
    """What the judge is told of a task's answer: how many numbers, and what they are."""

    arity: int
    description: str


class StepSpec(TypedDict):
    """One step the judge is asked to quote: its number, how many numbers it holds, what they are."""

    index: int
    n_values: int
    what: str


TASK_SPECS: dict[str, TaskSpec] = {
    "TL": {"arity": 2, "description": "two numbers: the major axis length and the minor axis length of an ellipse, "
                                      "in millimetres, in that order"},
    "AD": {"arity": 1, "description": "a single number: either a distance in millimetres or an angle in degrees"},
    "Detection": {"arity": 4, "description": "four numbers: the bounding-box coordinates x_lower_left, "
                                             "y_lower_left, x_upper_right, y_upper_right"},
}
STEP_SPECS: dict[str, list[StepSpec]] = {
    "TL": [
        {"index": 1, "n_values": 4, "what": "the two endpoints of the MAJOR axis, as (x1,y1),(x2,y2)"},
        {"index": 2, "n_values": 4, "what": "the two endpoints of the MINOR axis, as (x1,y1),(x2,y2)"},
        {"index": 3, "n_values": 1, "what": "the computed physical length of the major axis"},
        {"index": 4, "n_values": 1, "what": "the computed physical length of the minor axis"},
    ],
    "AD:distance": [
        {"index": 1, "n_values": 2, "what": "the coordinates of landmark 1, as (x1,y1)"},
        {"index": 2, "n_values": 2, "what": "the coordinates of landmark 2, as (x2,y2)"},
        {"index": 3, "n_values": 1, "what": "the computed physical distance"},
    ],
    "AD:angle": [
        {"index": 1, "n_values": 4, "what": "the two endpoints of LINE 1, as (x1,y1),(x2,y2)"},
        {"index": 2, "n_values": 4, "what": "the two endpoints of LINE 2, as (x1,y1),(x2,y2)"},
        {"index": 3, "n_values": 1, "what": "the computed angle"},
    ],
}


def step_key(task_type: str, metric_type: str | None = None) -> str | None:
    """Which step list a sample's prompt carries: T/L always, A/D by its metric type, detection none."""
    if task_type == "TL":
        return "TL"
    if task_type == "AD" and metric_type in ("distance", "angle"):
        return f"AD:{metric_type}"
    return None


def windowed(text: str | None) -> str:
    """The response as the judge sees it: whole, or head + elision marker + tail when it is very long."""
    text = text or ""
    if len(text) <= RESPONSE_WINDOW_TRIGGER:
        return text
    n = len(text) - RESPONSE_WINDOW_HEAD - RESPONSE_WINDOW_TAIL
    return text[:RESPONSE_WINDOW_HEAD] + RESPONSE_ELISION_MARKER.format(n=n) + text[-RESPONSE_WINDOW_TAIL:]


def output_skeleton(task_type: str, key: str | None) -> str:
    """The literal JSON object shown to the judge (placeholders that are never a legal answer)."""
    obj: JsonObject = {"final_answer": {"status": " | ".join(FINAL_ANSWER_STATUSES),
                                            "span": "<verbatim quote from the response>",
                                            "values": ["<number>"] * TASK_SPECS[task_type]["arity"]}}
    if key is not None:
        obj["steps"] = [{"index": s["index"], "status": " | ".join(STEP_STATUSES),
                         "span": "<verbatim quote from the response>", "values": ["<number>"] * s["n_values"]}
                        for s in STEP_SPECS[key]]
    return json.dumps(obj, indent=2)


def steps_block(key: str | None) -> str:
    if key is None:
        return NO_STEPS_NOTE
    specs = STEP_SPECS[key]
    lines = "\n".join(f"  Step {s['index']}: {s['what']} ({s['n_values']} number(s))" for s in specs)
    return STEPS_BLOCK_TEMPLATE.replace("{n_steps}", str(len(specs))).replace("{step_lines}", lines)


@functools.cache
def _fixed(task_type: str, key: str | None) -> tuple[str, str]:
    """The system message and the user template with every slot but the response filled (one copy per task)."""
    spec = TASK_SPECS[task_type]
    system = SYSTEM_PROMPT.replace("{min_ctx}", str(MIN_SPAN_CONTEXT_CHARS)).replace(
        "{output_skeleton}", output_skeleton(task_type, key))
    user = (USER_TEMPLATE.replace("{description}", spec["description"]).replace("{arity}", str(spec["arity"]))
            .replace("{steps_block}", steps_block(key)))
    return system, user


def build_messages(task_type: str, key: str | None, response: str | None) -> tuple[str, str]:
    """(system, user) for one judge call: the skeleton sits in the system message, the response in the user one."""
    system, user = _fixed(task_type, key)
    # the response goes in last, so that text inside it is never taken for a slot
    return system, user.replace("{response}", windowed(response))


def response_schema(task_type: str, key: str | None) -> JsonObject:
    """The judge contract as a JSON schema, for a server's guided decoding (upstream's ``build_schema`` in
    ``judge_prompts.py`` @2f20f64): no extra keys, the statuses as enums, a final answer of at most the task's arity
    numbers and a span of at most MAX_ANSWER_SPAN_CHARS characters; T/L and A/D also a ``steps`` array of at most
    their step count, each step's index, status, span (MAX_STEP_SPAN_CHARS) and at most the largest step's number
    count. Arities are upper bounds only, as upstream's: a grammar that forced the count would make the judge pad
    or invent numbers, and the span check refuses a wrong count afterwards."""

    def numbers(at_most: int) -> JsonObject:
        return {"type": "array", "items": {"type": "number"}, "maxItems": at_most}

    final: JsonObject = {"type": "object", "additionalProperties": False, "required": ["status", "span", "values"],
             "properties": {"status": {"type": "string", "enum": list(FINAL_ANSWER_STATUSES)},
                            "span": {"type": "string", "maxLength": MAX_ANSWER_SPAN_CHARS},
                            "values": numbers(TASK_SPECS[task_type]["arity"])}}
    required: list[JsonValue] = ["final_answer"]
    properties: JsonObject = {"final_answer": final}
    schema: JsonObject = {"type": "object", "additionalProperties": False, "required": required,
                          "properties": properties}
    if key is not None:
        steps = STEP_SPECS[key]
        required.append("steps")
        properties["steps"] = {
            "type": "array", "maxItems": len(steps),
            "items": {"type": "object", "additionalProperties": False,
                      "required": ["index", "status", "span", "values"],
                      "properties": {"index": {"type": "integer", "minimum": 1, "maximum": len(steps)},
                                     "status": {"type": "string", "enum": list(STEP_STATUSES)},
                                     "span": {"type": "string", "maxLength": MAX_STEP_SPAN_CHARS},
                                     "values": numbers(max(s["n_values"] for s in steps))}}}
    return schema


#: Every (task type, step list) a judge request can have: T/L's steps, A/D's two (or none, for an unknown metric
#: type), detection none.
PROMPT_KINDS: tuple[tuple[str, str | None], ...] = (("TL", "TL"), ("AD", "AD:distance"), ("AD", "AD:angle"),
                                                   ("AD", None), ("Detection", None))


def schema_fingerprint() -> str:
    """A short hash of every response schema: a change to one is another judge signature."""
    payload = {f"{t}/{k}": response_schema(t, k) for t, k in PROMPT_KINDS}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def prompt_fingerprint() -> str:
    """A short hash of everything that reaches the judge besides the response (every task's rendered messages for
    a sentinel response, the window, the sampling): two judged parses with another fingerprint never mix."""
    rendered = {f"{t}/{k}": build_messages(t, k, "\x00SENTINEL\x00") for t, k in PROMPT_KINDS}
    payload = {"messages": rendered, "window": [RESPONSE_WINDOW_TRIGGER, RESPONSE_WINDOW_HEAD, RESPONSE_WINDOW_TAIL],
               "marker": RESPONSE_ELISION_MARKER, "sampling": SAMPLING, "reasoning_effort": REASONING_EFFORT}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()[:16]
