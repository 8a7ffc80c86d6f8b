#!/usr/bin/env bash
# HealthGPT on the tumor/lesion size (TL) tasks: registry model healthgpt, environment eval-healthgpt.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=healthgpt
: "${MODEL_HF_ID:=}"  # weights (not used)
: "${BATCH_SIZE:=}"  # empty: 10
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
