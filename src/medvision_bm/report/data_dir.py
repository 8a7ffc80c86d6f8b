"""Which data folder the runs used: --data_dir, else the absolute folder a run recorded, else MedVision_DATA_DIR
(the sample browser renders slices from it; upstream's T/L removed-samples lists are read from its Datasets/).

A run records the absolute data folder it read and its working directory in results.json (``data_dir``, ``cwd``),
so a summary finds the same folder wherever it is typed. A store written before those fields has only its argv: a
relative ``--data_dir`` there is taken relative to the recorded working directory when there is one, else relative
to the folders above the store (a results folder usually sits beside the data folder it was run on), else relative
to the folder the command is typed in."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Iterator
from pathlib import Path

from medvision_bm.data.planner import ENV_DATA_DIR
from medvision_bm.errors import UserError
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import ResultsRecord


def _typed_data_dir(argv: object) -> str | None:
    """The ``--data_dir`` value of a recorded argv (a list or one shell string), or None."""
    words = shlex.split(argv) if isinstance(argv, str) else [str(a) for a in argv] if isinstance(argv, list) else []
    for i, arg in enumerate(words):
        if arg == "--data_dir" and i + 1 < len(words):
            return words[i + 1]
        if arg.startswith("--data_dir="):
            return arg.split("=", 1)[1]
    return None


def _is_data_dir(path: Path) -> bool:
    return (path / "Datasets").is_dir()


#: A store's folder, or its folder with the results.json record already read (None: it has none).
StoreFolder = Path | tuple[Path, ResultsRecord | None]


def _recorded(store: StoreFolder) -> Iterator[Path]:
    """Where the run of the store read its data, best first: the absolute folder it recorded, else its typed
    ``--data_dir`` placed as the module docstring says."""
    folder, results = store if isinstance(store, tuple) else (store, ResultsRecord.read(StoreLayout(store).results()))
    if results is None:
        return
    if results.data_dir:
        yield Path(results.data_dir)
        return
    typed = _typed_data_dir(results.argv)
    if not typed:
        return
    path = Path(typed).expanduser()
    if path.is_absolute():
        yield path
        return
    if results.cwd:
        yield Path(results.cwd) / path
        return
    for above in folder.resolve().parents:  # a store written before the run recorded where it stood
        yield above / path
    yield path.resolve()


def recorded_data_dir(folders: Iterable[StoreFolder]) -> Path | None:
    """The data folder the first store of ``folders`` that recorded a usable one read (absolute), or None
    (a folder given with its results.json record is not read again)."""
    for folder in folders:
        for candidate in _recorded(folder):
            if _is_data_dir(candidate):
                return Path(os.path.abspath(candidate))
    return None


def resolve_data_dir(option: str | None, folders: Iterable[StoreFolder]) -> tuple[Path | None, str]:
    """--data_dir, else the data folder a run recorded (``folders``: the stores' folders), else MedVision_DATA_DIR;
    the folder (None when none is known) and a note saying where it came from."""
    if option:
        path = Path(option).expanduser()
        if not _is_data_dir(path):
            raise UserError(f"--data_dir {option} has no Datasets/ folder; point it at the data folder the runs used")
        path = Path(os.path.abspath(path))
        return path, f"slices rendered from {path} (--data_dir)"
    recorded = recorded_data_dir(folders)
    if recorded is not None:
        return recorded, f"slices rendered from {recorded} (the data folder the run recorded)"
    env = os.environ.get(ENV_DATA_DIR, "").strip()
    if env and _is_data_dir(Path(env).expanduser()):
        path = Path(os.path.abspath(Path(env).expanduser()))
        return path, f"slices rendered from {path} ({ENV_DATA_DIR})"
    return None, ("slices not rendered: no data folder known (pass --data_dir DIR or set "
                  f"{ENV_DATA_DIR} to the folder the runs used)")
