"""An API run asks its samples in its own process while lmms-eval loads and runs in another
(``runner.lmms_process``): the first request does not wait for the import, every sample is asked once, what was
asked is stored the moment it lands (a run killed before lmms-eval is up loses nothing), lmms-eval's loop gets the
very answers asked, a request lmms-eval makes that differs from the one asked ends the task, and lmms-eval's process
ends with the run."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fakes.provider_server import FakeProviderServer
from medvision_bm.data.docs import RunDoc
from medvision_bm.data.layout import DataDir
from medvision_bm.io import dumps, jsonable
from medvision_bm.models.base import GenRequest, GenResult, GenSettings, SyncBackend
from medvision_bm.models.registry import get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.runner.harness import TaskRun
from medvision_bm.runner.loop import prepare_task
from mvtest_support import REPO, TEST_CONTRACT_ENV, phantom_list

pytestmark = pytest.mark.slow

#: Holds the first import of lmms_eval until the test says a request reached the provider (or MV_GATE_S seconds
#: pass), and writes which of the two came first: without early answers no request comes before lmms-eval is up.
GATE = """
import importlib.abc, importlib.machinery, os, pathlib, sys, time
_MARK = pathlib.Path(os.environ["MV_GATE_MARK"])

class _Held(importlib.abc.Loader):
    # runs lmms_eval's own loader once the gate opens; waits in exec_module, where only lmms_eval's module lock is
    # held (a finder runs under the interpreter's global import lock: waiting there would stop every thread's imports)
    def __init__(self, real):
        self.real = real
    def __getattr__(self, name):
        return getattr(self.real, name)
    def create_module(self, spec):
        return self.real.create_module(spec)
    def exec_module(self, module):
        deadline = time.monotonic() + float(os.environ.get("MV_GATE_S", "60"))
        while not _MARK.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        _MARK.with_suffix(".said").write_text("request first" if _MARK.exists() else "import first")
        self.real.exec_module(module)

