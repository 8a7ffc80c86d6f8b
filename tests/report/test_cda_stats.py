"""Clinical decision agreement statistics against upstream's rules on generated inputs
(YongchengYAO/MedVision ``script/analyze/clinical-decision-analysis/cda_stats.py`` @2beef50: ``categorize``,
``cohen_kappa``, ``weighted_kappa``, ``cal_clinical_agreement``; ``cda_uncertainty.py`` @2beef50: ``bootstrap_ci``,
``_cluster_index``; the cutoffs of ``cda_config.py`` @2beef50). The references below are written from those rules
record by record (labels, concatenated records per draw), independently of the count-matrix code they check."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from medvision_bm.report import cda
from medvision_bm.report import cda_stats as cs
from medvision_bm.store.records import ParsedRow


def _proxy(key: str) -> cda.Proxy:
    (p,) = [x for x in cda.proxies() if x.key == key]
    return p


# ------------------------------------------------------------------------------------- cutoffs and boundaries


@pytest.mark.parametrize(("key", "value", "label"), [
    ("SNA", 79.999, "retrusive maxilla"), ("SNA", 80.0, "normal maxilla"), ("SNA", 84.0, "normal maxilla"),
    ("SNA", 84.001, "protrusive maxilla"), ("SNB", 77.99, "retrusive mandible"), ("SNB", 78.0, "normal mandible"),
    ("SNB", 82.0, "normal mandible"), ("SNB", 82.0625, "protrusive mandible"),
    ("renal_T", 40.0, "T1a"), ("renal_T", 40.0001, "T1b"), ("renal_T", 70.0, "T1b"), ("renal_T", 70.5, "T2a"),
    ("renal_T", 100.0, "T2a"), ("renal_T", 100.25, "T2b"), ("renal_T", 0.0, "T1a"), ("renal_T", -3.0, "T1a"),
])
def test_boundary_values_fall_on_upstreams_side(key: str, value: float, label: str) -> None:
    """cda_config.py @2beef50: SNA [80, 84] and SNB [78, 82] are closed normal bands (right_closed [False, True]);
    the AJCC table is "<= x" (right_closed True): a value on a cutoff is the lower category."""
    p = _proxy(key)
    assert p.labels[p.category(value)] == label


def test_the_cutoff_tables_are_upstreams() -> None:
    assert (_proxy("SNA").cutoffs, _proxy("SNB").cutoffs, _proxy("renal_T").cutoffs) == (
        (80.0, 84.0), (78.0, 82.0), (40.0, 70.0, 100.0))
    assert _proxy("renal_T").datasets == ("KiTS23", "KiPA22")
    assert (cda.settings().seed, cda.settings().n_boot) == (1024, 4000)


@pytest.mark.parametrize("value", [None, float("nan"), float("inf"), "x"])
def test_no_category_without_a_finite_value(value: object) -> None:
    assert _proxy("SNA").category(value) is None  # type: ignore[arg-type]


def test_a_rule_per_cutoff_is_required() -> None:
    with pytest.raises(ValueError):
        cs.categorize(50.0, (40.0, 70.0), (True,))


@pytest.mark.parametrize(("family", "task", "dataset", "key", "expected"), [
    ("AD", "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal", "Ceph-Biometrics-400",
     "A-L_1_2-L_2_5", ["SNA"]),
    ("AD", "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal", "Ceph-Biometrics-400",
     "A-L_1_2-L_3_4", []),  # another angle: no proxy
    ("AD", "Ceph-Biometrics-400_BiometricsFromLandmarks_Distance_Task01_Sagittal", "Ceph-Biometrics-400",
     "A-L_1_2-L_2_5", []),  # a distance task: no proxy
    ("AD", "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal", "PhantomXR", "A-L_1_2-L_2_6", ["SNB"]),
    ("TL", "KiTS23_TumorLesionSize_Task01_Axial-CoT", "KiTS23", None, ["renal_T"]),
    ("TL", "PhantomCT_TumorLesionSize_Task02_Axial", "PhantomCT", None, []),
])
def test_samples_enter_upstreams_proxies(family: str, task: str, dataset: str, key: str | None,
                                         expected: list[str]) -> None:
    """summarize_CDA_task.py @2beef50 ``_proxies_for_sample``: angle files by metric key alone, T/L files by
    dataset."""
    assert [p.key for p in cda.proxies_for(family, task, dataset, key)] == expected


# ------------------------------------------------------------------------------------- kappas and agreement


def _ref_cohen(gt: list[int], pred: list[int], k: int) -> float:
    n = len(gt)
    if n == 0:
        return math.nan
    po = sum(g == p for g, p in zip(gt, pred)) / n
    pe = sum((gt.count(c) / n) * (pred.count(c) / n) for c in range(k))
    return math.nan if pe >= 1.0 else (po - pe) / (1.0 - pe)


def _ref_weighted(gt: list[int], pred: list[int], k: int) -> float:
    n = len(gt)
    if n == 0 or k < 2:
        return math.nan
    w = [[((i - j) / (k - 1)) ** 2 for j in range(k)] for i in range(k)]
    obs = sum(w[g][p] for g, p in zip(gt, pred))
    exp = sum(w[i][j] * gt.count(i) * pred.count(j) / n for i in range(k) for j in range(k))
    return math.nan if exp == 0 else 1.0 - obs / exp


def test_upstreams_hand_computed_kappas() -> None:
    """The references in cda_stats.py's docstring @2beef50: plain 0.40, quadratic 0.80, and label order matters."""
    assert cs.cohen_kappa(np.array([[20, 5], [10, 15]])) == pytest.approx(0.40, abs=1e-12)
    m = np.array([[10, 2, 0], [3, 10, 3], [0, 2, 10]])
    assert cs.weighted_kappa(m) == pytest.approx(0.80, abs=1e-12)
    order = [0, 2, 1]  # A, C, B
    assert cs.weighted_kappa(m[np.ix_(order, order)]) == pytest.approx(0.54, abs=0.005)


