#!/usr/bin/env bash
# Transformers (local folder) on the tumor/lesion size (TL) tasks: registry model hf, environment eval-hf-gpu on a machine with an NVIDIA GPU, else eval-cpu ($MEDVISION_HF_ENV=gpu|cpu decides).
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=hf
: "${MODEL_HF_ID:=}"  # weights (required: a transformers folder or hub id)
: "${BATCH_SIZE:=}"  # empty: 4
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
