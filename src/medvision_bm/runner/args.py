"""The runner's command-line flags: the common ones every entry point takes, plus each record's own flags.

Kept free of heavy imports: building the parser and `--help` never import torch, transformers or lmms-eval.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from medvision_bm import limits
from medvision_bm.errors import UserError
from medvision_bm.models.registry import FlagSpec, ModelRecord
from medvision_bm.paths import show
from medvision_bm.secrets import SafeArgumentParser

#: Samples per task the image-dependence check asks by default (check-vision -K, --preflight).
DEFAULT_CHECK_K = 8
#: Largest side of --reshape_image_hw (upstream's resolution variants go up to 896; a slice is held in memory).
MAX_IMAGE_SIDE = 8192


def parse_hw(text: str) -> tuple[int, int]:
    """'512,512' or '512x512' -> (512, 512)."""
    m = re.fullmatch(r"\s*(\d+)\s*[,xX]\s*(\d+)\s*", text)
    if not m or int(m[1]) <= 0 or int(m[2]) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an image size; write H,W or HxW with positive integers")
    if max(int(m[1]), int(m[2])) > MAX_IMAGE_SIDE:
        raise argparse.ArgumentTypeError(f"{text!r}: each side must be at most {MAX_IMAGE_SIDE} pixels")
    return int(m[1]), int(m[2])


def _index(digits: str, text: str, end: bool = False) -> int:
    """One index of --sample_indices, at most limits.MAX_SAMPLE_INDEX (a range's exclusive end one more), checked
    on its digits before it becomes a number or a range."""
    top = limits.MAX_SAMPLE_INDEX + (1 if end else 0)
    if len(digits.lstrip("0")) > len(str(top)) or int(digits) > top:
        raise argparse.ArgumentTypeError(f"{show(text)}: --sample_indices go up to {limits.MAX_SAMPLE_INDEX} (no task has "
                                         "more samples); give the indices of the task's samples")
    return int(digits)


def parse_indices(text: str) -> list[int]:
    """'0,3,5-9' -> [0, 3, 5, 6, 7, 8, 9]; also the older '[start:stop]' and '[start,stop,step]' forms."""
    m = re.fullmatch(r"\s*\[\s*(\d+)\s*:\s*(\d+)\s*\]\s*", text)
    if m:
        return _checked_range(range(_index(m[1], text), _index(m[2], text, end=True)), text)
    m = re.fullmatch(r"\s*\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]\s*", text)
    if m:
        step = _index(m[3], text, end=True)
        if step == 0:
            raise argparse.ArgumentTypeError(f"{text!r}: the step of --sample_indices must be positive")
        return _checked_range(range(_index(m[1], text), _index(m[2], text, end=True), step), text)
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise argparse.ArgumentTypeError(f"{part!r} in --sample_indices is not an index or a range like 5-9")
        first, last = _index(m[1], part), _index(m[2] or m[1], part)
        if last < first:
            raise argparse.ArgumentTypeError(f"{part!r} in --sample_indices is not an index or a range like 5-9")
        out.extend(range(first, last + 1))
        if len(out) > limits.MAX_SAMPLE_INDEX + 1:  # repeated ranges: at most that many distinct indices
            out = sorted(set(out))
    if not out:
        raise argparse.ArgumentTypeError("--sample_indices is empty; give indices like 0,3,5-9")
    return sorted(set(out))


def stop_strings(values: list[str] | str | None) -> tuple[str, ...]:
    """The stop strings of ``--stop_strings`` (upstream's ``nargs="*"``: each value one string, empty ones
    dropped). One value holding a comma is refused: it reads as upstream's single string and as this suite's older
    comma-separated form alike, and the two give different answers."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    if len(values) == 1 and "," in values[0]:
        parts = " ".join(repr(v) for v in values[0].split(",") if v)
        raise UserError(f"--stop_strings {values[0]!r} is ambiguous (one stop string with a comma, or the older "
                        f"comma-separated list?); give each stop string as its own value: --stop_strings {parts}")
    return tuple(v for v in values if v)


def _checked_range(r: range, text: str) -> list[int]:
    if not len(r):
        raise argparse.ArgumentTypeError(f"--sample_indices {text!r} selects no sample")
    return list(r)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return value


def _unit_float(text: str) -> float:
    value = float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def add_common_arguments(p: argparse.ArgumentParser, record: ModelRecord) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model_hf_id", default=None,
                   help=f"weights: a hub id or a local folder (default: {record.default_weights or 'none'})")
    g.add_argument("--model_name", default=None, help="name of the results folder and status entry")
    g.add_argument("--revision", default=None, help="weights revision (hub branch, tag or commit)")
    g.add_argument("--lora_path", default=None, help="LoRA adapter folder applied on top of the weights")
    g.add_argument("--dtype", default=None, help=f"weights dtype (default: {record.dtype})")
    g.add_argument("--lmmseval_module", "--lmms_eval_module", dest="lmmseval_module", default=None, help="model-class variant where the documentation names one")
    g.add_argument("--batch_size_per_gpu", "--batch_size", dest="batch_size", type=positive_int, default=None,
                   help=f"batch size, or requests in flight for servers/APIs (default: {record.batch_size})")
    g.add_argument("--gpu_memory_utilization", type=_unit_float, default=None,
                   help=f"vLLM GPU memory fraction (default: {default_text(record.gpu_memory_utilization)})")

    d = p.add_argument_group("data and outputs")
    d.add_argument("--data_dir", default=None, help="upstream Data/ folder (default: MedVision_DATA_DIR)")
    d.add_argument("--tasks_list_json_path", default=None,
                   help="tasks list: JSON object of task name -> count (required, except with --env_setup_only)")
    d.add_argument("--results_dir", default="Results", help="results root (default: ./Results)")
    d.add_argument("--task_status_json_path", default=None,
                   help="status file (default: completed_tasks/completed_tasks_<tasks list tag>.json)")
    d.add_argument("--sample_limit", type=positive_int, default=None, help="evaluate the first N samples per task")
    d.add_argument("--sample_indices", type=parse_indices, default=None,
                   help="evaluate these sample indices per task, e.g. 0,3,5-9 (overrides --sample_limit)")
    d.add_argument("--reshape_image_hw", type=parse_hw, default=None,
                   help="resize every slice to H,W (or HxW) before sending; the prompt states the new pixel size")
    d.add_argument("--shard", default=None,
                   help="cluster shard label: names this process's store segment and its results/parsed files; "
                        "a shard never marks the status file (its finalizing run does)")

    s = p.add_argument_group("generation")
    s.add_argument("--max_new_tokens", "--max_tokens", dest="max_new_tokens", type=positive_int, default=None,
                   help=f"maximum generated tokens (default: {record.gen.max_new_tokens}; where the record has a "
                        "budget for the task's family, upstream's launcher value for it, that applies unless this "
                        "flag is given)")
    s.add_argument("--temperature", type=float, default=None, help=f"sampling temperature; 0 = greedy (default: {default_text(record.gen.temperature)})")
    s.add_argument("--top_p", type=float, default=None, help=f"nucleus sampling mass (default: {default_text(record.gen.top_p)})")
    s.add_argument("--top_k", type=int, default=None, help=f"top-k sampling (default: {default_text(record.gen.top_k)})")
    s.add_argument("--seed", type=int, default=None, help=f"sampling seed (default: {default_text(record.gen.seed)})")
    s.add_argument("--stop_strings", nargs="*", default=None, metavar="STRING",
                   help="stop strings, several separated by spaces as upstream (--stop_strings '</answer>' '</s>'); "
                        f"default: {' '.join(record.gen.stop) or 'none'}. The older one-value comma form "
                        "('</answer>,</s>') is refused as ambiguous")
    s.add_argument("--protocol", choices=("current", "paper"), default=None,
                   help="upstream MedVision generation to reproduce: current (newest prompts, image normalisation, "
                        "strict <answer> parser and metrics) or paper (the paper-era master: plain prompts, min-max "
                        "images, last-k-numbers parser); default: current. A task's -CoT/-VP/... suffix picks the "
                        "prompt variant")
    s.add_argument("--scaled_ps_low", type=float, default=None,
                   help="lowest pixel-size factor of -CoT-scaledPS tasks, as upstream's flag (default: 0.5); the "
                        "factors scale the stated pixel size and the target, and enter those tasks' answer signature")
    s.add_argument("--scaled_ps_high", type=float, default=None,
                   help="highest pixel-size factor of -CoT-scaledPS tasks, as upstream's flag (default: 3.0)")
    s.add_argument("--log-sys-prompt", dest="log_sys_prompt", action="store_true",
                   help="print the system prompt and record it in every per-sample row (lmms_eval/samples_*.jsonl) "
                        "and in results.json")

    r = p.add_argument_group("run control")
    r.add_argument("--skip_env_setup", action="store_true", help="do not check or install the environment")
    r.add_argument("--env_setup_only", action="store_true", help="set up the environment, then exit 0")
    r.add_argument("--skip_update_status", action="store_true", help="never write the status file")
    r.add_argument("--keep-failed", dest="keep_failed", action="store_true",
                   help="do not retry samples whose requests failed in an earlier run")
    r.add_argument("--force", action="store_true", help="evaluate tasks the status file lists as done")
    r.add_argument("--upstream_results", default=None,
                   help="upstream MedVision results folder: a task an upstream status entry marks done but whose "
                        "answers this results folder lacks is imported from here (else it is run)")
    r.add_argument("--no_progress", action="store_true", help="no progress bar")


