"""`medvision-bm judge` end to end on the phantom: stored answers from the real runner, a local HTTP server playing
the judge (the fake provider's OpenAI wire format), a killed and resumed judge run, a judge answering garbage, and
summaries showing the strict and judged parses side by side."""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fakes.provider_server import FakeProviderServer, JudgeApp
from medvision_bm.cli import judge as judge_cli
from medvision_bm.errors import UserError
from medvision_bm.judge import prompt as jp
from medvision_bm.judge import reply
from medvision_bm.judge import run as J
from medvision_bm.models.base import GenResult, SyncBackend
from medvision_bm.models.baselines import OracleBackend
from medvision_bm.store.judged import read_judged
from mvtest_support import REPO, heavy_imports
from phantom_runs import cli_env, run_baseline, run_cli
from upstream_filter import is_listed, listed_keys

pytestmark = pytest.mark.slow
FAMILIES = ("TL", "detect")
LIMIT = 8


class VariedBackend(SyncBackend):
    """The oracle's numbers written four ways (by sample index): in the <answer> tag; in a sentence (off format);
    no answer at all; off format with a marker that makes the fake judge answer garbage."""

    name = "varied"

    def __init__(self) -> None:
        self.oracle = OracleBackend()

    def answer(self, request):
        text = self.oracle.answer(request).text
        inner = re.search(r"<answer>(.*)</answer>", text).group(1)
        i = request.rundoc.doc.index % 4
        if i == 1:
            text = f"Looking at the slice, my final answer is {inner} as measured."
        elif i == 2:
            text = "I cannot measure this structure on the given image."
        elif i == 3:
            text = f"GARBLE the values would be {inner} I think."
        return GenResult(request.key, text, finish_reason="stop")


class ContractJudge(JudgeApp):
    """Plays upstream's judge: answers the contract's JSON (quoting its span), or garbage for responses holding
    GARBLE. With ``stall_after`` it stops answering after that many."""

    def __init__(self, stall_after: int | None = None, garbage: str = "marked") -> None:
        super().__init__()
        self.stall_after = stall_after
        self.garbage = garbage  # "marked": GARBLE responses; "all": every reply; "none": GARBLE ones read too
        self.answered = 0
        self.responses: list[str] = []

    async def verdict(self, body: dict, response: str, k: int) -> str:
        with self.lock:
            if self.stall_after is not None and self.answered >= self.stall_after:
                stall = True
            else:
                stall = False
                self.answered += 1
                self.responses.append((k, response))
        if stall:
            await asyncio.sleep(3600)
        m = re.search(r"(?:<answer>|final answer is )(.*?)(?:</answer>| as measured)", response)
        garbled = re.search(r"the values would be (.*?) I think", response)
        if self.garbage == "all" or (garbled and self.garbage == "marked"):
            return "Sure! Everything looks fine to me."
        if garbled:  # a judge that reads them (a repair pass)
            nums = [float(x) for x in reply.find_numbers(garbled.group(1))][-k:]
            return json.dumps({"final_answer": {"status": "present", "span": garbled.group(0), "values": nums}})
        if m:
            nums = [float(x) for x in reply.find_numbers(m.group(1))][-k:]
            obj = {"final_answer": {"status": "present", "span": m.group(0), "values": nums}}
            return "```json\n" + json.dumps(obj) + "\n```"  # fenced, as chat models often answer
        return json.dumps({"final_answer": {"status": "no_conclusion", "span": "", "values": []}})


def judge_server(stall_after: int | None = None, garbage: str = "marked") -> FakeProviderServer:
    server = FakeProviderServer()
    server.app = ContractJudge(stall_after, garbage)
    return server.start()


@pytest.fixture()
def results(phantom_dir: Path, phantom_lists: Path, tmp_path: Path) -> Path:
    root = tmp_path / "res"
    for fam in FAMILIES:
        out = run_baseline("oracle", fam, phantom_dir, root / f"MedVision-Phantom-{fam}", "--sample_limit", str(LIMIT),
                           lists=phantom_lists, backend=lambda cfg, data: VariedBackend())
        assert all(o.state == "done" for o in out), out
    return root


