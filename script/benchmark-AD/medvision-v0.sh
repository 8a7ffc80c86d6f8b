#!/usr/bin/env bash
# MedVision-V0 on the angle/distance (AD) tasks: registry model medvision-model-rft, environment eval-medvision-v0.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=medvision-model-rft
: "${MODEL_HF_ID:=}"  # weights (empty: YongchengYAO/MedVision-V0-7B)
: "${BATCH_SIZE:=}"  # empty: 10
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: 512,512; the registry pins it)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch AD --use_system_prompt "$@"