@pytest.mark.parametrize("seed", range(8))
def test_kappas_match_the_record_level_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 5))
    n = int(rng.integers(1, 60))
    gt = [int(x) for x in rng.integers(0, k, n)]
    pred = [g if rng.random() < 0.5 else int(rng.integers(0, k)) for g in gt]
    mat = cs.confusion(gt, pred, k)
    for got, ref in ((cs.cohen_kappa(mat), _ref_cohen(gt, pred, k)), (cs.weighted_kappa(mat),
                                                                       _ref_weighted(gt, pred, k))):
        assert (math.isnan(got) and math.isnan(ref)) or got == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_degenerate_kappas_are_upstreams() -> None:
    empty = cs.confusion([], [], 3)
    assert math.isnan(cs.cohen_kappa(empty)) and math.isnan(cs.weighted_kappa(empty))
    one_class = cs.confusion([1, 1, 1], [1, 1, 1], 3)  # both raters in one category: undefined
    assert math.isnan(cs.cohen_kappa(one_class)) and math.isnan(cs.weighted_kappa(one_class))
    pred_collapse = cs.confusion([0, 1, 2], [1, 1, 1], 3)  # prediction-only collapse: a finite 0
    assert cs.cohen_kappa(pred_collapse) == 0.0 and cs.weighted_kappa(pred_collapse) == 0.0
    assert math.isnan(cs.weighted_kappa(cs.confusion([0, 0], [0, 0], 1)))  # fewer than two categories


def test_agreement_counts_failures_only_in_the_coverage_adjusted_numbers() -> None:
    mat = cs.confusion([0, 1, 1, 2], [0, 1, 2, 2], 3)
    a = cs.agreement(mat, 2, ordinal=True)
    assert (a.accuracy, a.flip_rate, a.n_parsed, a.n_total) == (0.75, 0.25, 4, 6)
    assert (a.accuracy_coverage_adjusted, a.flip_rate_coverage_adjusted) == (0.5, 0.5)
    assert a.weighted_kappa is not None
    none = cs.agreement(cs.confusion([], [], 3), 5, ordinal=False)
    assert math.isnan(none.accuracy) and math.isnan(none.flip_rate) and none.weighted_kappa is None
    assert (none.accuracy_coverage_adjusted, none.n_total) == (0.0, 5)
    nothing = cs.agreement(cs.confusion([], [], 2), 0, ordinal=False)
    assert math.isnan(nothing.accuracy_coverage_adjusted)


# ------------------------------------------------------------------------------------- the clustered bootstrap


