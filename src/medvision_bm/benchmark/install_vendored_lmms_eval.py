"""`python -m medvision_bm.benchmark.install_vendored_lmms_eval --lmms_eval_opt_deps GROUP`: install the harness.

There is no vendored copy (the name stays for users' scripts): this installs lmms-eval from PyPI at the version
the locks pin, with ``filelock<4``, into the running interpreter. GROUP is one of lmms-eval's own extras
(e.g. ``qwen``, ``gemini``), a registry model or environment name (its family's extras, with the family's
lock as constraints so versions match the launchers' envs), or ``none``. Where the installed torch is a CPU
build it stays as it is and torchvision is left out (PyPI's torchvision does not import beside CPU torch).
"""

from __future__ import annotations

import argparse
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


def install_command(group: str, *, dry_run: bool = False) -> tuple[list[str], str]:
    """The install command for GROUP in this interpreter, and the excludes file content (may be empty)."""
    extras, constraints, gpu = resolve_group(group)
    spec = f"lmms-eval[{','.join(extras)}]=={LMMS_EVAL_VERSION}" if extras else f"lmms-eval=={LMMS_EVAL_VERSION}"
    torch = _installed_torch()
    cpu = (torch is not None and "+cpu" in torch) or gpu is False
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
    ns = p.parse_args(argv)

    def body() -> int:
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
