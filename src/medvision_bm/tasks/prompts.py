"""Prompt wording per family, versioned: any change of wording must bump PROMPT_VERSIONS."""

from __future__ import annotations

from medvision_bm.data.docs import Doc, View

#: The task version recorded in every result and in the run signature. Bump on any wording change.
PROMPT_VERSIONS: dict[str, str] = {"detect": "detect-1", "TL": "TL-1", "AD": "AD-1"}
PROMPT_VARIANTS = ("plain", "reasoning")

#: How many numbers each family's answer holds.
ANSWER_ARITY: dict[str, int] = {"detect": 4, "TL": 2, "AD": 1}

_ANSWER_FORMAT = {
    "detect": (
        "Give the box as four numbers: the lower-left corner (x_min, y_min), then the upper-right corner "
        "(x_max, y_max), as coordinates relative to the image width and height (each between 0 and 1), with the "
        "origin at the lower-left corner of the image.",
        "<answer>x_min, y_min, x_max, y_max</answer>",
    ),
    "TL": (
        "Fit an ellipse to the outline of the {label} and give its major axis length and then its minor axis "
        "length, both in millimetres.",
        "<answer>major_mm, minor_mm</answer>",
    ),
    "AD": (
        "Give the {unit_word} as one number in {unit_name}.",
        "<answer>value</answer>",
    ),
}


def task_version(family: str) -> str:
    return PROMPT_VERSIONS[family]


def build_prompt(doc: Doc, view: View, variant: str = "plain") -> str:
    """The question text for one sample, stating the pixel size of the image exactly as the model receives it."""
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"unknown prompt variant {variant!r}")
    h, w = view.seen_hw
    ph, pw = view.pixel_hw_mm
    intro = (
        f"This is a {doc.plane.lower()} slice of a {doc.modality} image of the {doc.anatomy}. "
        f"The image is {w} pixels wide and {h} pixels high; one pixel measures {pw:.4g} mm in width and "
        f"{ph:.4g} mm in height."
    )
    if doc.family == "detect":
        task = f"Task: locate {doc.measurement}."
    elif doc.family == "TL":
        task = f"Task: measure {doc.measurement}."
    else:
        task = f"Task: measure {doc.measurement}."
    rule, fmt = _ANSWER_FORMAT[doc.family]
    metric = doc.annotation.get("metric", "distance")
    rule = rule.format(label=doc.label_name,
                       unit_word="angle" if metric == "angle" else "distance",
                       unit_name="degrees" if metric == "angle" else "millimetres")
    if variant == "reasoning":
        tail = ("Think step by step inside <think></think> tags, then give only the final answer inside "
                f"<answer></answer> tags, formatted as {fmt}")
    else:
        tail = f"Reply with only the answer, formatted exactly as {fmt}"
    return f"{intro}\n{task}\n{rule}\n{tail}"
