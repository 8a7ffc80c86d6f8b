"""An API run's lmms-eval process: lmms-eval's task loop over answers the run's own process asks and relays here.

Started by ``runner.lmms_process.ProcessHarness`` as ``python -m medvision_bm.runner.lmms_worker IN_FD OUT_FD``. It
imports lmms-eval at once (the run's process asks meanwhile, on its own core: the import never holds the requests),
then takes one task's part at a time: lmms-eval's ``simple_evaluate`` of the part's rows (written by the run's
process) with ``RelayLMM``, whose requests are answered by the answers relayed as they land. Each answer comes
with the hook's score of it, made by the run's process (which scores every answer it stores: ``RelayedScores``), or
is scored here as it arrives; lmms-eval's ``process_results`` after the last answer takes that score (the hooks'
score memo). Its per-sample log is written beside the part's rows and named in the reply.

Messages are JSON lines. In (from the run): ``{"op": "task", "task", "task_dir", "rows", "first_row"}``, then
``{"op": "answer", "key", "prompt", "text"}`` for every sample of the part (with ``"parser", "rules", "status",
"metrics"`` where the run scored it), then ``{"op": "asked"}``; ``{"op":
"quit"}`` at the end. Out: ``{"op": "done", "log": path}`` or ``{"op": "error", "message": one line}`` per part. The
process ends when its input closes (the run ended or was killed) whatever it is doing: nothing of the run's is held
here (the answers are in the run's store).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from medvision_bm.data.docs import Doc, RunDoc, View
from medvision_bm.io import dumps, jsonable
from medvision_bm.jsontypes import JsonObject
from medvision_bm.limits import BadField, int_field, object_field, shown, text_field
from medvision_bm.secrets import redact
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, SampleScore, ScoreMemo
from medvision_bm.tasks.upstream_parse import SampleStatus

#: how much lower this process's CPU priority is than the run's: where the cores are few, the run's asking (encoding
#: and sending the requests) goes first and lmms-eval's import and loop take the time the asking leaves (it waits on
#: the provider most of the time); where they are many, nothing changes
WORKER_NICE = 10


@dataclass(frozen=True)
class Relayed:
    """One answer the run asked: the prompt it was asked with and the text lmms-eval gets."""

    prompt: str
    text: str


class RelayedScores(ScoreMemo):
    """The task's memo in this process: the hook's score of an answer the run's process scored (relayed with the
    answer: the parser and rules it was scored with, its status and metrics, which is all the ``process_results``
    hook reads of a score), else scored here as ``ScoreMemo`` scores it."""

    def __init__(self) -> None:
        super().__init__()
        self._relayed: dict[tuple[str, str, str, str], SampleScore] = {}

    def put(self, key: str, text: str, msg: Mapping[str, object]) -> None:
        """The score relayed with an answer (its fields read from the run's message)."""
        metrics = object_field(msg.get("metrics"), "metrics")
        for name, value in metrics.items():
            if value is not None and (type(value) not in (int, float)):
                raise BadField(f"metric {name} is {shown(value)}, not a number")
        parser, rules = text_field(msg.get("parser"), "parser"), text_field(msg.get("rules"), "rules")
        status = SampleStatus(text_field(msg.get("status"), "status"))
        self._relayed[(key, text, parser, rules)] = SampleScore(
            key, status, None, (), metrics, parser)  # type: ignore[arg-type]  # (numbers or null, as checked)

    def score(self, doc: Doc, view: View, text: str | None, parser: str, rules: str,
              metric_path: str = DEFAULT_METRIC_PATH) -> SampleScore:
        got = self._relayed.get((doc.key, text, parser, rules)) \
            if text is not None and metric_path == DEFAULT_METRIC_PATH else None
        return got if got is not None else super().score(doc, view, text, parser, rules, metric_path)

    def clear(self) -> None:
        super().clear()
        self._relayed.clear()


class Inbox:
    """The messages of the run, read on a thread of their own from the start (the run never waits on a full pipe
    while lmms-eval imports): answers by key for the part being run, the other messages in order."""

    def __init__(self, stream: IO[str], scores: RelayedScores) -> None:
        self._scores = scores
        self._cond = threading.Condition()
        self._answers: dict[str, Relayed] = {}
        self._rows_path: Path | None = None  # the part's rows file, read at the first answer relayed unscored
        self._rows: dict[str, Mapping[str, object]] | None = None
        self._ops: deque[JsonObject] = deque()
        self._asked = False
        self._stream = stream
        threading.Thread(target=self._read, name="medvision-lmms-inbox", daemon=True).start()

    def _read(self) -> None:
        try:
            self._take_all()
        except Exception:  # a message this process cannot take: it ends, and the run reads its end as an error
            traceback.print_exc(file=sys.stderr)
            os._exit(1)
        os._exit(0)  # the run's process closed its end (it ended, or was killed): nothing here is the run's to keep

    def _take_all(self) -> None:
        for line in self._stream:
            msg = json.loads(line)
            op = msg.get("op")
            if op == "answer":
                key = text_field(msg.get("key"), "answer key")
                answer = Relayed(text_field(msg.get("prompt"), "prompt"), text_field(msg.get("text"), "text"))
                if "status" in msg:  # scored by the run's process: the hook takes that score
                    self._scores.put(key, answer.text, msg)
                elif (row := self._row(key)) is not None:  # scored now, on this thread: the hook after the last
                    _prescore(row, answer.text)  # answer takes the score
                with self._cond:
                    self._answers[key] = answer
                    self._cond.notify_all()
            elif op == "asked":
                with self._cond:
                    self._asked = True
                    self._cond.notify_all()
            else:
                if op == "task":
                    self._rows_path, self._rows = Path(text_field(msg.get("rows"), "rows")), None
                with self._cond:
                    if op == "task":
                        self._answers, self._asked = {}, False
                    self._ops.append(msg)
                    self._cond.notify_all()

    def _row(self, key: str) -> Mapping[str, object] | None:
        """The row of ``key`` in the part being run (its rows read once, here, and only where an answer comes
        without its score: the run's process scores every answer it can)."""
        if self._rows is None:
            self._rows = {} if self._rows_path is None else _rows_by_key(self._rows_path)
        return self._rows.get(key)

    def next_op(self) -> JsonObject:
        """The next task (or quit) message."""
        with self._cond:
            while not self._ops:
                self._cond.wait()
            return self._ops.popleft()

    def wait_for(self, keys: Sequence[str]) -> Mapping[str, Relayed]:
        """The answers of ``keys`` once every one has come; the run said it asked all and some never came: an error."""
        with self._cond:
            while True:
                missing = [k for k in keys if k not in self._answers]
                if not missing:
                    return dict(self._answers)
                if self._asked:
                    raise RuntimeError(f"the run relayed no answer for {len(missing)} of lmms-eval's requests")
                self._cond.wait()


def _rows_by_key(path: Path) -> dict[str, Mapping[str, object]]:
    """The part's rows by sample key (a row's ``key`` is its doc's, as ``RunDoc.to_lmms_row`` writes it: the payload
    is read once, where the answer is scored)."""
    rows: dict[str, Mapping[str, object]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            rows[text_field(row.get("key"), "row key")] = row
    return rows


class PartRundocs:
    """The RunDocs of the rows lmms-eval hands this suite's hooks, each parsed once a part: lmms-eval hands a row to
    a hook for its prompt, again for its target and again for its score, and each would parse the row's payload
    anew. Installed as the hooks' ``rundoc`` in this process only; emptied after each part (what it holds is bounded
    by the part)."""

    def __init__(self, parse: Callable[[Mapping[str, object]], RunDoc]) -> None:
        self._parse = parse
        self._by_payload: dict[object, RunDoc] = {}

    def __call__(self, row: Mapping[str, object]) -> RunDoc:
        payload = row["payload"]
        got = self._by_payload.get(payload) if isinstance(payload, str) else None
        if got is None:
            got = self._parse(row)
            if isinstance(payload, str):
                self._by_payload[payload] = got
        return got

    def clear(self) -> None:
        self._by_payload.clear()


def _prescore(row: Mapping[str, object], text: str) -> None:
    from medvision_bm.tasks import hooks

    try:
        hooks.process_results(row, [text])  # into the memo of the task (``memo_of_task``, held for the process)
    except Exception:
        pass


def _serve(inbox: Inbox, scores: RelayedScores, out: IO[str]) -> None:
    from medvision_bm.runner.harness import HARNESS_MODULES, defer_imports, evaluate_part, quiet_environment
    from medvision_bm.tasks import hooks
    from medvision_bm.tasks.scoring import memo_of_task

    quiet_environment()
    defer_imports()
    rundocs = PartRundocs(hooks.rundoc)
    hooks.rundoc = rundocs  # (this process serves lmms-eval alone: every hook there takes the rows of the part)
    model: object = None
    failed: str | None = None
    # the memo is in place before the import: an answer relayed while lmms-eval imports is scored once, into it
    with memo_of_task(scores) as memo:
        try:
            for name in HARNESS_MODULES:  # all of lmms-eval a part needs, imported while the run asks
                importlib.import_module(name)
            from medvision_bm.models.lmms_models import RelayLMM

            model = RelayLMM(inbox)
        except Exception as exc:  # said in the reply of every part: the run records it as the task's error
            traceback.print_exc(file=sys.stderr)
            failed = redact(f"importing lmms-eval failed: {type(exc).__name__}: {exc}")
        while True:
            msg = inbox.next_op()
            if msg.get("op") != "task":
                return
            reply: JsonObject
            try:
                if failed is not None:
                    raise RuntimeError(failed)
                task_dir = Path(text_field(msg.get("task_dir"), "task_dir"))
                first_row = int_field(msg.get("first_row"), "first_row")
                rows = evaluate_part(model, text_field(msg.get("task"), "task"), task_dir, first_row)
                log = task_dir / f"log-{first_row}.jsonl"
                with open(log, "w", encoding="utf-8") as fh:
                    for row in rows:
                        fh.write(dumps(jsonable(row)) + "\n")
                reply = {"op": "done", "log": str(log)}
            except Exception as exc:
                if failed is None:
                    traceback.print_exc(file=sys.stderr)
                reply = {"op": "error", "message": failed or redact(f"{type(exc).__name__}: {exc}")}
            memo.clear()
            rundocs.clear()
            out.write(json.dumps(reply) + "\n")
            out.flush()


def main(argv: Sequence[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the run's to handle: it closes this process's input
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    in_fd, out_fd = int(argv[0]), int(argv[1])
    out = os.fdopen(out_fd, "w", encoding="utf-8")
    scores = RelayedScores()
    _serve(Inbox(os.fdopen(in_fd, encoding="utf-8"), scores), scores, out)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # nothing held here is the run's: no teardown of lmms-eval's modules for the run's close to wait on
