"""Two `medvision-bm judge` runs on one store at once share its answers through the runner's claims: a local HTTP
server playing the judge (OpenAI wire format) counts what it is asked, and no response is asked twice."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from fakes.provider_server import FakeProviderServer, Received, _App, _openai_answer
from mvtest_support import REPO
from phantom_runs import cli_env, run_baseline

pytestmark = pytest.mark.slow


class CountingJudge(_App):
    """Answers every judge request with the contract's ``no_conclusion`` and counts the responses it was asked
    about. The first request is held until a second one is in flight (or ``hold_s`` passed): two judge runs started
    together are then both asking before either has stored anything."""

    def __init__(self, hold_s: float = 4.0) -> None:
        super().__init__()
        self.hold_s = hold_s
        self.asked: Counter[str] = Counter()

    async def _handle(self, request: web.Request, flavor: str) -> web.StreamResponse:
        body = json.loads(await request.read())
        user = body["messages"][-1]["content"]
        user = user if isinstance(user, str) else "".join(p.get("text", "") for p in user)
        with self.lock:
            self.received.append(Received(request.method, request.path, dict(request.headers), body, time.time()))
            first = len(self.received) == 1
            self.asked[user.split("RESPONSE:\n<<<\n", 1)[1].rsplit("\n>>>", 1)[0]] += 1
        if first:
            until = time.monotonic() + self.hold_s
            while self.in_flight < 2 and time.monotonic() < until:
                await asyncio.sleep(0.02)
        else:
            await asyncio.sleep(0.02)
        text = json.dumps({"final_answer": {"status": "no_conclusion", "span": "", "values": []}})
        return web.json_response(_openai_answer(body["model"], text, "stop"))


def test_two_judge_runs_on_one_store_never_ask_about_one_answer_twice(phantom_dir: Path, phantom_lists: Path,
                                                                      tmp_path: Path) -> None:
    root = tmp_path / "res"
    out = run_baseline("oracle", "AD", phantom_dir, root / "AD", "--sample_limit", "8", lists=phantom_lists)
    assert all(o.state == "done" for o in out), out
    answers = [json.loads(line) for seg in root.rglob("samples/*.jsonl") for line in seg.read_text().splitlines()]
    distinct = {a["text"] for a in answers if a["status"] == "ok"}
    assert len(answers) == 16 and len(distinct) > 8

    server = FakeProviderServer()
    server.app = CountingJudge()
    server.start()
    try:
        argv = [sys.executable, "-m", "medvision_bm.cli", "judge", "--results_dir", str(root), "--judge_model",
                "gemma4", "--base_url", server.url, "--concurrency", "1", "--min_valid_rate", "0"]
        procs = [subprocess.Popen(argv, cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        server.stop()
    for p, (_, stderr) in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in stderr, stderr[-3000:]
    asked = server.app.asked
    assert set(asked) == distinct  # every response was judged ...
    assert max(asked.values()) == 1, [r for r, n in asked.items() if n > 1]  # ... by one run only
    for parsed in root.rglob("judged/*/results.json"):  # both runs' replies count: every answer judged
        res = json.loads(parsed.read_text())
        assert res["complete"] and res["counts"]["judged"] == res["counts"]["answered"] == 8, res["counts"]
    assert not list(root.rglob("judged/*/claims/*")), "claims left behind"
