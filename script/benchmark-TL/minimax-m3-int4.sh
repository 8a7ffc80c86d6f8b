#!/usr/bin/env bash
# MiniMax-M3-INT4 on the tumor/lesion size (TL) tasks: registry model minimax_m3_int4, environment eval-minimax-m3.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=minimax_m3_int4
: "${MODEL_HF_ID:=}"  # weights (empty: cyankiwi/MiniMax-M3-AWQ-INT4)
: "${BATCH_SIZE:=}"  # empty: 1
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
