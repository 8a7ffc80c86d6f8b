"""Evaluate MedVision-V0 on MedVision tasks: `python -m medvision_bm.benchmark.eval__medvision-model-rft --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("medvision-model-rft"))
