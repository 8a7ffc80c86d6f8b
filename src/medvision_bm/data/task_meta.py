"""Task metadata as upstream's prompt code reads it (spec: docs/spec/image-and-prompts.md section 2.2,
docs/spec/data-loader.md section 9).

Upstream takes ``image_description``, ``image_modality``, ``labels_map``, ``landmarks_map``, ``lines_map`` and
``angles_map`` from the installed dataset module, never from the JSON plan:
``medvision_ds.datasets.<PKG>.preprocess_<detection|biometry>.benchmark_plan["tasks"][int(taskID) - 1]``
(medvision_utils.py master @c221615 and @0a4c5e2; ``PKG`` from ``DATASETS_NAME2PACKAGE`` in
``medvision_bm/utils/configs.py`` @9fff178). The module source ships with the data, under
``<data_dir>/src/medvision_ds/datasets/<PKG>/``.

We read that source without importing it: the module is parsed with ``ast`` and its top-level assignments are
evaluated as literals, in order, so ``benchmark_plan`` may refer to names bound earlier (``labels_map``,
``landmarks_map``, ``CLUSTER_SIZE_THRESHOLD`` ...), as every module copy read does (``preprocess_*.py`` of
Ceph-Biometrics-400, FeTA24, KiPA22, MSD, BraTS24, ToothFairy2 and TotalSegmentator in the ``medvision_ds`` package
that the Hugging Face dataset YongchengYAO/MedVision ships under ``src/``; docs/spec/data-loader.md section 9).
Supported expressions: constants, dict/list/tuple/set displays (with ``**``/``*`` unpacking), names bound earlier,
unary +/- on numbers, ``+`` of two strings/lists/tuples. A module that builds or changes the plan any other way (a
call, a comprehension, a later ``x[k] = v`` or ``x.update(...)`` at top level) fails with an error that names the file
and line. When no module exists, the plan's task header (the same keys, as the planner wrote them to
``benchmark_plan_<kind>_v*.json.gz``) is the fallback.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from medvision_bm.data.upstream_configs import datasets_name2package as from_configs
from medvision_bm.jsontypes import JsonMapping

KINDS = ("detection", "biometry", "segmentation")
#: The module kind upstream imports for each family (detection: preprocess_detection; T/L and A/D: preprocess_biometry).
KIND_FOR_FAMILY = {"detect": "detection", "TL": "biometry", "AD": "biometry"}

class ModuleReadError(ValueError):
    """A dataset module whose ``benchmark_plan`` cannot be read as literal data."""


class LabelNotFoundError(ValueError):
    """A doc's label is not a key of its task's ``labels_map``."""


def datasets_name2package() -> dict[str, str]:
    """Upstream's dataset-name -> package-name mapping (``DATASETS_NAME2PACKAGE``, from upstream's config data)."""
    return dict(from_configs())


def _kind(kind: str) -> str:
    kind = KIND_FOR_FAMILY.get(kind, kind)
    if kind not in KINDS:
        raise ValueError(f"unknown module kind {kind!r}; known: {', '.join(KINDS)} (or a family: "
                         f"{', '.join(KIND_FOR_FAMILY)})")
    return kind


def module_path(data_dir: str | os.PathLike[str], dataset: str, kind: str) -> Path | None:
    """``<data_dir>/src/medvision_ds/datasets/<PKG>/preprocess_<kind>.py``; None for a dataset upstream's mapping
    does not know."""
    kind = _kind(kind)
    package = datasets_name2package().get(dataset)
    if package is None:
        return None
    return Path(data_dir) / "src" / "medvision_ds" / "datasets" / package / f"preprocess_{kind}.py"


# ----------------------------------------------------------------------------------------------------------------
# Reading benchmark_plan from the module source
# ----------------------------------------------------------------------------------------------------------------


class _Unreadable:
    """A module-level name whose value we cannot know without running the module."""

    def __init__(self, reason: str):
        self.reason = reason


def _freeze(value: object) -> object:
    if isinstance(value, dict):
        return _freeze_map(value)
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, set | frozenset):
        return frozenset(value)
    return value


def _freeze_map(value: dict[str, object]) -> Mapping[str, object]:
    """A read-only copy of a dict and of everything in it (lists become tuples)."""
    return MappingProxyType({k: _freeze(v) for k, v in value.items()})


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _changed_names(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement other than a plain assignment may bind or change, conservatively.

    A function or class definition binds its own name (and, through ``global``, the names it declares); an import
    binds its aliases; any other statement may change every name it mentions (targets, item stores, method calls,
    arguments of calls), so all of them count.
    """
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        declared = {name for node in ast.walk(stmt) if isinstance(node, ast.Global) for name in node.names}
        return {stmt.name} | declared
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {(alias.asname or alias.name).split(".")[0] for alias in stmt.names}
    return _names_in(stmt)


