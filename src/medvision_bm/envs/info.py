"""What a results file records about the environment it was produced in (lock hash, env name, versions)."""

from __future__ import annotations

import json
import platform
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from medvision_bm.envs.core import read_marker

#: Packages whose installed versions identify an evaluation environment.
KEY_PACKAGES: tuple[str, ...] = ("lmms-eval", "transformers", "torch", "torchvision", "vllm", "accelerate", "openai",
                                 "anthropic", "google-genai", "numpy", "nibabel", "pillow", "filelock",
                                 "medvision-bm")


def installed_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def current_env_info(prefix: str | Path | None = None) -> dict[str, Any]:
    """The running environment as the builder recorded it: name, tool, lock file and hash, input and source hashes.

    Reads the completion marker in ``sys.prefix`` (or ``prefix``). An environment the launchers did not build
    has no marker: ``managed`` is False and the hashes are None (the versions the runner records still apply).
    """
    root = Path(prefix if prefix is not None else sys.prefix)
    marker = read_marker(root) or {}
    return {
        "managed": bool(marker),
        "name": marker.get("name"),
        "prefix": str(root),
        "tool": marker.get("tool"),
        "mode": marker.get("mode"),
        "lock_file": marker.get("lock_file"),
        "lock_hash": marker.get("lock_hash"),
        "inputs_hash": marker.get("inputs_hash"),
        "source_hash": marker.get("source_hash"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}",
        "built_at": marker.get("built_at"),
    }


def probe() -> dict[str, Any]:
    """What the builder checks in a fresh env: the entry points' code imports, key versions, and which runtime
    dependencies of medvision-bm are missing (the lock should cover them all)."""
    import medvision_bm.runner.args  # noqa: F401  (fails here, not in the first evaluation)

    missing = []
    for req in metadata.requires("medvision-bm") or []:
        if "extra ==" in req:
            continue
        name = re.match(r"[A-Za-z0-9_.-]+", req)[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return {"python": platform.python_version(), "versions": installed_versions(), "missing": missing}


if __name__ == "__main__":  # run by the builder with the new env's interpreter
    print(json.dumps(probe()))
