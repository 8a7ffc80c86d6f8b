"""Engine settings and the answer signature, through the real runner with a tiny model on CPU.

Greedy answers of a local model change with its batch size (left padding, batched kernels) and device, so those
settings enter the answer signature of local engines: a resume at another batch size never mixes answers into the
store of the first, a rerun at another batch size is not skipped as done, every stored answer records the engine
settings that produced it, and the report keeps the two runs apart, naming the setting they differ in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medvision_bm.cli.run import cli_main
from medvision_bm.models.registry import get_record


@pytest.fixture(scope="module")
def one_task_list(phantom_lists: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tasks = json.loads((phantom_lists / "tasks_MedVision-Phantom-detect.json").read_text())
    task = sorted(tasks)[0]
    path = tmp_path_factory.mktemp("one") / "tasks_one.json"
    path.write_text(json.dumps({task: tasks[task]}))
    return path, task


def _run(tiny: Path, phantom_dir: Path, tasks: Path, results: Path, status: Path, *extra: str) -> int:
    return cli_main(["--model", "hf", "--model_hf_id", str(tiny), "--device", "cpu", "--processor_resize", "none",
                     "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks), "--results_dir",
                     str(results), "--task_status_json_path", str(status), "--skip_env_setup", "--no_progress",
                     "--max_new_tokens", "3", *extra])


def _stores(results: Path, model: str, task: str) -> dict[int, Path]:
    """Store folders of one model and task, by the batch size their signature records."""
    out = {}
    for sig in (results / model / task).glob("*/signature.json"):
        inputs = json.loads(sig.read_text())["inputs"]
        out[inputs["engine"]["batch_size"]] = sig.parent
    return out


def _records(store: Path) -> list[dict]:
    return [json.loads(line) for seg in sorted((store / "samples").glob("*.jsonl"))
            for line in seg.read_text().splitlines() if line.strip()]


def test_batch_size_enters_the_signature_and_every_answer_records_its_engine(
        tiny_qwen_dir: Path, phantom_dir: Path, one_task_list: tuple[Path, str], tmp_path: Path, capsys) -> None:
    tasks, task = one_task_list
    results, status = tmp_path / "res", tmp_path / "status.json"
    model = tiny_qwen_dir.name
    assert _run(tiny_qwen_dir, phantom_dir, tasks, results, status, "--batch_size", "1", "--sample_limit", "2") == 0
    # the same command at batch size 2: not "already done", and asked again into a store of its own, with one
    # more sample (a resume at another batch size reuses nothing of the first store)
    capsys.readouterr()
    assert _run(tiny_qwen_dir, phantom_dir, tasks, results, status, "--batch_size", "2", "--sample_limit", "2") == 0
    err = capsys.readouterr().err
    assert "already done" not in err and "2 of 2 samples to answer (0 reused" in err
    assert _run(tiny_qwen_dir, phantom_dir, tasks, results, status, "--batch_size", "2", "--sample_limit", "3") == 0
    assert "1 of 3 samples to answer (2 reused" in capsys.readouterr().err  # same batch size: resumed

    stores = _stores(results, model, task)
    assert set(stores) == {1, 2}
    one, two = stores[1], stores[2]
    sig1 = json.loads((one / "signature.json").read_text())
    sig2 = json.loads((two / "signature.json").read_text())
    assert sig1["answer_signature"] != sig2["answer_signature"]
    assert sig1["inputs"]["engine"] == {"batch_size": 1, "device": "cpu"}
    assert sig2["inputs"]["engine"] == {"batch_size": 2, "device": "cpu"}
    for store, bs, n in ((one, 1, 2), (two, 2, 3)):
        recs = _records(store)
        assert len(recs) == n and all(r["status"] == "ok" for r in recs)
        for r in recs:  # the engine that produced each stored answer
            eng = r["engine"]
            assert eng["batch_size"] == bs and eng["device"] == "cpu" and eng["engine"] == "transformers"
            assert eng["dtype"] == "float32" and eng["attn_implementation"] and eng["torch"] and eng["transformers"]
        res = json.loads((store / "results.json").read_text())
        assert res["signature_inputs"]["engine"]["batch_size"] == bs
    done = json.loads(status.read_text())
    assert json.dumps(done).count(sig2["answer_signature"]) >= 1

    # the report tells the two runs apart by the engine setting and never averages them together
    from medvision_bm.store.discovery import discover

    refs, notes = discover(results)
    labels = {r.label for r in refs if r.task == task}
    assert len(labels) == 2, labels
    assert any("engine.batch_size: 1 vs 2" in n or "engine.batch_size: 2 vs 1" in n for n in notes), notes


def _cfg(model: str, *flags: str):
    """A RunConfig from flags, as the runner resolves it (the tasks list itself is not read)."""
    from medvision_bm.runner.args import build_parser
    from medvision_bm.runner.config import build_config

    rec = get_record(model)
    ns = build_parser(rec, "t").parse_args(["--tasks_list_json_path", "x.json", *flags])
    return build_config(ns, rec, [])


def test_which_engine_settings_enter_the_signature(monkeypatch, phantom_dir: Path) -> None:
    from medvision_bm.runner.engine import engine_record, engine_signature
    from medvision_bm.store.signature import answer_signature_inputs

    monkeypatch.setenv("MedVision_DATA_DIR", str(phantom_dir))
    monkeypatch.setattr("medvision_bm.runner.config.load_tasks_list", lambda path: {})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    vllm = _cfg("qwen2_5_vl", "--batch_size", "8", "--gpu_memory_utilization", "0.5")
    assert engine_signature(vllm) == {"max_num_seqs": 8, "gpu_memory_utilization": 0.5, "tensor_parallel_size": 2}
    # a server batches for itself: --batch_size is concurrency there, as for API models and baselines
    assert engine_signature(_cfg("qwen2_5_vl", "--base_url", "http://127.0.0.1:9/v1")) is None
    api = _cfg("openai-compatible", "--model_name", "m", "--base_url", "http://127.0.0.1:9/v1", "--batch_size", "64")
    assert engine_signature(api) is None and engine_signature(_cfg("oracle")) is None
    hf = _cfg("hf", "--model_hf_id", "org/name", "--device", "cuda", "--batch_size", "16", "--dtype", "bfloat16")
    assert engine_signature(hf) == {"batch_size": 16, "device": "cuda"}
    third = _cfg("llava_med", "--batch_size", "3")
    assert engine_signature(third) == {"batch_size": 3}
    # API signatures keep their earlier form (no engine key): their stores stay valid
    base = dict(model={}, generation={}, task="t", task_version="v", protocol="current", planner_version="1",
                plan_version="1", filtering=True, reshape_hw=None, processed_hw_rule="none", system_prompt=None,
                model_flags={})
    assert "engine" not in answer_signature_inputs(**base, engine=engine_signature(api))
    assert answer_signature_inputs(**base, engine={"batch_size": 1})["engine"] == {"batch_size": 1}

    class _Backend:
        def engine_info(self) -> dict:
            return {"engine": "vllm", "max_num_seqs": 8, "vllm": "0.0"}

    rec = engine_record(vllm, _Backend())
    assert rec["backend"] == "vllm" and rec["vllm"] == "0.0" and rec["gpu_memory_utilization"] == 0.5
    assert engine_record(api, object()) == {"backend": "openai_compatible", "batch_size": 64, "dtype": "auto"}