def _stores(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("signature.json"))


def _judge_args(root: Path, url: str, *extra: str) -> list[str]:
    return ["judge", "--results_dir", str(root), "--judge_model", "gemma4", "--base_url", url, *extra]


def _judged(store: Path) -> Path:
    (folder,) = list((store / "judged").iterdir())
    return folder


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _answers(root: Path) -> list[dict[str, Any]]:
    return [r for seg in root.rglob("judged/*/answers/*.jsonl") for r in _rows(seg)]


def _groups(root: Path) -> Counter:
    """Stored answers per (answer count k, response): the judge is asked once per group."""
    out: Counter = Counter()
    for s in _stores(root):
        k = 2 if "TumorLesionSize" in str(s) else 4
        out.update((k, r["text"]) for seg in (s / "samples").glob("*.jsonl") for r in _rows(seg) if r["status"] == "ok")
    return out


def test_judge_end_to_end_kill_resume_and_garbage(results: Path, tmp_path: Path, phantom_dir: Path) -> None:
    strict_before = {s: (s / "parsed.jsonl").read_bytes() for s in _stores(results)}
    n_answers = sum(len(_rows(s / "parsed.jsonl")) for s in _stores(results))
    groups = _groups(results)
    assert n_answers >= 8 and sum(groups.values()) == n_answers and len(groups) < n_answers

    # 1. a judge run killed (SIGKILL) after 3 replies were stored
    stalled = judge_server(stall_after=3)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "medvision_bm.cli",
                                 *_judge_args(results, stalled.url, "--concurrency", "1", "--min_valid_rate", "0")],
                                cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        expected = -1
        while time.time() < deadline and proc.poll() is None:
            if len(stalled.app.responses) == 3:
                expected = sum(groups[a] for a in stalled.app.responses)
                if len(_answers(results)) == expected:
                    break
            time.sleep(0.05)
        assert len(_answers(results)) == expected, proc.communicate(timeout=5) if proc.poll() is not None else "timeout"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        stalled.stop()
    judged_first = set(stalled.app.responses)
    assert len(_answers(results)) == expected  # nothing was written after the kill
    for s in _stores(results):  # the strict parse is untouched
        assert (s / "parsed.jsonl").read_bytes() == strict_before[s]

    # 2. the resumed run asks only the rest, then writes the judged parse of every store
    server = judge_server()
    try:
        res = run_cli(*_judge_args(results, server.url, "--concurrency", "3", "--min_valid_rate", "0"))
    finally:
        server.stop()
    assert res.returncode == 0, res.stderr
    asked = server.app.responses
    assert len(asked) == len(groups) - 3 == len(set(asked)), (len(asked), len(groups))
    assert not judged_first & set(asked), "a judged answer was asked again"
    stored = [(seg.parents[2], r["key"]) for seg in results.rglob("judged/*/answers/*.jsonl") for r in _rows(seg)]
    assert len(stored) == n_answers and len(set(stored)) == n_answers, "a judged answer was asked again"
    body = server.app.received[0].body
    assert body["model"] == "google/gemma-4-31B-it"  # upstream's judge weights, on another base URL
    assert body["temperature"] == 0.0 and body["top_p"] == 1.0 and body["seed"] == 1024
    assert body["max_tokens"] == 4096
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][0]["content"].startswith("You extract numeric answers from a vision-language model's")

    for s in _stores(results):
        assert (s / "parsed.jsonl").read_bytes() == strict_before[s]
        folder = _judged(s)
        judge_json = json.loads((folder / "judge.json").read_text())
        inputs = judge_json["inputs"]
        assert inputs["judge_model"] == "gemma4" and inputs["weights"] == "google/gemma-4-31B-it"
        assert inputs["prompt_version"] == jp.PROMPT_VERSION and inputs["parser_version"] == "judge-1"
        assert folder.name == judge_json["judge_signature"][:12]
        strict = {r["key"]: r for r in _rows(s / "parsed.jsonl")}
        judged = {r["key"]: r for r in _rows(folder / "parsed.jsonl")}
        assert judged.keys() == strict.keys()
        for key, row in judged.items():
            kind = row["index"] % 4
            assert row["parser"] == "judge-1"
            mode = row["judge"]["mode"]
            if kind == 0:  # strict success stands
                assert strict[key]["success"] and row["success"] and mode == "conclusion_in_format"
                assert row["values"] == strict[key]["values"] and row["metrics"] == strict[key]["metrics"]
            elif kind == 1:  # off format: recovered with the oracle's numbers, scored as the strict parse would
                assert not strict[key]["success"] and row["success"] and mode == "conclusion_off_format"
                assert row["values"] == pytest.approx(row["target"], abs=1e-6)
                assert row["judge"]["tier"] == "exact"
            elif kind == 2:  # no answer: a judged failure
                assert not row["success"] and row["status"] == "parse_failed" and mode == "no_conclusion"
            else:  # the judge answered garbage: a judged failure, counted like a failed parse
                assert not row["success"] and row["status"] == "parse_failed" and mode == "undetermined"
                assert row["judge"]["reason"].startswith("judge_invalid:")
        out = json.loads((folder / "results.json").read_text())
        n_ok = sum(r["success"] for r in judged.values())
        assert out["metrics"]["n_success"] == n_ok and out["complete"] and out["counts"]["judge_invalid"] >= 1
        assert out["metrics"]["SuccessRate"] == pytest.approx(n_ok / len(judged))
        assert n_ok > sum(r["success"] for r in strict.values())

    # 3. a third run asks nothing
    server = judge_server()
    try:
        res = run_cli(*_judge_args(results, server.url))
    finally:
        server.stop()
    assert res.returncode == 0 and server.app.responses == [], res.stderr

    # 4. summaries: strict by default, judged on request, both side by side
    out_both = tmp_path / "both"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(out_both), "--parse", "both",
                  "--no_plots", "--n_boot", "200", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    summary = json.loads((out_both / "summary.json").read_text())
    assert summary["parse"] == "strict"
    side = summary["parse_comparison"]["TL"]
    assert side and all(r["SuccessRate_judged"] > r["SuccessRate_strict"] for r in side)
    md = (out_both / "strict_vs_judged_TL.md").read_text()
    assert "strict" in md and "judged" in md
    out_j = tmp_path / "judged"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(out_j), "--parse", "judged",
                  "--no_plots", "--n_boot", "200", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    sj = json.loads((out_j / "summary.json").read_text())
    assert sj["parse"] == "judged" and sj["parsers"] == ["judge-1"]
    tasks = {r["task"]: r for r in sj["families"]["TL"]["tasks"]}
    strict_tasks = {r["task"]: r for r in summary["families"]["TL"]["tasks"]}
    for task, r in tasks.items():
        assert r["SuccessRate"] > strict_tasks[task]["SuccessRate"]
    assert "Parse: judged (LLM judge: gemma4 google/gemma-4-31B-it" in (out_j / "summary.md").read_text()
    # the judged tables leave out the T/L samples upstream's removed-samples lists name, as the strict ones do
    lists = listed_keys(phantom_dir)
    want = {s.parent.name: sum(is_listed(lists, s.parent.name, r["key"]) for r in _rows(s / "parsed.jsonl"))
            for s in _stores(results) if "TumorLesionSize" in str(s)}
    assert {r["task"]: r["removed"] for r in sj["tl_filter"]} == want and want[
        "PhantomCT_TumorLesionSize_Task02_Axial"] == 3  # samples 5-7 of the first 8
    assert (out_j / "upstream" / "TL" / "summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt").is_file()
    assert (out_j / "upstream" / "TL" / "oracle" / "llm-parsed_gemma-4-31b" /
            "summary_metrics_TL_Task_filtered__llm-parsed_gemma-4-31b.json").is_file()
    assert (out_both / "upstream" / "TL" / "summary_TL_task_filtered.txt").is_file()
    assert (out_both / "upstream" / "TL" / "summary_TL_task_filtered__llm-parsed_gemma-4-31b.txt").is_file()
    assert (out_j / "leaderboard_TL.md").read_text().startswith("_Parse: judged (LLM judge: gemma4")
    assert not (out_both / "leaderboard_TL.md").read_text().startswith("_Parse")  # the strict tables as before


