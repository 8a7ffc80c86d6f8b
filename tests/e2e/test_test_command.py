"""The test command (script/run_tests.sh) cleans up after itself: a passing run leaves no temp folder behind, a
failing one keeps its folder (marked) for a look until the next run removes it, and what the tests' programs put
in the temp folder lands inside the run's folder. Run here on a one-test selection written for the purpose."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mvtest_support import REPO

pytestmark = pytest.mark.slow

#: What a test writes into the temp folder: enough to tell "left behind" from "cleaned".
PROBE = '''
import os, tempfile

def test_writes_big_files(tmp_path):
    (tmp_path / "blob").write_bytes(os.urandom(1 << 20))
    with open(os.path.join(tempfile.gettempdir(), "scratch.bin"), "wb") as fh:
        fh.write(os.urandom(1 << 20))
    assert os.environ["TMPDIR"].startswith(os.environ["PROBE_ROOT"])
    assert {VERDICT}
'''


def _venv_of_this_checkout() -> Path:
    """The venv the suite runs in, when script/dev_env.sh would reuse it for this checkout (else the test would
    rebuild another checkout's environment)."""
    venv = Path(sys.prefix)
    want = hashlib.sha256((REPO / "pyproject.toml").read_bytes() + (REPO / "script" / "dev_env.sh").read_bytes())
    stamp = venv / ".medvision-dev-stamp"
    if not stamp.is_file() or stamp.read_text().strip() != want.hexdigest()[:16]:
        pytest.skip(f"{venv} is not this checkout's development environment (script/dev_env.sh would rebuild it)")
    return venv


def _run(tmp: Path, probe: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MedVision_", "SLURM_LOCAL"))}
    env.update({"TMPDIR": str(tmp), "PROBE_ROOT": str(tmp), "MEDVISION_DEV_VENV": str(_venv_of_this_checkout()),
                "MEDVISION_VLLM_CONTRACT": "0", "MEDVISION_SYSTEM_DEPS": "0"})
    return subprocess.run(["bash", str(REPO / "script" / "run_tests.sh"), str(probe)], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=900)


def _sizes(tmp: Path) -> dict[str, int]:
    return {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in tmp.iterdir()}


def test_a_passing_run_leaves_nothing_and_a_failing_one_is_kept_until_the_next(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    failing, passing = probe_dir / "test_fails.py", probe_dir / "test_passes.py"
    failing.write_text(PROBE.replace("{VERDICT}", "False"))
    passing.write_text(PROBE.replace("{VERDICT}", "True"))

    bad = _run(tmp, failing)
    assert bad.returncode == 1, bad.stdout[-2000:] + bad.stderr[-2000:]
    (kept,) = [p for p in tmp.iterdir() if p.name.startswith("medvision-tests.")]
    assert (kept / ".failed").is_file() and str(kept) in bad.stderr
    assert (kept / "tmp" / "scratch.bin").is_file()  # the tests' temp files went into the run's own folder

    good = _run(tmp, passing)
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    assert _sizes(tmp) == {}, "a passing run removes its folder and the failed run's before it"
