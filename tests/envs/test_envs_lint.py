"""Lint: every registry model has its three launchers and its requirements; launchers parse and name real models;
the locks are hashed and pin what the design requires (lmms-eval 0.7.3, filelock<4, CPU torch without torchvision;
the `data` environment datasets 3.6.0 and neither).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from envs_support import REPO

from medvision_bm.models.registry import REGISTRY, environments

FAMILIES = ("AD", "TL", "detect")
LAUNCHERS = sorted(p for fam in FAMILIES for p in (REPO / "script" / f"benchmark-{fam}").glob("*.sh"))
LOCKS = {name: REPO / spec.requirements for name, spec in environments().items()}
_PIN = re.compile(r"^([a-z0-9][a-z0-9._-]*)==(\S+)", re.M)


def _pins(text: str) -> dict[str, str]:
    return {m[1]: m[2] for m in _PIN.finditer(text)}


@pytest.mark.parametrize("record", sorted(REGISTRY), ids=str)
def test_every_model_has_three_launchers_and_its_requirements(record):
    rec = REGISTRY[record]
    for fam in FAMILIES:
        assert (REPO / "script" / f"benchmark-{fam}" / f"{rec.launcher}.sh").is_file(), (rec.name, fam)
    assert (REPO / rec.env.requirements).is_file(), rec.env.requirements
    assert (REPO / rec.env.requirements_in).is_file(), rec.env.requirements_in


def test_launchers_are_exactly_one_per_model_per_family():
    stems = {rec.launcher for rec in REGISTRY.values()}
    assert len(LAUNCHERS) == 3 * len(REGISTRY)
    assert {p.stem for p in LAUNCHERS} == stems


@pytest.mark.parametrize("path", LAUNCHERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_launcher_parses_and_names_an_existing_model(path):
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = path.read_text()
    models = re.findall(r"^MODEL=(\S+)$", text, flags=re.M)
    assert len(models) == 1 and models[0] in REGISTRY, models
    assert REGISTRY[models[0]].launcher == path.stem
    family = path.parent.name.removeprefix("benchmark-")
    flags = "".join(f"{f} " for f in REGISTRY[models[0]].launcher_flags)  # what upstream's launchers pass
    assert re.search(rf'^mv_launch {family} {re.escape(flags)}"\$@"$', text, flags=re.M)
    assert 'source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"' in text
    assert len(text.splitlines()) <= 14  # the model and its defaults over the shared library
    assert path.stat().st_mode & 0o111


def test_medvision_v0_launchers_send_the_training_system_prompt():
    # upstream's MedVision-V0 launchers (eval__MedVision-V0-7B__detect.sh @473a4fd) pass --use_system_prompt
    for fam in ("AD", "TL", "detect"):
        text = (REPO / "script" / f"benchmark-{fam}" / "medvision-v0.sh").read_text()
        assert 'mv_launch ' + fam + ' --use_system_prompt "$@"' in text


def test_launchers_match_the_generator():
    res = subprocess.run([sys.executable, str(REPO / "script" / "lib" / "make_launchers.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_api_launchers_reshape_as_documented():
    def reshape(fam: str, stem: str) -> str:
        text = (REPO / "script" / f"benchmark-{fam}" / f"{stem}.sh").read_text()
        return re.search(r'RESHAPE_IMAGE_HW:=([^}]*)\}', text)[1]

    for stem in ("claude", "gemini", "kimi"):
        assert {reshape(f, stem) for f in FAMILIES} == {"512,512"}
    assert [reshape(f, "gpt") for f in FAMILIES] == ["", "512,512", ""]
    assert [reshape(f, "gpt-pro") for f in FAMILIES] == ["512,512", "512,512", ""]  # AD, TL, detect
    assert reshape("AD", "qwen25vl") == ""


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck_clean():
    files = [str(REPO / "script" / "lib" / "launcher.sh"), *map(str, LAUNCHERS)]
    res = subprocess.run(["shellcheck", "-x", *files], capture_output=True, text=True,
                         cwd=REPO / "script" / "benchmark-AD")
    assert res.returncode == 0, res.stdout[-4000:]


@pytest.mark.parametrize("env_name", sorted(LOCKS), ids=str)
def test_lock_is_hashed_and_pins_the_harness(env_name):
    spec = environments()[env_name]
    text = LOCKS[env_name].read_text()
    assert f"medvision-bm envs lock --env {env_name}" in text.splitlines()[1]
    blocks = re.split(r"\n(?=[a-z0-9])", text.split("\n", 2)[2])
    for block in blocks:
        if _PIN.match(block):
            assert "--hash=sha256:" in block, block.splitlines()[0]
    pins = _pins(text)
    for dep in ("numpy", "nibabel", "pillow", "pyyaml", "tqdm"):
        assert dep in pins, dep
    if env_name == "data":  # upstream's loading script: datasets 3.x (pyproject.toml @c221615), no harness, no torch
        assert pins["datasets"] == "3.6.0" and pins["huggingface-hub"] == "0.36.0" and "pip" in pins
        assert "lmms-eval" not in pins and "torch" not in pins
        return
    assert pins["lmms-eval"] == "0.7.3"
    assert int(pins["filelock"].split(".")[0]) < 4
    if spec.gpu:
        assert "+cpu" not in pins["torch"] and "torchvision" in pins
    else:
        assert pins["torch"] == "2.13.0+cpu"
        assert "torchvision" not in pins and not any(p.startswith("nvidia-") for p in pins)
    if env_name == "eval-api":
        for sdk in ("openai", "anthropic", "google-genai", "aiohttp"):
            assert sdk in pins


def test_vllm_families_pin_vllm():
    for name, spec in environments().items():
        text = (REPO / spec.requirements_in).read_text()
        if "-r _vllm.in" in text:
            assert _pins(LOCKS[name].read_text())["vllm"] == "0.33.0", name


def test_no_orphan_requirement_files():
    known = {Path(spec.requirements).name for spec in environments().values()}
    known |= {Path(spec.requirements_in).name for spec in environments().values()}
    present = {p.name for p in (REPO / "requirements").glob("requirements_*")}
    assert present == known


def test_shared_input_lists_our_runtime_dependencies():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    lines = [ln.strip() for ln in (REPO / "requirements" / "_medvision.in").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert sorted(lines) == sorted(project)
