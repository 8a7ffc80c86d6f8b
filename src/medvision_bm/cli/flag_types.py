"""Argument types and flag groups shared by the commands: comma-separated lists, task-family names, the T/L filter."""

from __future__ import annotations

import argparse

from medvision_bm.data.docs import FAMILIES
from medvision_bm.data.removed_samples import LIST_FILENAME


def csv_list(text: str) -> list[str]:
    """``a, b,,c`` -> ``["a", "b", "c"]``."""
    return [t.strip() for t in text.split(",") if t.strip()]


def family_list(text: str) -> list[str]:
    """Comma-separated task families, each one of ``FAMILIES``."""
    fams = csv_list(text)
    bad = [f for f in fams if f not in FAMILIES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown family {bad[0]!r}; choose from {', '.join(FAMILIES)}")
    return fams


def add_tl_filter_flags(p: argparse.ArgumentParser) -> None:
    """Upstream's T/L removed-samples filter (report.removed_filter): on at annotation pin 1.0.0 unless turned off."""
    p.add_argument("--no_tl_filter", action="store_true", help="keep the T/L samples upstream's leaderboard leaves out "
                   "(its removed-samples lists; by default they are dropped for T/L runs at annotation pin 1.0.0)")
    p.add_argument("--removed_samples_dir", default=None, help="the Data/Datasets folder holding "
                   "<dataset>/<list file> (upstream's flag; default: <data folder>/Datasets, the data folder as "
                   "--data_dir, the run's recorded data folder or MedVision_DATA_DIR give it)")
    p.add_argument("--removed_samples_filename", default=LIST_FILENAME,
                   help="the list's file name in each dataset folder (default: %(default)s)")
