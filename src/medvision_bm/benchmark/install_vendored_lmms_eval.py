"""`python -m medvision_bm.benchmark.install_vendored_lmms_eval --lmms_eval_opt_deps GROUP`: install the harness.

There is no vendored copy (the name stays for users' scripts): this installs lmms-eval from PyPI at the version
the locks pin, with ``filelock<4``, into the running interpreter. GROUP is one of lmms-eval's own extras
(e.g. ``qwen``, ``gemini``), a registry model or environment name (its family's extras, with the family's
lock as constraints so versions match the launchers' envs), or ``none``. Where the installed torch is a CPU
build it stays as it is and torchvision is left out (PyPI's torchvision does not import beside CPU torch).
Otherwise torch comes as PyPI's CUDA build: the command says what the family's lock brings (torch, torchvision,
the CUDA packages) and, as the launchers do, refuses on a machine without an NVIDIA GPU unless ``--allow_no_gpu``
(or ``MEDVISION_BUILD_WITHOUT_GPU=1``) says to install anyway.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from medvision_bm.errors import UserError

PROG = "python -m medvision_bm.benchmark.install_vendored_lmms_eval"
LMMS_EVAL_VERSION = "0.7.3"
#: Set to 1 to build a GPU family's environment on a machine without a GPU (the launchers read it too).
BUILD_WITHOUT_GPU_VAR = "MEDVISION_BUILD_WITHOUT_GPU"
#: Provides-Extra of lmms-eval 0.7.3.
LMMS_EVAL_EXTRAS = ("core", "server", "mcp", "audio", "metrics", "gemini", "litellm", "swanlab", "reka", "qwen",
                    "mmsearch", "prismmbench", "tui", "video", "video-legacy", "all")


def resolve_group(group: str) -> tuple[tuple[str, ...], Path | None, bool | None]:
    """GROUP -> (lmms-eval extras, constraints file or None, family is GPU or None when unknown)."""
    group = group.strip()
    if group in ("", "none"):
        return (), None, None
    if group in LMMS_EVAL_EXTRAS:
        return (group,), None, None
    from medvision_bm.envs.core import find_checkout
    from medvision_bm.models.registry import REGISTRY, environments, get_record

    envs = environments()
    spec = envs.get(group) or envs.get(f"eval-{group}")
    if spec is None:
        try:
            spec = get_record(group).env
        except UserError:
            raise UserError(f"--lmms_eval_opt_deps {group!r} is neither an lmms-eval extra ({', '.join(LMMS_EVAL_EXTRAS)}), "
                            f"a registry model ({', '.join(sorted(REGISTRY)[:6])}, ...) nor an environment "
                            f"({', '.join(sorted(envs)[:4])}, ...); `medvision-bm models` lists the models") from None
    extras = tuple(e for e in spec.lmms_eval_extras if e in LMMS_EVAL_EXTRAS)
    constraints = None
    try:
        path = find_checkout() / spec.requirements
        constraints = path if path.is_file() else None
    except UserError:
        pass
    return extras, constraints, spec.gpu


def _installed_torch() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _keeps_cpu_torch(gpu: bool | None) -> bool:
    torch = _installed_torch()
    return (torch is not None and "+cpu" in torch) or gpu is False


def lock_brings(path: Path) -> str:
    """The CUDA stack a family's lock pins, in words: torch, torchvision, triton and the count of CUDA packages."""
    from medvision_bm.envs.vllm_contract import parse_lock

    pkgs = parse_lock(path.read_text(encoding="utf-8"))
    named = [f"{n}=={pkgs[n].version}" for n in ("torch", "torchvision", "torchaudio", "triton") if n in pkgs]
    cuda = [n for n in pkgs if n.startswith(("nvidia-", "cuda-", "nccl"))]
    if cuda:
        named.append(f"{len(cuda)} CUDA packages (nvidia-*, cuda-*)")
    return f"{', '.join(named) or 'no torch'} (lock {path.name}; several GB, the lock records no sizes)"


def cuda_note(group: str) -> str | None:
    """What GROUP's install brings of CUDA torch, in words; None where CPU torch is kept and torchvision left out."""
    _, constraints, gpu = resolve_group(group)
    if _keeps_cpu_torch(gpu):
        return None
    if constraints is not None:
        return lock_brings(constraints)
    return ("torch and torchvision as PyPI serves them for Linux: the CUDA build with its nvidia-* packages "
            "(several GB)")


