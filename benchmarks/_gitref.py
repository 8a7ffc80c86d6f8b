"""The package's source at a git commit, for benchmarks that time today's code beside an earlier commit's in one run.

``source_at(ref)`` extracts ``src/`` of that commit (``git archive``) once into a folder under the system temp
folder named by the full commit hash, and returns the folder to put on ``PYTHONPATH`` of a child process; the
child then imports that commit's ``medvision_bm`` instead of the checkout's.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def source_at(ref: str) -> Path:
    """``<tmp>/medvision-src-<commit>/src``: the package source at ``ref`` (a commit, tag or branch)."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                                capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"baseline {ref!r} is not a commit of {REPO} ({exc}); pass another --baseline_ref") from None
    root = Path(tempfile.gettempdir()) / f"medvision-src-{commit}"
    src = root / "src"
    if not (src / "medvision_bm" / "__init__.py").is_file():
        data = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, "src"],
                              capture_output=True, check=True).stdout
        tmp = Path(tempfile.mkdtemp(prefix=f".medvision-src-{commit[:12]}-", dir=tempfile.gettempdir()))
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(tmp, filter="data")
        try:
            tmp.rename(root)
        except OSError:  # another run extracted it first
            pass
    return src