def test_schema_gate_stores_nothing_and_redo_invalid_repairs(results: Path) -> None:
    """Upstream's repair tools (script/llm-parsing @2f20f64, run_judge_vllm.py): ``gate_valid_rate`` holds the first
    200 replies (fewer in a smaller run) and stops the run, writing nothing, below --min_valid_rate 0.95;
    ``--redo_invalid`` asks again about invalid verdicts, appended, the newest counting."""
    groups = _groups(results)
    garbled = {(k, t) for k, t in groups if "GARBLE" in t}
    assert garbled and len(garbled) < len(groups)

    def judge(garbage: str, *extra: str) -> tuple[subprocess.CompletedProcess, list]:
        server = judge_server(garbage=garbage)
        try:
            return run_cli(*_judge_args(results, server.url, "--concurrency", "4", *extra)), server.app.responses
        finally:
            server.stop()

    # 1. a judge that never follows the contract: stopped, nothing stored, one line saying what to do
    res, asked = judge("all")
    assert res.returncode != 0 and "Traceback" not in res.stderr and len(asked) == len(groups)
    assert "none was stored" in res.stderr and "--min_valid_rate 0" in res.stderr
    assert _answers(results) == []
    # 2. a quarter of invalid replies is below upstream's 95 %: stopped too
    res, _ = judge("marked")
    assert res.returncode != 0 and "none was stored" in res.stderr and _answers(results) == []
    # 3. the gate turned off: every reply stored, the garbled ones as invalid verdicts
    res, asked = judge("marked", "--min_valid_rate", "0")
    assert res.returncode == 0, res.stderr
    first = _answers(results)
    assert {r["status"] for r in first} == {"ok", "invalid"}
    n_invalid = sum(r["status"] == "invalid" for r in first)
    assert n_invalid == sum(groups[g] for g in garbled)
    # 4. an invalid verdict counts as judged: a plain rerun asks nothing
    res, asked = judge("none")
    assert res.returncode == 0 and asked == [], res.stderr
    # 5. the repair pass asks again about exactly the invalid ones; the newest verdict counts
    res, asked = judge("none", "--redo_invalid")
    assert res.returncode == 0, res.stderr
    assert sorted(asked) == sorted(garbled)
    assert len(_answers(results)) == len(first) + n_invalid  # appended, nothing rewritten
    for s in _stores(results):
        for row in _rows(_judged(s) / "parsed.jsonl"):
            if row["index"] % 4 == 3:  # the garbled answers, read by the repairing judge
                assert row["success"] and row["judge"]["mode"] == "conclusion_off_format", row
    res, asked = judge("none", "--redo_invalid")
    assert res.returncode == 0 and asked == [], res.stderr  # nothing invalid left