def _is_main_guard(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    t = stmt.test
    sides = [t.left, *t.comparators]
    return (len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)
            and any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


class _Evaluator:
    def __init__(self, path: Path):
        self.path = path
        self.env: dict[str, object] = {}
        self.deps: dict[str, set[str]] = {}

    def fail(self, node: ast.AST, what: str) -> ModuleReadError:
        line = getattr(node, "lineno", "?")
        return ModuleReadError(f"{self.path}:{line}: cannot read benchmark_plan as data: {what} "
                               f"(supported: literals, names bound earlier, ** and * unpacking, unary -/+, "
                               f"+ of strings/lists/tuples)")

    def value(self, node: ast.expr) -> object:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str | int | float | bool | type(None)):
                return node.value
            raise self.fail(node, f"constant of type {type(node.value).__name__}")
        if isinstance(node, ast.Name):
            if node.id not in self.env:
                raise self.fail(node, f"name {node.id!r} is not bound to data before this point")
            val = self.env[node.id]
            if isinstance(val, _Unreadable):
                raise self.fail(node, f"name {node.id!r} {val.reason}")
            return val
        if isinstance(node, ast.Dict):
            out: dict[object, object] = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    spread = self.value(v)
                    if not isinstance(spread, dict):
                        raise self.fail(v, "** of something that is not a dict")
                    out.update(spread)
                else:
                    key = self.value(k)
                    if isinstance(key, dict | list | set):
                        raise self.fail(k, "unhashable dict key")
                    out[key] = self.value(v)
            return out
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items: list[object] = []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    spread = self.value(elt.value)
                    if not isinstance(spread, list | tuple):
                        raise self.fail(elt, "* of something that is not a list or tuple")
                    items.extend(spread)
                else:
                    items.append(self.value(elt))
            if isinstance(node, ast.Tuple):
                return tuple(items)
            if isinstance(node, ast.Set):
                try:
                    return set(items)
                except TypeError:
                    raise self.fail(node, "unhashable set element") from None
            return items
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self.value(node.operand)
            if isinstance(operand, bool) or not isinstance(operand, int | float):
                raise self.fail(node, "unary sign on a non-number")
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left), self.value(node.right)
            if isinstance(left, str) and isinstance(right, str):
                return left + right
            if isinstance(left, list) and isinstance(right, list):
                return left + right
            if isinstance(left, tuple) and isinstance(right, tuple):
                return left + right
            raise self.fail(node, "+ of values other than two strings, lists or tuples")
        raise self.fail(node, f"unsupported expression {type(node).__name__}")

    def poison(self, names: set[str], reason: str) -> None:
        hit = set(names)
        for name, deps in self.deps.items():
            if deps & names:
                hit.add(name)
        for name in hit:
            self.env[name] = _Unreadable(reason)
            self.deps.setdefault(name, set())

    def bind(self, name: str, node: ast.expr) -> None:
        deps = set()
        for used in _names_in(node):
            deps |= {used} | self.deps.get(used, set())
        try:
            self.env[name] = self.value(node)
        except ModuleReadError as err:
            self.env[name] = _Unreadable(f"could not be read ({err})")
        self.deps[name] = deps

    def run(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            if _is_main_guard(stmt):
                continue
            if isinstance(stmt, ast.Assign):
                names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
                if len(names) == len(stmt.targets):
                    for name in names:
                        self.bind(name, stmt.value)
                    continue
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                self.bind(stmt.target.id, stmt.value)
                continue
            line = getattr(stmt, "lineno", "?")
            self.poison(_changed_names(stmt),
                        f"is bound or changed by the {type(stmt).__name__} statement at line {line}")


@lru_cache(maxsize=128)
def _read_plan_cached(path: str, mtime_ns: int, size: int) -> Mapping[str, Any]:
    del mtime_ns, size  # cache key only
    source = Path(path).read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as err:
        raise ModuleReadError(f"{path}: not valid Python: {err}") from None
    ev = _Evaluator(Path(path))
    ev.run(tree)
    if "benchmark_plan" not in ev.env:
        raise ModuleReadError(f"{path}: no top-level benchmark_plan assignment")
    plan = ev.env["benchmark_plan"]
    if isinstance(plan, _Unreadable):
        raise ModuleReadError(f"{path}: benchmark_plan {plan.reason}")
    if not isinstance(plan, dict) or not isinstance(plan.get("tasks"), list):
        raise ModuleReadError(f"{path}: benchmark_plan is not a dict with a 'tasks' list")
    return _freeze_map(plan)


def read_benchmark_plan(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    """The module's ``benchmark_plan`` as read-only data; cached per (path, mtime, size)."""
    p = Path(path).resolve()
    st = p.stat()
    return _read_plan_cached(str(p), st.st_mtime_ns, st.st_size)


# ----------------------------------------------------------------------------------------------------------------
# Task metadata
# ----------------------------------------------------------------------------------------------------------------

_MAP_FIELDS = ("labels_map", "landmarks_map", "lines_map", "angles_map")


@dataclass(frozen=True)
class TaskMeta:
    """One task's prompt metadata. Maps are read-only; a map the task does not define is None.

    ``source`` is ``"medvision_ds:<module path>"`` or ``"plan"`` (the plan's task header was used).
    ``image_modality`` is None when the task defines none (newest upstream normalisation would fail there).
    """

    image_description: str | None
    image_modality: str | None
    labels_map: Mapping[str, str] | None
    landmarks_map: Mapping[str, str] | None
    lines_map: Mapping[str, Mapping[str, Any]] | None
    angles_map: Mapping[str, Mapping[str, Any]] | None
    source: str

    def map_named(self, name: str) -> Mapping[str, Any]:
        """``task_info[name]`` for one of the four map names (upstream indexes the task dict by the doc's
        ``metric_map_name`` / a line's ``element_map_name``)."""
        if name not in _MAP_FIELDS:
            raise ValueError(f"unknown map name {name!r} ({self.source}); known: {', '.join(_MAP_FIELDS)}")
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"the task defines no {name} ({self.source})")
        return value


def _task_index(task_id: str | int) -> int:
    if isinstance(task_id, bool) or not isinstance(task_id, str | int):
        raise ValueError(f"task_id must be the doc's taskID (e.g. '01') or an int, got {task_id!r}")
    try:
        number = int(task_id)
    except ValueError:
        raise ValueError(f"task_id {task_id!r} is not a number") from None
    if number < 1:
        # upstream would index tasks[-1] silently; no real taskID is below 01
        raise ValueError(f"task_id {task_id!r} is below 1")
    return number - 1


def _meta_from_task(task: Mapping[str, Any], source: str) -> TaskMeta:
    if "image_description" not in task:
        raise ValueError(f"task has no image_description ({source})")
    desc = task["image_description"]
    modality = task.get("image_modality")
    if desc is not None and not isinstance(desc, str):
        raise ValueError(f"image_description is not a string ({source}): {desc!r}")
    maps: dict[str, Any] = {}
    for name in _MAP_FIELDS:
        value = task.get(name)
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"{name} is not a mapping ({source})")
        maps[name] = _freeze(dict(value)) if isinstance(value, Mapping) else None
    return TaskMeta(image_description=desc, image_modality=modality, source=source, **maps)


