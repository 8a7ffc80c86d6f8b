"""--help states every default once and meaningfully, and a flag a record cannot use is
refused, not ignored."""

from __future__ import annotations

import re

import pytest

from medvision_bm.errors import UserError
from medvision_bm.models.registry import REGISTRY, get_record
from medvision_bm.runner.args import build_parser
from medvision_bm.runner.config import build_config
from mvtest_support import REPO

TASKS = REPO / "tasks_list" / "tasks_MedVision-Phantom-TL.json"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_help_states_each_default_once(name):
    """Before: `(default: None)` on flags that are simply not sent, and Python 3.10's BooleanOptionalAction added
    its own `(default: True)` after ours on every on/off flag."""
    text = build_parser(REGISTRY[name], "x").format_help()
    assert "(default: None)" not in text
    assert not re.search(r"\(default:[^)]*\)\s*\(default:", text)


def test_on_off_flags_keep_their_defaults():
    assert build_parser(get_record("claude"), "x").parse_args([]).thinking is True
    assert build_parser(get_record("claude"), "x").parse_args(["--no-thinking"]).thinking is False
    assert build_parser(get_record("gemma4"), "x").parse_args([]).enable_thinking is None


def _config(tmp_path, model, *extra):
    record = get_record(model)
    argv = ["--data_dir", str(tmp_path), "--tasks_list_json_path", str(TASKS), "--results_dir", str(tmp_path / "r"),
            "--skip_env_setup", "--skip_update_status", *extra]
    return build_config(build_parser(record, "x").parse_args(argv), record, argv)


@pytest.mark.parametrize("model", ["medgemma", "lingshu", "oracle", "claude"])
def test_a_vllm_setting_is_refused_where_no_vllm_runs(tmp_path, model):
    """Before: eval__medgemma accepted --gpu_memory_utilization 0.5 and ignored it."""
    extra = ["--model_hf_id", str(tmp_path)] if model in ("medgemma", "lingshu") else []
    with pytest.raises(UserError, match="--gpu_memory_utilization is a vLLM setting"):
        _config(tmp_path, model, *extra, "--gpu_memory_utilization", "0.5")


def test_a_vllm_record_takes_it(tmp_path):
    cfg = _config(tmp_path, "qwen2_5_vl", "--gpu_memory_utilization", "0.5")
    assert cfg.gpu_memory_utilization == 0.5
