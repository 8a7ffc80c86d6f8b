"""Evaluate HealthGPT-XL32 on MedVision tasks: `python -m medvision_bm.benchmark.eval__healthgpt_xl32 --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("healthgpt_xl32"))
