"""The benchmarks' fixed-latency provider (tests/fakes/provider_server.py --lean) started in a process of its own, and
the CPU a process has used."""

from __future__ import annotations

import os
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


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc; 0.0 where it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
