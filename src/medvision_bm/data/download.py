"""`medvision-bm data download`: fetch what a tasks list needs the way upstream MedVision does.

Upstream (master ``src/medvision_bm/benchmark/download_datasets.py`` and ``utils/install_utils.py``
``setup_env_hf_medvision_ds``, c221615; ``skills/medvision/sub-skills/dataset-and-tasks/references/downloading.md``
@39dd6bf) sets ``MedVision_DATA_DIR`` to the data folder and ``HF_HOME`` / ``HF_DATASETS_CACHE`` under
``<data_dir>/.cache/huggingface``, then calls ``datasets.load_dataset("YongchengYAO/MedVision", name=<config>,
trust_remote_code=True, split=...)`` per config; the dataset's loading script downloads the source data into
``<data_dir>/Datasets/<dataset>/`` and records it in ``<data_dir>/.downloaded_datasets.json``. That script needs
``datasets`` 3.x (``trust_remote_code`` loading scripts were removed in 4.0).

Ours on top: one config per dataset is enough (any config fetches the whole source dataset), datasets already on
disk with a plan at the pin are skipped, the variant suffix of a task name never reaches the config name, and the
restricted datasets' credentials are checked before anything is fetched. Keys are never printed. Where the running
interpreter has no ``datasets`` 3.x, the caller may hand the fetch on (the CLI re-runs the command in the ``data``
environment the project builds, ``medvision-bm envs build --env data``).
"""

from __future__ import annotations

import os
import sys
from argparse import Namespace
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType

from medvision_bm import limits
from medvision_bm.data.layout import parse_task_name
from medvision_bm.data.plan_files import plan_files
from medvision_bm.data.planner import ENV_DATA_DIR, ceiling
from medvision_bm.errors import UserError

TRACKER = ".downloaded_datasets.json"
#: Restricted sources and what upstream's loader needs for them (downloading.md @39dd6bf).
RESTRICTED: dict[str, tuple[tuple[str, ...], str]] = {
    "FeTA24": (("SYNAPSE_TOKEN",), "a Synapse access token for FeTA 2024"),
    "SKM-TEA": (("MedVision_SKMTEA_HF_ID", "HF_TOKEN"), "your private Hugging Face copy of SKM-TEA and a token"),
    "ToothFairy2": (("MedVision_ToothFairy2_HF_ID", "HF_TOKEN"), "your private Hugging Face copy of ToothFairy2 "
                    "and a token"),
}


def upstream_env(data_dir: Path, force_download: bool) -> dict[str, str]:
    """The variables upstream's ``setup_env_hf_medvision_ds`` sets for a data folder."""
    root = str(data_dir.resolve())
    env = {ENV_DATA_DIR: root, "HF_HOME": f"{root}/.cache/huggingface",
           "HF_DATASETS_CACHE": f"{root}/.cache/huggingface/datasets", "MedVision_FORCE_INSTALL_CODE": "true"}
    if force_download:
        env["MedVision_FORCE_DOWNLOAD_DATA"] = "true"
    return env


def config_name(task: str, split: str) -> str:
    """Upstream's config for a task name (``BoxCoordinate`` -> ``BoxSize``, ``_Test``/``_Train``; no variant)."""
    tn = parse_task_name(task)
    token = "BoxSize" if tn.family == "detect" else tn.task_type
    measure = f"_{tn.measure}" if tn.measure else ""
    return f"{tn.dataset}_{token}{measure}_Task{tn.task_id}_{tn.plane}_{split.capitalize()}"


def tracker_entries(data_dir: Path) -> dict[str, object]:
    try:
        data = limits.loads_json(limits.read_bytes(data_dir / TRACKER, "tracker file", limits.MAX_JSON_FILE_BYTES),
                                 "the tracker file")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, UserError):  # unreadable, not JSON, nested too deep, too large, not a file
        return {}


@dataclass
class DownloadPlan:
    fetch: dict[str, str]  # dataset -> the config loaded to fetch it
    present: list[str]  # datasets already on disk (tracker entry and a plan at the pin)


def plan_download(data_dir: Path, tasks: list[str], split: str, pin: str, force: bool) -> DownloadPlan:
    tracker = tracker_entries(data_dir)
    fetch: dict[str, str] = {}
    present: list[str] = []
    for task in tasks:
        tn = parse_task_name(task)
        if tn.dataset in fetch or tn.dataset in present:
            continue
        folder = data_dir / "Datasets" / tn.dataset
        on_disk = f"dataset_{tn.dataset}" in tracker and any(
            ceiling(list(by_version), pin) for by_version in plan_files(folder).values())
        if on_disk and not force:
            present.append(tn.dataset)
        else:
            fetch[tn.dataset] = config_name(task, split)
    return DownloadPlan(fetch, present)


def check_credentials(datasets: list[str], env: dict[str, str] | os._Environ[str]) -> None:
    for ds in datasets:
        if ds in RESTRICTED:
            names, what = RESTRICTED[ds]
            missing = [n for n in names if not (env.get(n) or "").strip()]
            if missing:
                raise UserError(f"dataset {ds} is restricted: upstream's loader needs {what}; set "
                                f"{' and '.join(missing)} (see upstream's downloading guide), or remove its tasks")


def datasets_version() -> str | None:
    """The installed ``datasets`` version, read without importing it (None when it is not installed)."""
    try:
        return metadata.version("datasets")
    except metadata.PackageNotFoundError:
        return None


def can_run_loader(version: str | None) -> bool:
    """Whether this ``datasets`` version runs upstream's loading script (3.x: trust_remote_code, removed in 4.0)."""
    return version is not None and version.split(".")[0] == "3"


def download_argv(ns: Namespace) -> list[str]:
    """The command's arguments, with absolute paths, to re-run it in another interpreter."""
    args = ["--data_dir", str(Path(ns.data_dir).expanduser().resolve()), "--tasks_list_json_path",
            str(Path(ns.tasks_list_json_path).expanduser().resolve()), "--split", ns.split, "--hf_dataset",
            ns.hf_dataset]
    return args + ["--force_download_data"] * bool(ns.force_download_data)


def datasets_module() -> ModuleType:
    """``datasets`` 3.x, imported (a UserError naming the fix where this interpreter has another version)."""
    version = datasets_version()
    if not can_run_loader(version):
        raise UserError(f"downloading needs `datasets` 3.x ({f'found {version}' if version else 'not installed'} in "
                        f"{sys.prefix}; upstream's loading script needs trust_remote_code, removed in 4.0): build the "
                        "`data` environment with `medvision-bm envs build --env data`, or pip install "
                        "'datasets==3.6.0' in the environment you download from")
    import datasets

    return datasets
