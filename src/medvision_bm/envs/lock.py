"""Compiling the frozen, hashed requirements of each family (``medvision-bm envs lock``).

One command, one set of options, so every lock is reproducible from its ``.in`` file::

    uv pip compile requirements/requirements_eval_<family>.in \\
        --output-file requirements/requirements_eval_<family>.txt --generate-hashes \\
        --python-version <EnvSpec.python> --python-platform x86_64-manylinux_2_28 \\
        --custom-compile-command "medvision-bm envs lock --env eval-<family>"
    # CPU families (eval-cpu, eval-api) add: --excludes requirements/excludes_cpu.txt and the torch source
    # (--find-links DIR or --extra-index-url URL; see torch_source)

uv keeps the versions already in an existing lock unless ``--upgrade`` (or ``--upgrade-package P``) is given.
Before compiling, ``requirements/_medvision.in`` (included by every family) is rewritten from
``[project.dependencies]`` of pyproject.toml, so a new runtime dependency reaches every lock.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.envs.core import TorchSource, lock_hash, run, torch_source, uv_path
from medvision_bm.errors import UserError
from medvision_bm.io import write_text_atomic
from medvision_bm.models.registry import EnvSpec

PYTHON_PLATFORM = "x86_64-manylinux_2_28"
CPU_EXCLUDES = "requirements/excludes_cpu.txt"
#: lmms-eval 0.7.3 declares Requires-Python >= 3.10.
MIN_PYTHON = (3, 10)


def python_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        raise UserError(f"Python version {version!r} is not like 3.11") from None


def check_python(spec: EnvSpec, python: str | None = None) -> str:
    version = python or spec.python
    if python_tuple(version) < MIN_PYTHON:
        raise UserError(f"{spec.name} asks for Python {version}, but lmms-eval 0.7.3 needs Python >= "
                        f"{'.'.join(map(str, MIN_PYTHON))}; raise EnvSpec.python for {spec.name} in the registry")
    return version


PROJECT_IN = "requirements/_medvision.in"
_PROJECT_IN_HEADER = (
    "# Runtime dependencies of medvision-bm itself, written by `medvision-bm envs lock` from\n"
    "# [project.dependencies] in pyproject.toml (edit those, not this file). Every family's input includes it.\n"
)


def sync_project_requirements(checkout: Path) -> bool:
    """Rewrite requirements/_medvision.in from pyproject.toml; True when it changed."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: keep the file as it is
        return False
    deps = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))["project"].get("dependencies", [])
    text = _PROJECT_IN_HEADER + "".join(f"{d}\n" for d in deps)
    path = checkout / PROJECT_IN
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    if not path.parent.is_dir():
        raise UserError(f"{path.parent} does not exist; run from a medvision_bm checkout")

    write_text_atomic(path, text)
    return True


def locked_python(path: Path) -> str | None:
    """The ``--python`` override an existing lock was compiled with (named in its header), if any."""
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        head = "".join(fh.readline() for _ in range(3))
    m = re.search(r"medvision-bm envs lock --env \S+ --python (\S+)", head)
    return m[1] if m else None


@dataclass(frozen=True)
class LockResult:
    spec: EnvSpec
    path: Path
    changed: bool
    old_hash: str | None
    new_hash: str


def compile_command(spec: EnvSpec, output: str, source: TorchSource, *, python: str | None = None,
                    upgrade: bool = False, upgrade_packages: tuple[str, ...] = ()) -> list[str]:
    """The exact uv command that writes ``output`` from the family's ``.in`` (run from the checkout root)."""
    version = check_python(spec, python)
    custom = f"medvision-bm envs lock --env {spec.name}" + (f" --python {python}" if python else "")
    cmd = [uv_path(), "pip", "compile", spec.requirements_in, "--output-file", output, "--generate-hashes",
           "--python-version", version, "--python-platform", PYTHON_PLATFORM, "--custom-compile-command", custom,
           "--quiet"]
    if not spec.gpu:
        cmd += ["--excludes", CPU_EXCLUDES]
    cmd += source.uv_args()
    if upgrade:
        cmd.append("--upgrade")
    for pkg in upgrade_packages:
        cmd += ["--upgrade-package", pkg]
    return cmd


def lock_env(spec: EnvSpec, checkout: Path, *, check_only: bool = False, python: str | None = None,
             upgrade: bool = False, upgrade_packages: tuple[str, ...] = (), source: TorchSource | None = None,
             env: Mapping[str, str] | None = None) -> LockResult:
    """Compile the family's lock (or, with ``check_only``, compile to a temp file and compare)."""
    src_in = checkout / spec.requirements_in
    if not src_in.is_file():
        raise UserError(f"{src_in} is missing: write the family's top-level requirements there, then rerun "
                        f"`medvision-bm envs lock --env {spec.name}`")
    if not check_only:
        sync_project_requirements(checkout)
    source = source or torch_source(spec, env=env)
    target = checkout / spec.requirements
    python = python or locked_python(target)
    old = lock_hash(target) if target.is_file() else None
    with tempfile.TemporaryDirectory(prefix="medvision-lock-") as tmp:
        out = Path(tmp) / target.name
        if target.is_file():
            shutil.copy2(target, out)  # uv prefers the versions already locked
        cmd = compile_command(spec, str(out), source, python=python, upgrade=upgrade,
                              upgrade_packages=upgrade_packages)
        run(cmd, f"compiling {spec.requirements}", cwd=checkout)
        text = out.read_text(encoding="utf-8").replace(str(out), spec.requirements)
        out.write_text(text, encoding="utf-8")  # the hash below reads the file
        new = lock_hash(out)
    if not check_only and (not target.is_file() or target.read_text(encoding="utf-8") != text):
        write_text_atomic(target, text)  # pins or only the header changed
    return LockResult(spec, target, new != old, old, new)