class _Gate(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "lmms_eval":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = _Held(spec.loader)
        return spec

sys.meta_path.insert(0, _Gate())
"""


def _start(tmp_path: Path, fake: FakeProviderServer, tasks: Path, gate_s: float = 60) -> subprocess.Popen:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(GATE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    env.update(TEST_CONTRACT_ENV, PYTHONPATH=os.pathsep.join([str(site), env.get("PYTHONPATH", "")]),
               MV_GATE_MARK=str(tmp_path / "gate"), MV_GATE_S=str(gate_s))
    args = ["run", "--model", "openai-compatible", "--base_url", f"{fake.url}/v1", "--model_name", "early",
            "--data_dir", str(tmp_path / "Data"), "--tasks_list_json_path", str(tasks), "--results_dir",
            str(tmp_path / "res"), "--task_status_json_path", str(tmp_path / "status.json"), "--skip_env_setup",
            "--batch_size", "2", "--no_progress"]
    return subprocess.Popen([sys.executable, "-m", "medvision_bm.cli", *args], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _posts(fake: FakeProviderServer) -> int:
    return sum(1 for r in fake.received if r.path.endswith("/chat/completions"))


def _open_gate_on_first_request(tmp_path: Path, fake: FakeProviderServer) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + 120
        while not _posts(fake) and time.monotonic() < deadline:
            time.sleep(0.02)
        (tmp_path / "gate").write_text("")

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


@pytest.fixture()
def one_task(tmp_path: Path, phantom_dir: Path, phantom_lists: Path) -> tuple[Path, int]:
    (tmp_path / "Data").symlink_to(phantom_dir)
    task, n = next(iter(phantom_list(phantom_lists, "AD").items()))
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps({task: n}))
    return p, n


def test_the_first_request_does_not_wait_for_lmms_eval_and_every_sample_is_asked_once(tmp_path, one_task):
    tasks, n = one_task
    with FakeProviderServer(answer="<answer>31.5</answer>") as fake:
        _open_gate_on_first_request(tmp_path, fake)
        proc = _start(tmp_path, fake, tasks)
        _out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert (tmp_path / "gate.said").read_text() == "request first", "the first request waited for lmms-eval"
        assert _posts(fake) == n, "a sample asked while lmms-eval loaded was asked again"
    results = json.loads(next((tmp_path / "res").glob("early/*/*/results.json")).read_text())
    assert results["complete"] and results["counts"]["answered"] == n
    assert results["counts"]["asked_this_run"] == n and results["metrics"]["SuccessRate"] == 1.0
    samples = [json.loads(line) for p in (tmp_path / "res").glob("early/*/*/lmms_eval/samples_*.jsonl")
               for line in p.read_text().splitlines()]
    assert len(samples) == n and all("31.5" in json.dumps(s["resps"]) for s in samples), \
        "lmms-eval got the stored answers of the samples asked early"


def test_a_run_killed_before_lmms_eval_loads_keeps_what_it_asked(tmp_path, one_task):
    tasks, n = one_task
    with FakeProviderServer(answer="<answer>12.0</answer>") as fake:
        proc = _start(tmp_path, fake, tasks, gate_s=300)  # the gate stays shut: lmms-eval never loads
        deadline = time.monotonic() + 120
        segment = None
        while time.monotonic() < deadline:
            stores = list((tmp_path / "res").glob("early/*/*"))
            lines = [p for s in stores for p in s.glob("samples/*.jsonl")]  # the store's answer segments
            if _posts(fake) >= n and lines and sum(len(p.read_text().splitlines()) for p in lines) >= n:
                segment = lines
                break
            time.sleep(0.05)
        assert segment, "the early answers were not stored while lmms-eval was held"
        assert not (tmp_path / "gate.said").exists(), "lmms-eval must still be held when the run is killed"
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        before = _posts(fake)
        (tmp_path / "gate").write_text("")  # the rerun's lmms-eval loads at once
        again = _start(tmp_path, fake, tasks)
        _out, err = again.communicate(timeout=600)
        assert again.returncode == 0, err[-3000:]
        assert _posts(fake) == before, "a sample answered before the kill was asked again"
    results = json.loads(next((tmp_path / "res").glob("early/*/*/results.json")).read_text())
    assert results["complete"] and results["counts"]["asked_this_run"] == 0


class _Recording(SyncBackend):
    name = "recording"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.asked: list[str] = []
        self.delay_s = delay_s

    def answer(self, request: GenRequest) -> GenResult:
        time.sleep(self.delay_s)
        self.asked.append(request.key)
        return GenResult(request.key, "<answer>1</answer>")


@pytest.fixture()
def make_rundocs(tmp_path, phantom_dir, phantom_lists, clean_env):
    """``make_rundocs(n)``: n phantom A/D samples as asked (keys k0..k{n-1}, the task's samples over again)."""
    task, n_task = next(iter(phantom_list(phantom_lists, "AD").items()))
    tl = tmp_path / "tasks_unit.json"
    tl.write_text(json.dumps({task: n_task}))
    record = get_record("oracle")
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl), "--results_dir", str(tmp_path / "r"),
            "--skip_env_setup", "--no_progress"]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)
    base = prepare_task(cfg, DataDir(cfg.contract), task).samples.all_rundocs()

    def make(n: int) -> list[RunDoc]:
        return [dataclasses.replace(rd, doc=dataclasses.replace(rd.doc, key=f"k{i}"))
                for i, rd in zip(range(n), itertools.cycle(base))]

    return make


def _harness(tmp_path: Path, backend):
    from medvision_bm.runner.lmms_process import ProcessHarness

    return ProcessHarness(backend, tmp_path / "work")


def test_every_sample_is_asked_once_stored_as_it_lands_and_lmms_eval_logs_those_answers(tmp_path, make_rundocs):
    pytest.importorskip("lmms_eval")
    backend, stored = _Recording(), []
    harness = _harness(tmp_path, backend)
    try:
        for first_row, n in ((0, 12), (12, 5)):  # two parts through one lmms-eval process
            stored.clear()
            rundocs = make_rundocs(n)
            rows = harness.run(TaskRun("t_api", "AD", rundocs, GenSettings(), None, lambda r: stored.append(r.key),
                                       first_row=first_row))
            assert sorted(stored) == sorted(rd.doc.key for rd in rundocs)
            assert [r["doc_id"] for r in rows] == list(range(first_row, first_row + n))
            assert all(r["resps"] == [["<answer>1</answer>"]] for r in rows), "lmms-eval got the answers asked"
        assert len(backend.asked) == 17 == len(set(backend.asked)) + 5, "each sample asked once per part"
        worker = harness._worker
        assert worker is not None and worker.proc.poll() is None
        from medvision_bm.runner.lmms_worker import WORKER_NICE

        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, worker.proc.pid) == min(19, ours + WORKER_NICE), \
            "lmms-eval's process yields the CPU to the run's asking"
    finally:
        harness.close()
    assert worker.proc.poll() == 0, "lmms-eval's process ends when the run closes the harness"


