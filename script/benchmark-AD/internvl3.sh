#!/usr/bin/env bash
# InternVL3 on the angle/distance (AD) tasks: registry model intern_vl3, environment eval-internvl3.
# Edit the values below or set them in the environment; extra flags reach the entry point, e.g.
#   bash script/benchmark-AD/internvl3.sh --sample_limit 10 --skip_update_status
# All variables (paths, ENVS_ROOT, ENV_TOOL, INSTALL_METHOD, torch source) and exit codes:
# the header of script/lib/launcher.sh.
MODEL=intern_vl3
: "${MODEL_HF_ID:=}"       # weights (empty: OpenGVLab/InternVL3-38B)
: "${MODEL_NAME:=}"        # results folder and status entry (empty: the entry point's default)
: "${BATCH_SIZE:=}"        # (empty: 2)
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W before sending (empty: no resize)
: "${DATA_DIR:=}"          # data folder (empty: $BENCHMARK_DIR/Data)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch AD "$@"
