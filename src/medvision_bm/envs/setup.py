"""Setting up the running interpreter's environment for a record (the entry points' Method 2 path).

Compares the family's frozen requirements with what is installed and installs what differs, exactly as
locked (``--no-deps``, hashes checked; CPU families take torch from the configured CPU source). In an
environment the launchers manage (it has a completion marker) the install holds the env's build lock, and the
marker then records the lock it now matches; running a model in another family's managed env is refused.
"""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

from medvision_bm.envs.core import (
    EnvPaths,
    build_lock,
    find_checkout,
    inputs_hash,
    install_lock,
    lock_hash,
    requirements_path,
    torch_source,
    write_marker,
)
from medvision_bm.errors import UserError
from medvision_bm.jsontypes import JsonValue
from medvision_bm.models.registry import GPU_ENVS, EnvSpec, ModelRecord, record_env
from medvision_bm.provenance import installed_versions, read_marker

_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*==\s*([^\s;\\]+)\s*(;[^\\#]*)?")


def repo_root() -> Path | None:
    """The checkout this package runs from or is pointed at (BENCHMARK_DIR, the package's own, cwd), if any."""
    try:
        return find_checkout()
    except UserError:
        return None


def requirements_file(record: ModelRecord, root: Path | None = None, spec: EnvSpec | None = None) -> Path:
    spec = spec or record.env
    if root is None:
        try:
            root = find_checkout()
        except UserError:
            raise UserError(f"cannot find requirements/ for {spec.name}: run from a checkout of medvision_bm, "
                            "set BENCHMARK_DIR to one, or pass --skip_env_setup") from None
    return requirements_path(spec, root)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_dists() -> dict[str, str]:
    """name -> version of what this interpreter imports: the first distribution of a name on sys.path wins (a later
    one is shadowed, as import shadows it)."""
    out: dict[str, str] = {}
    for d in metadata.distributions():
        out.setdefault(_normalize(d.metadata["Name"] or ""), d.version)
    return out


def unmet_pins(path: Path) -> list[str]:
    """Pins (name==version) of a requirements file that the running environment does not satisfy.

    Lines with environment markers are skipped (the locks are compiled for one platform, so uv leaves few).
    A local version label is compared too: torch 2.13.0 does not satisfy a 2.13.0+cpu pin.
    """
    installed = installed_dists()
    unmet = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _PIN.match(line)
        if not m or m[3]:
            continue
        name, version = m[1], m[2]
        have = installed.get(_normalize(name))
        if have is None:
            unmet.append(f"{name}=={version}")
        elif have != version:
            unmet.append(f"{name}=={version} (have {have})")
    return unmet


def _managed_paths(record: ModelRecord, spec: EnvSpec | None = None) -> EnvPaths | None:
    """The running interpreter's env when the launchers built it (marker in sys.prefix); refuses a foreign one."""
    spec = spec or record.env
    marker = read_marker(Path(sys.prefix))
    if marker is None:
        return None
    if marker.get("name") != spec.name:
        alt = GPU_ENVS.get(record.name)
        if alt is not None and marker.get("name") in (alt.name, record.env.name):  # hf's other env: use it as it is
            spec = alt if marker.get("name") == alt.name else record.env
        else:
            raise UserError(f"this interpreter is environment {marker.get('name')} ({sys.prefix}), but {record.name} "
                            f"runs in {spec.name}; use its launcher or `medvision-bm envs build --env {spec.name}`, "
                            "or pass --skip_env_setup")
    return EnvPaths(spec, Path(sys.prefix).parent)


# ------------------------------------------------------------------------------------------------ torch guard
#: The packages that make up an interpreter's torch/CUDA stack: an environment set-up never changes them.
_STACK_NAMES = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton")


def _is_stack(name: str) -> bool:
    n = _normalize(name)
    return n in _STACK_NAMES or n.startswith("nvidia-")


def torch_build_kind(version: str, requires: list[str] | None = None) -> str:
    """``cuda``, ``rocm`` or ``cpu`` for a torch version (+cu124 / +rocm6.2 / +cpu); a version without a local
    label is PyPI's build, a CUDA one where it depends on NVIDIA packages (Linux x86_64), else a CPU one."""
    label = version.partition("+")[2].lower()
    if label.startswith("cu"):
        return "cuda"
    if label.startswith("rocm"):
        return "rocm"
    if label:
        return "cpu"
    return "cuda" if any(_normalize(r).startswith("nvidia-") for r in (requires or [])) else "cpu"


def _locked_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _PIN.match(line)
        if m and not m[3]:
            pins[_normalize(m[1])] = m[2]
    return pins


def check_torch_stack(record: ModelRecord, spec: EnvSpec, path: Path, managed: EnvPaths | None) -> None:
    """Refuse (one line) a set-up that would downgrade or swap this interpreter's torch/CUDA stack: a CUDA torch
    replaced by a CPU one (or the reverse), a lower torch, other NVIDIA libraries under a CUDA torch. Only an env
    the launchers built for this very family may move its own stack, and never to another build kind."""
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return  # no torch here: nothing to swap
    have = dist.version
    have_kind = torch_build_kind(have, dist.requires)
    pins = _locked_pins(path)
    want = pins.get("torch")
    if want is None:
        return
    want_kind = torch_build_kind(want, [n for n in pins if n.startswith("nvidia-")])
    installed = installed_dists()
    changes = [n for n, v in pins.items() if _is_stack(n) and n in installed and installed[n] != v]
    if not changes:
        return
    same_family = managed is not None and managed.name == spec.name
    downgrade = _version_key(want) < _version_key(have)
    if same_family and want_kind == have_kind and not downgrade:
        return  # the family's own env following its own lock
    use = spec.name
    if have_kind == "cuda" and record.name in GPU_ENVS:
        use = GPU_ENVS[record.name].name
    elif have_kind != want_kind and have_kind == "cpu" and record.env.name != spec.name:
        use = record.env.name
    what = (f"torch {have} ({have_kind}) with torch {want} ({want_kind})" if "torch" in changes
            else f"{changes[0]} {installed[changes[0]]} with {pins[changes[0]]} under torch {have} ({have_kind})")
    raise UserError(f"setting up {spec.name} here would replace this interpreter's {what} from {spec.requirements}; "
                    f"refusing to change the running torch/CUDA stack. Run {record.name} in environment {use} "
                    f"(`medvision-bm envs build --env {use}`, or its launcher), or pass --skip_env_setup to run in "
                    "this interpreter as it is")


def _version_key(version: str) -> tuple[int, ...]:
    public = version.partition("+")[0]
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.\-]", public))


def setup_current_environment(record: ModelRecord, root: Path | None = None, spec: EnvSpec | None = None,
                              *, gpu: bool | None = None) -> list[str]:
    """Install the record's frozen requirements into this interpreter when any pin is unmet; returns what was unmet.

    ``spec``: the environment to set up (default: :func:`record_env` of the record, which for ``hf`` picks the GPU
    environment where ``gpu`` is True or, with ``gpu`` None, where the machine has a GPU). A set-up that would
    change this interpreter's torch/CUDA stack is refused (:func:`check_torch_stack`)."""
    spec = spec or record_env(record, gpu)
    path = requirements_file(record, root, spec)
    managed = _managed_paths(record, spec)
    if managed is not None and managed.name != spec.name:  # hf in its other managed env: that env's lock
        spec = managed.spec
        path = requirements_file(record, root, spec)
    unmet = unmet_pins(path)
    if unmet:
        check_torch_stack(record, spec, path, managed)
        print(f"setting up {spec.name}: {len(unmet)} pinned packages missing or different "
              f"(e.g. {unmet[0]})", file=sys.stderr, flush=True)
        if managed is None:
            install_lock(Path(sys.executable), path, torch_source(spec))
        else:
            with build_lock(managed, os.environ):
                if unmet_pins(path):  # another job may have installed them while this one waited
                    install_lock(Path(sys.executable), path, torch_source(spec))
    if managed is not None:
        _record_lock(managed, spec, path)
    return unmet


def _record_lock(paths: EnvPaths, spec: EnvSpec, path: Path) -> None:
    """After a Method 2 setup the env matches the lock: say so in its marker (current_env_info reads it)."""
    marker = read_marker(paths.prefix) or {}
    sha = lock_hash(path)
    want = inputs_hash(spec, sha, str(marker.get("tool") or "uv"))
    if marker.get("inputs_hash") == want:
        return
    versions: dict[str, JsonValue] = dict(installed_versions())
    marker.update({"lock_hash": sha, "inputs_hash": want, "lock_file": spec.requirements, "versions": versions})
    marker.pop("schema", None)
    try:
        write_marker(paths.prefix, marker)
    except OSError as exc:
        print(f"note: could not update {paths.marker} ({exc.strerror})", file=sys.stderr)
