"""The runner over API and server backends: real SDK/HTTP clients against local fake providers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fakes.provider_server import FakeProviderServer, Fault
from mvtest_support import phantom_list, run_cli

pytestmark = pytest.mark.slow
PLANTED = "sk-planted-0123456789abcdefghijklmnopqrstuv"


@pytest.fixture()
def one_task(tmp_path: Path, phantom_lists: Path) -> tuple[Path, int]:
    """A tasks list of one phantom A/D task, and its sample count."""
    task, n = next(iter(phantom_list(phantom_lists, "AD").items()))
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps({task: n}))
    return p, n


def test_openai_compatible_retries_stores_failures_and_a_rerun_completes(tmp_path, phantom_dir, one_task):
    tl, n = one_task
    with FakeProviderServer(answer="<answer>31.5</answer>") as fake:
        # three 503s for the first sample: retried to success (3 retries allowed)
        fake.push(Fault("status", 503), Fault("status", 503), Fault("status", 503))
        args = ["run", "--model", "openai-compatible", "--base_url", f"{fake.url}/v1", "--model_name", "served-x",
                "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl), "--results_dir",
                str(tmp_path / "res"), "--task_status_json_path", str(tmp_path / "status.json"), "--skip_env_setup",
                "--max_retries", "3", "--batch_size", "1", "--no_progress", "--price_in", "2.5", "--price_out", "10"]
        first = run_cli(*args)
        assert first.returncode == 0, first.stderr[-2000:]
        results = json.loads(next((tmp_path / "res").glob("served-x/*/*/results.json")).read_text())
        assert results["complete"] and results["metrics"]["SuccessRate"] == 1.0
        assert results["usage"]["attempts"] == n + 3
        u = results["usage"]
        assert results["cost_usd"] == pytest.approx((u["input_tokens"] * 2.5 + u["output_tokens"] * 10) / 1e6)
        assert u["input_tokens"] > 0
        assert len([r for r in fake.received if r.path.endswith("/chat/completions")]) == n + 3
        sent = _sent_images(fake)  # the run hands the API engine grey slices: the very pictures upstream shows
        assert len(sent) > 1 and sent == _upstream_pictures(tmp_path / "res", phantom_dir)
        # a new signature (other max tokens): one sample's attempts all fail -> stored failure, exit 3
        fake.push(*[Fault("status", 500)] * 4)  # all 4 attempts of one sample fail
        second = run_cli(*args, "--max_new_tokens", "77")
        assert second.returncode == 3, second.stderr[-2000:]
        failed = [json.loads(p.read_text()) for p in (tmp_path / "res").glob("served-x/*/*/results.json")]
        incomplete = next(r for r in failed if not r["complete"])
        assert incomplete["counts"]["request_failed"] == 1 and incomplete["metrics"]["n_request_failed"] == 1
        entry = json.loads((tmp_path / "status.json").read_text())["served-x"][next(iter(json.loads(tl.read_text())))]
        assert entry["answer_signature"] != incomplete["answer_signature"], "an incomplete task is never marked done"
        before = len(fake.received)
        third = run_cli(*args, "--max_new_tokens", "77")
        assert third.returncode == 0
        assert len(fake.received) - before == 1, "only the failed sample is asked again"


def test_an_empty_answer_is_scored_at_once_as_a_parse_failure(tmp_path, phantom_dir, one_task):
    # upstream: an empty text is the model's answer (YongchengYAO/MedVision src/medvision_bm/medvision_lmms-eval/
    # lmms_eval/models/gemini__2_5_woTool.py @c221615 returns "" and retries only raised errors), and its parse of ""
    # is a failure: the task completes with one parse failure, no retries, no "incomplete"
    tl, n = one_task
    with FakeProviderServer(answer="<answer>31.5</answer>") as fake:
        fake.push(Fault("empty"))
        done = run_cli("run", "--model", "openai-compatible", "--base_url", f"{fake.url}/v1", "--model_name", "served-e",
                       "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tl), "--results_dir",
                       str(tmp_path / "res"), "--task_status_json_path", str(tmp_path / "status.json"),
                       "--skip_env_setup", "--max_retries", "7", "--batch_size", "1", "--no_progress")
        assert done.returncode == 0, done.stderr[-2000:]
        assert len([r for r in fake.received if r.path.endswith("/chat/completions")]) == n
    results = json.loads(next((tmp_path / "res").glob("served-e/*/*/results.json")).read_text())
    assert results["complete"] and results["usage"]["attempts"] == n
    assert results["counts"]["request_failed"] == 0 and results["metrics"]["n_parse_failed"] == 1
    assert results["metrics"]["SuccessRate"] == pytest.approx((n - 1) / n)
    assert json.loads((tmp_path / "status.json").read_text())["served-e"], "the task is marked done"


def _sent_images(fake: FakeProviderServer) -> set[bytes]:
    """The RGB pixels of every image the server received (each was sent as a single-channel PNG)."""
    import base64
    import io

    from PIL import Image

    out = set()
    for r in fake.received:
        for part in (p for m in r.body.get("messages", []) if isinstance(m.get("content"), list) for p in m["content"]):
            if part.get("type") == "image_url":
                head, b64 = part["image_url"]["url"].split(",", 1)
                img = Image.open(io.BytesIO(base64.b64decode(b64)))
                assert head == "data:image/png;base64" and img.mode == "L"
                out.add(img.convert("RGB").tobytes())
    return out


def _upstream_pictures(results: Path, phantom_dir: Path) -> set[bytes]:
    """Upstream's picture of every sample in the stores under ``results``: grey slice as RGB."""
    import dataclasses

    from medvision_bm.data.docs import rundoc_from_store_row
    from medvision_bm.tasks import hooks

    out = set()
    for docs in results.rglob("docs.jsonl"):
        for line in docs.read_text().splitlines():
            rd = dataclasses.replace(rundoc_from_store_row(json.loads(line)), data_root=str(phantom_dir))
            out.add(hooks.visual(rd).tobytes())
    return out


