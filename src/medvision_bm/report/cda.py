"""Clinical decision agreement (CDA): each stored measurement of a proxy task mapped through a published cutoff table
to a clinical category, the model's category held against the ground truth's, per run; upstream's CDA files, the
report's tables and confusion-matrix pictures.

Upstream's rule (YongchengYAO/MedVision ``script/analyze/clinical-decision-analysis/`` @2beef50/8ded43a, the skills
copy ``skills/medvision/sub-skills/analysis/scripts/cda/`` @39dd6bf; docs/spec/cda.md):

* the proxies, cutoffs and boundary rules are data (``cda_proxies.json``, upstream's ``cda_config.py``); a sample of
  a task whose name holds ``BiometricsFromLandmarks_Angle`` enters the angle proxy of its ``metric_key`` (SNA, SNB),
  one of a ``TumorLesionSize`` task of KiTS23 or KiPA22 the renal T category (its major axis, the first value);
* the prediction has upstream's value count (angle 1, T/L 2) or it is a parse failure: not in the agreement, counted
  in ``Ntotal`` (coverage-adjusted accuracy);
* the statistics and the bootstrap over whole imaging volumes are ``cda_stats``;
* records are taken in upstream's order: a run's tasks by name (upstream's sorted samples files), a task's samples by
  index. The T/L removed-samples filter of the report applies (upstream's canonical T/L CDA is the filtered one).

Memory: only the samples of proxy tasks are taken (a strict parse's rows as the load holds them, picked by dataset
and metric key; any other parse streamed from each store's parse file), and each is kept as one small record for
the values file; the bootstrap works on one count matrix per volume.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from medvision_bm.io import write_text_atomic
from medvision_bm.report import cda_stats as cs
from medvision_bm.report.cda_rows import held_proxy_rows
from medvision_bm.report.cda_text import canonical_text
from medvision_bm.report.plots import PlotJob, safe_name
from medvision_bm.report.upstream_summaries import STRICT_PARSED_DIR
from medvision_bm.report.views import View
from medvision_bm.store.judged import JUDGED_DIR
from medvision_bm.store.layout import PARSED
from medvision_bm.store.records import ParsedRow, iter_lines
from medvision_bm.tasks.families import family_spec

if TYPE_CHECKING:
    from medvision_bm.report.load import Loaded, StoreInfo

#: Upstream's file names (``cda_config.py``: ``SUMMARY_FILENAME_CDA_METRICS`` / ``_VALUES``).
METRICS_FILE = "summary_metrics_CDA_Task"
VALUES_FILE = "summary_values_CDA_Task"
#: A stored sample's key (data.layout): ``<image below Datasets>:d<slice_dim>:s<slice_idx>[:<label or metric key>]``.
_KEY = re.compile(r"^(?P<image>.+?):d(?P<dim>\d+):s(?P<idx>-?\d+)(?::.*)?$")


@dataclass(frozen=True)
class Proxy:
    """One clinical proxy: which samples enter it, its cutoff table and the boundary rule of each cutoff."""

    key: str
    name: str
    family: str
    task_marker: str
    metric_keys: tuple[str, ...] | None
    datasets: tuple[str, ...] | None
    measurement: str
    unit: str
    cutoffs: tuple[float, ...]
    labels: tuple[str, ...]
    ordinal: bool
    right_closed: tuple[bool, ...]
    rule: str

    def category(self, value: float | None) -> int | None:
        return cs.categorize(value, self.cutoffs, self.right_closed)

    def applies(self, family: str, task: str, dataset: str | None, metric_key: str | None) -> bool:
        """Upstream's ``_proxies_for_sample``: the task kind by its name, then the metric key (angles) or the
        dataset (T/L)."""
        if family != self.family or self.task_marker not in task:
            return False
        if self.metric_keys is not None and metric_key not in self.metric_keys:
            return False
        return self.datasets is None or dataset in self.datasets


@dataclass(frozen=True)
class Settings:
    """The resampling of the uncertainty analysis (upstream's ``CDA_SEED`` and ``--n_boot`` default)."""

    seed: int
    n_boot: int
    alpha: float
    min_informative_n: int
    source: str


@cache
def _data() -> tuple[tuple[Proxy, ...], Settings]:
    raw = json.loads(resources.files("medvision_bm.report").joinpath("cda_proxies.json").read_text("utf-8"))
    proxies = []
    for p in raw["proxies"]:
        cutoffs = tuple(float(c) for c in p["cutoffs"])
        rc = p["right_closed"]
        proxies.append(Proxy(
            key=p["key"], name=p["name"], family=p["family"], task_marker=p["task_marker"],
            metric_keys=tuple(p["metric_keys"]) if p["metric_keys"] is not None else None,
            datasets=tuple(p["datasets"]) if p["datasets"] is not None else None, measurement=p["measurement"],
            unit=p["unit"], cutoffs=cutoffs, labels=tuple(p["labels"]), ordinal=bool(p["ordinal"]),
            right_closed=tuple(bool(b) for b in (rc if isinstance(rc, list) else [rc] * len(cutoffs))),
            rule=p["rule"]))
    return tuple(proxies), Settings(int(raw["seed"]), int(raw["n_boot"]), float(raw["alpha"]),
                                    int(raw["min_informative_n"]), raw["source"])


def proxies() -> tuple[Proxy, ...]:
    return _data()[0]


def settings() -> Settings:
    return _data()[1]


def proxies_for(family: str, task: str, dataset: str | None, metric_key: str | None) -> list[Proxy]:
    return [p for p in proxies() if p.applies(family, task, dataset, metric_key)]


def proxy_families() -> tuple[str, ...]:
    """The families the proxies measure, in the proxies' order."""
    return tuple(dict.fromkeys(p.family for p in proxies()))


def is_proxy_task(family: str, task: str) -> bool:
    return any(p.family == family and p.task_marker in task for p in proxies())


@dataclass(frozen=True)
class Sample:
    """One sample of a proxy: upstream's per-sample CDA record (``summary_values_CDA_Task*.json``)."""

    proxy: Proxy
    dataset: str | None
    metric_key: str | None
    gt_value: float
    pred_value: float | None
    gt_category: int
    pred_category: int | None
    image_file: str | None
    slice_dim: int | None
    slice_idx: int | None

    def to_upstream(self) -> dict[str, str | float | None]:
        labels = self.proxy.labels
        return {"proxy": self.proxy.name, "dataset": self.dataset, "metric_key": self.metric_key,
                "gt_value": self.gt_value, "pred_value": self.pred_value, "gt_category": labels[self.gt_category],
                "pred_category": labels[self.pred_category] if self.pred_category is not None else None,
                "image_file": self.image_file, "slice_dim": self.slice_dim, "slice_idx": self.slice_idx}


def make_sample(proxy: Proxy, dataset: str | None, metric_key: str | None, gt_value: float | None,
                pred_value: float | None, image_file: str | None = None, slice_dim: int | None = None,
                slice_idx: int | None = None) -> Sample | None:
    """The sample, or None when its ground truth has no category (upstream skips such a sample)."""
    gt_cat = proxy.category(gt_value)
    if gt_cat is None or gt_value is None:
        return None
    return Sample(proxy, dataset, metric_key, float(gt_value), pred_value, gt_cat, proxy.category(pred_value),
                  image_file, slice_dim, slice_idx)


@dataclass
class _Group:
    proxy: Proxy
    volumes: cs.VolumeCounts
    n_failed: int = 0

    def add(self, s: Sample) -> None:
        if s.pred_category is None:
            self.n_failed += 1
        else:
            self.volumes.add(s.image_file, s.gt_category, s.pred_category)

    def agreement(self) -> cs.Agreement:
        return cs.agreement(self.volumes.matrix(), self.n_failed, self.proxy.ordinal)


@dataclass
class RunCda:
    """The CDA of one run (a model's label) in one family: per proxy overall and per proxy x dataset, and its
    samples in upstream's order."""

    label: str
    family: str
    samples: list[Sample] = field(default_factory=list)
    overall: dict[str, _Group] = field(default_factory=dict)  # proxy name -> group, first appearance order
    by_dataset: dict[str, _Group] = field(default_factory=dict)  # "<proxy> @ <dataset>" -> group
    paired: dict[str, cs.VolumeCounts] = field(default_factory=dict)  # the uncertainty's records (both categories)
    _uncertainty: dict[str, cs.Uncertainty] = field(default_factory=dict)

    def add(self, s: Sample) -> None:
        self.samples.append(s)
        k = len(s.proxy.labels)
        for key, store in ((s.proxy.name, self.overall), (f"{s.proxy.name} @ {s.dataset}", self.by_dataset)):
            store.setdefault(key, _Group(s.proxy, cs.VolumeCounts(k))).add(s)
        if s.pred_category is not None:
            self.paired.setdefault(s.proxy.name, cs.VolumeCounts(k)).add(s.image_file, s.gt_category, s.pred_category)

    def metrics(self) -> dict[str, dict[str, cs.AgreementJson]]:
        """``summary_metrics_CDA_Task*.json``."""
        def fin(groups: dict[str, _Group]) -> dict[str, cs.AgreementJson]:
            return {key: g.agreement().to_upstream(g.proxy.name, g.proxy.ordinal, g.proxy.labels)
                    for key, g in groups.items()}
        return {"overall": fin(self.overall), "by_dataset": fin(self.by_dataset)}

    def uncertainty(self, proxy_name: str) -> cs.Uncertainty | None:
        """The bootstrap of one proxy (computed once); None when no sample of it was parsed."""
        if proxy_name not in self.paired:
            return None
        if proxy_name not in self._uncertainty:
            st = settings()
            ordinal = self.overall[proxy_name].proxy.ordinal
            self._uncertainty[proxy_name] = cs.bootstrap(self.paired[proxy_name], ordinal, st.n_boot, st.seed,
                                                         st.alpha, st.min_informative_n)
        return self._uncertainty[proxy_name]


def add_row(run: RunCda, task: str, row: ParsedRow) -> None:
    """Route one stored sample into the run's proxies (nothing for a sample of no proxy)."""
    add_numbers(run, task, row.dataset, row.metric_key, row.key, row.slice_dim, row.target, row.values)


def add_numbers(run: RunCda, task: str, dataset: str | None, metric_key: str | None, key: str | None,
                slice_dim: int | None, target: Sequence[float | None], values: Sequence[float | None] | None) -> None:
    """``add_row`` of a sample's fields as its parsed row holds them."""
    hits = proxies_for(run.family, task, dataset, metric_key)
    if not hits:
        return
    gt = target[0] if target else None
    pred = None
    if values is not None and len(values) == family_spec(run.family).arity and values[0] is not None:
        pred = float(values[0])
    m = _KEY.match(key or "")
    image = Path(m["image"]).name if m else None  # upstream: os.path.basename(doc["image_file"])
    for proxy in hits:
        s = make_sample(proxy, dataset, metric_key, gt, pred, image,
                        int(m["dim"]) if m else slice_dim, int(m["idx"]) if m else None)
        if s is not None:
            run.add(s)


def _enters(family: str, task: str, dataset: str | None, metric_key: str | None) -> bool:
    return bool(proxies_for(family, task, dataset, metric_key))


def parse_file(store: StoreInfo) -> Path | None:
    """The parse file the report read a store's scores from; None when they were scored in memory."""
    source = store.source
    if source.startswith(f"{JUDGED_DIR}/"):
        return store.ref.folder / source
    if source.startswith(PARSED):
        return store.ref.folder / PARSED
    return None


@dataclass
class Analysis:
    """The CDA of a load: per family the runs (sorted by label), and what could not be included."""

    runs: dict[str, list[RunCda]]
    notes: list[str]

    @property
    def empty(self) -> bool:
        return not any(r.samples for runs in self.runs.values() for r in runs)


def analyse(loaded: Loaded) -> Analysis:
    """The CDA of every run of a load: the proxy tasks' samples that the report kept (after the T/L filter), with
    their stored values: a strict parse's as the load read them from parsed.jsonl (``cda_rows``), any other's read
    from the store's parse file, one store at a time."""
    import polars as pl  # the report extra; summarize has it loaded already

    notes: list[str] = []
    out: dict[str, list[RunCda]] = {}
    for fam in proxy_families():
        frame = loaded.samples.get(fam)
        stores = sorted((s for s in loaded.stores if s.ref.family == fam and is_proxy_task(fam, s.ref.task)),
                        key=lambda s: (s.ref.label, s.ref.task))
        if frame is None or not stores:
            continue
        kept_frame = frame.filter(pl.col("store").is_in([s.id for s in stores])).select("store", "index")
        kept: dict[int, set[int]] = {}
        for sid, idx in kept_frame.group_by("store").agg(pl.col("index")).iter_rows():
            kept[sid] = set(idx)
        held = held_proxy_rows(frame, stores, partial(_enters, fam))
        runs: dict[str, RunCda] = {}
        for s in stores:
            path = parse_file(s)
            if path is None or not path.is_file():
                notes.append(f"CDA: store {s.ref.folder} was scored in memory, not from its parse file; run "
                             "`medvision-bm parse` to include it")
                continue
            if s.id in held:  # its parsed.jsonl's rows as load read them: only those that enter a proxy
                run = runs.setdefault(s.ref.label, RunCda(s.ref.label, fam))
                for fields in held[s.id]:
                    add_numbers(run, s.ref.task, *fields)
                continue
            want = kept.get(s.id, set())
            by_index = {r.index: r for r in iter_lines(path, ParsedRow.from_json) if r.index in want}
            if len(by_index) < len(want):
                notes.append(f"CDA: store {s.ref.folder}: {len(want) - len(by_index)} sample(s) scored in memory "
                             "have no row in its parse file and are left out; run `medvision-bm parse`")
            run = runs.setdefault(s.ref.label, RunCda(s.ref.label, fam))
            for i in sorted(by_index):
                add_row(run, s.ref.task, by_index[i])
        out[fam] = [runs[k] for k in sorted(runs) if runs[k].samples]
    return Analysis(out, notes)


# ------------------------------------------------------------------------------------------ upstream's files


def source_suffix(parsed_dir: str) -> str:
    """Upstream's ``cda_config.source_suffix``: nothing for ``parsed``; else ``_`` + the folder name with every
    character but letters, digits and ``-`` made ``-``, runs of ``-`` collapsed, ends trimmed."""
    if not parsed_dir or parsed_dir == STRICT_PARSED_DIR:
        return ""
    cleaned = "".join(c if (c.isalnum() or c == "-") else "-" for c in parsed_dir)
    while "--" in cleaned:
        cleaned = cleaned.replace("--", "-")
    return "_" + cleaned.strip("-")


def uncertainty_rows(runs: Iterable[RunCda]) -> list[dict[str, object]]:
    """The rows of ``summary_CDA_uncertainty*.json``: per run, per proxy in order of its first parsed sample."""
    rows = []
    for run in runs:
        for name in run.paired:
            u = run.uncertainty(name)
            assert u is not None
            rows.append({"model": run.label, "proxy": name, "statistic": u.statistic, "n": u.n,
                         "n_clusters": u.n_clusters, "point_estimate": u.point_estimate, "ci_lower": u.ci_lower,
                         "ci_upper": u.ci_upper, "p_kappa_gt_zero": u.p_kappa_gt_zero, "low_n": u.low_n,
                         "n_boot_valid": u.n_boot_valid})
    return rows


def uncertainty_file(runs: Iterable[RunCda]) -> dict[str, object]:
    st = settings()
    return {"n_boot": st.n_boot, "seed": st.seed, "ci_method": cs.CI_METHOD, "p_method": cs.P_METHOD,
            "cluster_note": cs.CLUSTER_NOTE, "rows": uncertainty_rows(runs)}


def _dump(obj: object) -> str:
    """As upstream's ``json.dump(convert_numpy_to_python(x), f, indent=2)``: insertion order, NaN spelled ``NaN``."""
    return json.dumps(obj, indent=2)


def _scalar(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return json.dumps(v)  # repr, NaN, Infinity: the C float encoder
    if isinstance(v, int):
        return str(v)
    return json.dumps(v)


def values_text(samples: Sequence[Sample]) -> str:
    """``summary_values_CDA_Task*.json``: the text ``json.dump(records, f, indent=2)`` writes, record by record
    (the indented encoder runs in Python; this is several times faster on a large run)."""
    if not samples:
        return "[]"
    recs = []
    for s in samples:
        body = ",\n".join(f"    {json.dumps(k)}: {_scalar(v)}" for k, v in s.to_upstream().items())
        recs.append("  {\n" + body + "\n  }")
    return "[\n" + ",\n".join(recs) + "\n]"


def _num(x: float | None, prec: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{float(x):.{prec}f}"


def _pval(p: float | None) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


@dataclass(frozen=True)
class TableRow:
    """One model row of a proxy's decision-agreement table (upstream's ``build_CDA_report.agreement_section``)."""

    model: str
    accuracy: float
    accuracy_cov: float
    kappa: float
    wkappa: float | None
    ci_lower: float | None
    ci_upper: float | None
    p: float | None
    n_parsed: int
    n_total: int
    low_n: bool

    def cells(self) -> list[str]:
        ci = "—" if self.ci_lower is None else f"[{_num(self.ci_lower)}, {_num(self.ci_upper)}]"
        return [self.model, _num(self.accuracy), _num(self.accuracy_cov), _num(self.kappa), _num(self.wkappa), ci,
                _pval(self.p), f"{self.n_parsed}{' ⚠' if self.low_n else ''}", str(self.n_total)]


TABLE_HEADERS = ["Model", "Acc", "AccCov", "κ", "wκ", "95% CI", "p", "Nparsed", "Ntotal"]


def table_rows(analysis: Analysis, proxy: Proxy) -> list[TableRow]:
    rows = []
    for run in analysis.runs.get(proxy.family, []):
        g = run.overall.get(proxy.name)
        if g is None:
            continue
        a = g.agreement()
        u = run.uncertainty(proxy.name)
        rows.append(TableRow(run.label, a.accuracy, a.accuracy_coverage_adjusted, a.cohen_kappa, a.weighted_kappa,
                             u.ci_lower if u else None, u.ci_upper if u else None, u.p_kappa_gt_zero if u else None,
                             a.n_parsed, a.n_total, bool(u and u.low_n)))
    return rows


def datasets_of(analysis: Analysis, proxy: Proxy) -> list[str]:
    out: set[str] = set()
    for run in analysis.runs.get(proxy.family, []):
        out |= {k.partition(" @ ")[2] for k, g in run.by_dataset.items() if g.proxy.name == proxy.name}
    return sorted(d for d in out if d)


def report_markdown(analysis: Analysis, parsed_dir: str, parse_text: str, results_dir: str,
                    filtered: dict[str, bool]) -> str:
    """``CDA_REPORT<source>.md`` in the shape of upstream's ``build_CDA_report.py`` (its tables row for row)."""
    st = settings()

    def note(fam: str) -> str:
        if family_spec(fam).axes:
            return "filtered (multi-cluster slices excluded)" if filtered.get(fam) else "unfiltered"
        return "unfiltered (this task publishes no filtered artifacts: its datasets ship no exclusion list)"

    lines = ["# Clinical Decision Agreement — Results",
             "\nGenerated by `medvision-bm summarize`. Do not edit by hand: it is overwritten on every summary.",
             "\nDoes the model's measurement error change the clinical decision? Each measurement is mapped through a "
             "published cutoff table into a category, and the model's category is compared with the reference "
             "category.",
             "\n## Provenance\n", "| Input | Value |", "|---|---|",
             f"| Parsed source | `{parsed_dir}/` — {parse_text} |"]
    for fam in proxy_families():
        n = len(analysis.runs.get(fam, []))
        lines.append(f"| {family_spec(fam).short} results | `{results_dir}` — {note(fam)}; {n} run(s) |")
    lines += [f"| Uncertainty | {st.n_boot} bootstrap resamples, seed {st.seed}, resampling whole imaging volumes |",
              "\n## Reading these tables\n",
              "- **Acc** — agreement on parsed samples. **AccCov** — the same with unparseable predictions counted as "
              "wrong; the gap between them is coverage.\n"
              "- **κ / wκ** — Cohen's kappa and quadratic-weighted kappa (ordinal proxies only). 0 means no better "
              "than chance at the same marginals.\n"
              "- **95% CI / p** — percentile bootstrap over whole imaging volumes, and a one-sided test of κ > 0 "
              "inverted from the same resamples.\n"
              f"- **⚠** on `Nparsed` marks fewer than {st.min_informative_n} scored records: the statistic is "
              "arithmetically valid but practically meaningless.\n"
              "- The decision-flip rate is omitted here because it is exactly 1 − Acc.\n"
              "- κ is **not comparable across proxies** — it depends on how close the cohort's values sit to a "
              "cutoff. Compare models within a table.",
              "\n## Decision agreement\n",
              "Category of the prediction vs category of the ground-truth measurement. Both sides pass through the "
              "same cutoff table, so any disagreement is caused by measurement error alone."]
    for proxy in proxies():
        rows = table_rows(analysis, proxy)
        if not rows:
            continue
        lines += [f"\n### {proxy.name}", f"\n_Data: {', '.join(datasets_of(analysis, proxy)) or '—'}_\n",
                  "| " + " | ".join(TABLE_HEADERS) + " |", "|" + "|".join("---" for _ in TABLE_HEADERS) + "|"]
        lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_files(out: Path, analysis: Analysis, parsed_dir: str, parse_text: str, results_dir: str,
                tl_filtered: bool) -> list[str]:
    """Upstream's CDA files under ``out`` (the summary's ``upstream/`` folder): per run
    ``<TL|AD>/<run>/<parsed dir>/summary_{metrics,values}_CDA_Task[_filtered].json``, per family
    ``summary_CDA_task<source>[_filtered]_canonical.txt`` and ``summary_CDA_uncertainty<source>[_filtered].json``,
    and ``CDA/CDA_REPORT<source>.md``; returns their paths relative to ``out``."""
    written: list[str] = []
    src = source_suffix(parsed_dir)

    def put(rel: str, text: str) -> None:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
        written.append(rel)

    filtered = {fam: tl_filtered and family_spec(fam).axes for fam in proxy_families()}
    for fam, runs in analysis.runs.items():
        if not runs:
            continue
        flt = "_filtered" if filtered[fam] else ""
        folder = family_spec(fam).upstream_folder
        for run in runs:
            base = f"{folder}/{run.label.replace('/', '_')}/{parsed_dir}"
            put(f"{base}/{VALUES_FILE}{flt}.json", values_text(run.samples))
            put(f"{base}/{METRICS_FILE}{flt}.json", _dump(run.metrics()))
        put(f"{folder}/summary_CDA_task{src}{flt}_canonical.txt",
            canonical_text([(r.label, r.metrics()) for r in runs]))
        put(f"{folder}/summary_CDA_uncertainty{src}{flt}.json", _dump(uncertainty_file(runs)))
    if not analysis.empty:
        put(f"CDA/CDA_REPORT{src}.md", report_markdown(analysis, parsed_dir, parse_text, results_dir, filtered))
    return written


# ------------------------------------------------------------------------------------------ the report's section


def views(analysis: Analysis, level_note: str = "") -> list[View]:
    """One table per proxy: upstream's decision-agreement table."""
    out = []
    st = settings()
    for proxy in proxies():
        rows = table_rows(analysis, proxy)
        if not rows:
            continue
        cuts = ", ".join(f"{c:g}" for c in proxy.cutoffs)
        caption = (f"Data: {', '.join(datasets_of(analysis, proxy)) or '–'}. {proxy.measurement} ({proxy.unit}) "
                   f"through cutoffs {cuts} into {' / '.join(proxy.labels)}; {proxy.rule}. Acc and κ over parsed "
                   "samples; AccCov counts a prediction without a category as wrong; 95% CI and one-sided p of "
                   f"{'wκ' if proxy.ordinal else 'κ'} > 0 from {st.n_boot} bootstrap resamples of whole imaging "
                   f"volumes (seed {st.seed}); ⚠: fewer than {st.min_informative_n} parsed samples. All unitless."
                   + (f" {level_note}" if level_note else ""))
        out.append(View(f"CDA: {proxy.name}", TABLE_HEADERS, [r.cells() for r in rows], caption,
                        [False, *([True] * 8)]))
    return out


def plot_jobs(analysis: Analysis, folder: Path, prefix: str = "cda") -> list[PlotJob]:
    """Per proxy one picture of every run's confusion matrix (reference category by row, predicted by column)."""
    jobs = []
    for proxy in proxies():
        panels = []
        for run in analysis.runs.get(proxy.family, []):
            g = run.overall.get(proxy.name)
            if g is None:
                continue
            a = g.agreement()
            panels.append({"title": f"{run.label} (n={a.n_parsed} of {a.n_total})",
                           "matrix": [list(r) for r in a.confusion]})
        if panels:
            jobs.append(PlotJob("confusion", str(folder / f"{prefix}_{safe_name(proxy.key)}.png"),
                                f"CDA confusion matrices: {proxy.name} (counts of parsed samples)",
                                {"labels": list(proxy.labels), "panels": panels,
                                 "xlabel": "predicted category", "ylabel": "reference category"}))
    return jobs


def summary_rows(analysis: Analysis) -> list[dict[str, object]]:
    """The tables as plain rows for ``summary.json``."""
    out = []
    for proxy in proxies():
        for r in table_rows(analysis, proxy):
            out.append({"proxy": proxy.name, "model": r.model, "accuracy": r.accuracy,
                        "accuracy_coverage_adjusted": r.accuracy_cov, "cohen_kappa": r.kappa,
                        "weighted_kappa": r.wkappa, "ci_lower": r.ci_lower, "ci_upper": r.ci_upper,
                        "p_kappa_gt_zero": r.p, "n_parsed": r.n_parsed, "n_total": r.n_total, "low_n": r.low_n})
    return out
