"""Write script/benchmark-{AD,TL,detect}/<launcher>.sh for every registry model (run after adding a model).

    python script/lib/make_launchers.py [--check]

Each launcher is a few editable variables and a call into script/lib/launcher.sh. ``--check`` writes nothing
and exits 1 when a launcher is missing or differs from what this script would write.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from medvision_bm.models.registry import GPU_ENVS, HF_ENV_VAR, REGISTRY, ModelRecord  # noqa: E402

FAMILIES = {"AD": "angle/distance (AD)", "TL": "tumor/lesion size (TL)", "detect": "detection"}
#: Launchers that resize where the registry does not: GPT-5.5 sends 512x512 slices on TL only, GPT-5.5-Pro on TL
#: and A/D (upstream's eval__GPT5.5-Pro__TL.sh @473a4fd and __AD.sh @83e3187 pass --reshape_image_hw 512x512, its
#: __detect.sh @473a4fd none).
RESHAPE_EXTRA = {("openai", "TL"): "512,512", ("openai_pro", "TL"): "512,512", ("openai_pro", "AD"): "512,512"}


def reshape_for(record: ModelRecord, family: str) -> str:
    """The launcher's RESHAPE_IMAGE_HW: the registry's default shown explicitly (unless pinned), or an extra."""
    if record.reshape_hw and not record.reshape_pinned:
        return ",".join(map(str, record.reshape_hw))
    return RESHAPE_EXTRA.get((record.name, family), "")


def launcher_text(record: ModelRecord, family: str) -> str:
    """Only what differs per model: its name and defaults; the rest is in the header of script/lib/launcher.sh."""
    if record.is_api:
        weights = "not used: the provider's model code is a flag, see --help"
    elif record.default_weights:
        weights = f"empty: {record.default_weights}"
    else:
        weights = "required: a transformers folder or hub id" if record.backend == "hf" else "not used"
    reshape = ",".join(map(str, record.reshape_hw)) if record.reshape_hw else "no resize"
    if record.reshape_pinned:
        reshape = f"{reshape}; the registry pins it"
    lines = [
        "#!/usr/bin/env bash",
        f"# {record.display_name} on the {FAMILIES[family]} tasks: registry model {record.name}, "
        + (f"environment {GPU_ENVS[record.name].name} on a machine with an NVIDIA GPU, else {record.env.name}"
           f" (${HF_ENV_VAR}=gpu|cpu decides)." if record.name in GPU_ENVS else f"environment {record.env.name}."),
        "# Edit the values below or set them in the environment; flags, other variables, exit codes: the header",
        "# of script/lib/launcher.sh.",
        f"MODEL={record.name}",
        f': "${{MODEL_HF_ID:=}}"  # weights ({weights})',
        f': "${{BATCH_SIZE:=}}"  # empty: {record.batch_size}',
        f': "${{RESHAPE_IMAGE_HW:={reshape_for(record, family)}}}"  # resize slices to H,W (empty: {reshape})',
        ': "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data',
    ]
    if record.launcher_sample_limit:
        lines.append(f': "${{SAMPLE_LIMIT:={record.launcher_sample_limit}}}"  # --sample_limit, as upstream\'s '
                     'launchers (all: every sample)')
    if record.api_key_envs:
        lines.append(f"# API key: {' or '.join(record.api_key_envs)}.")
    lines += ["# shellcheck source=../lib/launcher.sh", 'source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"',
              f'mv_launch {family} {"".join(f + " " for f in record.launcher_flags)}"$@"', ""]
    return "\n".join(lines)


def expected() -> dict[Path, str]:
    return {ROOT / "script" / f"benchmark-{fam}" / f"{rec.launcher}.sh": launcher_text(rec, fam)
            for rec in REGISTRY.values() for fam in FAMILIES}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true")
    ns = p.parse_args()
    bad = []
    for path, text in expected().items():
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current == text:
            continue
        if ns.check:
            bad.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
        print(f"wrote {path.relative_to(ROOT)}")
    if bad:
        print(f"{len(bad)} launcher(s) missing or out of date (e.g. {bad[0].relative_to(ROOT)}); run "
              "python script/lib/make_launchers.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
