"""A finished task's record (``.finished.json``): what its store's files were when the run that completed it wrote
results.json, so that a rerun finding every one of them as it was knows, without reading the answers, that nothing
is left to ask or score. A cache: a record that cannot be read, of another version or of other files is ignored."""

from __future__ import annotations

import os
from dataclasses import dataclass

from medvision_bm.io import read_json, write_json_atomic
from medvision_bm.jsontypes import JsonObject, JsonValue
from medvision_bm.store.layout import StoreLayout

#: Bumped when the record's fields change meaning (a record of another version is not used).
VERSION = 1

#: Per file: its path in the store, then size, modification time, change time and inode (None: no such file).
FileIds = list[list[JsonValue]]


def file_ids(files: StoreLayout, *, answers: bool) -> FileIds:
    """The identity of the store's answer segments (``answers``), else of the files a finish writes or reads
    besides them (docs, parsed rows and their index, results, signature). A rewritten, replaced, appended or touched
    file changes at least one of its numbers (the change time cannot be set back)."""
    paths = files.segments() if answers else [
        files.signature, files.docs, files.docs_gone, files.docs_memo, files.docs_sums, files.parsed(),
        files.parsed_index(), files.results()]
    out: FileIds = []
    for path in paths:
        name = str(path.relative_to(files.folder))
        try:
            st = os.stat(path)
        except FileNotFoundError:
            out.append([name, None])
            continue
        out.append([name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
    return out


@dataclass(frozen=True)
class FinishRecord:
    """A complete task's finish: its run signature, what scored it (``scoring``: the parsed rows' scoring key and
    the code), and the identity of the answer segments as they were before the finish read them and of the other
    files as the finish left them."""

    run_signature: str
    scoring: str
    answers: FileIds
    outputs: FileIds

    def to_json(self) -> JsonObject:
        return {"version": VERSION, "run_signature": self.run_signature, "scoring": self.scoring,
                "answers": [*self.answers], "outputs": [*self.outputs]}

    @classmethod
    def from_json(cls, obj: JsonValue) -> FinishRecord | None:
        if not isinstance(obj, dict) or obj.get("version") != VERSION:
            return None
        run_sig, scoring, answers, outputs = (obj.get(k) for k in ("run_signature", "scoring", "answers", "outputs"))
        if not (isinstance(run_sig, str) and isinstance(scoring, str) and isinstance(answers, list)
                and isinstance(outputs, list)):
            return None
        answer_ids = [ids for ids in answers if isinstance(ids, list)]
        output_ids = [ids for ids in outputs if isinstance(ids, list)]
        if len(answer_ids) != len(answers) or len(output_ids) != len(outputs):
            return None  # (an entry that is no list matches no file's identity)
        return cls(run_sig, scoring, answer_ids, output_ids)


def write_finish(files: StoreLayout, run_signature: str, scoring: str, answers: FileIds) -> None:
    """Record a complete task's finish: ``answers`` as taken before the finish read the segments, the other files
    as they are now (results.json written)."""
    record = FinishRecord(run_signature, scoring, answers, file_ids(files, answers=False))
    write_json_atomic(files.finished, record.to_json(), indent=None)


def forget_finish(files: StoreLayout) -> None:
    """Remove the finish record (a finish that is not complete, or not of the whole selection)."""
    try:
        os.unlink(files.finished)
    except FileNotFoundError:
        pass


def unchanged_since_finish(files: StoreLayout, run_signature: str, scoring: str, answers: FileIds) -> bool:
    """Whether the store's last finish completed this very run signature under this scoring, and every answer
    segment (``answers``: their identity now) and every file it wrote or read is still exactly as it was then."""
    try:
        record = FinishRecord.from_json(read_json(files.finished))
    except (OSError, ValueError):
        return False
    return (record is not None and record.run_signature == run_signature and record.scoring == scoring
            and record.answers == answers and record.outputs == file_ids(files, answers=False))