def test_a_request_lmms_eval_makes_with_another_prompt_ends_the_task(tmp_path, make_rundocs, monkeypatch):
    pytest.importorskip("lmms_eval")
    from medvision_bm.runner import lmms_process

    real = lmms_process.request_for

    def reworded(rd, *args):
        request = real(rd, *args)
        if rd.doc.key == "k1":
            request.prompt += " (another wording)"
        return request

    monkeypatch.setattr(lmms_process, "request_for", reworded)
    harness = _harness(tmp_path, _Recording())
    try:
        with pytest.raises(RuntimeError, match=r"^lmms-eval: RuntimeError: 1 request\(s\) lmms-eval made differ"):
            harness.run(TaskRun("t_api", "AD", make_rundocs(3), GenSettings(), None, lambda r: None))
        monkeypatch.setattr(lmms_process, "request_for", real)  # the same process runs the next part
        rows = harness.run(TaskRun("t_api", "AD", make_rundocs(3), GenSettings(), None, lambda r: None))
        assert len(rows) == 3
    finally:
        harness.close()


def test_lmms_eval_process_ends_when_the_run_is_gone(tmp_path, make_rundocs):
    from medvision_bm.runner.lmms_process import _Worker

    worker = _Worker(tmp_path / "work")
    worker._to.close()  # as a killed run's end of the pipe: closed with no quit said
    assert worker.proc.wait(timeout=60) == 0


def test_lmms_eval_process_ends_on_a_message_it_cannot_take(tmp_path):
    from medvision_bm.runner.lmms_process import _Worker

    worker = _Worker(tmp_path / "work")
    worker.send({"op": "answer", "key": 5, "prompt": "p", "text": "t"})  # a key that is no text: never a hang
    try:
        assert worker.proc.wait(timeout=60) == 1
        with pytest.raises(RuntimeError, match=r"^lmms-eval's process ended \(exit code 1\)"):
            worker.reply()
    finally:
        worker.close(wait_s=1.0)


class AskedPart:
    """A part asked and run to its end, as ``ProcessHarness.ask`` hands it to the runner."""

    def __init__(self, rows: list[dict[str, object]]) -> None:
        self.rows = rows

    def log_lines(self) -> list[str]:
        return [dumps(jsonable(row)) + "\n" for row in self.rows]

    def abandon(self) -> None:
        pass


def test_an_api_run_starts_lmms_eval_before_it_reads_an_unfinished_store_and_not_for_a_finished_one(
        tmp_path, one_task, clean_env, monkeypatch):
    from medvision_bm.models.baselines import OracleBackend
    from medvision_bm.runner.harness import DirectHarness
    from medvision_bm.runner.lmms_process import ProcessHarness
    from medvision_bm.runner.loop import Runner
    from medvision_bm.store.samples import SampleStore

    events: list[str] = []
    read = SampleStore.read
    monkeypatch.setattr(ProcessHarness, "start", lambda self: events.append("start"))
    monkeypatch.setattr(ProcessHarness, "ask", lambda self, spec: AskedPart(DirectHarness(self.backend).run(spec)))
    monkeypatch.setattr(SampleStore, "read", lambda self, *a, **k: (events.append("read"), read(self, *a, **k))[1])
    record = get_record("openai-compatible")
    argv = ["--data_dir", str(tmp_path / "Data"), "--tasks_list_json_path", str(one_task[0]), "--results_dir",
            str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", "--base_url", "http://127.0.0.1:9/v1",
            "--model_name", "early", "--no_progress"]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv)

    def run() -> list[str]:
        events.clear()
        outcomes = Runner(cfg, lambda cfg, data: OracleBackend()).run()
        assert [o.state for o in outcomes] == ["done"]
        return list(events)

    assert run() == ["start", "read"], "lmms-eval's import starts before the store is read"
    assert run() == [], "a finished, unchanged task reads no answer and starts no lmms-eval"


