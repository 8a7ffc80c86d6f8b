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
cd "$repo"
# the vLLM contract tests run the real vllm (as the vLLM locks pin it) on CPU, in an environment of their own that is
# built once per lock state and reused (about 2.3 GB, about 35 s from scratch): medvision_bm.envs.vllm_contract
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
basetemp="$(mktemp -d "${TMPDIR:-/tmp}/medvision-tests.XXXXXX")"
exec "$py" -m pytest -q -p no:cacheprovider --basetemp "$basetemp/t" "$@"
