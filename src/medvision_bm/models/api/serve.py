"""Serve mode: start N OpenAI-compatible server replicas of an open-weight model, wait until they answer, yield
their base URLs, and stop every one of them on exit, on error and on Ctrl-C.

The command is a template (vLLM's ``vllm serve`` by default; tests use ``transformers serve``). Placeholders:
``{model}`` ``{served_name}`` ``{host}`` ``{port}`` ``{gpus_per_replica}`` ``{replica}`` ``{python}``, and a
token ``{extra_args}`` that expands to the extra arguments. Each replica gets its own free port, its own log file,
its own process group, and its own GPU group through CUDA_VISIBLE_DEVICES (data parallelism across groups).

Stopping: SIGTERM to the replica's whole process group, SIGKILL after ``grace_s`` if it is still there. While
the context is open, a SIGTERM to this process (SLURM's scancel) is turned into an exception so that the same
cleanup runs; an atexit hook catches anything left at interpreter exit.

:func:`serve` is the context manager; :class:`ServedBackend` holds it open for a backend's lifetime (its
``close()`` stops the servers), and :func:`served_backend` builds one from the runner's RunConfig.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from medvision_bm.errors import UserError
from medvision_bm.models.api import build_api_backend
from medvision_bm.models.api.engine import ApiStats
from medvision_bm.models.api.options import ApiOptions
from medvision_bm.models.base import GenRequest, ModelRunSettings, ResultSink

DEFAULT_VLLM_TEMPLATE = ("vllm serve {model} --host {host} --port {port} --served-model-name {served_name} "
                         "--tensor-parallel-size {gpus_per_replica} {extra_args}")
TRANSFORMERS_TEMPLATE = "transformers serve {model} --host {host} --port {port} {extra_args}"
HEALTH_PATHS = ("/health", "/v1/models")


class ServeError(UserError):
    """A server replica did not come up; the message carries its command and the tail of its log."""


@dataclass(frozen=True)
class ServeSpec:
    model: str  # weights folder or hub id
    served_name: str | None = None  # the model name requests use (default: ``model``)
    template: str = DEFAULT_VLLM_TEMPLATE
    extra_args: tuple[str, ...] = ()
    replicas: int = 1
    gpu_groups: tuple[str, ...] | None = None  # CUDA_VISIBLE_DEVICES per replica; None leaves it untouched
    host: str = "127.0.0.1"
    health_timeout_s: float = 900.0
    grace_s: float = 30.0
    log_dir: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise UserError(f"--serve_replicas must be at least 1, got {self.replicas}")
        if self.gpu_groups is not None and len(self.gpu_groups) < self.replicas:
            raise UserError(f"{self.replicas} server replicas need {self.replicas} GPU groups, "
                            f"only {len(self.gpu_groups)} available; lower --serve_replicas")
        if "{port}" not in self.template:
            raise UserError(f"--serve_command {self.template!r} must contain {{port}}")


@dataclass
class Replica:
    index: int
    port: int
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes]
    gpus: str | None
    host: str = "127.0.0.1"

    @property
    def origin(self) -> str:
        return f"http://{_url_host(self.host)}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"


@dataclass(frozen=True)
class Served:
    """What a running serve context offers: base URLs and the model name the servers answer to."""

    base_urls: list[str]
    model_name: str
    replicas: list[Replica]


def gpu_groups(per_replica: int, visible: str | None = None, count: int | None = None) -> tuple[str, ...]:
    """Split the visible GPUs into groups of ``per_replica`` (CUDA_VISIBLE_DEVICES, else ``count`` GPUs 0..n-1)."""
    if per_replica < 1:
        raise UserError(f"GPUs per replica must be at least 1, got {per_replica}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
    else:
        ids = [str(i) for i in range(count if count is not None else _count_gpus())]
    return tuple(",".join(ids[i:i + per_replica]) for i in range(0, len(ids) - per_replica + 1, per_replica))


def _count_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def render_command(template: str, fields: Mapping[str, object], extra_args: Sequence[str]) -> list[str]:
    """Split the template like a shell would, then fill each token; ``{extra_args}`` becomes several tokens."""
    try:
        tokens = shlex.split(template)
    except ValueError as exc:  # an unclosed quote
        raise UserError(f"--serve_command {template!r}: {exc}") from None
    argv: list[str] = []
    for token in tokens:
        if token == "{extra_args}":
            argv.extend(extra_args)
            continue
        try:
            argv.append(token.format(**fields))
        except (KeyError, IndexError, ValueError) as exc:
            raise UserError(f"--serve_command: cannot fill {token!r} ({exc}); placeholders are "
                            f"{', '.join('{' + k + '}' for k in sorted(fields))}") from None
    return argv


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


_LIVE: set[int] = set()  # process-group ids of replicas still running, for the atexit hook
_LIVE_LOCK = threading.Lock()


def _stop_group(pgid: int, process: subprocess.Popen[bytes] | None, grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is None:
            time.sleep(0.05)
            continue
        if not _group_alive(pgid):
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
    with _LIVE_LOCK:
        _LIVE.discard(pgid)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@atexit.register
def _stop_leftovers() -> None:
    with _LIVE_LOCK:
        groups = list(_LIVE)
    for pgid in groups:
        _stop_group(pgid, None, 2.0)


#: Health checks go straight to the local servers, never through an HTTP proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(base: str, timeout: float = 2.0) -> bool:
    for path in HEALTH_PATHS:
        try:
            with _DIRECT.open(base + path, timeout=timeout) as resp:
                if resp.status == 200:
                    return True
        except (urllib.error.URLError, OSError, ValueError):
            continue
    return False


def _served_name(base: str) -> str | None:
    try:
        with _DIRECT.open(base + "/v1/models", timeout=5) as resp:
            data = json.loads(resp.read())
        return str(data["data"][0]["id"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError):
        return None


class _TermAsInterrupt:
    """Inside the serve context, SIGTERM raises SystemExit in the main thread so the servers get stopped."""

    def __enter__(self) -> None:
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._raise)

    @staticmethod
    def _raise(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


@contextlib.contextmanager
def serve(spec: ServeSpec) -> Iterator[Served]:
    """Start the replicas, wait for health, yield their URLs; always stop them."""
    log_dir = Path(spec.log_dir) if spec.log_dir else Path.cwd() / "serve-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    replicas: list[Replica] = []
    with _TermAsInterrupt():
        try:
            for i in range(spec.replicas):
                replicas.append(_start(spec, i, log_dir))
            _wait_healthy(spec, replicas)
            name = spec.served_name or _served_name(replicas[0].origin) or spec.model
            yield Served([r.base_url for r in replicas], name, replicas)
        finally:
            for r in replicas:
                _stop_group(r.process.pid, r.process, spec.grace_s)


def replica_argv(spec: ServeSpec, index: int, port: int) -> list[str]:
    """The command line of replica ``index`` of ``spec``, listening on ``port``."""
    gpus = spec.gpu_groups[index] if spec.gpu_groups is not None else None
    fields = {"model": spec.model, "served_name": spec.served_name or spec.model, "host": spec.host, "port": port,
              "gpus_per_replica": len(gpus.split(",")) if gpus else 1, "replica": index, "python": sys.executable}
    return render_command(spec.template, fields, spec.extra_args)


def _start(spec: ServeSpec, index: int, log_dir: Path) -> Replica:
    port = free_port(spec.host)
    gpus = spec.gpu_groups[index] if spec.gpu_groups is not None else None
    argv = replica_argv(spec, index, port)
    env = {**os.environ, **spec.env}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    log_path = log_dir / f"serve-replica{index}-port{port}.log"
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        try:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, start_new_session=True)
        except OSError as exc:
            raise ServeError(f"cannot start server replica {index}: {argv[0]}: {exc.strerror or exc}; "
                             f"check --serve_command ({shlex.join(argv)})") from None
    with _LIVE_LOCK:
        _LIVE.add(process.pid)
    return Replica(index, port, argv, log_path, process, gpus, host=spec.host)


def _wait_healthy(spec: ServeSpec, replicas: list[Replica]) -> None:
    deadline = time.monotonic() + spec.health_timeout_s
    pending = list(replicas)
    while pending:
        for r in list(pending):
            code = r.process.poll()
            if code is not None:
                raise ServeError(f"server replica {r.index} exited with status {code} before answering; "
                                 f"command: {shlex.join(r.argv)}\n--- {r.log_path} (last lines) ---\n"
                                 f"{log_tail(r.log_path)}")
            if _healthy(r.origin):
                pending.remove(r)
        if not pending:
            return
        if time.monotonic() > deadline:
            r = pending[0]
            raise ServeError(f"server replica {r.index} (port {r.port}) not healthy after "
                             f"{spec.health_timeout_s:g} s; command: {shlex.join(r.argv)}\n"
                             f"--- {r.log_path} (last lines) ---\n{log_tail(r.log_path)}")
        time.sleep(0.25)


# ---------------------------------------------------------------------------------------------- served backend
class ServedBackend:
    """An openai_compatible backend over replicas this object started; ``close()`` stops them (also on error)."""

    def __init__(self, spec: ServeSpec, options: ApiOptions) -> None:
        self.spec = spec
        self._stack = contextlib.ExitStack()
        try:
            self.served: Served = self._stack.enter_context(serve(spec))
            opts = dataclasses.replace(options, base_url=self.served.base_urls, model_name=self.served.model_name)
            self._api = build_api_backend("openai_compatible", opts)
            self._stack.callback(self._api.close)  # closed before the servers stop (last in, first out)
        except BaseException:
            self._stack.close()
            raise
        self.name = f"served:{self.served.model_name}"
        self.settings = {**self._api.settings, "serve_command": spec.template, "replicas": spec.replicas}
        self.price = self._api.price

    def generate(self, requests: Sequence[GenRequest], on_result: ResultSink) -> None:
        self._api.generate(requests, on_result)

    def stats(self) -> ApiStats:
        return self._api.stats()

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> ServedBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def vllm_args(*, max_model_len: int | None = None, gpu_memory_utilization: float | None = None,
              dtype: str | None = None, revision: str | None = None, seed: int | None = None,
              engine_kwargs: Mapping[str, object] | None = None) -> list[str]:
    """``vllm serve`` flags for a record's engine settings: key ``foo_bar`` -> ``--foo-bar VALUE`` (True: the
    bare flag; False/None: left out; dicts and lists as JSON)."""
    settings: dict[str, object] = {"max_model_len": max_model_len, "gpu_memory_utilization": gpu_memory_utilization,
                                "dtype": None if dtype in (None, "auto") else dtype, "revision": revision,
                                "seed": seed, **dict(engine_kwargs or {})}
    args: list[str] = []
    for key, value in settings.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        else:
            args.extend([flag, json.dumps(value) if isinstance(value, dict | list | tuple) else str(value)])
    return args


def spec_for(cfg: ModelRunSettings) -> ServeSpec:
    """The ServeSpec of a runner RunConfig (``record``, ``weights``, ``model_flags``, ``results_dir``...)."""
    flags = cfg.model_flags
    if cfg.lora_path:
        raise UserError("--lora_path cannot be combined with --serve yet; drop --serve to use offline vLLM")
    per_replica = int(flags.get("serve_gpus_per_replica") or 1)
    groups = gpu_groups(per_replica)
    replicas = int(flags.get("serve_replicas") or max(1, len(groups)))
    engine = {k: v for k, v in cfg.record.engine_kwargs.items() if k != "processor_resize_hw"}
    extra = vllm_args(max_model_len=flags.get("max_model_len") or cfg.record.max_model_len,
                      gpu_memory_utilization=cfg.gpu_memory_utilization, dtype=cfg.dtype, revision=cfg.revision,
                      seed=cfg.gen.seed, engine_kwargs=engine)
    return ServeSpec(model=str(cfg.weights), served_name=str(cfg.weights),
                     template=flags.get("serve_command") or DEFAULT_VLLM_TEMPLATE, extra_args=tuple(extra),
                     replicas=replicas, gpu_groups=groups[:replicas] if groups else None,
                     health_timeout_s=float(flags.get("serve_timeout") or 1800.0),
                     log_dir=Path(cfg.results_dir) / "serve-logs" / Path(str(cfg.model_name)).name)


def served_backend(cfg: ModelRunSettings, options: ApiOptions) -> ServedBackend:
    """Start the record's servers and return the backend that evaluates through them (the runner's entry)."""
    return ServedBackend(spec_for(cfg), options)
