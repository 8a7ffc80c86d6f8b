"""The image-dependence check (`medvision-bm check-vision`, `run --preflight`): models that ignore their image are
flagged, a model that answers from the pixels is not, and the check's answers never reach a run's store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fakes.pixel_server import PixelStub, PromptOnlyStub, serve
from medvision_bm.models.base import GenResult, SyncBackend
from medvision_bm.models.registry import get_record
from medvision_bm.runner import vision_check as vc
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from medvision_bm.store.discovery import discover
from mvtest_support import run_cli

DETECT = "PhantomMR_BoxCoordinate_Task01_Axial"
TL = "PhantomCT_TumorLesionSize_Task01_Axial"


def test_spread_indices_cover_the_task_and_keep_the_given_ones() -> None:
    assert vc.spread_indices(135, 4) == [0, 33, 67, 101]
    assert vc.spread_indices(3, 8) == [0, 1, 2]
    assert vc.spread_indices(0, 8, among=[5, 7, 9, 11]) == [5, 7, 9, 11]
    assert vc.spread_indices(0, 2, among=[5, 7, 9, 11]) == [5, 9]


def test_one_sided_sign_test() -> None:
    assert vc.one_sided_p(5, 5) == pytest.approx(1 / 32)
    assert vc.one_sided_p(7, 8) == pytest.approx(9 / 256)
    assert vc.one_sided_p(0, 8) == 1.0


def test_sign_test_is_the_exact_two_sided_binomial() -> None:
    assert vc.sign_test_p(8, 0) == pytest.approx(2 / 2**8)
    assert vc.sign_test_p(4, 4) == 1.0
    assert vc.sign_test_p(6, 2) == pytest.approx(2 * (1 + 8 + 28) / 256)
    assert vc.sign_test_p(0, 0) is None


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_blank_and_shuffled_pictures_keep_size_and_mode(mode: str) -> None:
    rng = np.random.default_rng(1)
    shape = (24, 40) if mode == "L" else (24, 40, 3)
    real = Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8), mode)
    other = Image.fromarray(rng.integers(0, 255, (30, 20), dtype=np.uint8), "L")
    rows = [{"id": 0}, {"id": 1}]
    pictures = {0: [real], 1: [other]}

    def visual(row):
        return pictures[row["id"]]

    blank = vc._pictures(visual, rows, 0, vc.BLANK)[0]
    assert blank.size == real.size and blank.mode == mode
    assert set(np.asarray(blank).ravel().tolist()) == {vc.BLANK_GREY}
    shuffled = vc._pictures(visual, rows, 0, vc.SHUFFLED)[0]
    assert shuffled.size == real.size and shuffled.mode == mode
    expected = other.convert(mode).resize(real.size, Image.Resampling.BILINEAR)
    assert shuffled.tobytes() == expected.tobytes(), "the next sample's slice, at this sample's size"
    alone = vc._pictures(visual, rows[:1], 0, vc.SHUFFLED)[0]  # one sample: its own pixels permuted
    assert alone.size == real.size and alone.tobytes() != real.tobytes()
    assert sorted(np.asarray(alone).reshape(-1).tolist()) == sorted(np.asarray(real).reshape(-1).tolist())
    assert vc._pictures(visual, rows, 0, vc.REAL)[0] is real


def _check(tmp_path: Path, phantom_dir: Path, url: str, *extra: str, results: str = "res"):
    return run_cli("check-vision", "--model", "openai-compatible", "--base_url", f"{url}/v1", "--model_name",
                   "served-x", "--data_dir", str(phantom_dir), "--results_dir", str(tmp_path / results),
                   "--skip_env_setup", "--batch_size", "4", *extra)


@pytest.mark.slow
def test_a_served_model_that_answers_from_the_pixels_passes(tmp_path, phantom_dir):
    server = serve(PixelStub())
    try:
        res = _check(tmp_path, phantom_dir, server.url, "--tasks", f"{DETECT},{TL}", "-K", "4")
    finally:
        server.stop()
    assert res.returncode == 0, res.stderr[-3000:]
    lines = {ln.split(":", 1)[0]: ln for ln in res.stdout.splitlines() if ln.startswith("Phantom")}
    assert set(lines) == {DETECT, TL}
    for line in lines.values():
        assert ": answers depend on the image" in line and "K=4" in line, line
    check = json.loads(next((tmp_path / "res").glob(f".check-vision/served-x/{DETECT}/*/check.json")).read_text())
    assert check["verdict"] == "depends" and check["changed"]["blank"] >= 1
    assert check["parsed"] == {"real": 4, "blank": 4, "shuffled": 4}
    assert check["metric"] == "IoU" and check["metric_means"]["real"] > check["metric_means"]["blank"]
    # the blank picture the server got is one grey value, the same size as the real slice it stands for
    sizes = {}
    for r in server.received:
        part = next(p for p in r.body["messages"][-1]["content"] if p.get("type") == "image_url")
        import base64
        import io

        img = Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1])))
        sizes.setdefault(img.size, set()).add(len(set(np.asarray(img).ravel().tolist())) == 1)
    assert all(True in kinds and False in kinds for kinds in sizes.values()), sizes
    assert len(server.received) == 2 * 4 * 3


@pytest.mark.slow
def test_a_served_model_that_ignores_its_image_is_flagged(tmp_path, phantom_dir):
    server = serve(PromptOnlyStub())
    try:
        res = _check(tmp_path, phantom_dir, server.url, "--tasks", DETECT, "-K", "5")
    finally:
        server.stop()
    assert res.returncode == 4, res.stderr[-3000:]
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith(DETECT))
    assert "ANSWERS DO NOT DEPEND ON THE IMAGE" in line and "0/5 changed with a blank slice" in line, line
    assert "parsed 5/5 real" in line
    assert "not shown to depend on the image" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_check_answers_never_reach_a_runs_store_and_a_rerun_asks_nothing(tmp_path, phantom_dir):
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({DETECT: 0}))
    server = serve(PixelStub())
    try:
        first = _check(tmp_path, phantom_dir, server.url, "--tasks_list_json_path", str(tasks), "-K", "3")
        assert first.returncode == 0, first.stderr[-3000:]
        asked = len(server.received)
        assert asked == 3 * 3
        again = _check(tmp_path, phantom_dir, server.url, "--tasks_list_json_path", str(tasks), "-K", "3")
        assert again.returncode == 0 and len(server.received) == asked, "the check's own stores are resumed"
        run = run_cli("run", "--model", "openai-compatible", "--base_url", f"{server.url}/v1", "--model_name",
                      "served-x", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks),
                      "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--skip_update_status",
                      "--sample_limit", "3", "--no_progress")
        assert run.returncode == 0, run.stderr[-3000:]
        assert len(server.received) == asked + 3, "the run reuses none of the check's answers"
    finally:
        server.stop()
    refs, _notes = discover(tmp_path / "res")
    assert len(refs) == 1 and ".check-vision" not in str(refs[0].folder)
    run_lines = [ln for p in (refs[0].folder / "samples").glob("*.jsonl") for ln in p.read_text().splitlines()]
    assert len(run_lines) == 3
    check_sigs = {json.loads(p.read_text())["answer_signature"]
                  for p in (tmp_path / "res" / ".check-vision").rglob("signature.json")}
    assert len(check_sigs) == 3 and refs[0].answer_signature not in check_sigs


@pytest.mark.slow
def test_run_preflight_stops_a_model_that_ignores_its_image_before_any_answer(tmp_path, phantom_dir):
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({DETECT: 0, TL: 0}))
    server = serve(PromptOnlyStub())
    try:
        res = run_cli("run", "--model", "openai-compatible", "--base_url", f"{server.url}/v1", "--model_name",
                      "served-x", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks),
                      "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--task_status_json_path",
                      str(tmp_path / "status.json"), "--sample_limit", "2", "--no_progress", "--preflight", "3")
    finally:
        server.stop()
    assert res.returncode == 4, res.stderr[-3000:]
    assert "stopped by the preflight" in res.stderr and "nothing was evaluated" in res.stderr
    assert len(server.received) == 2 * 3 * 3  # one task per family, K=3, three pictures each
    assert not (tmp_path / "status.json").exists()
    assert not [p for p in (tmp_path / "res").iterdir() if not p.name.startswith(".")], "no run store was made"


@pytest.mark.slow
def test_run_preflight_lets_a_model_that_sees_its_image_run(tmp_path, phantom_dir):
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({DETECT: 0}))
    server = serve(PixelStub())
    try:
        res = run_cli("run", "--model", "openai-compatible", "--base_url", f"{server.url}/v1", "--model_name",
                      "served-x", "--data_dir", str(phantom_dir), "--tasks_list_json_path", str(tasks),
                      "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--skip_update_status",
                      "--sample_limit", "2", "--no_progress", "--preflight", "3")
    finally:
        server.stop()
    assert res.returncode == 0, res.stderr[-3000:]
    assert "answers depend on the image" in res.stdout
    assert len(server.received) == 3 * 3 + 2
    assert len(discover(tmp_path / "res")[0]) == 1


@pytest.mark.slow
def test_the_tiny_random_vlm_is_flagged(tmp_path, phantom_dir):
    from medvision_bm.models.tiny import make_tiny_llava

    tiny = make_tiny_llava(tmp_path / "tiny-llava")
    res = run_cli("check-vision", "--model", "hf", "--model_hf_id", str(tiny), "--device", "cpu",
                  "--processor_resize", "none", "--max_new_tokens", "12", "--data_dir", str(phantom_dir),
                  "--results_dir", str(tmp_path / "res"), "--skip_env_setup", "--tasks", DETECT, "-K", "3")
    assert res.returncode == 4, res.stderr[-3000:]
    check = json.loads(next((tmp_path / "res").glob(f".check-vision/*/{DETECT}/*/check.json")).read_text())
    assert check["flagged"] and check["verdict"] in ("unreadable", "ignores"), check
    assert check["parsed"]["real"] == 0 or check["changed"]["blank"] == check["changed"]["shuffled"] == 0


class _Sampler(SyncBackend):
    """A sampling model in-process: a random answer per request (seeded), from the pixels' mean too when told."""

    name = "sampler"

    def __init__(self, sees: bool) -> None:
        self.sees = sees
        self.rng = np.random.default_rng(0)

    def answer(self, request):
        shift = float(np.asarray(request.get_images()[0]).mean()) / 10 if self.sees else 0.0
        a, b = sorted(self.rng.uniform(0, 0.5, 2))
        return GenResult(request.key, f"<answer>{a:.3f}, {b:.3f}, {a + 0.3 + shift:.3f}, {b + 0.3:.3f}</answer>")