def test_lmms_eval_logs_the_hooks_scores_of_the_answers_each_scored_once_in_the_runs_process(tmp_path, make_rundocs):
    pytest.importorskip("lmms_eval")
    import math

    from medvision_bm.tasks import hooks
    from medvision_bm.tasks.scoring import memo_of_task

    answers = ["<answer>1</answer>", "<answer>2.5</answer>", "no number here", "<answer>-3</answer>"]

    def answer_of(key: str) -> str:
        return answers[int(key[1:]) % len(answers)]

    class Varied(SyncBackend):
        name = "varied"

        def answer(self, request: GenRequest) -> GenResult:
            return GenResult(request.key, answer_of(request.key))

    rundocs = make_rundocs(8)
    harness = _harness(tmp_path, Varied())
    try:
        with memo_of_task() as memo:  # the task's memo, as the runner holds it while a part runs
            rows = harness.run(TaskRun("t_api", "AD", rundocs, GenSettings(), None, lambda r: None))
    finally:
        harness.close()
    assert len(memo) == 8, "every answer scored once, in the run's process"

    def same(a: object, b: object) -> bool:
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))

    assert len(rows) == 8
    for row in rows:
        rd = rundocs[int(str(row["doc_id"]))]
        want = hooks.process_results(rd.to_lmms_row(), [answer_of(rd.doc.key)])  # the hook, scoring by itself
        assert all(same(row[name], value) for name, value in want.items()), (row, want)
    assert {row["SuccessRate"] for row in rows} == {0.0, 1.0}


def test_lmms_eval_takes_the_score_relayed_with_an_answer(tmp_path, make_rundocs, monkeypatch):
    """lmms-eval's process logs the score the run's process made and relayed (not one of its own): a relayed
    metric that scoring could not give shows in every log row."""
    pytest.importorskip("lmms_eval")
    from medvision_bm.runner import lmms_process

    real = lmms_process.hook_score_message

    def marked(rd, text):
        msg = real(rd, text)
        msg["metrics"] = {name: 12345.0 for name in msg["metrics"]}
        return msg

    monkeypatch.setattr(lmms_process, "hook_score_message", marked)
    harness = _harness(tmp_path, _Recording())
    try:
        rows = harness.run(TaskRun("t_api", "AD", make_rundocs(4), GenSettings(), None, lambda r: None))
    finally:
        harness.close()
    assert len(rows) == 4 and all(12345.0 in row.values() for row in rows), rows


def test_a_part_whose_requests_cannot_be_made_leaves_lmms_eval_on_the_next_part(tmp_path, make_rundocs, monkeypatch):
    """A request that cannot be made fails its part before lmms-eval hears of it: the next part's log is its own
    (before, lmms-eval waited on the failed part and every later reply was the part before's)."""
    pytest.importorskip("lmms_eval")
    from medvision_bm.runner import lmms_process

    real, calls = lmms_process.request_for, itertools.count()

    def failing_once(*args, **kwargs):
        if next(calls) == 5:
            raise ValueError("a bad row")
        return real(*args, **kwargs)

    monkeypatch.setattr(lmms_process, "request_for", failing_once)
    harness = _harness(tmp_path, _Recording())
    try:
        for first_row, n, fails in ((0, 3, False), (3, 4, True), (7, 2, False), (9, 3, False)):
            spec = TaskRun("t_api", "AD", make_rundocs(n), GenSettings(), None, lambda r: None, first_row=first_row)
            if fails:
                with pytest.raises(ValueError, match="a bad row"):
                    harness.run(spec)
                continue
            rows = harness.run(spec)
            assert [r["doc_id"] for r in rows] == list(range(first_row, first_row + n))
    finally:
        harness.close()


