"""Annotation (planner) versions as upstream MedVision defines them, and the dataset contract of a run.

Upstream's loader (release 1.4.0) reads ``MedVision_PLANNER_VERSION`` (required; ``latest`` or a published
``X.Y.Z``), resolves each (dataset, plan kind) to the newest plan published at or below that pin (the ceiling
rule), and asks for ``MedVision_ACK_RELEASE`` when the pin is older than that pair's newest annotation. Facts from
upstream's ``skills/medvision/sub-skills/dataset-and-tasks/references/concepts.md`` and ``troubleshooting.md``
@39dd6bf and the release notes ``docs/dataset-release/release-v1.*.md``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.errors import UserError

#: Every published annotation version, oldest first; ``latest`` means the newest release.
PLANNER_VERSIONS: tuple[str, ...] = ("1.0.0", "1.1.0", "1.1.1", "1.2.0", "1.2.1", "1.3.0", "1.4.0")
LATEST_RELEASE: str = PLANNER_VERSIONS[-1]
#: The annotations of the paper's leaderboard.
PAPER_VERSION = "1.0.0"

ENV_PLANNER = "MedVision_PLANNER_VERSION"
ENV_ACK = "MedVision_ACK_RELEASE"
ENV_DATA_DIR = "MedVision_DATA_DIR"
ENV_DISABLE_FILTERING = "MedVision_DISABLE_SAMPLE_FILTERING"

_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")

#: (dataset, plan kind) -> the version whose annotation upstream withdrew (refused at that pin).
WITHDRAWN: dict[tuple[str, str], tuple[str, ...]] = {
    (ds, kind): ("1.2.0",) for ds in ("MAMA-MIA", "PI-CAI") for kind in ("segmentation", "detection", "biometry")
}
#: (dataset, plan kind) pairs upstream pauses at every pin.
PAUSED: frozenset[tuple[str, str]] = frozenset({("AFIDs", "biometry"), ("PDDCA", "biometry"), ("VerSe", "biometry")})


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def parse_planner_version(raw: str | None) -> str:
    """The pinned version from the env value: ``latest`` or a published ``X.Y.Z`` (surrounding spaces ignored)."""
    if raw is None or not raw.strip():
        raise UserError(
            f"MedVision: annotation version selection required: set {ENV_PLANNER} to 'latest' (= {LATEST_RELEASE}) "
            f"or one of {', '.join(PLANNER_VERSIONS)}; the paper's leaderboard uses {PAPER_VERSION}, e.g. "
            f"`export {ENV_PLANNER}={PAPER_VERSION} {ENV_ACK}={LATEST_RELEASE}`"
        )
    value = raw.strip()
    if value == "latest":
        return LATEST_RELEASE
    if not _VERSION_RE.match(value):
        raise UserError(f"MedVision: invalid {ENV_PLANNER}: expected 'latest' or a three-part version like "
                        f"{PAPER_VERSION} (no 'v' prefix). Got: {raw!r}")
    if value not in PLANNER_VERSIONS:
        raise UserError(f"MedVision: unknown {ENV_PLANNER} {value!r}: published versions are "
                        f"{', '.join(PLANNER_VERSIONS)} (or 'latest')")
    return value


def resolve_planner_version(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return parse_planner_version(env.get(ENV_PLANNER))


def sample_filtering_enabled(env: Mapping[str, str] | None = None) -> bool:
    """Upstream's single-instance filters are on unless the variable is exactly 'true' in any case: the loader
    reads it as ``value.lower() == "true"`` (default ``"False"``), nothing stripped, so ``" true"`` or ``"true\n"``
    leave the filters on (skills/medvision/sub-skills/dataset-and-tasks/references/concepts.md @39dd6bf)."""
    env = os.environ if env is None else env
    return env.get(ENV_DISABLE_FILTERING, "False").lower() != "true"


def ceiling(versions: list[str], pin: str) -> str | None:
    """The newest of ``versions`` at or below ``pin`` (None: nothing published by then)."""
    below = [v for v in versions if version_key(v) <= version_key(pin)]
    return max(below, key=version_key) if below else None


def check_ack(dataset: str, kind: str, pin: str, newest: str, ack: str | None, data_release: str | None) -> None:
    """Pinning below a pair's newest annotation needs an acknowledgement, as upstream's loader asks.

    Accepted: the pair's newest version, the newest release (``LATEST_RELEASE``, the blanket value), or the release
    the data folder itself was downloaded at (so a folder fetched with release 1.1.1 takes the ``1.1.1`` that
    launchers of that time export).
    """
    if version_key(pin) >= version_key(newest):
        return
    accepted = [newest, LATEST_RELEASE, *([data_release] if data_release else [])]
    if (ack or "").strip() in accepted:
        return
    values = " or ".join(dict.fromkeys(accepted))
    raise UserError(
        f"MedVision: outdated annotation version — acknowledgement required. Dataset: {dataset} (plan kind: {kind}) "
        f"has annotations up to {newest}; {ENV_PLANNER}={pin} loads an older one. Set {ENV_ACK} to {values}"
        + (f" (got {ack!r})" if ack else "")
    )


def resolve_data_dir(cli_value: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> Path:
    """The data folder: --data_dir when given (it wins, as upstream sets the env from it), else MedVision_DATA_DIR."""
    env = os.environ if env is None else env
    env_value = env.get(ENV_DATA_DIR, "").strip() or None
    value = cli_value if cli_value is not None else env_value
    if value is None:
        raise UserError(f"no data folder: pass --data_dir DIR or set {ENV_DATA_DIR}")
    return Path(os.path.normpath(os.path.abspath(os.path.expanduser(value))))  # as upstream: no symlink resolution


@dataclass(frozen=True)
class DatasetContract:
    """What a run reads: the data folder, the pinned annotation version, the acknowledgement and the filters."""

    data_dir: Path
    planner_version: str
    ack_release: str | None = None
    filtering: bool = True

    @classmethod
    def resolve(cls, data_dir: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> DatasetContract:
        env = os.environ if env is None else env
        return cls(resolve_data_dir(data_dir, env), resolve_planner_version(env),
                   (env.get(ENV_ACK) or "").strip() or None, sample_filtering_enabled(env))
