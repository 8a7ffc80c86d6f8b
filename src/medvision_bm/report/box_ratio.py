"""Detection by box-to-image ratio in upstream's 5% bins, with its random-box baseline and the label x box-size
table (YongchengYAO/MedVision ``src/medvision_bm/benchmark/analyze_detection_task_boxsize.py`` and
``analyze_detection_task_boxsize_vs_random.py``, described in ``skills/medvision/sub-skills/analysis/references/
detection-target-size.md`` @39dd6bf).

Every scored detection sample of a run falls into a bin by its target box's area over the image's (relative
coordinates: ``|x1 - x0| * |y1 - y0|``): ``Box/Image < 5%``, ``5% <= Box/Image < 10%``, ..., ``85% <= Box/Image <
90%``, ``Box/Image >= 90%``; each bin's samples are pooled into upstream's detection group dict (the report's
``groups.upstream_dicts``). The random baseline draws ``RANDOM_BOX_SIMULATIONS`` (100) boxes per target box by
upstream's rule (a width and a height uniform in whole pixels 1..W and 1..H, a corner uniform where the box fits,
seeded with upstream's ``SEED`` 1024; numpy's generator, so the same distribution, not upstream's very draws),
averages each box's MAE, IoU, F1, Precision and Recall per target and pools the targets per bin the same way.
"""

from __future__ import annotations

import csv
import io
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import orjson
import polars as pl

from medvision_bm.data import upstream_configs as cfg
from medvision_bm.io import write_text_atomic
from medvision_bm.report.groups import era, upstream_dicts
from medvision_bm.report.upstream_summaries import dump_json
from medvision_bm.report.views import View, fmt
from medvision_bm.store.layout import StoreLayout
from medvision_bm.tasks import upstream_metrics as um
from medvision_bm.tasks.families import family_spec

if TYPE_CHECKING:
    from medvision_bm.report.load import StoreInfo

#: Upstream's bin upper edges (18 of them; the last bin is everything at or above 90%).
EDGES: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(1, 19))
RANDOM_MODEL = "random_detection"
_NAMES = cfg.summary_filenames()
METRICS_FILE = _NAMES["SUMMARY_FILENAME_PER_BOX_IMG_RATIO_GROUP_DETECT_METRICS"]
LABEL_FILE = _NAMES["SUMMARY_FILENAME_PER_BOX_IMG_RATIO_GROUP_LABEL_DETECT_MEAN_METRICS"]
#: Upstream's detection group dict over one bin's samples (``groups.upstream_dicts``).
GroupDict = dict[str, float]


class BoxRatio(TypedDict):
    """Per run its ``{bin: group dict}``, the random baseline's, and the label x box-size rows."""

    runs: dict[str, dict[str, GroupDict]]
    random: dict[str, GroupDict]
    label_table: pl.DataFrame


def bin_names() -> list[str]:
    """Upstream's bin names, smallest first."""
    pct = [round(e * 100) for e in EDGES]
    return ([f"Box/Image < {pct[0]}%"] + [f"{lo}% <= Box/Image < {hi}%" for lo, hi in itertools.pairwise(pct)]
            + [f"Box/Image >= {pct[-1]}%"])


def label_bin_names() -> list[str]:
    """The label x box-size table's group names: ``<0.05``, ``0.05~0.10``, ..., ``>=0.90``."""
    return ([f"<{EDGES[0]:.2f}"] + [f"{lo:.2f}~{hi:.2f}" for lo, hi in itertools.pairwise(EDGES)]
            + [f">={EDGES[-1]:.2f}"])


def bin_index(ratio: pl.Expr) -> pl.Expr:
    """The bin of each ratio: the first edge it is below (``< edge``), else the last bin."""
    return pl.sum_horizontal([(ratio >= e).cast(pl.Int32) for e in EDGES])


#: Targets whose random boxes are held at once (memory: about 100 bytes x draws x this, whatever the task's size).
RANDOM_CHUNK_TARGETS = 4096


