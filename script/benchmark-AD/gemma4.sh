#!/usr/bin/env bash
# Gemma-4 on the angle/distance (AD) tasks: registry model gemma4, environment eval-gemma4.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=gemma4
: "${MODEL_HF_ID:=}"  # weights (empty: google/gemma-4-31B-it)
: "${BATCH_SIZE:=}"  # empty: 10
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch AD --no-enable_thinking "$@"
