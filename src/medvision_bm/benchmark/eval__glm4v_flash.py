"""Evaluate GLM-4.6V-Flash on MedVision tasks: `python -m medvision_bm.benchmark.eval__glm4v_flash --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("glm4v_flash"))
