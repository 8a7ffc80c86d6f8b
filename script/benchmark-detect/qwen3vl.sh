#!/usr/bin/env bash
# Qwen3-VL on the detection tasks: registry model qwen3_vl, environment eval-qwen3vl.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=qwen3_vl
: "${MODEL_HF_ID:=}"  # weights (empty: Qwen/Qwen3-VL-32B-Thinking)
: "${BATCH_SIZE:=}"  # empty: 2
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch detect "$@"