@pytest.mark.parametrize("sees", [False, True])
def test_a_sampling_model_is_judged_against_asking_the_real_slice_again(tmp_path, phantom_dir, clean_env, sees):
    record = get_record("hf")
    argv = ["--data_dir", str(phantom_dir), "--tasks_list_json_path", "unused.json", "--results_dir",
            str(tmp_path / "res"), "--skip_env_setup", "--skip_update_status", "--model_hf_id", "test/sampler",
            "--processor_resize", "none", "--temperature", "0.7"]
    cfg = build_config(build_parser(record, "test").parse_args(argv), record, argv, tasks={DETECT: 0})
    backend = _Sampler(sees)
    (check,) = vc.VisionChecker(cfg, lambda cfg, data: backend, 6, log=lambda line: None).run([DETECT])
    assert check.conditions == (vc.REAL, vc.BLANK, vc.SHUFFLED, vc.REAL_AGAIN)
    assert check.changed[vc.REAL_AGAIN] == 6, "two askings of the same picture differ: the noise a change must beat"
    assert check.changed[vc.BLANK] == 6, "so every answer changes with any picture"
    # random answers land as far apart with another picture as with the same one: not shown to follow the image
    assert check.verdict == (vc.DEPENDS if sees else vc.IGNORES), check.line()


@pytest.mark.parametrize(("args", "needle"), [
    (["--tasks", "NotATask"], "task name 'NotATask' does not follow"),
    ([], "name the tasks to check with --tasks T1,T2 or --tasks_list_json_path FILE"),
    (["--tasks", DETECT, "-K", "0"], "'0' must be a positive integer"),
])
def test_bad_check_input_is_one_line(tmp_path, phantom_dir, args, needle):
    res = run_cli("check-vision", "--model", "oracle", "--data_dir", str(phantom_dir), "--results_dir",
                  str(tmp_path / "res"), "--skip_env_setup", *args)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))]
    assert res.returncode == 2 and len(lines) == 1 and needle in lines[0], res.stderr  # argparse's usage aside
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "res").exists()
