"""Upstream MedVision's question texts, rendered from data (spec: docs/spec/prompt-texts.md).

The wording lives in ``prompt_templates.json`` beside this module (benchmark data, like labels); this module holds our
own logic that picks a template and fills it. Two protocols:

``paper``    the texts of upstream master @c221615 (``medvision_utils.py`` under ``medvision_lmms-eval``): plain
             tasks only, answers without think/answer tags, detection says "corner", an empty image description
             renders as ``image: , ``, the T/L unit is the doc's raw ``mm``, the A/D pixel line always says ``mm``
             and the angle unit is the raw ``degree``.
``current``  the newest texts (YongchengYAO/MedVision ``medvision_utils.py`` @0a4c5e2 with ``sft_prompts.py`` @f1102c5, and the A/D
             pixel-size line of @e3cf881): plain tasks carry the think/answer format prompt and the image-size
             line; variants ``-CoT``, ``-CoT-woInstruct``, ``-CoT-scaledPS``, ``-VP``, ``-VP-woMedImg``. Units are
             ``millimeters``/``centimeters``/``degrees``; the pixel line of an angle task says ``millimeters``
             (@e3cf881 ``_spatial_unit``, change 742c484; @0a4c5e2 said ``degrees``, prompt versions ``current-AD*-1``).

The resolution suffixes (``-336x336`` ...) change only the image upstream, so they render the protocol's plain text.

Numbers: pixel sizes with 3 decimals, width first; the image size (perceived canvas) width first. The caller passes
the pixel size already adjusted for any reshape and for the model's perceived resize. Pass ``numpy.float32`` values
to keep upstream's float32 arithmetic (under numpy 2 a float32 pixel size times a Python float stays float32); the
scaledPS product is taken with whatever type the caller gives.
"""

from __future__ import annotations

import hashlib
import json
import os
import string
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from numbers import Integral
from typing import TypedDict

import numpy as np

from medvision_bm.data.docs import FAMILIES
from medvision_bm.tasks.families import family_spec

PROTOCOLS = ("paper", "current")

#: Upstream ``taskType`` values each family accepts.
TASK_TYPES: dict[str, tuple[str, ...]] = {
    "detect": ("Box-Size",),
    "TL": ("Tumor-Lesion-Size",),
    "AD": ("Biometrics-From-Landmarks", "Biometrics-From-Landmarks-Distance", "Biometrics-From-Landmarks-Angle"),
}
_AD_TASK_METRIC = {"Biometrics-From-Landmarks-Distance": "distance", "Biometrics-From-Landmarks-Angle": "angle"}

#: Task-name suffixes that select a text ("" is the plain task).
TEXT_VARIANTS = ("", "-CoT", "-CoT-woInstruct", "-CoT-scaledPS", "-VP", "-VP-woMedImg")
#: Suffixes of the upstream resolution task lists; the text is the protocol's plain one.
RESOLUTION_VARIANTS = ("-336x336", "-560x560", "-896x896")
#: Every suffix build_prompt knows.
VARIANTS = TEXT_VARIANTS + RESOLUTION_VARIANTS

SCALED_PS_LOW = 0.5  # upstream _SCALED_PS_LOW (env MEDVISION_SCALED_PS_LOW overrides it there)
SCALED_PS_HIGH = 3.0  # upstream _SCALED_PS_HIGH (env MEDVISION_SCALED_PS_HIGH)

_COMPUTED_SLOTS = ("task", "cot")


class _Template(TypedDict, total=False):
    """One text of ``prompt_templates.json``: its pieces, the sentence naming the task, the CoT constant(s)."""

    version: str
    upstream: str
    task_sentence: str
    cot: str | dict[str, str]
    scaled_pixel_size: bool
    pieces: list[str]


class _Units(TypedDict, total=False):
    """A protocol's unit words: ``words`` (current), ``TL_str_words`` and ``distance_replace`` (paper)."""

    words: dict[str, str]
    TL_str_words: dict[str, str]
    distance_replace: list[str]


class _Protocol(TypedDict, total=False):
    """One protocol's data: texts per family and variant, the sentences and constants they use, unit words."""

    source: str
    units: _Units
    spatial_units: dict[str, str]
    constants: dict[str, str]
    sentences: dict[str, str]
    templates: dict[str, dict[str, _Template]]


class _Templates(TypedDict):
    """The whole of ``prompt_templates.json`` (schema 1)."""

    schema: int
    about: str
    number_format: str
    resolution_suffixes: list[str]
    protocols: dict[str, _Protocol]


