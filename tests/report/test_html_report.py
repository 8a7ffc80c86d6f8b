"""The HTML report as a user sees it, in headless Chromium (Debian's `chromium`; CI installs it with apt)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from phantom_runs import run_baseline, run_cli
from scripted import NothingParses

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]

if CHROMIUM is None:
    # on CI a missing browser is an error, not a reason to skip
    pytestmark = pytest.mark.skipif(not os.environ.get("CI"), reason="chromium is not installed "
                                    "(apt-get install -y --no-install-recommends chromium)")


def chromium(*args: str) -> subprocess.CompletedProcess:
    assert CHROMIUM, "chromium is not installed (apt-get install -y --no-install-recommends chromium)"
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=120)


class Dom(HTMLParser):
    """The parts of the rendered DOM a test looks at: tables by id, images, sample cards, links."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[dict[str, str]] = []
        self.samples: list[dict[str, str]] = []
        self.links: list[str] = []
        self.prompts: list[str] = []
        self.answers = 0
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._pre: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(a)
        elif tag == "article" and "sample" in (a.get("class") or ""):
            self.samples.append(a)
        elif tag == "a" and a.get("href"):
            self.links.append(a["href"])
        elif tag == "pre" and "prompt" in (a.get("class") or ""):
            self._pre = []
        elif tag == "tr" and "answer" in (a.get("class") or ""):
            self.answers += 1

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None
        elif tag == "tr" and self._row is not None and self._table:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "pre" and self._pre is not None:
            self.prompts.append("".join(self._pre))
            self._pre = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._pre is not None:
            self._pre.append(data)


def render_dom(index: Path) -> Dom:
    res = chromium("--virtual-time-budget=10000", "--dump-dom", index.as_uri())
    assert res.returncode == 0 and "<html" in res.stdout, res.stderr[-2000:]
    dom = Dom()
    dom.feed(res.stdout)
    return dom


