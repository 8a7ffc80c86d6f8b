"""`python -m medvision_bm.benchmark.install_medvision_ds --data_dir D`: prepare the dataset side of a run.

This project has no separate dataset package: the data layer ships inside medvision_bm. The command checks
that it imports (nibabel, numpy), that ``D`` follows the MedVision layout with a benchmark plan for the planner
version in force (MedVision_PLANNER_VERSION, default the latest), and writes the bundled phantom dataset where
no real data is present (``--phantom auto``, the default), or always, or never. Concurrent calls on one folder
serialize on ``D/.medvision-prepare.lock``; the phantom is written to a temp folder and renamed into place.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from medvision_bm.errors import UserError

PROG = "python -m medvision_bm.benchmark.install_medvision_ds"


def _check_imports() -> None:
    missing = []
    for mod in ("numpy", "nibabel"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise UserError(f"the data layer needs {', '.join(missing)}; install the family's requirements "
                        "(run its launcher, or `medvision-bm envs build --model M`)")


def _has_datasets(data_dir: Path) -> bool:
    folder = data_dir / "Datasets"
    return folder.is_dir() and any(p.is_dir() for p in folder.iterdir())


def _write_phantom(data_dir: Path, tasks_list_dir: Path | None) -> None:
    from medvision_bm.data.phantom import DEFAULT_SEED, make_phantom

    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".phantom-", dir=data_dir) as tmp:
        make_phantom(tmp, seed=DEFAULT_SEED, tasks_list_dir=tasks_list_dir)
        target = data_dir / "Datasets"
        if target.exists() and not any(target.iterdir()):
            target.rmdir()
        if target.exists():  # merge: keep what is there, add the phantom datasets that are missing
            for ds in (Path(tmp) / "Datasets").iterdir():
                if not (target / ds.name).exists():
                    os.replace(ds, target / ds.name)
        else:
            os.replace(Path(tmp) / "Datasets", target)


def prepare(data_dir: Path, phantom: str = "auto", tasks_list_dir: Path | None = None) -> dict[str, int]:
    """Check (and where asked, write) the data folder; returns the tasks it offers: name -> test samples."""
    from medvision_bm.data.layout import DataDir
    from medvision_bm.data.planner import resolve_planner_version
    from medvision_bm.io import file_lock

    _check_imports()
    version = resolve_planner_version()
    if data_dir.exists() and not data_dir.is_dir():
        raise UserError(f"--data_dir {data_dir} is a file; point it at a folder")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the data folder {data_dir} ({exc.strerror}); check DATA_DIR") from None
    with file_lock(data_dir / ".medvision-prepare.lock"):
        present = _has_datasets(data_dir)
        if phantom == "always" or (phantom == "auto" and not present):
            print(f"{PROG}: writing the phantom dataset into {data_dir} "
                  f"({'as asked' if phantom == 'always' else 'no Datasets/ found'})", file=sys.stderr)
            if phantom == "always" and (data_dir / "Datasets").exists():
                for ds in (data_dir / "Datasets").iterdir():
                    if ds.name.startswith("Phantom"):
                        shutil.rmtree(ds)
            _write_phantom(data_dir, tasks_list_dir)
        elif not present:
            raise UserError(f"{data_dir} has no datasets (no Datasets/<name>/ folders); download the MedVision data "
                            f"there, or write the phantom data with `{PROG} --data_dir {data_dir} --phantom auto`")
    tasks = DataDir(data_dir, version).tasks()
    if not tasks:
        raise UserError(f"{data_dir} has datasets but none has a benchmark plan for planner version {version}; set "
                        "MedVision_PLANNER_VERSION to a version the data has, or regenerate the plans")
    return tasks


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--data_dir", default=None, help="data folder (default: MedVision_DATA_DIR)")
    p.add_argument("--phantom", choices=("auto", "always", "never"), default="auto",
                   help="write the phantom dataset: where no data is present (auto), always, or never (check only)")
    p.add_argument("--tasks_list_dir", default=None, help="also write tasks_MedVision-Phantom-*.json here")
    ns = p.parse_args(argv)

    def body() -> int:
        from medvision_bm.data.planner import resolve_data_dir, resolve_planner_version

        data_dir = resolve_data_dir(ns.data_dir)
        tasks = prepare(data_dir, ns.phantom, Path(ns.tasks_list_dir) if ns.tasks_list_dir else None)
        print(f"{PROG}: {data_dir} is ready: {len(tasks)} tasks, {sum(tasks.values())} test samples "
              f"(planner {resolve_planner_version()})", file=sys.stderr)
        return 0

    from medvision_bm.cli import run_handler

    return run_handler(body, prog=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
