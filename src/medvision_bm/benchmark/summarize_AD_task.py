"""Summarize the AD family: `python -m medvision_bm.benchmark.summarize_AD_task --help`."""

from medvision_bm.cli.summarize import family_main

if __name__ == "__main__":
    raise SystemExit(family_main("AD", "summarize_AD_task"))
