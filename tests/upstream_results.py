"""Builders of upstream lmms-eval result folders (a samples file and the run's results file), for the import tests."""

from __future__ import annotations

import json
from pathlib import Path

SANITIZED = "Qwen__Qwen2.5-VL-7B-Instruct"  # lmms-eval sanitize_model_name("Qwen/Qwen2.5-VL-7B-Instruct")


def write_samples(folder: Path, ts: str, task: str, recs: list[dict]) -> None:
    """A samples file, and its task added to the run's one results file with upstream's settings (lmms-eval writes
    one per run, for every task of it; no eval-time numbers: none is compared here)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{ts}_samples_{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    path = folder / f"{ts}_results.json"
    results = json.loads(path.read_text()) if path.is_file() else {
        "results": {}, "configs": {}, "versions": {},
        "config": {"model": "vllm_qwen25vl", "gen_kwargs": "", "model_args": "pretrained=Qwen/Qwen2.5-VL-7B-Instruct"},
        "git_hash": "2f20f64", "date": ts, "model_name": "Qwen/Qwen2.5-VL-7B-Instruct",
        "model_name_sanitized": SANITIZED}
    results["results"][task] = {"alias": task}
    results["configs"][task] = {"task": task, "generation_kwargs": {"max_new_tokens": 4096, "temperature": 0},
                                "lmms_eval_specific_kwargs": {"model": "qwen2_5_vl"}}
    results["versions"][task] = "Yaml"
    path.write_text(json.dumps(results))
