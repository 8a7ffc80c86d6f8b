#!/usr/bin/env bash
# MedVision-V0 on the tumor/lesion size (TL) tasks: registry model medvision-model-rft, environment eval-medvision-v0.
# Edit the values below or set them in the environment; extra flags reach the entry point, e.g.
#   bash script/benchmark-TL/medvision-v0.sh --sample_limit 10 --skip_update_status
# All variables (paths, ENVS_ROOT, ENV_TOOL, INSTALL_METHOD, torch source) and exit codes:
# the header of script/lib/launcher.sh.
MODEL=medvision-model-rft
: "${MODEL_HF_ID:=}"       # weights (empty: YongchengYAO/MedVision-V0-7B)
: "${MODEL_NAME:=}"        # results folder and status entry (empty: the entry point's default)
: "${BATCH_SIZE:=}"        # (empty: 10)
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W before sending (empty: the registry's)
: "${DATA_DIR:=}"          # data folder (empty: $BENCHMARK_DIR/Data)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
