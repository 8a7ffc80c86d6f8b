#!/usr/bin/env bash
# Lingshu on the detection tasks: registry model lingshu, environment eval-lingshu.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=lingshu
: "${MODEL_HF_ID:=}"  # weights (empty: lingshu-medical-mllm/Lingshu-32B)
: "${BATCH_SIZE:=}"  # empty: 2
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch detect "$@"
