"""The summary's stages side by side (report.lanes): the same files whatever the number of lanes, results in the
order asked, the costliest stage started first, and an error or interrupt that leaves at once (no stage started
after it, none waited for)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from medvision_bm.report import lanes as lanes_mod
from medvision_bm.report.lanes import Lanes, results

_STAMP = re.compile(rb'("generated_at": "|generated: )[0-9T:+-]+')


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by its relative path, the generation time blanked."""
    return {p.relative_to(root).as_posix(): _STAMP.sub(rb"\1X", p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_summary_writes_the_same_bytes_on_one_lane_and_on_three(phantom_results: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from medvision_bm.report import summarize as summarize_mod
    from medvision_bm.report.summarize import SummaryOptions, summarize

    threads: dict[str, set[str]] = {}
    real = summarize_mod.family_tables

    def spy(family: str, *args: object, **kwargs: object) -> object:
        threads.setdefault(family, set()).add(threading.current_thread().name)
        return real(family, *args, **kwargs)

    monkeypatch.setattr(summarize_mod, "family_tables", spy)
    written = {}
    for n in (1, 3):
        monkeypatch.setattr(lanes_mod, "lane_count", lambda n=n: n)
        out = tmp_path / f"lanes{n}"
        summarize(phantom_results, out, SummaryOptions(plots=False, n_boot=200))
        written[n] = _files(out)
    assert len(threads) == 3 and all(t.startswith("summary-lane") for names in threads.values() for t in names)
    assert len({t for names in threads.values() for t in names}) > 1  # three lanes did run side by side
    assert written[1].keys() == written[3].keys() and len(written[1]) > 20
    assert [p for p in written[1] if written[1][p] != written[3][p]] == []


def test_results_come_in_the_order_asked_and_the_costliest_starts_first() -> None:
    started: list[str] = []

    def stage(k: str) -> str:
        started.append(k)
        return k.upper()

    with Lanes(1) as lanes:
        futures = lanes.start_each(stage, ["a", "b", "c"],
                                   cost={"a": 1.0, "b": 5.0, "c": 3.0})
        assert list(results(futures).items()) == [("a", "A"), ("b", "B"), ("c", "C")]
    assert started == ["b", "c", "a"]


def test_the_first_error_in_the_order_asked_is_raised() -> None:
    def stage(k: str) -> str:
        if k != "a":
            raise ValueError(f"stage {k} failed")
        return k

    with Lanes(2) as lanes, pytest.raises(ValueError, match="stage b failed"):
        results(lanes.start_each(stage, ["a", "b", "c"], cost={"c": 9.0}))


def test_an_error_leaves_at_once_cancelling_the_stages_not_begun() -> None:
    """An error (or Ctrl-C) in the summary leaves the block without waiting for the running stage (it writes
    nothing; its thread is a daemon) and the stages not begun never start."""
    ran: list[str] = []
    release = threading.Event()

    def stage(k: str) -> str:
        ran.append(k)
        if k == "first":
            release.wait(30)
        return k

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), Lanes(1) as lanes:
        futures = lanes.start_each(stage, ["first", "second", "third"])
        while not ran:
            time.sleep(0.001)
        raise KeyboardInterrupt
    assert time.monotonic() - t0 < 10  # not the 30 s the running stage would take
    assert futures["second"].cancelled() and futures["third"].cancelled()
    assert not futures["first"].done()  # still running, abandoned
    release.set()
    futures["first"].result(timeout=10)
    time.sleep(0.05)
    assert ran == ["first"]  # the lane went on to no cancelled stage


def test_an_interrupt_reaches_a_summary_waiting_on_its_lanes(phantom_results: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (a real SIGINT) while the summary waits on a family's tables: ``summarize`` raises it at once, however
    long the running family would take."""
    from medvision_bm.report import summarize as summarize_mod
    from medvision_bm.report.summarize import SummaryOptions, summarize

    release = threading.Event()
    started = threading.Event()

    def slow(*args: object, **kwargs: object) -> object:
        started.set()
        release.wait(20)
        raise RuntimeError("a family abandoned by an interrupt")

    def press_ctrl_c() -> None:
        if started.wait(60):
            time.sleep(0.3)  # the summary is waiting on the lanes by now
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(summarize_mod, "family_tables", slow)
    threading.Thread(target=press_ctrl_c, daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            summarize(phantom_results, tmp_path / "out", SummaryOptions(plots=False, n_boot=100))
        assert time.monotonic() - t0 < 10  # not the 20 s the family would take
    finally:
        release.set()


def test_lanes_never_exceed_the_cores_nor_the_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lanes_mod.os, "sched_getaffinity", lambda _pid: set(range(64)))
    assert lanes_mod.lane_count() == lanes_mod.MAX_LANES
    monkeypatch.setattr(lanes_mod.os, "sched_getaffinity", lambda _pid: {0})
    assert lanes_mod.lane_count() == 1
