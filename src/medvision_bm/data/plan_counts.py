"""Task headers and sample counts of plans without their rows: one pass per plan, plans in parallel, cached on disk.

``data tasks`` and ``data check`` need task headers and per-config sample counts, not rows. A plan is read once for
every task asked of it (``plans.plan_events``: the case lists asked for are parsed, the others skipped untokenized;
reading stops after the last task asked for) and counted by the loader's own rules (``samples.count_cases``); plans
are counted in worker processes, largest first. What was counted of a plan is cached in one JSON file under the
plan-index cache folder, named by a hash of the plan's identity (``plans.plan_identity``: path, size, modification
and change times, inode, gzip trailer) and holding that identity, which must match on every read: a changed plan is
counted again, never served from an older count. Written atomically; an unreadable or foreign cache file is
ignored, and a later request for more of a plan counts it again with what the cache held.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path

from medvision_bm.data.plan_files import PlanRef, plan_identity
from medvision_bm.data.plans import RawEvent, plan_events
from medvision_bm.data.samples import SplitCounts, cache_root, count_cases, gc_paused
from medvision_bm.errors import UserError
from medvision_bm.io import read_json, write_json_atomic
from medvision_bm.jsontypes import JsonMapping, JsonObject, JsonValue

COUNTS_FORMAT = 1
#: Worker processes for counting plans (default: the CPUs this process may use).
WORKERS_ENV = "MEDVISION_DATA_WORKERS"
#: Below this many gzipped bytes to count, plans are counted in this process (a worker costs more than it saves).
PARALLEL_MIN_BYTES = 16 << 20
#: What is asked of a plan: (task position, split) pairs; position None: every task of the plan.
Request = frozenset[tuple[int | None, str]]


@dataclass
class PlanCounts:
    """Task headers of one plan file (all of them when ``complete``: the whole plan was read) and split counts."""

    identity: dict[str, str | int]
    headers: list[JsonObject]
    complete: bool
    counts: dict[tuple[int, str], SplitCounts]

    def covers(self, request: Request) -> bool:
        """Whether these counts answer ``request`` (a task beyond a complete plan's last is answered: absent)."""
        for pos, split in request:
            if pos is None:
                if not self.complete or any((p, split) not in self.counts for p in range(len(self.headers))):
                    return False
            elif (pos, split) not in self.counts and not (self.complete and pos >= len(self.headers)):
                return False
        return True

    def to_json(self, request: Request) -> dict[str, object]:
        return {"format": COUNTS_FORMAT, "identity": self.identity, "complete": self.complete,
                "request": [[p, s] for p, s in sorted(request, key=lambda r: (r[0] is None, r[0] or 0, r[1]))],
                "headers": self.headers,
                "counts": {f"{pos}/{split}": c.to_json() for (pos, split), c in self.counts.items()}}


def task_family(kind: str, header: JsonMapping) -> str:
    """The family of a plan task: detection plans hold detection tasks; a biometry task with a target_label is a
    tumor/lesion-size task, else an angle/distance one (as upstream's task lists name them)."""
    if kind == "detection":
        return "detect"
    return "TL" if "target_label" in header else "AD"


class _RawUnreadable(Exception):
    """A case's bytes that the lazy parser cannot read as one JSON object."""


def _lazy_parser() -> Callable[[bytes], object] | None:
    """pysimdjson's parser where it is installed: it reads a case lazily, building only the values counted (about
    five times faster than parsing the whole case); None without it (cases are then parsed whole, with orjson)."""
    try:
        import simdjson
    except ImportError:
        return None
    parser = simdjson.Parser()

    def parse(piece: bytes) -> object:
        try:
            return parser.parse(piece)
        except ValueError:  # not valid JSON for simdjson (NaN, or not one case): the plain reader decides
            raise _RawUnreadable() from None

    return parse


def count_plan(plan: PlanRef, request: Request) -> PlanCounts:
    """Read one plan once for ``request``: the headers of the tasks read, and the counts of the splits asked for.
    Without a request for every task, reading stops once the last task asked for is counted."""
    parse = _lazy_parser()
    with gc_paused():  # the cases parsed are acyclic and dropped once counted: the cyclic GC only costs here
        if parse is not None:
            try:
                return _count_plan(plan, request, parse)
            except _RawUnreadable:
                pass
        return _count_plan(plan, request, None)


def _count_plan(plan: PlanRef, request: Request, parse: Callable[[bytes], object] | None) -> PlanCounts:
    identity = plan_identity(plan.path)
    every = {split for pos, split in request if pos is None}
    explicit = {(pos, split) for pos, split in request if pos is not None}
    remaining = set(explicit)
    headers: list[JsonObject] = []
    counts: dict[tuple[int, str], SplitCounts] = {}

    def want(pos: int, split: str) -> bool:
        return split in every or (pos, split) in explicit

    events = plan_events(plan.path, want, raw=parse is not None)
    complete = True
    for ev in events:
        if ev[0] not in ("header", "task"):
            continue
        pos, header = ev[1], ev[2]
        if ev[0] == "header":
            headers.append(header)
        else:
            headers[pos] = header
        split = "train" if ev[0] == "header" else "test"
        if want(pos, split):
            counts[(pos, split)] = count_cases(_cases(events), task_family(plan.kind, header), plan, pos, parse)
            remaining.discard((pos, split))
        if not every and not remaining:
            complete = False
            break
    if complete and not headers:
        raise UserError(f"benchmark plan {plan.path} is not a MedVision benchmark plan (no task with a task_ID); "
                        "re-download it (`medvision-bm data download`) or regenerate it")
    return PlanCounts(identity, headers, complete, counts)


def _cases(events: Iterator[RawEvent]) -> Iterator[JsonValue | bytes]:
    """The cases of the split that starts here, up to its end (the events between are its cases)."""
    for ev in events:
        if ev[0] == "case":
            yield ev[3]
        elif ev[0] == "split_end":
            return


def _cache_path(data_dir: Path, identity: dict[str, str | int]) -> Path:
    digest = hashlib.sha256(json.dumps([COUNTS_FORMAT, identity], sort_keys=True).encode()).hexdigest()[:24]
    return cache_root(data_dir).parent / "plan-counts" / f"{digest}.json"


def cached_counts(plan: PlanRef, data_dir: Path) -> tuple[PlanCounts, Request] | None:
    """The cached counts of ``plan`` and the request they answered, when their recorded identity is the plan's now."""
    try:
        identity = plan_identity(plan.path)
        data = read_json(_cache_path(data_dir, identity))
    except (OSError, ValueError):
        return None
    try:
        if data.get("format") != COUNTS_FORMAT or data.get("identity") != identity:
            return None
        counts = {(int(key.split("/")[0]), key.split("/")[1]): SplitCounts.from_json(c)
                  for key, c in data["counts"].items()}
        request = frozenset((None if p is None else int(p), str(s)) for p, s in data["request"])
        return PlanCounts(identity, list(data["headers"]), bool(data["complete"]), counts), request
    except (AttributeError, KeyError, TypeError, ValueError, IndexError):
        return None


def _count_and_cache(plan: PlanRef, request: Request, data_dir: Path) -> PlanCounts:
    counts = count_plan(plan, request)
    try:
        write_json_atomic(_cache_path(data_dir, counts.identity), counts.to_json(request), indent=None)
    except (OSError, ValueError):  # a read-only cache folder, or a header JSON cannot hold (NaN): count next time
        pass
    return counts


def workers(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    raw = env.get(WORKERS_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise UserError(f"{WORKERS_ENV}={raw!r} is not a positive integer; set it to the number of processes "
                            "that count plans, or unset it")
        return int(raw)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def plan_counts(wanted: Mapping[PlanRef, Iterable[tuple[int | None, str]]], data_dir: Path,
                n_workers: int | None = None) -> dict[PlanRef, PlanCounts | UserError]:
    """The counts of every plan in ``wanted`` (plan -> what is asked of it): from the cache where it answers, else
    counted (in parallel when there is enough to count, largest file first) and cached. A plan that cannot be read
    gets its one-line error."""
    out: dict[PlanRef, PlanCounts | UserError] = {}
    missing: dict[PlanRef, Request] = {}  # plan -> what to count: what is asked now and what the cache answered
    for plan, asked in wanted.items():
        request = frozenset(asked)
        hit = cached_counts(plan, data_dir)
        if hit is not None and hit[0].covers(request):
            out[plan] = hit[0]
        else:
            missing[plan] = request | (hit[1] if hit is not None else frozenset())
    sizes = {p: p.path.stat().st_size for p in missing}
    order = sorted(missing, key=sizes.__getitem__, reverse=True)
    n = min(len(order), n_workers or workers())
    if n <= 1 or sum(sizes.values()) < PARALLEL_MIN_BYTES:
        for plan in order:
            try:
                out[plan] = _count_and_cache(plan, missing[plan], data_dir)
            except UserError as exc:
                out[plan] = exc
        return out
    # fork where there is one (a worker starts in milliseconds, nothing to import again); spawn elsewhere
    context = get_context("fork" if "fork" in get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(max_workers=n, mp_context=context) as pool:
        futures = {plan: pool.submit(_count_and_cache, plan, missing[plan], data_dir) for plan in order}
        for plan, fut in futures.items():
            try:
                out[plan] = fut.result()
            except UserError as exc:
                out[plan] = exc
    return out