def add_preflight_argument(p: argparse.ArgumentParser) -> None:
    """``--preflight [K]`` of a run: the image-dependence check before anything is evaluated."""
    p.add_argument("--preflight", nargs="?", type=positive_int, const=DEFAULT_CHECK_K, default=None, metavar="K",
                   help=f"first ask K samples (default {DEFAULT_CHECK_K}) of the first task of each family with the real, a blank and "
                        "a shuffled slice (`medvision-bm check-vision`); stop with exit code 4, evaluating nothing, "
                        "when the answers are not shown to depend on the image")
    p.add_argument("--preflight_only", action="store_true",
                   help="with --preflight: stop after the check (exit 0 when the answers depend on the image); the "
                        "preflight job of `medvision-bm submit --preflight`")


#: ``--batch_phase``: what a batch run does (submit and collect, or one of the two: a cluster's pair of jobs).
BATCH_PHASES = ("all", "submit", "collect")


def add_estimate_argument(p: argparse.ArgumentParser) -> None:
    """``--estimate`` of a run of an API record: its cost before any request."""
    p.add_argument("--estimate", action="store_true",
                   help="ask nothing: print per task the samples still to ask, their input tokens (text at about 4 "
                        "characters a token, each image by its provider's published rule), the output tokens (the "
                        "max tokens as a bound, and the median of the answers stored) and the price live and batched "
                        "from the price table (models/api/prices.json, its date; --price_table to override)")
    p.add_argument("--max_cost", type=_usd, default=None, metavar="USD",
                   help="stop asking new samples once what this run spent plus what it has in flight would pass USD "
                        "(priced as --estimate prices them); the run ends incomplete (exit 3) and a rerun goes on")
    p.add_argument("--batch", action="store_true",
                   help="ask through the provider's batch interface (OpenAI, Anthropic, Gemini) at its batch price: the "
                        "requests a live run sends, submitted as batches recorded in the store, polled until they "
                        "end; a rerun re-attaches to the store's open batches instead of submitting again")
    p.add_argument("--batch_poll", type=_seconds, default=60.0, metavar="SECONDS",
                   help="with --batch: seconds between looks at the open batches (default 60)")
    p.add_argument("--batch_phase", choices=BATCH_PHASES, default="all",
                   help="with --batch: 'submit' submits the batches (recorded in the store) and ends without waiting; "
                        "'collect' re-attaches to the store's open batches, stores their answers as they end and "
                        "submits nothing; 'all' does both in one run. `medvision-bm submit --batch` "
                        "runs them as a pair of jobs")


