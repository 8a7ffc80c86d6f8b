"""Run `medvision-bm data download` in the `data` environment (datasets 3.x), building it first when needed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from medvision_bm.envs.builder import build_env, env_state, gather_inputs, resolve_tool
from medvision_bm.envs.core import EnvPaths, envs_root, find_checkout, flocked
from medvision_bm.errors import UserError
from medvision_bm.models.registry import DATA_ENV

#: Set in the re-run command: it must not hand itself on again.
IN_DATA_ENV = "MEDVISION_IN_DATA_ENV"
PROG = "medvision-bm data download"


def run_download_in_data_env(args: Sequence[str], found: str) -> int:
    """Re-run ``data download ARGS`` with the data environment's interpreter; ``found`` names the datasets here."""
    try:
        checkout = find_checkout()
        paths = EnvPaths(DATA_ENV, envs_root(None, checkout))
        inputs = gather_inputs(DATA_ENV, checkout, resolve_tool(None))
    except UserError as exc:
        raise UserError(f"downloading needs `datasets` 3.x ({found} here) and the `data` environment that holds it "
                        f"cannot be found or built: {exc}") from None
    state = env_state(paths, inputs)
    if state.state != "ready":
        print(f"{PROG}: upstream's loading script needs datasets 3.x ({found} here); building the `data` environment "
              f"at {paths.prefix} first ({state.reason}), as `medvision-bm envs build --env data` does",
              file=sys.stderr, flush=True)
        build_env(paths, inputs)
    print(f"{PROG}: running in the `data` environment {paths.prefix} (datasets 3.x)", file=sys.stderr, flush=True)
    cmd = [str(paths.python), "-m", "medvision_bm.cli", "data", "download", *args]
    with flocked(paths.inuse_lock, shared=True, what=f"a rebuild of {paths.name} to finish"):
        try:
            return subprocess.run(cmd, env={**os.environ, IN_DATA_ENV: "1"}).returncode
        except OSError as exc:
            raise UserError(f"cannot run {paths.python} ({exc.strerror}); rebuild it with "
                            "`medvision-bm envs build --env data --force`") from None
