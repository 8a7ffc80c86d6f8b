"""Serve mode: replicas from a command template, health wait, URLs, and stopping on exit, error and Ctrl-C.

Most tests use the fake provider as the "server" (starts in well under a second); one test runs the real
``transformers serve`` on a tiny LLaVA end to end.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fakes.samples import make_request, run
from medvision_bm.errors import UserError
from medvision_bm.models.api.options import ApiOptions
from medvision_bm.models.api.serve import (
    ServedBackend,
    ServeError,
    ServeSpec,
    gpu_groups,
    render_command,
    serve,
    spec_for,
    vllm_args,
)
from medvision_bm.models.base import GenSettings

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "provider_server.py"
FAKE_TEMPLATE = f"{{python}} {FAKE} --host {{host}} --port {{port}} {{extra_args}}"


def gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def spec(tmp_path: Path, *extra: str, **kw) -> ServeSpec:
    kw.setdefault("health_timeout_s", 20)
    kw.setdefault("grace_s", 3)
    return ServeSpec(model="fake-model", template=FAKE_TEMPLATE, extra_args=tuple(extra), log_dir=tmp_path, **kw)


def test_replicas_start_answer_and_stop(tmp_path):
    s = spec(tmp_path, "--latency", "0.01", replicas=2, gpu_groups=("0,1", "2,3"))
    with serve(s) as served:
        assert len(served.base_urls) == 2 and len(set(served.base_urls)) == 2
        assert all(u.startswith("http://127.0.0.1:") and u.endswith("/v1") for u in served.base_urls)
        assert served.model_name == "fake-model"  # read back from /v1/models
        pids = [r.process.pid for r in served.replicas]
        logs = [r.log_path.read_text() for r in served.replicas]
        assert "CUDA_VISIBLE_DEVICES=0,1" in logs[0] and "CUDA_VISIBLE_DEVICES=2,3" in logs[1]
        assert all(not gone(p) for p in pids)
    assert all(gone(p) for p in pids)


def test_served_backend_spreads_requests_and_close_stops_servers(tmp_path):
    options = ApiOptions(gen=GenSettings(max_new_tokens=8, temperature=None), batch_size=4, max_retries=1)
    with ServedBackend(spec(tmp_path, "--log-requests", "--latency", "0.02", replicas=2), options) as backend:
        results = run(backend, [make_request(i) for i in range(12)])
        assert all(r.ok for r in results)
        assert backend.settings["base_urls"] == backend.served.base_urls
        pids = [r.process.pid for r in backend.served.replicas]
        counts = [r.log_path.read_text().count("answered POST /v1/chat/completions")
                  for r in backend.served.replicas]
    assert sum(counts) == 12 and min(counts) >= 3  # both replicas took a share
    assert all(gone(p) for p in pids)


def test_the_benchmarks_lean_server_speaks_enough_http(tmp_path):
    options = ApiOptions(gen=GenSettings(max_new_tokens=8, temperature=None), batch_size=8, max_retries=0)
    with ServedBackend(spec(tmp_path, "--lean", "--latency", "0.01"), options) as backend:
        results = run(backend, [make_request(i) for i in range(40)])
    assert [r.text for r in results] == ["<answer>12.5, 7.25</answer>"] * 40
    assert all(r.attempts == 1 and r.usage.input_tokens == 11 for r in results)


def test_a_replica_that_exits_early_is_reported_with_its_log(tmp_path):
    with pytest.raises(ServeError) as info, serve(spec(tmp_path, "--exit-after", "0")):
        pass
    text = str(info.value)
    assert "exited with status 3" in text and "failing on purpose" in text and "provider_server.py" in text


def running_with(needle: str) -> list[int]:
    """Pids of live processes whose command line contains ``needle``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and needle in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                state = (proc / "stat").read_text().split()[2]
                if state != "Z":
                    pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_a_replica_that_never_gets_healthy_times_out_and_is_killed(tmp_path):
    s = spec(tmp_path, "--startup-delay", "60", health_timeout_s=3.0)
    t0 = time.monotonic()
    with pytest.raises(ServeError, match="not healthy after 3 s") as info, serve(s):
        pass
    text = str(info.value)
    assert "--startup-delay 60" in text and "last lines" in text  # the command and the log tail
    assert time.monotonic() - t0 < 15
    port = text.split("(port ")[1].split(")")[0]
    assert running_with(f"--port {port} --startup-delay") == []


def test_ctrl_c_inside_the_context_stops_the_servers(tmp_path):
    pids: list[int] = []
    with pytest.raises(KeyboardInterrupt), serve(spec(tmp_path, replicas=2)) as served:
        pids = [r.process.pid for r in served.replicas]
        raise KeyboardInterrupt
    assert pids and all(gone(p) for p in pids)


def test_sigterm_to_us_stops_the_servers(tmp_path):
    pids: list[int] = []
    with pytest.raises(SystemExit) as info, serve(spec(tmp_path)) as served:
        pids = [r.process.pid for r in served.replicas]
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert info.value.code == 128 + signal.SIGTERM
    assert all(gone(p) for p in pids)
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handler is back


