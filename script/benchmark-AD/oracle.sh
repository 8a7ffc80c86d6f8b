#!/usr/bin/env bash
# Oracle on the angle/distance (AD) tasks: registry model oracle, environment eval-cpu.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=oracle
: "${MODEL_HF_ID:=}"  # weights (not used)
: "${BATCH_SIZE:=}"  # empty: 1
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch AD "$@"
