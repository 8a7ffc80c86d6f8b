"""Setting up the running interpreter's environment for a record (the entry points' Method 2 path).

Compares the family's frozen requirements with what is installed and installs what differs, exactly as
locked (``--no-deps``, hashes checked; CPU families take torch from the configured CPU source). In an
environment the launchers manage (it has a completion marker) the install holds the env's build lock, and the
marker then records the lock it now matches; running a model in another family's managed env is refused.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

from medvision_bm.envs.core import (
    EnvPaths,
    build_lock,
    find_checkout,
    inputs_hash,
    install_lock,
    lock_hash,
    read_marker,
    requirements_path,
    torch_source,
    write_marker,
)
from medvision_bm.envs.info import installed_versions
from medvision_bm.errors import UserError
from medvision_bm.models.registry import ModelRecord

_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*==\s*([^\s;\\]+)\s*(;[^\\#]*)?")


def repo_root() -> Path | None:
    """The checkout this package runs from or is pointed at (BENCHMARK_DIR, the package's own, cwd), if any."""
    try:
        return find_checkout()
    except UserError:
        return None


def requirements_file(record: ModelRecord, root: Path | None = None) -> Path:
    if root is None:
        try:
            root = find_checkout()
        except UserError:
            raise UserError(f"cannot find requirements/ for {record.env.name}: run from a checkout of medvision_bm, "
                            "set BENCHMARK_DIR to one, or pass --skip_env_setup") from None
    return requirements_path(record.env, root)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def unmet_pins(path: Path) -> list[str]:
    """Pins (name==version) of a requirements file that the running environment does not satisfy.

    Lines with environment markers are skipped (the locks are compiled for one platform, so uv leaves few).
    A local version label is compared too: torch 2.13.0 does not satisfy a 2.13.0+cpu pin.
    """
    installed = {_normalize(d.metadata["Name"] or ""): d.version for d in metadata.distributions()}
    unmet = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _PIN.match(line)
        if not m or m[3]:
            continue
        name, version = m[1], m[2]
        have = installed.get(_normalize(name))
        if have is None:
            unmet.append(f"{name}=={version}")
        elif have != version:
            unmet.append(f"{name}=={version} (have {have})")
    return unmet


def _managed_paths(record: ModelRecord) -> EnvPaths | None:
    """The running interpreter's env when the launchers built it (marker in sys.prefix); refuses a foreign one."""
    marker = read_marker(Path(sys.prefix))
    if marker is None:
        return None
    if marker.get("name") != record.env.name:
        raise UserError(f"this interpreter is environment {marker.get('name')} ({sys.prefix}), but {record.name} runs "
                        f"in {record.env.name}; use its launcher or `medvision-bm envs build --model {record.name}`, "
                        "or pass --skip_env_setup")
    return EnvPaths(record.env, Path(sys.prefix).parent)


def setup_current_environment(record: ModelRecord, root: Path | None = None) -> list[str]:
    """Install the record's frozen requirements into this interpreter when any pin is unmet; returns what was unmet."""
    path = requirements_file(record, root)
    managed = _managed_paths(record)
    unmet = unmet_pins(path)
    if unmet:
        print(f"setting up {record.env.name}: {len(unmet)} pinned packages missing or different "
              f"(e.g. {unmet[0]})", file=sys.stderr, flush=True)
        if managed is None:
            install_lock(Path(sys.executable), path, torch_source(record.env))
        else:
            with build_lock(managed, os.environ):
                if unmet_pins(path):  # another job may have installed them while this one waited
                    install_lock(Path(sys.executable), path, torch_source(record.env))
    if managed is not None:
        _record_lock(managed, record, path)
    return unmet


def _record_lock(paths: EnvPaths, record: ModelRecord, path: Path) -> None:
    """After a Method 2 setup the env matches the lock: say so in its marker (current_env_info reads it)."""
    marker = read_marker(paths.prefix) or {}
    sha = lock_hash(path)
    want = inputs_hash(record.env, sha, str(marker.get("tool") or "uv"))
    if marker.get("inputs_hash") == want:
        return
    marker.update({"lock_hash": sha, "inputs_hash": want, "lock_file": record.env.requirements,
                   "versions": installed_versions()})
    marker.pop("schema", None)
    try:
        write_marker(paths.prefix, marker)
    except OSError as exc:
        print(f"note: could not update {paths.marker} ({exc.strerror})", file=sys.stderr)
