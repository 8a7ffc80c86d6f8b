"""What the batch-run tests share: the planted key, the stub provider with its batch routes (an answer that depends on
every byte of the request), the `run` flags of each provider's record, and readers of a store's answers and batch
records."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fakes.batch_server import FakeBatches
from fakes.provider_server import FakeProviderServer
from mvtest_support import REPO, TEST_CONTRACT_ENV

PLANTED = "sk-planted-batch-0123456789abcdefghij"
ENV = {"OPENAI_API_KEY": PLANTED, "ANTHROPIC_API_KEY": PLANTED, "GEMINI_API_KEY": PLANTED}
N = 4
#: the registry model of each provider, and the path of its live requests
PROVIDERS = {"openai": ("openai", "/v1/chat/completions"), "anthropic": ("claude", "/v1/messages"),
             "gemini": ("gemini", ":generateContent")}


def answer_of(body: Any) -> str:
    """A box that depends on every byte of the request body: a batch line that differs from the live request in
    any way (prompt, image, settings) gets another answer."""
    h = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()
    a, b = h[0] / 255, h[1] / 255
    return f"<answer>[{a / 2:.3f}, {b / 2:.3f}, {0.5 + a / 2:.3f}, {0.5 + b / 2:.3f}]</answer>"


def run_args(url: str, phantom_dir: Path, tl: Path, results: Path, *, batch: bool = True,
             provider: str = "openai") -> list[str]:
    model, _ = PROVIDERS[provider]
    base = f"{url}/v1" if provider == "openai" else url  # Anthropic's and Google's SDKs add their version
    args = ["run", "--model", model, "--base_url", base, "--data_dir", str(phantom_dir),
            "--tasks_list_json_path", str(tl), "--results_dir", str(results), "--skip_update_status",
            "--skip_env_setup", "--sample_limit", str(N), "--no_progress"]
    return args + (["--batch", "--batch_poll", "0.05"] if batch else [])


def store_of(results: Path) -> Path:
    return next(results.glob("*/*/*/signature.json")).parent


def answers(results: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for seg in (store_of(results) / "samples").glob("*.jsonl"):
        for line in seg.read_text().splitlines():
            rec = json.loads(line)
            out.setdefault(rec["key"], []).append(rec)
    return out


def live_bodies(fake: FakeProviderServer, provider: str = "openai") -> list[dict[str, Any]]:
    return [r.body for r in fake.received if r.path.endswith(PROVIDERS[provider][1])]


def batch_bodies(batches: FakeBatches) -> list[dict[str, Any]]:
    """Every request submitted in a batch, of either interface."""
    inputs = {b.input_file_id for b in batches.batches.values() if b.input_file_id}
    lines = [json.loads(ln)["body"] for f in sorted(inputs) for ln in batches.files[f].splitlines()]
    return lines + [params for b in batches.batches.values() for _, params in b.requests]


def no_key_in(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            assert PLANTED.encode() not in path.read_bytes(), path


@contextlib.contextmanager
def batch_stub() -> Iterator[tuple[FakeProviderServer, FakeBatches]]:
    """The stub provider, serving live and batch requests, answering each body with ``answer_of``."""
    server = FakeProviderServer()
    server.app.answer_fn = answer_of
    batches = FakeBatches(server)
    with server:
        yield server, batches


def popen_cli(args: list[str]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    env.update(TEST_CONTRACT_ENV)
    env.update(ENV)
    return subprocess.Popen([sys.executable, "-m", "medvision_bm.cli", *args], env=env, cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(what: str, check, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def submitted_records(results: Path) -> list[dict[str, Any]]:
    recs = [json.loads(p.read_text()) for p in results.glob("*/*/*/batches/*.json")]
    return [r for r in recs if r.get("batch_id")]
