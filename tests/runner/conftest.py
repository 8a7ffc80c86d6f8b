"""Fixtures of the provider-batch runs' tests: the local batch stub server and a one-task tasks list."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batch_support import N, batch_stub
from mvtest_support import phantom_list


@pytest.fixture()
def stub() -> Iterator[Any]:
    """A local server speaking each provider's batch wire format (``batch_support.batch_stub``)."""
    with batch_stub() as served:
        yield served


@pytest.fixture()
def task_list(tmp_path: Path, phantom_lists: Path) -> Path:
    """A tasks list of the phantom's first detection task, N samples."""
    task = next(iter(phantom_list(phantom_lists, "detect")))
    tl = tmp_path / "tasks.json"
    tl.write_text(json.dumps({task: N}))
    return tl
