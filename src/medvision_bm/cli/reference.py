"""Generates docs/cli-reference.md from the argument parsers and the registry (a test fails when it drifts).

Regenerate with: python -m medvision_bm.cli.reference > docs/cli-reference.md
"""

from __future__ import annotations

import argparse
import re

from medvision_bm.cli import build_parser as cli_parser
from medvision_bm.cli import check_vision as check_vision_cli
from medvision_bm.cli import compare as compare_cli
from medvision_bm.cli import import_upstream as import_cli
from medvision_bm.cli import judge as judge_cli
from medvision_bm.cli import parse as parse_cli
from medvision_bm.cli import published as published_cli
from medvision_bm.cli import summarize as summarize_cli
from medvision_bm.models.registry import REGISTRY, get_record
from medvision_bm.runner.args import add_common_arguments, add_estimate_argument, add_preflight_argument


def _rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        empty = action.default in (None, False, argparse.SUPPRESS) or action.default == []
        default = "" if empty else f" (default `{action.default}`)"
        text = re.sub(r"\s*\(default:? [^)]*\)", "", (action.help or "")).replace("|", "\\|")
        rows.append(f"| {names} | {text}{default} |")
    return rows


def render() -> str:
    out = ["# CLI reference", "",
           "Generated from the argument parsers and the model registry by "
           "`python -m medvision_bm.cli.reference`; a test fails when this page drifts.", "",
           "## Evaluating: `medvision-bm run --model NAME` and `python -m medvision_bm.benchmark.eval__<model>`", "",
           "Both take the same flags: the common ones below plus the model's own. Exit code 0 only when every "
           "selected task is done; 3 when some samples still lack a successful answer (rerun to retry them); "
           "1 when a task raised; 2 for a user mistake.", "",
           "| flag | meaning |", "|---|---|"]
    common = argparse.ArgumentParser(add_help=False)
    add_common_arguments(common, get_record("hf"))
    add_preflight_argument(common)
    out += _rows(common)
    api = argparse.ArgumentParser(add_help=False)
    add_estimate_argument(api)
    out += ["", "API records (openai, claude, gemini, kimi, minimax_m3_api, openai-compatible) also take:", "",
            "| flag | meaning |", "|---|---|", *_rows(api)]
    check = argparse.ArgumentParser(add_help=False)
    check_vision_cli.add_check_arguments(check)
    out += ["", "## Image-dependence check: `medvision-bm check-vision --model NAME`", "",
            "Takes the run's flags above (except `--preflight`) plus the ones below. Exit code 0 when every task's "
            "answers depend on the image; 4 when some do not, or none parses; 3 when requests failed (rerun to ask "
            "them again); 2 for a user mistake. Answers go to `<results_dir>/.check-vision/`, never to a run's "
            "store.", "", "| flag | meaning |", "|---|---|", *_rows(check)]
    out += ["", "## The model registry", "",
            "| model | backend | environment | default weights | launcher | own flags |", "|---|---|---|---|---|---|"]
    for rec in REGISTRY.values():
        flags = ", ".join(f"`{f.name}`" for f in dict.fromkeys(rec.flags)) or "-"
        out.append(f"| `{rec.name}` | {rec.backend} | `{rec.env.name}` | {rec.default_weights or '-'} | "
                   f"`{rec.launcher}.sh` | {flags} |")
    out += ["", "## Model flags", "",
            "Flags marked *answer* change answers and enter the run signature.", "",
            "| flag | type | default | answer | meaning |", "|---|---|---|---|---|"]
    seen: dict[str, object] = {}
    for rec in REGISTRY.values():
        for f in rec.flags:
            if f.name in seen:
                continue
            seen[f.name] = f
            answer = ("yes, when given" if f.signature_when_given else "yes") if f.affects_answer else "no"
            out.append(f"| `{f.name}` | {f.type} | `{f.default}` | {answer} | "
                       f"{f.help}{' (choices: ' + ', '.join(f.choices) + ')' if f.choices else ''} |")

    for title, parser in (("`medvision-bm parse`", parse_cli.build_parser("medvision-bm parse")),
                          ("`medvision-bm summarize`", summarize_cli.build_parser("medvision-bm summarize")),
                          ("`medvision-bm compare`", compare_cli.build_parser("medvision-bm compare")),
                          ("`medvision-bm published`", published_cli.build_parser("medvision-bm published")),
                          ("`medvision-bm judge`", judge_cli.build_parser("medvision-bm judge")),
                          ("`medvision-bm import`", import_cli.build_parser("medvision-bm import")),
                          ("`medvision-bm data tasks`", _data_parser("tasks")),
                          ("`medvision-bm data check`", _data_parser("check"))):
        out += ["", f"## {title}", "", "| flag | meaning |", "|---|---|", *_rows(parser)]
    return "\n".join(out) + "\n"


def _data_parser(name: str) -> argparse.ArgumentParser:
    def sub(parser: argparse.ArgumentParser, key: str) -> argparse.ArgumentParser:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return action.choices[key]

    return sub(sub(cli_parser(), "data"), name)


if __name__ == "__main__":
    print(render(), end="")
