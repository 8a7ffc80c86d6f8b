"""Shared pieces of the environment builder: where things live, input hashes, the completion marker, locks, tools.

Stdlib only: the launchers run this with any Python >= 3.10 before a model environment exists.

Layout under an envs root (``ENVS_ROOT``, default ``<checkout>/.envs``)::

    <envs_root>/<env-name>/                  the environment (uv venv, or a conda prefix)
    <envs_root>/<env-name>/medvision-env.json  completion marker, written last after a successful build
    <envs_root>/<env-name>.lock              build lock: builds and installs of this env hold it exclusively
    <envs_root>/<env-name>.inuse             held shared by running evaluations; a rebuild waits for them
    <envs_root>/.wheels/<source-hash>/       our wheel, built once per source state in a private temp dir
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from medvision_bm.errors import UserError
from medvision_bm.io import write_json_atomic
from medvision_bm.jsontypes import JsonMapping
from medvision_bm.models.registry import EnvSpec
from medvision_bm.provenance import MARKER_NAME, MARKER_SCHEMA
from medvision_bm.secrets import redact, redact_url

#: Set by a caller (the launcher) that already holds the env's build lock.
LOCK_HELD_ENV = "MEDVISION_ENV_LOCK_HELD"
DEFAULT_TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: Files of the checkout that make our wheel (their hash names the wheel; __pycache__ is skipped).
WHEEL_INPUTS = ("pyproject.toml", "README.md", "src/medvision_bm")


# ------------------------------------------------------------------------------------------------ locations
def find_checkout(explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The medvision_bm checkout (pyproject.toml + requirements/): --root, $BENCHMARK_DIR, this code's own, or cwd."""
    env = os.environ if env is None else env
    candidates: list[tuple[str, Path]] = []
    if explicit:
        candidates.append(("--root", Path(explicit)))
    elif env.get("BENCHMARK_DIR"):
        candidates.append(("BENCHMARK_DIR", Path(env["BENCHMARK_DIR"])))
    else:
        here = Path(__file__).resolve()
        candidates += [("the package's checkout", p) for p in here.parents[2:4]]
        candidates.append(("the current folder", Path.cwd()))
    for _, path in candidates:
        if (path / "pyproject.toml").is_file() and (path / "requirements").is_dir():
            return path.resolve()
    if explicit or env.get("BENCHMARK_DIR"):
        name, path = candidates[0]
        raise UserError(f"{name} {path} is not a medvision_bm checkout (no pyproject.toml and requirements/ there); "
                        "point it at the repository root")
    raise UserError("cannot find the medvision_bm checkout: run from the repository root, set BENCHMARK_DIR or "
                    "pass --root")