def test_report_renders_leaderboards_plots_and_samples(report_dir: Path, phantom_lists: Path, tmp_path: Path) -> None:
    # the folder opens from anywhere: move it first
    moved = tmp_path / "moved report"
    shutil.copytree(report_dir, moved)
    dom = render_dom(moved / "index.html")
    n_tasks = {f: len(json.loads((phantom_lists / f"tasks_MedVision-Phantom-{f}.json").read_text()))
               for f in ("detect", "TL", "AD")}
    # upstream's rows first: one table per aggregate row, one row per run, units in the headers
    first = {"detect": "all-regions", "TL": "overall", "AD": "distance"}
    for fam in ("detect", "TL", "AD"):
        rows = dom.tables[f"leaderboard-{fam}-{first[fam]}"]
        assert rows[0][:4] == ["Rank", "Run", "Protocol", "Parser"]
        assert rows[1][1] == "oracle" and rows[1][2:4] == ["current", "strict-1"]
        assert {r[1] for r in rows[1:]} == {"oracle", "mean", "random-box"}
        assert len(dom.tables[f"tasks-{fam}"]) == 1 + 3 * n_tasks[fam]
        assert len(dom.tables[f"groups-{fam}"]) > 3
    assert {"leaderboard-detect-anatomy", "leaderboard-AD-angle"} <= set(dom.tables)
    # no detection group of the phantom is a tumor/lesion group of 50 samples: that row is one line, not a table
    assert "leaderboard-detect-t-l" not in dom.tables
    assert '<p class="muted left-out" id="leaderboard-detect-t-l"' in (moved / "index.html").read_text()
    assert "avgMAE (relative)" in dom.tables["leaderboard-detect-all-regions"][0]
    assert "avgMAE (mm)" in dom.tables["leaderboard-TL-overall"][0]
    assert "avgMAE (mm)" in dom.tables["leaderboard-AD-distance"][0]
    assert "avgMAE (degrees)" in dom.tables["leaderboard-AD-angle"][0]
    assert len(dom.tables["random-box"]) == 1 + 3 * (n_tasks["detect"] + 1)
    assert len(dom.tables["runs-table"]) == 1 + 3 * sum(n_tasks.values())
    # every image (plots and slices) actually loaded; per task two drawn samples and the two worst errors (a
    # sample can be both)
    n_cards = len(dom.samples)
    assert 2 * sum(n_tasks.values()) < n_cards <= 4 * sum(n_tasks.values())
    # leaderboards, box size, error distributions, the CDA confusion matrices (SNA: PhantomXR's L_2_5 angle), slices
    assert len(dom.images) == 3 + 1 + 3 + 1 + n_cards
    assert len(dom.tables["cda-sna-maxillary-position"]) == 1 + 3  # header + the three baselines
    assert all(img.get("data-loaded") == "yes" for img in dom.images), [i["src"] for i in dom.images
                                                                         if i.get("data-loaded") != "yes"]
    slices = [i for i in dom.images if i.get("class") == "slice"]
    assert len(slices) == n_cards and {s["src"].split("/")[0] for s in slices} == {"slices"}
    # the sample browser: samples of every task, three runs each, the prompt as sent (upstream's wording)
    assert len({s["data-task"] for s in dom.samples}) == sum(n_tasks.values())
    assert dom.answers == 3 * n_cards
    assert len(dom.prompts) == n_cards and all("Format requirement" in p and "<answer>" in p for p in dom.prompts)
    # only relative links, all of them to files in the folder
    html = (moved / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    external = [r for r in refs if r.startswith(("/", "file:", "http:", "https:", "//"))]
    assert not external
    assert all((moved / r).is_file() for r in refs if not r.startswith("#"))
    assert {"leaderboard_detect.csv", "groups_detect.csv", "summary.json", "summary.md"} <= set(dom.links)


def test_report_screenshot_shows_header_and_plot(report_dir: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    res = chromium("--window-size=1280,1600", "--virtual-time-budget=10000", f"--screenshot={shot}",
                   (report_dir / "index.html").as_uri())
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 1600)
    px = np.asarray(img).astype(int)
    assert np.abs(px[8, 8] - np.array([31, 59, 87])).max() <= 3  # the report's header bar
    bars = (np.abs(px - np.array([76, 120, 168])).max(axis=2) < 8).sum()
    assert bars > 2000, "the leaderboard bar plot is not visible in the first screen"
    assert len(np.unique(px.reshape(-1, 3), axis=0)) > 100  # text, tables and plots, not a blank page



#: Appended to a copy of the page: measures the layout as the browser drew it, into the DOM the test reads back.
MEASURE = """<script>
window.addEventListener('load', function () {
  var out = {page: document.documentElement.scrollWidth, view: window.innerWidth, plots: [], tables: []};
  document.querySelectorAll('img.plot').forEach(function (img) {
    out.plots.push({src: img.getAttribute('src'), natural: img.naturalWidth, shown: img.clientWidth});
  });
  document.querySelectorAll('table').forEach(function (t) {
    var box = t.parentElement;
    out.tables.push({id: t.id, right: t.getBoundingClientRect().right, scrolls: box.className === 'scroll',
                     box_right: box.getBoundingClientRect().right});
  });
  var pre = document.createElement('pre'); pre.id = 'layout-measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_plots_show_at_a_size_whose_text_reads_and_no_table_runs_off_the_page(report_dir: Path,
                                                                                tmp_path: Path) -> None:
    """The six-panel A/D leaderboard plot was 2,034 px wide and shown at 1,232 (its 10-point text at
    6 points); wide tables must scroll inside the page, never widen it. The text inside each plot is checked by
    tests/report/test_plot_layout.py; here, that the page shows every plot at its own size (scale >= 0.95)."""
    m = probe(report_dir, tmp_path / "measured", MEASURE, "layout-measure", "1280,1600")
    assert m["page"] <= m["view"], f"the page is {m['page']} px wide in a {m['view']} px window"
    assert len(m["plots"]) == 8
    for plot in m["plots"]:
        assert plot["natural"] > 0 and plot["shown"] >= 0.95 * plot["natural"], plot
    for t in m["tables"]:  # a table fits, or scrolls inside a box that fits
        assert (t["box_right"] if t["scrolls"] else t["right"]) <= m["view"] + 1, t


def probe(report: Path, page: Path, script: str, pre_id: str, window: str) -> dict:
    """What ``script`` (injected into a copy of ``report`` at ``page``) measures in headless Chromium at ``window``
    (``W,H``) and leaves as JSON in ``<pre id=pre_id>``."""
    shutil.copytree(report, page)
    index = page / "index.html"
    index.write_text(index.read_text().replace("</body>", script + "</body>"))
    res = chromium(f"--window-size={window}", "--virtual-time-budget=10000", "--dump-dom", index.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    found = re.search(rf'<pre id="{pre_id}">(.*?)</pre>', res.stdout, re.S)
    assert found, res.stdout[-2000:]
    import html as html_lib

    return json.loads(html_lib.unescape(found.group(1)))


#: Opens every folded table, then measures each table's width and right edge and, for the cells holding an
#: interval, whether the interval sits below the value.
FIT_PROBE = """<script>
window.addEventListener('load', function () {
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var out = {view: window.innerWidth, tables: [], cis: 0, ci_below: 0};
  document.querySelectorAll('table').forEach(function (t) {
    var r = t.getBoundingClientRect();
    out.tables.push({id: t.id || t.dataset.title || '', width: r.width, right: r.right});
  });
  document.querySelectorAll('td.num .ci').forEach(function (ci) {
    var range = document.createRange(); range.selectNodeContents(ci.parentElement.firstChild);
    out.cis += 1;
    if (ci.getBoundingClientRect().top >= range.getBoundingClientRect().bottom - 1) { out.ci_below += 1; }
  });
  var pre = document.createElement('pre'); pre.id = 'fit-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def fit_measure(report: Path, tmp_path: Path) -> dict:
    """FIT_PROBE's measures of a copy of ``report`` drawn at 1,400 px."""
    m = probe(report, tmp_path / "fit", FIT_PROBE, "fit-probe", "1400,1000")
    assert m["view"] == 1400
    wide = [t for t in m["tables"] if t["width"] > 1400 or t["right"] > 1400]
    assert not wide, wide
    assert m["cis"] > 100 and m["ci_below"] == m["cis"], m
    return m


def test_every_table_fits_a_1400_pixel_window_with_intervals_under_their_values(report_dir: Path,
                                                                                 tmp_path: Path) -> None:
    """Wide tables lost their right-hand columns behind a scroll bar: at 1,400 px no table (folded ones opened) is
    wider than the window or ends beyond it, because each interval is drawn under its value."""
    m = fit_measure(report_dir, tmp_path)
    ids = {t["id"] for t in m["tables"]}
    assert {"tasks-detect", "leaderboard-detect-all-regions", "groups-detect", "overview-table", "runs-table"} <= ids


def test_tables_still_fit_beside_a_small_run_whose_answers_all_failed(phantom_dir: Path, phantom_lists: Path,
                                                                       results_copy: Path, tmp_path: Path) -> None:
    """A run on fewer samples adds the leaderboards' Ranked on column, and a run without a success the
    "– (0 successes)" cells: the widest tables the report makes."""
    out = run_baseline("oracle", "detect", phantom_dir, results_copy / "MedVision-Phantom-detect", "--sample_limit",
                       "4", "--model_name", "nothing-parses", lists=phantom_lists,
                       backend=lambda cfg, data: NothingParses())
    assert all(o.state == "done" for o in out)
    report = tmp_path / "report"
    res = run_cli("summarize", "--results_dir", str(results_copy), "--output_dir", str(report), "--no_plots",
                  "--n_boot", "100", "--browse_per_task", "0")
    assert res.returncode == 0, res.stderr
    html = (report / "index.html").read_text()
    board = html[html.index('id="leaderboard-detect-all-regions"'):]
    board = board[:board.index("</table>")]
    assert "<th>Ranked on</th>" in board and "(0 successes)" in board
    fit_measure(report, tmp_path)
