"""The judge's structured output, ``--limit_rows``, several judge servers, upstream's judge report, and the import of
upstream's judged folders, on stores whose strict and judged outcomes are known by construction.

Every answer is one of six kinds (by sample index), each with a known strict outcome and a known verdict of the
local judge server below (the fake provider's OpenAI wire format, as vLLM's server speaks it):

====  ========================================================  ======  =======================================
kind  answer                                                    strict  judge -> upstream's answer mode, reason
====  ========================================================  ======  =======================================
0     ``<answer>v</answer>``                                    ok      quotes it: in format, agrees
1     ``... my final answer is v as measured.``                 fails   quotes it: off format (recovered)
2     ``I cannot measure ...``                                  fails   no_conclusion
3     ``GARBLE ... v ...``                                      fails   garbage: undetermined, judge_invalid
4     ``SPANBAD the values are v in total.``                    fails   a span without v's numbers and values
                                                                        the answer never wrote: undetermined,
                                                                        span_values_not_in_span
5     ``<answer>v</answer> (earlier estimate: w)``              ok      quotes w: in format, a disagreement
====  ========================================================  ======  =======================================
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fakes.provider_server import FakeProviderServer, JudgeApp
from medvision_bm.data.docs import Doc
from medvision_bm.io import iter_jsonl
from medvision_bm.judge import prompt as jp
from medvision_bm.models.base import GenResult, SyncBackend
from medvision_bm.models.baselines import OracleBackend
from medvision_bm.tasks.scoring import target
from mvtest_support import run_cli as mv_cli
from phantom_runs import run_baseline, run_cli
from upstream_results import write_samples

pytestmark = pytest.mark.slow
FAMILIES = ("TL", "detect")
LIMIT = 12
#: model -> the kinds its answers cycle through (by sample index), so the two runs' counts differ
MODELS = {"oracle": (0, 1, 2, 3, 4, 5), "mean": (0, 0, 1, 5, 2, 3, 4)}
JUDGE_WEIGHTS = "google/gemma-4-31B-it"
#: upstream's number regex (script/llm-parsing/judge_io.py NUM_RE @2f20f64), to read the tokens the parsers read
NUM_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def tokens(text: str) -> list[str]:
    return [m.replace(",", "") for m in NUM_RE.findall(text)]


class KnownBackend(SyncBackend):
    """The oracle's numbers written as one of the six kinds (module docstring)."""

    name = "known"

    def __init__(self, cycle: tuple[int, ...]) -> None:
        self.oracle, self.cycle = OracleBackend(), cycle

    def answer(self, request):
        inner = re.search(r"<answer>(.*)</answer>", self.oracle.answer(request).text).group(1)
        other = ", ".join(f"{float(t) + 1.25:.4f}" for t in tokens(inner))
        text = {0: f"<answer>{inner}</answer>",
                1: f"Looking at the slice, my final answer is {inner} as measured.",
                2: "I cannot measure this structure on the given image.",
                3: f"GARBLE the values would be {inner} I think.",
                4: f"SPANBAD the values are {inner} in total.",
                5: f"<answer>{inner}</answer> (earlier estimate: {other})"}[
            self.cycle[request.rundoc.doc.index % len(self.cycle)]]
        return GenResult(request.key, text, finish_reason="stop")


#: what the judge quotes of an answer of kinds 0, 1 and 5
SPANS = {0: r"<answer>.*?</answer>", 1: r"final answer is .*? as measured", 5: r"\(earlier estimate: [^)]*\)"}


def quoted(text: str) -> str:
    pattern = SPANS.get(kind(text))
    return re.search(pattern, text).group(0) if pattern else ""


def kind(text: str) -> int:
    """Which of the six kinds a stored answer is (read from the text, not from any code under test)."""
    for k, mark in ((5, "earlier estimate"), (1, "final answer is"), (2, "cannot measure"), (3, "GARBLE"),
                    (4, "SPANBAD")):
        if mark in text:
            return k
    assert text.startswith("<answer>"), text
    return 0