def check_gpu(group: str, *, allow_no_gpu: bool, has_gpu: bool | None = None) -> str | None:
    """Refuse to bring CUDA torch to a machine without an NVIDIA GPU unless told; the note of what comes, or None."""
    note = cuda_note(group)
    if note is None:
        return None
    allowed = allow_no_gpu or os.environ.get(BUILD_WITHOUT_GPU_VAR, "").strip() == "1"
    if not allowed:
        if has_gpu is None:
            from medvision_bm.models.registry import machine_has_gpu

            has_gpu = machine_has_gpu()
        if not has_gpu:
            raise UserError(f"--lmms_eval_opt_deps {group} would install {note}, and this machine has no NVIDIA GPU "
                            "(no driver or nvidia-smi, or CUDA_VISIBLE_DEVICES hides them); install PyTorch's CPU build "
                            "first (from download.pytorch.org/whl/cpu) to keep it and "
                            f"leave torchvision out, or pass --allow_no_gpu (or set {BUILD_WITHOUT_GPU_VAR}=1) "
                            "to install it anyway")
    return note


def install_command(group: str, *, dry_run: bool = False) -> tuple[list[str], str]:
    """The install command for GROUP in this interpreter, and the excludes file content (may be empty)."""
    extras, constraints, gpu = resolve_group(group)
    spec = f"lmms-eval[{','.join(extras)}]=={LMMS_EVAL_VERSION}" if extras else f"lmms-eval=={LMMS_EVAL_VERSION}"
    torch = _installed_torch()
    cpu = _keeps_cpu_torch(gpu)
    uv = shutil.which("uv")
    if uv is None:
        if cpu:
            raise UserError("keeping CPU torch and leaving torchvision out needs uv; install it (pip install uv) "
                            "and rerun")
        cmd = [sys.executable, "-m", "pip", "install", spec, "filelock<4"]
        if constraints:
            cmd += ["--constraint", str(constraints)]
        return cmd, ""
    from medvision_bm.envs.core import bytecode_args

    cmd = [uv, "pip", "install", "--python", sys.executable, *bytecode_args(), spec, "filelock<4"]
    excludes = ""
    if cpu:
        excludes = "torchvision\n"
        if torch:
            cmd.append(f"torch=={torch}")  # never swap the CPU build for a CUDA one
        from medvision_bm.envs.core import torch_source
        from medvision_bm.models.registry import EnvSpec

        cmd += torch_source(EnvSpec("eval-cpu", gpu=False)).uv_args()
    if constraints:
        cmd += ["--constraint", str(constraints), "--no-verify-hashes"]
    return cmd, excludes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description="Install the pinned lmms-eval from PyPI with a family's "
                                "optional dependencies into this interpreter (there is no vendored copy).")
    p.add_argument("--lmms_eval_opt_deps", default="none",
                   help="an lmms-eval extra, a registry model or environment name, or none")
    p.add_argument("--dry_run", action="store_true", help="print the install command only")
    p.add_argument("--allow_no_gpu", action="store_true",
                   help="install a CUDA torch even where this machine has no NVIDIA GPU (also: "
                   f"{BUILD_WITHOUT_GPU_VAR}=1)")
    ns = p.parse_args(argv)

    def body() -> int:
        note = check_gpu(ns.lmms_eval_opt_deps, allow_no_gpu=ns.allow_no_gpu or ns.dry_run)
        if note:
            print(f"{PROG}: this installs {note}", file=sys.stderr, flush=True)
        cmd, excludes = install_command(ns.lmms_eval_opt_deps)
        with tempfile.TemporaryDirectory(prefix="medvision-lmms-") as tmp:
            if excludes:
                path = Path(tmp) / "excludes.txt"
                path.write_text(excludes, encoding="utf-8")
                cmd += ["--excludes", str(path)]
            print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
            if ns.dry_run:
                return 0
            res = subprocess.run(cmd)
        if res.returncode != 0:
            raise UserError(f"installing lmms-eval {LMMS_EVAL_VERSION} failed (exit {res.returncode}); see above")
        print(f"{PROG}: lmms-eval {metadata.version('lmms-eval')} installed in {sys.prefix}", file=sys.stderr)
        return 0

    from medvision_bm.cli import run_handler

    return run_handler(body, prog=PROG)


if __name__ == "__main__":
    raise SystemExit(main())
