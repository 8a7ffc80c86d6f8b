"""Scores made as a run's answers land and persisted in bounded checkpoints (``store.scores``), so that a run killed
before its task's scoring leaves them behind and its resume scores only the answers that have none.

The scoring happens in a thread of its own, off the path that asks and stores: each stored answer is handed over
(``add``), scored as ``score.follow`` scores it (``score_sample`` through the task's ``ScoreMemo``, so lmms-eval's
``process_results`` hook takes the same score instead of making it again) and appended to the writer's score file a
checkpoint at a time. A persisted score is only ever a shortcut: ``follow`` takes one for the very same scoring key,
doc hash and answer line, else it scores the answer itself.
"""

from __future__ import annotations

import queue
import sys
import threading

from medvision_bm.data.docs import RunDoc
from medvision_bm.score.follow import persisted_score
from medvision_bm.score.store_scoring import scoring_key
from medvision_bm.store.layout import StoreLayout
from medvision_bm.store.records import AnswerRecord, ParsedRow
from medvision_bm.store.scores import ScoreAppender
from medvision_bm.tasks.scoring import DEFAULT_METRIC_PATH, ScoreMemo, protocol_settings, score_answer

#: A checkpoint: the scores gathered are written once this many have gathered or this many seconds have passed.
CHECKPOINT_SCORES = 512
CHECKPOINT_SECONDS = 1.0


class ScoreCheckpoint:
    """Scores the answers one writer stores, in a thread, into ``scores/<writer>.jsonl`` (``close`` writes the last
    checkpoint and waits for the thread)."""

    def __init__(self, files: StoreLayout, writer: str, family: str, protocol: str, memo: ScoreMemo | None = None,
                 *, every: int = CHECKPOINT_SCORES, seconds: float = CHECKPOINT_SECONDS) -> None:
        settings = protocol_settings(protocol)
        self.family, self.parser, self.rules = family, settings.parser, settings.rules
        self.scoring = scoring_key(family, protocol)
        self.memo = memo
        self.out = ScoreAppender(files.score_file(writer), every=every, seconds=seconds)
        self.error: str | None = None
        # bounded: answers that land faster than they are scored wait for the thread (memory stays flat in N)
        self._queue: queue.Queue[tuple[RunDoc, str, AnswerRecord] | None] = queue.Queue(maxsize=4 * every)
        self._thread = threading.Thread(target=self._work, name="score-checkpoint", daemon=True)
        self._thread.start()

    @property
    def scored(self) -> int:
        """Answers scored and persisted."""
        return self.out.written

    def add(self, rd: RunDoc, doc_sha: str, rec: AnswerRecord) -> None:
        """An answer just stored (an ok one is scored; a failed request is left to the task's scoring)."""
        if rec.ok and self.error is None:
            self._put((rd, doc_sha, rec))

    def _put(self, item: tuple[RunDoc, str, AnswerRecord] | None) -> None:
        while self._thread.is_alive():  # a thread that stopped takes nothing more
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    def _work(self) -> None:
        seconds = self.out.seconds
        while True:
            try:
                item = self._queue.get(timeout=seconds)
            except queue.Empty:
                item = ()  # type: ignore[assignment]  # idle: a checkpoint that waited is written
            try:
                if item is None:
                    return
                if item:
                    self._score(*item)
                elif self.out.due():
                    self.out.flush()
            except Exception as exc:  # a score not persisted is made again by the task's scoring
                self.error = f"{type(exc).__name__}: {exc}"
                return

    def _score(self, rd: RunDoc, doc_sha: str, rec: AnswerRecord) -> None:
        doc = rd.doc
        if self.memo is not None:
            sc = self.memo.score(doc, rd.view, rec.text, self.parser, self.rules, DEFAULT_METRIC_PATH)
        else:
            sc = score_answer(doc, rd.view, rec.text, self.parser, self.rules, DEFAULT_METRIC_PATH)
        self.out.add(persisted_score(self.family, self.scoring, doc_sha, rec,
                                     ParsedRow.of_score(doc, sc, self.rules)))

    def close(self) -> None:
        """Score what was handed over, write the last checkpoint and close the file."""
        self._put(None)
        self._thread.join()
        try:
            self.out.close()
        except OSError as exc:
            self.error = self.error or f"{type(exc).__name__}: {exc}"
        if self.error is not None:
            print(f"scores of this run's answers not all persisted ({self.error}); the task's scoring makes them",
                  file=sys.stderr)
