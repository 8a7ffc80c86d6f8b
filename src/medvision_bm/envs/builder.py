"""Build, check, reuse and remove per-family environments (uv venvs; conda prefixes where asked and present).

An environment is reused only when its completion marker says it was built from the same inputs (the lock's
requirement lines, the Python version asked for, the tool) and from the same medvision-bm source. The marker is
removed before anything in the env changes and written last, so a build killed half-way is never used: the
next build sees no marker and starts over. Builds hold the env's build lock; a rebuild of an env that running
evaluations hold (shared ``.inuse`` lock) waits for them to end.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from medvision_bm.envs.core import (
    WHEEL_INPUTS,
    EnvPaths,
    TorchSource,
    build_lock,
    bytecode_args,
    drop_marker,
    flocked,
    inputs_hash,
    install_lock,
    lock_hash,
    require_tool,
    requirements_path,
    run,
    source_hash,
    torch_source,
    uv_path,
    write_marker,
)
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonObject
from medvision_bm.models.registry import EnvSpec
from medvision_bm.provenance import read_marker

TOOLS = ("uv", "conda")
METHODS = ("frozen", "entry-point")  # launcher INSTALL_METHOD 1 and 2
WHEELS_KEPT = 8


@dataclass(frozen=True)
class EnvState:
    """absent | ready | stale, why, and the marker when there is one."""

    state: str
    reason: str
    marker: JsonObject | None = None
    needs: str = "nothing"  # nothing | build (from scratch) | package (reinstall our wheel only)


@dataclass
class BuildResult:
    paths: EnvPaths
    action: str  # reused | built | rebuilt | package
    reason: str
    seconds: float
    marker: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class Inputs:
    """Everything that decides an environment's content, computed once per command."""

    spec: EnvSpec
    checkout: Path
    lock_file: Path
    lock_sha: str
    tool: str
    source_sha: str

    @property
    def inputs_sha(self) -> str:
        return inputs_hash(self.spec, self.lock_sha, self.tool)


