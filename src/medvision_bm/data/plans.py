"""Upstream benchmark plan files, read: one task's cases streamed from a gzipped plan (finding a plan file and the
version a run reads is ``data/plan_files.py``).

A dataset folder holds ``benchmark_plan_<kind>_v<X.Y.Z>.json.gz`` (kind: segmentation | detection | biometry) with
the schema ``{"dataset_info", "tasks_number", "tasks": [{"task_ID", ..., "train_cases": [...], "test_cases": [...]}]}``
(upstream ``skills/medvision/sub-skills/dataset-and-tasks/references/data-layout.md`` @39dd6bf).

Detection plans of whole-body CT datasets are hundreds of MB gzipped, so a task is read as a stream: the gzip
stream is split at the task-level keys (``"task_ID"``, ``"train_cases"``, ``"test_cases"``; keys that never occur
inside a case), the task header is parsed from its own few bytes, the split that is not wanted is skipped without
being tokenized, and the wanted case array is cut at its case boundaries (every case starts with ``{"case_ID":``,
the first key upstream writes) and parsed one case at a time with orjson. Plans whose keys are not in upstream's
writing order are read by a slower full parse of the task instead (ijson), from the first case the fast path could
not cut.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias, overload

from medvision_bm import limits
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject, JsonValue

_CHUNK = 1 << 22
_TAIL = 64  # bytes kept between chunks so a key marker split across two chunks is still found
_TASK_KEY = re.compile(rb'"(task_ID|train_cases|test_cases)"\s*:\s*')
_AFTER_TRAIN = re.compile(rb'"(test_cases_number|test_cases)"\s*:\s*')
_TEST_KEY = re.compile(rb'"test_cases"\s*:\s*')


# ---------------------------------------------------------------------------------------------------- reading


class PlanError(UserError):
    """A plan file that cannot be read (the message names the file and the fix)."""


class _Unordered(Exception):
    """The task keys are not in upstream's writing order: read the task with the full parser."""


class TaskNotInPlan(UserError):
    """The plan has fewer tasks than the task name's Task<NN> asks for."""

    def __init__(self, path: Path, task_pos: int, n_tasks: int | None) -> None:
        self.path, self.task_pos, self.n_tasks = path, task_pos, n_tasks
        has = f"has {n_tasks} task(s)" if n_tasks is not None else "has fewer tasks"
        super().__init__(f"benchmark plan {path} {has}; Task{task_pos + 1:02d} is not in it: check the task name")


def _bad(path: Path, why: str) -> PlanError:
    return PlanError(f"benchmark plan {path} {why}; re-download it (`medvision-bm data download`) or regenerate it")


def _gzip_open(path: Path) -> io.BufferedIOBase:
    """python-isal's gzip reader when installed (inflates about 4x faster than zlib), else the standard library's."""
    try:
        from isal import igzip

        return igzip.open(path, "rb")
    except ImportError:
        return gzip.open(path, "rb")


def _inflate_errors() -> tuple[type[BaseException], ...]:
    try:
        from isal.isal_zlib import error as isal_error

        # isal's stub declares ``error`` an exception instance; it is the exception class IsalError
        return (EOFError, zlib.error, isal_error)  # type: ignore[return-value]
    except ImportError:
        return (EOFError, zlib.error)


def _regular(path: Path) -> None:
    """A plan is read only when it is a regular file (a FIFO would block, a link to /dev/zero never end)."""
    try:
        limits.check_regular(path, "benchmark plan")
    except UserError as exc:
        raise PlanError(f"{exc}; re-download it (`medvision-bm data download`) or regenerate it") from None


def _too_large(path: Path, what: str, limit: int) -> PlanError:
    return _bad(path, f"has {what} over {limits.size_text(limit)} inflated (upstream's are far smaller)")


def _chunks(path: Path) -> Iterator[bytes]:
    _regular(path)
    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
    except OSError as exc:
        raise _bad(path, f"cannot be read ({exc.strerror or exc})") from None
    if magic != b"\x1f\x8b":
        raise _bad(path, "is not a gzip file")
    try:
        with _gzip_open(path) as fh:
            while True:
                chunk = fh.read(_CHUNK)
                if not chunk:
                    return
                yield chunk
    except gzip.BadGzipFile:
        raise _bad(path, "is not a gzip file") from None
    except _inflate_errors():
        raise _bad(path, "is truncated or corrupt (gzip stream ends early)") from None
    except OSError as exc:
        raise _bad(path, f"cannot be read ({exc.strerror or exc})") from None


