"""Fixtures for the API backend tests: a fake provider server, a fake clock, a backend builder."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fakes.clock import FakeClock
from fakes.provider_server import FakeProviderServer
from fakes.samples import KEYS, WIRES
from medvision_bm.models.api import build_api_backend
from medvision_bm.models.api.engine import ApiBackend


@pytest.fixture()
def fake() -> Iterator[FakeProviderServer]:
    with FakeProviderServer() as server:
        yield server


@pytest.fixture()
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture()
def backend(fake: FakeProviderServer, clock: FakeClock) -> Iterator[Callable[..., ApiBackend]]:
    """build(wire, **options): a backend of that wire format pointed at the fake server, on the fake clock."""
    made: list[ApiBackend] = []

    def build(wire: str, env: dict[str, str] | None = None, **options: Any) -> ApiBackend:
        kind, base = WIRES[wire]
        opts = {**base, "base_url": [fake.url], "max_retries": 3, "request_timeout": 5.0, **options}
        b = build_api_backend(kind, opts, clock=clock, environ=KEYS if env is None else env)
        made.append(b)
        return b

    yield build
    for b in made:
        b.close()
