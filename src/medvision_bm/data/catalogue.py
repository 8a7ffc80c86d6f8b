"""Upstream's per-release task catalogues: which benchmark tasks (test split) exist at each annotation release.

The files under ``catalogues/`` are upstream's ``dataset-info/all_tasks__ds_v<release>/tasks_MedVision-{detect,TL,AD}
-CoT__AllSlices__Test.json`` (YongchengYAO/MedVision @b6cbfae, A/D @be2ab7e), byte for byte. Each maps a task name to
the number of samples upstream's loader yields at that release after its single-instance filters; upstream's readmes
say a task is listed only when the pin can load it, and older files list a few tasks with 0.

Where upstream publishes no file for a (release, family), its readmes state which other release's holds the same
tasks, and that file answers:

* detection at 1.1.0 and 1.1.1 = 1.0.0 (``tasks_list/all_tasks__ds_v1.1.0/readme.md`` @3673558: the three releases
  "share the same A/D and Detection subtasks"); detection at 1.4.0 = 1.3.0 (``dataset-info/all_tasks__ds_v1.4.0/
  readme.md`` @be2ab7e: 1.4.0 changes T/L only, and "Detection is byte-identical across releases for a given dataset
  set"; the same coverage, 29 datasets / 378 subtasks);
* A/D at every release = 1.4.0 (the readmes of 1.2.0, 1.3.0 and 1.4.0: "In every version below, A/D covers only
  Ceph-Biometrics-400 and FeTA24 (5 subtasks per split)", the other biometry plans being paused at every pin).

Release 1.2.1 (the MAMA-MIA and PI-CAI republish) has no catalogue upstream: detection and T/L are not covered there.
A task whose dataset appears in no catalogue of its family (the phantom's, or a dataset upstream adds later) is not
covered either; then the data folder alone decides.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from medvision_bm.data.layout import TaskName, parse_task_name
from medvision_bm.data.planner import PLANNER_VERSIONS, version_key
from medvision_bm.errors import UserError

CATALOGUE_PACKAGE_DIR = "catalogues"
#: family -> the upstream file name in every catalogue folder
FILE_NAMES: dict[str, str] = {fam: f"tasks_MedVision-{fam}-CoT__AllSlices__Test.json" for fam in ("detect", "TL", "AD")}
#: family -> release asked about -> the release whose catalogue file holds its tasks (module docstring)
SOURCE_RELEASE: dict[str, dict[str, str]] = {
    "detect": {"1.0.0": "1.0.0", "1.1.0": "1.0.0", "1.1.1": "1.0.0", "1.2.0": "1.2.0", "1.3.0": "1.3.0",
               "1.4.0": "1.3.0"},
    "TL": {v: v for v in ("1.0.0", "1.1.0", "1.1.1", "1.2.0", "1.3.0", "1.4.0")},
    "AD": dict.fromkeys(PLANNER_VERSIONS, "1.4.0"),
}
#: The upstream commits of the shipped files (the folder name gives the release).
SOURCE_COMMITS: dict[str, str] = {"detect": "b6cbfae", "TL": "b6cbfae", "AD": "be2ab7e"}


@dataclass(frozen=True)
class Catalogue:
    """Upstream's test-split tasks of one family at one release: base task name (no variant) -> samples."""

    family: str
    release: str  # the release asked about
    source_release: str  # the release whose file holds it
    tasks: Mapping[str, int]

    @property
    def file(self) -> str:
        """Where upstream keeps it: ``dataset-info/all_tasks__ds_v<source>/<file>``."""
        return f"dataset-info/all_tasks__ds_v{self.source_release}/{FILE_NAMES[self.family]}"


@dataclass(frozen=True)
class Availability:
    """What upstream's catalogues say about one task at one release."""

    task: str
    release: str
    status: str  # "listed" | "empty" (listed with 0 samples) | "absent" | "not_covered"
    samples: int | None = None  # upstream's count at that release (listed / empty)
    reason: str = ""
    catalogue: str | None = None  # the upstream file that answered

    @property
    def exists(self) -> bool | None:
        """True: upstream's loader yields samples at that release; False: it yields none; None: not covered."""
        return {"listed": True, "empty": False, "absent": False}.get(self.status)