@dataclass
class TaskRead:
    """One task of a plan: its header (every key but the case lists) and its cases of one split, in plan order."""

    header: JsonObject
    cases: Iterator[JsonValue]


# One pass over a plan yields events, in file order (``Want``: which (task position, split) case lists to parse;
# the others are skipped without being tokenized):
#   ("header", pos, header)      the task's keys before its train_cases list (upstream writes them first)
#   ("case", pos, split, case)   one case of a wanted split
#   ("split_end", pos, split)    after the last case of a wanted split (its count checked against the header)
#   ("task", pos, header)        every key of the task but the case lists, once its test_cases list starts
Want = Callable[[int, str], bool]
#: A case of the fast reader is a JSON object; the full parser yields what the plan's list holds (a case that is
#: not an object is the consumer's to refuse). With ``raw``, a case of the fast reader may come as its bytes.
HeaderEvent: TypeAlias = "tuple[Literal['header', 'task'], int, JsonObject]"
CaseEvent: TypeAlias = "tuple[Literal['case'], int, str, JsonValue]"
RawCaseEvent: TypeAlias = "tuple[Literal['case'], int, str, JsonValue | bytes]"
SplitEndEvent: TypeAlias = "tuple[Literal['split_end'], int, str]"
Event: TypeAlias = "HeaderEvent | CaseEvent | SplitEndEvent"
RawEvent: TypeAlias = "HeaderEvent | RawCaseEvent | SplitEndEvent"


def read_task(path: Path, task_pos: int, split: str = "test") -> TaskRead:
    """Stream task number ``task_pos`` (0-based position in ``tasks``, as upstream picks ``tasks[int(taskID)-1]``)."""
    if split not in ("train", "test"):
        raise ValueError(split)
    events = plan_events(path, lambda pos, s: pos == task_pos and s == split)
    first = "header" if split == "train" else "task"
    seen = 0
    for ev in events:
        if ev[0] == "case" or ev[0] == "split_end":
            continue
        if ev[0] == "header":
            seen = ev[1] + 1
        if ev[0] == first and ev[1] == task_pos:
            return TaskRead(ev[2], _split_cases(events, task_pos, split))
    raise TaskNotInPlan(path, task_pos, seen)


def _split_cases(events: Iterator[Event], task_pos: int, split: str) -> Iterator[JsonValue]:
    for ev in events:
        if ev[0] == "case" and ev[1] == task_pos and ev[2] == split:
            yield ev[3]
        elif ev[0] == "split_end" and ev[1] == task_pos and ev[2] == split:
            return


@overload
def plan_events(path: Path, want: Want, raw: Literal[False] = False) -> Iterator[Event]: ...
@overload
def plan_events(path: Path, want: Want, raw: bool) -> Iterator[RawEvent]: ...
def plan_events(path: Path, want: Want, raw: bool = False) -> Iterator[RawEvent]:
    """The events of one pass over a plan (see ``Want``): the fast reader, and where it cannot go on (keys not in
    upstream's writing order, a case it cannot cut), the full parser from the same point on (what was already
    yielded is not yielded again). ``raw``: the fast reader's cases come as their bytes, cut but not parsed (the
    consumer parses them and must treat a piece that is not one JSON object as a plan to read with ``raw`` off)."""
    done: set[tuple[str, int] | tuple[str, int, str]] = set()  # ("header" | "task", pos) and ("split_end", pos, split) already yielded
    cases: dict[tuple[int, str], int] = {}  # cases already yielded per (pos, split)
    try:
        for ev in _fast_events(path, want, raw):
            if ev[0] == "case":
                cases[(ev[1], ev[2])] = cases.get((ev[1], ev[2]), 0) + 1
            else:
                done.add(ev[:3] if ev[0] == "split_end" else ev[:2])
            yield ev
        return
    except _Unordered:
        pass
    for ev in _full_events(path, want):
        if ev[0] == "case":
            if cases.get((ev[1], ev[2]), 0) > 0:
                cases[(ev[1], ev[2])] -= 1
                continue
        elif (ev[:3] if ev[0] == "split_end" else ev[:2]) in done:
            continue
        yield ev


def _parse_header(path: Path, raw: bytes) -> JsonObject:
    text = raw.rstrip().rstrip(b",").rstrip()
    if len(text) > limits.MAX_PLAN_HEADER_BYTES:
        raise _too_large(path, "a task header", limits.MAX_PLAN_HEADER_BYTES)
    try:
        header = limits.loads_json(b"{" + text + b"}", "a task header")
    except UnicodeDecodeError:
        raise _Unordered() from None
    except ValueError as exc:
        if "nested" in str(exc):
            raise _bad(path, str(exc)) from None
        raise _Unordered() from None
    if not isinstance(header, dict):
        raise _Unordered()
    return header


