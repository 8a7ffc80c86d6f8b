"""Evaluate Llama-3.2-Vision on MedVision tasks: `python -m medvision_bm.benchmark.eval__llama3_2_vision --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("llama3_2_vision"))
