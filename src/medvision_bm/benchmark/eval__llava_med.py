"""Evaluate LLaVA-Med on MedVision tasks: `python -m medvision_bm.benchmark.eval__llava_med --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("llava_med"))
