"""The `medvision-bm` command and its subcommands: the only layer that parses flags, prints and picks exit codes.

The front door stays light: each subcommand module is imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from medvision_bm.errors import IncompleteRun, UserError

Handler = Callable[[argparse.Namespace, list[str]], int]


def _data_make_phantom(ns: argparse.Namespace, extra: list[str]) -> int:
    from medvision_bm.data.phantom import make_phantom

    counts = make_phantom(ns.data_dir, seed=ns.seed, tasks_list_dir=ns.tasks_list_dir)
    total = sum(sum(c.values()) for c in counts.values())
    n_tasks = sum(len(c) for c in counts.values())
    print(f"phantom data written to {ns.data_dir} in upstream MedVision's layout: {n_tasks} bundled tasks, {total} "
          "test samples at annotation version 1.0.0 (upstream's launchers: MedVision_PLANNER_VERSION=1.0.0, "
          "MedVision_ACK_RELEASE=1.4.0)")
    return 0


def _data_tasks(ns: argparse.Namespace, extra: list[str]) -> int:
    from medvision_bm.data.check import cli_tasks

    return cli_tasks(ns.data_dir, ns.tasks_list_json_path, ns.upstream)


def _data_check(ns: argparse.Namespace, extra: list[str]) -> int:
    from medvision_bm.data.check import cli_check

    return cli_check(ns.data_dir, ns.tasks_list_json_path, ns.json)


def _data_split_swap(ns: argparse.Namespace, extra: list[str]) -> int:
    from medvision_bm.data.split_swap import cli_split_swap

    return cli_split_swap(ns.data_dir, ns.old_version, ns.new_version, ns.kind, ns.datasets)


def _data_download(ns: argparse.Namespace, extra: list[str]) -> int:
    import os

    from medvision_bm.data.download import cli_download, download_argv
    from medvision_bm.envs.data_env import IN_DATA_ENV

    def in_data_env(found: str) -> int:  # no datasets 3.x here: re-run in the `data` environment (built if needed)
        from medvision_bm.envs.data_env import run_download_in_data_env

        return run_download_in_data_env(download_argv(ns), found)

    return cli_download(ns, None if os.environ.get(IN_DATA_ENV) else in_data_env)


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
    from medvision_bm.secrets import SafeArgumentParser

    parser = SafeArgumentParser(prog="medvision-bm", description="MedVision benchmark suite")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    data = sub.add_parser("data", help="Datasets: check, list and download upstream data; generate the phantom")
    data_sub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND")
    mp = data_sub.add_parser("make-phantom", help="Write the deterministic phantom Data/ folder (upstream's layout)")
    mp.add_argument("--data_dir", required=True, help="folder to write <data_dir>/Datasets/... into")
    mp.add_argument("--seed", type=int, default=None, help="generator seed (default: the one the task lists match)")
    mp.add_argument("--tasks_list_dir", default=None, help="also write tasks_MedVision-Phantom-*.json here")
    mp.set_defaults(handler=_data_make_phantom)
    dt = data_sub.add_parser("tasks", help="List the tasks a Data/ folder (or upstream's catalogue) offers at "
                                           "MedVision_PLANNER_VERSION")
    dt.add_argument("--data_dir", default=None, help="upstream Data/ folder (default: MedVision_DATA_DIR)")
    dt.add_argument("--tasks_list_json_path", default=None,
                    help="say which tasks of this list exist at the pinned release, from upstream's per-release "
                         "catalogues (no data folder needed)")
    dt.add_argument("--upstream", action="store_true",
                    help="list upstream's catalogue of the pinned release instead of a data folder's tasks")
    dt.set_defaults(handler=_data_tasks)
    dc = data_sub.add_parser("check", help="Per task: found or missing, the plan version picked, samples "
                                           "before and after upstream's filters")
    dc.add_argument("--data_dir", default=None, help="upstream Data/ folder (default: MedVision_DATA_DIR)")
    dc.add_argument("--tasks_list_json_path", default=None, help="check these tasks (default: every task found)")
    dc.add_argument("--json", action="store_true", help="print JSON instead of a table")
    dc.set_defaults(handler=_data_check)
    dd = data_sub.add_parser("download", help="Fetch the datasets a tasks list needs, as upstream does "
                                              "(Hugging Face dataset YongchengYAO/MedVision and its loading script)")
    dd.add_argument("--data_dir", required=True, help="upstream Data/ folder to fill")
    dd.add_argument("--tasks_list_json_path", required=True, help="tasks list whose datasets to fetch")
    dd.add_argument("--split", choices=("test", "train"), default="test", help="split of the configs to load")
    dd.add_argument("--hf_dataset", default="YongchengYAO/MedVision",
                    help="dataset repository id or a local folder holding it (default: %(default)s)")
    dd.add_argument("--force_download_data", action="store_true",
                    help="download again what is already there (upstream MedVision_FORCE_DOWNLOAD_DATA)")
    dd.add_argument("--dry_run", action="store_true", help="say what would be fetched, fetch nothing")
    dd.set_defaults(handler=_data_download)

    ds = data_sub.add_parser("split-swap", help="Cases whose train/test split changed between two annotation "
                                                "releases, per dataset (upstream's count_case_split_swap.py)")
    ds.add_argument("--data_dir", required=True, help="upstream Data/ folder (or its Datasets/ folder)")
    ds.add_argument("--old_version", default="1.0.0", help="release whose splits are the reference (%(default)s)")
    ds.add_argument("--new_version", default="1.4.0", help="release compared against it (%(default)s)")
    ds.add_argument("--kind", choices=("biometry", "detection", "segmentation"), default="biometry",
                    help="plan kind whose splits are pooled (default: %(default)s, as upstream)")
    ds.add_argument("--datasets", nargs="+", default=None, help="only these datasets (default: all with a "
                                                                  "--new_version plan)")
    ds.set_defaults(handler=_data_split_swap)

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