def _positive(what: str) -> Callable[[str], float]:
    """An argparse type: a finite number above 0 of ``what`` ("seconds", "US dollars")."""

    def read(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of {what}") from None
        if not (math.isfinite(x) and x > 0):
            raise argparse.ArgumentTypeError(f"{value!r}: give a number of {what} above 0")
        return x

    return read


_seconds, _usd = _positive("seconds"), _positive("US dollars")


def add_record_arguments(p: argparse.ArgumentParser, record: ModelRecord) -> None:
    if not record.flags:
        return
    g = p.add_argument_group(f"{record.display_name} options")
    seen: set[str] = set()
    for flag in record.flags:
        if flag.name in seen:
            continue
        seen.add(flag.name)
        _add_flag(g, flag)


def default_text(value: object) -> str:
    """How --help states a default: ``not set`` for None (the setting is not sent), on/off for switches."""
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _add_flag(g: argparse._ArgumentGroup, flag: FlagSpec) -> None:
    help_text = flag.help if "(default" in flag.help else f"{flag.help} (default: {default_text(flag.default)})"
    if flag.type == "bool":
        g.add_argument(flag.name, dest=flag.dest, action="store_true", default=bool(flag.default), help=flag.help)
    elif flag.type == "tristate":
        # created with default None, so no Python version appends its own "(default: ...)" to ours (3.10 does)
        g.add_argument(flag.name, dest=flag.dest, action=argparse.BooleanOptionalAction, default=None,
                       help=help_text)
        g.set_defaults(**{flag.dest: flag.default})
    elif flag.type == "list":
        g.add_argument(flag.name, dest=flag.dest, action="append", default=None, help=help_text)
    else:
        kind = {"int": int, "float": float, "str": str}[flag.type]
        g.add_argument(flag.name, dest=flag.dest, type=kind, default=flag.default, choices=flag.choices,
                       help=help_text)


def build_parser(record: ModelRecord, prog: str,
                 parser_class: Callable[..., argparse.ArgumentParser] = SafeArgumentParser) -> argparse.ArgumentParser:
    """The runner's parser for ``record``, made by ``parser_class`` (submit's raises where this one exits)."""
    p = parser_class(prog=prog, description=f"Evaluate {record.display_name} ({record.backend} backend) "
                                f"on MedVision tasks. {record.notes}".strip())
    add_common_arguments(p, record)
    add_record_arguments(p, record)
    return p
