"""Entry points: `medvision-bm run --model NAME ...` and `python -m medvision_bm.benchmark.eval__<model> ...`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from medvision_bm.cli import run_handler
from medvision_bm.cli.model_front import CHECK_FLAGGED_EXIT, SharedBackend, model_command, set_up_environment
from medvision_bm.errors import IncompleteRun, UserError
from medvision_bm.models.registry import get_record
from medvision_bm.runner.args import add_estimate_argument, add_preflight_argument, build_parser

if TYPE_CHECKING:  # the runner loads after the environment is set up (see _evaluate)
    from medvision_bm.runner.config import RunConfig
    from medvision_bm.runner.estimate import RunEstimate


def _evaluate(model: str, argv: list[str], prog: str) -> int:
    record = get_record(model)
    parser = build_parser(record, prog)
    add_preflight_argument(parser)
    if record.is_api:
        add_estimate_argument(parser)
    ns = parser.parse_args(argv)
    if set_up_environment(record, ns, prog):
        return 0
    if not ns.tasks_list_json_path:
        raise UserError("--tasks_list_json_path is required (a tasks list JSON, e.g. "
                        "tasks_list/tasks_MedVision-Phantom-detect.json); only --env_setup_only runs without one")
    # deferred: up to here this module needs only the standard library, so an entry point can set up (install) its
    # own environment first; the runner needs numpy and the data stack that setup has just installed
    from medvision_bm.runner.backends import build_backend
    from medvision_bm.runner.config import build_config
    from medvision_bm.runner.loop import Runner

    cfg = build_config(ns, record, [prog, *argv])
    if getattr(ns, "estimate", False):
        return _estimate(cfg)
    backend_factory = SharedBackend(build_backend)  # the preflight's model is the run's: loaded once
    if ns.preflight is not None:
        from medvision_bm.cli.check_vision import preflight

        if not preflight(cfg, backend_factory, ns.preflight, prog):
            return CHECK_FLAGGED_EXIT
        if ns.preflight_only:
            backend_factory.close()
            print(f"{prog}: preflight passed; --preflight_only evaluates nothing", file=sys.stderr)
            return 0
    elif ns.preflight_only:
        raise UserError("--preflight_only stops after the preflight; give --preflight [K] too")
    ignored = cfg.ignored_generation_flags()
    if ignored:
        print(f"note: {record.name} is a baseline and generates nothing: {', '.join(ignored)} change none of its "
              "answers and are ignored (they do not enter its run signature)", file=sys.stderr)
    if cfg.log_sys_prompt:
        print(f"system prompt: {cfg.system_prompt!r}", file=sys.stderr)
    outcomes = Runner(cfg, backend_factory).run()
    width = max(len(o.task) for o in outcomes)
    for o in outcomes:
        main = next((k for k in ("IoU", "avgMAE") if o.metrics.get(k) is not None), None)  # upstream's names
        figure = f"  {main}={o.metrics[main]:.4g}" if main else ""
        rate = o.metrics.get("SuccessRate")
        succ = f"  success={rate:.3f}" if rate is not None else ""
        print(f"{o.task:<{width}}  {o.state:<10} n={o.n_selected}{succ}{figure}" +
              (f"  error: {o.error}" if o.error else ""))
    print(f"results: {cfg.results_dir / cfg.model_name}")
    not_done = [o for o in outcomes if o.state not in ("done", "skipped", "submitted")]
    if not_done:
        errors = [o for o in not_done if o.state == "error"]
        if errors:
            print(f"{prog}: {len(errors)} task(s) raised; see the messages above", file=sys.stderr)
            return 1
        raise IncompleteRun(f"{len(not_done)} task(s) have samples without a successful answer; "
                            "rerun the same command to retry them")
    return 0


def cli_main(argv: Sequence[str]) -> int:
    """`medvision-bm run --model NAME [flags]`."""
    return model_command(argv, "run", "usage: medvision-bm run --model NAME [flags]\n\n"
                         "Evaluate any registry model; `medvision-bm run --model NAME --help` lists its flags and\n"
                         "`medvision-bm models` lists the registry.", _evaluate)


def main_for(model: str, argv: Sequence[str] | None = None) -> int:
    """The body of every `eval__<model>` module."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = f"python -m medvision_bm.benchmark.eval__{model}"
    return run_handler(lambda: _evaluate(model, argv, prog), prog=prog)


def _estimate(cfg: RunConfig) -> int:
    """`--estimate`: the run's cost, printed; nothing is asked."""
    from medvision_bm.data.layout import DataDir
    from medvision_bm.runner.estimate import estimate_run

    print_estimate(estimate_run(cfg, DataDir(cfg.contract)), cfg.record.name)
    return 0


def print_estimate(est: RunEstimate, model: str) -> None:
    """The estimate's table: one line per task, then the totals live and batched, and what they rest on."""
    width = max(len(t.task) for t in est.tasks)
    print(f"{'task':<{width}}  {'to ask':>7}  {'input tok':>10}  {'image tok':>10}  {'output (median)':>15}  "
          f"{'output (bound)':>14}")
    for t in est.tasks:
        img = f"{t.image_tokens:>10}" if t.image_tokens is not None else f"{'-':>10}"
        med = f"{t.output_tokens(False):>15,.0f}" if t.median_output is not None else f"{'-':>15}"
        print(f"{t.task:<{width}}  {t.to_ask:>7}  {t.input_tokens:>10,}  {img}  {med}  {t.output_tokens(True):>14,.0f}")
    n = sum(t.to_ask for t in est.tasks)
    print(f"{model} ({est.model_code or '?'} at {est.provider}): {n} sample(s) to ask; images by "
          f"{est.image_rule or 'no known rule (image tokens not estimated)'}; text at about 4 characters a token")
    if est.price is None:
        print(f"no price known for {est.model_code or model}; cost not estimated (give --price_in/--price_out or "
              "--price_table)")
        return
    p = est.price
    when = f" (prices of {p.date}, {p.source})" if p.date else f" (prices from {p.source})"
    for label, price in (("live", p.live), ("batch", p.batch)):
        if price is None:
            print(f"{label}: no batch price known for {p.code}")
            continue
        low, high = est.cost(price, bound=False), est.cost(price, bound=True)
        if any(t.median_output is not None for t in est.tasks):
            print(f"{label}: ${low:,.2f} at the stored answers' median output, at most ${high:,.2f} at the max "
                  f"tokens{when}")
        else:
            print(f"{label}: at most ${high:,.2f} (every answer at the max tokens; no answer stored yet){when}")