def _ref_bootstrap(gt: list[int], pred: list[int], vols: list[str | None], k: int, ordinal: bool, n_boot: int,
                   seed: int) -> tuple[float, float, float, int]:
    """cda_uncertainty.py @2beef50 ``bootstrap_ci`` record by record: clusters in first-appearance order (a record
    without a volume alone), ``integers(0, C, C)`` per draw, the records concatenated, undefined draws dropped."""
    def stat(g: list[int], p: list[int], k: int) -> float:
        """Upstream's numpy operations on the matrix its ``_confusion_matrix`` builds record by record (the same
        float operations in the same order, so a draw's value is upstream's to the bit)."""
        m = np.zeros((k, k))
        for a, b in zip(g, p):
            m[a, b] += 1
        n = m.sum()
        if not ordinal:
            pe = float(np.sum((m.sum(axis=1) / n) * (m.sum(axis=0) / n)))
            return math.nan if pe >= 1.0 else float((np.trace(m) / n - pe) / (1.0 - pe))
        idx = np.arange(k)
        w = ((idx[:, None] - idx[None, :]) / (k - 1)) ** 2
        denom = float(np.sum(w * (np.outer(m.sum(axis=1), m.sum(axis=0)) / n)))
        return math.nan if denom == 0 else float(1.0 - np.sum(w * m) / denom)

    order: list[object] = []
    members: dict[object, list[int]] = {}
    for i, v in enumerate(vols):
        key: object = v if v is not None else ("__singleton__", i)
        if key not in members:
            members[key] = []
            order.append(key)
        members[key].append(i)
    clusters = [members[c] for c in order]
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        picked = rng.integers(0, len(clusters), len(clusters))
        idx = [i for c in picked for i in clusters[c]]
        s = stat([gt[i] for i in idx], [pred[i] for i in idx], k)
        if np.isfinite(s):
            vals.append(s)
    if not vals:
        return math.nan, math.nan, math.nan, 0
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi), (sum(v <= 0.0 for v in vals) + 1) / (len(vals) + 1), len(vals)


@pytest.mark.parametrize(("seed", "ordinal"), [(0, True), (1, False), (2, True), (3, False)])
def test_bootstrap_is_upstreams_draw_for_draw(seed: int, ordinal: bool) -> None:
    rng = np.random.default_rng(100 + seed)
    k = 3 if ordinal else 2
    gt: list[int] = []
    pred: list[int] = []
    vols: list[str | None] = []
    for v in range(int(rng.integers(5, 25))):  # volumes of unequal size; some records without a volume
        for _ in range(int(rng.integers(1, 8))):
            g = int(rng.integers(0, k))
            gt.append(g)
            pred.append(g if rng.random() < 0.6 else int(rng.integers(0, k)))
            vols.append(None if rng.random() < 0.1 else f"case_{v}.nii.gz")
    counts = cs.VolumeCounts(k)
    for g, p, v in zip(gt, pred, vols):
        counts.add(v, g, p)
    got = cs.bootstrap(counts, ordinal, 300, 1024)
    lo, hi, p, n_valid = _ref_bootstrap(gt, pred, vols, k, ordinal, 300, 1024)
    assert (got.ci_lower, got.ci_upper, got.p_kappa_gt_zero, got.n_boot_valid) == (lo, hi, p, n_valid)
    assert got.n_clusters == len({v for v in vols if v is not None}) + vols.count(None)
    assert got.statistic == ("weighted_kappa" if ordinal else "cohen_kappa")


def test_bootstrap_degenerate_cases() -> None:
    empty = cs.bootstrap(cs.VolumeCounts(3), True, 50, 1)
    assert (empty.n, empty.n_boot_valid, empty.low_n) == (0, 0, True) and math.isnan(empty.ci_lower)
    one = cs.VolumeCounts(3)
    for i in range(12):
        one.add(f"v{i}", 1, 1)  # every draw has one category on both sides: no defined kappa
    u = cs.bootstrap(one, True, 50, 1)
    assert u.n_boot_valid == 0 and math.isnan(u.ci_lower) and math.isnan(u.point_estimate) and not u.low_n
    perfect = cs.VolumeCounts(2)
    for i in range(4):
        perfect.add(f"v{i}", i % 2, i % 2)
    u = cs.bootstrap(perfect, False, 200, 3)
    assert u.low_n and u.point_estimate == 1.0 and 0 < u.n_boot_valid < 200  # one-class draws dropped
    assert u.p_kappa_gt_zero == 1 / (u.n_boot_valid + 1)


# ------------------------------------------------------------------------------------- stored rows into proxies


def _row(index: int, values: list[float | None] | None, target: list[float], *, dataset: str = "KiTS23",
         key: str = "", metric_key: str | None = None, family: str = "TL") -> ParsedRow:
    from medvision_bm.tasks.upstream_parse import SampleStatus

    return ParsedRow(index=index, family=family, task="t", rules="current", key=key,
                         status=SampleStatus.OK if values else SampleStatus.PARSE_FAILED, success=bool(values),
                         values=values, target=target, metrics={}, parser="strict-1", dataset=dataset,
                         metric_key=metric_key, slice_dim=2)


