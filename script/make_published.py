"""Generate src/medvision_bm/report/published_leaderboard.json from upstream's Paper-results-backup/ summary texts.

Usage (a copy of the folder at the commit below, e.g. from a checkout of YongchengYAO/MedVision):

    python script/make_published.py --backup /path/to/MedVision/Paper-results-backup [--out FILE] [--check]

The texts are read with the package's own reader of upstream's format (``report.upstream_summaries``); every model
row is checked against its label rows (sample counts add up, the weighted means agree to the printed precision) before
anything is written, so a damaged or mistyped copy fails loudly. ``--check`` compares with the committed file instead
of writing it. The upstream files are not part of this repository; the generated data file is.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from medvision_bm.models.registry import get_record
from medvision_bm.report.published import DATA_FILE, PUBLISHED_SCHEMA, SOURCE_COMMIT, SOURCE_REPOSITORY
from medvision_bm.report.upstream_summaries import read_ad_text, read_detection_text, read_tl_text

JUDGE = "judged:gemma-4-31b"
#: The summary texts: (family, split, path below Paper-results-backup, annotation pin, sample limit).
FILES: tuple[tuple[str, str, str, str | None, int | None], ...] = (
    ("detect", "main", "Detect/summary_detection_task__llm-parsed_gemma-4-31b.txt", "1.0.0", 1000),
    ("TL", "main", "TL/summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt", "1.0.0", 1000),
    ("AD", "main", "AD/summary_AD_task__llm-parsed_gemma-4-31b.txt", "1.0.0", 1000),
    ("detect", "planeOOD", "Detect-OOD/planeOOD/summary_detection_task__llm-parsed_gemma-4-31b.txt", None, None),
    ("detect", "taskOOD", "Detect-OOD/taskOOD/summary_detection_task__llm-parsed_gemma-4-31b.txt", None, None),
    ("TL", "planeOOD", "TL-OOD/planeOOD/summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt", "1.1.1", None),
    ("TL", "taskOOD", "TL-OOD/taskOOD/summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt", "1.1.1", None),
)

V0 = ("MedVision-V0 (7B)", "medvision-model-rft", "YongchengYAO/MedVision-V0-7B")
SFT = ("MedVision fullSFT (Qwen2.5-VL-7B)", "qwen2_5_vl", "")  # weights not published: matched by name only
QWEN7 = ("Qwen2.5-VL (7B)", "qwen2_5_vl", "Qwen/Qwen2.5-VL-7B-Instruct")
#: Upstream's result folder -> (display name, registry record, weights). Display names: upstream's
#: script/visualization/config-{TL,AD,detect}-CoT.yaml @1df0ffe; the fullSFT checkpoint is not in them (ours).
MODELS: dict[str, tuple[str, str, str | None]] = {
    "MedVision__fullRFT__qwen25vl-7b-fullSFT__AD-TL-D__512x512__PRxAnswer_s250": V0,
    "MedVision__fullRFT__qwen25vl-7b-fullSFT__AD-TL-D__512x512__PRxAnswer_s250_CoT": V0,
    "MedVision-V0-7B-ds1.1.1": V0,
    "MedVision__fullSFT__Qwen2.5VL-7B__D110k-AD5k-TL5k__CoT__512x512__v2": SFT,
    "Qwen2.5VL-7B-fullSFT-ds1.1.1": SFT,
    "Qwen2.5VL-7B-SFT-ds1.1.1": SFT,
    "gemma-3-27b-it": ("Gemma-3 (27B)", "gemma3", "google/gemma-3-27b-it"),
    "gemma-4-31B-it": ("Gemma-4 (31B)", "gemma4", "google/gemma-4-31B-it"),
    "GLM-4.6V": ("GLM-4.6V (106B)", "glm4v", "zai-org/GLM-4.6V"),
    "GLM-4.6V-Budget16k": ("GLM-4.6V (106B)", "glm4v", "zai-org/GLM-4.6V"),
    "GLM-4.6V-Flash": ("GLM-4.6V-Flash (9B)", "glm4v", "zai-org/GLM-4.6V-Flash"),
    "GLM-4.6V-Flash-Budget16k": ("GLM-4.6V-Flash (9B)", "glm4v", "zai-org/GLM-4.6V-Flash"),
    "FreedomIntelligence__HuatuoGPT-Vision-34B": ("HuatuoGPT-Vision (34B)", "huatuogpt_vision",
                                                  "FreedomIntelligence/HuatuoGPT-Vision-34B"),
    "HuatuoGPT-Vision-34B_bugfix-09206a2": ("HuatuoGPT-Vision (34B)", "huatuogpt_vision",
                                            "FreedomIntelligence/HuatuoGPT-Vision-34B"),
    "HealthGPT-L14": ("HealthGPT (14B)", "healthgpt", None),
    "HealthGPT-L14_bugfix-0a4c5e2": ("HealthGPT (14B)", "healthgpt", None),
    "HealthGPT-L14_bugfix-2eb7706": ("HealthGPT (14B)", "healthgpt", None),
    "InternVL3-38B": ("InternVL3 (38B)", "intern_vl3", "OpenGVLab/InternVL3-38B"),
    "InternVL3-38B_bugfix-2eb7706": ("InternVL3 (38B)", "intern_vl3", "OpenGVLab/InternVL3-38B"),
    "lingshu-medical-mllm__Lingshu-32B": ("Lingshu (32B)", "lingshu", "lingshu-medical-mllm/Lingshu-32B"),
    "lingshu-32b": ("Lingshu (32B)", "lingshu", "lingshu-medical-mllm/Lingshu-32B"),
    "llava-onevision-qwen2-72b-ov-hf": ("LLaVA-OneVision (72B)", "llava_onevision",
                                        "llava-hf/llava-onevision-qwen2-72b-ov-hf"),
    "LLaVA-OneVision_bugfix-0a4c5e2": ("LLaVA-OneVision (72B)", "llava_onevision",
                                       "llava-hf/llava-onevision-qwen2-72b-ov-hf"),
    "Llama-3.2-11B-Vision-Instruct-Budget16k": ("Llama-3.2-Vision (11B)", "llama3_2_vision",
                                                "meta-llama/Llama-3.2-11B-Vision-Instruct"),
    "Llama-3.2-11B-Vision-Instruct_bugfix-2eb7706": ("Llama-3.2-Vision (11B)", "llama3_2_vision",
                                                     "meta-llama/Llama-3.2-11B-Vision-Instruct"),
    "MedDr__BF16": ("MedDr (40B)", "meddr", "Sunanhe/MedDr_0401"),
    "google__medgemma-4b-it": ("MedGemma (4B)", "medgemma", "google/medgemma-4b-it"),
    "medgemma-4b-it": ("MedGemma (4B)", "medgemma", "google/medgemma-4b-it"),
    "medgemma-27b-it": ("MedGemma (27B)", "medgemma_27b", "google/medgemma-27b-it"),
    "MedGemma-27b-it-Budget8k": ("MedGemma (27B)", "medgemma_27b", "google/medgemma-27b-it"),
    "MiniMax-M3-INT4": ("MiniMax-M3 (428B, int4)", "minimax_m3_int4", "cyankiwi/MiniMax-M3-AWQ-INT4"),
    "Qwen2.5-VL-7B-Instruct": QWEN7,
    "Qwen2.5VL-7B-ds1.1.1": QWEN7,
    "Qwen2.5-VL-32B-Instruct": ("Qwen2.5-VL (32B)", "qwen2_5_vl", "Qwen/Qwen2.5-VL-32B-Instruct"),
    "Qwen3-VL-32B-Thinking": ("Qwen3-VL-Thinking (32B)", "qwen3_vl", "Qwen/Qwen3-VL-32B-Thinking"),
}

#: Upstream's printed column -> our statistic (the same definitions; report.groups.STATS).
STAT_OF = {"MAE": "avgMAE", "MRE": "avgMRE", "SR": "SuccessRate", "nMAE": "avgNMAE"}
MEASURE_COLUMNS = ("MAE", "MRE", "SR", "nMAE", "MRE<0.1", "MRE<0.2", "MRE<0.3")
DETECTION_COLUMNS = ("Recall", "Precision", "F1", "IoU", "SuccessRate", "IoU>0.5", "F1>0.5", "Acc@IoU>=0.50",
                     "Acc@IoU>=0.75", "Acc@IoU[0.50:0.95]")
AD_NAMED_GROUPS = {"FeTA-Distance": "FeTA24_distance", "Ceph-Angle": "Ceph-Biometrics-400_angle",
                   "Ceph-Distance": "Ceph-Biometrics-400_distance", "Distance": "_distance", "Angle": "_angle"}
AD_OVERALL = "overall (all labels, mm and degrees mixed)"
TOLERANCE = 1.2e-4  # two half-units of the 4th decimal: a label row's rounding plus the model row's


class Damaged(Exception):
    """The copy of a summary text does not add up."""


def _budget(folder: str, record: Any, family: str) -> tuple[int, str]:
    """The token budget of a published run: a ``-Budget<N>k`` folder says N thousand (upstream names its 16000-token
    runs ``Budget16k``), else the record's (the launchers')."""
    if "-Budget" in folder:
        k = int(folder.rsplit("-Budget", 1)[1].rstrip("k"))
        note = ""
        if k == 8:
            note = ("the folder says 8k; the published files give no exact number (taken as 8000, upstream's "
                    "Budget16k runs are its launchers' 16000); upstream's current launchers pass 16000")
        return k * 1000, note
    return record.max_new_tokens_for(family), ""


def _wavg(rows: list[dict[str, Any]], key: str) -> float:
    kept = [r for r in rows if not math.isnan(r[key])]
    n = sum(r["Samples"] for r in kept)
    return sum(r[key] * r["Samples"] for r in kept) / n if n else math.nan


def _check(where: str, rows: list[dict[str, Any]], row: dict[str, Any], keys: tuple[str, ...],
           over_all: tuple[str, ...] = ()) -> None:
    """``row`` is the sample-weighted mean of ``rows`` (``over_all``: keys divided by every row's samples)."""
    n = sum(r["Samples"] for r in rows)
    if n != row["Samples"]:
        raise Damaged(f"{where}: samples {row['Samples']} != {n} of its label rows")
    for key in keys:
        want = sum(r[key] * r["Samples"] for r in rows) / n if key in over_all else _wavg(rows, key)
        if math.isnan(want) and math.isnan(row[key]):
            continue
        if not abs(want - row[key]) <= TOLERANCE:
            raise Damaged(f"{where}: {key} {row[key]} but its label rows give {want:.6f}")


def _run(folder: str, family: str, split: str, rel: str, pin: str | None, limit: int | None) -> dict[str, Any]:
    if folder not in MODELS:
        raise Damaged(f"{rel}: model folder {folder!r} is not in MODELS; add it with its registry record")
    name, record_name, weights = MODELS[folder]
    record = get_record(record_name)
    budget, note = _budget(folder, record, family)
    return {"model": folder, "name": name, "record": record.name, "weights": weights, "family": family,
            "split": split, "planner_version": pin, "task_variant": "-CoT", "sample_limit": limit, "parse": JUDGE,
            "tl_filter": True if family == "TL" else None, "max_new_tokens": budget, "engine": record.backend,
            "source_file": f"Paper-results-backup/{rel}", "note": note}


def collect(backup: Path) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    runs: list[dict[str, Any]] = []
    values: list[list[Any]] = []
    for family, split, rel, pin, limit in FILES:
        path = backup / rel
        if not path.is_file():
            raise Damaged(f"{path} is missing; pass --backup pointing at Paper-results-backup/")
        text = path.read_text(encoding="utf-8")
        if family == "detect":
            for folder, groups in read_detection_text(text).items():
                runs.append(_run(folder, family, split, rel, pin, limit))
                i = len(runs) - 1
                for group, r in groups.items():
                    values += [[i, group, "aggregate", k, None if math.isnan(r[k]) else r[k], 3, r["samples"],
                                r["regions"]] for k in DETECTION_COLUMNS]
            continue
        parsed = (read_tl_text if family == "TL" else read_ad_text)(text)
        for folder, m in parsed.items():
            runs.append(_run(folder, family, split, rel, pin, limit))
            i = len(runs) - 1
            labels = list(m["labels"].values())
            where = f"{rel} {folder}"
            if family == "TL":
                _check(where, labels, m["overall"], MEASURE_COLUMNS, over_all=("MAE", "MRE", "SR"))
                rows = [("overall", "aggregate", m["overall"], len(labels))]
            else:
                _check(where, labels, m["overall"], MEASURE_COLUMNS, over_all=("MAE", "MRE", "SR"))
                rows = [(AD_OVERALL, "aggregate", m["overall"], len(labels))]
                for g, needle in AD_NAMED_GROUPS.items():
                    members = [r for lb, r in m["labels"].items() if needle in lb]
                    _check(f"{where} {g}", members, m["groups"][g], MEASURE_COLUMNS)
                    rows.append((g, "aggregate", m["groups"][g], len(members)))
            rows += [(lb, "group", r, None) for lb, r in m["labels"].items()]
            for group, kind, r, n_groups in rows:
                values += [[i, group, kind, STAT_OF.get(k, k), None if math.isnan(r[k]) else r[k], 4, r["Samples"],
                            n_groups] for k in MEASURE_COLUMNS]
    return runs, values


def render(runs: list[dict[str, Any]], values: list[list[Any]]) -> str:
    """The data file: a header, one line per run, one line per value (small, and a diff reads line by line)."""
    head = {"schema": PUBLISHED_SCHEMA,
            "source": {"repository": SOURCE_REPOSITORY, "commit": SOURCE_COMMIT, "folder": "Paper-results-backup",
                       "generator": "script/make_published.py"},
            "value_columns": ["run", "group", "kind", "metric", "value", "decimals", "n", "n_groups"]}
    lines = ["{", *[f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()], '  "runs": [']
    lines += [f"    {json.dumps(r)}," for r in runs]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["  ],", '  "values": [']
    lines += [f"    {json.dumps(v)}," for v in values]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backup", required=True, help="a copy of upstream's Paper-results-backup/ folder")
    p.add_argument("--out", default=str(DATA_FILE), help="the data file to write (default: the package's)")
    p.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    ns = p.parse_args(argv)
    try:
        runs, values = collect(Path(ns.backup))
    except Damaged as exc:
        print(f"make_published: error: {exc}", file=sys.stderr)
        return 2
    text = render(runs, values)
    out = Path(ns.out)
    if ns.check:
        same = out.is_file() and out.read_text(encoding="utf-8") == text
        print(f"{out}: {'up to date' if same else 'differs from what the files give'}")
        return 0 if same else 1
    from medvision_bm.io import write_text_atomic

    write_text_atomic(out, text)
    print(f"wrote {out}: {len(runs)} runs, {len(values)} values from {len(FILES)} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
