"""The vLLM contract environment: vllm exactly as the vLLM families' locks pin it, on CPU, for the contract tests.

vLLM ships CUDA wheels only, and its locked dependency closure holds about 3 GB of CUDA builds (torch, triton,
the nvidia-* libraries, FlashInfer and other GPU kernels). None of them is needed to import and call the Python
layer the contract tests exercise (engine arguments, sampling parameters, the chat path, the LoRA request, the
``vllm serve`` argument parser), so this environment installs:

- ``vllm`` itself, with ``--no-deps``, at the version and hashes the vLLM families' locks pin;
- every package of vllm's dependency closure in that lock (the lock's ``# via`` edges, followed from vllm and
  from torch), at the lock's versions and hashes, except the GPU-only ones (:data:`GPU_ONLY`,
  :data:`GPU_ONLY_PREFIXES`) and what only they need;
- torch as the CPU families' lock pins it (``requirements_eval_cpu.txt``: the CPU build), in place of the CUDA build.

The environment is keyed by a hash of exactly that requirements text and the Python version; a matching one is
reused, any other is rebuilt (the completion marker is written last, atomically). Stdlib only, like the builder.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.envs.builder import _rmtree
from medvision_bm.envs.core import (
    EnvPaths,
    build_lock,
    drop_marker,
    find_checkout,
    install_lock,
    run,
    torch_source,
    uv_path,
    write_marker,
)
from medvision_bm.errors import UserError
from medvision_bm.models.registry import REGISTRY, EnvSpec
from medvision_bm.provenance import read_marker

ENV_NAME = "vllm-contract"
PYTHON = "3.11"
#: Where the environment lives: this variable, else ``$XDG_CACHE_HOME/medvision_bm/vllm-contract/<inputs hash>``
#: (shared by every checkout of the same locks, so worktrees and repeated CI runs on one machine reuse it).
ENV_VAR = "MEDVISION_VLLM_CONTRACT_ENV"
#: Names of vllm's locked closure that are CUDA builds or GPU kernels (with what only they need, they are left out).
GPU_ONLY = frozenset({
    "torch", "torchvision", "torchaudio", "torchcodec", "torch-c-dlpack-ext", "triton", "flashinfer-python",
    "tilelang", "humming-kernels", "quack-kernels", "instanttensor", "fastsafetensors", "pynvvideocodec", "nvtx",
})
GPU_ONLY_PREFIXES = ("nvidia-", "cuda-", "nccl", "tokenspeed-")
CPU_TORCH_LOCK = "requirements/requirements_eval_cpu.txt"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(\S+)")


@dataclass(frozen=True)
class LockedPackage:
    """One pinned package of a uv lock file: its block of lines (pin and hashes) and who requires it."""

    name: str
    version: str
    block: str
    required_by: frozenset[str]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, LockedPackage]:
    """The packages of a ``uv pip compile --generate-hashes`` file, by normalised name."""
    out: dict[str, LockedPackage] = {}
    name = version = None
    block: list[str] = []
    via: set[str] = set()
    in_via = False

    def close() -> None:
        if name is not None:
            out[name] = LockedPackage(name, str(version), "\n".join(block), frozenset(via))

    for line in text.splitlines():
        pin = _PIN.match(line)
        if pin:
            close()
            name, version, block, via, in_via = _norm(pin[1]), pin[2], [line], set(), False
            continue
        stripped = line.strip()
        if name is None or not line.startswith(" "):
            in_via = False
            continue
        if stripped.startswith("--hash="):
            block.append(line)
        elif stripped.startswith("# via"):
            rest = stripped[len("# via"):].strip()
            if rest:
                via.add(_norm(rest.split()[0]))
            in_via = True
        elif in_via and stripped.startswith("#   "):
            via.add(_norm(stripped[4:].split()[0]))
    close()
    return out


def is_gpu_only(name: str) -> bool:
    return name in GPU_ONLY or name.startswith(GPU_ONLY_PREFIXES)


def cpu_closure(lock: Mapping[str, LockedPackage], roots: Iterable[str] = ("vllm", "torch")) -> set[str]:
    """The packages ``roots`` need by the lock's edges, not walking through GPU-only packages (the roots pass)."""
    requires: dict[str, set[str]] = {}
    for pkg in lock.values():
        for parent in pkg.required_by:
            requires.setdefault(parent, set()).add(pkg.name)
    roots = tuple(roots)
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen or (is_gpu_only(name) and name not in roots) or name not in lock:
            continue
        seen.add(name)
        stack.extend(requires.get(name, ()))
    return seen


def vllm_locks(checkout: Path) -> list[Path]:
    """The lock files of every environment a vLLM record runs in (registry order, each once)."""
    seen: dict[str, Path] = {}
    for rec in REGISTRY.values():
        if rec.backend == "vllm":
            seen.setdefault(rec.env.name, checkout / rec.env.requirements)
    return list(seen.values())