def test_gate_counts_replies_not_failed_requests() -> None:
    ok, bad = "ok", "invalid"
    gate = J.ValidRateGate(0.95, 3)
    assert gate.admit("r1", ok) == [] and gate.admit("f1", "failed") == [] and gate.admit("r2", ok) == []
    assert gate.admit("r3", ok) == ["r1", "f1", "r2", "r3"] and gate.open
    assert gate.admit("r4", bad) == ["r4"]  # open for the rest of the run
    gate = J.ValidRateGate(0.95, 200)  # a run shorter than the probe is judged on what came back
    assert gate.admit("r1", ok) == [] and gate.admit("r2", bad, "no_json_object") == []
    with pytest.raises(UserError, match=r"only 1 of the first 2 .*invalid: no_json_object 1"):
        gate.release()
    gate = J.ValidRateGate(0.0, 200)
    assert gate.open and gate.admit("r1", bad) == ["r1"]
    gate = J.ValidRateGate(0.95, 5)
    assert gate.admit("f1", "failed") == [] and gate.release() == ["f1"]  # no reply at all: nothing to judge


def test_judge_refuses_bad_input_in_one_line(results: Path) -> None:
    res = run_cli("judge", "--results_dir", str(results), "--judge_model", "gemma4")
    assert res.returncode != 0 and "--base_url" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("judge", "--results_dir", str(results), "--judge_model", "oracle")
    assert res.returncode != 0 and "cannot judge" in res.stderr and "Traceback" not in res.stderr
    for flag, value in (("--min_valid_rate", "1.5"), ("--min_valid_rate", "nan"), ("--max_retries", "-1"),
                        ("--request_timeout", "inf"), ("--request_timeout", "0"), ("--concurrency", "0")):
        res = run_cli(*_judge_args(results, "http://127.0.0.1:9/v1", flag, value))
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode == 2 and len(lines) == 1 and flag in lines[0], (flag, value, res.stderr)
    assert _answers(results) == [] and not list(results.rglob("judged"))  # refused before anything was written
    res = run_cli("judge", "--results_dir", str(results), "--judge_model", "gemma4", "--hf_token", "hf_leak123456")
    assert res.returncode == 2 and "hf_leak123456" not in res.stderr and "Traceback" not in res.stderr
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(results.parent / "o"),
                  "--parse", "judged", "--no_plots")
    assert res.returncode != 0 and "medvision-bm judge" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(results.parent / "o2"),
                  "--judge", "gemma4", "--no_plots")  # a judge named, but the strict parse asked for
    assert res.returncode == 2 and "--parse judged" in res.stderr and "Traceback" not in res.stderr
    assert not (results.parent / "o2").exists()


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty_output"),
    ("no json here", "no_json_object"),
    ('{"final_answer": "(40.5, 28.7)"}', "missing_final_answer"),
    ('{"final_answer": {"status": "absent", "span": "", "values": []}}', "bad_status"),
    ('{"final_answer": {"status": "present", "span": "x 1", "values": [true]}}', "non_numeric_values"),
    ('{"final_answer": {"status": "no_conclusion", "span": "", "values": [3.0]}}', "values_with_non_present_status"),
])
def test_garbage_replies_are_invalid_never_errors(text: str, reason: str) -> None:
    obj, why = reply.decode_reply(text)
    if obj is not None:
        ok, why = reply.validate_reply(obj, expects_steps=True)
        assert not ok
    assert why == reason


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_non_finite_judge_value_is_a_valid_reply_whose_span_check_fails(token: str) -> None:
    # upstream decodes the reply with json.loads (NaN, Infinity and 1e999 become floats), counts them as numbers in
    # its shape check and records the reply ok; only the span check, which refuses a non-finite value, keeps them
    # from being scored (YongchengYAO/MedVision script/llm-parsing/judge_decode.py _is_number_list,
    # judge_verify.py _close @2f20f64)
    raw = '{"final_answer": {"status": "present", "span": "length 12.5 mm", "values": [TOKEN]}}'.replace("TOKEN", token)
    obj, why = reply.decode_reply(raw)
    assert why == "ok" and obj is not None
    assert reply.validate_reply(obj, expects_steps=False) == (True, "ok")
    values = obj["final_answer"]["values"]
    assert math.isinf(float(values[0])) or math.isnan(float(values[0]))
    line = json.dumps(obj, allow_nan=False)  # the record stays a strict JSON line
    back = json.loads(line)["final_answer"]["values"]
    verified = reply.verify_span("The length 12.5 mm", "length 12.5 mm", back, 1)
    assert not verified["ok"] and verified["reason"] == "values_not_in_span"
    assert reply.decide(False, {"status": "ok", "final_answer": obj["final_answer"]}, verified) == (
        "undetermined", "span_values_not_in_span")
    # the same word quoted as a string is no number, as upstream reads it
    quoted = reply.decode_reply(raw.replace(f"[{token}]", f'["{token}"]'))[0]
    assert quoted is not None and reply.validate_reply(quoted, expects_steps=False) == (False, "non_numeric_values")


