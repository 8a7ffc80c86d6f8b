"""Upstream benchmark plan files on disk: their names, the ones in a dataset folder, the version a run reads (the
ceiling rule with upstream's withdrawn, paused and acknowledged versions), what identifies a file's content for the
caches built from it, and the release a data folder holds. Reading a plan's cases is ``data/plans.py``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from medvision_bm import limits
from medvision_bm.data.planner import PAUSED, PLANNER_VERSIONS, WITHDRAWN, ceiling, check_ack, version_key
from medvision_bm.errors import UserError

PLAN_KINDS = ("segmentation", "detection", "biometry")
_PLAN_RE = re.compile(r"^benchmark_plan_(segmentation|detection|biometry)_v(\d+\.\d+\.\d+)\.json\.gz$")


class NotAtPin(UserError):
    """A dataset's plans all ship after the pinned annotation version: at this pin upstream has no such tasks."""



def plan_filename(kind: str, version: str) -> str:
    return f"benchmark_plan_{kind}_v{version}.json.gz"


def plan_files(dataset_dir: Path) -> dict[str, dict[str, Path]]:
    """kind -> {version -> path} of the plan files directly in a dataset folder."""
    out: dict[str, dict[str, Path]] = {}
    try:
        entries = list(dataset_dir.iterdir())
    except OSError:
        return out
    for path in entries:
        m = _PLAN_RE.match(path.name)
        if m and path.is_file():
            out.setdefault(m[1], {})[m[2]] = path
    return out


@dataclass(frozen=True)
class PlanRef:
    """The plan a run reads for one (dataset, kind): the version the ceiling rule picked and its file."""

    dataset: str
    kind: str
    version: str
    path: Path
    newest: str  # the newest version of this pair on disk

    @property
    def exact(self) -> bool:
        return self.version == self.newest


def resolve_plan(dataset_dir: Path, dataset: str, kind: str, pin: str, ack: str | None,
                 data_release: str | None = None) -> PlanRef:
    """Upstream's resolution for one (dataset, kind) at a pinned version: ceiling, withdrawn, paused, ACK."""
    if (dataset, kind) in PAUSED:
        raise UserError(f"MedVision: annotation paused pending investigation: {dataset} ({kind}) is refused at every "
                        "version upstream; remove its tasks from the tasks list")
    files = plan_files(dataset_dir)
    withdrawn = WITHDRAWN.get((dataset, kind), ())
    versions = [v for v in files.get(kind, {}) if v not in withdrawn]
    found = ", ".join(sorted(p.name for d in files.values() for p in d.values())) or "none"
    if not versions and pin not in withdrawn:
        raise UserError(f"dataset {dataset} has no {kind} plan ({plan_filename(kind, 'X.Y.Z')}) in {dataset_dir} "
                        f"(found: {found}); download it with `medvision-bm data download` or fix --data_dir")
    chosen = ceiling(versions, pin)
    if chosen is None:
        if pin in withdrawn:
            later = f"pin {min(versions, key=version_key)} or later" if versions else "pin a later version"
            raise UserError(f"MedVision: annotation WITHDRAWN at the selected version: {dataset} ({kind}) {pin} "
                            f"(plans in {dataset_dir}: {found}); {later}")
        raise NotAtPin(f"MedVision: annotation not published at the selected version: {dataset} ({kind}) first "
                        f"ships at v{min(versions, key=version_key)} (plans in {dataset_dir}: {found}); "
                        f"MedVision_PLANNER_VERSION={pin} is older. Pin a later version or remove the task from the "
                        "tasks list")
    newest = max(versions, key=version_key)
    check_ack(dataset, kind, pin, newest, ack, data_release)
    return PlanRef(dataset, kind, chosen, files[kind][chosen], newest)


def plan_identity(path: Path) -> dict[str, str | int]:
    """What identifies a plan file's content for the caches built from it: its resolved path, size, modification and
    change times, inode, and the gzip trailer (CRC-32 and length of the whole uncompressed text). A rewritten,
    replaced or touched file changes at least one of them (the change time cannot be set back), so a cache keyed by
    this is never served for other content."""
    resolved = path.resolve()
    st = resolved.stat()
    try:
        with open(resolved, "rb") as fh:
            fh.seek(max(0, st.st_size - 8))
            trailer = fh.read(8).hex()
    except OSError:
        trailer = ""
    return {"path": str(resolved), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "ino": st.st_ino, "dev": st.st_dev, "gzip_trailer": trailer}


def data_release(data_dir: Path) -> str | None:
    """The release a data folder holds: the newest plan on disk, or the release upstream's tracker records when that
    is newer (a tracker never lowers it: a stale tracker must not widen the acknowledgement)."""
    newest: str | None = None
    datasets = data_dir / "Datasets"
    if datasets.is_dir():
        for ds in datasets.iterdir():
            for by_version in plan_files(ds).values():
                for v in by_version:
                    if v in PLANNER_VERSIONS and (newest is None or version_key(v) > version_key(newest)):
                        newest = v
    try:
        tracker = limits.read_bytes(data_dir / ".downloaded_datasets.json", "tracker file", limits.MAX_JSON_FILE_BYTES)
        value = limits.loads_json(tracker, "the tracker file").get("medvision_ds")
        if isinstance(value, str) and value in PLANNER_VERSIONS and (
                newest is None or version_key(value) > version_key(newest)):
            newest = value
    except (OSError, ValueError, AttributeError, UserError):
        pass
    return newest
