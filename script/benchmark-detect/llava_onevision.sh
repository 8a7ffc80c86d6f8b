#!/usr/bin/env bash
# LLaVA-OneVision on the detection tasks: registry model llava_onevision, environment eval-llava-onevision.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=llava_onevision
: "${MODEL_HF_ID:=}"  # weights (empty: llava-hf/llava-onevision-qwen2-72b-ov-hf)
: "${BATCH_SIZE:=}"  # empty: 1
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch detect "$@"
