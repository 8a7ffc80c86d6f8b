"""Every file a reader may open is written whole or not at all, and what killed writers leave is cleaned up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from medvision_bm import io as mio
from mvtest_support import REPO


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("writer", ["json", "text", "lines", "chmod"])
def test_a_crash_mid_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch, writer):
    target = tmp_path / "results.json"
    target.write_text('{"old": true}\n')

    def half_then_crash(*args, **kwargs):
        raise OSError(28, "No space left on device")

    if writer == "json":
        real_open = open

        class HalfWritten:
            """A file the disk fills up under: half of the first write lands, then ENOSPC."""

            def __init__(self, fh):
                self.fh = fh

            def write(self, text):
                self.fh.write(text[: len(text) // 2])
                self.fh.flush()
                half_then_crash()

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.fh.close()

        def half_open(path, mode="r", *args, **kwargs):
            fh = real_open(path, mode, *args, **kwargs)
            return HalfWritten(fh) if "w" in mode else fh

        monkeypatch.setattr(mio, "open", half_open, raising=False)  # the module's open, not the builtin
        call = lambda: mio.write_json_atomic(target, {"new": 1})  # noqa: E731
    elif writer == "text":
        monkeypatch.setattr(mio.os, "replace", half_then_crash)
        call = lambda: mio.write_text_atomic(target, "new text")  # noqa: E731
    elif writer == "chmod":  # the temp file is whole but cannot be given its mode
        monkeypatch.setattr(mio.os, "chmod", half_then_crash)
        call = lambda: mio.write_text_atomic(target, "new text")  # noqa: E731
    else:
        def lines():
            yield "line 1\n"
            half_then_crash()

        call = lambda: mio.write_lines_atomic(target, lines())  # noqa: E731
    with pytest.raises(OSError):
        call()
    assert target.read_text() == '{"old": true}\n'
    assert temps(tmp_path) == []


_KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from medvision_bm.io import write_lines_atomic

    def lines():
        for i in range(10 ** 9):
            yield "x" * 1000 + "\\n"
            if i == 100:
                print("writing", flush=True)
                time.sleep(600)

    write_lines_atomic(sys.argv[1], lines())
""")


def test_a_killed_write_leaves_the_old_file_and_its_temp_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "parsed.jsonl"
    target.write_text("old\n")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert target.read_text() == "old\n", "a reader never sees a partial file"
    left = temps(tmp_path)
    assert len(left) == 1 and left[0].startswith(".parsed.jsonl.") and f".{proc.pid}." in left[0]
    # a live writer's temp file (another process of this host) is never touched
    live = tmp_path / f".parsed.jsonl.{mio._HOST}.{os.getppid()}.abc123{mio.TMP_SUFFIX}"
    live.write_text("in progress")
    mio.write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert temps(tmp_path) == [live.name]


def test_a_store_folder_is_cleaned_of_a_killed_runs_temps_when_a_run_opens_it(tmp_path):
    from medvision_bm.store.samples import SampleStore

    store = SampleStore(tmp_path / "store", "sig")
    store.init({"x": 1})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    for name in ("docs.jsonl", "results.json", "parsed.jsonl"):
        (store.folder / f".{name}.{mio._HOST}.{pid}.q1w2e3{mio.TMP_SUFFIX}").write_text("partial")
    (store.folder / "lmms_eval").mkdir()
    (store.folder / "lmms_eval" / f".samples_1.jsonl.{mio._HOST}.{pid}.zz{mio.TMP_SUFFIX}").write_text("partial")
    (store.folder / ".user-file.tmp").write_text("not ours: no host and pid")
    SampleStore(store.folder, "sig").init({"x": 1})
    assert temps(store.folder) == [".user-file.tmp"]
    assert temps(store.folder / "lmms_eval") == []


def test_a_plot_that_fails_mid_save_leaves_no_partial_png(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from medvision_bm.report import plots

    png = tmp_path / "plot.png"
    real = Figure.savefig

    def crash(self, fname, **kw):
        real(self, fname, **kw)
        with open(fname, "r+b") as fh:  # a kill mid-write: half the bytes on disk
            fh.truncate(100)
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", crash)
    job = plots.PlotJob("box_size", str(png), "t", {"series": [{"label": "a", "x": [0.1, 0.2], "iou": [0.5, 0.6]}],
                                                      "random": {"x": [0.1, 0.2], "iou": [0.1, 0.2]}})
    with pytest.raises(KeyboardInterrupt):
        plots.draw_box_size(job)
    assert not png.exists() and temps(tmp_path) == []
    monkeypatch.setattr(Figure, "savefig", real)
    plots.draw_box_size(job)
    assert png.read_bytes().startswith(b"\x89PNG") and temps(tmp_path) == []


# writers of files a reader may open: each must go through medvision_bm.io's atomic writers
_DIRECT = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*[\"'][wa]b?[\"']|\.savefig\(|\.save\(|np\.save\(")
_ALLOWED = {
    "io.py": "the atomic writers themselves",
    "runner/harness.py": "lmms-eval task files in the run's private temp folder",
    "runner/lmms_process.py": "the pipe to lmms-eval's process",
    "runner/lmms_worker.py": "the pipe to the run, and lmms-eval's log of a part in the run's private temp folder",
    "data/samples.py": "the sample index, built in a temp folder renamed into place",
    "data/phantom.py": "the phantom's gzip volumes, written to a temp name and renamed",
    "models/tiny.py": "a test model written by the developer tool",
    "models/api/images.py": "images encoded into memory buffers",
    "envs/lock.py": "lock files compiled in a temp folder, then replaced",
    "benchmark/install_vendored_lmms_eval.py": "an installer writing into a package folder",
    "report/plots.py": "savefig on the temp path of atomic_path",
    "report/browser.py": "Image.save on the temp path of atomic_path",
    "cluster/local.py": "a job's log, appended as the job runs (readers expect a growing log)",
    "models/api/serve.py": "a served model's log, appended as the server runs",
    "envs/redact_tee.py": "a launcher's log, appended (redacted) as the job runs",
    "envs/vllm_contract.py": "the contract environment's requirements in a private temp folder",
}


def test_no_module_writes_a_reader_facing_file_directly():
    src = REPO / "src" / "medvision_bm"
    offenders = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel in _ALLOWED:
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if _DIRECT.search(line) and "atomic" not in line:
                offenders.append(f"{rel}:{lineno}: {line.strip()}")
    assert not offenders, "write these through medvision_bm.io:\n" + "\n".join(offenders)


def test_run_tmpdir_removes_a_killed_runs_folder_and_keeps_a_live_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(mio.tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    old = tmp_path / f"medvision-run-{mio._HOST}.{int(dead.stdout)}.abc"
    (old / "tasks").mkdir(parents=True)
    live = tmp_path / f"medvision-run-{mio._HOST}.{os.getppid()}.def"
    live.mkdir()
    t = mio.run_tmpdir("medvision-run-")
    try:
        assert not old.exists() and live.exists() and Path(t.name).is_dir()
    finally:
        t.cleanup()
