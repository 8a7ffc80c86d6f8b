"""Our model class is found by name through lmms-eval's entry-point registry and runs a MedVision task."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_lmms_eval_resolves_medvision_by_name_and_scores_the_oracle(tmp_path, phantom_dir):
    from lmms_eval import evaluator
    from lmms_eval.models import get_model
    from lmms_eval.tasks import TaskManager

    from medvision_bm.data.docs import RunDoc, View
    from medvision_bm.data.layout import DataDir
    from medvision_bm.data.planner import LATEST_RELEASE
    from medvision_bm.runner.harness import write_task_yaml

    cls = get_model("medvision")
    lm = cls.create_from_arg_string("record=oracle")
    data = DataDir(phantom_dir, LATEST_RELEASE)
    task = "PhantomXR_BiometricsFromLandmarks_Task02_Sagittal"
    docs = data.docs(task)[:3]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(RunDoc(d, View.for_doc(d),
                                              data_root=str(data.dataset_dir(d.dataset))).to_lmms_row()) + "\n"
                            for d in docs))
    write_task_yaml(tmp_path / "tasks", task, "AD", rows)
    out = evaluator.simple_evaluate(model=lm, tasks=[task], task_manager=TaskManager(
        include_path=str(tmp_path / "tasks"), include_defaults=False), bootstrap_iters=0)
    metrics = out["results"][task]
    assert metrics["success,none"] == 1.0 and metrics["mae,none"] == 0.0
    assert len(out["samples"][task]) == 3