def random_metrics(targets: np.ndarray, image_hw: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """Per target (rows of [x0, y0, x1, y1]) the mean MAE, IoU, F1, Precision and Recall of ``draws`` random boxes
    on an image of (H, W) pixels (columns in that order). The boxes are drawn target by target (the generator's
    order), their overlaps computed for ``RANDOM_CHUNK_TARGETS`` targets at a time (the same operations, element by
    element, and each target's means over its own row)."""
    rng = np.random.default_rng(seed)
    g = np.asarray(targets, dtype=np.float64).reshape(-1, 4)
    hw = np.array([(max(int(h), 1), max(int(w), 1)) for h, w in image_hw], dtype=np.int64).reshape(len(g), 2)
    out = np.empty((len(g), 5))
    for a in range(0, len(g), RANDOM_CHUNK_TARGETS):
        b = a + RANDOM_CHUNK_TARGETS
        out[a:b] = _random_chunk(rng, g[a:b], hw[a:b], draws)
    return out


def _random_chunk(rng: np.random.Generator, g: np.ndarray, hw: np.ndarray, draws: int) -> np.ndarray:
    """``random_metrics`` of a run of consecutive targets, drawing from ``rng`` where the previous run left it."""
    n = len(g)
    bw, bh, x0, y0 = (np.empty((n, draws), dtype=np.int64) for _ in range(4))
    for i, (height, width) in enumerate(hw.tolist()):
        bw[i] = rng.integers(1, width + 1, draws)
        bh[i] = rng.integers(1, height + 1, draws)
        x0[i] = rng.integers(0, width - bw[i] + 1)
        y0[i] = rng.integers(0, height - bh[i] + 1)
    h, w = hw[:, :1], hw[:, 1:]
    p = np.stack([x0 / w, y0 / h, (x0 + bw) / w, (y0 + bh) / h], axis=2)  # (target, draw, corner)
    gx0, gy0, gx1, gy1 = (g[:, k:k + 1] for k in range(4))
    ix = np.clip(np.minimum(p[..., 2], gx1) - np.maximum(p[..., 0], gx0), 0, None)
    iy = np.clip(np.minimum(p[..., 3], gy1) - np.maximum(p[..., 1], gy0), 0, None)
    inter = ix * iy
    area_p = (p[..., 2] - p[..., 0]) * (p[..., 3] - p[..., 1])
    area_g = np.abs(gx1 - gx0) * np.abs(gy1 - gy0)
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(area_p + area_g - inter > 0, inter / (area_p + area_g - inter), 0.0)
        f1 = 2 * inter / (area_p + area_g)
        precision = inter / area_p
        recall = np.where(area_g > 0, inter / area_g, 0.0)
    out = np.empty((n, 5))
    out[:, 0] = np.abs(p - g[:, None, :]).mean(axis=2).mean(axis=1)
    for k, m in enumerate((iou, f1, precision, recall), start=1):
        out[:, k] = m.mean(axis=1)
    return out


def _image_sizes(stores: Sequence[StoreInfo], keys_of: dict[int, set[str]]) -> dict[tuple[int, str], tuple[int, int]]:
    """(store, key) -> the native slice's (H, W), from each store's docs.jsonl (one row at a time)."""
    out: dict[tuple[int, str], tuple[int, int]] = {}
    for s in stores:
        keys = keys_of.get(s.id)
        if not keys:
            continue
        with open(StoreLayout(s.ref.folder).docs, "rb") as fh:
            for line in fh:
                if not line.strip():
                    continue
                row = orjson.loads(line)
                key = row.get("key")
                if key in keys:
                    keys.discard(key)
                    hw = (row.get("doc") or {}).get("image_size_2d") or [1, 1]
                    out[(s.id, key)] = (int(hw[0]), int(hw[1]))
    return out


def _labels(frame: pl.DataFrame) -> pl.Series:
    """Upstream's label of the label x box-size table: ``<label_map_regroup[label]> @ <modality code>``."""
    regroup = cfg.label_map_regroup("newer")
    combos = frame.select("label_name", "modality").unique(maintain_order=True)
    names = [f"{regroup.get(str(n or ''))} @ {um.MODALITY_CODES.get(str(m or ''), str(m or ''))}"
             for n, m in combos.iter_rows()]  # each distinct (label, modality) once
    lookup = combos.with_columns(pl.Series("box_label", names, dtype=pl.Utf8))
    return frame.select("label_name", "modality").join(lookup, on=["label_name", "modality"], how="left",
                                                       nulls_equal=True, maintain_order="left")["box_label"]


def by_box_ratio(frame: pl.DataFrame, stores: Sequence[StoreInfo], labels: dict[int, str]) -> BoxRatio | None:
    """Per run (label) upstream's ``{bin: group dict}``, the random baseline's, and the label x box-size rows (None:
    no scored sample with a box)."""
    names = bin_names()
    scored = frame.filter(pl.col("scored") & pl.col("box_area_ratio").is_not_null()).with_columns(
        bin_index(pl.col("box_area_ratio")).alias("bin"),
        pl.col("store").replace_strict(labels, default=None, return_dtype=pl.Utf8).alias("label"))
    if scored.height == 0:
        return None
    rules = {label: era(r) for label, r in scored.group_by("label").agg(
        pl.col("rules").drop_nulls().mode().sort().first()).iter_rows()}
    runs: dict[str, dict[str, GroupDict]] = {label: {} for label in sorted(rules)}
    for (label, b), d in sorted(upstream_dicts(scored, "detect", ("label", "bin"),
                                               lambda key: rules[key[0]]).items(), key=lambda kv: kv[0][1]):
        runs[label][names[b]] = d
    # the label x box-size table (analyze_detection_task_boxsize): means over every sample, failures as 0 overlap
    table = scored.with_columns(_labels(scored)).group_by("label", "bin", "box_label").agg(
        pl.col("IoU").fill_null(0.0).mean().round(6).alias("IoU"), pl.len().alias("sample_size"),
        *[pl.col(m).fill_null(0.0).mean().round(6).alias(m) for m in ("F1", "Precision", "Recall")]
    ).sort("label", "bin", "box_label")
    # the random baseline over the distinct target boxes (the first run of each task)
    first = scored.sort("label").unique(["task", "key"], keep="first", maintain_order=True)
    keys_of = {sid: set(keys) for sid, keys in first.group_by("store").agg(pl.col("key")).iter_rows()}
    sizes = pl.DataFrame([(sid, key, h, w) for (sid, key), (h, w) in _image_sizes(stores, keys_of).items()],
                         schema={"store": pl.Int64, "key": pl.Utf8, "h": pl.Int64, "w": pl.Int64}, orient="row")
    hw = first.select("store", "key").join(sizes, on=["store", "key"], how="left", maintain_order="left") \
        .select(pl.col("h").fill_null(1), pl.col("w").fill_null(1)).to_numpy()
    targets = first.select("tx0", "ty0", "tx1", "ty1").to_numpy()
    rnd = random_metrics(targets, hw, cfg.random_box_simulations(), cfg.seed())
    base = first.select("bin").with_columns(
        pl.lit(True).alias("success"), pl.lit(True).alias("scored"), pl.lit(RANDOM_MODEL).alias("label"),
        *[pl.Series(m, rnd[:, i]) for i, m in enumerate(("MAE", "IoU", "F1", "Precision", "Recall"))])
    random_run = {names[b]: d for (_, b), d in sorted(
        upstream_dicts(base, "detect", ("label", "bin"), lambda key: "newer").items(), key=lambda kv: kv[0][1])}
    return {"runs": runs, "random": random_run, "label_table": table}


def _csv(table: pl.DataFrame, label: str) -> str:
    names = label_bin_names()
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["box_img_group", "label", "IoU", "sample_size", "F1", "Precision", "Recall"])
    for r in table.filter(pl.col("label") == label).iter_rows(named=True):
        w.writerow([names[r["bin"]], r["box_label"], r["IoU"], r["sample_size"], r["F1"], r["Precision"],
                    r["Recall"]])
    return buf.getvalue()


