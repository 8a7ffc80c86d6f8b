"""The front of the commands that take `--model NAME` (`run`, `check-vision`, the `eval__<model>` modules): the model
picked first, its environment checked or set up as the flags ask, one backend shared by a preflight and the run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from medvision_bm.cli import run_handler
from medvision_bm.envs.setup import setup_current_environment
from medvision_bm.errors import UserError
from medvision_bm.models.registry import ModelRecord, record_env
from medvision_bm.secrets import SafeArgumentParser

if TYPE_CHECKING:
    from medvision_bm.data.layout import DataDir
    from medvision_bm.models.base import Backend
    from medvision_bm.runner.config import RunConfig

    #: what makes a run's backend: ``runner.backends.build_backend`` or a :class:`SharedBackend` of it
    BackendFactory = Callable[[RunConfig, DataDir], Backend]


def set_up_environment(record: ModelRecord, ns: argparse.Namespace, prog: str) -> bool:
    """Check or install the model's environment as the flags ask; True when the command ends here
    (--env_setup_only)."""
    if ns.env_setup_only and ns.skip_env_setup:
        raise UserError("--env_setup_only sets the environment up and --skip_env_setup skips that; give one of them")
    if ns.skip_env_setup:
        return False
    # hf: --device cuda/cpu picks its GPU/CPU environment; auto: whether this machine has a GPU
    spec = record_env(record, {"cuda": True, "cpu": False}.get(getattr(ns, "device", None) or ""))
    setup_current_environment(record, spec=spec)
    if ns.env_setup_only:
        print(f"{prog}: environment for {record.name} ({spec.name}) is ready", file=sys.stderr)
        return True
    return False



#: The exit code of a run or check stopped because the answers were not shown to depend on the image.
CHECK_FLAGGED_EXIT = 4


class SharedBackend:
    """A backend factory that builds once: every later call hands back the backend the first call made."""

    def __init__(self, factory: BackendFactory) -> None:
        self.factory = factory
        self.made: Backend | None = None

    def __call__(self, cfg: RunConfig, data: DataDir) -> Backend:
        if self.made is None:
            self.made = self.factory(cfg, data)
        return self.made

    def close(self) -> None:
        if self.made is not None:
            self.made.close()
            self.made = None


def model_command(argv: Sequence[str], command: str, usage: str,
                  act: Callable[[str, list[str], str], int]) -> int:
    """A `medvision-bm <command> --model NAME [flags]` front: the model picked first (its own flags follow from its
    record), a short usage without one, and ``act(model, other_flags, prog)`` run under the one error handler."""
    prog = f"medvision-bm {command}"
    pre = SafeArgumentParser(prog=prog, add_help=False)
    pre.add_argument("--model", default=None)
    pre.add_argument("-h", "--help", action="store_true")
    ns, rest = pre.parse_known_args(list(argv))
    if ns.model is None:
        if ns.help:
            print(usage)
            return 0
        print(f"{prog}: error: --model NAME is required (`medvision-bm models` lists them)", file=sys.stderr)
        return 2
    if ns.help:
        rest.append("--help")
    return run_handler(lambda: act(ns.model, rest, f"{prog} --model {ns.model}"), prog=prog)
