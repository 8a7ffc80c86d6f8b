#!/usr/bin/env bash
# GLM-4.6V-Flash on the detection tasks: registry model glm4v_flash, environment eval-glm4v.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=glm4v_flash
: "${MODEL_HF_ID:=}"  # weights (empty: zai-org/GLM-4.6V-Flash)
: "${BATCH_SIZE:=}"  # empty: 2
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch detect "$@"
