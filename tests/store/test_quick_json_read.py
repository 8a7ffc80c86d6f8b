"""A small JSON file of the suite's is read quickly when it is strict JSON, and as before otherwise: the values are
the ones ``json`` reads (a NaN as None, a big integer exact), a file that is not regular is refused unread."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from medvision_bm import limits
from medvision_bm.store.records import ResultsRecord, SignatureRecord

CASES = [
    '{"schema": "medvision-results/1", "x": [1.5, -0.0, 1e300, 0.1]}',
    '{"schema":"medvision-results/1","x":NaN}',
    '{"schema":"medvision-results/1","x":-Infinity}',
    '{"schema":"medvision-results/1","x":123456789012345678901234567890}',
    '{"schema":"medvision-results/1","x":18446744073709551616}',
    '{"schema":"medvision-results/1","x":"\\ud800"}',
    '{"schema":"medvision-results/1","x":{"a":1,"a":2}}',
]


@pytest.mark.parametrize("text", CASES)
def test_values_as_json_reads_them(tmp_path: Path, text: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(text)
    rec = ResultsRecord.read(path)
    assert rec is not None
    expected = limits.finite_only(json.loads(text))["x"]
    assert repr(rec.extra["x"]) == repr(expected)


def test_an_unreadable_file_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(b'{"schema": "medvision-results/1", "x": "\xff"}')
    assert ResultsRecord.read(path) is None
    path.write_text("[" * 600 + "]" * 600)
    assert ResultsRecord.read(path) is None


def test_a_fifo_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "signature.json"
    os.mkfifo(path)
    with pytest.raises(OSError):
        SignatureRecord.read(path)


@pytest.mark.parametrize("text", CASES)
def test_read_json_gives_json_values(tmp_path: Path, text: str) -> None:
    """``io.read_json`` (orjson for strict JSON, ``json`` for the rest): the values and types ``json`` reads, NaN
    kept unless ``finite`` is asked."""
    from medvision_bm.io import read_json

    path = tmp_path / "file.json"
    path.write_text(text)
    assert repr(read_json(path)) == repr(json.loads(text))
    assert repr(read_json(path, finite=True)) == repr(limits.finite_only(json.loads(text)))