def _strip_variant(name: str) -> str:
    tn = parse_task_name(name)
    return tn.base


@cache
def _file(family: str, source_release: str) -> Mapping[str, int]:
    """One shipped catalogue file, keyed by the task name without its variant suffix."""
    path = resources.files(__package__).joinpath(CATALOGUE_PACKAGE_DIR, f"all_tasks__ds_v{source_release}",
                                                  FILE_NAMES[family])
    data = json.loads(path.read_text(encoding="utf-8"))
    return MappingProxyType({_strip_variant(name): int(count) for name, count in data.items()})


def catalogue(family: str, release: str) -> Catalogue | None:
    """The catalogue that says which ``family`` tasks exist at ``release``, or None where upstream has none."""
    source = SOURCE_RELEASE[family].get(release)
    if source is None:
        return None
    return Catalogue(family, release, source, _file(family, source))


@cache
def known_datasets(family: str) -> frozenset[str]:
    """Every dataset a catalogue of ``family`` names at some release."""
    names: set[str] = set()
    for source in set(SOURCE_RELEASE[family].values()):
        names.update(parse_task_name(task).dataset for task in _file(family, source))
    return frozenset(names)


def _first_release_with(family: str, base: str) -> str | None:
    for release in sorted(SOURCE_RELEASE[family], key=version_key):
        cat = catalogue(family, release)
        if cat is not None and cat.tasks.get(base, 0) > 0:
            return release
    return None


def availability(task: str | TaskName, release: str) -> Availability:
    """Whether upstream's loader yields samples for ``task`` (its test split, any variant) at ``release``."""
    tn = task if isinstance(task, TaskName) else parse_task_name(task)
    family, name = tn.family, tn.name
    if tn.split != "test":
        return Availability(name, release, "not_covered", reason="upstream's catalogues here cover the test split")
    if tn.dataset not in known_datasets(family):
        return Availability(name, release, "not_covered",
                            reason=f"dataset {tn.dataset} is in no upstream {family} catalogue")
    cat = catalogue(family, release)
    if cat is None:
        return Availability(name, release, "not_covered", reason=f"upstream publishes no {family} catalogue for "
                                                                  f"release {release}")
    base = tn.base.removesuffix("_Test")
    if base in cat.tasks:
        n = cat.tasks[base]
        if n > 0:
            return Availability(name, release, "listed", n, catalogue=cat.file)
        return Availability(name, release, "empty", 0, f"0 test samples at release {release}", cat.file)
    first = _first_release_with(family, base)
    why = (f"first published at release {first}" if first and version_key(first) > version_key(release)
           else f"not a task of release {release}" if first else "not a task upstream publishes at any release")
    return Availability(name, release, "absent", reason=why, catalogue=cat.file)


def check_tasks_at_release(tasks: list[str] | Mapping[str, object], release: str, source: str) -> None:
    """A one-line UserError naming every task of ``source`` (a tasks list) that upstream's catalogues say has no
    test samples at ``release``; tasks the catalogues do not cover pass (the data folder decides for them)."""
    missing = [a for a in (availability(t, release) for t in tasks) if a.exists is False]
    if not missing:
        return
    named = "; ".join(f"{a.task} ({a.reason})" for a in missing)
    raise UserError(f"tasks list {source}: {len(missing)} task(s) have no samples at annotation release {release} "
                    f"in upstream's catalogue (dataset-info/all_tasks__ds_v*/): {named}; remove them from the list "
                    "or pin another MedVision_PLANNER_VERSION (`medvision-bm data tasks --tasks_list_json_path "
                    f"{source}` lists them)")


def catalogue_tasks(release: str) -> dict[str, dict[str, int]]:
    """family -> task name (as upstream's test lists write it: ``-CoT``) -> samples at ``release``, for the families
    a catalogue covers there."""
    out: dict[str, dict[str, int]] = {}
    for family in FILE_NAMES:
        cat = catalogue(family, release)
        if cat is not None:
            out[family] = {f"{base}-CoT": n for base, n in cat.tasks.items()}
    return out

