# shellcheck shell=bash
# medvision_bm launcher library, sourced by every script/benchmark-<FAMILY>/<launcher>.sh.
#
# INTERFACE (stable: the SLURM submitter builds on exactly this)
#   bash script/benchmark-<FAMILY>/<launcher>.sh [extra runner flags...]
#     FAMILY is AD, TL or detect; one launcher per registry model (`medvision-bm models`) per family.
#     Extra flags go to the entry point after the launcher's own, so they win
#     (e.g. --sample_limit 10 --skip_update_status; --env_setup_only or --skip_env_setup, never both).
#   Exit status: the entry point's (0 all tasks done, 3 incomplete, 1 a task raised, 2 user error); a
#   launcher or environment error exits 2 (or the builder's status) with one line on stderr.
#
#   A launcher sets MODEL (its registry model) and lists the variables users most often change, with that
#   model's defaults in comments; edit them there, or set any variable below in the environment (the SLURM
#   submitter does). API keys come from the provider's variables (the launcher names them): trailing spaces and
#   newlines are stripped and the value is never written to the log.
#
#   Variables (an empty value = the default):
#     BENCHMARK_DIR     checkout root (default: this repository)
#     DATA_DIR          data folder (default: $BENCHMARK_DIR/Data); exported as MedVision_DATA_DIR
#     TASK_TAG          default: MedVision-Phantom-<FAMILY>
#     RESULTS_DIR       default: $BENCHMARK_DIR/Results/$TASK_TAG   (log: $RESULTS_DIR/logs/*.log, named after
#                       MODEL_NAME with every character but A-Za-z0-9._- as _; keys and URL credentials as ***)
#     TASKS_LIST        default: $BENCHMARK_DIR/tasks_list/tasks_$TASK_TAG.json, else the same name in
#                       tasks_list/OOD/ or tasks_list/experimental/ (e.g. TASK_TAG=MedVision-TL-planeOOD-CoT)
#     STATUS_FILE       default: $BENCHMARK_DIR/completed_tasks/completed_tasks_$TASK_TAG.json
#     MODEL_HF_ID, MODEL_NAME, BATCH_SIZE, RESHAPE_IMAGE_HW   (default: the registry's; MODEL_NAME's default is
#                       upstream's launcher name, e.g. Qwen2.5-VL-7B-Instruct, so status entries and folders line up)
#     SAMPLE_LIMIT      --sample_limit the launcher passes: 1000 for open weights, 100 for API models, as upstream's
#                       launchers; "all" evaluates every sample; a later --sample_limit N flag also wins
#     MV_DRY_RUN        1: print the entry point's command line (shell-quoted, one line on stdout) and exit 0,
#                       without building environments, checking data or writing a log
#     ENVS_ROOT         where environments live (default: $BENCHMARK_DIR/.envs)
#     ENV_TOOL          uv (default) | conda (only where `conda` is on PATH)
#     INSTALL_METHOD    1 (default): build the env from the frozen lock here, run with --skip_env_setup;
#                       2: create the env with medvision-bm only and let the entry point install the lock
#     TORCH_FIND_LINKS / TORCH_INDEX_URL   CPU torch source for CPU families (default:
#                       https://download.pytorch.org/whl/cpu); GPU families use PyPI's CUDA torch
#     MedVision_PLANNER_VERSION, MedVision_ACK_RELEASE   annotation pin and acknowledgement (default: 1.0.0 and
#                       1.4.0, what upstream's launchers export: the paper's annotations)
#     PREPARE_DATA      1 (default): check the data folder first, and write the phantom data when a phantom
#                       TASK_TAG finds no Datasets/; 0: skip
#     MEDVISION_BOOT_PYTHON  Python >= 3.10 that runs the env builder (default: `uv python find`, python3)
#
#   Environments: $ENVS_ROOT/<env-name> (named like the registry's EnvSpec, e.g. eval-cpu), reused when its
#   completion marker matches the lock, Python version and medvision-bm source; builds hold
#   $ENVS_ROOT/<env-name>.lock (flock), running evaluations hold $ENVS_ROOT/<env-name>.inuse shared.

set -uo pipefail

MV_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

mv_err() { printf '%s: error: %s\n' "${MV_PROG:-launcher}" "$*" >&2; }
mv_note() { printf '%s: %s\n' "${MV_PROG:-launcher}" "$*" >&2; }

