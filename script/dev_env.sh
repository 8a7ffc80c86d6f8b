#!/usr/bin/env bash
# Create (or reuse) the development environment .venv: the package (editable) with every extra, CPU torch,
# no torchvision (it breaks lmms-eval beside CPU torch). Idempotent; prints the interpreter path at the end.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MEDVISION_DEV_VENV:-$repo/.venv}"
if ! command -v uv >/dev/null 2>&1; then
  python3 -m pip install --quiet uv || { echo "dev_env.sh: cannot install uv with pip; install uv and retry" >&2; exit 2; }
fi
torch_src=()
if [ -n "${TORCH_FIND_LINKS:-}" ]; then torch_src=(--find-links "$TORCH_FIND_LINKS")
elif [ -d /opt/wheels ] && ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then torch_src=(--find-links /opt/wheels)
else torch_src=(--index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}" --extra-index-url https://pypi.org/simple --index-strategy unsafe-best-match)
fi
stamp="$venv/.medvision-dev-stamp"
want="$(cat "$repo/pyproject.toml" "$repo/script/dev_env.sh" | sha256sum | cut -c1-16)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"; exit 0
fi
echo "dev_env.sh: setting up $venv (CPU torch, lmms-eval, transformers and every extra: about 1.5 GB the first" \
  "time, a few minutes; uv reports each step)" >&2
[ -x "$venv/bin/python" ] || uv venv --python 3.11 "$venv" >&2
excludes="$(mktemp)"; trap 'rm -f "$excludes"' EXIT
echo torchvision > "$excludes"
start=$SECONDS
VIRTUAL_ENV="$venv" uv pip install --compile-bytecode "${torch_src[@]}" --excludes "$excludes" \
  "torch==2.13.0" -e "${repo}[eval,api,report,dev]" >&2
echo "dev_env.sh: $venv ready in $((SECONDS - start)) s" >&2
echo "$want" > "$stamp"
echo "$venv/bin/python"
