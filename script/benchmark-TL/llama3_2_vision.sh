#!/usr/bin/env bash
# Llama-3.2-Vision on the tumor/lesion size (TL) tasks: registry model llama3_2_vision, environment eval-llama3-vision.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=llama3_2_vision
: "${MODEL_HF_ID:=}"  # weights (empty: meta-llama/Llama-3.2-11B-Vision-Instruct)
: "${BATCH_SIZE:=}"  # empty: 4
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
