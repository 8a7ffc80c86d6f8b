"""The sample browser in headless Chromium: the target and every run's parsed answer drawn over the slice for each
family, with a legend in colour-blind-safe colours; the failure, parse-failure and worst-error filters; slices at
their true aspect under a size cap; the doc line without empty fields."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_html_report import CHROMIUM, chromium

from medvision_bm.report.html import RUN_COLOURS, SLICE_MAX_PX, TARGET_COLOUR
from phantom_runs import run_baseline, run_cli
from scripted import ScriptedBackend

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

#: Appended to a copy of the page: per filter choice, the keys of the cards left visible; per card, the slice's
#: natural and drawn sizes; written into the DOM as JSON for the test to read back.
PROBE = """<script>
window.addEventListener('load', function () {
  var out = {kinds: {}, frames: []};
  var which = document.getElementById('sample-kind');
  ['', 'failed', 'parsefailed', 'worst'].forEach(function (kind) {
    which.value = kind; which.dispatchEvent(new Event('change'));
    out.kinds[kind] = Array.from(document.querySelectorAll('.sample')).filter(function (c) { return !c.hidden; })
      .map(function (c) { return c.dataset.key + '|' + c.dataset.task; });
  });
  which.value = ''; which.dispatchEvent(new Event('change'));
  document.querySelectorAll('.sample .frame').forEach(function (f) {
    var img = f.querySelector('img');
    out.frames.push({natural: [img.naturalWidth, img.naturalHeight], shown: [img.clientWidth, img.clientHeight]});
  });
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def probe(index: Path, tmp_path: Path) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    page = tmp_path / "probe.html"
    page.write_text(index.read_text().replace("</body>", PROBE + "</body>"))
    (tmp_path / "slices").symlink_to(index.parent / "slices", target_is_directory=True)
    res = chromium("--virtual-time-budget=10000", "--dump-dom", page.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', res.stdout, re.S)
    assert found, res.stdout[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def cards(html: str) -> list[str]:
    return re.findall(r'<article class="sample".*?</article>', html, re.S)


def ident(card: str) -> str:
    """``key|task`` of a card, as the probe writes it."""
    key = re.search(r'data-key="([^"]+)"', card).group(1)
    return key + "|" + re.search(r'data-task="([^"]+)"', card).group(1)


def test_every_family_draws_the_target_and_each_runs_answer_with_a_legend(report_dir: Path) -> None:
    html = (report_dir / "index.html").read_text()
    every = cards(html)
    by_task = {}
    for c in every:
        by_task.setdefault(re.search(r'data-task="([^"]+)"', c).group(1), []).append(c)
    runs = ("mean", "oracle", "random-box")
    colours = {}
    for task, cs in by_task.items():
        c = cs[0]
        svg = re.search(r'<svg class="overlay"(.*?)</svg>', c, re.S).group(1)
        legend = re.search(r'<ul class="legend">(.*?)</ul>', c, re.S).group(1)
        assert f'stroke="{TARGET_COLOUR}"' in legend and all(f"{r} (answer" in legend for r in runs), legend
        for r in runs:
            colours.setdefault(r, re.search(rf'stroke="(#[0-9A-F]+)"[^>]*/></svg>{re.escape(r)} \(', legend).group(1))
        if "BoxCoordinate" in task:
            assert len(re.findall(r'<rect class="target"', svg)) == 1
            assert len(re.findall(r'<rect class="answer"', svg)) == 3, "each run's parsed box"
        elif "TumorLesionSize" in task:
            assert re.findall(r"<title>(target (?:major|minor) axis)</title>", svg) == ["target major axis",
                                                                                        "target minor axis"]
            assert len(re.findall(r'<line class="answer"', svg)) == 2 * 3, "each run's two lengths, on the axes"
        elif "_Distance_" in task:
            assert "<title>target line 1</title>" in svg and "target line 2" not in svg
            assert len(re.findall(r'<line class="answer"', svg)) == 3
        else:  # angles: two target lines; an angle gives no positions, said in the caption
            assert "<title>target line 2</title>" in svg and '<line class="answer"' not in svg
            assert "a plain angle answer gives no positions" in c
    assert {"BoxCoordinate", "TumorLesionSize", "_Distance_", "_Angle_"} <= {
        m for t in by_task for m in ("BoxCoordinate", "TumorLesionSize", "_Distance_", "_Angle_") if m in t}
    # one colour per run, the same on every card, none of them the target's, all from the colour-blind-safe set
    assert len(set(colours.values())) == 3 and TARGET_COLOUR not in colours.values()
    assert set(colours.values()) <= set(RUN_COLOURS)
    # the oracle's box is the target box exactly
    detect = next(c for c in every if "BoxCoordinate" in c)
    target = re.search(r'<rect class="target" stroke="[^"]+" ([^>]+)>', detect).group(1)
    oracle = re.search(rf'<rect class="answer" stroke="{colours["oracle"]}" ([^>]+)>', detect).group(1)
    assert target == oracle


def test_the_doc_line_has_no_empty_field(report_dir: Path) -> None:
    html = (report_dir / "index.html").read_text()
    lines = [re.search(r'<p class="muted">(.*?)</p>', c, re.S).group(1) for c in cards(html)]
    assert lines and not [ln for ln in lines if re.search(r"·\s*·|^\s*·|·\s*$", ln)]
    ad = next(ln for ln, c in zip(lines, cards(html)) if "_Distance_" in c[:300])
    assert "X Ray · Sagittal · " in ad and " – " in ad, ad  # the measured landmarks stand where a label would


def test_filters_and_true_aspect_in_the_browser(phantom_dir: Path, phantom_lists: Path, tmp_path: Path) -> None:
    results = tmp_path / "res"
    for fam in ("detect", "TL"):
        out = run_baseline("oracle", fam, phantom_dir, results / f"MedVision-Phantom-{fam}", "--sample_limit", "8",
                           "--model_name", "scripted", lists=phantom_lists, backend=lambda cfg, data: ScriptedBackend())
        assert all(o.state == "done" for o in out)
        run_baseline("mean", fam, phantom_dir, results / f"MedVision-Phantom-{fam}", "--sample_limit", "8",
                     lists=phantom_lists)
    report = tmp_path / "report"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(report), "--data_dir",
                  str(phantom_dir), "--no_plots", "--browse_per_task", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    html = (report / "index.html").read_text()
    flagged = {kind: {ident(c) for c in cards(html) if f'data-{kind}="1"' in c[:600]}
               for kind in ("failed", "parsefailed", "worst")}
    got = probe(report / "index.html", tmp_path / "page")
    assert len(got["kinds"][""]) == len(cards(html))
    for kind in ("failed", "parsefailed", "worst"):
        assert set(got["kinds"][kind]) == flagged[kind] and flagged[kind], kind
    assert flagged["parsefailed"] <= flagged["failed"] < set(got["kinds"][""])
    # every task shows a parse failure (the scripted model fails some) and each run's worst error
    tasks = {k.split("|")[1] for k in got["kinds"][""]}
    assert {k.split("|")[1] for k in flagged["parsefailed"]} == tasks
    for c in cards(html):
        if 'data-parsefailed="1"' in c[:600]:
            assert "<td>parse_failed</td>" in c
        if 'data-worst="1"' in c[:600]:
            assert "(its worst here)" in c
    # slices at their true aspect, the longer side at the cap (24 x 96 coronal slices included)
    assert got["frames"]
    for f in got["frames"]:
        (nw, nh), (sw, sh) = f["natural"], f["shown"]
        assert max(sw, sh) == SLICE_MAX_PX and abs(sw / sh - nw / nh) < 0.02, f
    assert any(nw * 2 <= nh for (nw, nh) in (f["natural"] for f in got["frames"])), "a tall slice is among them"


@pytest.mark.parametrize(("raw", "family", "metric", "expected"), [
    ("<think><step-1-reasoning>r</step-1-reasoning><step-1-answer>(0.4, 0.5), (0.6, 0.5)</step-1-answer>"
     "<step-2-reasoning>r</step-2-reasoning><step-2-answer>(0.5, 0.4), (0.5, 0.6)</step-2-answer></think>"
     "<answer>12.5, 7.5</answer>", "TL", "", [((0.4, 0.5), (0.6, 0.5)), ((0.5, 0.4), (0.5, 0.6))]),
    ("<step-1-answer>(x1_major, y1_major) = (0.3, 0.6); (x2_major, y2_major) = (0.7, 0.4)</step-1-answer>"
     "<step-2-answer>(x1_minor, y1_minor) = (0.45, 0.35); (x2_minor, y2_minor) = (0.55, 0.65)</step-2-answer>",
     "TL", "", [((0.3, 0.6), (0.7, 0.4)), ((0.45, 0.35), (0.55, 0.65))]),
    ("<step-1-answer>(x1, y1) = (0.2, 0.3)</step-1-answer><step-2-answer>(x2, y2) = (0.5, 0.6)</step-2-answer>",
     "AD", "distance", [((0.2, 0.3), (0.5, 0.6))]),
    ("<answer>12.5, 7.5</answer>", "TL", "", None),
    ("<step-1-answer>(0.4, 0.5), (0.6, 0.5)</step-1-answer>", "TL", "", None),  # no second step
])
def test_step_answers_locate_axes_as_upstreams_visualisation_reads_them(raw, family, metric, expected) -> None:
    """Upstream's rule: script/visualization/viz_tl_axes.py @28f6c67 ``parse_axis_coords`` (the last numbers in
    [0, 1] of each step answer, relative (x, y), origin lower-left)."""
    from medvision_bm.report.browser import step_endpoints

    assert step_endpoints(raw, family, metric) == expected


class _CotBackend(ScriptedBackend):
    """Answers every T/L sample with step answers that put the major axis on the image's rising diagonal."""

    def answer(self, request):
        from medvision_bm.models.base import GenResult

        return GenResult(request.key, "<think><step-1-answer>(0.25, 0.75), (0.75, 0.25)</step-1-answer>"
                                      "<step-2-answer>(0.25, 0.25), (0.75, 0.75)</step-2-answer></think>"
                                      "<answer>10, 5</answer>", finish_reason="stop")


def test_a_chain_of_thought_answers_axes_are_drawn_where_its_steps_put_them(phantom_dir: Path, phantom_lists: Path,
                                                                            tmp_path: Path) -> None:
    results = tmp_path / "res"
    out = run_baseline("oracle", "TL", phantom_dir, results / "MedVision-Phantom-TL", "--sample_limit", "2",
                       "--model_name", "cot", lists=phantom_lists, backend=lambda cfg, data: _CotBackend())
    assert all(o.state == "done" for o in out)
    report = tmp_path / "report"
    res = run_cli("summarize", "--results_dir", str(results), "--output_dir", str(report), "--data_dir",
                  str(phantom_dir), "--no_plots")
    assert res.returncode == 0, res.stderr[-2000:]
    for card in cards((report / "index.html").read_text()):
        w, h = (int(v) for v in re.search(r'viewBox="0 0 (\d+) (\d+)"', card).groups())
        line = re.search(r'<line class="answer" stroke="[^"]+" x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" '
                         r'y2="([\d.]+)"><title>answer major axis</title>', card)
        assert line, card[:2000]
        # (0.25, 0.75) is a quarter in from the left and a quarter down from the top (the origin is lower-left)
        assert [float(v) for v in line.groups()] == pytest.approx([0.25 * w, 0.25 * h, 0.75 * w, 0.75 * h], abs=1e-3)
        assert "<title>target major axis</title>" in card