# Trailing spaces and newlines (e.g. from `export KEY=$(cat keyfile)` of a file with CRLF) are removed.
mv_strip_trailing_space() {
  local value="$1"
  value="${value%"${value##*[![:space:]]}"}"
  printf '%s' "$value"
}

mv_has_flag() {  # mv_has_flag --flag "$@"
  local want="$1" arg
  shift
  for arg in "$@"; do
    [[ "$arg" == "$want" ]] && return 0
  done
  return 1
}

mv_boot_python() {
  local py="${MEDVISION_BOOT_PYTHON:-}"
  if [[ -z "$py" ]] && command -v uv >/dev/null 2>&1; then
    py="$(uv python find --no-project '>=3.10' 2>/dev/null || true)"
  fi
  if [[ -z "$py" ]]; then
    py="$(command -v python3 || true)"
  fi
  if [[ -z "$py" ]] || ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    mv_err "no Python >= 3.10 to run the environment builder; install one or set MEDVISION_BOOT_PYTHON"
    return 2
  fi
  printf '%s' "$py"
}

mv_envs() {  # medvision-bm envs ..., from this checkout's source, before any model env exists
  PYTHONPATH="$BENCHMARK_DIR/src" PYTHONNOUSERSITE=1 "$MV_BOOT_PY" -m medvision_bm.cli envs "$@"
}

mv_require_tools() {
  if ! command -v flock >/dev/null 2>&1; then
    mv_err "flock is not on PATH; install util-linux (e.g. apt-get install util-linux) so concurrent jobs can share an environment"
    return 2
  fi
  case "$ENV_TOOL" in
    uv)
      if ! command -v uv >/dev/null 2>&1; then
        mv_err "uv is not on PATH; install it (pip install uv) or set ENV_TOOL=conda where conda is available"
        return 2
      fi ;;
    conda)
      if ! command -v conda >/dev/null 2>&1; then
        mv_err "ENV_TOOL=conda but conda is not on PATH; activate conda or use ENV_TOOL=uv"
        return 2
      fi ;;
    *)
      mv_err "ENV_TOOL=$ENV_TOOL is not a known tool; use uv (default) or conda"
      return 2 ;;
  esac
}

mv_configure() {  # defaults for every variable of the interface
  local family="$1"
  case "$family" in
    AD | TL | detect) ;;
    *) mv_err "FAMILY=$family is not a task family; use AD, TL or detect"; return 2 ;;
  esac
  # ${VAR:=default} also replaces an empty value: an empty variable means "the default".
  : "${BENCHMARK_DIR:=$(cd "$MV_LIB_DIR/../.." && pwd)}"
  if [[ ! -f "$BENCHMARK_DIR/pyproject.toml" || ! -d "$BENCHMARK_DIR/src/medvision_bm" ]]; then
    mv_err "BENCHMARK_DIR=$BENCHMARK_DIR is not a medvision_bm checkout (no pyproject.toml / src/medvision_bm)"
    return 2
  fi
  : "${TASK_TAG:=MedVision-Phantom-$family}"
  : "${DATA_DIR:=$BENCHMARK_DIR/Data}"
  : "${RESULTS_DIR:=$BENCHMARK_DIR/Results/$TASK_TAG}"
  if [[ -z "${TASKS_LIST:-}" ]]; then
    local sub
    TASKS_LIST="$BENCHMARK_DIR/tasks_list/tasks_$TASK_TAG.json"
    for sub in OOD experimental; do
      if [[ ! -f "$TASKS_LIST" && -f "$BENCHMARK_DIR/tasks_list/$sub/tasks_$TASK_TAG.json" ]]; then
        TASKS_LIST="$BENCHMARK_DIR/tasks_list/$sub/tasks_$TASK_TAG.json"
      fi
    done
  fi
  : "${STATUS_FILE:=$BENCHMARK_DIR/completed_tasks/completed_tasks_$TASK_TAG.json}"
  : "${ENVS_ROOT:=$BENCHMARK_DIR/.envs}" "${ENV_TOOL:=uv}" "${INSTALL_METHOD:=1}" "${PREPARE_DATA:=1}"
  : "${MODEL_HF_ID:=}" "${MODEL_NAME:=}" "${BATCH_SIZE:=}" "${RESHAPE_IMAGE_HW:=}" "${SAMPLE_LIMIT:=}"
  if [[ -n "$SAMPLE_LIMIT" && "$SAMPLE_LIMIT" != all && ! "$SAMPLE_LIMIT" =~ ^[1-9][0-9]*$ ]]; then
    mv_err "SAMPLE_LIMIT=$SAMPLE_LIMIT is not a positive integer; use a number of samples per task or all"
    return 2
  fi
  : "${MedVision_PLANNER_VERSION:=1.0.0}" "${MedVision_ACK_RELEASE:=1.4.0}"
  case "$INSTALL_METHOD" in
    1) MV_METHOD=frozen ;;
    2) MV_METHOD="entry-point" ;;
    *) mv_err "INSTALL_METHOD=$INSTALL_METHOD is unknown; use 1 (frozen lock, default) or 2 (entry point installs)"; return 2 ;;
  esac
  if [[ ! -f "$TASKS_LIST" ]]; then
    mv_err "tasks list $TASKS_LIST does not exist; set TASKS_LIST or TASK_TAG (tasks_list/, tasks_list/OOD/ and tasks_list/experimental/ have the committed ones)"
    return 2
  fi
  # The environment builder and the evaluation both read these.
  export BENCHMARK_DIR ENVS_ROOT ENV_TOOL
  export MedVision_DATA_DIR="$DATA_DIR" MedVision_PLANNER_VERSION MedVision_ACK_RELEASE
  [[ -z "${TORCH_FIND_LINKS:-}" ]] || export TORCH_FIND_LINKS
  [[ -z "${TORCH_INDEX_URL:-}" ]] || export TORCH_INDEX_URL
}

