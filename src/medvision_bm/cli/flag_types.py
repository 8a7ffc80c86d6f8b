"""Argument types shared by the commands: comma-separated lists and task-family names."""

from __future__ import annotations

import argparse

from medvision_bm.data.docs import FAMILIES


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
