#!/usr/bin/env bash
# The main job on the bundled default data: set up the CPU environment, generate the phantom dataset if absent,
# evaluate the baselines (oracle, mean, random-box) and a tiny random-weight VLM (a plumbing check) on all three
# task families, summarize, and print where the results are. Rerunning reuses everything already computed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
py="$(bash script/dev_env.sh)"
bin="$(dirname "$py")"
data="${DATA_DIR:-$repo/Data}"
results="${RESULTS_ROOT:-$repo/Results}"
tiny="${TINY_MODEL_DIR:-$repo/.cache/tiny-llava}"
vlm_limit="${TINY_SAMPLE_LIMIT:-4}"
unset MedVision_DATA_DIR PYTHONDONTWRITEBYTECODE
# the annotation pin and acknowledgement upstream's launchers export (the paper's annotations)
export MedVision_PLANNER_VERSION="${MedVision_PLANNER_VERSION:-1.0.0}" MedVision_ACK_RELEASE="${MedVision_ACK_RELEASE:-1.4.0}"

if [ ! -d "$data/Datasets" ]; then
  "$bin/medvision-bm" data make-phantom --data_dir "$data"
fi
if [ ! -f "$tiny/config.json" ]; then
  "$bin/medvision-bm" models make-tiny --arch llava --out "$tiny"
fi
status=0
for family in detect TL AD; do
  tag="MedVision-Phantom-$family"
  common=(--data_dir "$data" --tasks_list_json_path "tasks_list/tasks_$tag.json" --results_dir "$results/$tag"
          --task_status_json_path "completed_tasks/completed_tasks_$tag.json" --skip_env_setup)
  for model in oracle mean random-box; do
    echo "== $family: $model" >&2
    "$bin/medvision-bm" run --model "$model" "${common[@]}" || status=$?
  done
  echo "== $family: tiny random-weight LLaVA (plumbing check, first $vlm_limit samples per task)" >&2
  "$bin/medvision-bm" run --model hf --model_hf_id "$tiny" --model_name tiny-llava-random --device cpu \
    --sample_limit "$vlm_limit" --max_new_tokens 24 "${common[@]}" || status=$?
done
"$bin/medvision-bm" summarize --results_dir "$results" --output_dir "$results/report" --data_dir "$data" || status=$?
echo "results: $results"
exit "$status"
