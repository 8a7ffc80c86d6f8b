"""-VP and -VP-woMedImg runs: the drawn picture is what a served model receives, the drawing is part of the answer
signature, and a visual prompt the suite cannot draw stops the run before any request."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fakes.provider_server import FakeProviderServer
from mvtest_support import run_cli
from upstream_visual_prompt import upstream_picture

pytestmark = pytest.mark.slow
pytest.importorskip("cv2")

TASKS = {
    "PhantomXR_BiometricsFromLandmarks_Angle_Task01_Sagittal-VP": "AD",
    "PhantomCT_TumorLesionSize_Task01_Axial-VP-woMedImg": "TL",
    "PhantomCT_BoxCoordinate_Task01_Axial-VP": "detect",
}


def _tasks_list(tmp_path: Path, tasks) -> Path:
    p = tmp_path / "tasks.json"
    p.write_text(json.dumps({t: 3 for t in tasks}))
    return p


def _received_pictures(fake: FakeProviderServer) -> list[np.ndarray]:
    out = []
    for r in fake.received:
        for m in r.body.get("messages", []):
            for part in m.get("content") if isinstance(m.get("content"), list) else []:
                if part.get("type") == "image_url":
                    b64 = part["image_url"]["url"].split(",", 1)[1]
                    img = Image.open(io.BytesIO(base64.b64decode(b64)))
                    img.load()
                    out.append(np.asarray(img))
    return out


def _upstream_pictures(results: Path, data_dir: Path) -> dict[str, np.ndarray]:
    """Upstream's picture of every sample stored under ``results``, by task (reference: upstream_visual_prompt)."""
    from medvision_bm.data.docs import rundoc_from_store_row
    from medvision_bm.tasks import hooks

    out = {}
    for docs in results.rglob("docs.jsonl"):
        for line in docs.read_text().splitlines():
            rd = dataclasses.replace(rundoc_from_store_row(json.loads(line)), data_root=str(data_dir))
            plain = hooks.render_gray(dataclasses.replace(rd, variant=""))
            row = rd.doc.upstream_row(data_dir)
            pic = upstream_picture(TASKS[rd.doc.task], rd.variant, row, data_dir, rd.view.reshape_hw, plain)
            out[rd.doc.key + rd.doc.task] = np.asarray(pic)
    return out


@pytest.mark.parametrize("reshape", [None, "64,80"])
def test_a_served_model_receives_upstreams_drawn_picture(tmp_path, phantom_dir, reshape):
    data_dir = phantom_dir.resolve()
    tl = _tasks_list(tmp_path, TASKS)
    with FakeProviderServer(answer="<answer>1, 2, 3, 4</answer>") as fake:
        args = ["run", "--model", "openai-compatible", "--base_url", f"{fake.url}/v1", "--model_name", "served-vp",
                "--data_dir", str(data_dir), "--tasks_list_json_path", str(tl), "--results_dir",
                str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup", "--sample_limit", "3",
                "--batch_size", "2", "--no_progress"]
        if reshape:
            args += ["--reshape_image_hw", reshape]
        res = run_cli(*args)
        assert res.returncode == 0, res.stderr[-2000:]
        received = _received_pictures(fake)
    expected = _upstream_pictures(tmp_path / "res", data_dir)
    assert len(received) == len(expected) == 3 * len(TASKS)
    assert all(p.ndim == 3 and p.shape[2] == 3 for p in received), "colour pictures on the wire, never grey slices"
    sent = sorted(p.tobytes() for p in received)
    assert sent == sorted(p.tobytes() for p in expected.values())
    if reshape:
        assert {p.shape[:2] for p in received} == {(64, 80)}
    for results in (tmp_path / "res").rglob("results.json"):
        record = json.loads(results.read_text())
        assert record["complete"]
    signatures = [json.loads(p.read_text()) for p in (tmp_path / "res").rglob("signature.json")]
    assert signatures and all("upstream-0a4c5e2-visual-prompt" in json.dumps(s) for s in signatures)


def test_the_oracle_scores_visual_prompt_tasks_as_plain_ones_under_their_own_signature(tmp_path, phantom_dir):
    """A baseline answers without the picture: its scores do not move, but its answers are stored apart."""
    scores = {}
    for variant in ("", "-VP-woMedImg"):
        task = "PhantomXR_BiometricsFromLandmarks_Distance_Task01_Sagittal" + variant
        res = run_cli("run", "--model", "oracle", "--data_dir", str(phantom_dir), "--tasks_list_json_path",
                      str(_tasks_list(tmp_path, [task])), "--results_dir", str(tmp_path / "res"),
                      "--skip_update_status", "--skip_env_setup", "--no_progress")
        assert res.returncode == 0, res.stderr[-2000:]
        record = json.loads(next((tmp_path / "res" / "oracle" / task).glob("*/results.json")).read_text())
        scores[variant] = (record["metrics"], record["answer_signature"])
    assert scores[""][0] == scores["-VP-woMedImg"][0]
    assert scores[""][0]["SuccessRate"] == 1.0 and scores[""][0]["avgMAE"] == 0
    assert scores[""][1] != scores["-VP-woMedImg"][1]


def test_a_visual_prompt_that_cannot_be_drawn_is_refused_before_any_request(tmp_path, phantom_dir):
    """Without OpenCV the T/L -VP-woMedImg contour cannot be drawn as upstream draws it: one line, exit 2, nothing
    asked or stored (never the plain slice instead)."""
    import os

    blocker = tmp_path / "no_cv2" / "cv2"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('OpenCV is not installed here')\n")
    path = os.pathsep.join(p for p in (str(blocker.parent), os.environ.get("PYTHONPATH", "")) if p)
    task = "PhantomCT_TumorLesionSize_Task01_Axial-VP-woMedImg"
    with FakeProviderServer(answer="<answer>1, 2</answer>") as fake:
        res = run_cli("run", "--model", "openai-compatible", "--base_url", f"{fake.url}/v1", "--model_name", "x",
                      "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(_tasks_list(tmp_path, [task])),
                      "--results_dir", str(tmp_path / "res"), "--skip_update_status", "--skip_env_setup",
                      "--no_progress", env={"PYTHONPATH": path})
        assert not [r for r in fake.received if r.path.endswith("/chat/completions")]
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and task in lines[0] and "OpenCV" in lines[0] and "Traceback" not in res.stderr
    assert not list((tmp_path / "res").rglob("*.jsonl"))
