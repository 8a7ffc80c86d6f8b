"""An API run's harness: this process asks every request, lmms-eval runs the task loop in a process of its own.

An API model has nothing to load but lmms-eval, whose import takes seconds of CPU and holds the interpreter while it
runs (the requests, encodings and stores of a run in the same process wait for it). ``ProcessHarness`` starts
``runner.lmms_worker`` as soon as the run finds a task whose store is not finished (``start``: lmms-eval's import
begins there, on another core, beside the store's reading), or else when the run's first part is handed to it, and
asks the part's samples through the run's claims and backend, storing each answer the moment it lands
(the requests are the ones lmms-eval makes of the rows: ``harness.request_for``). Each answer is relayed to the
worker with the hook's score of it (made here once, through the task's memo, which the run's own scoring takes), and
the worker's lmms-eval asks for the part's requests and gets those answers and scores; its per-sample log comes back
with the part (the last part's is taken once the run has scored the task: ``PendingPart``, lmms-eval's loop over the
part runs meanwhile). A run killed at any point keeps every answer it stored; the worker ends with the run.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

from medvision_bm.data.docs import RunDoc
from medvision_bm.jsontypes import JsonObject
from medvision_bm.limits import text_field
from medvision_bm.models.base import Backend, GenRequest, GenResult
from medvision_bm.models.claimed import answer_text, ask_claimed
from medvision_bm.runner.harness import (
    LogRow,
    TaskRun,
    datasets_cache,
    part_rows_path,
    quiet_environment,
    request_for,
    write_part,
)
from medvision_bm.secrets import KEY_ENV_VARS
from medvision_bm.tasks.scoring import hook_score, protocol_settings

#: seconds ``close`` waits for the worker to end before it is killed (it has nothing to finish once told to quit)
CLOSE_WAIT_S = 10.0


class _Worker:
    """The lmms-eval process and its two pipes; messages to it go through a queue and a thread of their own, so the
    callbacks that relay answers never wait on the pipe."""

    def __init__(self, workdir: Path) -> None:
        quiet_environment()  # inherited: offline hub, no third-party bars
        env = {k: v for k, v in os.environ.items() if k not in KEY_ENV_VARS}  # it asks nothing: no provider key
        env.setdefault("HF_DATASETS_CACHE", datasets_cache(workdir))
        to_read, to_write = os.pipe()
        from_read, from_write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "medvision_bm.runner.lmms_worker", str(to_read), str(from_write)],
                pass_fds=(to_read, from_write), stdin=subprocess.DEVNULL, stdout=2, env=env)
        finally:
            os.close(to_read)
            os.close(from_write)
        self._to = os.fdopen(to_write, "w", encoding="utf-8")
        self._from = os.fdopen(from_read, encoding="utf-8")
        self._outgoing: queue.SimpleQueue[JsonObject | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._send_all, name="medvision-lmms-relay", daemon=True)
        self._sender.start()

    def _send_all(self) -> None:
        try:
            while (msg := self._outgoing.get()) is not None:
                self._to.write(json.dumps(msg) + "\n")
                if self._outgoing.empty():
                    self._to.flush()
        except OSError:  # the worker is gone: its end is read as such by reply()
            pass
        finally:
            try:
                self._to.close()
            except OSError:
                pass

    def send(self, msg: JsonObject) -> None:
        self._outgoing.put(msg)

    def reply(self) -> JsonObject:
        line = self._from.readline()
        if not line:
            code = self.proc.wait()
            raise RuntimeError(f"lmms-eval's process ended (exit code {code}) before it ran the task; its messages "
                               "are above")
        msg: JsonObject = json.loads(line)
        return msg

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        self.send({"op": "quit"})
        self._outgoing.put(None)  # the sender closes the pipe: the worker ends when it reads its end
        self._sender.join(timeout=wait_s)
        try:
            self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._from.close()

    def kill(self) -> None:
        self.proc.kill()
        self.close(wait_s=1.0)


def hook_score_message(rd: RunDoc, text: str) -> JsonObject:
    """The score lmms-eval's ``process_results`` hook makes of an answer, made here through the task's memo (the
    score this run's own scoring takes too: each answer is scored once), as the fields relayed beside the answer:
    its parser, rules, status and metrics. Nothing when it cannot be made here: lmms-eval's process scores it."""
    settings = protocol_settings(rd.protocol)
    try:
        sc = hook_score(rd.doc, rd.view, text, settings.parser, settings.rules)
    except Exception:  # (the hook in lmms-eval's process meets the same error, and says it there)
        return {}
    return {"parser": settings.parser, "rules": settings.rules, "status": str(sc.status),
            "metrics": dict(sc.metrics)}


class ProcessHarness:
    """Runs an API model's tasks: asks each part here, lmms-eval's loop over the part in ``runner.lmms_worker``."""

    def __init__(self, backend: Backend, workdir: Path) -> None:
        self.backend = backend
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._worker: _Worker | None = None

    def start(self) -> None:
        """Start lmms-eval's process unless it runs: its import goes on beside whatever this process does next (the
        store's reading, the asking). ``run`` starts it when nothing did before."""
        if self._worker is not None and self._worker.proc.poll() is not None:  # it ended (its error was said)
            self._worker.close(wait_s=1.0)
            self._worker = None
        if self._worker is None:
            self._worker = _Worker(self.workdir)

    def run(self, spec: TaskRun) -> list[LogRow]:
        """Ask every sample of the part (each answer stored through ``spec.on_result`` as it lands) while lmms-eval
        runs the part over the answers; returns lmms-eval's per-sample log (without the docs)."""
        return [json.loads(line) for line in self.ask(spec).log_lines()]

    def ask(self, spec: TaskRun) -> PendingPart:
        """``run`` up to the last answer: every sample of the part asked and its answer relayed; lmms-eval's loop over
        the part may still be going on, and its per-sample log is the returned part's (``PendingPart.log_lines``)."""
        self.start()
        worker = self._worker
        assert worker is not None
        part_rows = [rd.to_lmms_row() for rd in spec.rundocs]  # made once: written for lmms-eval, and asked
        # every request made before lmms-eval is told of the part: a request that cannot be made (a bad row) fails
        # the part here, with lmms-eval still waiting for the next part, not for this one's answers
        requests: dict[str, GenRequest] = {
            rd.doc.key: request_for(rd, spec.gen, spec.system_prompt, self.backend, row)
            for rd, row in zip(spec.rundocs, part_rows, strict=True)}
        task_dir = write_part(self.workdir, spec, part_rows)
        worker.send({"op": "task", "task": spec.task, "task_dir": str(task_dir),
                     "rows": str(part_rows_path(task_dir, spec.first_row)), "first_row": spec.first_row})
        texts: dict[str, str] = {}

        def on_result(res: GenResult) -> None:
            request = requests[res.key]
            request.release_images()
            text = answer_text(res)
            spec.on_result(res)  # stored first: a kill while it is scored loses nothing
            scored = hook_score_message(request.rundoc, text)  # (the store's scoring takes this score if it is first)
            worker.send({"op": "answer", "key": res.key, "prompt": request.prompt, "text": text, **scored})

        try:
            ask_claimed(self.backend, dict(requests), on_result, spec.claims, spec.chunk, texts)
        except BaseException:  # the part is not finished: the worker's lmms-eval waits for answers that never come
            self.give_up(worker)
            raise
        for key, text in texts.items():  # answered by another run, or not asked (a spent --max_cost)
            worker.send({"op": "answer", "key": key, "prompt": requests[key].prompt, "text": text})
        worker.send({"op": "asked"})
        return PendingPart(self, worker)

    def give_up(self, worker: _Worker) -> None:
        """End ``worker`` (a part it runs is given up); the next part starts a fresh one."""
        if self._worker is worker:
            self._worker = None
        worker.kill()

    def close(self) -> None:
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.close()


class PendingPart:
    """A part whose every answer is stored and relayed, while lmms-eval's process may still be running its loop over
    the part: the run does what needs no log meanwhile (its own scoring of the task), then takes the log."""

    def __init__(self, harness: ProcessHarness, worker: _Worker) -> None:
        self._harness = harness
        self._worker: _Worker | None = worker

    def log_lines(self) -> list[str]:
        """lmms-eval's per-sample log of the part once its process has run it, one line a row as it was written
        there (``dumps(jsonable(row))``: what ``SamplesLog`` writes of a row); its error as a RuntimeError."""
        worker, self._worker = self._worker, None
        if worker is None:
            raise RuntimeError("the part's log was taken already, or its lmms-eval process was ended")
        try:
            reply = worker.reply()
        except BaseException:
            self._harness.give_up(worker)
            raise
        if reply.get("op") != "done":
            raise RuntimeError(f"lmms-eval: {reply.get('message')}")
        log = Path(text_field(reply.get("log"), "log"))
        with open(log, encoding="utf-8") as fh:
            lines = list(fh)
        log.unlink()
        return lines

    def abandon(self) -> None:
        """Give the part up (the run stopped before it took the log): its lmms-eval process is ended."""
        worker, self._worker = self._worker, None
        if worker is not None:
            self._harness.give_up(worker)
