"""The local GPU path against a bare ``model.generate`` loop: a 3B-class Qwen2.5-VL with random weights.

    python benchmarks/bench_gpu.py [--samples 1000] [--batch-sizes 1,16] [--max-new-tokens 32] [--workdir DIR]
    python benchmarks/bench_gpu.py --smoke      # the same code on the CPU with a tiny config (minutes, no GPU)

Where no CUDA GPU is visible it prints that it skipped and exits 0 (``--smoke`` runs anyway, on the CPU).

What it does, with nothing from the hub:
1. builds a Qwen2.5-VL from the published config.json of Qwen/Qwen2.5-VL-3B-Instruct (values below) with random
   bf16 weights, straight on the GPU, and saves it like a checkpoint (about 7 GB; the tiny tokenizer of
   ``medvision_bm.models.tiny`` stands in for the real one, its special tokens taking the config's roles);
2. writes the phantom data and one tasks list of phantom tasks (test splits, then train splits, then -CoT prompt
   variants: all three families) holding at least ``--samples`` samples;
3. per batch size, in fresh processes: the suite's runner (``medvision-bm run --model hf --device cuda``, model
   loaded once per process, lmms-eval once per task, answers into the sample store, scoring) and a bare loop
   (``from_pretrained`` + processor + ``model.generate`` over the same prompts and images, batches within a task);
4. prints samples/s of both (after the model is loaded, and warm: without lmms-eval's import and each side's first
   batch), their ratio (target >= 0.9 at batch 16), the ratio of the two processes' wall times (the runner imports
   lmms-eval in a thread while the weights load, so "after load" alone would not count it), peak GPU memory, peak
   host RSS and the split of a process's time into import, load, first batch and the rest.

Greedy decoding of random weights never emits EOS (the builder zeroes the special tokens' output rows), so every
answer is ``--max-new-tokens`` long on both sides.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _peak import peak_rss_mb

T_START = time.perf_counter()
REPO = Path(__file__).resolve().parents[1]

#: The published config.json of Qwen/Qwen2.5-VL-3B-Instruct (huggingface.co/Qwen/Qwen2.5-VL-3B-Instruct,
#: ``config.json``): every value that shapes the network. The token ids
#: (bos 151643, eos 151645, vision_start 151652, vision_end 151653, image 151655, video 151656) name tokens of the
#: real tokenizer, which is not used here: the stand-in tokenizer's own ids take those roles.
QWEN25_VL_3B_TEXT: dict[str, Any] = {
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 128000,
    "max_window_layers": 70,
    "num_attention_heads": 16,
    "num_hidden_layers": 36,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "use_cache": True,
    "use_sliding_window": False,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vocab_size": 151936,
}
QWEN25_VL_3B_VISION: dict[str, Any] = {
    "depth": 32,
    "hidden_act": "silu",
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "in_chans": 3,
    "out_hidden_size": 2048,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "spatial_patch_size": 14,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
    "tokens_per_second": 2,
    "temporal_patch_size": 2,
}
#: --smoke: the same code on the CPU with a network of the tiny test model's size.
SMOKE_TEXT: dict[str, Any] = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 4096, "initializer_range": 0.2, "vocab_size": 1024,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]},
}
SMOKE_VISION: dict[str, Any] = {
    "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "patch_size": 14, "spatial_merge_size": 2,
    "temporal_patch_size": 2, "window_size": 56, "out_hidden_size": 64, "fullatt_block_indexes": [1],
}
PIN = {"MedVision_PLANNER_VERSION": "1.0.0", "MedVision_ACK_RELEASE": "1.4.0"}


# ----------------------------------------------------------------------------------------------- parent
def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench_gpu.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=None, help="samples across tasks (default 1000; --smoke: 12)")
    p.add_argument("--sample-limit", type=int, default=None,
                   help="samples per task (--sample_limit of the runner; default: all; --smoke: 2)")
    p.add_argument("--batch-sizes", default=None, help="comma-separated (default 1,16; --smoke: 1,2)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 32; --smoke: 8")
    p.add_argument("--workdir", default=None, help="where the model, data and results go (default: a temp folder, "
                                                   "removed at the end)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument("--smoke", action="store_true", help="tiny config on the CPU: checks the code, measures the "
                                                       "per-process overheads without a GPU")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    ns = p.parse_args(argv)
    ns.samples = ns.samples or (12 if ns.smoke else 1000)
    ns.sample_limit = ns.sample_limit or (2 if ns.smoke else None)
    ns.max_new_tokens = ns.max_new_tokens or (8 if ns.smoke else 32)
    ns.batch_sizes = [int(b) for b in (ns.batch_sizes or ("1,2" if ns.smoke else "1,16")).split(",") if b.strip()]
    return ns


def cuda_available() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} sees no CUDA GPU (torch.cuda.is_available() is False)"
    return True, torch.cuda.get_device_name(0)


def bench_tasks(data_dir: Path, want: int, limit: int | None = None) -> dict[str, int]:
    """Phantom tasks (test splits, train splits, -CoT variants of the test splits; the families in turn) until they
    hold ``want`` samples (at most ``limit`` of each task); task -> samples it contributes."""
    from medvision_bm.data.layout import DataDir
    from medvision_bm.data.phantom import PHANTOM_TASKS
    from medvision_bm.data.planner import DatasetContract

    data = DataDir(DatasetContract.resolve(str(data_dir)))
    by_family = [PHANTOM_TASKS[fam] for fam in ("detect", "TL", "AD")]
    bases = [names[i] for i in range(max(map(len, by_family))) for names in by_family if i < len(names)]
    order = bases + [f"{t}_Train" for t in bases] + [f"{t}-CoT" for t in bases]
    tasks: dict[str, int] = {}
    for task in order:
        if sum(tasks.values()) >= want:
            break
        n = len(data.samples(task))
        tasks[task] = min(n, limit) if limit else n
    return tasks


def _child(ns: argparse.Namespace, role: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", role, "--spec", json.dumps(spec)],
                         capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-4000:] + res.stderr[-8000:])
        raise SystemExit(f"bench_gpu.py: the {role} process failed (exit {res.returncode}); its output is above")
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("BENCH_RESULT ")]
    out = json.loads(lines[-1].removeprefix("BENCH_RESULT "))
    out["process_wall_s"] = time.perf_counter() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    if ns.child:
        return child_main(ns.child, json.loads(ns.spec))
    ok, gpu = cuda_available()
    if not ok and not ns.smoke:
        print(f"bench_gpu.py: SKIPPED: no CUDA GPU here ({gpu}); run it on a machine with an NVIDIA GPU, "
              "or pass --smoke for the CPU check of the same code")
        return 0
    device = "cpu" if ns.smoke else "cuda"
    dtype = "float32" if ns.smoke else "bfloat16"
    work = Path(ns.workdir) if ns.workdir else Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **PIN, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    os.environ.update(PIN)
    try:
        data_dir = work / "data"
        if not (data_dir / "Datasets").is_dir():
            from medvision_bm.data.phantom import make_phantom

            make_phantom(data_dir)
        tasks = bench_tasks(data_dir, ns.samples, ns.sample_limit)
        tasks_list = work / "tasks_bench.json"
        tasks_list.write_text(json.dumps(tasks, indent=1))
        n = sum(tasks.values())
        model_dir = work / ("model-smoke" if ns.smoke else "model-qwen2_5_vl-3b-random")
        spec = {"model": str(model_dir), "data": str(data_dir), "tasks": str(tasks_list), "device": device,
                "dtype": dtype, "max_new_tokens": ns.max_new_tokens, "smoke": ns.smoke, "limit": ns.sample_limit}
        if not (model_dir / "model.safetensors.index.json").is_file() and not (model_dir / "model.safetensors").is_file():
            built = _child(ns, "build", spec, env)
            print(f"built {model_dir.name}: {built['params'] / 1e9:.2f} B parameters, "
                  f"{built['bytes'] / 2**30:.2f} GiB on disk, in {built['seconds']:.1f} s")
        print(f"device: {gpu if ok else 'cpu'} ({device}, {dtype}); {n} samples in {len(tasks)} tasks; "
              f"max_new_tokens {ns.max_new_tokens}")
        rows = []
        for bs in ns.batch_sizes:
            for role in ("runner", "bare"):
                r = _child(ns, role, {**spec, "batch_size": bs, "results": str(work / f"results-bs{bs}")}, env)
                r.update(role=role, batch_size=bs, n=n)
                rows.append(r)
        report(rows)
        if ns.json:
            Path(ns.json).write_text(json.dumps({"samples": n, "tasks": tasks, "device": gpu if ok else "cpu",
                                                 "rows": rows}, indent=1))
    finally:
        if not ns.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def report(rows: list[dict[str, Any]]) -> None:
    head = (f"{'side':<7}{'bs':>4}{'samples/s':>11}{'warm/s':>9}{'import s':>10}{'load s':>8}{'1st batch s':>13}"
            f"{'rest s':>9}{'wall s':>9}{'GPU peak GiB':>14}{'host RSS GiB':>14}")
    print(head)
    for r in rows:
        print(f"{r['role']:<7}{r['batch_size']:>4}{r['sps']:>11.2f}{r['warm_sps']:>9.2f}{r['import_s']:>10.2f}"
              f"{r['load_s']:>8.2f}{r['first_batch_s']:>13.2f}{r['rest_s']:>9.2f}{r['process_wall_s']:>9.1f}"
              f"{r['gpu_peak_gib']:>14.2f}{r['host_peak_rss_gib']:>14.2f}")
    for bs in sorted({r["batch_size"] for r in rows}):
        run = next(r for r in rows if r["batch_size"] == bs and r["role"] == "runner")
        bare = next(r for r in rows if r["batch_size"] == bs and r["role"] == "bare")
        ratio, warm = run["sps"] / bare["sps"], run["warm_sps"] / bare["warm_sps"]
        verdict = "" if bs < 16 else f"  (target >= 0.9 at batch 16: {'OK' if warm >= 0.9 else 'MISSED'})"
        print(f"batch {bs}: runner/bare = {ratio:.3f} after load, {warm:.3f} warm{verdict}; process wall "
              f"bare/runner = {bare['process_wall_s'] / run['process_wall_s']:.3f} (lmms-eval's import counted "
              "wherever it lands: a local model's run imports it while the weights load)")
        firsts = ", ".join(f"{s:.2f}" for s in run.get("task_first_batch_s", []))
        print(f"batch {bs}: runner first batch of each backend call (s): {firsts}; model loads per process: "
              f"{run.get('backend_loads')}; load to first generate call (lmms-eval import, prompts): "
              f"{run.get('before_first_generate_s', 0):.2f} s")


# ------------------------------------------------------------------------------------------------ children
def _peaks() -> dict[str, float]:
    import torch

    gpu = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    return {"gpu_peak_gib": gpu, "host_peak_rss_gib": peak_rss_mb() / 1024}


def child_main(role: str, spec: dict[str, Any]) -> int:
    out = {"build": _build, "runner": _runner, "bare": _bare}[role](spec)
    print("BENCH_RESULT " + json.dumps(out))
    return 0


def _build(spec: dict[str, Any]) -> dict[str, Any]:
    from medvision_bm.models.tiny import make_random_qwen2_5_vl

    t0 = time.perf_counter()
    text, vision = (SMOKE_TEXT, SMOKE_VISION) if spec["smoke"] else (QWEN25_VL_3B_TEXT, QWEN25_VL_3B_VISION)
    out = make_random_qwen2_5_vl(spec["model"], text, vision, dtype=spec["dtype"], device=spec["device"])
    size = sum(p.stat().st_size for p in Path(out).glob("*.safetensors"))
    from safetensors import safe_open

    params = 0
    for f in Path(out).glob("*.safetensors"):
        with safe_open(str(f), "pt") as fh:
            for k in fh.keys():  # noqa: SIM118 - safe_open has no __iter__
                params += math.prod(fh.get_slice(k).get_shape())
    return {"seconds": time.perf_counter() - t0, "bytes": size, "params": params}


def _timed_backend_factory(marks: dict[str, Any]):
    """build_backend, timing the load and each task's first batch (one generate call per task)."""
    from medvision_bm.runner.backends import build_backend

    def factory(cfg, data):
        t = time.perf_counter()
        backend = build_backend(cfg, data)
        marks["loaded"] = time.perf_counter()
        marks["load_s"] = marks["loaded"] - t
        marks["backend_loads"] = marks.get("backend_loads", 0) + 1
        real = backend.generate

        def generate(requests, on_result):
            start = time.perf_counter()
            first = [True]

            def sink(res):
                if first[0]:  # the first answer of a task lands when its first batch ends
                    first[0] = False
                    now = time.perf_counter()
                    marks.setdefault("task_first", []).append(now - start)
                    marks.setdefault("first_result", now)
                    marks.setdefault("first_generate", start)
                    marks.setdefault("first_task_n", len(requests))
                on_result(res)

            return real(requests, sink)

        backend.generate = generate
        return backend

    return factory