def test_stored_rows_follow_upstreams_value_count_and_keep_their_volume() -> None:
    """summarize_CDA_task.py @2beef50 ``_gt_pred_values``: the ground truth's first value; a T/L prediction only
    from exactly two values, an angle's from exactly one; otherwise a parse failure (in Ntotal, not in Acc)."""
    tl = cda.RunCda("m", "TL")
    task = "KiTS23_TumorLesionSize_Task01_Axial"
    cda.add_row(tl, task, _row(0, [45.0, 30.0], [35.0, 20.0], key="KiTS23/Images/case_00001.nii.gz:d2:s40"))
    cda.add_row(tl, task, _row(1, None, [80.0, 50.0], key="KiTS23/Images/case_00001.nii.gz:d2:s41"))
    cda.add_row(tl, task, _row(2, [45.0], [41.0, 20.0], key="KiTS23/Images/case_00002.nii.gz:d2:s7"))
    cda.add_row(tl, "PhantomCT_TumorLesionSize_Task01_Axial", _row(3, [5.0, 4.0], [5.0, 4.0], dataset="PhantomCT"))
    recs = [s.to_upstream() for s in tl.samples]
    assert [(r["gt_category"], r["pred_category"], r["image_file"], r["slice_idx"]) for r in recs] == [
        ("T1a", "T1b", "case_00001.nii.gz", 40), ("T2a", None, "case_00001.nii.gz", 41),
        ("T1b", None, "case_00002.nii.gz", 7)]
    m = tl.metrics()["overall"]["AJCC renal T category (greatest dimension)"]
    assert (m["n_parsed"], m["n_total"], m["accuracy"], m["accuracy_coverage_adjusted"]) == (1, 3, 0.0, 0.0)
    assert list(tl.metrics()["by_dataset"]) == ["AJCC renal T category (greatest dimension) @ KiTS23"]
    ad = cda.RunCda("m", "AD")
    angle = "Ceph-Biometrics-400_BiometricsFromLandmarks_Angle_Task01_Sagittal"
    cda.add_row(ad, angle, _row(0, [81.0], [84.0], dataset="Ceph-Biometrics-400", family="AD",
                                metric_key="A-L_1_2-L_2_5", key="Ceph-Biometrics-400/Images/001.nii.gz:d0:s0:A-L_1_2-L_2_5"))
    cda.add_row(ad, angle, _row(1, [81.0, 2.0], [84.0], dataset="Ceph-Biometrics-400", family="AD",
                                metric_key="A-L_1_2-L_2_6"))
    assert [(s.proxy.key, s.pred_category, s.image_file) for s in ad.samples] == [("SNA", 1, "001.nii.gz"),
                                                                                  ("SNB", None, None)]


@pytest.mark.parametrize(("k", "ordinal"), [(2, False), (3, True), (3, False), (4, True)])
def test_a_stack_of_matrices_gives_each_matrix_kappa_to_the_bit(k: int, ordinal: bool) -> None:
    rng = np.random.default_rng(k)
    mats = rng.integers(0, 40, (300, k, k))
    mats[:20] = 0  # no samples
    mats[20:40] = 0
    mats[20:40, 1, 1] = 7  # one category on both sides
    mats[40:50] *= (rng.random((10, k, k)) < 0.3)  # sparse
    single = cs.weighted_kappa if ordinal else cs.cohen_kappa
    got = cs.kappa_block(mats, ordinal)
    want = np.array([single(m) for m in mats])
    assert np.array_equal(got, want, equal_nan=True)


def test_the_parse_file_is_the_one_the_report_read(tmp_path) -> None:
    """A judged load reads ``judged/<sig>/parsed.jsonl``, a strict one ``parsed.jsonl``; a store re-scored in
    memory has no file to read (summarize then names it in a note)."""
    from types import SimpleNamespace

    def store(source: str) -> Any:
        return SimpleNamespace(source=source, ref=SimpleNamespace(folder=tmp_path))

    assert cda.parse_file(store("judged/abc123/parsed.jsonl")) == tmp_path / "judged" / "abc123" / "parsed.jsonl"
    assert cda.parse_file(store("parsed.jsonl")) == tmp_path / "parsed.jsonl"
    assert cda.parse_file(store("parsed.jsonl + 3 newer answer(s) scored in memory")) == tmp_path / "parsed.jsonl"
    assert cda.parse_file(store("re-scored in memory")) is None
    assert cda.source_suffix("parsed") == "" and cda.source_suffix("llm-parsed_gemma-4-31b-limit100") == \
        "_llm-parsed-gemma-4-31b-limit100"
