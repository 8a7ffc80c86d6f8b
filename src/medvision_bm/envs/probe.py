"""The check the builder runs with a new environment's interpreter: our entry code imports, key versions, and
which runtime dependencies of medvision-bm are missing. Prints one JSON object."""

from __future__ import annotations

import json
import platform
import re
from importlib import metadata

import medvision_bm.runner.args  # noqa: F401  (the check: the entry code imports in this env, or fails here, not in the first evaluation)
from medvision_bm.provenance import installed_versions


def probe() -> dict[str, object]:
    """What the builder checks in a fresh env: the entry points' code imports, key versions, and which runtime
    dependencies of medvision-bm are missing (the lock should cover them all)."""
    missing = []
    for req in metadata.requires("medvision-bm") or []:
        if "extra ==" in req:
            continue
        m = re.match(r"[A-Za-z0-9_.-]+", req)
        if m is None:
            raise ValueError(f"medvision-bm's metadata lists {req!r}, which does not start with a package name")
        name = m[0]
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return {"python": platform.python_version(), "versions": installed_versions(), "missing": missing}


if __name__ == "__main__":  # run by the builder with the new env's interpreter
    print(json.dumps(probe()))
