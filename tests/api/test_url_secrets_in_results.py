"""A token in a --base_url's query or path never reaches a file of the results folder or the output,
while the requests still go to that URL (the gateway's path and query kept)."""

from __future__ import annotations

import json

from fakes.provider_server import FakeProviderServer
from mvtest_support import phantom_list, run_cli


def test_query_and_path_tokens_reach_no_file(tmp_path, phantom_dir, phantom_lists):
    """Before: `--base_url 'http://host/v1?token=...'` and a token as a path segment were stored verbatim in
    results.json (its argv)."""
    path_key, query_key = "gk7Q2m9X4p1R8s3T6v0W5y", "Qv-9931-tkn"
    first = sorted(phantom_list(phantom_lists, "TL"))[0]
    tasks = tmp_path / "lists" / "tasks_one.json"
    tasks.parent.mkdir()
    tasks.write_text(json.dumps({first: 1}))
    with FakeProviderServer() as server:
        url = f"{server.url}/gw/{path_key}/v1?api-key={query_key}"
        res = run_cli("run", "--model", "openai-compatible", "--model_name", "gw-model", "--base_url", url,
                      "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks), "--results_dir",
                      str(tmp_path / "res"), "--skip_env_setup", "--sample_limit", "1", "--no_progress",
                      "--task_status_json_path", str(tmp_path / "st.json"), cwd=tmp_path)
        posts = [r for r in server.received if r.method == "POST"]
    assert res.returncode == 0, res.stderr[-3000:]
    assert posts and {r.path for r in posts} == {f"/gw/{path_key}/v1/chat/completions"}
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p != tasks]
    assert any(p.name == "results.json" for p in files)
    for text in [res.stdout + res.stderr, *(p.read_text(errors="replace") for p in files)]:
        assert path_key not in text and query_key not in text
    results = next((tmp_path / "res").glob("gw-model/*/*/results.json")).read_text()
    assert "/gw/***/v1?api-key=***" in results