@dataclass(frozen=True)
class PromptInput:
    """What one prompt needs, in upstream's terms.

    ``metric_unit`` is the doc's ``biometric_profile["metric_unit"]`` as stored (T/L docs carry a 1-element list,
    A/D docs a string). ``points`` are landmark names: (p1, p2) for a distance, (l1p1, l1p2, l2p1, l2p2) for an
    angle. ``canvas_hw`` is the image size the model perceives (stated in current T/L/A/D texts), ``pixel_hw_mm``
    the stated pixel size (h, w) after reshape and perception; neither is used by detection. ``scale_hw`` holds
    the scaledPS factors (h, w) and must stay (1, 1) for every other variant.
    """

    family: str
    task_type: str
    image_description: str | None
    label_name: str | None = None
    metric_type: str | None = None
    metric_unit: str | list[str] | tuple[str, ...] | None = None
    biometrics_name: str | None = None
    points: tuple[str, ...] = ()
    canvas_hw: tuple[int, int] | None = None
    pixel_hw_mm: tuple[float, float] | None = None
    scale_hw: tuple[float, float] = (1.0, 1.0)


# ----------------------------------------------------------------------------------------------------------------
# Template data
# ----------------------------------------------------------------------------------------------------------------


@cache
def templates() -> _Templates:
    """The parsed ``prompt_templates.json`` (do not mutate)."""
    text = resources.files("medvision_bm.tasks").joinpath("prompt_templates.json").read_text(encoding="utf-8")
    # the package's own data file, of the shape above: tests/tasks render every text of it
    data: _Templates = json.loads(text)
    if data.get("schema") != 1:
        raise ValueError(f"prompt_templates.json: unsupported schema {data.get('schema')!r}")
    if tuple(data["resolution_suffixes"]) != RESOLUTION_VARIANTS:
        raise ValueError("prompt_templates.json: resolution_suffixes disagree with RESOLUTION_VARIANTS")
    return data


def text_variant(variant: str) -> str:
    """The text a task-name suffix selects: itself, or "" for a resolution suffix; unknown -> ValueError."""
    if variant in TEXT_VARIANTS:
        return variant
    if variant in RESOLUTION_VARIANTS:
        return ""
    known = ", ".join(repr(v) for v in VARIANTS)
    raise ValueError(f"unknown prompt variant {variant!r}; known variants: {known}")


def _protocol(protocol: str) -> _Protocol:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown prompt protocol {protocol!r}; known protocols: {', '.join(PROTOCOLS)}")
    return templates()["protocols"][protocol]


def _template(protocol: str, family: str, variant: str) -> _Template:
    proto = _protocol(protocol)
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known families: {', '.join(FAMILIES)}")
    tvariant = text_variant(variant)
    family_templates = proto["templates"][family]
    if tvariant not in family_templates:
        have = ", ".join(repr(v) for v in family_templates)
        raise ValueError(f"upstream has no {family} text for variant {variant!r} in protocol {protocol!r} "
                         f"(available: {have})")
    return family_templates[tvariant]


def _slot_names(text: str) -> list[str]:
    names = []
    for _, name, spec, conv in string.Formatter().parse(text):
        if name is None:
            continue
        if not name.isidentifier() or spec or conv:
            raise ValueError(f"prompt_templates.json: unsupported slot {{{name}}} in {text!r}")
        names.append(name)
    return names


def _fill(text: str, fields: Mapping[str, object], what: str) -> str:
    for name in _slot_names(text):
        if name not in fields:
            raise ValueError(f"{what} needs {name!r}, which this prompt input does not give")
    return text.format_map(fields)


# ----------------------------------------------------------------------------------------------------------------
# Versions
# ----------------------------------------------------------------------------------------------------------------


def _combos() -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for protocol in PROTOCOLS:
        for family in FAMILIES:
            available = templates()["protocols"][protocol]["templates"][family]
            for variant in VARIANTS:
                if text_variant(variant) in available:
                    out.append((protocol, family, variant))
    return out


def prompt_version(protocol: str, family: str, variant: str) -> str:
    """The version id of the text (protocol, family, variant) renders; bump it in the JSON on any wording change."""
    return _template(protocol, family, variant)["version"]


