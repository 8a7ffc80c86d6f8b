"""Evaluate Google Gemini on MedVision tasks: `python -m medvision_bm.benchmark.eval__gemini --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("gemini"))
