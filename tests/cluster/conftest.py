"""Fixtures for the cluster tests: a PATH without SLURM, and the local one-node SLURM cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cluster_support import SLURM_LOCAL


@pytest.fixture()
def empty_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH holds no SLURM command (and nothing else)."""
    folder = tmp_path / "empty-bin"
    folder.mkdir()
    return {"PATH": str(folder)}


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    """A one-node SLURM cluster on localhost (tests/cluster/slurm-local.sh); the env to reach it."""
    if shutil.which("slurmctld") is None and not Path("/usr/sbin/slurmctld").exists():
        pytest.skip("slurmctld is not installed (apt-get install -y --no-install-recommends slurmctld slurmd "
                    "slurm-client munge slurmdbd mariadb-server)")
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (munged runs as the munge user, slurmd as root)")
    res = subprocess.run(["bash", str(SLURM_LOCAL), "up"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    was_up = "already up" in res.stderr
    conf = res.stdout.strip().rpartition("SLURM_CONF=")[2]
    assert conf and Path(conf).is_file(), res.stdout
    yield {"SLURM_CONF": conf, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if not was_up:
        down = subprocess.run(["bash", str(SLURM_LOCAL), "down"], capture_output=True, text=True, timeout=120)
        if down.returncode == 0:  # the state it made (the accounting database: over 100 MB) goes; its logs stay
            state = Path(conf).parent.parent
            for name in ("mariadb", "spool"):
                shutil.rmtree(state / name, ignore_errors=True)