def template_fingerprint(protocol: str, family: str, variant: str) -> str:
    """sha256 over everything that shapes this text: pieces, the sentences and constants it can reach, unit words,
    number format. A changed fingerprint means the wording changed, so the version id must change too."""
    proto = _protocol(protocol)
    tpl = _template(protocol, family, variant)
    sentences, constants = proto["sentences"], proto["constants"]
    names: set[str] = set()
    todo = [n for piece in tpl["pieces"] for n in _slot_names(piece)]
    pattern = tpl.get("task_sentence")
    if pattern:
        for metric_type in ("distance", "angle"):
            for named in ("named", "unnamed"):
                key = pattern.format(metric_type=metric_type, named=named)
                if key in sentences:
                    todo.append(key)
    cot = tpl.get("cot")
    todo.extend([cot] if isinstance(cot, str) else list((cot or {}).values()))
    while todo:
        name = todo.pop()
        if name in names or name in _COMPUTED_SLOTS:
            continue
        names.add(name)
        if name in sentences:
            todo.extend(_slot_names(sentences[name]))
    reached = {
        "template": tpl,
        "sentences": {n: sentences[n] for n in sorted(names) if n in sentences},
        "constants": {n: constants[n] for n in sorted(names) if n in constants},
        "units": proto["units"],
        "number_format": templates()["number_format"],
    }
    if "spatial_unit" in names:  # only texts that state a spatial unit reach the map (older digests stay as they were)
        reached["spatial_units"] = proto["spatial_units"]
    blob = json.dumps(reached, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


#: (protocol, family, variant) -> version id of the text it renders (resolution suffixes share the plain text's id).
PROMPT_VERSIONS: dict[tuple[str, str, str], str] = {c: prompt_version(*c) for c in _combos()}


# ----------------------------------------------------------------------------------------------------------------
# Units and numbers
# ----------------------------------------------------------------------------------------------------------------


def _single_unit(metric_unit: object) -> object:
    if isinstance(metric_unit, list | tuple):
        if len(metric_unit) != 1:
            raise ValueError(f"metric_unit list must have one element, got {metric_unit!r}")
        return metric_unit[0]
    return metric_unit


def _unit_word(protocol: str, family: str, metric_type: str | None, metric_unit: object) -> str:
    """The unit word of the task sentence (and of the pixel line where it has one), per protocol."""
    units = _protocol(protocol)["units"]
    if protocol == "current":
        # upstream _normalize_metric_unit: list -> its one element; mm/cm/degree -> long form; else an error
        unit = _single_unit(metric_unit)
        words = units["words"]
        if isinstance(unit, str) and unit in words:
            return words[unit]
        raise ValueError(f"unsupported metric_unit {metric_unit!r}; upstream knows {', '.join(words)}")
    if family_spec(family).axes:
        # paper: a list gives its element unchanged (T/L docs: ["mm"] -> "mm"); a plain string is mapped
        if isinstance(metric_unit, list | tuple):
            return str(_single_unit(metric_unit))
        if isinstance(metric_unit, str):
            return units["TL_str_words"].get(metric_unit, metric_unit)
        raise ValueError(f"unsupported metric_unit type {type(metric_unit).__name__}: {metric_unit!r}")
    if not isinstance(metric_unit, str):
        raise ValueError(f"A/D metric_unit must be a string, got {metric_unit!r}")
    if metric_type == "distance":
        old, new = units["distance_replace"]
        return metric_unit.strip().replace(old, new)
    return metric_unit  # paper angle: the raw unit ("degree")


def _number(value: float) -> str:
    return format(value, templates()["number_format"])


def _integer(value: object, what: str) -> str:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return str(int(value))


# ----------------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------------


def _check_input(inp: PromptInput) -> None:
    if inp.family not in FAMILIES:
        raise ValueError(f"unknown family {inp.family!r}; known families: {', '.join(FAMILIES)}")
    if inp.task_type not in TASK_TYPES[inp.family]:
        raise ValueError(f"taskType {inp.task_type!r} is not a {inp.family} task type "
                         f"({', '.join(TASK_TYPES[inp.family])})")
    if family_spec(inp.family).per_metric:
        if inp.metric_type not in ("distance", "angle"):
            raise ValueError(f"A/D metric_type must be 'distance' or 'angle', got {inp.metric_type!r}")
        expected = _AD_TASK_METRIC.get(inp.task_type)
        if expected is not None and inp.metric_type != expected:
            raise ValueError(f"taskType {inp.task_type!r} holds {expected} metrics, got metric_type "
                             f"{inp.metric_type!r}")
        n_points = 2 if inp.metric_type == "distance" else 4
        if len(inp.points) != n_points:
            raise ValueError(f"an A/D {inp.metric_type} prompt needs {n_points} landmark names, got {inp.points!r}")


def _fields(inp: PromptInput, protocol: str, tpl: _Template) -> dict[str, str | None]:
    """The values sentences may use; a value the input lacks is left out (and named if a sentence needs it)."""
    proto = _protocol(protocol)
    fields: dict[str, str | None] = {"image_description": inp.image_description}
    if protocol == "current":
        # upstream: ": " + description unless it is "" or None
        desc = inp.image_description
        fields["image_prompt"] = (proto["sentences"]["image_prompt"].format(image_description=desc)
                                  if desc not in ("", None) else "")
    if inp.label_name is not None:
        fields["label_name"] = inp.label_name
    if inp.metric_type is not None:
        fields["metric_type"] = inp.metric_type
    if inp.biometrics_name is not None:
        fields["biometrics_name"] = inp.biometrics_name
    if family_spec(inp.family).measure and inp.metric_unit is not None:
        unit = fields["unit"] = _unit_word(protocol, inp.family, inp.metric_type, inp.metric_unit)
        # upstream _spatial_unit (@e3cf881): a pixel is a length, so an angle's "degrees" becomes "millimeters"
        fields["spatial_unit"] = proto.get("spatial_units", {}).get(unit, unit)
    if family_spec(inp.family).per_metric:
        names = ("p1", "p2") if inp.metric_type == "distance" else ("l1p1", "l1p2", "l2p1", "l2p2")
        fields.update(zip(names, inp.points))
    scaled = bool(tpl.get("scaled_pixel_size"))
    s_h, s_w = inp.scale_hw
    if not scaled and (s_h != 1 or s_w != 1):
        raise ValueError(f"scale_hw {inp.scale_hw!r} given for a variant that does not scale the pixel size")
    if inp.pixel_hw_mm is not None:
        p_h, p_w = inp.pixel_hw_mm
        if scaled:
            p_h, p_w = p_h * s_h, p_w * s_w
        fields["pixel_h"], fields["pixel_w"] = _number(p_h), _number(p_w)
    if inp.canvas_hw is not None:
        c_h, c_w = inp.canvas_hw
        fields["canvas_h"], fields["canvas_w"] = _integer(c_h, "canvas height"), _integer(c_w, "canvas width")
    return fields


def build_prompt(inp: PromptInput, variant: str, protocol: str) -> str:
    """The question text upstream sends for this input, task-name suffix and protocol."""
    _check_input(inp)
    tpl = _template(protocol, inp.family, variant)
    proto = _protocol(protocol)
    sentences, constants = proto["sentences"], proto["constants"]
    what = f"the {protocol} {inp.family}{variant} prompt"
    fields = _fields(inp, protocol, tpl)

    ctx: dict[str, str] = dict(constants)
    named = "named" if inp.biometrics_name not in (None, "") else "unnamed"
    task_key = tpl["task_sentence"].format(metric_type=inp.metric_type, named=named)
    if task_key not in sentences:
        raise ValueError(f"prompt_templates.json: {what} names the missing sentence {task_key!r}")
    ctx["task"] = _fill(sentences[task_key], fields, what)
    cot = tpl.get("cot")
    if cot is not None:  # a CoT per metric type is A/D's, whose metric_type _check_input holds to distance/angle
        ctx["cot"] = constants[cot if isinstance(cot, str) else cot[str(inp.metric_type)]]
    parts = []
    for piece in tpl["pieces"]:
        for name in _slot_names(piece):
            if name not in ctx:
                if name not in sentences:
                    raise ValueError(f"prompt_templates.json: {what} uses the unknown slot {name!r}")
                ctx[name] = _fill(sentences[name], fields, what)
        parts.append(piece.format_map(ctx))
    return "".join(parts)


# ----------------------------------------------------------------------------------------------------------------
# scaledPS
# ----------------------------------------------------------------------------------------------------------------


def scaled_ps_factors(image_file: str | os.PathLike[str], slice_dim: int, slice_idx: int, task_id: str,
                      label: int | str | None, family: str, low: float = SCALED_PS_LOW,
                      high: float = SCALED_PS_HIGH) -> tuple[float, float]:
    """Upstream's deterministic pixel-size factors (s_h, s_w) of one sample (``_get_pixel_size_scale_factor``,
    medvision_utils.py @0a4c5e2).

    The seed hashes the doc's own field texts: ``image_file`` exactly as in the doc (the absolute path upstream's
    loader built, so the factors depend on where the data lies), ``slice_dim``, ``slice_idx``, ``taskID`` (the
    string, e.g. "01"), and ``label`` (None for A/D docs, which have no label field: upstream then uses "").
    T/L: one uniform draw used for both axes; A/D: two draws, height first.
    """
    if not isinstance(task_id, str):
        raise TypeError(f"task_id must be the doc's taskID string (e.g. '01'), got {task_id!r}")
    if label is not None and (isinstance(label, bool) or not isinstance(label, Integral | str)):
        raise TypeError(f"label must be an integer, a string or None, got {label!r}")
    parts = [
        os.fspath(image_file),
        _integer(slice_dim, "slice_dim"),
        _integer(slice_idx, "slice_idx"),
        task_id,
        "" if label is None else str(label),
    ]
    key = "|".join(parts).encode("utf-8")
    seed = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") % (2**32)
    rng = np.random.RandomState(seed)
    low, high = float(low), float(high)
    if family_spec(family).axes:
        s = float(rng.uniform(low, high))
        return s, s
    if family_spec(family).per_metric:
        s_h = float(rng.uniform(low, high))
        s_w = float(rng.uniform(low, high))
        return s_h, s_w
    raise ValueError(f"scaledPS exists for the TL and AD families only, got {family!r}")