class KnownJudge(JudgeApp):
    """The judge's reply to each kind (module docstring), as JSON in the contract; records every request body."""

    async def verdict(self, body: dict, response: str, k: int) -> str:
        def present(span: str, values: list[float]) -> str:
            return json.dumps({"final_answer": {"status": "present", "span": span, "values": values}})

        kd = kind(response)
        if kd == 3:
            return "Sure! Everything looks fine to me."
        if kd == 2:
            return json.dumps({"final_answer": {"status": "no_conclusion", "span": "", "values": []}})
        if kd == 4:
            return present("SPANBAD the values are", [999.5] * k)
        span = quoted(response)
        return present(span, [float(t) for t in tokens(span)][-k:])


def judge_server() -> FakeProviderServer:
    server = FakeProviderServer()
    server.app = KnownJudge()
    return server.start()


@pytest.fixture()
def known(phantom_dir: Path, phantom_lists: Path, tmp_path: Path) -> Path:
    root = tmp_path / "res"
    for model, cycle in MODELS.items():
        for fam in FAMILIES:
            out = run_baseline(model, fam, phantom_dir, root / f"MedVision-Phantom-{fam}", "--sample_limit",
                               str(LIMIT), lists=phantom_lists, backend=lambda cfg, data, c=cycle: KnownBackend(c))
            assert all(o.state == "done" for o in out), out
    return root


def _stores(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("signature.json"))


def _texts(store: Path) -> dict[str, str]:
    return {r["key"]: r["text"] for seg in (store / "samples").glob("*.jsonl") for r in iter_jsonl(seg)
            if r.get("status") == "ok"}


def _judge(root: Path, *urls: str, extra: tuple[str, ...] = ()) -> Any:
    args = ["judge", "--results_dir", str(root), "--judge_model", "gemma4", "--min_valid_rate", "0"]
    for url in urls:
        args += ["--base_url", url]
    return run_cli(*args, *extra)


def _summary(root: Path, out: Path, *extra: str) -> dict[str, Any]:
    res = run_cli("summarize", "--results_dir", str(root), "--output_dir", str(out), "--parse", "judged",
                  "--no_plots", "--n_boot", "100", "--browse_per_task", "0", *extra)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((out / "summary.json").read_text())


# ---------------------------------------------------------------------------------------------- structured output

#: upstream's schema rules (script/llm-parsing/judge_prompts.py build_schema and judge_config.py @2f20f64): statuses,
#: span caps MAX_ANSWER_SPAN_CHARS 200 / MAX_STEP_SPAN_CHARS 120, per prompt kind the answer arity, the number of
#: steps and the largest step's number count (STEP_SPECS)
UPSTREAM_SCHEMA = {("TL", "TL"): (2, 4, 4), ("AD", "AD:distance"): (1, 3, 2), ("AD", "AD:angle"): (1, 3, 4),
                   ("AD", None): (1, None, None), ("Detection", None): (4, None, None)}


def check_schema(schema: dict[str, Any], arity: int, n_steps: int | None, step_values: int | None) -> None:
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    fa = schema["properties"]["final_answer"]
    assert fa["additionalProperties"] is False and fa["required"] == ["status", "span", "values"]
    assert fa["properties"]["status"] == {"type": "string", "enum": ["present", "no_conclusion"]}
    assert fa["properties"]["span"] == {"type": "string", "maxLength": 200}
    assert fa["properties"]["values"] == {"type": "array", "items": {"type": "number"}, "maxItems": arity}
    if n_steps is None:
        assert schema["required"] == ["final_answer"] and "steps" not in schema["properties"]
        return
    assert schema["required"] == ["final_answer", "steps"]
    steps = schema["properties"]["steps"]
    assert steps["type"] == "array" and steps["maxItems"] == n_steps
    item = steps["items"]
    assert item["additionalProperties"] is False and item["required"] == ["index", "status", "span", "values"]
    assert item["properties"]["index"] == {"type": "integer", "minimum": 1, "maximum": n_steps}
    assert item["properties"]["status"] == {"type": "string", "enum": ["present", "absent"]}
    assert item["properties"]["span"] == {"type": "string", "maxLength": 120}
    assert item["properties"]["values"] == {"type": "array", "items": {"type": "number"}, "maxItems": step_values}


