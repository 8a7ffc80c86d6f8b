"""The records of a store's files: one frozen class per file shape, each with its version, ``to_json`` and
``from_json``. Nothing else builds one of these files as a dict or reads it field by field.

JSON lines (``AnswerRecord``, ``DocRow``, ``ParsedRow``) carry their version as ``"v"`` from version 2 on: a line
without one is version 1, which every line written so far is. So the lines of older stores read as they are, and a
line written now is byte for byte what the code before these records wrote (docs.jsonl rows are merged by their
bytes, answer lines are known by their hash). JSON files (``ResultsRecord``, ``SignatureRecord``, ``JudgeFile``)
carry theirs in ``schema``, as they always have. A record of a newer version than this code knows is refused with
a one-line error naming the file (``NewerRecord``, a user error that no reader skips as a damaged line), never half
read or overwritten. ``from_json`` keeps the fields it does not know (``extra``), so a file read and
written again loses nothing.

One module per record kind, all importable from here: ``record_base`` (what they share), ``answer_record``,
``doc_row``, ``parsed_row``, ``results_record`` and ``signed_files`` (``signature.json`` and ``judge.json``).
"""

from medvision_bm.store.answer_record import (
    USAGE_FIELDS,
    AnswerRecord,
    AnswerStatus,
    AnswerText,
    answer_identity,
    answer_problem,
    answer_text,
)
from medvision_bm.store.doc_row import DocRow
from medvision_bm.store.parsed_row import ParsedRow, group_fields
from medvision_bm.store.record_base import (
    NO_EXTRA,
    NewerRecord,
    RecordError,
    iter_lines,
    iter_lines_with,
    refuse_newer_in,
    refuse_newer_line,
    refuse_newer_lines,
)
from medvision_bm.store.results_record import (
    JUDGED_SCHEMA,
    RESULTS_SCHEMA,
    Counts,
    ResultsRecord,
    Selection,
    Usage,
)
from medvision_bm.store.signed_files import STORE_SCHEMA, JudgeFile, SignatureRecord

__all__ = [
    "JUDGED_SCHEMA", "NO_EXTRA", "RESULTS_SCHEMA", "STORE_SCHEMA", "USAGE_FIELDS", "AnswerRecord", "AnswerStatus", "AnswerText",
    "Counts", "DocRow", "JudgeFile", "NewerRecord", "ParsedRow", "RecordError", "ResultsRecord", "Selection", "SignatureRecord", "Usage",
    "answer_identity", "answer_problem", "answer_text", "group_fields", "iter_lines", "iter_lines_with", "refuse_newer_in",
    "refuse_newer_line", "refuse_newer_lines",
]
