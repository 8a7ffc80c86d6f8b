#!/usr/bin/env bash
# Qwen2.5-VL-32B on the tumor/lesion size (TL) tasks: registry model qwen2_5_vl_32b, environment eval-qwen25vl.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=qwen2_5_vl_32b
: "${MODEL_HF_ID:=}"  # weights (empty: Qwen/Qwen2.5-VL-32B-Instruct)
: "${BATCH_SIZE:=}"  # empty: 10
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