def resolve_tool(tool: str | None, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    tool = (tool or env.get("ENV_TOOL") or "uv").strip()
    if tool not in TOOLS:
        raise UserError(f"ENV_TOOL={tool!r} is not a known tool; use uv (default) or conda")
    return tool


def gather_inputs(spec: EnvSpec, checkout: Path, tool: str, source_sha: str | None = None) -> Inputs:
    lock_file = requirements_path(spec, checkout)
    return Inputs(spec, checkout, lock_file, lock_hash(lock_file), tool, source_sha or source_hash(checkout))


def env_state(paths: EnvPaths, inputs: Inputs, method: str = "frozen") -> EnvState:
    """Whether the env at ``paths`` can be used as it is for ``inputs``."""
    if not paths.prefix.exists():
        return EnvState("absent", "not built yet", None, "build")
    marker = read_marker(paths.prefix)
    if marker is None:
        return EnvState("stale", "incomplete: no completion marker (a build was killed or failed)", None, "build")
    if not paths.python.exists():
        return EnvState("stale", f"its interpreter {paths.python} is missing", marker, "build")
    if marker.get("tool") != inputs.tool:
        return EnvState("stale", f"built with {marker.get('tool')}, ENV_TOOL is {inputs.tool}", marker, "build")
    built_inputs = marker.get("inputs_hash")
    if built_inputs is None:
        # Method 2 bootstrap: the entry point installs the requirements on its first run.
        if method == "entry-point":
            needs = "nothing" if marker.get("source_hash") == inputs.source_sha else "package"
            return EnvState("stale", "requirements not installed yet (the entry point installs them)", marker, needs)
        return EnvState("stale", "requirements not installed yet (Method 2 bootstrap)", marker, "build")
    if built_inputs != inputs.inputs_sha:
        what = []
        if marker.get("lock_hash") != inputs.lock_sha:
            what.append(f"{inputs.spec.requirements} changed")
        if marker.get("python_request") != inputs.spec.python:
            what.append(f"Python {marker.get('python_request')} -> {inputs.spec.python}")
        return EnvState("stale", ", ".join(what) or "its inputs changed", marker, "build")
    if marker.get("source_hash") != inputs.source_sha:
        return EnvState("stale", "the medvision-bm source changed (our wheel is reinstalled)", marker, "package")
    return EnvState("ready", f"lock {inputs.lock_sha[:12]}", marker, "nothing")


# ------------------------------------------------------------------------------------------------ our wheel
def ensure_wheel(checkout: Path, source_sha: str, envs_root: Path) -> Path:
    """Our wheel for this source state: built in a private temp dir (never in the checkout), cached by hash."""
    cache = envs_root / ".wheels" / source_sha[:24]
    found = sorted(cache.glob("medvision_bm-*.whl")) if cache.is_dir() else []
    if found:
        return found[0]
    with tempfile.TemporaryDirectory(prefix="medvision-wheel-") as tmp_name:
        tmp = Path(tmp_name)
        src = tmp / "src"
        for rel in WHEEL_INPUTS:
            source = checkout / rel
            target = src / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif source.is_file():
                shutil.copy2(source, target)
        if shutil.which("uv"):
            run([uv_path(), "build", "--wheel", "--quiet", "--out-dir", str(tmp / "dist"), str(src)],
                "building the medvision-bm wheel", cwd=tmp)
        else:
            run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp / "dist"),
                 str(src)], "building the medvision-bm wheel", cwd=tmp)
        wheels = sorted((tmp / "dist").glob("medvision_bm-*.whl"))
        if not wheels:
            raise UserError(f"building the medvision-bm wheel from {checkout} produced no wheel; see the output above")
        cache.mkdir(parents=True, exist_ok=True)
        final = cache / wheels[0].name
        part = cache / f".{wheels[0].name}.{os.getpid()}.part"
        shutil.copy2(wheels[0], part)
        os.replace(part, final)
    _prune_wheels(envs_root / ".wheels", keep=cache)
    return final


def _prune_wheels(folder: Path, keep: Path, n: int = WHEELS_KEPT) -> None:
    """Keep the newest ``n`` cached wheels (and always ``keep``); older source states are not needed again."""
    dirs = sorted((d for d in folder.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
    for d in dirs[n:]:
        if d != keep:
            shutil.rmtree(d, ignore_errors=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ steps
def _create(paths: EnvPaths, inputs: Inputs) -> None:
    paths.root.mkdir(parents=True, exist_ok=True)
    if inputs.tool == "conda":
        conda = require_tool("conda", "install Miniconda/Miniforge or set ENV_TOOL=uv")
        run([conda, "create", "--yes", "--quiet", "--prefix", str(paths.prefix), f"python={inputs.spec.python}",
             "pip"], f"creating conda env {paths.prefix}")
    else:
        run([uv_path(), "venv", "--quiet", "--python", inputs.spec.python, "--prompt", paths.name,
             str(paths.prefix)], f"creating {paths.prefix} with uv (Python {inputs.spec.python})")


def install_wheel(python: Path, wheel: Path) -> None:
    if shutil.which("uv"):
        run([uv_path(), "pip", "install", "--quiet", "--python", str(python), "--no-deps", *bytecode_args(),
             "--reinstall-package", "medvision-bm", str(wheel)], f"installing {wheel.name} into {python.parent.parent}")
    else:
        run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel)],
            f"installing {wheel.name} into {python.parent.parent}")


def probe(python: Path) -> JsonObject:
    """Import our entry-point code in the env and read the versions of the packages that matter."""
    res = run([str(python), "-m", "medvision_bm.envs.probe"], f"checking {python.parent.parent}",
              capture=True)
    try:
        facts = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        facts = None
    if not isinstance(facts, dict):
        raise UserError(f"checking {python.parent.parent} printed no result; rebuild it with --force")
    return facts


