"""`python -m medvision_bm.benchmark.install_medvision_ds --data_dir D`: prepare the dataset side of a run.

This project has no separate dataset package: the data layer ships inside medvision_bm. The command checks that
it imports (nibabel, numpy, scipy, ijson), writes the bundled phantom datasets where asked (``--phantom auto``, the
default: only where ``D/Datasets`` holds no dataset; ``always``; ``never``), and then reads ``D`` as upstream
MedVision's ``Data/`` folder through the data layer at the dataset contract in force (MedVision_PLANNER_VERSION,
required; MedVision_ACK_RELEASE; MedVision_DISABLE_SAMPLE_FILTERING): every task it offers, or with
``--tasks_list_json_path`` the tasks of that list. A folder with no usable task is an error. Concurrent calls on
one folder serialize on ``D/.medvision-prepare.lock``; the phantom is written to a temp folder and renamed into
place.
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
    for mod in ("numpy", "nibabel", "scipy", "ijson"):
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


def usable_tasks(data_dir: Path, tasks_list: Path | None = None) -> dict[str, int]:
    """The tasks ``data_dir`` offers at the dataset contract in force (name -> samples after the filters): every
    task found, or those of ``tasks_list``; a UserError when none is usable."""
    from medvision_bm.data.check import check
    from medvision_bm.data.layout import DataDir, load_tasks_list
    from medvision_bm.data.planner import DatasetContract

    contract = DatasetContract.resolve(data_dir)
    data = DataDir(contract)
    where = f"{contract.data_dir} at annotation version {contract.planner_version}"
    if tasks_list is None:
        tasks = data.tasks()
        if not tasks:
            found = ", ".join(data.datasets()) or "none"
            raise UserError(f"{where} offers no usable task (datasets with benchmark plans: {found}); "
                            f"`medvision-bm data check --data_dir {contract.data_dir}` says why (plans not published "
                            "at this pin, MedVision_ACK_RELEASE, or no samples after the filters)")
        return tasks
    rows = check(data, dict(load_tasks_list(tasks_list)))
    bad = [r for r in rows if r.status != "ok"]
    for r in bad:
        print(f"{PROG}: warning: task {r.task} is not usable ({r.status}): {r.reason}", file=sys.stderr)
    usable = {r.task: int(r.samples or 0) for r in rows if r.status == "ok"}
    if not usable:
        raise UserError(f"{where} has none of the {len(rows)} task(s) of {tasks_list} usable; "
                        f"`medvision-bm data check --data_dir {contract.data_dir} --tasks_list_json_path {tasks_list}` "
                        "lists why (download the data, or check MedVision_PLANNER_VERSION and MedVision_ACK_RELEASE)")
    return usable


def prepare(data_dir: Path, phantom: str = "auto", tasks_list_dir: Path | None = None,
            tasks_list: Path | None = None) -> dict[str, int]:
    """Check (and where asked, write) the data folder; returns its usable tasks: name -> samples after the filters."""
    from medvision_bm.data.planner import resolve_planner_version
    from medvision_bm.io import file_lock

    _check_imports()
    resolve_planner_version()  # the pin is required: say so before writing anything
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
                            f"there (`medvision-bm data download`), or write the phantom data with "
                            f"`{PROG} --data_dir {data_dir} --phantom auto`")
        return usable_tasks(data_dir, tasks_list)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--data_dir", default=None, help="data folder (default: MedVision_DATA_DIR)")
    p.add_argument("--phantom", choices=("auto", "always", "never"), default="auto",
                   help="write the phantom dataset: where no data is present (auto), always, or never (check only)")
    p.add_argument("--tasks_list_dir", default=None, help="also write tasks_MedVision-Phantom-*.json here")
    p.add_argument("--tasks_list_json_path", default=None,
                   help="check only the tasks of this list (default: every task the folder offers)")
    ns = p.parse_args(argv)

    def body() -> int:
        from medvision_bm.data.planner import resolve_data_dir, resolve_planner_version

        data_dir = resolve_data_dir(ns.data_dir)
        tasks = prepare(data_dir, ns.phantom, Path(ns.tasks_list_dir) if ns.tasks_list_dir else None,
                        Path(ns.tasks_list_json_path) if ns.tasks_list_json_path else None)
        print(f"{PROG}: {data_dir} is ready: {len(tasks)} usable tasks, {sum(tasks.values())} samples "
              f"(annotation version {resolve_planner_version()})", file=sys.stderr)
        return 0

    from medvision_bm.cli import run_handler

    return run_handler(body, prog=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