def envs_root(explicit: str | os.PathLike[str] | None, checkout: Path, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    raw = explicit or env.get("ENVS_ROOT") or ""
    root = (Path(raw).expanduser() if raw else checkout / ".envs").resolve()
    if root.exists() and not root.is_dir():
        raise UserError(f"envs root {root} is a file; point ENVS_ROOT (or --envs-root) at a folder")
    return root


@dataclass(frozen=True)
class EnvPaths:
    """Where one environment and its locks live."""

    spec: EnvSpec
    root: Path  # the envs root

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def prefix(self) -> Path:
        return self.root / self.spec.name

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    @property
    def marker(self) -> Path:
        return self.prefix / MARKER_NAME

    @property
    def build_lock(self) -> Path:
        return self.root / f"{self.spec.name}.lock"

    @property
    def inuse_lock(self) -> Path:
        return self.root / f"{self.spec.name}.inuse"


def requirements_path(spec: EnvSpec, checkout: Path) -> Path:
    path = checkout / spec.requirements
    if not path.is_file():
        raise UserError(f"requirements file {path} for {spec.name} is missing; create it with "
                        f"`medvision-bm envs lock --env {spec.name}` (from {spec.requirements_in})")
    return path


# ------------------------------------------------------------------------------------------------ hashes
def lock_hash(path: Path) -> str:
    """sha256 of a lock file's requirement lines (comment-only and blank lines do not count)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            lines.append(line.rstrip())
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def source_hash(checkout: Path) -> str:
    """sha256 over the files our wheel is built from (relative path + content), in a stable order."""
    h = hashlib.sha256()
    for rel in WHEEL_INPUTS:
        base = checkout / rel
        files = [base] if base.is_file() else sorted(
            p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
        for path in files:
            h.update(path.relative_to(checkout).as_posix().encode("utf-8") + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def inputs_hash(spec: EnvSpec, lock_sha: str, tool: str) -> str:
    """What decides whether an environment can be reused: the lock, the Python version asked for, the tool."""
    payload = json.dumps({"schema": MARKER_SCHEMA, "lock": lock_sha, "python": spec.python, "tool": tool},
                         sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------------------ marker
def write_marker(prefix: Path, data: JsonMapping) -> None:
    """Atomic and readable by every user the umask allows, so others sharing ENVS_ROOT see the env as built."""
    write_json_atomic(prefix / MARKER_NAME, {"schema": MARKER_SCHEMA, **data})


def drop_marker(prefix: Path) -> None:
    """Invalidate an environment before changing it: a build killed from here on leaves it marked incomplete."""
    with contextlib.suppress(FileNotFoundError):
        (prefix / MARKER_NAME).unlink()


# ------------------------------------------------------------------------------------------------ locks
@contextlib.contextmanager
def flocked(path: Path, *, shared: bool = False, what: str = "") -> Iterator[None]:
    """Hold flock(2) on ``path`` (the same lock flock(1) takes); say so on stderr when it has to wait.

    Unlike medvision_bm.io.file_lock it says on stderr when it waits and turns an uncreatable lock file into a
    one-line error: a build can wait minutes for another job.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o664)
    except OSError as exc:
        raise UserError(f"cannot create lock file {path} ({exc.strerror}); check ENVS_ROOT") from None
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            start = time.monotonic()
            print(f"medvision-bm envs: waiting for {what or path.name} ({path})", file=sys.stderr, flush=True)
            fcntl.flock(fd, mode)
            print(f"medvision-bm envs: got {what or path.name} after {time.monotonic() - start:.1f} s",
                  file=sys.stderr, flush=True)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def build_lock(paths: EnvPaths, env: Mapping[str, str] | None = None) -> Iterator[None]:
    """The env's build lock, unless the caller (a launcher using flock(1)) says it already holds it."""
    env = os.environ if env is None else env
    if env.get(LOCK_HELD_ENV) == str(paths.build_lock):
        yield
        return
    with flocked(paths.build_lock, what=f"the build lock of {paths.name}"):
        yield


