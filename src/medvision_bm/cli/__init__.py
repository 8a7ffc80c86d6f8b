"""The `medvision-bm` command and its subcommands: the only layer that parses flags, prints and picks exit codes.

The front door stays light: each subcommand module is imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from medvision_bm.errors import IncompleteRun, UserError

Handler = Callable[[argparse.Namespace, list[str]], int]


def _lazy(module: str, func: str = "cli_main") -> Handler:
    def handler(ns: argparse.Namespace, extra: list[str]) -> int:
        import importlib

        return getattr(importlib.import_module(module), func)(extra)

    return handler


# Subcommands whose flags are owned by their module (parsed there, so --help there lists them all).
PASSTHROUGH: dict[str, tuple[str, str]] = {
    "run": ("medvision_bm.cli.run", "Evaluate a registry model on the tasks of a tasks list"),
    "check-vision": ("medvision_bm.cli.check_vision", "Whether a model's answers depend on the image: K samples "
                     "asked with the real, a blank and a shuffled slice"),
    "models": ("medvision_bm.cli.models", "List the model registry"),
    "parse": ("medvision_bm.cli.parse", "Re-parse stored raw answers with the current parser"),
    "import": ("medvision_bm.cli.import_upstream", "Import upstream MedVision results (lmms-eval samples files) "
               "into sample stores"),
    "judge": ("medvision_bm.cli.judge", "Re-parse stored raw answers with an LLM judge (upstream's llm-parsing)"),
    "summarize": ("medvision_bm.cli.summarize", "Tables, confidence intervals, plots and the HTML report"),
    "compare": ("medvision_bm.cli.compare", "Paired comparison of two models on the same samples"),
    "published": ("medvision_bm.cli.published", "List the published leaderboard (upstream's Paper-results-backup)"),
    "envs": ("medvision_bm.cli.envs", "Per-model environments: list, build, check, remove, lock"),
    "submit": ("medvision_bm.cli.submit", "Submit evaluations as SLURM jobs (or run them locally)"),
    "status": ("medvision_bm.cli.status", "Per model and task: done, running, failed or pending"),
}


def build_parser() -> argparse.ArgumentParser:
    from medvision_bm.cli.data import add_data_parser
    from medvision_bm.secrets import SafeArgumentParser

    parser = SafeArgumentParser(prog="medvision-bm", description="MedVision benchmark suite")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    add_data_parser(sub)

    for name, (module, help_text) in PASSTHROUGH.items():
        p = sub.add_parser(name, help=help_text, add_help=False)
        p.set_defaults(handler=_lazy(module), passthrough=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    ns, extra = parser.parse_known_args(argv)
    if getattr(ns, "passthrough", False):
        idx = argv.index(ns.command)
        extra = argv[idx + 1:]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handler = getattr(ns, "handler", None)
    if handler is None:
        if ns.command == "data":
            parser.parse_args(["data", "--help"])
        parser.print_help()
        return 0
    if getattr(ns, "seed", "unset") is None:
        from medvision_bm.data.phantom import DEFAULT_SEED

        ns.seed = DEFAULT_SEED
    return run_handler(lambda: handler(ns, extra), prog=f"medvision-bm {ns.command}")


def run_handler(fn: Callable[[], int], prog: str) -> int:
    """Run a command: user mistakes become one line on stderr and a non-zero exit, never a traceback."""
    try:
        return int(fn() or 0)
    except UserError as exc:
        from medvision_bm.secrets import redact

        print(f"{prog}: error: {redact(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except IncompleteRun as exc:
        print(f"{prog}: incomplete: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; answers stored so far are kept, rerun to continue", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a folder that cannot be created or written, a disk that is full: say which
        from medvision_bm.io import DISK_FULL_ERRNOS

        where = f" ({exc.filename})" if exc.filename else ""
        if exc.errno in DISK_FULL_ERRNOS:
            print(f"{prog}: error: {exc.strerror or 'disk full'} writing {exc.filename or 'a file'}: free space on "
                  "that disk (or write to another folder) and rerun; what was stored before is kept", file=sys.stderr)
            return 2
        print(f"{prog}: error: {exc.strerror or exc}{where}; check the path and its permissions", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional dependency of this command: name the extra that has it
        extra = extra_for_module(exc.name or "")
        if extra is None:
            raise
        print(f"{prog}: error: this command needs {exc.name}, which a plain install leaves out; install the "
              f"{extra!r} extra: pip install 'medvision-bm[{extra}]'", file=sys.stderr)
        return 2


#: Modules whose distribution name differs from their import name.
_MODULE_DISTS = {"google": "google-genai", "lmms_eval": "lmms-eval"}


def extra_for_module(module: str) -> str | None:
    """The extra of this package (pyproject.toml's optional-dependencies) that installs ``module``, if any."""
    import re
    from importlib import metadata

    top = module.split(".")[0]
    want = re.sub(r"[-_.]+", "-", _MODULE_DISTS.get(top, top)).lower()
    try:
        requires = metadata.requires("medvision-bm") or []
    except metadata.PackageNotFoundError:
        return None
    for req in requires:
        m = re.match(r"\s*([A-Za-z0-9_.\-]+).*extra\s*==\s*['\"]([^'\"]+)['\"]", req)
        if m and re.sub(r"[-_.]+", "-", m[1]).lower() == want and m[2] != "dev":
            return m[2]
    return None


if __name__ == "__main__":
    raise SystemExit(main())
