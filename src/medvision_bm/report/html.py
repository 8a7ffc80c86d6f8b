"""The static HTML report: one self-contained page (inline CSS, a few lines of JS) linking PNGs and tables by
relative paths, so the folder opens from disk, moves as a whole, and needs no server."""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from medvision_bm.jsontypes import JsonMapping
from medvision_bm.report.browser import SampleCard, Shape
from medvision_bm.report.load import collection_paused
from medvision_bm.report.views import FAMILY_NAMES, View, fmt, is_empty, left_out
from medvision_bm.tasks.metrics import error_names

#: The most characters of one raw answer the report shows (its head and tail); the store keeps the whole answer.
REPORT_ANSWER_CHARS = 20_000


def shown_answer(raw: str, limit: int = REPORT_ANSWER_CHARS) -> str:
    """``raw`` whole when short; else its first and last ``limit // 2`` characters around a note of the cut."""
    if len(raw) <= limit:
        return raw
    half = limit // 2
    return (f"{raw[:half]}\n[... {len(raw) - 2 * half} characters not shown in the report; the sample store has "
            f"the whole answer ...]\n{raw[-half:]}")


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#1d2330;background:#fafbfc}
header{background:#1f3b57;color:#fff;padding:14px 24px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;font-size:13px;opacity:.85}
nav{padding:8px 24px;background:#e8edf3;font-size:14px}nav a{margin-right:14px;color:#1f3b57}
main{padding:8px 24px 40px}section{margin:18px 0 28px}h2{border-bottom:2px solid #1f3b57;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px;margin:6px 0 4px;background:#fff}
th,td{border:1px solid #d5dbe3;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#eef2f7}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}#overview-table td.num .ci{white-space:nowrap}tr.not-comparable td{color:#80868f;background:#f1f2f4}tr.trained-on td{background:#fdecea}td.num .ci{font-size:11px;color:#59606b;white-space:normal}
caption{caption-side:bottom;text-align:left;font-size:12px;color:#555;padding-top:3px}
.notes{background:#fff7e0;border:1px solid #e5c96b;padding:8px 14px;font-size:13px}
.plot{max-width:100%;border:1px solid #d5dbe3;background:#fff;margin:6px 0}
.sample{background:#fff;border:1px solid #d5dbe3;padding:10px 14px;margin:12px 0}
.sample h3{margin:0 0 6px;font-size:15px}.sample .body{display:flex;gap:16px;flex-wrap:wrap}
.sample figure{margin:0}.sample figcaption{font-size:12px;color:#555;max-width:320px}
.slice{image-rendering:pixelated;display:block;width:100%;height:100%;background:#000}
.frame{position:relative;border:1px solid #999;background:#000}
.overlay{position:absolute;left:0;top:0;width:100%;height:100%;overflow:visible}
.overlay rect,.overlay line{fill:none;stroke-width:2px;vector-effect:non-scaling-stroke}
.overlay .answer{stroke-dasharray:5 3}.overlay circle{stroke:none}
.legend{list-style:none;padding:0;margin:4px 0 0;font-size:12px;max-width:360px}
.legend li{display:inline-block;margin-right:10px}
.legend svg{vertical-align:middle;margin-right:3px}
pre{white-space:pre-wrap;word-break:break-word;font-size:12px;background:#f3f5f8;padding:6px;margin:0;max-width:760px}
.muted{color:#666;font-size:12px}details>summary{cursor:pointer;font-weight:600;margin:6px 0}
"""

SCRIPT = """
document.querySelectorAll('img').forEach(function (img) {
  function mark() { img.dataset.loaded = img.naturalWidth > 0 ? 'yes' : 'no'; }
  if (img.complete) { mark(); } else { img.addEventListener('load', mark); img.addEventListener('error', mark); }
});
var pick = document.getElementById('sample-filter');
var which = document.getElementById('sample-kind');
function filterSamples() {
  var task = pick ? pick.value : '', kind = which ? which.value : '';
  document.querySelectorAll('.sample').forEach(function (card) {
    card.hidden = !((task === '' || card.dataset.task === task) && (kind === '' || card.dataset[kind] === '1'));
  });
}
if (pick) { pick.addEventListener('change', filterSamples); }
if (which) { which.addEventListener('change', filterSamples); }
"""


def esc(text: object) -> str:
    """``text`` as HTML text (``html.escape`` with quotes), returned as it is when it holds nothing to escape."""
    out = text if type(text) is str else str(text)
    if "&" in out or "<" in out or ">" in out or '"' in out or "'" in out:
        return html.escape(out, quote=True)
    return out


@dataclass
class FamilySection:
    """What the report shows for one family: upstream's tables first, then ours."""

    family: str
    leaderboards: list[View]
    leaderboard_plot: str | None
    groups: View
    tasks: View
    random_box: View | None = None
    box_size: View | None = None
    box_size_plot: str | None = None
    error_plots: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    extra: list[View] = field(default_factory=list)  # ours after the per-task table (the T/L filter's counts)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


#: A numeric cell's value, then its interval (or the one-sample mark), then anything after it (``(n=34)``).
_VALUE_CI = re.compile(r"^(.*?) (\[[^\]]*\]|\(n=1: no CI\))(.*)$", re.S)
#: ... or a value and a note in parentheses after it (``16 (IoU 0.05775)``, ``– (0 successes)``).
_VALUE_NOTE = re.compile(r"^(\S+(?: [†*])?) (\([^()]*\))()$", re.S)


def breakable(text: object) -> str:
    """``text`` escaped, with a line-break opportunity after each ``_`` and ``/`` and before each ``[``: long task
    names and statistic keys (``Acc@IoU[0.50:0.95]``) wrap instead of widening their column."""
    return esc(text).replace("_", "_<wbr>").replace("/", "/<wbr>").replace("[", "<wbr>[")


def _text_td(text: str) -> str:
    return f"<td>{breakable(text)}</td>"


def _num_td(text: str) -> str:
    return f'<td class="num">{num_cell(text)}</td>'


def header_cell(text: object) -> str:
    """A column header: ``breakable``, and also between the words of a key (``Success<wbr>Rate``), after ``@`` and
    before a comparison (``Acc@<wbr>IoU<wbr>&gt;=0.75``), so that no header is wider than its column's values."""
    out = re.sub(r"([a-z]{2,})([A-Z][a-z])", r"\1<wbr>\2", breakable(text))
    return out.replace("@", "@<wbr>").replace("&gt;", "<wbr>&gt;").replace("&lt;", "<wbr>&lt;")


def num_cell(text: str) -> str:
    """A numeric cell: the value on its line, its interval (and what follows it) or its note in parentheses on lines
    below in smaller type, so that a column is as wide as an interval, not as a value and its interval side by
    side."""
    safe = esc(text)  # escaping touches no space, bracket, parenthesis or mark the patterns read: escaped once
    found = _VALUE_CI.match(safe) or _VALUE_NOTE.match(safe)
    if found is None:
        return safe
    value, ci, rest = found.groups()
    out = f'{value}<br><span class="ci">{ci}</span>'
    return out + (f'<br><span class="ci">{rest.strip()}</span>' if rest.strip() else "")


def table(view: View, css_id: str = "") -> str:
    """``view`` as a table, or, when it holds no value, the one line saying why in its place."""
    ident = f' id="{esc(css_id)}"' if css_id else ""
    if is_empty(view):
        return f'<p class="muted left-out"{ident} data-title="{esc(view.title)}">{esc(left_out(view))}</p>'
    head = "".join(f"<th>{header_cell(h)}</th>" for h in view.headers)
    rows = view.rows
    width = max((len(row) for row in rows), default=0)
    cell_of = [_num_td if i < len(view.numeric) and view.numeric[i] else _text_td for i in range(width)]
    cells = _cells_by_column(rows, cell_of, width)
    classes = view.row_classes
    if classes:
        body = "".join([(f'<tr class="{esc(classes[n])}">' if n < len(classes) and classes[n] else "<tr>")
                        + row_cells + "</tr>" for n, row_cells in enumerate(cells)])
    else:
        body = "<tr>" + "</tr><tr>".join(cells) + "</tr>" if cells else ""
    caption = f"<caption>{esc(view.caption)}</caption>" if view.caption else ""
    return (f'<div class="scroll"><table{ident} data-title="{esc(view.title)}">{caption}<thead><tr>{head}</tr>'
            f"</thead><tbody>{body}</tbody></table></div>")


_TEXT_ONLY = {str}


def _cells_by_column(rows: Sequence[Sequence[object]], cell_of: Sequence[Callable[[str], str]],
                     width: int) -> list[str]:
    """Each row's cells as HTML (``cell_of``: per column how a cell is written), made a column at a time where every
    row has every column and every cell is text (a table's usual rows: each distinct text of a column written
    once), else a row at a time."""
    if width and all(len(row) == width for row in rows):
        columns = list(zip(*rows))
        if all(set(map(type, col)) == _TEXT_ONLY for col in columns):
            return list(map("".join, zip(*[_column_cells(col, td) for td, col in zip(cell_of, columns)])))
    return ["".join([td(c if type(c) is str else str(c)) for td, c in zip(cell_of, row)]) for row in rows]


def _column_cells(column: Sequence[str], cell: Callable[[str], str]) -> list[str]:
    """``cell`` of each text of a column, each distinct text written once."""
    written = {text: cell(text) for text in set(column)}
    return list(map(written.__getitem__, column))


def _img(src: str, alt: str, cls: str = "plot") -> str:
    return f'<img class="{cls}" src="{esc(src)}" alt="{esc(alt)}">'


def family_section(sec: FamilySection) -> str:
    fam = sec.family
    parts = [f'<section id="family-{esc(fam)}" class="family"><h2>{esc(FAMILY_NAMES[fam])}</h2>',
             "<h3>Upstream's summary rows (across label groups)</h3>"]
    for v in sec.leaderboards:
        agg = v.title.split(": ", 1)[-1]
        parts += [f"<h4>{esc(v.title)}</h4>", table(v, f"leaderboard-{fam}-{slug(agg)}")]
    if not sec.leaderboards:
        parts.append('<p class="muted">No run has samples in upstream\'s summary rows.</p>')
    if sec.leaderboard_plot:
        parts.append(_img(sec.leaderboard_plot, f"upstream's summary rows as bars with CI whiskers, {fam}"))
    parts += [f"<details><summary>{esc(sec.groups.title)}</summary>{table(sec.groups, f'groups-{fam}')}</details>",
              f"<h3>{esc(sec.tasks.title)}</h3>", table(sec.tasks, f"tasks-{fam}")]
    for v in sec.extra:
        parts += [f"<h3>{esc(v.title)}</h3>", table(v, f"{slug(v.title)}")]
    if sec.random_box is not None:
        parts += [f"<h3>{esc(sec.random_box.title)}</h3>", table(sec.random_box, "random-box")]
    if sec.box_size is not None:
        parts.append(f"<h3>{esc(sec.box_size.title)}</h3>")
        if sec.box_size_plot:
            parts.append(_img(sec.box_size_plot, "IoU against box size"))
        parts.append(table(sec.box_size, "box-size"))
    if sec.error_plots:
        parts.append("<h3>Error distributions per task</h3>")
        parts += [_img(src, f"per-task error distributions, {fam}") for src in sec.error_plots]
    if sec.files:
        parts.append('<p class="muted">Tables: ' + " · ".join(f'<a href="{esc(f)}">{esc(f)}</a>' for f in sec.files)
                     + "</p>")
    parts.append("</section>")
    return "\n".join(parts)


def _numbers(values: Sequence[float] | None) -> str:
    """Numbers as the report writes them (digits, signs, points, exponents, commas: nothing HTML escapes)."""
    return "–" if values is None else ", ".join([fmt(float(v)) for v in values])


def _number_text(value: object) -> str:
    """``esc(fmt(value))``, without the escape where ``fmt`` writes a number or no value (nothing HTML escapes)."""
    return fmt(value) if value is None or type(value) in (float, int) else esc(fmt(value))


#: The most distinct values the cards remember as escaped (run labels, statuses, parsers repeat on every card).
_CELL_CACHE = 1 << 16


@functools.lru_cache(maxsize=_CELL_CACHE, typed=True)
def _esc_once(text: object) -> str:
    """``esc`` of a value that repeats on many cards (a run label, a status, a parser)."""
    return esc(text)


#: The target's colour and the runs' colours in order: Okabe and Ito's palette, told apart with colour-vision
#: deficiencies; the target is also drawn solid and the answers dashed.
TARGET_COLOUR = "#F0E442"
RUN_COLOURS = ("#56B4E9", "#E69F00", "#CC79A7", "#009E73", "#D55E00", "#0072B2", "#FFFFFF")
#: The largest side a slice is shown at (CSS pixels; a smaller slice is scaled up to it, keeping its aspect).
SLICE_MAX_PX = 360


def shown_size(width: int, height: int, cap: int = SLICE_MAX_PX) -> tuple[int, int]:
    """The slice's on-page size: its true aspect, its longer side ``cap`` pixels."""
    scale = cap / max(width, height, 1)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _shape_svg(shape: Shape, colour: str, cls: str, radius: float) -> str:
    title = f"<title>{esc(shape.name)}</title>"
    c = shape.coords
    if shape.kind == "box":
        return (f'<rect class="{cls}" stroke="{colour}" x="{c[0]:.3f}" y="{c[1]:.3f}" width="{c[2] - c[0]:.3f}" '
                f'height="{c[3] - c[1]:.3f}">{title}</rect>')
    if shape.kind == "segment":
        return (f'<line class="{cls}" stroke="{colour}" x1="{c[0]:.3f}" y1="{c[1]:.3f}" x2="{c[2]:.3f}" '
                f'y2="{c[3]:.3f}">{title}</line>')
    return f'<circle class="{cls}" fill="{colour}" cx="{c[0]:.3f}" cy="{c[1]:.3f}" r="{radius:.3f}">{title}</circle>'


def _overlay(card: SampleCard, colours: dict[str, str]) -> str:
    """The target and every run's parsed answer over the slice, in the slice's own pixels."""
    if card.image_size is None:
        return ""
    w, h = card.image_size
    radius = max(w, h) / 90
    parts = [_shape_svg(s, TARGET_COLOUR, "target", radius) for s in card.target_shapes]
    for a in card.answers:
        parts += [_shape_svg(s, colours[a.label], "answer", radius) for s in a.shapes]
    return (f'<svg class="overlay" viewBox="0 0 {w} {h}" preserveAspectRatio="none" '
            f'aria-label="target and answers">{"".join(parts)}</svg>')


def _legend(card: SampleCard, colours: dict[str, str]) -> str:
    def swatch(colour: str, dashed: bool) -> str:
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        return (f'<svg width="22" height="8" aria-hidden="true"><line x1="1" y1="4" x2="21" y2="4" stroke="{colour}" '
                f'stroke-width="3"{dash}/></svg>')

    items = [f'<li class="legend-target">{swatch(TARGET_COLOUR, False)}target</li>'] if card.target_shapes else []
    for a in card.answers:
        what = "answer" if a.shapes else "answer not drawn"
        items.append(f'<li class="legend-run">{swatch(colours[a.label], True)}{esc(a.label)} ({what})</li>')
    return f'<ul class="legend">{"".join(items)}</ul>' if items else ""


def doc_line(card: SampleCard) -> str:
    """Dataset, modality, plane, label or measured structure, image and slice, group: the fields the doc has."""
    doc = card.doc
    found = doc.get("meta")
    meta: JsonMapping = found if isinstance(found, Mapping) else {}
    points = meta.get("points") or ()
    structure = meta.get("label_name") or doc.get("label_name") or meta.get("biometrics_name") or \
        " – ".join(str(p) for p in (points if isinstance(points, Iterable) else ()))
    image = doc.get("image_file") or doc.get("image")
    where = f"{image} slice {doc.get('slice_idx')} on axis {doc.get('slice_dim')}" if image else ""
    fields = [doc.get("dataset_name") or doc.get("dataset"), meta.get("image_modality") or doc.get("modality"),
              doc.get("plane"), structure, where]
    text = " · ".join(esc(f) for f in fields if f not in (None, ""))
    return text + (f" · group <code>{esc(card.group)}</code>" if card.group else "")


def sample_card(card: SampleCard, colours: dict[str, str] | None = None) -> str:
    colours = colours or {a.label: RUN_COLOURS[i % len(RUN_COLOURS)] for i, a in enumerate(card.answers)}
    image = '<div class="muted">(no image)</div>'
    if card.image:
        w, h = shown_size(*(card.image_size or (1, 1)))
        image = (f'<div class="frame" style="width:{w}px;height:{h}px">{_img(card.image, f"slice {card.key}", "slice")}'
                 f"{_overlay(card, colours)}</div>{_legend(card, colours)}")
    info = doc_line(card)
    metrics = list(card.answers[0].metrics) if card.answers else []
    names = [f"{m} ({card.unit})" if m in error_names() else m for m in metrics]
    head = "".join(f"<th>{esc(h)}</th>" for h in ["Run", "Status", "Parser", "Raw answer", "Parsed", *names])
    rows = []
    for a in card.answers:
        raw = "<span class=\"muted\">(no answer stored)</span>" if a.raw is None else f"<pre>{esc(shown_answer(a.raw))}</pre>"
        cells = ('<td class="num">' + '</td><td class="num">'.join([_number_text(v) for v in map(a.metrics.get, metrics)])
                 + "</td>") if metrics else ""
        worst = ' <span class="muted">(its worst here)</span>' if a.worst else ""
        rows.append(f'<tr class="answer"><td>{_esc_once(a.label)}{worst}</td><td>{_esc_once(a.status)}</td>'
                    f"<td>{_esc_once(a.parser)}</td><td>{raw}</td><td>{_numbers(a.values)}</td>{cells}</tr>")
    flags = "".join(f' data-{name}="1"' for name, on in (("failed", card.failed), ("parsefailed", card.parse_failed),
                                                          ("worst", card.worst)) if on)
    note = card.image_note + (f"; {card.overlay_note}" if card.overlay_note else "")
    return (f'<article class="sample" data-task="{esc(card.task)}" data-key="{esc(card.key)}"{flags}>'
            f"<h3>{esc(card.task)} · <code>{esc(card.key)}</code></h3>"
            f'<div class="body"><figure>{image}<figcaption>{esc(note)}</figcaption></figure>'
            f'<div><p class="muted">{info}</p><p><b>Target</b> ({esc(card.unit)}): <span class="target">'
            f"{_numbers(card.target)}</span></p><p><b>Prompt</b> (system prompt not shown):</p>"
            f'<pre class="prompt">{esc(card.prompt)}</pre>'
            f"</div></div><table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            f'<p class="muted">Per-sample metrics are upstream\'s: IoU, F1, Precision, Recall count a failure as 0; '
            f"MAE, MRE, nMAE are empty for a failure; MRE, nMAE and the overlap metrics are unitless.</p></article>")


def overview_section(views: Sequence[View]) -> str:
    """The first screen: the overview table, its caption, and each breakdown folded below it."""
    first, *rest = views
    parts = [f'<section id="overview"><h2>{esc(first.title)}</h2>', table(first, "overview-table")]
    parts += [f"<details><summary>{esc(v.title)}</summary>{table(v, 'breakdown-' + slug(v.title))}</details>"
              for v in rest]
    return "\n".join([*parts, "</section>"])


@collection_paused
def render(*, title: str, meta: Sequence[tuple[str, str]], notes: Sequence[str], sections: Sequence[FamilySection],
           cards: Sequence[SampleCard], browser_note: str, comparisons: Sequence[View], stores: View,
           files: Sequence[str],
           extra: Sequence[tuple[str, str, Sequence[View], Sequence[str | tuple[str, str]]]] = (),
           overview: Sequence[View] = ()) -> str:
    """The report page; ``extra``: further sections after the families, each (id, title, tables, images: a path,
    or (path, alternative text)); ``overview``: the first screen's table, then its breakdowns (folded)."""
    nav = ['<a href="#overview">Overview</a>'] if overview else []
    nav += [f'<a href="#family-{esc(s.family)}">{esc(FAMILY_NAMES[s.family])}</a>' for s in sections]
    nav += [f'<a href="#{esc(ident)}">{esc(head)}</a>' for ident, head, _, _ in extra]
    if comparisons:
        nav.append('<a href="#comparisons">Paired comparisons</a>')
    nav += ['<a href="#samples">Sample browser</a>', '<a href="#runs">Runs</a>', '<a href="#files">Files</a>']
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
           f"<header><h1>{esc(title)}</h1><p>" + " · ".join(f"{esc(k)}: {esc(v)}" for k, v in meta) + "</p></header>",
           "<nav>" + "".join(nav) + "</nav><main>"]
    if overview:
        out.append(overview_section(overview))
    if notes:
        out.append('<section id="notes" class="notes"><b>Notes</b><ul>' + "".join(f"<li>{esc(n)}</li>" for n in notes)
                   + "</ul></section>")
    out += [family_section(s) for s in sections]
    for ident, head, views, images in extra:
        out.append(f'<section id="{esc(ident)}"><h2>{esc(head)}</h2>')
        for v in views:
            out += [f"<h3>{esc(v.title)}</h3>", table(v, slug(v.title))]
        out += [_img(*src) if isinstance(src, tuple) else _img(src, f"{head}: ours against published, CI bars and y = x")
                for src in images]
        out.append("</section>")
    if comparisons:
        out.append('<section id="comparisons"><h2>Paired comparisons</h2>')
        out += [f"<h3>{esc(v.title)}</h3>{table(v)}" for v in comparisons]
        out.append("</section>")
    tasks = sorted({c.task for c in cards})
    options = '<option value="">all tasks</option>' + "".join(f'<option value="{esc(t)}">{esc(t)}</option>'
                                                               for t in tasks)
    kinds = "".join(f'<option value="{v}">{esc(t)}</option>' for v, t in (
        ("", "all samples"), ("failed", "failures (some run has no successful answer)"),
        ("parsefailed", "parse failures"), ("worst", "worst error per run and task")))
    out.append(f'<section id="samples"><h2>Sample browser</h2><p class="muted">{esc(browser_note)}</p>'
               f'<label>Task: <select id="sample-filter">{options}</select></label> '
               f'<label>Show: <select id="sample-kind">{kinds}</select></label>')
    labels = list(dict.fromkeys(a.label for c in cards for a in c.answers))
    colours = {label: RUN_COLOURS[i % len(RUN_COLOURS)] for i, label in enumerate(labels)}
    out += [sample_card(c, colours) for c in cards]
    if not cards:
        out.append('<p class="muted">No samples to show.</p>')
    out.append("</section>")
    out.append(f'<section id="runs"><h2>Runs</h2>{table(stores, "runs-table")}</section>')
    out.append('<section id="files"><h2>Files</h2><ul>' + "".join(f'<li><a href="{esc(f)}">{esc(f)}</a></li>'
                                                                   for f in files) + "</ul></section>")
    out.append(f"</main><script>{SCRIPT}</script>")
    out.append("</body></html>")
    return "\n".join(out)
