"""The clinical decision agreement as summarize takes it: upstream's files, the report section with its tables and
pictures, and the runs of published models held against the published CDA (`report/cda.py` computes it,
`report/published_cda.py` holds the published numbers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from medvision_bm.report import cda
from medvision_bm.report.published_cda import against
from medvision_bm.report.views import View

if TYPE_CHECKING:
    from medvision_bm.report.load import Loaded
    from medvision_bm.report.plots import PlotJob
    from medvision_bm.report.removed_filter import FilterReport


@dataclass
class Section:
    """What summarize takes from the CDA: the rows for summary.json, the pictures to draw, upstream's files (paths
    relative to the summary folder), notes, and the report section (none when no run has a proxy sample)."""

    rows: list[dict[str, object]] = field(default_factory=list)
    jobs: list[PlotJob] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: list[tuple[str, str, Sequence[View], Sequence[str | tuple[str, str]]]] = field(default_factory=list)


def summary_section(out: Path, loaded: Loaded, judged: Loaded | None, parsed_dir: str, judged_dir: str,
                    parse_text: str, results_dir: Path, tl_report: FilterReport, judged_filtered: bool,
                    plots: bool, parse: str = "strict") -> Section:
    """The CDA of the parse the tables use (files, section, pictures, runs of published models held against the
    published CDA) and, with ``--parse both``, the files of the judged parse beside it."""
    tl_filtered = tl_report.applied
    analysis = cda.analyse(loaded)
    sec = Section(notes=list(analysis.notes))
    if analysis.empty:
        return sec
    where = str(results_dir.resolve())
    sec.files = [f"upstream/{p}" for p in cda.write_files(out / "upstream", analysis, parsed_dir, parse_text, where,
                                                      tl_filtered)]
    if judged is not None:
        other = cda.analyse(judged)
        sec.files += [f"upstream/{p}" for p in cda.write_files(out / "upstream", other, judged_dir, "the judged parse",
                                                           where, judged_filtered)]
    sec.jobs = cda.plot_jobs(analysis, out / "plots") if plots else []
    tables = [*cda.views(analysis), *against(analysis, loaded, parse, tl_report)]
    sec.extra = [("cda", "Clinical decision agreement", tables,
                  [(Path(j.path).relative_to(out).as_posix(), j.title) for j in sec.jobs])]
    sec.rows = cda.summary_rows(analysis)
    return sec
