"""The judged import reads each record's LLM_judge fields through the typed readers (medvision_bm.limits): a
field that is not the text upstream's judge writes (YongchengYAO/MedVision script/llm-parsing/apply_judge.py
@2f20f64) leaves that record out with its reason, never a traceback or an unreadable stored line; a model folder
whose name holds a format character (a bidi override) is skipped as run refuses it."""

from __future__ import annotations

import json

import pytest
from test_import_rules import TS1, import_cli, judged, records, write_samples

from medvision_bm.ingest.upstream import import_upstream


@pytest.mark.parametrize("field,value", [("judge_span", float("-inf")), ("reason", float("nan")),
                                         ("judge_pred", {"v": 1}), ("strict_pred", 10**30)])
def test_a_judged_record_whose_judge_field_is_no_text_is_left_out_with_its_reason(phantom_dir, tmp_path, field,
                                                                                   value):
    model = tmp_path / "Results" / "MedVision-AD" / "some-model"
    recs = records(phantom_dir, n=3)
    write_samples(model, TS1, recs)
    bad = judged(recs)
    bad[1]["LLM_judge"][field] = value
    write_samples(model / "llm-parsed_gemma-4-31b", TS1, bad)
    res = import_cli(model.parent, tmp_path / "ours", phantom_dir)
    assert res.returncode in (0, 1) and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"LLM_judge.{field} is" in res.stderr + res.stdout
    (answers,) = list((tmp_path / "ours").rglob("judged/*/answers/*.jsonl"))
    stored = [json.loads(line, parse_constant=pytest.fail) for line in answers.read_text().splitlines()]
    assert len(stored) == 2


def test_import_skips_a_model_folder_whose_name_holds_a_bidi_override(tmp_path, phantom_dir):
    bad = "evil\u202egnp.model"  # shows as "evilledom.png"
    write_samples(tmp_path / "Results" / bad, TS1, records(phantom_dir, n=2))
    write_samples(tmp_path / "Results" / "good-model", TS1, records(phantom_dir, n=2))
    report = import_upstream(tmp_path / "Results", tmp_path / "ours", data_dir=phantom_dir)
    assert [t.model for t in report.tasks] == ["good-model"]
    assert any("format character" in s for s in report.skipped_tasks), report.skipped_tasks
    assert {p.name for p in (tmp_path / "ours").iterdir()} == {"good-model"}