mv_resolve_model() {  # sets MV_* facts about $MODEL from the registry (unknown model: error)
  local out line key value
  out="$(mv_envs resolve --model "$MODEL")" || return $?
  while IFS= read -r line; do
    key="${line%%=*}"
    value="${line#*=}"
    case "$key" in
      MV_MODEL | MV_BACKEND | MV_ENV_NAME | MV_ENV_GPU | MV_ENV_PREFIX | MV_ENV_PYTHON | MV_BUILD_LOCK | \
        MV_INUSE_LOCK | MV_ENVS_ROOT | MV_CHECKOUT | MV_ENTRY | MV_API_KEY_ENVS | MV_HAS_GPU)
        printf -v "$key" '%s' "$value" ;;
    esac
  done <<<"$out"
  [[ -n "${MV_ENV_PYTHON:-}" ]] || { mv_err "could not resolve model $MODEL"; return 2; }
}

mv_clean_api_keys() {
  local var value
  for var in ${MV_API_KEY_ENVS:-}; do
    if [[ -n "${!var-}" ]]; then
      value="$(mv_strip_trailing_space "${!var}")"
      printf -v "$var" '%s' "$value"
      export "${var?}"
    fi
  done
}

mv_prepare_env() {  # build or reuse the env under the build lock; keep the in-use lock (shared) for the run
  local build_fd rc=0
  mkdir -p "$MV_ENVS_ROOT" || { mv_err "cannot create ENVS_ROOT $MV_ENVS_ROOT"; return 2; }
  exec {build_fd}>>"$MV_BUILD_LOCK" || { mv_err "cannot open lock file $MV_BUILD_LOCK"; return 2; }
  if ! flock -n -x "$build_fd"; then
    mv_note "waiting for the build lock of $MV_ENV_NAME ($MV_BUILD_LOCK)"
    flock -x "$build_fd" || { mv_err "flock on $MV_BUILD_LOCK failed"; return 2; }
  fi
  MEDVISION_ENV_LOCK_HELD="$MV_BUILD_LOCK" mv_envs build --model "$MODEL" --method "$MV_METHOD" || rc=$?
  if [[ $rc -eq 0 && "$MV_METHOD" == frozen ]]; then
    mv_hold_inuse || rc=$?
  fi
  flock -u "$build_fd"
  exec {build_fd}>&-
  return "$rc"
}

mv_hold_inuse() {  # shared in-use lock, kept open (and inherited by the run) until this shell exits
  exec {MV_INUSE_FD}>>"$MV_INUSE_LOCK" || { mv_err "cannot open $MV_INUSE_LOCK"; return 2; }
  if ! flock -n -s "$MV_INUSE_FD"; then
    mv_note "waiting for a rebuild of $MV_ENV_NAME to finish ($MV_INUSE_LOCK)"
    flock -s "$MV_INUSE_FD"
  fi
}

