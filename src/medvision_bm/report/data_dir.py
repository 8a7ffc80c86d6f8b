"""Which data folder the runs used: --data_dir, else MedVision_DATA_DIR, else the --data_dir a run recorded (the
sample browser renders slices from it; upstream's T/L removed-samples lists are read from its Datasets/)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path

from medvision_bm.data.planner import ENV_DATA_DIR
from medvision_bm.errors import UserError
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import ResultsRecord


def resolve_data_dir(option: str | None, folders: Iterable[Path]) -> tuple[Path | None, str]:
    """--data_dir, else MedVision_DATA_DIR, else the --data_dir recorded in a run's results.json (``folders``: the
    stores' folders)."""
    candidates: list[tuple[str, str]] = []
    if option:
        candidates.append((option, "--data_dir"))
    elif os.environ.get(ENV_DATA_DIR, "").strip():
        candidates.append((os.environ[ENV_DATA_DIR].strip(), ENV_DATA_DIR))
    else:
        for folder in folders:
            results = ResultsRecord.read(StoreLayout(folder).results())
            if results is None:
                continue
            argv = results.argv or []
            argv = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv]
            for i, arg in enumerate(argv):
                if arg == "--data_dir" and i + 1 < len(argv):
                    candidates.append((argv[i + 1], "the run's --data_dir"))
                elif arg.startswith("--data_dir="):
                    candidates.append((arg.split("=", 1)[1], "the run's --data_dir"))
            if candidates:
                break
    for value, source in candidates:
        path = Path(value).expanduser()
        if (path / "Datasets").is_dir():
            return path, f"slices rendered from {path} ({source})"
        if option:
            raise UserError(f"--data_dir {value} has no Datasets/ folder; point it at the data folder the runs used")
    return None, ("slices not rendered: no data folder known (pass --data_dir DIR or set "
                  f"{ENV_DATA_DIR} to the folder the runs used)")
