"""Planner versions and the dataset contract (MedVision_PLANNER_VERSION, MedVision_ACK_RELEASE, MedVision_DATA_DIR)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.errors import UserError

#: Every planner version this code can read, oldest first. The last one is the latest release.
PLANNER_VERSIONS: tuple[str, ...] = ("1.0.0", "1.1.0")
LATEST_RELEASE: str = PLANNER_VERSIONS[-1]

ENV_PLANNER = "MedVision_PLANNER_VERSION"
ENV_ACK = "MedVision_ACK_RELEASE"
ENV_DATA_DIR = "MedVision_DATA_DIR"


def normalize_version(text: str) -> str:
    """Accept '1.1.0' and 'v1.1.0'."""
    text = text.strip()
    return text[1:] if text[:1] in ("v", "V") else text


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def resolve_planner_version(env: dict[str, str] | None = None) -> str:
    """The planner version a run evaluates: the env var if set (validated), else the latest release."""
    env = os.environ if env is None else env
    raw = env.get(ENV_PLANNER, "").strip()
    if not raw:
        return LATEST_RELEASE
    version = normalize_version(raw)
    if version not in PLANNER_VERSIONS:
        raise UserError(
            f"{ENV_PLANNER}={raw!r} is not a planner version this code knows; "
            f"choose one of {', '.join(PLANNER_VERSIONS)} (latest: {LATEST_RELEASE})"
        )
    if _key(version) < _key(LATEST_RELEASE):
        ack = normalize_version(env.get(ENV_ACK, ""))
        if ack != LATEST_RELEASE:
            raise UserError(
                f"{ENV_PLANNER}={version} is older than the latest release {LATEST_RELEASE}; "
                f"to evaluate it anyway set {ENV_ACK}={LATEST_RELEASE}"
            )
    return version


def resolve_data_dir(cli_value: str | os.PathLike | None, env: dict[str, str] | None = None) -> Path:
    """The data folder from --data_dir and/or MedVision_DATA_DIR; both given must name the same folder."""
    env = os.environ if env is None else env
    env_value = env.get(ENV_DATA_DIR, "").strip() or None
    if cli_value is None and env_value is None:
        raise UserError(f"no data folder: pass --data_dir DIR or set {ENV_DATA_DIR}")
    if cli_value is not None and env_value is not None:
        a = Path(cli_value).expanduser().resolve()
        b = Path(env_value).expanduser().resolve()
        if a != b:
            raise UserError(
                f"--data_dir {cli_value} and {ENV_DATA_DIR}={env_value} name different folders; "
                f"make them agree or unset {ENV_DATA_DIR}"
            )
    return Path(cli_value if cli_value is not None else env_value).expanduser().resolve()


@dataclass(frozen=True)
class DatasetContract:
    """What a run reads: the data folder and the planner version."""

    data_dir: Path
    planner_version: str

    @classmethod
    def resolve(cls, data_dir: str | os.PathLike | None, env: dict[str, str] | None = None) -> DatasetContract:
        return cls(resolve_data_dir(data_dir, env), resolve_planner_version(env))