def _rmtree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        # Move aside first so a half-removed env is never taken for a half-built one under the same name.
        trash = path.with_name(f".{path.name}.removing-{os.getpid()}")
        os.replace(path, trash)
        shutil.rmtree(trash, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ build
def build_env(paths: EnvPaths, inputs: Inputs, *, method: str = "frozen", force: bool = False,
              source: TorchSource | None = None, env: Mapping[str, str] | None = None) -> BuildResult:
    """Make the env usable for ``inputs``: reuse it, reinstall our wheel only, or (re)build it from scratch."""
    if method not in METHODS:
        raise UserError(f"install method {method!r} is unknown; use frozen (1) or entry-point (2)")
    if inputs.tool == "uv":
        uv_path()
    source = source or torch_source(inputs.spec, env=env)
    start = time.monotonic()
    with build_lock(paths, env):
        state = env_state(paths, inputs, method)
        needs = "build" if force else state.needs
        if needs == "nothing":
            return BuildResult(paths, "reused", state.reason, time.monotonic() - start, state.marker or {})
        existed = paths.prefix.exists()
        # Anything that changes an existing env waits for evaluations running in it.
        with flocked(paths.inuse_lock, what=f"evaluations running in {paths.name} to finish"):
            if paths.prefix.is_dir():
                drop_marker(paths.prefix)
            marker = dict(state.marker or {})
            if needs == "build":
                reason = "forced" if force else state.reason
                print(f"medvision-bm envs: building {paths.name} at {paths.prefix} ({reason})", file=sys.stderr,
                      flush=True)
                _rmtree(paths.prefix)
                for trash in paths.root.glob(f".{paths.name}.removing-*"):  # left by a killed removal
                    shutil.rmtree(trash, ignore_errors=True)
                _create(paths, inputs)
                marker = {}
                if method == "frozen":
                    install_lock(paths.python, inputs.lock_file, source, sync=inputs.tool == "uv")
            else:
                print(f"medvision-bm envs: reinstalling medvision-bm into {paths.name} ({state.reason})",
                      file=sys.stderr, flush=True)
            wheel = ensure_wheel(inputs.checkout, inputs.source_sha, paths.root)
            install_wheel(paths.python, wheel)
            facts = probe(paths.python)
            missing = facts.get("missing")
            if method == "frozen" and missing:
                names = missing if isinstance(missing, list) else [missing]
                raise UserError(f"{inputs.spec.requirements} lacks dependencies of medvision-bm: "
                                f"{', '.join(map(str, names))}; run `medvision-bm envs lock --env {paths.name}` "
                                "(it takes them from pyproject.toml) and rebuild")
            frozen = method == "frozen" or marker.get("inputs_hash") == inputs.inputs_sha
            marker.update({
                "name": paths.name,
                "tool": inputs.tool,
                "mode": method if needs == "build" else marker.get("mode", method),
                "lock_file": inputs.spec.requirements,
                "lock_hash": inputs.lock_sha if frozen else None,
                "inputs_hash": inputs.inputs_sha if frozen else None,
                "python_request": inputs.spec.python,
                "python": facts.get("python"),
                "source_hash": inputs.source_sha,
                "wheel": {"file": wheel.name, "sha256": _sha256(wheel)},
                "torch_source": source.describe(),
                "versions": facts.get("versions", {}),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "built_on": socket.gethostname(),
                "build_seconds": round(time.monotonic() - start, 2),
            })
            write_marker(paths.prefix, marker)
    action = ("rebuilt" if existed else "built") if needs == "build" else "package"
    return BuildResult(paths, action, state.reason if not force else "forced", time.monotonic() - start, marker)


def remove_env(paths: EnvPaths, env: Mapping[str, str] | None = None) -> bool:
    """Delete an environment (waits for builds and running evaluations); False when there was none."""
    with build_lock(paths, env), flocked(paths.inuse_lock, what=f"evaluations running in {paths.name} to finish"):
        if not paths.prefix.exists():
            return False
        drop_marker(paths.prefix)
        _rmtree(paths.prefix)
        return True