_CASE_START = re.compile(rb'\{\s*"case_ID"\s*:')
_DECODER = json.JSONDecoder()


class _CaseTooDeep(Exception):
    """A case nested past limits.MAX_JSON_DEPTH (the reader turns it into a PlanError naming the plan)."""


def _load_case(piece: bytes) -> JsonObject:
    import orjson

    try:
        value = orjson.loads(piece)
    except orjson.JSONDecodeError:
        try:  # what orjson refuses but Python's json (upstream's reader) accepts, e.g. NaN
            value = limits.loads_json(piece, "a case")
        except UnicodeDecodeError:
            raise _Unordered() from None
        except ValueError as exc:
            if "nested" in str(exc):
                raise _CaseTooDeep(str(exc)) from None
            raise _Unordered() from None
    if not isinstance(value, dict):
        raise _Unordered()
    return value


class _CaseTooLarge(Exception):
    """A case over limits.MAX_PLAN_CASE_BYTES (the reader turns it into a PlanError naming the plan)."""


class _CaseSplitter:
    """Cuts one case array, fed in pieces from its ``[``, into cases and parses each; ignores what follows ``]``.

    A case ends where the next one starts (``, {"case_ID":``); the last one is parsed with ``raw_decode`` and must
    be followed by the array's ``]``. Anything else (a case whose first key is not case_ID, a case_ID key nested in
    a case) raises _Unordered, and the full parser takes over.
    """

    def __init__(self, raw: bool = False) -> None:
        self.raw = raw  # yield each case's bytes uncut of their text, unparsed (the last one comes parsed)
        self.items: list[JsonObject | bytes] = []
        self.buf = b""
        self.opened = False  # the '[' was consumed
        self.started = False  # the first case start was seen
        self.ended = False
        self.error: str | None = None

    def feed(self, data: bytes) -> None:
        if self.ended or not data:
            return
        scan_from = max(1, len(self.buf) - _TAIL)
        buf = self.buf + data if self.buf else data
        if not self.opened:
            if not buf.startswith(b"["):
                raise _Unordered()
            buf, self.opened = buf[1:], True
        if not self.started:
            stripped = buf.lstrip()
            if stripped.startswith(b"]") or not _CASE_START.match(stripped):
                if len(stripped) >= 64 and not stripped.startswith(b"]"):
                    raise _Unordered()
                self.buf = stripped  # an empty array, or too few bytes yet to tell
                return
            buf, self.started, scan_from = stripped, True, 1
        prev = 0
        for m in _CASE_START.finditer(buf, scan_from):
            piece = buf[prev:m.start()].rstrip()
            if not piece.endswith(b","):
                raise _Unordered()
            if len(piece) > limits.MAX_PLAN_CASE_BYTES:
                raise _CaseTooLarge()
            self.items.append(piece[:-1] if self.raw else _load_case(piece[:-1]))
            prev = m.start()
        self.buf = buf[prev:] if prev else buf
        if len(self.buf) > limits.MAX_PLAN_CASE_BYTES:  # one case that never ends: stop before it fills memory
            raise _CaseTooLarge()

    def close(self) -> None:
        if self.ended:
            return
        self.ended = True
        rest, self.buf = self.buf.lstrip(), b""
        if not self.started:
            if not rest.startswith(b"]"):
                self.error = "the case list ends before its closing ]"
            return
        try:
            text = rest.decode("utf-8")
            value, end = _DECODER.raw_decode(text)
        except RecursionError:
            raise _CaseTooDeep("a case is nested too deep to read") from None
        except (ValueError, UnicodeDecodeError):
            raise _Unordered() from None  # cut short, or not cut where this splitter thinks: the full parser decides
        if not isinstance(value, dict) or not text[end:].lstrip().startswith("]"):
            raise _Unordered()
        if not limits.json_depth_ok(value):
            raise _CaseTooDeep(f"a case is nested more than {limits.MAX_JSON_DEPTH} levels deep")
        self.items.append(value)

    def take(self) -> list[JsonObject | bytes]:
        items, self.items = self.items, []
        return items


