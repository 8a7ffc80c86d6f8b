"""benchmarks/bench_gpu.py says plainly that it skipped where no CUDA GPU is visible, and exits 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mvtest_support import REPO


def test_skips_plainly_without_a_gpu(tmp_path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: the benchmark would run")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py"), "--workdir", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("bench_gpu.py: SKIPPED: no CUDA GPU here"), res.stdout
    assert "--smoke" in res.stdout
    assert not (tmp_path / "w").exists()  # nothing built, nothing written


def test_config_is_the_published_3b_one() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_gpu
    finally:
        sys.path.pop(0)
    t, v = bench_gpu.QWEN25_VL_3B_TEXT, bench_gpu.QWEN25_VL_3B_VISION
    assert (t["hidden_size"], t["num_hidden_layers"], t["intermediate_size"], t["vocab_size"]) == (2048, 36, 11008,
                                                                                                     151936)
    assert (t["num_attention_heads"], t["num_key_value_heads"], t["tie_word_embeddings"]) == (16, 2, True)
    assert (v["depth"], v["hidden_size"], v["out_hidden_size"], v["fullatt_block_indexes"]) == (32, 1280, 2048,
                                                                                               [7, 15, 23, 31])