def _runner(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    import transformers  # noqa: F401 - timed here, as a run imports it

    t_import = time.perf_counter()
    from medvision_bm.models.registry import get_record
    from medvision_bm.runner.args import build_parser
    from medvision_bm.runner.config import build_config
    from medvision_bm.runner.loop import Runner

    if spec["device"] == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    shutil.rmtree(spec["results"], ignore_errors=True)
    rec = get_record("hf")
    argv = ["--model_hf_id", spec["model"], "--device", spec["device"], "--dtype", spec["dtype"],
            "--batch_size", str(spec["batch_size"]), "--max_new_tokens", str(spec["max_new_tokens"]),
            "--processor_resize", "none", "--data_dir", spec["data"], "--tasks_list_json_path", spec["tasks"],
            "--results_dir", spec["results"], "--skip_env_setup", "--skip_update_status", "--no_progress",
            *(["--sample_limit", str(spec["limit"])] if spec.get("limit") else [])]
    cfg = build_config(build_parser(rec, "bench").parse_args(argv), rec, argv)
    marks: dict[str, Any] = {}
    outcomes = Runner(cfg, _timed_backend_factory(marks)).run()
    t_end = time.perf_counter()
    bad = [o for o in outcomes if o.state != "done"]
    if bad:
        raise SystemExit(f"runner: {len(bad)} task(s) not done: {bad[0].task} {bad[0].state} {bad[0].error}")
    n = sum(o.n_asked for o in outcomes)
    first_n = min(int(spec["batch_size"]), marks["first_task_n"])
    return {"import_s": t_import - T_START, "load_s": marks["load_s"], "first_batch_s": marks["task_first"][0],
            "task_first_batch_s": marks["task_first"], "rest_s": t_end - marks["first_result"],
            "sps": n / (t_end - marks["loaded"]), "warm_sps": (n - first_n) / (t_end - marks["first_result"]),
            "before_first_generate_s": marks["first_generate"] - marks["loaded"], "asked": n,
            "backend_loads": marks["backend_loads"], **_peaks()}


def _bare(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    import transformers  # noqa: F401

    t_import = time.perf_counter()
    from transformers import AutoModelForImageTextToText

    from medvision_bm.data.layout import DataDir
    from medvision_bm.models.base import GenRequest
    from medvision_bm.models.hf_local import (
        build_messages,
        generation_kwargs,
        load_device_map,
        load_processor,
    )
    from medvision_bm.models.registry import get_record
    from medvision_bm.runner.args import build_parser
    from medvision_bm.runner.config import build_config
    from medvision_bm.runner.loop import prepare_task
    from medvision_bm.tasks import hooks

    if spec["device"] == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    rec = get_record("hf")
    argv = ["--model_hf_id", spec["model"], "--device", spec["device"], "--dtype", spec["dtype"],
            "--max_new_tokens", str(spec["max_new_tokens"]), "--processor_resize", "none", "--data_dir", spec["data"],
            "--tasks_list_json_path", spec["tasks"], "--results_dir", spec["results"] + "-bare",
            "--skip_env_setup", "--skip_update_status",
            *(["--sample_limit", str(spec["limit"])] if spec.get("limit") else [])]
    cfg = build_config(build_parser(rec, "bench").parse_args(argv), rec, argv)
    t0 = time.perf_counter()
    processor = load_processor(spec["model"])
    tok = processor.tokenizer
    tok.padding_side = "left"
    model = AutoModelForImageTextToText.from_pretrained(spec["model"], dtype=getattr(torch, spec["dtype"]),
                                                        device_map=load_device_map(spec["device"])).eval()
    t_loaded = time.perf_counter()
    data = DataDir(cfg.contract)
    bs = int(spec["batch_size"])
    first_result = None
    first_n = 0
    task_first: list[float] = []
    n = 0
    for task in cfg.tasks:
        prep = prepare_task(cfg, data, task)
        kwargs = generation_kwargs(prep.gen)
        task_start = time.perf_counter()
        for i in range(0, len(prep.rundocs), bs):
            chunk = prep.rundocs[i:i + bs]
            reqs = [GenRequest(rd.doc.key, hooks.prompt(rd), rd, prep.gen, images=[hooks.visual(rd)]) for rd in chunk]
            texts = [processor.apply_chat_template(build_messages(r), add_generation_prompt=True, tokenize=False)
                     for r in reqs]
            inputs = processor(text=texts, images=[r.images[0] for r in reqs], padding=True,
                               return_tensors="pt").to(model.device)
            with torch.inference_mode():
                output = model.generate(**inputs, **kwargs, pad_token_id=tok.pad_token_id)
            tok.batch_decode(output[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
            n += len(chunk)
            if i == 0:
                task_first.append(time.perf_counter() - task_start)
            if first_result is None:
                first_result, first_n = time.perf_counter(), len(chunk)
    t_end = time.perf_counter()
    return {"import_s": t_import - T_START, "load_s": t_loaded - t0, "first_batch_s": task_first[0],
            "task_first_batch_s": task_first, "rest_s": t_end - first_result, "sps": n / (t_end - t_loaded),
            "warm_sps": (n - first_n) / (t_end - first_result), "asked": n, "backend_loads": 1, **_peaks()}


if __name__ == "__main__":
    raise SystemExit(main())
