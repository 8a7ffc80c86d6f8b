"""Evaluate HuatuoGPT-Vision on MedVision tasks: `python -m medvision_bm.benchmark.eval__huatuogpt_vision --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("huatuogpt_vision"))
