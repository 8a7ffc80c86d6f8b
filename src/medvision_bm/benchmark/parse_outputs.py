"""Re-parse stored raw answers with the current parser: `python -m medvision_bm.benchmark.parse_outputs --help`."""

import sys

from medvision_bm.cli import run_handler
from medvision_bm.cli.parse import parse_main

if __name__ == "__main__":
    prog = "python -m medvision_bm.benchmark.parse_outputs"
    raise SystemExit(run_handler(lambda: parse_main(sys.argv[1:], prog=prog), prog=prog))