# ------------------------------------------------------------------------------------------------ tools
def require_tool(name: str, fix: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UserError(f"{name} is not on PATH; {fix}")
    return path


def uv_path() -> str:
    return require_tool("uv", "install it (`pip install uv` or https://docs.astral.sh/uv/) or put it on PATH")


def run(cmd: list[str], what: str, *, env: Mapping[str, str] | None = None, capture: bool = False,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a build step; a failure is a UserError naming the step (the tool's own output is above it)."""
    print(f"+ {redact(' '.join(_quote(c) for c in cmd))}", file=sys.stderr, flush=True)  # an index URL's password
    try:
        res = subprocess.run(cmd, env=None if env is None else dict(env), text=True, cwd=cwd,
                             stdout=subprocess.PIPE if capture else None,
                             stderr=subprocess.PIPE if capture else None)
    except OSError as exc:
        raise UserError(f"{what}: cannot run {cmd[0]} ({exc.strerror})") from None
    if res.returncode != 0:
        detail = f": {(res.stderr or '').strip().splitlines()[-1]}" if capture and (res.stderr or "").strip() else ""
        raise UserError(f"{what} failed (exit {res.returncode}){detail}; see the output above")
    return res


def _quote(arg: str) -> str:
    if "\n" in arg:
        return "<script>"
    return arg if arg and all(c.isalnum() or c in "-_./=:+@,[]<>" for c in arg) else repr(arg)


# ------------------------------------------------------------------------------------------------ torch source
@dataclass(frozen=True)
class TorchSource:
    """Where CPU families get their CPU torch build: a find-links folder or an extra index."""

    find_links: str | None = None
    index_url: str | None = None

    def uv_args(self) -> list[str]:
        if self.find_links:
            return ["--find-links", self.find_links]
        if self.index_url:
            return ["--extra-index-url", self.index_url]
        return []

    def describe(self) -> str:
        """Where torch comes from, fit to print and to record (a URL's credentials and tokens hidden)."""
        if self.find_links:
            return f"find-links {redact_url(self.find_links)}"
        return f"index {redact_url(self.index_url)}" if self.index_url else "PyPI"


def torch_source(spec: EnvSpec, *, find_links: str | None = None, index_url: str | None = None,
                 env: Mapping[str, str] | None = None) -> TorchSource:
    """Flags win, then TORCH_FIND_LINKS / TORCH_INDEX_URL, else PyTorch's CPU index.

    GPU families take torch from PyPI (the CUDA build there), unless a source is given explicitly.
    """
    env = os.environ if env is None else env
    if not (find_links or index_url):  # a flag of either kind overrides both variables
        find_links = env.get("TORCH_FIND_LINKS") or None
        index_url = env.get("TORCH_INDEX_URL") or None
    if find_links and index_url:
        raise UserError("both a torch find-links folder and a torch index URL are set (TORCH_FIND_LINKS / "
                        "TORCH_INDEX_URL or the flags); keep one")
    if find_links:
        if "://" not in find_links and not Path(find_links).is_dir():
            raise UserError(f"torch find-links folder {find_links} does not exist; fix TORCH_FIND_LINKS or unset it")
        return TorchSource(find_links=find_links)
    if index_url:
        return TorchSource(index_url=index_url)
    if spec.gpu:
        return TorchSource()
    return TorchSource(index_url=DEFAULT_TORCH_CPU_INDEX)


#: uv installs without bytecode unless asked; pip compiles by default. Compiled once at build time, a run never
#: compiles lmms-eval, torch and the SDKs itself (about 20 s before the first request, on every run where the
#: environment is read-only or PYTHONDONTWRITEBYTECODE is set). ``MEDVISION_ENV_BYTECODE=0`` leaves it out (the
#: test suite's throwaway environments, built and removed within minutes).
COMPILE_BYTECODE = "--compile-bytecode"
BYTECODE_ENV = "MEDVISION_ENV_BYTECODE"


def bytecode_args(env: Mapping[str, str] | None = None) -> list[str]:
    """uv's flag that compiles an environment's bytecode as it installs, unless ``MEDVISION_ENV_BYTECODE=0``."""
    return [] if (os.environ if env is None else env).get(BYTECODE_ENV) == "0" else [COMPILE_BYTECODE]


def install_lock(python: Path, lock_file: Path, source: TorchSource, *, sync: bool = False) -> None:
    """Install a frozen lock into ``python``'s env exactly as pinned: ``uv pip sync`` (``sync``: remove what the
    lock lacks) or ``uv pip install --no-deps``; pip with ``--require-hashes`` where uv is absent."""
    what = f"installing {lock_file.name} into {python.parent.parent}"
    if shutil.which("uv"):
        verb = ["pip", "sync"] if sync else ["pip", "install", "--no-deps", "-r"]
        run([uv_path(), *verb, str(lock_file), "--python", str(python), *bytecode_args(), *source.uv_args()], what)
    else:
        run([str(python), "-m", "pip", "install", "--no-deps", "--require-hashes", "-r", str(lock_file),
             *source.uv_args()], what)
