"""Early answers: a task's first to-do samples asked in a background thread while lmms-eval loads.

Importing lmms-eval takes seconds (5-6 s with bytecode on an idle machine, 14-34 s on a loaded one or without
bytecode). An API run has nothing to load but lmms-eval, so without this its first request waits that long. The
runner starts an :class:`EarlyAnswers` before it builds the harness: it claims the to-do samples a chunk at a time,
builds each request from the row lmms-eval will get (the same hook functions make the prompt and the image), asks the
backend and stores every answer the moment it lands, as the harness would. When lmms-eval's own requests arrive, the
harness stops it (the chunk in flight is finished) and hands lmms-eval the answers already stored for the requests
whose prompt and image hook are the ones asked; any other request is asked again.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from medvision_bm.data.docs import RunDoc
from medvision_bm.models.base import Backend, GenRequest, GenResult, GenSettings
from medvision_bm.models.claimed import ClaimSource
from medvision_bm.tasks import hooks

#: seconds an aborted run waits for the chunk in flight before it stops storing what the thread still gets
ABANDON_WAIT_S = 5.0

#: the interpreter's thread switch interval (seconds; Python's default is 0.005) while early answers run: the import
#: of lmms-eval beside them holds the GIL in slices this long, and the backend's event loop and encoder threads wait
#: for the end of one to send each request or take each answer
EARLY_SWITCH_S = 0.001


@dataclass(frozen=True)
class EarlyAnswer:
    """One sample asked early: the prompt it was asked with and its final result (stored)."""

    prompt: str
    result: GenResult


def request_for(rd: RunDoc, gen: GenSettings, system_prompt: str | None, backend: Backend) -> GenRequest:
    """The request lmms-eval makes of a sample's row with this suite's templates: the prompt and the image from the
    hooks of the task (the grey slice where the backend takes it), so an answer asked outside lmms-eval (early, or
    in a provider batch) is the answer to the very request a live run sends."""
    row = rd.to_lmms_row()
    visual = hooks.doc_to_visual_gray if getattr(backend, "takes_gray_slices", False) else hooks.doc_to_visual
    return GenRequest(key=rd.doc.key, prompt=hooks.doc_to_text(row), rundoc=rd, gen=gen, system_prompt=system_prompt,
                      image_loader=functools.partial(visual, row))


class EarlyAnswers:
    """Asks ``todo`` (in order, a claimed chunk at a time) on a daemon thread until :meth:`finish` is called."""

    def __init__(self, backend: Backend, todo: Sequence[RunDoc], gen: GenSettings, system_prompt: str | None,
                 on_result: Callable[[GenResult], None], claims: ClaimSource | None,
                 chunk: int) -> None:
        self.backend = backend
        self.todo = list(todo)
        self.gen = gen
        self.system_prompt = system_prompt
        self.on_result = on_result
        self.claims = claims
        self.chunk = max(1, chunk)
        self.answers: dict[str, EarlyAnswer] = {}
        #: keys another run answered, as the claims said while this thread claimed (said once: the harness's own
        #: claims would not hear of them again)
        self.elsewhere: set[str] = set()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # serialises stores with abandon(): nothing is stored after it returns
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="medvision-early-answers", daemon=True)
        self._switch: float | None = None  # the switch interval to restore once stopped

    def start(self) -> EarlyAnswers:
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, EARLY_SWITCH_S))
        self._thread.start()
        return self

    def _restore_switch(self) -> None:
        if self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None

    def _request(self, rd: RunDoc) -> GenRequest:
        return request_for(rd, self.gen, self.system_prompt, self.backend)

    def _store(self, requests: dict[str, GenRequest], res: GenResult) -> None:
        request = requests[res.key]
        request.release_images()
        with self._lock:
            if self._closed:  # the run was aborted: the harness no longer expects this answer
                return
            self.on_result(res)
            self.answers[res.key] = EarlyAnswer(request.prompt, res)

    def _work(self) -> None:
        by_key = {rd.doc.key: rd for rd in self.todo}
        keys = [rd.doc.key for rd in self.todo]
        queue = self.claims.queue(keys) if self.claims is not None else None
        at = 0
        try:
            while not self._stop.is_set():
                if queue is None:
                    mine, at = keys[at: at + self.chunk], at + self.chunk
                else:
                    mine, elsewhere, _wait = queue.next(self.chunk)
                    self.elsewhere.update(elsewhere)
                if not mine:  # all asked, or the rest is another live run's for now: the harness waits for it
                    break
                requests = {k: self._request(by_key[k]) for k in mine}
                self.backend.generate(list(requests.values()), functools.partial(self._store, requests))
        except BaseException as exc:  # the harness re-raises it in the main thread
            self.error = exc

    def finish(self) -> dict[str, EarlyAnswer]:
        """Stop after the chunk in flight; the answers stored so far, by key (re-raises what broke the thread)."""
        self._stop.set()
        self._thread.join()
        self._restore_switch()
        if self.error is not None:
            raise self.error
        return self.answers

    def abandon(self) -> None:
        """Stop without waiting for long: what lands after a short wait is not stored (the run is ending)."""
        self._stop.set()
        self._thread.join(timeout=ABANDON_WAIT_S)
        self._restore_switch()
        with self._lock:
            self._closed = True
