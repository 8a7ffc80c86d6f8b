#!/usr/bin/env bash
# Set up the development environment if needed, then run the whole test suite (what CI runs).
# The system tools some tests use (Debian packages): chromium (the HTML report in a browser), SLURM with munge,
# slurmdbd and MariaDB (the real-SLURM cluster tests), shellcheck (the launcher lint), git. Missing ones are
# installed with apt-get when this runs as root (or with password-less sudo) on a Debian-like system, else the
# tests that need them are skipped with a note; MEDVISION_SYSTEM_DEPS=0 never installs anything.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

system_deps() {
  local -a need=() sudo=()
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
  command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
  command -v git >/dev/null 2>&1 || need+=(git)
  [ "${#need[@]}" -gt 0 ] || return 0
  if [ "${MEDVISION_SYSTEM_DEPS:-1}" = 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "run_tests.sh: note: ${need[*]} not installed (no apt-get, or MEDVISION_SYSTEM_DEPS=0): the tests that" \
      "need them are skipped" >&2
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo -n)
    else
      echo "run_tests.sh: note: ${need[*]} not installed and this user cannot apt-get install them; the tests" \
        "that need them are skipped (as root: apt-get install -y --no-install-recommends ${need[*]})" >&2
      return 0
    fi
  fi
  echo "run_tests.sh: installing system packages the tests use: ${need[*]}" >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

system_deps
py="$(bash "$repo/script/dev_env.sh")"
# CPU torch for the environments the tests build: a local wheel folder where the machine has one (the suite
# itself defaults to PyTorch's CPU index; TORCH_FIND_LINKS / TORCH_INDEX_URL set by the caller win)
if [ -z "${TORCH_FIND_LINKS:-}${TORCH_INDEX_URL:-}" ] && ls /opt/wheels/torch-*+cpu-*.whl >/dev/null 2>&1; then
  export TORCH_FIND_LINKS=/opt/wheels
fi
cd "$repo"
# the vLLM contract tests run the real vllm (as the vLLM locks pin it) on CPU, in an environment of their own that is
# built once per lock state and reused (about 2.7 GB, about 133 s from an empty package cache):
# medvision_bm.envs.vllm_contract
if [ "${MEDVISION_VLLM_CONTRACT:-1}" != 0 ]; then
  MEDVISION_VLLM_CONTRACT_PYTHON="$("$py" -m medvision_bm.envs.vllm_contract)"
  export MEDVISION_VLLM_CONTRACT_PYTHON
fi
# compiled bytecode is reused between the many processes the tests start (lmms-eval alone takes ~8 s to compile)
unset PYTHONDONTWRITEBYTECODE
"$py" -m ruff check --no-cache src tests benchmarks  # no cache: an import sorted by where other files live
# the package's layers (docs/architecture.md; contracts in pyproject.toml [tool.importlinter])
"$(dirname "$py")/lint-imports" --no-cache pyproject.toml
# the package's types (pyproject.toml [tool.mypy]; its cache, .mypy_cache/, makes a rerun take seconds)
"$py" -m mypy --config-file pyproject.toml
# one temp folder per run (runs may overlap), removed when the tests pass; a failed run keeps its folder for a look
# (marked .failed) until the next run of this script removes it
tmp="${TMPDIR:-/tmp}"
for old in "$tmp"/medvision-tests.*; do
  if [ -e "$old/.failed" ]; then rm -rf "$old"; fi
done
basetemp="$(mktemp -d "$tmp/medvision-tests.XXXXXX")"
chmod 0755 "$basetemp"  # the local SLURM cluster's daemons run as the munge and mysql users
mkdir -m 1777 "$basetemp/tmp"  # (sticky, writable by all, as /tmp) and whatever the tests and the programs they start put in the temp folder
# the cluster tests' one-node SLURM keeps its state (about 130 MB, mostly MariaDB's) in this run's folder too, unless
# one is already up from the default folder (tests/cluster/slurm-local.sh up), which they then reuse and leave
if [ -z "${SLURM_LOCAL_DIR:-}" ] && ! bash tests/cluster/slurm-local.sh env >/dev/null 2>&1; then
  export SLURM_LOCAL_DIR="$basetemp/slurm"
fi
rc=0
TMPDIR="$basetemp/tmp" "$py" -m pytest -q -p no:cacheprovider --basetemp "$basetemp/t" "$@" || rc=$?
if [ -n "${SLURM_LOCAL_DIR:-}" ] && [ "$SLURM_LOCAL_DIR" = "$basetemp/slurm" ]; then
  bash tests/cluster/slurm-local.sh down >/dev/null 2>&1 || true  # stopped by its fixture already; never left up
fi
if [ "$rc" = 0 ]; then
  rm -rf "$basetemp"
else
  touch "$basetemp/.failed"
  echo "run_tests.sh: tests failed (exit $rc); their files are in $basetemp (removed by the next run)" >&2
fi
exit "$rc"