def write(out: Path, result: BoxRatio, parsed_dir: str) -> list[str]:
    """Per run ``upstream/Detect/<run>/<parsed dir>/`` the per-bin JSON and the label x box-size CSV, and
    ``upstream/Detect/random_detection/`` the baseline's JSON; their paths relative to ``out``."""
    written = []
    folder = out / "upstream" / "Detect"
    for label, bins in result["runs"].items():
        base = folder / label.replace("/", "_") / parsed_dir
        base.mkdir(parents=True, exist_ok=True)
        write_text_atomic(base / METRICS_FILE, dump_json(bins))  # json.dumps(bins, indent=2)'s text
        write_text_atomic(base / LABEL_FILE, _csv(result["label_table"], label))
        written += [(base / METRICS_FILE).relative_to(out).as_posix(), (base / LABEL_FILE).relative_to(out).as_posix()]
    rnd = folder / RANDOM_MODEL
    rnd.mkdir(parents=True, exist_ok=True)
    write_text_atomic(rnd / METRICS_FILE, dump_json(result["random"]))
    written.append((rnd / METRICS_FILE).relative_to(out).as_posix())
    return written


def view(result: BoxRatio) -> View:
    """The report's table: per run and bin the samples and upstream's overlap metrics beside the random boxes'."""
    rows = []
    for label, bins in result["runs"].items():
        for name in bin_names():
            d, r = bins.get(name), result["random"].get(name) or {}
            if d is None:
                continue
            rows.append([label, name, str(d["num_samples"]), *[fmt(d.get(k)) for k in ("IoU", "F1", "Precision",
                                                                                        "Recall", "SuccessRate")],
                         fmt(r.get("IoU")), fmt(r.get("F1"))])
    return View("Detection by box-to-image ratio", ["Run", "Box/Image", "N", "IoU", "F1", "Precision", "Recall",
                                                    "SuccessRate", "Random IoU", "Random F1"], rows,
                "Every scored sample binned by its target box's share of the image (upstream's 5% bins), each bin "
                "pooled into upstream's detection dict; beside it the random-box baseline in the same bin (100 "
                "random boxes per target box, upstream's rule). Compare a run with the baseline in the same bin: "
                "large boxes give overlap for free (analyze_detection_task_boxsize_vs_random).",
                [False, False, *([True] * 8)])


def run_stage(out: Path, samples: dict[str, pl.DataFrame], stores: Sequence[StoreInfo], parsed_dir: str
              ) -> tuple[dict[str, object], list[str], View | None]:
    """The detection runs of a summary by box ratio: (results, files written, the report's table or None)."""
    frame = samples.get("detect")
    det = [s for s in stores if family_spec(s.ref.family).has_boxes]
    if frame is None or frame.height == 0 or not det:
        return {}, [], None
    result = by_box_ratio(frame, det, {s.id: s.ref.label for s in det})
    if result is None:
        return {}, [], None
    files = write(out, result, parsed_dir)
    return {"runs": result["runs"], "random": result["random"]}, files, view(result)
