"""The launchers' tee: copies their output to the terminal and the log with every secret redacted (stdlib only).

``python -m medvision_bm.envs.redact_tee LOG -- ARGS...`` reads standard input until it ends and writes each line
(a line ends at ``\\n`` or ``\\r``, so progress bars stay live) through :func:`medvision_bm.secrets.redact` to
standard output and, unless LOG is ``-``, appended to LOG. ARGS are the launcher's own arguments: the values of
their secret flags and the secret parts of their URLs are redacted wherever they show up, as are the API keys in
the environment and the credentials of ``TORCH_INDEX_URL`` / ``TORCH_FIND_LINKS``. Interrupts are ignored: the
tee ends when the launcher's output does, so the log keeps its last lines after a Ctrl-C.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import BinaryIO

from medvision_bm.secrets import redact, redact_argv, register_url

#: A line longer than this is passed on in pieces (a secret is never that long).
_MAX_PENDING = 1 << 16
_END = re.compile(rb"[\r\n]")


def _register(args: list[str]) -> None:
    redact_argv(args)  # remembers the values of secret flags
    for arg in args:
        for part in arg.split(","):
            if "://" in part:
                register_url(part.partition("=")[2] if part.startswith("-") else part)
    for name in ("TORCH_INDEX_URL", "TORCH_FIND_LINKS"):
        register_url(os.environ.get(name))


def pump(read_fd: int, outputs: Sequence[BinaryIO], chunk: int = 1 << 14) -> None:
    """Copy ``read_fd`` to every binary stream in ``outputs``, line by line and redacted, until end of input."""
    pending = b""
    while True:
        data = os.read(read_fd, chunk)
        pending += data
        cut = 0
        for m in _END.finditer(pending):
            cut = m.end()
        if not data or len(pending) - cut > _MAX_PENDING:
            cut = len(pending)
        if cut:
            text = redact(pending[:cut].decode("utf-8", errors="replace")).encode("utf-8")
            pending = pending[cut:]
            for out in outputs:
                try:
                    out.write(text)
                    out.flush()
                except OSError:  # a closed terminal must not stop the log
                    pass
        if not data:
            return


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m medvision_bm.envs.redact_tee LOG|- [-- ARGS...]", file=sys.stderr)
        return 2
    log_path, rest = args[0], args[1:]
    _register(rest[1:] if rest[:1] == ["--"] else rest)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    outputs = [sys.stdout.buffer]
    log = None
    if log_path != "-":
        try:
            log = open(log_path, "ab")  # noqa: SIM115 (closed below)
        except OSError as exc:
            print(f"launcher: cannot write the log {log_path} ({exc.strerror}); output goes to the terminal only",
                  file=sys.stderr)
        else:
            outputs.append(log)
    try:
        pump(sys.stdin.fileno(), outputs)
    finally:
        if log is not None:
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
