"""Counting whole plans for `data tasks` and `data check`: one pass per plan, plans in parallel, a cache
keyed by the plan file's identity.

The counts are held against upstream's loader rules restated plainly in ``upstream_fixtures.reference_rows`` (the
single-instance filters of YongchengYAO/MedVision ``skills/medvision/sub-skills/dataset-and-tasks/references/
concepts.md`` @39dd6bf and the loader quotes of its README), not against our own index.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import medvision_bm.data.plan_counts as counts_mod
import medvision_bm.data.plan_files as plan_files_mod
import medvision_bm.data.plans as plans_mod
from medvision_bm.data.check import check
from medvision_bm.data.plans import PlanError
from medvision_bm.errors import UserError
from upstream_fixtures import (
    bbox,
    case,
    det_entry,
    det_item,
    garble_keeping_size_and_mtime,
    open_data,
    plan,
    random_plan,
    reference_rows,
    reorder,
    task,
    write_plan,
)

TOKEN = {"detect": ("detection", "BoxCoordinate"), "TL": ("biometry", "TumorLesionSize"),
         "AD": ("biometry", "BiometricsFromLandmarks")}
PLANES = ("Sagittal", "Coronal", "Axial")


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch):
    """Caches go under each test's own data folder; plans are counted in this process unless a test says."""
    monkeypatch.delenv("MEDVISION_CACHE_DIR", raising=False)
    monkeypatch.setenv(counts_mod.WORKERS_ENV, "1")


def _names(family: str, n_tasks: int = 2):
    for pos in range(n_tasks):
        for split in ("train", "test"):
            for dim, plane in enumerate(PLANES):
                for measure in ((None, "Distance", "Angle") if family == "AD" else (None,)):
                    name = (f"Rand_{TOKEN[family][1]}{'_' + measure if measure else ''}_Task{pos + 1:02d}_{plane}_"
                            f"{split.capitalize()}")
                    yield name, pos, split, dim, measure


def _count_reads(monkeypatch) -> list[Path]:
    calls: list[Path] = []
    real = counts_mod.count_plan

    def spy(plan, splits):
        calls.append(plan.path)
        return real(plan, splits)

    monkeypatch.setattr(counts_mod, "count_plan", spy)
    return calls


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counts_are_the_loaders_counts(tmp_path, family, seed):
    """Every config (task, split, plane, metric type, filter switch) of a random plan: samples after the filters and
    candidates before them, as the loader's rules give them, from one read of the plan."""
    p = random_plan(family, seed, versioned_tl=seed != 2)
    if seed == 3:  # keys not in upstream's writing order: the full parser counts
        p = dict(p, tasks=[reorder(t, ["test_cases_number", "test_cases"], ["task_ID"]) for t in p["tasks"]])
    write_plan(tmp_path, "Rand", TOKEN[family][0], "1.0.0", p)
    root = tmp_path.resolve()
    for filtering in (True, False):
        data = open_data(tmp_path, filtering=None if filtering else "true")
        names = list(_names(family))
        counted = data.counts([n for n, *_ in names])
        for name, pos, split, dim, measure in names:
            got = counted[name]
            assert not isinstance(got, UserError), got
            want = len(reference_rows(root, "Rand", p, pos, split, family, dim, measure, filtering))
            candidates = len(reference_rows(root, "Rand", p, pos, split, family, dim, measure, False))
            assert (got.samples, got.candidates) == (want, candidates), name
    want = {}
    for name, pos, split, dim, measure in _names(family):  # `data tasks`: test configs with samples, no suffix
        n = len(reference_rows(root, "Rand", p, pos, split, family, dim, measure, True))
        if split == "test" and (family == "AD") == (measure is not None) and n:
            want[name.removesuffix("_Test")] = n
    assert open_data(tmp_path).tasks() == want and want