def load_task_meta(data_dir: str | os.PathLike[str], dataset: str, kind: str, task_id: str | int,
                   plan_task_header: JsonMapping | None = None) -> TaskMeta:
    """Upstream's ``task_info`` for one task: the dataset module's ``benchmark_plan["tasks"][int(taskID) - 1]`` when
    the module file exists under ``<data_dir>/src/medvision_ds/datasets/<PKG>/``, else ``plan_task_header``.

    ``kind`` is ``detection`` / ``biometry`` / ``segmentation`` or a family (detect, TL, AD). A module that exists
    but cannot be read, or lacks the task, is an error (upstream would use it); no module and no header is an error.
    """
    index = _task_index(task_id)
    path = module_path(data_dir, dataset, kind)
    if path is not None and path.is_file():
        plan = read_benchmark_plan(path)
        tasks = plan["tasks"]
        if index >= len(tasks):
            raise ValueError(f"task {task_id!r} is not in {path} (it defines {len(tasks)} task(s))")
        return _meta_from_task(tasks[index], f"medvision_ds:{path}")
    if plan_task_header is not None:
        return _meta_from_task(plan_task_header, "plan")
    where = (f"no dataset module at {path}" if path is not None
             else f"dataset {dataset!r} is not in upstream's DATASETS_NAME2PACKAGE")
    raise FileNotFoundError(f"no prompt metadata for {dataset} task {task_id}: {where}, and no plan task header given")