def contract_requirements(checkout: Path) -> str:
    """The requirements text of the contract environment (see the module docstring), pins and hashes included.

    Every vLLM family's lock must pin vllm's CPU closure identically: the contract then holds for all of them."""
    texts: dict[Path, str] = {}
    for path in vllm_locks(checkout):
        try:
            lock = parse_lock(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UserError(f"cannot read the vLLM lock {path} ({exc.strerror}); relock it with "
                            "`medvision-bm envs lock`") from None
        if "vllm" not in lock:
            raise UserError(f"{path} pins no vllm; relock it with `medvision-bm envs lock`")
        keep = cpu_closure(lock) - {"torch"}
        texts[path] = "\n".join(lock[n].block for n in sorted(keep))
    if not texts:
        raise UserError("the registry has no vLLM record, so there is no vLLM lock to build the contract env from")
    first, *others = texts
    for other in others:
        if texts[other] != texts[first]:
            raise UserError(f"{other.name} pins vllm's dependencies differently from {first.name}; relock the "
                            "vLLM families together (`medvision-bm envs lock`)")
    try:
        cpu_lock = parse_lock((checkout / CPU_TORCH_LOCK).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {CPU_TORCH_LOCK} ({exc.strerror}); it pins the CPU torch build") from None
    if "torch" not in cpu_lock:
        raise UserError(f"{CPU_TORCH_LOCK} pins no torch")
    header = (f"# vLLM contract environment: vllm's CPU-importable closure from {first.name}, "
              f"torch from {CPU_TORCH_LOCK}")
    return f"{header}\n{texts[first]}\n{cpu_lock['torch'].block}\n"


def inputs_hash(requirements: str, python: str = PYTHON) -> str:
    return hashlib.sha256(f"{python}\n{requirements}".encode()).hexdigest()


def default_prefix(requirements: str, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(ENV_VAR):
        return Path(env[ENV_VAR]).expanduser().resolve()
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return (cache / "medvision_bm" / ENV_NAME / inputs_hash(requirements)[:16]).resolve()


def ensure_env(checkout: Path, prefix: Path | None = None, *, force: bool = False) -> Path:
    """The contract environment's interpreter: reused when its marker matches the requirements, else (re)built."""
    requirements = contract_requirements(checkout)
    prefix = prefix or default_prefix(requirements)
    want = inputs_hash(requirements)
    paths = EnvPaths(EnvSpec(ENV_NAME, python=PYTHON, gpu=False), prefix.parent)
    python = prefix / "bin" / "python"

    def ready() -> bool:
        marker = read_marker(prefix)
        return not force and python.is_file() and marker is not None and marker.get("inputs") == want

    if ready():
        return python
    with build_lock(paths):
        if ready():  # another process built it while this one waited
            return python
        start = time.monotonic()
        print(f"vllm-contract: building {prefix} (vllm and its CPU closure from the vLLM lock, CPU torch; "
              "about 2.7 GB, about 133 s from an empty package cache)", file=sys.stderr, flush=True)
        drop_marker(prefix)
        if prefix.exists():
            _rmtree(prefix)
        prefix.parent.mkdir(parents=True, exist_ok=True)
        run([uv_path(), "venv", "--quiet", "--python", PYTHON, "--prompt", ENV_NAME, str(prefix)],
            f"creating {prefix} with uv (Python {PYTHON})")
        with tempfile.TemporaryDirectory(prefix="vllm-contract-") as tmp:
            req = Path(tmp) / "requirements.txt"
            req.write_text(requirements, encoding="utf-8")
            install_lock(python, req, torch_source(paths.spec))
        res = run([str(python), "-c", "import importlib.metadata as m; print(m.version('vllm'), m.version('torch'))"],
                  f"checking {prefix}", capture=True)
        vllm_version, torch_version = res.stdout.split()
        write_marker(prefix, {"name": ENV_NAME, "inputs": want, "vllm": vllm_version, "torch": torch_version,
                              "packages": requirements.count("=="), "built_s": round(time.monotonic() - start, 1)})
        print(f"vllm-contract: {prefix} ready in {time.monotonic() - start:.0f} s (vllm {vllm_version}, torch "
              f"{torch_version})", file=sys.stderr, flush=True)
    return python


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m medvision_bm.envs.vllm_contract",
                                description="Build or reuse the vLLM contract environment; print its interpreter.")
    p.add_argument("--root", default=None, help="the medvision_bm checkout (default: found from here)")
    p.add_argument("--prefix", default=None, help=f"where the environment lives (default: ${ENV_VAR} or the cache)")
    p.add_argument("--force", action="store_true", help="rebuild even when a matching environment exists")
    p.add_argument("--requirements", action="store_true", help="print the requirements it installs, build nothing")
    ns = p.parse_args(argv)
    try:
        checkout = find_checkout(ns.root)
        if ns.requirements:
            print(contract_requirements(checkout), end="")
            return 0
        print(ensure_env(checkout, Path(ns.prefix).expanduser().resolve() if ns.prefix else None, force=ns.force))
    except UserError as exc:
        print(f"vllm-contract: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