def _fast_events(path: Path, want: Want, raw: bool = False) -> Iterator[RawEvent]:
    """The fast reader's events (module comment above), a case over its size or nesting limit a PlanError naming
    the plan; raises _Unordered where it cannot go on."""
    try:
        yield from _fast_events_cut(path, want, raw)
    except _CaseTooLarge:
        raise _too_large(path, "a case", limits.MAX_PLAN_CASE_BYTES) from None
    except _CaseTooDeep as exc:
        raise _bad(path, f"has {exc}") from None


def _fast_events_cut(path: Path, want: Want, raw: bool = False) -> Iterator[RawEvent]:
    header_scan = 1  # where the header's next key is looked for (never rescan what was scanned)
    buf = b""
    state = "seek"  # seek | header | skip-train | after-train | skip-test | cases
    pos = -1
    header: JsonObject = {}
    task: JsonObject = {}
    header_raw = b""
    reader = _CaseSplitter()
    split = ""
    n_cases = 0
    saw_tasks_key = False

    def ended(rest: bytes) -> Iterator[RawEvent]:
        """The cases in the last bytes of a case list, the count check, the split's end."""
        nonlocal n_cases
        reader.feed(rest)
        reader.close()
        for item in reader.take():
            n_cases += 1
            yield "case", pos, split, item
        _check_count(path, header if split == "train" else task, split, n_cases, reader)
        yield "split_end", pos, split

    for chunk in _chunks(path):
        buf += chunk
        while True:
            if state == "seek":
                if not saw_tasks_key:
                    saw_tasks_key = b'"tasks"' in buf
                m = _TASK_KEY.search(buf)
                if m is None:
                    buf = buf[-_TAIL:]
                    break
                if m[1] != b"task_ID":
                    if pos < 0:
                        raise _Unordered()  # a case list before any task_ID: task_ID is not the first key
                    buf = buf[m.end():]
                    continue
                if not buf[: m.start()].rstrip().endswith(b"{"):
                    raise _Unordered()  # task_ID is not the first key of its task: the header would be cut
                pos += 1
                state, header_raw, buf, header_scan = "header", buf[m.start():], b"", 1
                continue
            if state == "header":
                header_raw += buf
                buf = b""
                m = _TASK_KEY.search(header_raw, header_scan)
                if m is None:
                    header_scan = max(1, len(header_raw) - _TAIL)  # never rescan what was scanned
                    if len(header_raw) > limits.MAX_PLAN_HEADER_BYTES:
                        raise _too_large(path, f"task {pos + 1}'s header", limits.MAX_PLAN_HEADER_BYTES)
                    break
                if m[1] != b"train_cases":
                    raise _Unordered()
                if m.end() == len(header_raw):
                    break  # the key ends this chunk: wait for the value's first byte before judging it
                header = _parse_header(path, header_raw[: m.start()])
                buf, header_raw = header_raw[m.end():], b""
                if not buf.startswith(b"["):
                    raise _Unordered()
                yield "header", pos, header
                if want(pos, "train"):
                    state, split, n_cases, reader = "cases", "train", 0, _CaseSplitter(raw)
                else:
                    state = "skip-train"
                continue
            if state == "skip-train":
                m = _AFTER_TRAIN.search(buf)
                if m is None:
                    buf = buf[-_TAIL:]
                    break
                state, buf = "after-train", buf[m.start():]
                continue
            if state == "after-train":
                m = _TEST_KEY.search(buf)
                if m is None or m.end() == len(buf):
                    if len(buf) > limits.MAX_PLAN_HEADER_BYTES:
                        raise _too_large(path, f"task {pos + 1}'s header", limits.MAX_PLAN_HEADER_BYTES)
                    break  # not yet, or the key ends this chunk (its value starts in the next one)
                task = {**header, **(_parse_header(path, buf[: m.start()]) if m.start() else {})}
                buf = buf[m.end():]
                if not buf.startswith(b"["):
                    raise _Unordered()
                yield "task", pos, task
                if want(pos, "test"):
                    state, split, n_cases, reader = "cases", "test", 0, _CaseSplitter(raw)
                else:
                    state = "skip-test"
                continue
            if state == "skip-test":
                m = _TASK_KEY.search(buf)
                if m is None:
                    buf = buf[-_TAIL:]
                    break
                state = "seek"  # the next task's task_ID (seek checks the brace before it)
                continue
            if state == "cases":
                # the list ends before the next task-level key (or the end of the file); never feed past it
                stop = _TASK_KEY.search(buf) if split == "test" else _AFTER_TRAIN.search(buf)
                if stop is None:
                    keep = max(0, len(buf) - _TAIL)
                    reader.feed(buf[:keep])
                    buf = buf[keep:]
                    for item in reader.take():
                        n_cases += 1
                        yield "case", pos, split, item
                    break
                yield from ended(buf[: stop.start()])
                if split == "train":
                    state, buf = "after-train", buf[stop.start():]
                else:  # keep the bytes before the next task_ID: seek checks the brace there
                    state, buf = "seek", buf[max(0, stop.start() - _TAIL):]
                continue
    if state == "cases":
        yield from ended(buf)
        if split == "train":
            state = "after-train"
    if state in ("header", "skip-train", "after-train"):
        raise _bad(path, f"ends inside task {pos + 1} (no test_cases list)")
    if not saw_tasks_key:
        raise _bad(path, "is not a MedVision benchmark plan (no \"tasks\" list)")
    if pos < 0:
        raise _bad(path, "has 0 task(s) (an empty \"tasks\" list)")