@pytest.mark.parametrize("family", ["detect", "TL", "AD"])
def test_the_lazy_parser_counts_what_the_plain_reader_counts(tmp_path, monkeypatch, family):
    """Cases read lazily (pysimdjson, where installed) and cases parsed whole give the loader's counts; a case the
    lazy parser refuses (NaN, which Python's json, upstream's reader, accepts) has the plan counted again by the
    plain reader."""
    pytest.importorskip("simdjson")
    root = tmp_path.resolve()
    reads: list[bool] = []
    real = counts_mod._count_plan
    monkeypatch.setattr(counts_mod, "_count_plan", lambda *a: reads.append(a[2] is not None) or real(*a))
    request = frozenset({(None, "test"), (None, "train")})
    for nan in (False, True):
        p = random_plan(family, 21, n_test=5)
        if nan:
            entry = next(e for c in p["tasks"][1]["test_cases"] for a in "xyz" for e in c[f"slice_profiles_{a}"])
            item = entry["slice_profile"][0]
            if family == "detect":
                item["bboxes"][0]["sizes"][0] = float("nan")
            else:
                (item[0] if family == "TL" else item)["metric_value"] = float("nan")
        write_plan(tmp_path, "Rand", TOKEN[family][0], "1.0.0", p)
        plan = open_data(tmp_path).plan_for("Rand", TOKEN[family][0])
        reads.clear()
        lazy = counts_mod.count_plan(plan, request)
        assert reads == ([True, False] if nan else [True])
        with monkeypatch.context() as m:
            m.setattr(counts_mod, "_lazy_parser", lambda: None)
            plain = counts_mod.count_plan(plan, request)
        assert plain.counts == lazy.counts and plain.headers == lazy.headers
        for _, pos, split, dim, measure in _names(family):
            got = lazy.counts[(pos, split)].samples(dim, True, measure.lower() if measure else None)
            assert got == len(reference_rows(root, "Rand", p, pos, split, family, dim, measure, True))


def test_one_read_per_plan_and_none_when_cached(tmp_path, monkeypatch):
    write_plan(tmp_path, "Rand", "detection", "1.0.0", random_plan("detect", 4, n_tasks=3))
    calls = _count_reads(monkeypatch)
    events = []
    real_events = plans_mod.plan_events
    monkeypatch.setattr(counts_mod, "plan_events", lambda *a, **k: events.append(a) or real_events(*a, **k))
    first = open_data(tmp_path).tasks()
    assert {n.split("_")[2] for n in first} == {"Task01", "Task02", "Task03"}
    assert len(calls) == 1 and len(events) == 1  # three tasks, one pass
    assert open_data(tmp_path).tasks() == first and len(calls) == 1  # cached: the plan is not read
    files = list((tmp_path / ".cache/medvision_bm/plan-counts").iterdir())
    assert len(files) == 1 and not [f for f in files[0].parent.iterdir() if f.name.startswith(".")]
    stored = json.loads(files[0].read_text())
    assert stored["identity"] == plan_files_mod.plan_identity(tmp_path / "Datasets/Rand/benchmark_plan_detection_v1.0.0.json.gz")
    # a check of the train split counts the plan again (the cache holds the test split only), then holds both
    assert not isinstance(open_data(tmp_path).counts(["Rand_BoxCoordinate_Task02_Axial_Train"])[
        "Rand_BoxCoordinate_Task02_Axial_Train"], UserError)
    assert len(calls) == 2
    open_data(tmp_path).counts(["Rand_BoxCoordinate_Task02_Axial_Train", "Rand_BoxCoordinate_Task01_Axial"])
    assert open_data(tmp_path).tasks() == first and len(calls) == 2


def test_a_check_reads_no_further_than_its_last_task(tmp_path, monkeypatch):
    """A check of the first task of a three-task plan stops reading the plan after that task's test cases; a later
    listing of every task reads it whole, once, keeping what the check counted."""
    write_plan(tmp_path, "Rand", "detection", "1.0.0", random_plan("detect", 12, n_tasks=3))
    seen: list[tuple] = []
    real_events = plans_mod.plan_events

    def spy(*args, **kwargs):
        for ev in real_events(*args, **kwargs):
            seen.append(ev[:2])
            yield ev

    monkeypatch.setattr(counts_mod, "plan_events", spy)
    got = open_data(tmp_path).counts(["Rand_BoxCoordinate_Task01_Axial"])["Rand_BoxCoordinate_Task01_Axial"]
    assert not isinstance(got, UserError)
    assert {pos for _, pos in seen} == {0}  # tasks 2 and 3 were never reached
    calls = _count_reads(monkeypatch)
    listing = open_data(tmp_path).tasks()
    assert len(calls) == 1 and listing.get("Rand_BoxCoordinate_Task01_Axial", 0) == got.samples
    assert open_data(tmp_path).counts(["Rand_BoxCoordinate_Task01_Axial", "Rand_BoxCoordinate_Task03_Axial"]) and \
        len(calls) == 1


