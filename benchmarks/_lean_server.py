"""The benchmarks' fixed-latency provider: tests/fakes/provider_server.py --lean started in a process of its own."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "provider_server.py"


def start_server(latency: float) -> tuple[subprocess.Popen[bytes], str]:
    """The lean server answering every request after ``latency`` seconds: (its process, its base URL)."""
    port_file = Path(tempfile.mkstemp(prefix="bench-port-")[1])
    port_file.write_text("")
    proc = subprocess.Popen([sys.executable, str(SERVER), "--lean", "--port", "0", "--port-file", str(port_file),
                             "--latency", str(latency)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while not port_file.read_text().strip():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the benchmark server did not start")
        time.sleep(0.05)
    port = int(port_file.read_text())
    port_file.unlink()
    return proc, f"http://127.0.0.1:{port}"
