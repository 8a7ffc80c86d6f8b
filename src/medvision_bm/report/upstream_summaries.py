"""Upstream's summary files, written from our per-group numbers and read back: the text reports
``summary_{detection,TL,AD}_task[_filtered][__<parsed dir>].txt`` and the per-model JSONs, in upstream's format so a
run can be ``diff``-ed against ``Paper-results-backup/`` line by line.

Formats (docs/spec/upstream-summary-files.md): YongchengYAO/MedVision ``src/medvision_bm/benchmark/
summarize_TL_task.py`` @28f6c67, ``summarize_AD_task.py`` @286f632 and ``summarize_detection_task.py`` (the Acc@IoU
version that printed ``Paper-results-backup/`` @755a7bb), ``print_model_summaries`` / ``print_summary_metrics``. The
model rows are upstream's own rules (``tasks.upstream_metrics``: ``tl_overall``, ``ad_overall``,
``anatomy_vs_lesion``) over the per-group dicts the report computed.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from medvision_bm.data import upstream_configs as cfg
from medvision_bm.io import write_text_atomic
from medvision_bm.tasks import upstream_groups as ug
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.families import family_spec

NAN = float("nan")
#: Our family -> upstream's task folder name in ``Paper-results-backup/``.
STRICT_PARSED_DIR = "parsed"
#: Per model (run) and family: the run's per-group dicts, as ``FamilyTables.upstream[label]["groups"]``.
Runs = Sequence[tuple[str, Mapping[str, Mapping[str, float]]]]
#: A row of numbers as a summary prints or reads it (a sample count stays an ``int``).
Row = dict[str, float]


def judged_dir(weights: str | None) -> str:
    """Upstream's judged folder ``llm-parsed_<judge>``: the judge weights' last part, lower case, without a trailing
    ``-it`` (``google/gemma-4-31B-it`` -> ``llm-parsed_gemma-4-31b``, upstream's ``judge_config.py``)."""
    name = str(weights or "judge").rstrip("/").split("/")[-1].lower()
    return f"llm-parsed_{name.removesuffix('-it') or name}"


def _dir_suffix(parsed_dir: str) -> str:
    """Upstream's ``_parsed_dir_suffix``: nothing for ``parsed``, else ``__<parsed dir>``."""
    return "" if parsed_dir == STRICT_PARSED_DIR else f"__{parsed_dir}"


def file_names(family: str, parsed_dir: str = STRICT_PARSED_DIR, filtered: bool = False) -> dict[str, str]:
    """The task-level text (and detection's all-models JSON) and the per-model JSONs of one family."""
    names = cfg.summary_filenames()
    sfx = _dir_suffix(parsed_dir)
    if family_spec(family).axes:
        flt = "_filtered" if filtered else ""
        return {"text": f"summary_TL_task{flt}{sfx}.txt",
                "metrics": names["SUMMARY_FILENAME_TL_METRICS"].removesuffix(".json") + f"{flt}{sfx}.json",
                "values": names["SUMMARY_FILENAME_TL_VALUES"].removesuffix(".json") + f"{flt}{sfx}.json"}
    if family_spec(family).per_metric:
        return {"text": f"summary_AD_task{sfx}.txt", "metrics": names["SUMMARY_FILENAME_AD_METRICS"],
                "values": names["SUMMARY_FILENAME_AD_VALUES"]}
    return {"text": f"summary_detection_task{sfx}.txt",
            "all_models": names["SUMMARY_FILENAME_ALL_MODELS_DETECT_METRICS"].removesuffix(".json") + f"{sfx}.json",
            "metrics": names["SUMMARY_FILENAME_DETECT_METRICS"], "values": names["SUMMARY_FILENAME_DETECT_VALUES"],
            "grouped": names["SUMMARY_FILENAME_GROUPED_ANATOMY_VS_TUMOR_LESION_DETECT_METRICS"]}


def _v(x: float | None) -> float:
    return NAN if x is None else float(x)


def _is_nan(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _by_samples(labels: Mapping[str, Mapping[str, float]]) -> list[tuple[str, Mapping[str, float]]]:
    return sorted(labels.items(), key=lambda kv: kv[1]["samples"], reverse=True)


def _acc_line(summary: Mapping[str, object], none: str) -> str:
    parts = [f"Weighted {k}: {summary[f'weighted_{k.lower()}']:.4f}" for k in ("MRE<0.1", "MRE<0.2", "MRE<0.3")
             if summary.get(f"weighted_{k.lower()}") is not None]
    return " | ".join(parts) if parts else none


_HEAD = "\n\n========== MODEL SUMMARIES ==========\n"
_END = "\n" + "=" * 100 + "\n"


def tl_text(runs: Runs) -> str:
    """``summary_TL_task*.txt`` of upstream's ``summarize_TL_task.print_model_summaries``."""
    lines = [_HEAD]
    for model, groups in runs:
        s = ug.tl_overall(groups, rules="newer")
        if s["weighted_avg_mae"] is None:
            lines.append(f"\nModel: {model} (No valid MAE samples)")
            continue
        nmae = f"{s['weighted_avg_nmae']:.4f}" if s["weighted_avg_nmae"] is not None else "N/A"
        lines += [f"\nModel: {model}",
                  f"Weighted Average MAE: {s['weighted_avg_mae']:.4f}, MRE: {s['weighted_avg_mre']:.4f}, "
                  f"SR: {s['weighted_avg_sr']:.4f}, nMAE: {nmae} (Total Samples: {s['total_samples']})",
                  _acc_line(s, "No MRE<k metrics"), "\nLabel-specific metrics:",
                  f"{'Label':<50}  | {'MAE':<8} | {'MRE':<8} | {'SR':<8} | {'nMAE':<8} | "
                  f"{'MRE<0.1':<8} | {'MRE<0.2':<8} | {'MRE<0.3':<8} | {'Samples':<8}", "-" * 146]
        for label, m in _by_samples(s["labels"]):
            nm = m.get("nmae")
            lines.append(f"{label:<50}  | {_v(m['mae']):<8.4f} | {m['mre']:<8.4f} | {m['sr']:<8.4f} | "
                         f"{(NAN if _is_nan(nm) else nm):<8.4f} | {_v(m['MRE<0.1']):<8.4f} | "
                         f"{_v(m['MRE<0.2']):<8.4f} | {_v(m['MRE<0.3']):<8.4f} | {m['samples']:<8}")
        lines.append(_END)
    return "\n".join(lines)


_AD_COLS = ("MAE", "MRE", "nMAE", "SR", "MRE<0.1", "MRE<0.2", "MRE<0.3")


def ad_text(runs: Runs) -> str:
    """``summary_AD_task*.txt`` of upstream's ``summarize_AD_task.print_model_summaries``."""
    lines = [_HEAD]
    heads = "".join(f" | {c:<8}" for c in _AD_COLS) + f" | {'Samples':<8}"
    for model, groups in runs:
        s = ug.ad_overall(groups, rules="newer")
        lines += [f"\nModel: {model}",
                  f"Weighted Average MAE: {_v(s['weighted_avg_mae']):.4f}, MRE: {_v(s['weighted_avg_mre']):.4f}, "
                  f"nMAE: {_v(s['weighted_avg_nmae']):.4f}, SR: {_v(s['weighted_avg_sr']):.4f} "
                  f"(Total Samples: {s['total_samples']})",
                  _acc_line(s, "No MRE metrics"), "\nGroup averages:", f"{'Group':<15}{heads}", "-" * 99]
        for name, g in s["group_averages"].items():
            lines.append(f"{name:<15}" + "".join(f" | {_v(g[c]):<8.4f}" for c in _AD_COLS) + f" | {g['samples']:<8}")
        lines += ["\nLabel-specific metrics:", f"{'Label':<50}{heads}", "-" * 139]
        for label, m in _by_samples(s["labels"]):
            lines.append(f"{label:<50}" + "".join(f" | {_v(m.get(c)):<8.4f}" for c in _AD_COLS)
                         + f" | {m['samples']:<8}")
        lines.append(_END)
    return "\n".join(lines)


#: The detection line's statistics: upstream's all-models key -> the key of ``mean_metrics``.
_DET_KEYS: tuple[tuple[str, str], ...] = (
    ("Recall", "Recall"), ("Precision", "Precision"), ("F1", "F1"), ("IoU", "IoU"), ("SuccessRate", "SuccessRate"),
    ("IoU>0.5", "IoU>0.5"), ("F1>0.5", "F1>0.5"), ("AccIoU_50", um.acc_iou_key(0.50)),
    ("AccIoU_75", um.acc_iou_key(0.75)), ("AccIoU_mean", um.ACC_IOU_MEAN_KEY))
#: How the line prints them (upstream's labels).
_DET_PRINT: dict[str, str] = {"AccIoU_50": um.acc_iou_key(0.50), "AccIoU_75": um.acc_iou_key(0.75),
                              "AccIoU_mean": um.ACC_IOU_MEAN_KEY}


def detection_grouped(groups: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, object]]:
    """``summary_metrics_anatomy_vs_lesion_detect_Task.json`` of one model."""
    return ug.anatomy_vs_lesion(groups)


def detection_all_models(runs: Runs) -> dict[str, dict[str, Row]]:
    """``summary_metrics_all_models_detect_Task*.json``: per model the anatomy and T/L means."""
    out: dict[str, dict[str, Row]] = {}
    for model, groups in runs:
        split = ug.anatomy_vs_lesion(groups)
        out[model] = {}
        for name in ("anatomy", "T/L"):
            mm = split[name]["mean_metrics"]
            out[model][name] = {**{k: mm.get(src, NAN) for k, src in _DET_KEYS},
                                "total_samples": int(mm.get("total_samples", 0)),
                                "num_regions": int(mm.get("num_regions", 0))}
    return out


def detection_text(runs: Runs, summary_path: str) -> str:
    """``summary_detection_task*.txt`` of upstream's ``summarize_detection_task.print_summary_metrics``."""
    lines = ["\n" + "=" * 80, "SUMMARY METRICS: Recall, Precision, and F1", "=" * 80]
    for model, metrics in detection_all_models(runs).items():
        lines += [f"\nModel: {model}", "-" * len(f"Model: {model}")]
        for name in ("anatomy", "T/L"):
            g = metrics[name]
            values = ", ".join(f"{_DET_PRINT.get(k, k)}={g[k]:.3f}" for k, _ in _DET_KEYS)
            lines.append(f"  {name.upper():8} ({g['num_regions']:2d} regions, {g['total_samples']:4d} samples): "
                         + values)
    lines += ["\n" + "=" * 80, f"Summary metrics saved to: {summary_path}", "=" * 80]
    return "\n".join(lines)


def _json(obj: object) -> str:
    """As upstream's ``json.dump(convert_numpy_to_python(x), f, indent=2)``: NaN spelled ``NaN``.

    The text of ``json.dumps(obj, indent=2)``, character for character, built by one recursive walk from the same
    pieces (the C string escaper, ``int``/``float`` reprs, NaN/Infinity as ``json`` spells them) instead of the
    pure-Python encoder's nested generators, which pass every token up through each enclosing container (the
    per-sample files hold millions); a value of another type, or a key that is not text, goes to ``json.dumps``
    itself."""
    parts: list[str] = []
    try:
        _put(obj, parts, "\n")
    except (_Unencodable, RecursionError):
        return json.dumps(obj, indent=2)
    return "".join(parts)


def dump_json(obj: object) -> str:
    """The text upstream's ``json.dump(obj, f, indent=2)`` writes (``_json``)."""
    return _json(obj)


def json_parts(obj: object, nl: str) -> str | None:
    """The indent-2 JSON text of ``obj`` nested where a newline and ``nl`` start its lines (``_put``); None where
    ``json.dumps`` itself would have to write it."""
    parts: list[str] = []
    try:
        _put(obj, parts, nl)
    except (_Unencodable, RecursionError):
        return None
    return "".join(parts)


class _Unencodable(Exception):
    """A value ``_put`` leaves to ``json.dumps`` (its own conversion, or its error)."""


_ESCAPE = json.encoder.encode_basestring_ascii


def _scalar(o: object) -> str | None:
    """The JSON text of a scalar, in ``json``'s order of type checks; None for a container or another type."""
    exact = _EXACT.get(type(o))
    if exact is not None:
        return exact(o)
    if isinstance(o, str):
        return _ESCAPE(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float_text(o)
    return None


def _float_text(o: float) -> str:
    """A float as ``json`` writes it (``repr``; NaN and the infinities spelled its way)."""
    return "NaN" if o != o else "Infinity" if o == math.inf else "-Infinity" if o == -math.inf else float.__repr__(o)


#: ``_scalar`` of the values of exactly these types (no subclass), by one lookup.
_EXACT: dict[type, Callable[[Any], str]] = {
    str: _ESCAPE, float: _float_text, int: int.__repr__, bool: lambda o: "true" if o else "false",
    type(None): lambda o: "null"}


def _flat_text(o: dict[Any, Any] | list[Any] | tuple[Any, ...], nl: str) -> str | None:
    """The indent-2 JSON text of a non-empty container of scalars of ``_EXACT``'s types (a dict: text keys),
    joined at once; None for any other (``_put`` writes it then)."""
    try:
        texts = [_EXACT[type(v)](v) for v in (o.values() if isinstance(o, dict) else o)]
    except KeyError:
        return None
    inner = nl + "  "
    if isinstance(o, dict):
        if not all(type(k) is str for k in o):
            return None
        return "{" + inner + ("," + inner).join([_ESCAPE(k) + ": " + t for k, t in zip(o, texts)]) + nl + "}"
    return "[" + inner + ("," + inner).join(texts) + nl + "]"


def _put(o: object, parts: list[str], nl: str) -> None:
    """Append the indent-2 JSON text of ``o`` (``nl``: a newline and the current indent)."""
    text = _scalar(o)
    if text is not None:
        parts.append(text)
        return
    if o and type(o) in (dict, list, tuple):
        text = _flat_text(o, nl)  # type: ignore[arg-type]
        if text is not None:
            parts.append(text)
            return
    if isinstance(o, (list, tuple)):
        if not o:
            parts.append("[]")
            return
        inner = nl + "  "
        sep = "," + inner
        parts.append("[")
        for i, v in enumerate(o):
            text = _scalar(v)
            if text is not None:
                parts.append((sep if i else inner) + text)
            else:
                parts.append(sep if i else inner)
                _put(v, parts, inner)
        parts.append(nl + "]")
    elif isinstance(o, dict):
        if not o:
            parts.append("{}")
            return
        inner = nl + "  "
        sep = "," + inner
        parts.append("{")
        for i, (k, v) in enumerate(o.items()):
            if not isinstance(k, str):
                raise _Unencodable
            text = _scalar(v)
            head = (sep if i else inner) + _ESCAPE(k) + ": "
            if text is not None:
                parts.append(head + text)
            else:
                parts.append(head)
                _put(v, parts, inner)
        parts.append(nl + "}")
    else:
        raise _Unencodable


def _folder(label: str) -> str:
    return label.replace("/", "_")


def write_family(out: Path, family: str, runs: Runs, *, parsed_dir: str = STRICT_PARSED_DIR,
                 filtered: bool = False, values: Mapping[str, object] | None = None) -> list[str]:
    """Write one family's upstream files under ``out/<Detect|TL|AD>/``; returns their paths relative to ``out``.
    ``values``: per model its ``summary_values_*`` content (``report.upstream_values``), written before its
    metrics, as upstream writes them."""
    folder = out / family_spec(family).upstream_folder
    names = file_names(family, parsed_dir, filtered)
    written: list[str] = []

    def put(rel: str, text: str) -> None:
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
        written.append(path.relative_to(out).as_posix())

    for model, groups in runs:
        base = f"{_folder(model)}/{parsed_dir}"
        if values is not None and model in values and "values" in names:
            text = values[model]  # the file's text (``upstream_values.run_values_text``) or its content
            put(f"{base}/{names['values']}", text if isinstance(text, str) else _json(text))
        put(f"{base}/{names['metrics']}", _json(dict(groups)))
        if family_spec(family).has_boxes:
            put(f"{base}/{names['grouped']}", _json(detection_grouped(groups)))
    if family_spec(family).axes:
        put(names["text"], tl_text(runs))
    elif family_spec(family).per_metric:
        put(names["text"], ad_text(runs))
    else:
        all_models = f"{family_spec(family).upstream_folder}/{names['all_models']}"
        put(names["all_models"], _json(detection_all_models(runs)))
        put(names["text"], detection_text(runs, f"{out.name}/{all_models}"))
    return written


# --------------------------------------------------------------------------------------------- reading them back

class TLSummary(TypedDict):
    """One model's block of a T/L summary text as read back."""

    overall: Row
    labels: dict[str, Row]


class ADSummary(TypedDict):
    """One model's block of an A/D summary text as read back."""

    overall: Row
    groups: dict[str, Row]
    labels: dict[str, Row]


_NUM = r"(nan|-?\d+(?:\.\d+)?)"


def _num(text: str) -> float:
    return NAN if text == "nan" else float(text)


def _blocks(text: str) -> list[tuple[str, str]]:
    """(model, its block) of a summary text."""
    parts = re.split(r"\nModel: ", text)
    out = []
    for part in parts[1:]:
        model, _, body = part.partition("\n")
        out.append((model.strip(), body))
    return out


def _table(body: str, start: str, width: int = 7) -> dict[str, Row]:
    """The rows of the table below the header line starting with ``start``: ``|`` separated, the name, ``width``
    values, the sample count."""
    lines = body.split("\n")
    try:
        at = next(i for i, line in enumerate(lines) if line.startswith(start) and "|" in line)
    except StopIteration:
        return {}
    heads = [h.strip() for h in lines[at].split("|")]
    out: dict[str, Row] = {}
    for line in lines[at + 2:]:
        if not line.strip() or "|" not in line:
            break
        cells = [c.strip() for c in line.split("|")]
        if len(cells) != width + 2:
            raise ValueError(f"table row {line!r} has {len(cells)} cells, expected {width + 2}")
        row: Row = {h: _num(c) for h, c in zip(heads[1:-1], cells[1:-1])}
        row["Samples"] = int(cells[-1])
        out[cells[0]] = row
    return out


def read_tl_text(text: str) -> dict[str, TLSummary]:
    """A ``summary_TL_task*.txt``: per model ``{"overall": {MAE, MRE, SR, nMAE, MRE<0.1..0.3, Samples},
    "labels": {label: {...}}}`` (nan where printed so; nMAE ``N/A`` -> nan)."""
    out: dict[str, TLSummary] = {}
    head = re.compile(rf"Weighted Average MAE: {_NUM}, MRE: {_NUM}, SR: {_NUM}, nMAE: (N/A|{_NUM[1:-1]}) "
                      r"\(Total Samples: (\d+)\)")
    for model, body in _blocks(text):
        if model.endswith(" (No valid MAE samples)"):
            continue
        m = head.search(body)
        if m is None:
            raise ValueError(f"T/L summary of {model!r}: no 'Weighted Average' line")
        overall: Row = {"MAE": _num(m[1]), "MRE": _num(m[2]), "SR": _num(m[3]),
                        "nMAE": NAN if m[4] == "N/A" else _num(m[4]), "Samples": int(m[5])}
        overall.update({k: float(v) for k, v in re.findall(r"Weighted (MRE<0\.\d): (-?\d+\.\d+)", body)})
        out[model] = TLSummary(overall=overall, labels=_table(body, "Label "))
    return out


def read_ad_text(text: str) -> dict[str, ADSummary]:
    """A ``summary_AD_task*.txt``: per model ``{"overall": {...}, "groups": {name: {...}}, "labels": {...}}``."""
    out: dict[str, ADSummary] = {}
    head = re.compile(rf"Weighted Average MAE: {_NUM}, MRE: {_NUM}, nMAE: {_NUM}, SR: {_NUM} "
                      r"\(Total Samples: (\d+)\)")
    for model, body in _blocks(text):
        m = head.search(body)
        if m is None:
            raise ValueError(f"A/D summary of {model!r}: no 'Weighted Average' line")
        overall: Row = {"MAE": _num(m[1]), "MRE": _num(m[2]), "nMAE": _num(m[3]), "SR": _num(m[4]),
                        "Samples": int(m[5])}
        overall.update({k: float(v) for k, v in re.findall(r"Weighted (MRE<0\.\d): (-?\d+\.\d+)", body)})
        out[model] = ADSummary(overall=overall, groups=_table(body, "Group "), labels=_table(body, "Label "))
    return out


def read_detection_text(text: str) -> dict[str, dict[str, Row]]:
    """A ``summary_detection_task*.txt``: per model ``{"anatomy"|"T/L": {Recall, ..., Acc@IoU[0.50:0.95],
    "regions", "samples"}}``."""
    out: dict[str, dict[str, Row]] = {}
    line = re.compile(r"^  (ANATOMY|T/L)\s+\(\s*(\d+) regions,\s*(\d+) samples\): (.*)$", re.M)
    for model, body in _blocks(text):
        rows: dict[str, Row] = {}
        for m in line.finditer(body):
            values = dict(kv.rsplit("=", 1) for kv in m[4].split(", "))
            rows["anatomy" if m[1] == "ANATOMY" else "T/L"] = {
                **{k: _num(v) for k, v in values.items()}, "regions": int(m[2]), "samples": int(m[3])}
        if rows:
            out[model] = rows
    return out
