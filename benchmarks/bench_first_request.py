"""Benchmark: seconds from the start of an API launcher run to its first request, on a freshly built environment,
with the bytecode the build now compiles and without it (how builds left environments before issue 24).

Builds eval-api under --workdir (from the uv cache; CPU torch from TORCH_FIND_LINKS, else /opt/wheels) unless
--envs_root names a built one, then runs the openai-compatible launcher (--skip_env_setup, one A/D task, one
sample, the data check on) against a local fake OpenAI server, timing start -> first POST:
  after      the environment as built (bytecode compiled at build time), PYTHONDONTWRITEBYTECODE=1;
  before     the same environment with every __pycache__ removed (what a build without --compile-bytecode leaves),
             its first run, bytecode written as it goes;
  read-only  without bytecode again and PYTHONDONTWRITEBYTECODE=1: what every run paid where the environment is
             not writable by the job, or that variable is set (it is in many cluster and CI shells);
  after      once more at the end (the noise between runs of one setting).
Prints the wall time to the first request, the CPU time (user + system) of the whole run (the run after its first
request is one sample: the CPU figure stays meaningful on a loaded machine, where wall times stretch) and the ratios
against the first `after` of the same run.
Run: python benchmarks/bench_first_request.py [--workdir DIR] [--envs_root ROOT] [--no_strip]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fakes.provider_server import FakeProviderServer  # noqa: E402
from medvision_bm.data.phantom import LAUNCHER_PIN  # noqa: E402

LAUNCHER = REPO / "script" / "benchmark-AD" / "openai-compatible.sh"


def _env(envs_root: Path, work: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MedVision_", "VIRTUAL_ENV"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(LAUNCHER_PIN, ENVS_ROOT=str(envs_root), BENCHMARK_DIR=str(REPO), DATA_DIR=str(work / "Data"),
               TASKS_LIST=str(work / "tasks_one_AD.json"), RESULTS_DIR=str(work / "Results"),
               STATUS_FILE=str(work / "status.json"))
    env.setdefault("TORCH_FIND_LINKS", "/opt/wheels")
    env.update(extra)
    return env


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _first_request(envs_root: Path, work: Path, label: str, **extra: str) -> tuple[float, float, float]:
    """(seconds to the first request, seconds to the end, CPU seconds) of one launcher run."""
    shutil.rmtree(work / "Results", ignore_errors=True)
    cpu0 = _cpu()
    with FakeProviderServer() as server:
        start = time.monotonic()
        proc = subprocess.Popen(["bash", str(LAUNCHER), "--skip_env_setup", "--sample_limit", "1", "--no_progress",
                                 "--base_url", server.url + "/v1", "--model_name", f"bench-{label}"],
                                env=_env(envs_root, work, **extra), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        first = None
        while proc.poll() is None and first is None:
            if any(r.method == "POST" for r in server.received):
                first = time.monotonic() - start
            time.sleep(0.02)
        out, _ = proc.communicate(timeout=900)
        end = time.monotonic() - start
        if first is None and any(r.method == "POST" for r in server.received):
            first = end
    if proc.returncode != 0 or first is None:
        raise SystemExit(f"{label}: the launcher failed (exit {proc.returncode}):\n{out[-3000:]}")
    return first, end, _cpu() - cpu0


def _strip(prefix: Path) -> int:
    n = 0
    for cache in list(prefix.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--envs_root", default=None, help="an ENVS_ROOT whose eval-api is built already")
    ap.add_argument("--no_strip", action="store_true", help="time the environment as it is only (no before runs)")
    ns = ap.parse_args()
    work = Path(ns.workdir or tempfile.mkdtemp(prefix="bench-first-request-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "medvision_bm.cli", "data", "make-phantom", "--data_dir",
                    str(work / "Data")], check=True, capture_output=True)
    tasks = json.loads((REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json").read_text())
    first_task = sorted(tasks)[0]
    (work / "tasks_one_AD.json").write_text(json.dumps({first_task: tasks[first_task]}))
    envs_root = Path(ns.envs_root).resolve() if ns.envs_root else work / "envs"
    prefix = envs_root / "eval-api"
    if not ns.envs_root:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "medvision_bm.cli", "envs", "build", "--env", "eval-api"],
                       env=_env(envs_root, work), check=True, capture_output=True)
        print(f"eval-api built in {time.monotonic() - t0:.1f} s ({sum(1 for _ in prefix.rglob('*.pyc'))} .pyc files)")
    rows = [("after (bytecode from the build)", _first_request(envs_root, work, "after",
                                                               PYTHONDONTWRITEBYTECODE="1"))]
    if not ns.no_strip:
        print(f"removed {_strip(prefix)} __pycache__ folders")
        rows.append(("before (no bytecode, first run writes it)", _first_request(envs_root, work, "before")))
        _strip(prefix)
        rows.append(("before, read-only (PYTHONDONTWRITEBYTECODE=1)",
                     _first_request(envs_root, work, "readonly", PYTHONDONTWRITEBYTECODE="1")))
        subprocess.run([str(prefix / "bin" / "python"), "-m", "compileall", "-q", "-j", "0", str(prefix / "lib")],
                       capture_output=True)
        rows.append(("after, again (bytecode compiled back)", _first_request(envs_root, work, "after2",
                                                                             PYTHONDONTWRITEBYTECODE="1")))
    base, base_cpu = rows[0][1][0], rows[0][1][2]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'environment':<48} {'first request':>14} {'run ends':>9} {'ratio':>6} {'run CPU':>9} {'ratio':>6}")
    for label, (first, end, cpu) in rows:
        print(f"{label:<48} {first:>12.1f} s {end:>7.1f} s {first / base:>6.2f} {cpu:>7.1f} s {cpu / base_cpu:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
