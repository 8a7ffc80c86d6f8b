"""Summarize the TL family: `python -m medvision_bm.benchmark.summarize_TL_task --help`."""

from medvision_bm.cli.summarize import family_main

if __name__ == "__main__":
    raise SystemExit(family_main("TL", "summarize_TL_task"))
