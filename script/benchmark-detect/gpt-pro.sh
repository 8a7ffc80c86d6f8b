#!/usr/bin/env bash
# OpenAI GPT-5.5-Pro on the detection tasks: registry model openai_pro, environment eval-api.
# Edit the values below or set them in the environment; flags, other variables, exit codes: the header
# of script/lib/launcher.sh.
MODEL=openai_pro
: "${MODEL_HF_ID:=}"  # weights (not used: the provider's model code is a flag, see --help)
: "${BATCH_SIZE:=}"  # empty: 16
: "${RESHAPE_IMAGE_HW:=}"  # resize slices to H,W (empty: no resize)
: "${DATA_DIR:=}"  # empty: $BENCHMARK_DIR/Data
: "${SAMPLE_LIMIT:=100}"  # --sample_limit, as upstream's launchers (all: every sample)
# API key: OPENAI_API_KEY or OPENROUTER_API_KEY.
# shellcheck source=../lib/launcher.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/launcher.sh"
mv_launch detect --reasoning_effort low "$@"