# ----------------------------------------------------------------------------------------------------------------
# Per-doc names, resolved exactly as upstream's doc_to_text does
# ----------------------------------------------------------------------------------------------------------------


def resolve_label_name(meta: TaskMeta, label: object) -> str:
    """``labels_map[str(doc["label"])]`` (detection and T/L); a label the map lacks is an error naming it."""
    key = str(label)
    if meta.labels_map is None:
        raise LabelNotFoundError(f"Label {key} not found: the task has no labels_map ({meta.source})")
    if key not in meta.labels_map:
        known = ", ".join(meta.labels_map)
        raise LabelNotFoundError(f"Label {key} not found in labels_map ({meta.source}; labels: {known})")
    return meta.labels_map[key]


@dataclass(frozen=True)
class ADNames:
    """The names an A/D prompt states: ``points`` = (p1, p2) for a distance, (l1p1, l1p2, l2p1, l2p2) for an angle;
    ``biometrics_name`` may be "" (the prompt then uses the wording without a name)."""

    metric_type: str
    biometrics_name: str | None
    points: tuple[str, ...]
    point_keys: tuple[str, ...] = ()  # the landmark keys of ``points`` (P1, P2, ...), in the same order


def _entry(meta: TaskMeta, map_name: str, key: str, what: str) -> Mapping[str, Any]:
    table = meta.map_named(map_name)
    if key not in table:
        raise ValueError(f"{what} {key!r} not found in {map_name} ({meta.source})")
    return table[key]


def _line_points(meta: TaskMeta, line: Mapping[str, Any]) -> tuple[str, str]:
    keys = line["element_keys"]
    if len(keys) != 2:
        raise ValueError(f"a line needs 2 element_keys, got {keys!r} ({meta.source})")
    points = meta.map_named(line["element_map_name"])
    for k in keys:
        if k not in points:
            raise ValueError(f"landmark {k!r} not found in {line['element_map_name']} ({meta.source})")
    return points[keys[0]], points[keys[1]]


def resolve_ad_names(meta: TaskMeta, biometric_profile: Mapping[str, Any]) -> ADNames:
    """Distance: the line ``task_info[metric_map_name][metric_key]`` -> its two landmarks and its name. Angle: the
    angle entry -> its two lines (``element_map_name``) -> four landmarks, and the angle's name."""
    metric_type = biometric_profile["metric_type"]
    map_name = biometric_profile["metric_map_name"]
    key = biometric_profile["metric_key"]
    if metric_type == "distance":
        line = _entry(meta, map_name, key, "line")
        return ADNames("distance", line["name"], _line_points(meta, line), tuple(line["element_keys"]))
    if metric_type == "angle":
        angle = _entry(meta, map_name, key, "angle")
        line_keys = angle["element_keys"]
        if len(line_keys) != 2:
            raise ValueError(f"an angle needs 2 element_keys, got {line_keys!r} ({meta.source})")
        line1 = _entry(meta, angle["element_map_name"], line_keys[0], "line")
        line2 = _entry(meta, angle["element_map_name"], line_keys[1], "line")
        return ADNames("angle", angle["name"], _line_points(meta, line1) + _line_points(meta, line2),
                       (*line1["element_keys"], *line2["element_keys"]))
    raise ValueError(f"unknown metric_type {metric_type!r}; upstream knows 'distance' and 'angle'")
