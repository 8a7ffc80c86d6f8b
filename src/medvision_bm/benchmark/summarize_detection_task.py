"""Summarize the detect family: `python -m medvision_bm.benchmark.summarize_detection_task --help`."""

from medvision_bm.cli.summarize import family_main

if __name__ == "__main__":
    raise SystemExit(family_main("detect", "summarize_detection_task"))
