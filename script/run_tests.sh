#!/usr/bin/env bash
# Set up the development environment if needed, then run the whole test suite (what CI runs).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$(bash "$repo/script/dev_env.sh")"
cd "$repo"
# compiled bytecode is reused between the many processes the tests start (lmms-eval alone takes ~8 s to compile)
unset PYTHONDONTWRITEBYTECODE
"$py" -m ruff check src tests benchmarks
basetemp="$(mktemp -d "${TMPDIR:-/tmp}/medvision-tests.XXXXXX")"
exec "$py" -m pytest -q -p no:cacheprovider --basetemp "$basetemp/t" "$@"
