"""Upstream's canonical CDA text ``summary_CDA_task*_canonical.txt`` (``summarize_CDA_task.print_model_summaries``
@2beef50), written from the per-run metrics ``report/cda.py`` computes."""

from __future__ import annotations

from collections.abc import Sequence

from medvision_bm.report import cda_stats as cs


def _fmt(x: float | None) -> str:
    v = float("nan") if x is None else float(x)
    return f"{v:<8.4f}"


def _line(name: str, width: int, m: cs.AgreementJson) -> str:
    return (f"{name[:width]:<{width}} | {_fmt(m.get('accuracy'))} | {_fmt(m.get('cohen_kappa'))} | "
            f"{_fmt(m.get('weighted_kappa'))} | {_fmt(m.get('flip_rate'))} | "
            f"{_fmt(m.get('accuracy_coverage_adjusted'))} | {m.get('n_parsed', 0):<8} | {m.get('n_total', 0):<8}")


def canonical_text(rows: Sequence[tuple[str, dict[str, dict[str, cs.AgreementJson]]]]) -> str:
    """``summary_CDA_task*_canonical.txt`` of upstream's ``summarize_CDA_task.print_model_summaries`` (canonical:
    the per-proxy leaderboards first, then a block per model)."""
    lines = ["\n\n========== CLINICAL DECISION AGREEMENT (CDA) — MODEL SUMMARIES ==========\n",
             "Acc = agreement on parsed samples; Kappa = Cohen's kappa; wKappa = quadratic-weighted kappa (ordinal "
             "proxies only);",
             "Flip = decision-flip rate (parsed); AccCov = coverage-adjusted accuracy (parse failures = "
             "disagreement)."]
    order: list[str] = []
    for _, m in rows:
        order += [k for k in m.get("overall", {}) if k not in order]
    head = (f"{'Model':<26} | {'Acc':<8} | {'Kappa':<8} | {'wKappa':<8} | {'Flip':<8} | {'AccCov':<8} | "
            f"{'Nparsed':<8} | {'Ntotal':<8}")
    for proxy in order:
        lines += [f"\n### Leaderboard (config order): {proxy}", head, "-" * 102]
        lines += [_line(model, 26, m["overall"][proxy]) for model, m in rows if proxy in m.get("overall", {})]
    width = 56
    head = (f"{'Proxy':<{width}} | {'Acc':<8} | {'Kappa':<8} | {'wKappa':<8} | {'Flip':<8} | {'AccCov':<8} | "
            f"{'Nparsed':<8} | {'Ntotal':<8}")
    for model, m in rows:
        lines.append(f"\nModel: {model}")
        for section in ("overall", "by_dataset"):
            entries = m.get(section, {})
            if not entries:
                continue
            lines += ["\nOverall (per proxy):" if section == "overall" else "\nBy dataset (per proxy x dataset):",
                      head, "-" * len(head)]
            lines += [_line(key, width, entries[key]) for key in sorted(entries)]
        lines.append("\n" + "=" * 100 + "\n")
    return "\n".join(lines)
