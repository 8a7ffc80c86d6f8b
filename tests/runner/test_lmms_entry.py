"""Our model class is found by name through lmms-eval's entry-point registry and runs a MedVision task."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_lmms_eval_resolves_medvision_by_name_and_scores_the_oracle(tmp_path, phantom_dir, phantom_lists):
    from lmms_eval import evaluator
    from lmms_eval.models import get_model
    from lmms_eval.tasks import TaskManager

    from fakes.samples import make_view
    from medvision_bm.data.docs import RunDoc
    from medvision_bm.data.layout import DataDir
    from medvision_bm.data.planner import DatasetContract
    from medvision_bm.runner.harness import write_task_yaml
    from mvtest_support import phantom_list

    cls = get_model("medvision")
    lm = cls.create_from_arg_string("record=oracle")
    data = DataDir(DatasetContract.resolve(phantom_dir))
    task = next(t for t in phantom_list(phantom_lists, "AD") if "_Distance_" in t)  # a distance: nMAE is defined
    docs = data.samples(task).docs([0, 1, 2])
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(RunDoc(d, make_view(d), data_root=str(data.root)).to_lmms_row()) + "\n"
                            for d in docs))
    write_task_yaml(tmp_path / "tasks", task, "AD", rows)
    out = evaluator.simple_evaluate(model=lm, tasks=[task], task_manager=TaskManager(
        include_path=str(tmp_path / "tasks"), include_defaults=False), bootstrap_iters=0)
    metrics = out["results"][task]
    assert metrics["SuccessRate,none"] == 1.0 and metrics["MAE,none"] == 0.0 and metrics["MRE,none"] == 0.0
    assert metrics["nMAE,none"] == 0.0
    assert len(out["samples"][task]) == 3
