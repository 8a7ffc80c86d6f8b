"""Setting up the running interpreter's environment for a record (the entry points' Method 2 path).

Checks the record's frozen requirements against what is installed; installs what is missing with uv (or pip).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from medvision_bm.errors import UserError
from medvision_bm.models.registry import ModelRecord

_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*==\s*([^\s;\\]+)")


def repo_root() -> Path | None:
    """The checkout this package runs from, when it runs from one (editable installs, tests)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "requirements").is_dir():
            return parent
    return None


def requirements_file(record: ModelRecord, root: Path | None = None) -> Path:
    root = root or repo_root()
    if root is None:
        raise UserError(f"cannot find requirements/ for {record.env.name}: run from a checkout of medvision_bm "
                        "or pass --skip_env_setup")
    path = root / record.env.requirements
    if not path.is_file():
        raise UserError(f"requirements file {path} is missing for {record.env.name}; "
                        f"create it with `medvision-bm envs lock --model {record.name}`")
    return path


def unmet_pins(path: Path) -> list[str]:
    """Pins (name==version) of a requirements file that the running environment does not satisfy."""
    unmet = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _PIN.match(line)
        if not m or "sys_platform" in line:
            continue
        name, version = m[1], m[2]
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{name}=={version}")
            continue
        if have.split("+")[0] != version.split("+")[0]:
            unmet.append(f"{name}=={version} (have {have})")
    return unmet


def setup_current_environment(record: ModelRecord, root: Path | None = None) -> list[str]:
    """Install the record's frozen requirements into this interpreter when any pin is unmet; returns what was unmet."""
    path = requirements_file(record, root)
    unmet = unmet_pins(path)
    if not unmet:
        return []
    print(f"setting up {record.env.name}: {len(unmet)} pinned packages missing or different "
          f"(e.g. {unmet[0]})", file=sys.stderr)
    uv = shutil.which("uv")
    cmd = ([uv, "pip", "install", "--python", sys.executable, "-r", str(path)] if uv
           else [sys.executable, "-m", "pip", "install", "-r", str(path)])
    res = subprocess.run(cmd)
    if res.returncode != 0:
        raise UserError(f"installing {path} into {sys.prefix} failed (exit {res.returncode}); "
                        "see the installer output above")
    return unmet