def _check_count(path: Path, header: JsonObject | None, split: str, n: int, reader: _CaseSplitter) -> None:
    expected = (header or {}).get(f"{split}_cases_number")
    if isinstance(expected, int) and expected != n:
        raise _bad(path, f"lists {expected} {split} cases but {n} could be read"
                   + (f" ({_first_line(reader.error)})" if reader.error else ""))
    if expected is None and reader.error:
        raise _bad(path, f"has a broken {split}_cases list ({_first_line(reader.error)})")


def _first_line(text: str) -> str:
    """The parser's message without its multi-line excerpt of the input (errors are one line)."""
    return (text.strip().splitlines() or [""])[0][:80]


#: The full parser's first read, and the most it reads at once. The parser (yajl, under ijson) lexes again from its
#: start a token that a read cut, so a 100 MB string fed in 64 kB reads is lexed some 1,500 times (quadratic in its
#: length); each read without a finished task doubles the next one, which makes that work linear up to the largest
#: read (a string past it is lexed again once per largest read).
_FULL_FIRST_READ = 1 << 20
_FULL_MAX_READ = limits.MAX_PLAN_TASK_BYTES // 4


def _full_tasks(path: Path) -> Iterator[JsonValue]:
    """Every task object of a plan, parsed whole (any key order; the slow path), in time linear in the plan's size:
    the inflated bytes are pushed to the parser in reads that double while no task is finished (``_FULL_FIRST_READ``
    .. ``_FULL_MAX_READ``); a task past MAX_PLAN_TASK_BYTES stops the parse, so one task never fills memory."""
    import ijson
    from ijson.utils import sendable_list

    _regular(path)
    done = sendable_list()
    parser = ijson.items_coro(done, "tasks.item", use_float=True)
    size, since, i = _FULL_FIRST_READ, 0, 0
    try:
        with gzip.open(path, "rb") as fh:
            while True:
                data = fh.read(size)
                since += len(data)
                if since > limits.MAX_PLAN_TASK_BYTES:
                    raise _too_large(path, "a task", limits.MAX_PLAN_TASK_BYTES)
                if data:
                    parser.send(data)
                else:
                    parser.close()
                finished, done[:] = list(done), []
                for task in finished:
                    if not limits.json_depth_ok(task):
                        raise _bad(path, f"has task {i + 1} nested more than {limits.MAX_JSON_DEPTH} levels deep")
                    i += 1
                    yield task
                if finished:
                    size, since = _FULL_FIRST_READ, 0
                else:
                    size = min(size * 2, _FULL_MAX_READ)
                if not data:
                    return
    except gzip.BadGzipFile:
        raise _bad(path, "is not a gzip file") from None
    except (EOFError, zlib.error):
        raise _bad(path, "is truncated or corrupt (gzip stream ends early)") from None
    except ijson.JSONError as exc:
        raise _bad(path, f"is not valid JSON ({_first_line(str(exc))})") from None


def _full_events(path: Path, want: Want) -> Iterator[Event]:
    """The events of ``plan_events`` from the full parser (any key order; the slow path)."""
    for pos, task in enumerate(_full_tasks(path)):
        if not isinstance(task, dict):
            raise _bad(path, f"has a task {pos + 1} that is not a JSON object")
        header = {k: v for k, v in task.items() if k not in ("train_cases", "test_cases")}
        yield "header", pos, header
        for split in ("train", "test"):
            if split == "test":
                yield "task", pos, header
            if not want(pos, split):
                continue
            cases = task.get(f"{split}_cases")
            if not isinstance(cases, list):
                raise _bad(path, f"task {pos + 1} has no {split}_cases list")
            for case in cases:
                yield "case", pos, split, case
            yield "split_end", pos, split
