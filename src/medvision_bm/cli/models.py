"""`medvision-bm models`: list the registry; `medvision-bm models make-tiny`: build a tiny offline test VLM."""

from __future__ import annotations

from collections.abc import Sequence

from medvision_bm.cli import run_handler
from medvision_bm.models.registry import REGISTRY
from medvision_bm.models.tiny import main as tiny_main
from medvision_bm.secrets import SafeArgumentParser


def _list(verbose: bool) -> int:
    width = max(len(n) for n in REGISTRY)
    for rec in REGISTRY.values():
        line = f"{rec.name:<{width}}  {rec.backend:<17} {rec.env.name:<22} {rec.default_weights or '-'}"
        print(line)
        if verbose:
            if rec.notes:
                print(f"{'':<{width}}  {rec.notes}")
            for f in rec.flags:
                print(f"{'':<{width}}    {f.name} ({f.type}, default {f.default}){' [answer]' if f.affects_answer else ''}")
    return 0


def cli_main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv[:1] == ["make-tiny"]:
        return run_handler(lambda: tiny_main(argv[1:]), prog="medvision-bm models make-tiny")
    p = SafeArgumentParser(prog="medvision-bm models",
                                description="List the model registry (make-tiny: build a tiny random VLM for checks)")
    p.add_argument("-v", "--verbose", action="store_true", help="also show notes and each model's own flags")
    ns = p.parse_args(argv)
    return run_handler(lambda: _list(ns.verbose), prog="medvision-bm models")