def test_lmms_eval_process_holds_no_provider_key(tmp_path, monkeypatch):
    """lmms-eval's process asks nothing: it is started without the provider keys of the run's environment."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-for-the-worker")
    harness = _harness(tmp_path, _Recording())
    try:
        harness.start()
        worker = harness._worker
        assert worker is not None
        environ = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().split(b"\0")
    finally:
        harness.close()
    assert not any(b"sk-test-not-for-the-worker" in item for item in environ)
    assert any(item.startswith(b"HF_DATASETS_CACHE=") for item in environ)


def _api_cfg(tmp_path: Path, tasks: Path):
    record = get_record("openai-compatible")
    argv = ["--data_dir", str(tmp_path / "Data"), "--tasks_list_json_path", str(tasks), "--results_dir",
            str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", "--base_url", "http://127.0.0.1:9/v1",
            "--model_name", "early", "--no_progress"]
    return build_config(build_parser(record, "test").parse_args(argv), record, argv)


def test_the_last_parts_log_is_taken_once_the_task_is_scored_and_its_failure_is_the_tasks_error(
        tmp_path, one_task, clean_env, monkeypatch):
    pytest.importorskip("lmms_eval")
    from medvision_bm.models.baselines import OracleBackend
    from medvision_bm.runner import lmms_process
    from medvision_bm.runner import loop as loop_mod
    from medvision_bm.runner.loop import Runner

    events: list[str] = []
    follow, log_lines = loop_mod.follow, lmms_process.PendingPart.log_lines
    monkeypatch.setattr(loop_mod, "follow", lambda *a, **k: (events.append("scored"), follow(*a, **k))[1])
    monkeypatch.setattr(lmms_process.PendingPart, "log_lines", lambda self: (events.append("log"), log_lines(self))[1])
    cfg = _api_cfg(tmp_path, one_task[0])
    runner = Runner(cfg, lambda cfg, data: OracleBackend())
    try:
        [done] = runner.run()
    finally:
        runner.close()
    assert done.state == "done" and events == ["scored", "log"], "the log waited for, or came before, the scoring"
    (log,) = (tmp_path / "res").glob("early/*/*/lmms_eval/samples_*.jsonl")
    assert len(log.read_text().splitlines()) == one_task[1]

    real = lmms_process.request_for

    def reworded(rd, *args):  # lmms-eval's process ends the part with an error once every answer is in
        request = real(rd, *args)
        request.prompt += " (another wording)"
        return request

    monkeypatch.setattr(lmms_process, "request_for", reworded)
    cfg = dataclasses.replace(cfg, force=True, model_name="reworded")
    runner = Runner(cfg, lambda cfg, data: OracleBackend())
    try:
        [failed] = runner.run()
    finally:
        runner.close()
    assert failed.state == "error" and "lmms-eval: RuntimeError" in (failed.error or "")
    results = json.loads(next((tmp_path / "res").glob("reworded/*/*/results.json")).read_text())
    assert not results["complete"] and results["counts"]["answered"] == one_task[1], "an answer was not kept"
    assert len(next((tmp_path / "res").glob("reworded/*/*/parsed.jsonl")).read_text().splitlines()) == one_task[1]


def test_lmms_eval_process_parses_each_row_once_a_part(make_rundocs):
    from medvision_bm.runner.lmms_worker import PartRundocs

    parsed: list[str] = []

    def parse(row):
        parsed.append(str(row["key"]))
        return RunDoc.from_lmms_row(row)

    rundocs = PartRundocs(parse)
    rows = [rd.to_lmms_row() for rd in make_rundocs(3)]
    for _ in range(3):  # its prompt, its target, its score: each from a row of its own, as lmms-eval's dataset yields
        got = [rundocs(dict(row)) for row in rows]
    assert got == [RunDoc.from_lmms_row(row) for row in rows] and len(parsed) == 3
    rundocs.clear()  # the next part's rows are parsed again
    rundocs(rows[0])
    assert len(parsed) == 4


def test_the_relay_model_takes_each_requests_key_from_the_parts_parsed_rows(make_rundocs, monkeypatch):
    from types import SimpleNamespace

    from medvision_bm.models.lmms_models import RelayLMM
    from medvision_bm.runner.lmms_worker import PartRundocs
    from medvision_bm.tasks import hooks

    parsed: list[str] = []
    from_row = RunDoc.from_lmms_row

    def parse(row):  # every parse of a row's payload, wherever it is asked for
        parsed.append(str(row["key"]))
        return from_row(row)

    monkeypatch.setattr(RunDoc, "from_lmms_row", staticmethod(parse))
    monkeypatch.setattr(hooks, "rundoc", PartRundocs(parse))  # as lmms-eval's process installs it
    rds = make_rundocs(3)
    rows = [rd.to_lmms_row() for rd in rds]
    prompts = [hooks.doc_to_text(row) for row in rows]  # lmms-eval asks the prompts first: each row parsed here
    assert len(parsed) == 3

    class Inbox:
        def wait_for(self, keys):
            return {rd.doc.key: SimpleNamespace(prompt=p, text=f"answer {rd.doc.key}") for rd, p in zip(rds, prompts)}

    model = RelayLMM(Inbox())
    model.task_dict = {"t": {"test": dict(enumerate(rows))}}
    requests = [SimpleNamespace(args=(p, {}, hooks.doc_to_visual, i, "t", "test")) for i, p in enumerate(prompts)]
    assert model.generate_until(requests) == [f"answer {rd.doc.key}" for rd in rds]
    assert len(parsed) == 3, "the relay model parsed a row the part had parsed already"