def test_a_planted_key_never_reaches_results_logs_or_output(tmp_path, phantom_dir, one_task):
    tl, _n = one_task
    with FakeProviderServer(answer="<answer>12</answer>") as fake:
        fake.push(Fault("status", 401, echo_auth=True))  # the provider echoes the credentials in its error
        # a model code with a verified image-size rule (A/D prompts state the perceived image size)
        res = run_cli("run", "--model", "openai", "--api_provider", "openai", "--openai_model_code", "gpt-4o",
                      "--base_url", f"{fake.url}/v1", "--data_dir", str(phantom_dir), "--tasks_list_json_path",
                      str(tl), "--results_dir", str(tmp_path / "res"), "--task_status_json_path",
                      str(tmp_path / "status.json"), "--skip_env_setup", "--batch_size", "2",
                      env={"OPENAI_API_KEY": PLANTED + "\n"})
        assert any(r.headers.get("Authorization", "").endswith(PLANTED) for r in fake.received), \
            ("key sent stripped", res.stderr[-2000:])
    assert res.returncode == 3, res.stderr[-2000:]
    hits = [p for p in tmp_path.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()]
    assert hits == []
    assert PLANTED not in res.stdout + res.stderr
    results = json.loads(next((tmp_path / "res").glob("gpt-4o/*/*/results.json")).read_text())
    assert results["counts"]["request_failed"] == 1


def test_a_thinking_budget_above_the_max_tokens_is_refused_before_any_request(tmp_path, phantom_dir, one_task):
    res = run_cli("run", "--model", "claude", "--thinking", "--thinking_budget", "9000", "--max_new_tokens", "4096",
                  "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(one_task[0]),
                  "--results_dir", str(tmp_path / "res"), "--skip_env_setup", env={"ANTHROPIC_API_KEY": "k" * 20})
    assert res.returncode == 2 and "--thinking_budget 9000" in res.stderr and "Traceback" not in res.stderr


def test_missing_key_fails_before_any_work(tmp_path, phantom_dir, one_task):
    res = run_cli("run", "--model", "claude", "--data_dir", str(phantom_dir), "--tasks_list_json_path",
                  str(one_task[0]), "--results_dir", str(tmp_path / "res"), "--skip_env_setup",
                  env={"ANTHROPIC_API_KEY": "  \n"})
    assert res.returncode == 2 and "ANTHROPIC_API_KEY" in res.stderr and "Traceback" not in res.stderr
    assert not list(tmp_path.glob("res/*/*/*/samples/*.jsonl"))


def test_serve_mode_against_transformers_serve_with_a_tiny_model(tmp_path, phantom_dir, one_task):
    from medvision_bm.models.tiny import make_tiny_llava

    tiny = make_tiny_llava(tmp_path / "tiny-llava")
    cli = Path(sys.executable).parent / "transformers"
    res = run_cli("run", "--model", "llava_onevision", "--serve", "--model_hf_id", str(tiny),
                  "--serve_command", f"{cli} serve {{model}} --host {{host}} --port {{port}} --device cpu",
                  "--serve_timeout", "240", "--data_dir", str(phantom_dir), "--tasks_list_json_path",
                  str(one_task[0]), "--results_dir", str(tmp_path / "res"), "--skip_update_status",
                  "--skip_env_setup", "--sample_limit", "3", "--max_new_tokens", "12", "--temperature", "0",
                  "--batch_size", "2", "--no_progress", timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(next((tmp_path / "res").glob("*/*/*/results.json")).read_text())
    assert results["counts"]["answered"] == 3 and results["usage"]["output_tokens"] > 0
    assert results["signature_inputs"]["model"]["weights"] == str(tiny)
