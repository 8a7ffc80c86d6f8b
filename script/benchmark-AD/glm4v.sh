#!/usr/bin/env bash
# GLM-4.6V on the angle/distance (AD) tasks: registry model glm4v, environment eval-glm4v.
# Edit the values below or set them in the environment; extra flags reach the entry point, e.g.
#   bash script/benchmark-AD/glm4v.sh --sample_limit 10 --skip_update_status
# All variables (paths, ENVS_ROOT, ENV_TOOL, INSTALL_METHOD, torch source) and exit codes:
# the header of script/lib/launcher.sh.
MODEL=glm4v
: "${MODEL_HF_ID:=}"       # weights (empty: zai-org/GLM-4.6V)
: "${MODEL_NAME:=}"        # results folder and status entry (empty: the entry point's default)
: "${BATCH_SIZE:=}"        # (empty: 1)
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W before sending (empty: no resize)
: "${DATA_DIR:=}"          # data folder (empty: $BENCHMARK_DIR/Data)
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch AD "$@"
