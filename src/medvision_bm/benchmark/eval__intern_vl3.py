"""Evaluate InternVL3 on MedVision tasks: `python -m medvision_bm.benchmark.eval__intern_vl3 --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("intern_vl3"))