def test_an_integer_past_a_float_is_refused_by_the_span_check_not_an_error() -> None:
    assert reply.verify_span("x 1", "x 1", [10 ** 400], 1)["reason"] == "non_numeric"


def test_decoding_and_span_rules() -> None:
    """Upstream's reply decoding and span check (script/llm-parsing/judge_decode.py, judge_verify.py @2f20f64)."""
    # harmony final channel, LaTeX in the quoted span, a draft object in the analysis is not taken
    raw = ('analysis {"final_answer": {"status": "present", "span": "draft 9", "values": [9]}}assistantfinal'
           '{"final_answer": {"status": "present", "span": "\\boxed{12.5}", "values": [12.5]}}<|return|>')
    obj, why = reply.decode_reply(raw)
    assert why == "ok" and obj["final_answer"]["span"] == "\\boxed{12.5}"
    assert reply.verify_span("so \\boxed{12.5} mm", obj["final_answer"]["span"], [12.5], 1)["numbers"] == ["12.5"]
    # a stranded final_answer body is re-wrapped
    obj, _ = reply.decode_reply('"final_answer": {"status": "no_conclusion", "span": "", "values": []}')
    assert obj == {"final_answer": {"status": "no_conclusion", "span": "", "values": []}}
    # numbers come from the text (thousands separators as the strict parser reads them), never the judge's floats
    v = reply.verify_span("The distance is 8,000.25 mm overall", "distance is 8,000.25 mm", [8000.25], 1)
    assert v["ok"] and v["tier"] == "exact" and v["numbers"] == ["8000.25"]
    # a value the response never wrote is refused at every tier
    assert not reply.verify_span("axes 12.5 and 7.25 mm", "axes 12.5 and 7.3 mm", [12.5, 7.3], 2)["ok"]
    # a judge that closes a tag the response left open is located after normalisation
    v = reply.verify_span("<answer>\n0.1, 0.2, 0.5, 0.6", "<answer>0.1, 0.2, 0.5, 0.6</answer>", [0.1, 0.2, 0.5, 0.6], 4)
    assert v["ok"] and v["tier"] == "normalized"
    # an unlocatable span falls back to the values in the response, but never for all-zero values
    assert reply.verify_span("result: 3.5 mm", "Result = 3.5", [3.5], 1)["tier"] == "value_anchor"
    assert reply.verify_span("result: 0 mm", "Result = 0", [0], 1)["reason"] == "all_zero_value_anchor"
    # strict first: a strict success stands whatever the judge said
    assert reply.decide(True, None, None)[0] == "conclusion_in_format"
    assert reply.decide(False, {"status": "invalid", "reason": "no_json_object"}, None) == (
        "undetermined", "judge_invalid:no_json_object")