def test_a_changed_plan_is_never_served_from_the_cache(tmp_path, monkeypatch):
    path = write_plan(tmp_path, "Rand", "detection", "1.0.0", random_plan("detect", 5))
    calls = _count_reads(monkeypatch)
    before = open_data(tmp_path).tasks()
    # other content of the same size and the same modification time: the change time and the gzip trailer differ
    garble_keeping_size_and_mtime(path)
    with pytest.raises(PlanError, match="is not a gzip file"):
        open_data(tmp_path).tasks()
    big = bbox((0, 0), (12, 12))
    write_plan(tmp_path, "Rand", "detection", "1.0.0", plan("Rand", [task("detection", [], [case("c1", z=[
        det_entry(1, det_item(1, big)), det_entry(2, det_item(1, big))])])]))
    after = open_data(tmp_path).tasks()
    assert after == {"Rand_BoxCoordinate_Task01_Axial": 2} != before and len(calls) == 3


@pytest.mark.parametrize("damage", ["junk", "identity", "format"])
def test_a_damaged_or_foreign_cache_file_is_counted_again(tmp_path, monkeypatch, damage):
    write_plan(tmp_path, "Rand", "biometry", "1.0.0", random_plan("TL", 6))
    calls = _count_reads(monkeypatch)
    before = open_data(tmp_path).tasks()
    cached, = (tmp_path / ".cache/medvision_bm/plan-counts").iterdir()
    data = json.loads(cached.read_text())
    if damage == "junk":
        cached.write_text('{"format": 1, "identity"')
    elif damage == "identity":
        data["identity"]["size"] += 1
        data["counts"] = {k: {**v, "single": [0, 0, 0]} for k, v in data["counts"].items()}
        cached.write_text(json.dumps(data))
    else:
        data["format"] = 0
        cached.write_text(json.dumps(data))
    assert open_data(tmp_path).tasks() == before and len(calls) == 2


def test_check_reads_only_the_plans_its_list_names(tmp_path, monkeypatch):
    write_plan(tmp_path, "Rand", "detection", "1.0.0", random_plan("detect", 7))
    other = write_plan(tmp_path, "Other", "detection", "1.0.0", random_plan("detect", 8))
    calls = _count_reads(monkeypatch)
    rows = check(open_data(tmp_path), {"Rand_BoxCoordinate_Task01_Axial": 3, "Rand_BoxCoordinate_Task02_Axial_Train": 1,
                                       "Rand_BoxCoordinate_Task03_Axial": None, "Nope_BoxCoordinate_Task01_Axial": 1})
    assert len(calls) == 1 and calls[0].name == "benchmark_plan_detection_v1.0.0.json.gz" and other not in calls
    assert calls[0].parent.name == "Rand"
    counted = open_data(tmp_path).counts(["Rand_BoxCoordinate_Task01_Axial", "Rand_BoxCoordinate_Task02_Axial_Train"])
    assert [(r.status, r.samples) for r in rows[:2]] == [("ok" if c.samples else "empty", c.samples)
                                                        for c in counted.values()]
    assert rows[2].status == "error" and "has 2 task(s), no Task03" in rows[2].reason
    assert rows[3].status == "missing" and "Nope" in rows[3].reason


def test_plans_counted_in_worker_processes_give_the_same_counts(tmp_path, monkeypatch):
    for i, family in enumerate(("detect", "TL", "AD")):
        write_plan(tmp_path, f"Rand{i}", TOKEN[family][0], "1.0.0", random_plan(family, 9 + i))
    alone = open_data(tmp_path).tasks()
    for folder in (tmp_path / ".cache/medvision_bm/plan-counts",):
        for f in folder.iterdir():
            f.unlink()
    monkeypatch.setenv(counts_mod.WORKERS_ENV, "2")
    monkeypatch.setattr(counts_mod, "PARALLEL_MIN_BYTES", 0)  # small plans: in workers all the same
    assert open_data(tmp_path).tasks() == alone and len(alone) > 6
    assert len(list((tmp_path / ".cache/medvision_bm/plan-counts").iterdir())) == 3  # each worker cached its plan


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_worker_count_is_a_one_line_error(tmp_path, monkeypatch, value):
    write_plan(tmp_path, "Rand", "detection", "1.0.0", random_plan("detect", 1))
    write_plan(tmp_path, "Rand2", "detection", "1.0.0", random_plan("detect", 2))
    monkeypatch.setenv(counts_mod.WORKERS_ENV, value)
    with pytest.raises(UserError, match=rf"^{counts_mod.WORKERS_ENV}={value!r} is not a positive integer"):
        open_data(tmp_path).tasks()
