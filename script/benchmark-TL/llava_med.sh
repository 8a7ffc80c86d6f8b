#!/usr/bin/env bash
# LLaVA-Med on the tumor/lesion size (TL) tasks: registry model llava_med, environment eval-llavamed.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=llava_med
: "${MODEL_HF_ID:=}"  # weights (empty: microsoft/llava-med-v1.5-mistral-7b)
: "${BATCH_SIZE:=}"  # empty: 20
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=1000}"  # --sample_limit, as upstream's launchers (all: every sample)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