mv_main() {
  local skip_setup=0 setup_only=0 rc=0
  local -a entry args
  mv_has_flag --skip_env_setup "$@" && skip_setup=1
  mv_has_flag --env_setup_only "$@" && setup_only=1
  if [[ $skip_setup -eq 1 && $setup_only -eq 1 ]]; then  # the entry point refuses the pair too: say it before building
    mv_err "--env_setup_only sets the environment up and --skip_env_setup skips that; give one of them"
    return 2
  fi
  mv_require_tools || return $?
  if [[ -z "${MV_BOOT_PY:-}" ]]; then MV_BOOT_PY="$(mv_boot_python)" || return $?; fi
  mv_resolve_model || return $?
  mv_clean_api_keys
  mv_note "model $MV_MODEL ($MV_BACKEND) in $MV_ENV_NAME [$MV_ENV_PREFIX], tasks $TASKS_LIST"
  # A GPU family's environment is several GB of CUDA packages: say so before building it where no GPU is.
  if [[ "${MV_ENV_GPU:-0}" == 1 && "${MV_HAS_GPU:-1}" == 0 && $skip_setup -eq 0 && $setup_only -eq 0 &&
        "${MEDVISION_BUILD_WITHOUT_GPU:-0}" != 1 ]]; then
    mv_err "$MV_MODEL runs on an NVIDIA GPU and this machine has none (no NVIDIA driver or nvidia-smi); its environment $MV_ENV_NAME is several GB of CUDA packages. Run it on a GPU node; to build the environment here anyway (warm-up on a login node) pass --env_setup_only or set MEDVISION_BUILD_WITHOUT_GPU=1"
    return 2
  fi

  if [[ $skip_setup -eq 1 && $setup_only -eq 0 ]]; then
    if [[ ! -x "$MV_ENV_PYTHON" ]]; then
      mv_err "environment $MV_ENV_NAME does not exist at $MV_ENV_PREFIX; run without --skip_env_setup or build it (medvision-bm envs build --model $MV_MODEL)"
      return 2
    fi
    mkdir -p "$MV_ENVS_ROOT" && mv_hold_inuse || return $?
  else
    mv_prepare_env || return $?
  fi

  if [[ $setup_only -eq 1 && "$MV_METHOD" == frozen ]]; then  # built (or checked) above; nothing else to run
    mv_note "environment for $MV_MODEL ($MV_ENV_NAME) is ready"
    return 0
  fi
  read -r -a entry <<<"$MV_ENTRY"
  mv_entry_args
  args=("${MV_ARGS[@]}")
  if [[ "$MV_METHOD" == frozen ]]; then
    mv_has_flag --skip_env_setup "$@" || args+=(--skip_env_setup)  # once, also when the caller passed it
  elif [[ $skip_setup -eq 0 && $setup_only -eq 0 ]]; then
    # Method 2: the entry point installs the frozen requirements first (the data check below needs them).
    mv_note "installing through the entry point: python -m ${entry[*]} --env_setup_only"
    "$MV_ENV_PYTHON" -m "${entry[@]}" "${args[@]}" "$@" --env_setup_only || return $?
  fi

  if [[ "$PREPARE_DATA" == 1 && $setup_only -eq 0 ]]; then
    local phantom=never
    [[ "$TASK_TAG" == MedVision-Phantom-* ]] && phantom=auto
    "$MV_ENV_PYTHON" -m medvision_bm.benchmark.install_medvision_ds --data_dir "$DATA_DIR" --phantom "$phantom" \
      --tasks_list_json_path "$TASKS_LIST" || return $?
  fi

  mv_note "running: python -m ${entry[*]} ${args[*]} $*"
  "$MV_ENV_PYTHON" -m "${entry[@]}" "${args[@]}" "$@" || rc=$?
  return "$rc"
}

mv_entry_args() {  # MV_ARGS: the entry point's flags from the variables (the launcher's own flags follow them)
  MV_ARGS=(--tasks_list_json_path "$TASKS_LIST" --results_dir "$RESULTS_DIR" --data_dir "$DATA_DIR"
           --task_status_json_path "$STATUS_FILE")
  [[ -z "$MODEL_HF_ID" ]] || MV_ARGS+=(--model_hf_id "$MODEL_HF_ID")
  [[ -z "$MODEL_NAME" ]] || MV_ARGS+=(--model_name "$MODEL_NAME")
  [[ -z "$BATCH_SIZE" ]] || MV_ARGS+=(--batch_size_per_gpu "$BATCH_SIZE")
  [[ -z "$RESHAPE_IMAGE_HW" ]] || MV_ARGS+=(--reshape_image_hw "$RESHAPE_IMAGE_HW")
  [[ -z "$SAMPLE_LIMIT" || "$SAMPLE_LIMIT" == all ]] || MV_ARGS+=(--sample_limit "$SAMPLE_LIMIT")
}

