"""Helpers shared by tests in every folder (importable as `mvtest_support` through pytest's pythonpath)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from medvision_bm.data.phantom import LAUNCHER_PIN

REPO = Path(__file__).resolve().parents[1]
#: The dataset contract of the tests (and of every CLI call unless it passes its own; an empty value unsets one):
#: the annotation pin the bundled phantom task lists are counted at, as the launchers export it.
TEST_CONTRACT_ENV: dict[str, str] = dict(LAUNCHER_PIN)


def phantom_list(folder: Path, family: str) -> dict[str, int]:
    """The phantom tasks list of ``family`` in ``folder`` (the ``phantom_lists`` fixture, or REPO/tasks_list)."""
    return json.loads((folder / f"tasks_MedVision-Phantom-{family}.json").read_text())


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `medvision-bm ...` in a fresh interpreter, as a user would (annotation pin: TEST_CONTRACT_ENV unless
    ``env`` sets one; an empty value leaves the variable unset)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    full_env.update(TEST_CONTRACT_ENV)
    full_env.update(env or {})
    full_env = {k: v for k, v in full_env.items() if not (k.startswith("MedVision_") and v == "")}
    return subprocess.run([sys.executable, "-m", "medvision_bm.cli", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or REPO, timeout=timeout)


#: What the CLI's light paths (parse, summarize, judge) must never import: the model stacks and the runner's loop.
HEAVY_PACKAGES = ("torch", "transformers", "lmms_eval", "vllm", "datasets")


def heavy_imports(setup: str, also: tuple[str, ...] = ()) -> list[str]:
    """Run ``setup`` (Python source) in a fresh interpreter; the heavy packages (``HEAVY_PACKAGES`` + ``also``) and
    ``medvision_bm.runner.loop`` it left imported (an AssertionError with the child's stderr if ``setup`` fails)."""
    code = (setup + "\nimport sys\n"
            f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY_PACKAGES + also)!r})\n"
            "heavy += [m for m in ('medvision_bm.runner.loop',) if m in sys.modules]\n"
            "print(','.join(heavy))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    return [m for m in (lines[-1] if lines else "").split(",") if m]


def uv_venv(folder: Path) -> tuple[str, Path]:
    """A new empty venv at ``folder`` for this interpreter's Python version, made by uv (the test is skipped where uv
    is not on PATH); returns (uv's path, the venv)."""
    import shutil

    import pytest

    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    subprocess.run([uv, "venv", "--quiet", "--python", f"{sys.version_info.major}.{sys.version_info.minor}",
                    str(folder)], check=True)
    return uv, folder


def plant_non_regular(path: Path, kind: str) -> None:
    """A FIFO (``kind == "fifo"``) or a link to ``/dev/zero`` (``"device"``) where a reader expects a file."""
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


def user_error_of(read: Callable[[], object], seconds: float = 20) -> BaseException | None:
    """The UserError ``read()`` raises, read in a thread so that a reader that hangs (a FIFO) fails the test instead
    of blocking it; None when it returned."""
    from medvision_bm.errors import UserError

    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            read()
        except UserError as exc:
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "still reading"
    return box.get("error")