@pytest.mark.parametrize(("prompt_kind", "want"), list(UPSTREAM_SCHEMA.items()))
def test_response_schema_is_upstreams(prompt_kind, want) -> None:
    check_schema(jp.response_schema(*prompt_kind), *want)


def test_judge_sends_the_schema_by_default_and_records_it(known: Path) -> None:
    with judge_server() as server:
        res = _judge(known, server.url)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "structured output: vllm-structured_outputs-json" in res.stderr
    bodies = [r.body for r in server.received]
    assert bodies and all(set(b["structured_outputs"]) == {"json"} for b in bodies)
    for b in bodies:  # each request carries the schema of its own task's contract
        user = b["messages"][-1]["content"][-1]["text"]
        arity = int(re.search(r"EXPECTED_ANSWER_COUNT: (\d+)", user).group(1))
        check_schema(b["structured_outputs"]["json"], *({2: (2, 4, 4), 4: (4, None, None)}[arity]))
    sigs = {}
    for store in _stores(known):
        (folder,) = (store / "judged").iterdir()
        inputs = json.loads((folder / "judge.json").read_text())["inputs"]
        assert inputs["structured_output"]["mode"] == "vllm-structured_outputs-json"
        assert inputs["structured_output"]["request_field"] == "structured_outputs.json"
        sigs[store] = folder.name
    # off with --structured none: no schema is sent, and it is another judge signature (the parses never mix)
    with judge_server() as server:
        res = _judge(known, server.url, extra=("--structured", "none"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert server.received and all("structured_outputs" not in r.body for r in server.received)
    for store in _stores(known):
        other = [f for f in (store / "judged").iterdir() if f.name != sigs[store]]
        assert len(other) == 1
        assert json.loads((other[0] / "judge.json").read_text())["inputs"]["structured_output"] == "none"


def test_an_api_judge_gets_no_schema(known: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosted providers take other structured-output fields: the schema goes only to a judge served at --base_url."""
    from medvision_bm.cli import judge as judge_cli

    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-openai-0123456789abcdef")
    with judge_server() as server:
        code = judge_cli.judge_main(["--results_dir", str(known), "--judge_model", "openai", "--base_url",
                                     server.url + "/v1", "--families", "detect", "--min_valid_rate", "0"])
    assert code == 0 and server.received
    assert all("structured_outputs" not in r.body for r in server.received)


# ---------------------------------------------------------------------------------------------- --limit_rows, servers

def test_limit_rows_takes_an_evenly_spaced_sample_and_two_servers_share_the_work(known: Path, tmp_path: Path) -> None:
    """Upstream's ``--limit_rows`` (run_judge_vllm.py @2f20f64): ``rows[int(i * len(rows) / N)]`` over the whole
    queue, every model and task, not its head; our queue is every stored answer of every store, in store order."""
    from medvision_bm.store.discovery import discover

    refs, _ = discover(known)
    order = [(ref.folder, key) for ref in refs for key, _ in sorted(
        ((r["key"], r["index"]) for r in iter_jsonl(ref.folder / "docs.jsonl")), key=lambda kv: kv[1])]
    n = 7
    want = {order[int(i * len(order) / n)] for i in range(n)}
    assert len({f for f, _ in want}) > 2  # spread over several stores, not the first one
    a, b = judge_server(), judge_server()
    try:
        res = _judge(known, a.url, b.url, extra=("--limit_rows", str(n), "--concurrency", "4"))
        assert res.returncode == 0, res.stderr[-3000:]  # judged in part on purpose
        assert f"--limit_rows {n}: {n} of {len(order)} stored answers" in res.stderr
        assert "judged in part (--limit_rows)" in res.stdout
        judged = {(seg.parents[3], r["key"]) for seg in known.rglob("judged/*/answers/*.jsonl")
                  for r in iter_jsonl(seg)}
        assert judged == want
        notes = _summary(known, tmp_path / "pilot")["notes"]  # a summary of the pilot says it is one
        assert sum("is incomplete" in n and "--limit_rows" in n for n in notes) == len(_stores(known))
        first = len(a.received) + len(b.received)
        res = _judge(known, a.url, b.url, extra=("--limit_rows", str(n)))  # the same sample: nothing to ask
        assert res.returncode == 0 and len(a.received) + len(b.received) == first, res.stderr[-2000:]
        res = _judge(known, a.url, b.url, extra=("--concurrency", "8"))  # the rest, spread over both servers
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        a.stop()
        b.stop()
    assert len(a.received) > 2 and len(b.received) > 2
    distinct = {(2 if "TumorLesionSize" in str(s) else 4, t) for s in _stores(known) for t in _texts(s).values()}
    asked = [r.body["messages"][-1]["content"][-1]["text"] for r in a.received + b.received]
    assert len(asked) == len(set(asked)) == len(distinct)  # every distinct answer asked once, on either server
    for store in _stores(known):
        (folder,) = (store / "judged").iterdir()
        assert json.loads((folder / "results.json").read_text())["complete"]


# ---------------------------------------------------------------------------------------------- the judge report

def expected(root: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Per family and model what upstream's report must say, counted from the stored texts' kinds."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for store in _stores(root):
        fam = "TL" if "TumorLesionSize" in store.parent.name else "detect"
        model = store.parent.parent.name
        e = out.setdefault(fam, {}).setdefault(model, {"kinds": Counter(), "parsed": [], "recovered": []})
        for text in _texts(store).values():
            k = kind(text)
            e["kinds"][k] += 1
            if k in (0, 5):
                e["parsed"].append(len(text))
            elif k == 1:
                e["recovered"].append(len(text))
    return out


def check_report(summary: dict[str, Any], out: Path, want: dict[str, dict[str, dict[str, Any]]]) -> None:
    for fam, models in want.items():
        rep = summary["judge_report"][fam]
        assert rep["parsed_dir"] == "llm-parsed_gemma-4-31b" and set(rep["models"]) == set(models)
        tot: Counter = Counter()
        for model, e in models.items():
            k, n = e["kinds"], sum(e["kinds"].values())
            tot.update(k)
            m = rep["models"][model]
            f, v, ln = m["failure_decomposition"], m["judge_validity"], m["response_length"]
            assert f["n_samples"] == n and f["n_strict_parsed"] == k[0] + k[5]
            assert f["n_judge_parsed"] == k[0] + k[5] + k[1]
            assert f["success_rate_strict"] == pytest.approx((k[0] + k[5]) / n)
            assert f["success_rate_judge"] == pytest.approx((k[0] + k[5] + k[1]) / n)
            assert f["n_format_failure"] == k[1] and f["n_genuine_non_answer"] == k[2]
            assert f["n_undetermined"] == k[3] + k[4]
            assert f["by_mode"] == {"conclusion_in_format": k[0] + k[5], "conclusion_off_format": k[1],
                                    "no_conclusion": k[2], "undetermined": k[3] + k[4]}
            assert f["format_failure_share"] == pytest.approx(k[1] / (n - k[0] - k[5]))
            assert v["n_reference"] == k[0] + k[5] and v["n_agree"] == k[0] and v["n_value_disagreement"] == k[5]
            assert v["agreement_rate"] == pytest.approx(k[0] / (k[0] + k[5]))
            assert v["judge_invalid_rate"] == pytest.approx(k[3] / n)
            assert v["span_unverified_rate"] == pytest.approx(k[4] / n)
            assert v["n_span_rejected"] == k[4] and v["span_rejection_reasons"] == {"values_not_in_span": k[4]}
            assert ln["originally_parsed"]["mean"] == pytest.approx(statistics.mean(e["parsed"]))
            assert ln["judge_recovered"]["mean"] == pytest.approx(statistics.mean(e["recovered"]))
            assert ln["judge_recovered"]["median"] == pytest.approx(statistics.median(e["recovered"]))
            per_model = out / "upstream" / {"TL": "TL", "detect": "Detect"}[fam] / model / \
                "llm-parsed_gemma-4-31b" / "summary_metrics_judge_Task.json"
            assert json.loads(per_model.read_text())["failure_decomposition"] == f
        n = sum(tot.values())
        pooled = rep["pooled"]
        assert pooled["n_samples"] == n and pooled["n_strict_parsed"] == tot[0] + tot[5]
        assert pooled["success_rate_judge"] == pytest.approx((tot[0] + tot[5] + tot[1]) / n)
        assert pooled["agreement_rate"] == pytest.approx(tot[0] / (tot[0] + tot[5]))
        # upstream's text report (summarize_judge_task.py @2f20f64; its TOTAL lines as in
        # Paper-results-backup/Detect/summary_judge_task__llm-parsed_gemma-4-31b.txt @755a7bb)
        txt = (out / "upstream" / {"TL": "TL", "detect": "Detect"}[fam] /
               "summary_judge_task__llm-parsed_gemma-4-31b.txt").read_text()
        assert txt.startswith(f"========== JUDGE REPORT: {'TL' if fam == 'TL' else 'Detection'} ==========\n")
        s, j = (tot[0] + tot[5]) / n * 100, (tot[0] + tot[5] + tot[1]) / n * 100
        assert f"{'TOTAL':<44}{s:>9.1f}%{j:>9.1f}%{j - s:>+7.1f}{tot[1]:>10,}{tot[2]:>12,}\n" in txt
        assert (f"{'TOTAL':<44}{tot[0] + tot[5]:>11,}{tot[1]:>12,}{tot[2]:>10,}{tot[3] + tot[4]:>8,}\n") in txt
        assert f"{'TOTAL':<44}{tot[0] + tot[5]:>9,}{tot[0]:>9,}{tot[0] / (tot[0] + tot[5]) * 100:>8.3f}%\n" in txt
        assert f"{'values_not_in_span':<44}{tot[4]:>10,}{100.0:>9.1f}%\n" in txt
        assert f"{'TOTAL rejected':<44}{tot[4]:>10,}{tot[4] / n * 100:>9.2f}% of records\n" in txt


def test_judge_report_numbers_are_the_known_outcomes(known: Path, tmp_path: Path) -> None:
    want = expected(known)
    assert all(all(k in e["kinds"] for k in range(6)) for m in want.values() for e in m.values())
    assert want["TL"]["oracle"]["kinds"] != want["TL"]["mean"]["kinds"]  # the two runs differ
    with judge_server() as server:
        res = _judge(known, server.url)
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "out"
    summary = _summary(known, out)
    check_report(summary, out, want)
    md = (out / "judge_report_TL.md").read_text()
    assert "Judge report: " in md and "| TOTAL |" in md
    assert (out / "judge_report_detect.csv").is_file()


# ---------------------------------------------------------------------------------------------- import of llm-parsed

def upstream_verdict(text: str, k: int) -> dict[str, Any]:
    """What upstream's apply_judge.py (@2f20f64) writes for an answer of each kind judged as the server above
    judges it: LLM_filtered_resps, LLM_judge_answer_mode, LLM_judge_SR and LLM_judge (reason, strict_pred,
    judge_pred, judge_span, judge_model, verify_tier), by its decision table (judge_decision.py)."""
    kd = kind(text)
    block = re.search(r"<answer>(.*?)</answer>", text)
    strict = ",".join(tokens(block.group(1))[-k:]) if block and len(tokens(block.group(1))) >= k else ""
    span = quoted(text)
    judge = ",".join(tokens(span)[-k:])
    mode, reason = {0: ("conclusion_in_format", "ok"), 1: ("conclusion_off_format", "ok"),
                    2: ("no_conclusion", "judge_no_conclusion"), 3: ("undetermined", "judge_invalid:no_json_object"),
                    4: ("undetermined", "span_values_not_in_span"), 5: ("conclusion_in_format", "ok")}[kd]
    pred = strict if strict else (judge if mode == "conclusion_off_format" else "")
    rec = {"LLM_filtered_resps": [pred], "LLM_judge_answer_mode": mode,
           "LLM_judge_SR": {"success": mode in ("conclusion_in_format", "conclusion_off_format")},
           "LLM_judge": {"reason": reason, "strict_pred": strict, "judge_pred": judge, "judge_span": span,
                         "judge_model": JUDGE_WEIGHTS}}
    if judge:
        rec["LLM_judge"]["verify_tier"] = "exact"
    return rec


def write_upstream(root: Path, data_root: Path, known_root: Path) -> dict[str, Any]:
    """Upstream's Results/<tag>/<model>/ of the known runs: the raw samples file and results file, and its
    llm-parsed_gemma-4-31b/ copy (same file name, filtered_resps replaced by LLM_filtered_resps); for one task an
    older timestamp whose answers the newer one replaced, with its own judged file. Returns what was planted."""
    planted: dict[str, Any] = {"superseded": 0}
    for store in _stores(known_root):
        task, model = store.parent.name, store.parent.parent.name
        k = 2 if "TumorLesionSize" in task else 4
        texts = _texts(store)
        raw = []
        for i, row in enumerate(sorted(iter_jsonl(store / "docs.jsonl"), key=lambda r: r["index"])):
            doc = Doc.from_json(row["doc"])
            raw.append({"doc_id": i, "doc": doc.upstream_row(data_root), "target": str(target(doc)),
                        "resps": [[texts[row["key"]]]], "filtered_resps": [texts[row["key"]]],
                        "input": "... Answer in <answer></answer> tags."})
        folder = root / f"MedVision-{'TL' if k == 2 else 'detect'}-CoT" / model
        if model == "oracle" and k == 2 and not planted["superseded"]:
            older = [{**r, "resps": [["<answer>1, 1</answer>"]], "filtered_resps": ["<answer>1, 1</answer>"]}
                     for r in raw[:3]]
            write_samples(folder, "20260101_100000", task, older)
            judged = folder / "llm-parsed_gemma-4-31b"
            judged.mkdir(parents=True, exist_ok=True)
            (judged / f"20260101_100000_samples_{task}.jsonl").write_text("".join(
                json.dumps(_judged_record(r, k)) + "\n" for r in older))
            planted["superseded"] = len(older)
            planted["line"] = f"{model}  {task}  judged by llm-parsed_gemma-4-31b: records={len(raw) + len(older)}  " \
                f"used={len(raw)}  superseded={len(older)}  unmatched=0  not_judged=0"
        write_samples(folder, "20260102_100000", task, raw)
        judged = folder / "llm-parsed_gemma-4-31b"
        judged.mkdir(parents=True, exist_ok=True)
        (judged / f"20260102_100000_samples_{task}.jsonl").write_text("".join(
            json.dumps(_judged_record(r, k)) + "\n" for r in raw))
    judged = next(root.rglob("llm-parsed_gemma-4-31b"))
    pilot = judged.parent / "llm-parsed_gemma-4-31b-limit100"
    pilot.mkdir()
    (pilot / "x_samples_y.jsonl").write_text("{}\n")
    # a judged file whose raw file is not there, and a judged file holding a record that is not a judged one
    (judged / "20250101_000000_samples_PhantomCT_TumorLesionSize_Task01_Axial.jsonl").write_text("{}\n")
    some = next(judged.glob("20260102_100000_samples_*.jsonl"))
    first = json.loads(some.read_text().splitlines()[0])
    plain = {k: v for k, v in first.items() if not k.startswith("LLM_")}
    some.write_text(some.read_text() + json.dumps(plain) + "\n")
    planted["malformed"] = f"{some}:{len(some.read_text().splitlines())}: not a judged record"
    planted["no_raw"] = "no raw samples file 20250101_000000_samples_PhantomCT_TumorLesionSize_Task01_Axial.jsonl"
    return planted


def _judged_record(raw: dict[str, Any], k: int) -> dict[str, Any]:
    out = {key: value for key, value in raw.items() if key != "filtered_resps"}
    out.update(upstream_verdict(raw["resps"][0][0], k))
    return out


def test_upstream_judged_folder_imports_and_summarizes_to_the_numbers_judged_here(known: Path, phantom_dir: Path,
                                                                                  tmp_path: Path) -> None:
    with judge_server() as server:
        res = _judge(known, server.url)
    assert res.returncode == 0, res.stderr[-3000:]
    # upstream's T/L removed-samples filter reads its lists from the data folder: the same for both summaries
    here = _summary(known, tmp_path / "here", "--data_dir", str(phantom_dir))

    up = tmp_path / "Results"
    planted = write_upstream(up, phantom_dir, known)
    imported = tmp_path / "imported"
    res = mv_cli("import", "--upstream_results", str(up), "--results_dir", str(imported), "--data_dir",
                 str(phantom_dir))  # at the tests' annotation pin, as the runs
    assert res.returncode == 0, res.stderr[-3000:]
    assert "llm-parsed_gemma-4-31b-limit100: a --limit pilot" in res.stderr
    assert planted["malformed"] in res.stderr and planted["no_raw"] in res.stderr and "Traceback" not in res.stderr
    # the older timestamp's judged records judged answers the newer one replaced: counted, not used
    assert planted["line"] in res.stdout, res.stdout
    stores = _stores(imported)
    assert len(stores) == len(_stores(known))
    for store in stores:
        (folder,) = (store / "judged").iterdir()
        held = json.loads((folder / "judge.json").read_text())
        inputs = held["inputs"]
        assert inputs["imported"] == "upstream-llm-parsed" and inputs["upstream_parsed_dir"] == "llm-parsed_gemma-4-31b"
        # the signature names the judge of the folder; the judge model its records name is kept beside it
        assert inputs["weights"] == "gemma-4-31b" and folder.name == held["judge_signature"][:12]
        assert held["import"]["judge_models"] == [JUDGE_WEIGHTS]
        for src in held["import"]["sources"]:
            assert "llm-parsed_gemma-4-31b" in src["path"] and len(src["sha256"]) == 64
        assert json.loads((folder / "results.json").read_text())["complete"]
    there = _summary(imported, tmp_path / "there", "--data_dir", str(phantom_dir))
    # the same verdicts give the same numbers: every task's metrics, and upstream's judge report
    for fam in FAMILIES:
        a = {(r["label"], r["task"]): r for r in here["families"][fam]["tasks"]}
        b = {(r["label"], r["task"]): r for r in there["families"][fam]["tasks"]}
        assert a.keys() == b.keys() and a
        for key, row in a.items():
            for metric in ("n", "SuccessRate", "avgMAE", "avgIoU", "avgMRE", "avgNMAE"):
                if metric in row:
                    assert b[key][metric] == pytest.approx(row[metric], rel=1e-12, abs=1e-15), (key, metric)
        assert there["judge_report"][fam] == here["judge_report"][fam]
    check_report(there, tmp_path / "there", expected(known))