def test_a_server_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    s = spec(tmp_path, "--ignore-sigterm", grace_s=0.5)
    with serve(s) as served:
        pid = served.replicas[0].process.pid
        t0 = time.monotonic()
    assert gone(pid) and time.monotonic() - t0 < 5


def test_a_missing_program_is_a_clear_error(tmp_path):
    s = ServeSpec(model="m", template="no-such-server-binary --port {port}", log_dir=tmp_path, health_timeout_s=5)
    with pytest.raises(ServeError, match="cannot start server replica 0: no-such-server-binary"), serve(s):
        pass


def test_command_template_rendering():
    fields = {"model": "/w/Qwen 7B", "port": 8001, "host": "127.0.0.1", "served_name": "q", "gpus_per_replica": 2}
    argv = render_command("vllm serve {model} --port {port} --tensor-parallel-size {gpus_per_replica} {extra_args}",
                          fields, ["--max-model-len", "32768"])
    assert argv == ["vllm", "serve", "/w/Qwen 7B", "--port", "8001", "--tensor-parallel-size", "2",
                    "--max-model-len", "32768"]
    with pytest.raises(UserError, match="cannot fill '\\{nope\\}'"):
        render_command("x {nope} {port}", fields, [])
    with pytest.raises(UserError, match=r"--serve_command .*No closing quotation"):
        render_command("vllm serve '{model} --port {port}", fields, [])
    with pytest.raises(UserError, match="must contain \\{port\\}"):
        ServeSpec(model="m", template="vllm serve {model}")


def test_gpu_groups():
    assert gpu_groups(1, visible="0,1,2,3") == ("0", "1", "2", "3")
    assert gpu_groups(2, visible="4,5,6,7,8") == ("4,5", "6,7")
    assert gpu_groups(2, visible="", count=4) == ("0,1", "2,3")
    assert gpu_groups(1, visible="", count=0) == ()
    with pytest.raises(UserError, match="need 3 GPU groups"):
        ServeSpec(model="m", replicas=3, gpu_groups=("0", "1"))


def test_vllm_args_from_record_settings():
    args = vllm_args(max_model_len=32768, gpu_memory_utilization=0.9, dtype="bfloat16", seed=0,
                     engine_kwargs={"trust_remote_code": True, "enforce_eager": False,
                                    "limit_mm_per_prompt": {"image": 1}})
    assert args == ["--max-model-len", "32768", "--gpu-memory-utilization", "0.9", "--dtype", "bfloat16",
                    "--seed", "0", "--trust-remote-code", "--limit-mm-per-prompt", '{"image": 1}']
    assert "--dtype" not in vllm_args(dtype="auto")


def test_spec_from_a_run_config(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    record = SimpleNamespace(engine_kwargs={"trust_remote_code": True, "processor_resize_hw": [896, 896]},
                             max_model_len=16384)
    cfg = SimpleNamespace(model_flags={"serve_gpus_per_replica": 2}, lora_path=None, record=record,
                          weights="OpenGVLab/InternVL3-8B", gpu_memory_utilization=0.85, dtype="auto",
                          revision=None, gen=GenSettings(seed=0), results_dir=tmp_path, model_name="internvl3")
    s = spec_for(cfg)
    assert s.replicas == 2 and s.gpu_groups == ("0,1", "2,3")
    assert s.template.startswith("vllm serve {model}") and s.served_name == "OpenGVLab/InternVL3-8B"
    assert "--trust-remote-code" in s.extra_args and "--max-model-len" in s.extra_args
    assert not any("896" in a for a in s.extra_args)
    with pytest.raises(UserError, match="--lora_path"):
        spec_for(SimpleNamespace(**{**vars(cfg), "lora_path": "/adapters/x"}))


@pytest.mark.slow
def test_transformers_serve_with_a_tiny_llava_end_to_end(tmp_path):
    from medvision_bm.models.tiny import make_tiny_llava

    folder = make_tiny_llava(tmp_path / "tiny-llava")
    transformers_cli = Path(sys.executable).parent / "transformers"
    s = ServeSpec(model=str(folder), template=f"{transformers_cli} serve {{model}} --host {{host}} --port {{port}} "
                  "--device cpu", log_dir=tmp_path / "logs", health_timeout_s=120, grace_s=10)
    gen = GenSettings(max_new_tokens=16, temperature=0.0, seed=0)
    with ServedBackend(s, ApiOptions(gen=gen, batch_size=4, request_timeout=60)) as backend:
        assert backend.served.model_name == str(folder)
        results = run(backend, [make_request(i, gen=gen) for i in range(6)])
        pid = backend.served.replicas[0].process.pid
    assert all(r.ok for r in results), [r.error for r in results]
    assert all(r.finish_reason in ("stop", "length") and r.usage.output_tokens for r in results)
    assert gone(pid)
