"""`medvision-bm envs list|build|check|remove|lock|resolve|info`: the per-family environments.

Stdlib only (runs before any model environment exists). States: ``absent`` (not built), ``ready`` (built from
the current lock, Python version and medvision-bm source), ``stale`` (anything else, with the reason).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from medvision_bm.cli import run_handler
from medvision_bm.envs.builder import EnvState, build_env, env_state, gather_inputs, remove_env, resolve_tool
from medvision_bm.envs.core import EnvPaths, envs_root, find_checkout, source_hash, torch_source
from medvision_bm.envs.lock import check_python, lock_env
from medvision_bm.errors import UserError
from medvision_bm.models.registry import EnvSpec, environments, get_record, machine_has_gpu, record_env
from medvision_bm.provenance import current_env_info, installed_versions
from medvision_bm.secrets import KEY_ENV_VARS, SafeArgumentParser

PROG = "medvision-bm envs"
_METHOD_ALIASES = {"1": "frozen", "2": "entry-point", "frozen": "frozen", "entry-point": "entry-point"}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=None, help="medvision_bm checkout (default: $BENCHMARK_DIR, this package's, cwd)")
    p.add_argument("--envs-root", dest="envs_root", default=None,
                   help="where environments live (default: $ENVS_ROOT or <checkout>/.envs)")
    p.add_argument("--tool", default=None, choices=("uv", "conda"), help="env tool (default: $ENV_TOOL or uv)")


def _select(p: argparse.ArgumentParser, *, many: bool) -> None:
    g = p.add_mutually_exclusive_group(required=not many)
    g.add_argument("--env", default=None, help="environment name, e.g. eval-cpu")
    g.add_argument("--model", default=None, help="registry model; its environment")
    if many:
        g.add_argument("--all", action="store_true", help="every registry environment (the default)")


def _torch(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--torch-find-links", dest="torch_find_links", default=None,
                   help="folder (or URL) with the CPU torch wheel (default: $TORCH_FIND_LINKS)")
    g.add_argument("--torch-index-url", dest="torch_index_url", default=None,
                   help="extra index with CPU torch (default: $TORCH_INDEX_URL, else PyTorch's CPU index)")


def build_parser() -> argparse.ArgumentParser:
    parser = SafeArgumentParser(prog=PROG, description="Per-model-family environments (uv venvs or conda)")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND")

    p = sub.add_parser("list", help="one line per registry environment: absent, ready or stale")
    _common(p)
    p.add_argument("--json", action="store_true", help="print JSON lines instead")

    p = sub.add_parser("build", help="create or update an environment (reused when its inputs are unchanged)")
    _common(p)
    _select(p, many=True)
    _torch(p)
    p.add_argument("--force", action="store_true", help="rebuild from scratch even when ready")
    p.add_argument("--method", default="frozen", choices=sorted(_METHOD_ALIASES),
                   help="frozen/1: install the lock now; entry-point/2: venv + medvision-bm only, the entry point "
                        "installs the lock on its first run")

    p = sub.add_parser("check", help="exit 0 when the selected environments are ready, 1 otherwise")
    _common(p)
    _select(p, many=True)
    p.add_argument("--quiet", action="store_true")

    p = sub.add_parser("remove", help="delete an environment (waits for builds and running evaluations)")
    _common(p)
    _select(p, many=False)

    p = sub.add_parser("lock", help="compile requirements/*.in into frozen, hashed requirements/*.txt with uv")
    p.add_argument("--root", default=None)
    _select(p, many=True)
    _torch(p)
    p.add_argument("--check", action="store_true", help="compile to a temp file; exit 1 when a lock is out of date")
    p.add_argument("--upgrade", action="store_true", help="let uv move every pin to the newest allowed version")
    p.add_argument("--upgrade-package", dest="upgrade_package", action="append", default=[], metavar="PKG")
    p.add_argument("--python", default=None, help="compile for this Python instead of the registry's")

    p = sub.add_parser("resolve", help="KEY=VALUE facts a launcher needs about a model (env, paths, entry point)")
    _common(p)
    p.add_argument("--model", required=True)

    sub.add_parser("info", help="the running interpreter's environment, as results files record it (JSON)")
    return parser


def _specs(ns: argparse.Namespace) -> list[EnvSpec]:
    envs = environments()
    if getattr(ns, "model", None):
        return [record_env(get_record(ns.model))]  # hf: its GPU env where this machine has a GPU
    if getattr(ns, "env", None):
        if ns.env not in envs:
            raise UserError(f"unknown environment {ns.env!r}; known: {', '.join(envs)}")
        return [envs[ns.env]]
    return list(envs.values())


def _state_line(name: str, state: EnvState, prefix: Path) -> str:
    return f"{name:<24} {state.state:<7} {state.reason}  [{prefix}]"


def _states(ns: argparse.Namespace, specs: list[EnvSpec]) -> list[tuple[EnvPaths, EnvState]]:
    checkout = find_checkout(ns.root)
    root = envs_root(ns.envs_root, checkout)
    tool = resolve_tool(ns.tool)
    src = source_hash(checkout)
    out = []
    for spec in specs:
        paths = EnvPaths(spec, root)
        try:
            state = env_state(paths, gather_inputs(spec, checkout, tool, src))
        except UserError as exc:  # missing lock file
            state = EnvState("absent" if not paths.prefix.exists() else "stale", str(exc))
        out.append((paths, state))
    return out


def _cmd_list(ns: argparse.Namespace) -> int:
    for paths, state in _states(ns, list(environments().values())):
        if ns.json:
            print(json.dumps({"name": paths.name, "state": state.state, "reason": state.reason,
                              "prefix": str(paths.prefix)}))
        else:
            print(_state_line(paths.name, state, paths.prefix))
    return 0


def _cmd_check(ns: argparse.Namespace) -> int:
    rows = _states(ns, _specs(ns))
    if not ns.quiet:
        for paths, state in rows:
            print(_state_line(paths.name, state, paths.prefix))
    return 0 if all(s.state == "ready" for _, s in rows) else 1


def _cmd_build(ns: argparse.Namespace) -> int:
    checkout = find_checkout(ns.root)
    root = envs_root(ns.envs_root, checkout)
    tool = resolve_tool(ns.tool)
    method = _METHOD_ALIASES[ns.method]
    for spec in _specs(ns):
        check_python(spec)
        inputs = gather_inputs(spec, checkout, tool)
        source = torch_source(spec, find_links=ns.torch_find_links, index_url=ns.torch_index_url)
        res = build_env(EnvPaths(spec, root), inputs, method=method, force=ns.force, source=source)
        if res.action == "reused":
            print(f"{spec.name}: ready, reused as it is (installed nothing) in {res.seconds:.2f} s  [{res.paths.prefix}]")
        else:
            print(f"{spec.name}: {res.action} in {res.seconds:.1f} s ({res.reason})  [{res.paths.prefix}]")
    return 0


def _cmd_remove(ns: argparse.Namespace) -> int:
    checkout = find_checkout(ns.root)
    root = envs_root(ns.envs_root, checkout)
    for spec in _specs(ns):
        removed = remove_env(EnvPaths(spec, root))
        print(f"{spec.name}: {'removed' if removed else 'absent, nothing to remove'}  [{root / spec.name}]")
    return 0


def _cmd_lock(ns: argparse.Namespace) -> int:
    checkout = find_checkout(ns.root)
    stale = []
    for spec in _specs(ns):
        source = torch_source(spec, find_links=ns.torch_find_links, index_url=ns.torch_index_url)
        res = lock_env(spec, checkout, check_only=ns.check, python=ns.python, upgrade=ns.upgrade,
                       upgrade_packages=tuple(ns.upgrade_package), source=source)
        if ns.check:
            print(f"{spec.requirements}: {'OUT OF DATE' if res.changed else 'up to date'}")
            if res.changed:
                stale.append(spec.requirements)
        else:
            print(f"{spec.requirements}: {'updated' if res.changed else 'unchanged'} (lock {res.new_hash[:12]})")
    if stale:
        print(f"{PROG} lock: {len(stale)} lock(s) differ from their .in files; run `{PROG} lock` and commit them",
              file=sys.stderr)
        return 1
    return 0


def _cmd_resolve(ns: argparse.Namespace) -> int:
    record = get_record(ns.model)
    spec = record_env(record)  # hf: eval-hf-gpu where this machine has a GPU ($MEDVISION_HF_ENV=gpu|cpu decides)
    checkout = find_checkout(ns.root)
    root = envs_root(ns.envs_root, checkout)
    paths = EnvPaths(spec, root)
    module = f"medvision_bm.benchmark.eval__{record.name}"
    has_module = (checkout / "src" / "medvision_bm" / "benchmark" / f"eval__{record.name}.py").is_file()
    facts = {
        "MV_MODEL": record.name,
        "MV_BACKEND": record.backend,
        "MV_ENV_NAME": spec.name,
        "MV_ENV_GPU": "1" if spec.gpu else "0",
        # whether this machine has an NVIDIA GPU (the launchers refuse a GPU env's build without one)
        "MV_HAS_GPU": "1" if machine_has_gpu() else "0",
        "MV_ENV_PREFIX": str(paths.prefix),
        "MV_ENV_PYTHON": str(paths.python),
        "MV_BUILD_LOCK": str(paths.build_lock),
        "MV_INUSE_LOCK": str(paths.inuse_lock),
        "MV_ENVS_ROOT": str(root),
        "MV_CHECKOUT": str(checkout),
        # eval__<model> where the module exists; otherwise the generic runner (baselines, hf, openai-compatible).
        "MV_ENTRY": module if has_module else f"medvision_bm.cli run --model {record.name}",
        # Keys the launcher strips of trailing whitespace: the model's own first, then every provider key variable.
        "MV_API_KEY_ENVS": " ".join(dict.fromkeys((*record.api_key_envs, *KEY_ENV_VARS))),
    }
    for key, value in facts.items():
        if "\n" in value:
            raise UserError(f"{key} contains a newline ({value!r}); use paths without newlines")
        print(f"{key}={value}")
    return 0


def _cmd_info(ns: argparse.Namespace) -> int:
    print(json.dumps({**current_env_info(), "versions": installed_versions()}, indent=2, sort_keys=True))
    return 0


COMMANDS = {"list": _cmd_list, "build": _cmd_build, "check": _cmd_check, "remove": _cmd_remove, "lock": _cmd_lock,
            "resolve": _cmd_resolve, "info": _cmd_info}


def cli_main(argv: Sequence[str]) -> int:
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    if ns.cmd is None:
        parser.print_help()
        return 2
    return run_handler(lambda: COMMANDS[ns.cmd](ns), prog=f"{PROG} {ns.cmd}")


def main() -> int:
    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
