"""Evaluate Qwen2.5-VL-32B on MedVision tasks: `python -m medvision_bm.benchmark.eval__qwen2_5_vl_32b --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("qwen2_5_vl_32b"))
