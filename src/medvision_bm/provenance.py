"""What a results file records about the environment it was produced in (lock hash, env name, versions)."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

from medvision_bm.jsontypes import JsonObject

MARKER_NAME = "medvision-env.json"
MARKER_SCHEMA = 1

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


def current_env_info(prefix: str | Path | None = None) -> JsonObject:
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


def read_marker(prefix: Path) -> JsonObject | None:
    """The completion marker of an environment, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads((prefix / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == MARKER_SCHEMA else None
