#!/usr/bin/env bash
# Train mean on the tumor/lesion size (TL) tasks: registry model mean, environment eval-cpu.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=mean
: "${MODEL_HF_ID:=}"  # weights (not used)
: "${BATCH_SIZE:=}"  # empty: 1
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
