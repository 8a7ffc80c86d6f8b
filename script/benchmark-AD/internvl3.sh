#!/usr/bin/env bash
# InternVL3 on the angle/distance (AD) tasks: registry model intern_vl3, environment eval-internvl3.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=intern_vl3
: "${MODEL_HF_ID:=}"  # weights (empty: OpenGVLab/InternVL3-38B)
: "${BATCH_SIZE:=}"  # empty: 2
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch AD "$@"