mv_dry_run() {  # MV_DRY_RUN=1: the command line a run would start, as one shell-quoted line on stdout
  local -a entry
  MV_BOOT_PY="$(mv_boot_python)" || return $?
  mv_resolve_model || return $?
  read -r -a entry <<<"$MV_ENTRY"
  mv_entry_args
  [[ "$MV_METHOD" != frozen ]] || mv_has_flag --skip_env_setup "$@" || MV_ARGS+=(--skip_env_setup)
  { printf '%q ' "$MV_ENV_PYTHON" -m "${entry[@]}" "${MV_ARGS[@]}" "$@"; printf '\n'; } | mv_redact_tee - "$@"
}

mv_redact_tee() {  # mv_redact_tee LOG|- "$@": stdin to stdout (and LOG) with keys and URL credentials as ***
  if [[ -z "${MV_BOOT_PY:-}" ]]; then  # no Python: nothing runs but the launcher's own error lines, which hold no secret
    if [[ "$1" == - ]]; then cat; else tee -a "$1"; fi
    return
  fi
  PYTHONPATH="$BENCHMARK_DIR/src" PYTHONNOUSERSITE=1 "$MV_BOOT_PY" -m medvision_bm.envs.redact_tee "$1" -- "${@:2}"
}

mv_log_name() {  # the log's name part from MODEL_NAME: [A-Za-z0-9._-] kept, others as _, no leading dot, <= 100
  local name="${1//[^A-Za-z0-9._-]/_}"
  while [[ "$name" == .* ]]; do name="_${name#.}"; done
  printf '%s' "${name:0:100}"
}

mv_help() {  # the launcher's usage, then the entry point's flags (from this checkout's source, stdlib only)
  local family="$1" root
  root="${BENCHMARK_DIR:-$(cd "$MV_LIB_DIR/../.." && pwd)}"
  printf 'usage: bash %s [runner flags...]\n\n' "${0:-launcher}"
  printf 'Runs registry model %s on the %s tasks: builds or reuses its environment under ENVS_ROOT, checks\n' \
    "$MODEL" "$family"
  printf 'the data, then the entry point with the flags below (yours last, so they win). Variables (DATA_DIR,\n'
  printf 'TASK_TAG, RESULTS_DIR, MODEL_HF_ID, BATCH_SIZE, ENVS_ROOT, ...) and exit codes: the header of\n'
  printf '%s/script/lib/launcher.sh.\n\n' "$root"
  MV_BOOT_PY="$(mv_boot_python)" || return $?
  PYTHONPATH="$root/src" PYTHONNOUSERSITE=1 "$MV_BOOT_PY" -m medvision_bm.cli run --model "$MODEL" --help
}

# mv_launch FAMILY "$@": the whole launcher, logged to $RESULTS_DIR/logs/ and exiting with the entry point's code.
mv_launch() {
  local family="$1" log rc
  shift
  MV_PROG="$(basename "${0:-launcher}")"
  if [[ -z "${MODEL:-}" ]]; then
    mv_err "the launcher sets no MODEL; set MODEL=<registry name> before sourcing script/lib/launcher.sh"
    exit 2
  fi
  if mv_has_flag --help "$@" || mv_has_flag -h "$@"; then  # help builds, checks and writes nothing
    mv_help "$family"
    exit $?
  fi
  mv_configure "$family" || exit $?
  if [[ "${MV_DRY_RUN:-0}" == 1 ]]; then
    mv_dry_run "$@"
    exit $?
  fi
  MV_BOOT_PY="$(mv_boot_python 2>/dev/null)" || MV_BOOT_PY=""  # mv_main says why there is none, in the log
  mkdir -p "$RESULTS_DIR/logs" || { mv_err "cannot create $RESULTS_DIR/logs; check RESULTS_DIR"; exit 2; }
  # MODEL_NAME may be a served name with a vendor (Qwen/...) or one Python refuses (../x): the log's file name
  # never leaves logs/, so the refusal is logged too
  log="$RESULTS_DIR/logs/$(mv_log_name "${MODEL_NAME:-$MODEL}")_${family}_$(date +%Y%m%d-%H%M%S)_$$.log"
  : >>"$log" || { mv_err "cannot write the log $log; check RESULTS_DIR"; exit 2; }
  mv_note "log: $log"
  mv_main "$@" 2>&1 | mv_redact_tee "$log" "$@"
  rc="${PIPESTATUS[0]}"
  exit "$rc"
}
