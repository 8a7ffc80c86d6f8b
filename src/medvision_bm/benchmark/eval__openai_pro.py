"""Evaluate OpenAI GPT-5.5-Pro on MedVision tasks: `python -m medvision_bm.benchmark.eval__openai_pro --help`."""

from medvision_bm.cli.run import main_for

if __name__ == "__main__":
    raise SystemExit(main_for("openai_pro"))
