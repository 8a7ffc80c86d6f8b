"""An environment set-up never swaps or downgrades the running interpreter's torch/CUDA stack.

A real venv stands in for a GPU user's environment: a CUDA build of torch (``2.5.1+cu124`` with its NVIDIA runtime)
is installed there as package metadata only, in front of this checkout's own packages (a ``.pth`` file). Setting
up the generic ``hf`` record's CPU environment there would install ``torch==...+cpu`` over it: the entry point
refuses in one line naming the environment to use, and installs nothing.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from medvision_bm.envs.setup import torch_build_kind
from mvtest_support import REPO, uv_venv

CUDA_TORCH = "2.5.1+cu124"


def _fake_dist(site: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("")
    return info


@pytest.fixture(scope="module")
def cuda_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, venv = uv_venv(tmp_path_factory.mktemp("gpu-user") / "venv")
    site = next((venv / "lib").glob("python3*/site-packages"))
    _fake_dist(site, "torch", CUDA_TORCH, ("nvidia-cuda-runtime-cu12==12.4.127; platform_system == 'Linux'",))
    _fake_dist(site, "nvidia-cuda-runtime-cu12", "12.4.127")
    # this checkout's packages behind the venv's own (the fake CUDA torch shadows the CPU one found there)
    ours = sysconfig.get_paths()["purelib"]
    (site / "zz_medvision_checkout.pth").write_text(f"{REPO / 'src'}\n{ours}\n")
    return venv


def _setup(venv: Path, *flags: str, hf_env: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update({"BENCHMARK_DIR": str(REPO), "UV_OFFLINE": "1", "MEDVISION_HF_ENV": hf_env})
    return subprocess.run([str(venv / "bin" / "python"), "-m", "medvision_bm.cli", "run", "--model", "hf",
                           "--env_setup_only", *flags], capture_output=True, text=True, env=env, timeout=300)


def test_cpu_lock_over_cuda_torch_is_refused_in_one_line(cuda_venv: Path) -> None:
    res = _setup(cuda_venv, "--device", "cpu")  # hf's CPU environment, eval-cpu: torch==...+cpu
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    line = lines[0]
    assert f"torch {CUDA_TORCH} (cuda) with torch 2.13.0+cpu (cpu)" in line, line
    assert "refusing" in line and "environment eval-hf-gpu" in line and "--skip_env_setup" in line, line
    assert "setting up eval-cpu" in line
    site = next((cuda_venv / "lib").glob("python3*/site-packages"))
    assert (site / f"torch-{CUDA_TORCH}.dist-info").is_dir()  # nothing was installed over it
    assert not any(p.name.startswith("torch-2.13") for p in site.iterdir())


def test_auto_picks_the_cpu_env_without_a_gpu_and_is_refused_too(cuda_venv: Path) -> None:
    # MEDVISION_HF_ENV=cpu stands for "no GPU on this machine": --device auto then picks eval-cpu
    res = _setup(cuda_venv, hf_env="cpu")
    assert res.returncode == 2 and "environment eval-hf-gpu" in res.stderr and "eval-cpu" in res.stderr, res.stderr


def test_gpu_env_lock_would_move_the_cuda_stack_and_is_refused(cuda_venv: Path) -> None:
    res = _setup(cuda_venv, "--device", "cuda")  # eval-hf-gpu: a newer CUDA torch and other NVIDIA libraries
    assert res.returncode == 2, res.stderr
    assert "setting up eval-hf-gpu" in res.stderr and "refusing to change the running torch/CUDA stack" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_build_kinds() -> None:
    assert torch_build_kind("2.5.1+cu124") == "cuda"
    assert torch_build_kind("2.13.0+cpu") == "cpu"
    assert torch_build_kind("2.4.0+rocm6.1") == "rocm"
    assert torch_build_kind("2.15.0", ["nvidia-cuda-runtime==13.2.86; platform_system == 'Linux'"]) == "cuda"
    assert torch_build_kind("2.15.0", ["filelock", "sympy"]) == "cpu"


def test_record_env_picks_hf_gpu_env(monkeypatch) -> None:
    from medvision_bm.errors import UserError
    from medvision_bm.models.registry import environments, get_record, record_env

    hf = get_record("hf")
    assert record_env(hf, True).name == "eval-hf-gpu" and record_env(hf, False).name == "eval-cpu"
    monkeypatch.setenv("MEDVISION_HF_ENV", "gpu")
    assert record_env(hf).name == "eval-hf-gpu"
    assert record_env(get_record("oracle")).name == "eval-cpu"  # only hf has a GPU twin
    monkeypatch.setenv("MEDVISION_HF_ENV", "cpu")
    assert record_env(hf).name == "eval-cpu"
    monkeypatch.setenv("MEDVISION_HF_ENV", "tpu")
    with pytest.raises(UserError, match="MEDVISION_HF_ENV"):
        record_env(hf)
    assert "eval-hf-gpu" in environments()
    assert (REPO / "requirements" / "requirements_eval_hf-gpu.txt").is_file()