def test_judge_folder_with_a_broken_signature_file_is_a_one_line_error(results: Path) -> None:
    with judge_server() as server:
        assert run_cli(*_judge_args(results, server.url, "--min_valid_rate", "0")).returncode == 0
        held = next(results.rglob("judge.json"))
        held.write_text('{"judge_signature": ')  # torn by a full disk
        res = run_cli(*_judge_args(results, server.url, "--min_valid_rate", "0"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln]
    assert res.returncode == 2 and "Traceback" not in res.stderr and len(errors) == 1 and str(held) in errors[0]


def test_a_store_of_an_unknown_protocol_is_skipped_with_a_note(results: Path) -> None:
    """A docs.jsonl naming a protocol this version does not know (written by a newer one): skipped, named, no
    traceback; the judge loads stores through the same check as parse (rescore.store_docs)."""
    from medvision_bm.score.rescore import StoreProblem
    from medvision_bm.store.discovery import discover

    ref = discover(results)[0][0]
    docs = ref.folder / "docs.jsonl"
    docs.write_text("".join(json.dumps({**json.loads(line), "protocol": "future"}) + "\n"
                            for line in docs.read_text().splitlines() if line.strip()))
    (ref.folder / ".docs.sums").unlink()  # no sums of this suite's to check the rows against (else: edited rows)
    with pytest.raises(StoreProblem, match="future"):
        J.load_store(ref)


def test_prompt_is_upstreams() -> None:
    """Upstream's judge prompt (script/llm-parsing/judge_prompts.py and judge_config.py @2f20f64): its context rule,
    output skeleton, boxed note, per-family answer count and step list, the elision window, the closing line."""
    system, user = jp.build_messages("TL", "TL", "x" * 9000)
    assert "Include at least 12 characters of surrounding context" in system
    assert '"status": "present | no_conclusion"' in system and '"<number>",' in system
    assert "\\boxed{...}" in system and "{{" not in system
    assert "EXPECTED_ANSWER_COUNT: 2 number(s)." in user
    assert "  Step 3: the computed physical length of the major axis (1 number(s))" in user
    assert "...[1000 characters elided]..." in user and user.endswith(">>>\n\nReturn only the JSON object.")
    _, user = jp.build_messages("Detection", None, "r")
    assert "Return no \"steps\" array." in user and "EXPECTED_ANSWER_COUNT: 4" in user


def test_api_record_judges_through_the_same_engine(results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An API record as judge (OpenAI's wire format, key from the environment), asked only about strict failures."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-openai-0123456789abcdef")
    server = judge_server()
    try:
        code = judge_cli.judge_main(["--results_dir", str(results), "--judge_model", "openai", "--base_url", server.url + "/v1",
                             "--families", "TL", "--only_strict_failures", "--concurrency", "2",
                             "--min_valid_rate", "0"])
    finally:
        server.stop()
    assert code == 0
    tl = [s for s in _stores(results) if "TumorLesionSize" in str(s)]
    failures = sum(not r["success"] for s in tl for r in _rows(s / "parsed.jsonl"))
    groups = {g for g in _groups(results) if g[0] == 2 and "<answer>" not in g[1]}
    assert len(server.app.responses) == len(groups) and failures > len(groups) > 0
    assert set(server.app.responses) == groups
    got = server.app.received[0]
    assert got.body["model"] == "gpt-5.5" and got.headers["Authorization"].endswith("0123456789abcdef")
    for s in tl:
        inputs = json.loads((_judged(s) / "judge.json").read_text())["inputs"]
        assert (inputs["judge_model"], inputs["backend"], inputs["weights"]) == ("openai", "openai", "gpt-5.5")
        rows = _rows(_judged(s) / "parsed.jsonl")
        assert sum(r["success"] for r in rows) == sum(r["index"] % 4 in (0, 1) for r in rows)


def test_judge_path_imports_no_heavy_packages() -> None:
    setup = ("from medvision_bm.cli import judge\n"
             "ns = judge.build_parser().parse_args(['--results_dir', 'R', '--judge_model', 'gemma4', '--base_url', "
             "'http://h/v1'])\n"
             "spec, _ = judge.judge_spec(ns)\n"
             "assert spec.weights == 'google/gemma-4-31B-it', spec.weights\n"
             "import medvision_bm.models.api.engine, medvision_bm.models.api.openai_chat, medvision_bm.score.rescore\n"
             "import medvision_bm.tasks.scoring, medvision_bm.store.discovery\n")
    assert heavy_imports(setup, also=("polars",)) == []


class HostileJudge(JudgeApp):
    """A judge whose every reply holds a number or text no stored line could hold: an integer of 350 digits, one
    past 64 bits, a lone surrogate in its span, in turn."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    async def verdict(self, body: dict, response: str, k: int) -> str:
        with self.lock:
            self.asked += 1
            turn = self.asked % 3
        huge = "9" * 350 if turn == 0 else str(2**64 + 7)
        span = '"the answer \\ud800 is"' if turn == 2 else '"the answer"'
        values = ", ".join(["1.5"] * (k - 1) + ["2.5" if turn == 2 else huge])
        return ('{"final_answer": {"status": "present", "span": ' + span + ', "values": [' + values + ']}, '
                '"steps": [' + huge + "]}")


def test_a_judge_reply_no_stored_line_can_hold_is_stored_invalid_and_never_asked_again(results: Path) -> None:
    server = FakeProviderServer()
    server.app = HostileJudge()
    server.start()
    try:
        first = run_cli(*_judge_args(results, server.url, "--min_valid_rate", "0"))
        assert "Traceback" not in first.stderr, first.stderr[-3000:]
        asked = server.app.asked
        stored = _answers(results)
        assert asked > 0 and len(stored) >= asked
        assert all(r["status"] == "invalid" for r in stored), Counter(r.get("reason") for r in stored)
        for store in _stores(results):  # every stored line reads back: each store's judged parse counts them all
            folder = _judged(store)
            signature = json.loads((folder / "judge.json").read_text())["judge_signature"]
            recs, bad = read_judged(folder, signature)
            assert bad == 0 and len(recs) == len({r["key"] for r in _rows(next((folder / "answers").glob("*.jsonl")))})
        again = run_cli(*_judge_args(results, server.url, "--min_valid_rate", "0"))
        assert "Traceback" not in again.stderr, again.stderr[-3000:]
        assert server.app.asked == asked and len(_answers(results)) == len(stored)  # nothing asked or stored again
    finally:
        server.stop()


@pytest.mark.parametrize("values", ["1" * 30, "-" + "2" * 25, str(2**63)])
def test_an_integer_past_64_bits_is_a_non_numeric_value(values: str) -> None:
    obj, _ = reply.decode_reply('{"final_answer": {"status": "present", "span": "x", "values": [' + values + "]}}")
    assert obj is not None and reply.validate_reply(obj, expects_steps=False) == (False, "non_numeric_values")


def test_the_judge_run_is_driven_without_flags_and_writes_what_the_command_writes(results: Path, tmp_path: Path) -> None:
    """`judge.session.run_judge` takes a typed spec, the stores and a backend, and returns each store's digest: the
    judged parse it writes is byte-equal to the command's on a copy of the same stores."""
    import shutil

    from medvision_bm.judge import session
    from medvision_bm.models.api import build_api_backend
    from medvision_bm.store.discovery import discover

    copy = tmp_path / "copy"
    shutil.copytree(results, copy)
    server = judge_server()
    try:
        assert judge_cli.judge_main(["--results_dir", str(results), "--judge_model", "gemma4", "--base_url",
                                     server.url + "/v1", "--families", "TL", "--structured", "none", "--min_valid_rate", "0"]) == 0
        spec = J.JudgeSpec("gemma4", "openai_compatible", "server", "google/gemma-4-31B-it", dict(jp.SAMPLING))
        refs, _ = discover(str(copy), families=["TL"])
        jobs, unreadable = session.load_jobs(refs, spec.signature)
        opts = session.JudgeOptions(concurrency=4, min_valid_rate=0.0)
        plan = session.plan_judging(spec, jobs, opts)
        assert unreadable == [] and len(plan.todo) > 0 and plan.judged_before == 0
        backend = build_api_backend("openai_compatible", {
            "model_name": spec.weights, "base_url": [server.url + "/v1"], "batch_size": 4,
            "gen": J.gen_settings(spec)})
        outcome = session.run_judge(spec, plan, opts, backend, started=time.time())
    finally:
        server.stop()
    assert outcome.failed == 0 and outcome.incomplete == 0 and len(outcome.stores) == len(refs)
    assert all(d.counts.judged == d.counts.answered and (d.counts.answered or 0) > 0 for d in outcome.stores)
    for ref in refs:
        rel = ref.folder.relative_to(copy)
        ours, theirs = _judged(copy / rel), _judged(results / rel)
        assert ours.name == theirs.name
        strip = [{k: v for k, v in r.items() if k != "time"} for r in _rows(ours / "parsed.jsonl")]
        assert strip == [{k: v for k, v in r.items() if k != "time"} for r in _rows(theirs / "parsed.jsonl")]
