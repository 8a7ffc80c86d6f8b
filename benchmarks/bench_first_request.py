"""Benchmark: seconds from the start of an API launcher run to its first request, on a freshly built environment:
today's code (every sample asked at once, lmms-eval loading in a process of its own) beside an earlier commit's
(--baseline_ref: the code before any sample was asked while lmms-eval loaded, which asked nothing until lmms-eval
was imported), and with the bytecode the build
compiles beside without it (how builds left environments before bytecode was compiled at build time).

Builds eval-api under --workdir (from the uv cache; CPU torch from TORCH_FIND_LINKS, else /opt/wheels) unless
--envs_root names a built one, then runs the openai-compatible launcher (--skip_env_setup, one A/D task, one
sample, the data check on) against a local fake OpenAI server, timing start -> first POST, over --pairs rounds in a
rotated order:
  now        the environment as built (bytecode compiled at build time), PYTHONDONTWRITEBYTECODE=1;
  baseline   the same environment running the baseline commit's package (its source on PYTHONPATH, compiled
             first), PYTHONDONTWRITEBYTECODE=1.
With --bytecode, once more after the rounds, the baseline without any bytecode and PYTHONDONTWRITEBYTECODE=1: where
builds stood before bytecode was compiled at build time (every __pycache__ of the environment removed, as a build
without --compile-bytecode left it).
Prints per round the wall time to the first request and the CPU time (user + system) of the whole run (the run
after its first request is one sample: the CPU figure stays meaningful on a loaded machine, where wall times
stretch), and the medians and ratios baseline/now.
Run: python benchmarks/bench_first_request.py [--workdir DIR] [--envs_root ROOT] [--baseline_ref REF] [--pairs N]
     [--bytecode]

``--model oracle`` (or another baseline) times a baseline instead, in this interpreter's environment (nothing is
built): ``medvision-bm run --model oracle`` on the same one-task list, start -> its first answer line in the store,
today's code beside ``--baseline_ref`` (default ``BASELINE_RUN_REF``: the last commit whose baselines ran through
lmms-eval's task loop).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from _gitref import source_at  # noqa: E402
from fakes.provider_server import FakeProviderServer  # noqa: E402
from medvision_bm.data.phantom import LAUNCHER_PIN  # noqa: E402

LAUNCHER = REPO / "script" / "benchmark-AD" / "openai-compatible.sh"
#: the last commit whose runs asked nothing until lmms-eval was imported
BASELINE_REF = "7bd139f"
#: the last commit whose baselines ran through lmms-eval's task loop (imported lmms-eval and torch first)
BASELINE_RUN_REF = "f5837c8"


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


def _first_answer(work: Path, model: str, label: str, pythonpath: str) -> tuple[float, float, float]:
    """(seconds to the first answer stored, seconds to the end, CPU seconds) of one `medvision-bm run` of a
    baseline, in this interpreter's environment with ``pythonpath`` first."""
    results = work / f"Results-{label}"
    shutil.rmtree(results, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MedVision_")}
    env.update(LAUNCHER_PIN, PYTHONPATH=pythonpath, PYTHONDONTWRITEBYTECODE="1")
    cpu0 = _cpu()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "medvision_bm.cli", "run", "--model", model, "--data_dir",
                             str(work / "Data"), "--tasks_list_json_path", str(work / "tasks_one_AD.json"),
                             "--results_dir", str(results), "--skip_update_status", "--skip_env_setup",
                             "--no_progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first = None
    while proc.poll() is None and first is None:
        if any(seg.stat().st_size for seg in results.glob("*/*/*/samples/*.jsonl")):
            first = time.monotonic() - start
        time.sleep(0.01)
    out, _ = proc.communicate(timeout=900)
    end = time.monotonic() - start
    if first is None and any(seg.stat().st_size for seg in results.glob("*/*/*/samples/*.jsonl")):
        first = end
    if proc.returncode != 0 or first is None:
        raise SystemExit(f"{label}: the run failed (exit {proc.returncode}):\n{out[-3000:]}")
    return first, end, _cpu() - cpu0


def _baseline_model(ns: argparse.Namespace, work: Path) -> int:
    """Time a baseline's run, today's code beside the baseline commit's, --pairs rounds in a rotated order."""
    ref = ns.baseline_ref if ns.baseline_ref != BASELINE_REF else BASELINE_RUN_REF
    baseline_src = source_at(ref)
    sides = {"now": str(REPO / "src"), f"baseline {ref}": str(baseline_src)}
    for src in sides.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", src], capture_output=True)
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    print(f"{'round':<6} {'side':<28} {'first answer':>13} {'run ends':>9} {'run CPU':>9}")
    for r in range(ns.pairs):
        names = list(sides)[r % 2:] + list(sides)[: r % 2]
        for k, name in enumerate(names):
            got = _first_answer(work, ns.model, f"r{r}s{k}", sides[name])
            runs[name].append(got)
            print(f"{r:<6} {name:<28} {got[0]:>11.2f} s {got[1]:>7.2f} s {got[2]:>7.2f} s")
    _medians(runs, "first answer")
    return 0


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
    ap.add_argument("--baseline_ref", default=BASELINE_REF, help=f"the commit to compare with (default {BASELINE_REF})")
    ap.add_argument("--pairs", type=int, default=3, help="rounds of (now, baseline), order rotated (default 3)")
    ap.add_argument("--bytecode", action="store_true", help="also the baseline without bytecode (the environment's "
                    "__pycache__ folders are removed, so this runs last)")
    ap.add_argument("--model", default=None, help="time this baseline's run (oracle, mean, random-box) instead of "
                    "the API launcher's")
    ns = ap.parse_args()
    work = Path(ns.workdir or tempfile.mkdtemp(prefix="bench-first-request-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "medvision_bm.cli", "data", "make-phantom", "--data_dir",
                    str(work / "Data")], check=True, capture_output=True)
    tasks = json.loads((REPO / "tasks_list" / "tasks_MedVision-Phantom-AD.json").read_text())
    first_task = sorted(tasks)[0]
    (work / "tasks_one_AD.json").write_text(json.dumps({first_task: tasks[first_task]}))
    if ns.model:
        return _baseline_model(ns, work)
    envs_root = Path(ns.envs_root).resolve() if ns.envs_root else work / "envs"
    prefix = envs_root / "eval-api"
    if not ns.envs_root:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "medvision_bm.cli", "envs", "build", "--env", "eval-api"],
                       env=_env(envs_root, work), check=True, capture_output=True)
        print(f"eval-api built in {time.monotonic() - t0:.1f} s ({sum(1 for _ in prefix.rglob('*.pyc'))} .pyc files)")
    baseline_src = source_at(ns.baseline_ref)
    subprocess.run([str(prefix / "bin" / "python"), "-m", "compileall", "-q", "-j", "0", str(baseline_src)],
                   capture_output=True)
    baseline = f"baseline {ns.baseline_ref}"
    sides = {"now": {}, baseline: {"PYTHONPATH": str(baseline_src)}}
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in sides}
    print(f"{'round':<6} {'side':<28} {'first request':>14} {'run ends':>9} {'run CPU':>9}")
    for r in range(ns.pairs):
        names = list(sides)[r % 2:] + list(sides)[: r % 2]
        for k, name in enumerate(names):
            got = _first_request(envs_root, work, f"r{r}s{k}", PYTHONDONTWRITEBYTECODE="1", **sides[name])
            runs[name].append(got)
            print(f"{r:<6} {name:<28} {got[0]:>12.1f} s {got[1]:>7.1f} s {got[2]:>7.1f} s")
    if ns.bytecode:
        print(f"removed {_strip(prefix)} __pycache__ folders of the environment, and the baseline's")
        _strip(baseline_src)
        got = _first_request(envs_root, work, "nobytecode", PYTHONDONTWRITEBYTECODE="1", **sides[baseline])
        runs["baseline, no bytecode"] = [got]
        print(f"{'-':<6} {'baseline, no bytecode':<28} {got[0]:>12.1f} s {got[1]:>7.1f} s {got[2]:>7.1f} s")
    _medians(runs, "first request")
    return 0


def _medians(runs: dict[str, list[tuple[float, float, float]]], what: str) -> None:
    """The medians over the rounds of each side (time to ``what`` and the run's CPU), with their ratios to now."""
    now = runs["now"]
    base_first, base_cpu = statistics.median(g[0] for g in now), statistics.median(g[2] for g in now)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians over the rounds, ratio side/now")
    print(f"{'side':<28} {what:>14} {'ratio':>6} {'run CPU':>9} {'ratio':>6}")
    for name, got in runs.items():
        first, cpu = statistics.median(g[0] for g in got), statistics.median(g[2] for g in got)
        print(f"{name:<28} {first:>12.2f} s {first / base_first:>6.2f} {cpu:>7.2f} s {cpu / base_cpu:>6.2f}")


if __name__ == "__main__":
    sys.exit(main())
