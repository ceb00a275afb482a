#!/bin/bash
# The GPU learning benchmark (bench/README.md, "learning.py"): fp32 and bf16 runs of a larger tiny model,
# plus negative controls, as parallel processes on one GPU. Writes OUT_DIR/learning_gpu.json (all runs).
# Usage: bash bench/learning_gpu.sh OUT_DIR [STEPS]
set -u
out=${1:?usage: bench/learning_gpu.sh OUT_DIR [STEPS]}; steps=${2:-40}
here=$(cd "$(dirname "$0")" && pwd); mkdir -p "$out/runs"
big="--device cuda --hidden-size 256 --layers 4 --prompts 8 --samples 8 --max-new-tokens 16 --steps $steps"
run() { name=$1; shift; timeout "${LIMIT:-480}" python3 "$here/learning.py" $big --name "$name" \
        --json "$out/runs/$name.json" "$@" > "$out/runs/$name.log" 2>&1 & }
run share-fp32          --dtype float32  --init-scale 0.1 --lr 1e-2
run share-bf16          --dtype bfloat16 --init-scale 0.1 --lr 1e-2
run share-fp32-slime    --dtype float32  --init-scale 0.02 --lr 3e-3
run share-bf16-slime    --dtype bfloat16 --init-scale 0.02 --lr 3e-3
run first_token-fp32    --dtype float32  --init-scale 0.1 --lr 1e-2 --task first_token --max-new-tokens 4
run first_token-fp32-shift_mask --dtype float32 --init-scale 0.1 --lr 1e-2 --task first_token --max-new-tokens 4 --fault shift_mask
run share-fp32-negate_advantages --dtype float32 --init-scale 0.1 --lr 1e-2 --fault negate_advantages
run share-fp32-permute_within_groups --dtype float32 --init-scale 0.1 --lr 1e-2 --fault permute_within_groups
wait
python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1]); runs = []
for f in sorted((out / "runs").glob("*.json")):
    r = json.loads(f.read_text())
    log = f.with_suffix(".log").read_text()[-3000:]
    runs.append({**r, "log_tail": log})
(out / "learning_gpu.json").write_text(json.dumps({"bench": "learning_gpu", "runs": runs}, indent=1) + "\n")
for r in runs:
    print(r["name"], "PARTIAL" if r.get("partial") else r["summary"])
PY
