#!/usr/bin/env bash
# Kimi on the tumor/lesion size (TL) tasks: registry model kimi, environment eval-api.
# Edit the values below or set them in the environment; extra flags reach the entry point, e.g.
#   bash script/benchmark-TL/kimi.sh --sample_limit 10 --skip_update_status
# All variables (paths, ENVS_ROOT, ENV_TOOL, INSTALL_METHOD, torch source) and exit codes:
# the header of script/lib/launcher.sh.
MODEL=kimi
: "${MODEL_HF_ID:=}"       # weights (not used: the provider's model code is a flag, see --help)
: "${MODEL_NAME:=}"        # results folder and status entry (empty: the entry point's default)
: "${BATCH_SIZE:=}"        # (empty: 16)
: "${RESHAPE_IMAGE_HW:=512,512}"  # resize slices to H,W before sending (empty: the registry's)
: "${DATA_DIR:=}"          # data folder (empty: $BENCHMARK_DIR/Data)
# API key: MOONSHOT_API_KEY or OPENROUTER_API_KEY from the environment (never written to the log).
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch TL "$@"
